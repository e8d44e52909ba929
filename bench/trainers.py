"""The two local-training trainers compared in distribution: sequential against batched.

The batched trainer (``engine: batched``) computes what the sequential one does up to the order
of floating-point sums; federated training amplifies such differences over the rounds, so the same
seed does not end at the same accuracy through both. This benchmark (not a test: the default 80
runs took 11 to 39 minutes on one CPU core of a shared machine) trains several seeds of each
(strategy, alpha) through both trainers on the default configuration's run shape
(config/config.yaml: mnist5k, its CNN, 10 clients, C = 0.2, 2 local epochs, its rounds) and prints, per (strategy, alpha), the paired difference
batched - sequential of the best and of the final test accuracy, in points, with its 95 %
t-interval. An interval that holds 0 says the trainers are not told apart at that many seeds.

The sequential trainer runs as the config's runs do on a CPU (memory_format auto: channels_last),
the batched one contiguous. ``--control`` adds the sequential trainer with contiguous tensors: a
change of summation order alone, within one trainer, whose paired differences show how far float
order alone moves a seed's accuracy (and batched - that arm compares the trainers on one layout).

    python bench/trainers.py                      # 10 seeds, fedavg and fedgkd-M5, alpha 1, 0.1
    python bench/trainers.py --seeds 3 --rounds 4 # a quick look
    python bench/trainers.py --variants fedavg --alphas 1 --control

Each finished run is appended to ``--results`` (CSV), and a run found there is not trained
again, so an interrupted benchmark continues where it stopped.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
# table 3's FedGKD at alpha 1 and 0.1 is the M = 5 variant
DEFAULT_VARIANTS = ("fedavg", "fedgkd-M5")
# the runs compared: spec keys over the config's
ARMS = {
    "sequential": {"engine": "sequential"},
    "batched": {"engine": "batched"},
    "sequential-contiguous": {"engine": "sequential", "memory_format": "contiguous"},
}
# (arm, baseline) pairs reported; the last two with --control
PAIRS = (
    ("batched", "sequential"),
    ("sequential-contiguous", "sequential"),
    ("batched", "sequential-contiguous"),
)
FIELDS = ("variant", "alpha", "rounds", "seed", "arm", "best_acc", "final_acc", "seconds")


def base_spec(config: Path, variant: str, alpha: float, rounds: int | None) -> dict:
    """The variant's run on mnist5k as the config's workflow would train it (on the CPU)."""
    from fedkd.pipeline.plan import Plan

    plan = Plan(yaml.safe_load(config.read_text()))
    spec = plan.base_spec("mnist5k", variant)
    spec.update(alpha=alpha, device="cpu")
    if rounds is not None:
        spec["rounds"] = rounds
    return spec


def train_once(spec: dict) -> dict:
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run

    with tempfile.TemporaryDirectory(prefix="fedkd-trainers-") as out:
        start = time.perf_counter()
        record = Run(RunSpec(**spec), out, log=lambda msg: None).run()
        seconds = time.perf_counter() - start
    used = record["engine"]["used"]
    if used != spec["engine"]:
        raise RuntimeError(
            f"asked for engine {spec['engine']!r} but the run used {used!r} "
            f"({record['engine']['reason']}); the comparison needs both trainers"
        )
    summary = record["summary"]
    return {"best_acc": summary["best_acc"], "final_acc": summary["final_acc"], "seconds": seconds}


def read_results(path: Path) -> dict[tuple, dict]:
    if not path.exists():
        return {}
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return {
        (r["variant"], float(r["alpha"]), int(r["rounds"]), int(r["seed"]), r["arm"]): r
        for r in rows
    }


def t_interval(diffs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of paired differences and its two-sided t-interval."""
    from scipy import stats

    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return mean, math.nan, math.nan
    interval = stats.ttest_1samp(diffs, 0.0).confidence_interval(level)
    return mean, float(interval.low), float(interval.high)


def report(results: dict[tuple, dict], variants, alphas, rounds: dict, seeds, pairs) -> str:
    lines = [
        "paired difference arm - baseline, in accuracy points, mean [95% t-interval]; |max|: the "
        "largest single-seed difference; mean best accuracy of baseline and arm",
        f"{'arm - baseline':<44} {'variant':<10} {'alpha':>5} {'n':>3}  {'best':<28} "
        f"{'final':<28} {'base':>6} {'arm':>6}",
    ]
    for arm, base in pairs:
        for variant in variants:
            for alpha in alphas:
                keys = [(variant, alpha, rounds[variant, alpha], s) for s in seeds]
                runs = [
                    (results[(*key, base)], results[(*key, arm)])
                    for key in keys
                    if (*key, base) in results and (*key, arm) in results
                ]
                if not runs:
                    continue
                cells = []
                for key in ("best_acc", "final_acc"):
                    diffs = [100 * (float(b[key]) - float(a[key])) for a, b in runs]
                    mean, low, high = t_interval(diffs)
                    worst = max(abs(d) for d in diffs)
                    cells.append(f"{mean:+5.2f} [{low:+5.2f}, {high:+5.2f}] |max| {worst:4.1f}")
                base_best = 100 * sum(float(a["best_acc"]) for a, _ in runs) / len(runs)
                arm_best = 100 * sum(float(b["best_acc"]) for _, b in runs) / len(runs)
                lines.append(
                    f"{arm + ' - ' + base:<44} {variant:<10} {alpha:>5g} {len(runs):>3}  "
                    f"{cells[0]:<28} {cells[1]:<28} {base_best:6.2f} {arm_best:6.2f}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 (default 10)")
    p.add_argument("--alphas", type=float, nargs="+", default=[1.0, 0.1])
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS),
                   help="variants of the config (default: fedavg fedgkd-M5)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=None, help="default: the config's")
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--control", action="store_true",
                   help="also train the sequential trainer on contiguous tensors (float order "
                        "alone) and report its pairs")  # fmt: skip
    p.add_argument("--results", type=Path, default=Path("results/bench/trainers.csv"),
                   help="CSV of finished runs, appended to and read back")  # fmt: skip
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = list(range(args.seeds))
    arms = list(ARMS) if args.control else ["sequential", "batched"]
    pairs = PAIRS if args.control else PAIRS[:1]
    results = read_results(args.results)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.results.exists()
    rounds = {}
    with args.results.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        for variant in args.variants:
            for alpha in args.alphas:
                spec = base_spec(args.config, variant, alpha, args.rounds)
                rounds[variant, alpha] = spec["rounds"]
                for seed in seeds:
                    for arm in arms:
                        key = (variant, alpha, spec["rounds"], seed, arm)
                        if key in results:
                            continue
                        row = {"variant": variant, "alpha": alpha, "rounds": spec["rounds"],
                               "seed": seed, "arm": arm,
                               **train_once(dict(spec, seed=seed, **ARMS[arm]))}  # fmt: skip
                        writer.writerow(row)
                        f.flush()
                        results[key] = row
                        print(
                            f"{variant} alpha {alpha:g} seed {seed} {arm}: best "
                            f"{row['best_acc']:.4f} final {row['final_acc']:.4f} "
                            f"({row['seconds']:.0f} s)",
                            file=sys.stderr, flush=True,
                        )  # fmt: skip
    print(report(results, args.variants, args.alphas, rounds, seeds, pairs))


if __name__ == "__main__":
    main()
