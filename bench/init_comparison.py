"""The ResNet classifier's initialisation, PyTorch's nn.Linear default against N(0, 0.01): does
the choice (``classifier_init``, fedkd.run_choices) move a table?

Trains FedAvg with ResNet-8 (GroupNorm) on the default configuration's CIFAR-10 stand-in
(config/config.yaml: mnist5k, 10 clients, C = 0.2, 2 local epochs, 10 rounds, its optimiser
settings) for each seed under both initialisations, the rest of the spec equal (the other run
choices at their defaults), and prints each run's best test accuracy and, paired by seed, the
mean difference normal - pytorch in accuracy points with its 95 % t-interval. An interval that
holds 0 says the two are not told apart at that many seeds. Not a test: 10 runs take minutes.

    nice python bench/init_comparison.py                 # seeds 0-4, alpha 1
    nice python bench/init_comparison.py --seeds 10 --alpha 0.1
    nice python bench/init_comparison.py --jsonl bench/results.jsonl   # also append a row

then `python bench/results_table.py --out docs/results.md`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from trainers import t_interval  # bench/trainers.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
INITS = ("pytorch", "normal")


def base_spec(config: Path, alpha: float, rounds: int | None) -> dict:
    """FedAvg on mnist5k as the config trains it, on ResNet-8 (its CNN's options dropped)."""
    from fedkd.pipeline.plan import Plan

    spec = Plan(yaml.safe_load(config.read_text())).base_spec("mnist5k", "fedavg")
    spec.update(alpha=alpha, device="cpu", model="resnet8", model_options={})
    if rounds is not None:
        spec["rounds"] = rounds
    return spec


def best_accuracy(spec: dict) -> tuple[float, float]:
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run

    with tempfile.TemporaryDirectory(prefix="fedkd-init-") as out:
        start = time.perf_counter()
        record = Run(RunSpec(**spec), out, log=lambda msg: None).run()
        return record["summary"]["best_acc"], time.perf_counter() - start


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=None, help="default: the config's")
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--jsonl", type=Path, default=None, help="append the figures as one line")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = base_spec(args.config, args.alpha, args.rounds)
    best: dict[str, list[float]] = {init: [] for init in INITS}
    for seed in range(args.seeds):
        for init in INITS:
            acc, seconds = best_accuracy(dict(spec, seed=seed, classifier_init=init))
            best[init].append(acc)
            print(f"seed {seed} {init:<8} best {acc:.4f} ({seconds:.0f} s)", file=sys.stderr)
    diffs = [100 * (b - a) for a, b in zip(best["pytorch"], best["normal"], strict=True)]
    mean, low, high = t_interval(diffs)
    means = {init: 100 * sum(v) / len(v) for init, v in best.items()}
    print(
        f"FedAvg, ResNet-8 (GroupNorm), mnist5k, alpha {args.alpha:g}, {spec['rounds']} rounds, "
        f"seeds 0-{args.seeds - 1}: mean best accuracy pytorch {means['pytorch']:.2f}, normal "
        f"{means['normal']:.2f}; normal - pytorch {mean:+.2f} points, 95% t-interval "
        f"[{low:+.2f}, {high:+.2f}] (per seed: {', '.join(f'{d:+.1f}' for d in diffs)})"
    )
    if args.jsonl is not None:
        today = datetime.date.today().isoformat()
        line = {
            "id": f"cpu-classifier-init-{commit() or today}",
            "topic": "Published-code choices",
            "date": today,
            "device": f"CPU ({platform.processor() or platform.machine()})",
            "commit": commit(),
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "what": "best accuracy, classifier_init normal minus pytorch, paired by seed "
            f"(FedAvg, ResNet-8-GN, mnist5k, alpha {args.alpha:g}, {spec['rounds']} rounds)",
            "figures": {
                "seeds": args.seeds,
                "pytorch_mean_best_points": round(means["pytorch"], 2),
                "normal_mean_best_points": round(means["normal"], 2),
                "normal_minus_pytorch_points": round(mean, 2),
                "normal_minus_pytorch_ci95_points": [round(low, 2), round(high, 2)],
            },
            "conditions": f"{args.threads} torch thread(s); the default configuration's "
            "optimiser settings",
        }
        with args.jsonl.open("a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
