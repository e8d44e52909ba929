"""``--precision-check``: the best test accuracy of the same mnist5k runs under each precision
(``--check-precisions``, fp32, tf32 and bf16 by default), per seed: a reduced precision should
land within the seed-to-seed spread of fp32. On a CPU tf32 is fp32's arithmetic (equal figures
by construction); the comparison means something on a GPU with TF32 (NVIDIA Ampere and later)."""

from __future__ import annotations

import statistics
import tempfile

import torch

from fedkd.config import RunSpec
from fedkd.engine.run import Run


def precision_check(args, device: torch.device) -> list[tuple[str, int, float]]:
    """``(precision, seed, best accuracy)`` of each run."""
    results = []
    for precision in args.check_precisions:
        for seed in range(args.check_seeds):
            spec = RunSpec(
                dataset="mnist5k", clients=10, participation=0.4, alpha=0.5, local_epochs=1,
                rounds=args.check_rounds, seed=seed, device=device.type, precision=precision,
            )  # fmt: skip
            with tempfile.TemporaryDirectory() as out:
                record = Run(spec, out, log=lambda msg: None).run()
            results.append((precision, seed, record["summary"]["best_acc"]))
    return results


def describe_precision(checked: list[tuple[str, int, float]], precision: str, args) -> str:
    accs = [a for p, _, a in checked if p == precision]
    per_seed = ", ".join(f"{a:.4f}" for a in accs)
    return (
        f"mnist5k best accuracy ({args.check_rounds} round(s)) {precision}: "
        f"{statistics.mean(accs):.4f} ± {statistics.pstdev(accs):.4f} (seeds: {per_seed})"
    )
