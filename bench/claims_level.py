"""How often the claims' test says "holds" when the effect is zero (its level, nominally 2.5%),
and when it is not (its power), on simulated settings: the equal-variance assumption kept, and
broken by one of the two compared methods; beside it, the test against the setting's variance
alone (without the pair's own paired t-test), to show what the second test buys and costs.

    python bench/claims_level.py [--reps 4000] [--seed 0]

Each simulated setting is a method × seed layout as the workflow builds one: ``methods``
methods, ``seeds`` seeds, every value 70 + a seed effect (sd 3, shared by the seed's runs) +
the method's effect + the run's own noise (sd 1; sd ``noisy`` for the treatment). The claim is
"treatment > baseline" (superiority, margin 0), decided exactly as fedkd.report.claims.verdict
decides one setting: shown where both the setting's two-way residual variance and the pair's own
differences show it, Student's t at 2.5%. Printed per layout: the share of settings that hold
with a zero effect and with an effect of 2 (twice the run noise), by the procedure and by the
setting's variance alone, and the share in which the equal-variance check names the noisy
method. Figures for bench/results.jsonl: the id, the figures as JSON, then the command.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np

from fedkd.report.claims.verdict import (
    Hypothesis,
    contrast,
    two_way_residual,
    verdicts,
)

LAYOUTS = [(3, 3), (8, 3), (8, 5)]  # (methods, seeds): a small table, table 3, more seeds
NOISE = [1.0, 3.0]  # the treatment's run-to-run sd, the others' being 1
EFFECT = 2.0


def holds_rate(rng, methods: int, seeds: int, noisy: float, effect: float, reps: int):
    """(share that holds, the same by the setting's variance alone, share where the check names
    the treatment) over ``reps`` settings."""
    hyp = Hypothesis()
    held = held_alone = named = 0
    for _ in range(reps):
        seed_effect = rng.normal(0.0, 3.0, seeds)
        values = {}
        for i in range(methods):  # method 0 the treatment, 1 the baseline, the rest bystanders
            sd, shift = (noisy, effect) if i == 0 else (1.0, 0.0)
            runs = 70.0 + shift + seed_effect + rng.normal(0.0, sd, seeds)
            values[f"m{i}"] = dict(enumerate(runs.tolist()))
        residual = two_way_residual(values, list(range(seeds)))
        diffs = [values["m0"][s] - values["m1"][s] for s in range(seeds)]
        est = contrast(diffs, residual)
        held += verdicts([est], hyp)[0].verdict == "holds"
        held_alone += verdicts([replace(est, own_se=None)], hyp)[0].verdict == "holds"
        named += residual.unequal and residual.largest == "m0"
    return held / reps, held_alone / reps, named / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=4000, help="settings per figure [4000]")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"{'methods':>7} {'seeds':>5} {'noise':>5}  {'level':>6} {'alone':>6}  "
        f"{'power':>6} {'alone':>6}  {'named':>6}"
    )
    figures = {}
    for methods, seeds in LAYOUTS:
        for noisy in NOISE:
            level, level_alone, named = holds_rate(rng, methods, seeds, noisy, 0.0, args.reps)
            power, power_alone, _ = holds_rate(rng, methods, seeds, noisy, EFFECT, args.reps)
            print(
                f"{methods:>7} {seeds:>5} {noisy:>5g}  {level:>6.1%} {level_alone:>6.1%}  "
                f"{power:>6.1%} {power_alone:>6.1%}  {named:>6.1%}"
            )
            key = f"m{methods}_n{seeds}_sd{noisy:g}"
            figures[f"{key}_level_percent"] = round(100 * level, 1)
            figures[f"{key}_level_alone_percent"] = round(100 * level_alone, 1)
            figures[f"{key}_power_percent"] = round(100 * power, 1)
            figures[f"{key}_power_alone_percent"] = round(100 * power_alone, 1)
            figures[f"{key}_named_percent"] = round(100 * named, 1)
    print("level: holds at a zero effect (nominal 2.5%); power: holds at an effect of 2;")
    print("alone: by the setting's variance alone, without the pair's own test;")
    print("named: the check names the noisy treatment (more than half the residual)")
    print(f"claims-level {json.dumps(figures)}")
    print(f"python bench/claims_level.py --reps {args.reps} --seed {args.seed}")


if __name__ == "__main__":
    main()
