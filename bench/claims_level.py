"""How often the claims' test says "holds" when the effect is zero (its level, nominally 2.5%)
and when it is not (its power), on simulated settings, by the procedure fedkd.report.claims runs
now (new) and by the one before it (old), side by side on the same simulated data.

    python bench/claims_level.py [--reps 2000] [--seed 0]

A setting is a method × seed layout as the workflow builds one: 8 methods, 3 or 5 seeds, every
value 70 + a seed effect (sd 3, shared by the seed's runs) + the method's effect + the run's own
noise, rounded to 0.1 (the accuracy of 1,000 test examples, in points). The claim is "treatment
(method 0) > baseline (method 1)", superiority at margin 0. Noise layouts:

    equal       every run's noise sd 1
    noisy       the treatment's sd 3, the others' 1
    bystanders  the six other methods' sd 3, the pair's 1
    skewed      the treatment's noise left-skewed, 3·(1 − Exp(1)): sd 3, usually a little
                ahead, sometimes far behind (the shape collapsed runs give); the others' sd 1

Level: the share of settings that hold at a zero effect; power: at an effect of 2 (twice the run
noise). new: fedkd.report.claims.verdict as the claims page decides one setting (the paired
t-test on the pair's differences, the spread floored at the 0.1 step). old: the procedure it
replaced, written out here: shown where both the setting's two-way residual variance (every
method, (m − 1)(n − 1) df, needing 4) and the pair's paired t-test show it. paired: the paired
t-test alone, unfloored (what the new procedure must not lose power against).

Averages ("on average" claims): 9 settings of the equal layout whose runs share a seed component
across settings (correlation rho of a method's noise at one seed between settings: 0, 0.6, 0.9,
as settings that derive partition, initial model and client sampling from the seed do); level at
a zero effect, power at an effect of 1. new: fedkd's average (the paired t-test on the per-seed
means of the settings' differences). old: the mean of the settings' contrasts with the variance
summed as if independent (Welch–Satterthwaite df), for the setting's variance and the pair's
own, both needed.

Printed: a table, then the figures as JSON for bench/results.jsonl, then the command. With
--reps 2000 it runs in a few minutes on one core (each figure's binomial sd is under 0.4 points
at a level of 2.5%, about 1.1 points at a power of 50%).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from scipy import stats

from fedkd.report.claims.claim import Claim
from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.evaluate import _average
from fedkd.report.claims.verdict import ALPHA, Hypothesis, contrast, verdicts

METHODS = 8
SEEDS = (3, 5)
STEP = 0.1  # the measurement's resolution: one test example of 1,000, in points
NOISE = ("equal", "noisy", "bystanders", "skewed")
EFFECT = 2.0
SETTINGS = 9  # an average over table 3's 3 datasets × 3 α
RHOS = (0.0, 0.6, 0.9)
AVERAGE_EFFECT = 1.0
OLD_MIN_DF = 4
MEAN_CLAIM = Claim(id="x-beats-y", paper="fedgkd", source="Table 3", quote="q", treatment="x",
                   baseline="y", tables=("table3",), aggregate="mean")  # fmt: skip


def noise(rng, layout: str, seeds: int, shared=None, rho: float = 0.0) -> np.ndarray:
    """methods × seeds run noise of one setting (``shared``: the seed component it shares with
    the other settings, weight √rho)."""
    sd = np.ones(METHODS)
    if layout == "noisy":
        sd[0] = 3.0
    elif layout == "bystanders":
        sd[2:] = 3.0
    own = rng.normal(0.0, 1.0, (METHODS, seeds))
    if shared is not None:
        own = math.sqrt(rho) * shared + math.sqrt(1 - rho) * own
    out = own * sd[:, None]
    if layout == "skewed":
        out[0] = 3.0 * (1.0 - rng.exponential(1.0, seeds))
    return out


def setting(rng, layout: str, seeds: int, effect: float, shared=None, rho=0.0) -> np.ndarray:
    values = 70.0 + rng.normal(0.0, 3.0, seeds)[None, :] + noise(rng, layout, seeds, shared, rho)
    values[0] += effect
    return np.round(values / STEP) * STEP


def residual(values: np.ndarray) -> tuple[float, int]:
    """The two-way (method + seed) residual mean square and its degrees of freedom."""
    m, n = values.shape
    r = values - values.mean(1, keepdims=True) - values.mean(0, keepdims=True) + values.mean()
    df = (m - 1) * (n - 1)
    return float((r**2).sum() / df), df


def old_parts(values: np.ndarray) -> tuple[float, float, int, float, int]:
    """(effect, the setting's se and df, the pair's own se and df) as the old procedure had them."""
    d = values[0] - values[1]
    n = d.size
    var, df = residual(values)
    return float(d.mean()), math.sqrt(2 * var / n), df, float(d.std(ddof=1) / math.sqrt(n)), n - 1


def shows(effect: float, tests) -> bool:
    """Every (se, df) test shows effect > 0 at one-sided ALPHA (se 0: the t-test's limit)."""
    for se, df in tests:
        if se == 0:
            if effect <= 0:
                return False
        elif stats.t.sf(effect / se, df) > ALPHA:
            return False
    return True


def old_holds(values: np.ndarray) -> bool:
    effect, se, df, own_se, own_df = old_parts(values)
    return df >= OLD_MIN_DF and shows(effect, [(se, df), (own_se, own_df)])


def welch(parts) -> tuple[float, int]:
    var = sum(se**2 for se, _ in parts) / len(parts) ** 2
    denom = sum((se**2 / len(parts) ** 2) ** 2 / df for se, df in parts)
    return math.sqrt(var), max(1, math.floor(var * var / denom + 1e-9)) if denom else 1


def per_setting(rng, layout: str, seeds: int, effect: float, reps: int) -> dict:
    hyp = Hypothesis()
    new = old = paired = 0
    for _ in range(reps):
        values = setting(rng, layout, seeds, effect)
        d = (values[0] - values[1]).tolist()
        new += verdicts([contrast(d, step=STEP)], hyp)[0].verdict == "holds"
        old += old_holds(values)
        dd = np.asarray(d)
        paired += shows(float(dd.mean()), [(float(dd.std(ddof=1) / math.sqrt(seeds)), seeds - 1)])
    return {"new": new / reps, "old": old / reps, "paired": paired / reps}


def average(rng, seeds: int, rho: float, effect: float, reps: int) -> dict:
    new = old = 0
    for _ in range(reps):
        shared = rng.normal(0.0, 1.0, (METHODS, seeds))
        layouts = [setting(rng, "equal", seeds, effect, shared, rho) for _ in range(SETTINGS)]
        rows = [Comparison("t", {"i": i}, f"s{i}", dict(enumerate((v[0] - v[1]).tolist())), 0,
                           [], ("k", i), step=STEP) for i, v in enumerate(layouts)]  # fmt: skip
        new += _average(MEAN_CLAIM, rows).verdict.verdict == "holds"
        parts = [old_parts(v) for v in layouts]
        mean = sum(p[0] for p in parts) / SETTINGS
        pooled = welch([(p[1], p[2]) for p in parts])
        own = welch([(p[3], p[4]) for p in parts])
        old += all(p[2] >= OLD_MIN_DF for p in parts) and shows(mean, [pooled, own])
    return {"new": new / reps, "old": old / reps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="simulated claims per figure [2000]")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    figures = {}
    print(f"{'layout':>10} {'seeds':>5}  {'level new':>9} {'old':>6} {'paired':>6}  "
          f"{'power new':>9} {'old':>6} {'paired':>6}")  # fmt: skip
    for layout in NOISE:
        for seeds in SEEDS:
            level = per_setting(rng, layout, seeds, 0.0, args.reps)
            power = per_setting(rng, layout, seeds, EFFECT, args.reps)
            print(f"{layout:>10} {seeds:>5}  {level['new']:>9.1%} {level['old']:>6.1%} "
                  f"{level['paired']:>6.1%}  {power['new']:>9.1%} {power['old']:>6.1%} "
                  f"{power['paired']:>6.1%}")  # fmt: skip
            for kind, got in (("level", level), ("power", power)):
                for proc, share in got.items():
                    figures[f"{layout}_n{seeds}_{kind}_{proc}_percent"] = round(100 * share, 1)
    print(f"\n{'average':>10} {'seeds':>5} {'rho':>4}  {'level new':>9} {'old':>6}  "
          f"{'power new':>9} {'old':>6}")  # fmt: skip
    for seeds in SEEDS:
        for rho in RHOS:
            level = average(rng, seeds, rho, 0.0, args.reps)
            power = average(rng, seeds, rho, AVERAGE_EFFECT, args.reps)
            print(f"{'':>10} {seeds:>5} {rho:>4g}  {level['new']:>9.1%} {level['old']:>6.1%}  "
                  f"{power['new']:>9.1%} {power['old']:>6.1%}")  # fmt: skip
            for kind, got in (("level", level), ("power", power)):
                for proc, share in got.items():
                    key = f"average_rho{rho:g}_n{seeds}_{kind}_{proc}_percent"
                    figures[key] = round(100 * share, 1)
    seconds = time.perf_counter() - start
    print("level: holds at a zero effect (nominal 2.5%); power: holds at an effect of 2 (a")
    print("setting) or 1 (an average of 9); new: the claims' procedure; old: the one before;")
    print("paired: the paired t-test alone, without the step's floor")
    print(f"claims-level {json.dumps(figures)}")
    print(f"{seconds:.0f} s; python bench/claims_level.py --reps {args.reps} --seed {args.seed}")


if __name__ == "__main__":
    main()
