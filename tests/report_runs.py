"""Fake runs for the report tests: run folders as the engine writes them, with made-up
numbers, their aggregate, a rendered file's text, and a grid of runs over two settings."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fedkd.report import (
    aggregate_runs,
    write_aggregate,
)
from fedkd.run_choices import DEFAULTS as RUN_CHOICES


def make_run(
    root: Path,
    name: str,
    accs: list[float],
    *,
    strategy: str = "fedavg",
    dataset: str = "cifar10",
    alpha: float | None = 0.5,
    seed: int = 0,
    status: str = "complete",
    participation: float = 0.2,
    local_epochs: int = 20,
    partition: str = "dirichlet-equal",
    shards: int | None = None,
    rounds: int | None = None,
    variant: str | None = None,
    class_acc: list[list[float]] | None = None,
    local_acc: list[float] | None = None,
    server: dict[str, list] | None = None,
    params: dict | None = None,
) -> Path:
    """A run directory as the engine writes it (run.json + metrics.parquet), with made-up numbers."""
    d = root / name
    d.mkdir(parents=True)
    spec = {
        "dataset": dataset, "model": "auto", "strategy": strategy, "params": params or {},
        "clients": 20, "partition": partition, "alpha": alpha, "shards": shards,
        "participation": participation, "rounds": rounds or len(accs), "local_epochs": local_epochs,
        "batch_size": 64, "seed": seed, "eval_local": local_acc is not None, **RUN_CHOICES,
    }  # fmt: skip
    rec = {
        "status": status,
        "labels": {"variant": variant} if variant else {},
        "spec": spec,
        "strategy_params": params or {},
        "model": "resnet8",
        "dataset": {
            "name": dataset,
            "kind": "image",
            "num_classes": 10,
            "train": 45000,
            "val": 5000,
            "test": 10000,
            "input_shape": [3, 32, 32],
            "source": "test",
        },  # fmt: skip
        "summary": {"rounds": len(accs)},
    }
    (d / "run.json").write_text(json.dumps(rec))
    rows = []
    for i, acc in enumerate(accs):
        row = {
            "round": i + 1,
            "test_acc": acc,
            "test_loss": 1.0 - acc,
            "class_acc": class_acc[i] if class_acc else [acc] * 10,
            "train_loss": 0.5,
            "local_acc": local_acc[i] if local_acc else float("nan"),
            "bytes_sent": 1000,
            "bytes_received": 1000,
            "seconds": 1.0,
            "clients": [0, 1, 2, 3],
        }
        for key, values in (server or {}).items():
            row[f"server_{key}"] = values[i]
        rows.append(row)
    if rows or status == "complete":
        pd.DataFrame(rows).to_parquet(d / "metrics.parquet", index=False)
    return d


def agg_file(tmp_path: Path, runs: list[tuple[str, Path]], name: str = "agg.parquet") -> Path:
    out = tmp_path / name
    write_aggregate(aggregate_runs([(label, str(d)) for label, d in runs]), out)
    return out


def read(prefix: Path, suffix: str) -> str:
    return prefix.with_name(prefix.name + suffix).read_text()


# the grid's labels, and the files a table is rendered to
COLUMNS = ["fedavg", "fedprox", "fedgkd", "moon", "fedgen"]
TABLE_FILES = (".tex", ".md", ".csv", ".html")


def grid_runs(tmp_path: Path) -> Path:
    """Three labels on two settings, two seeds each; 'moon' diverged in one cell."""
    r = tmp_path / "runs"
    runs = []
    for alpha in (1.0, 0.1):
        for seed, (best_a, best_b, best_c) in enumerate([(0.80, 0.70, 0.60), (0.70, 0.74, 0.62)]):
            shift = 0.0 if alpha == 1.0 else -0.2
            runs += [
                ("fedavg", make_run(r, f"a{alpha}-{seed}", [0.3, best_a + shift, 0.5 + shift], alpha=alpha, seed=seed)),
                ("fedprox", make_run(r, f"p{alpha}-{seed}", [best_b + shift, 0.2, 0.1], alpha=alpha, seed=seed, strategy="fedprox")),
                ("fedgkd", make_run(r, f"g{alpha}-{seed}", [0.1, best_c + shift, 0.3], alpha=alpha, seed=seed)),
            ]  # fmt: skip
        for seed in (0, 1):
            # seed 1 at alpha 0.1 diverged in round 3; the others ran their 3 rounds
            diverged = alpha == 0.1 and seed == 1
            runs.append(
                ("moon", make_run(r, f"m{alpha}-{seed}", [0.9, 0.9] if diverged else [0.9] * 3,
                                  alpha=alpha, seed=seed, rounds=3,
                                  status="diverged" if diverged else "complete")),
            )  # fmt: skip
    return agg_file(tmp_path, runs)
