"""Constructed runs for the claims tests: run folders as the engine writes them, with made-up
accuracies, pairs of methods by seed, and the claims table rendered from them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from fedkd.report import aggregate_runs, render, write_aggregate
from fedkd.report.claims import all_claims

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {name: REPO / "config" / f"{name}.yaml" for name in ("config", "tiny", "paper")}
CLAIMS = all_claims()


def config(name: str) -> dict:
    return yaml.safe_load(CONFIGS[name].read_text())


def make_run(root: Path, name: str, accs, *, strategy="fedavg", alpha=1.0, seed=0,
             status="complete", dataset="mnist5k", rounds=None, variant=None,
             participation=0.2, collapsed=None) -> str:  # fmt: skip
    """A run directory as the engine writes it, with made-up accuracies (fractions)."""
    d = root / name
    d.mkdir(parents=True)
    spec = {
        "dataset": dataset, "strategy": strategy, "params": {}, "clients": 10, "alpha": alpha,
        "partition": "dirichlet-equal", "shards": None, "participation": participation,
        "seed": seed, "rounds": rounds or len(accs), "local_epochs": 2, "model": "cnn",
    }  # fmt: skip
    rec = {"status": status, "labels": {"variant": variant or strategy}, "spec": spec, "model": "cnn",
           "dataset": {"name": dataset, "kind": "image", "num_classes": 10, "train": 3600,
                       "val": 400, "test": 1000}}  # fmt: skip
    if collapsed is not None:
        rec["summary"] = {"collapsed": collapsed}
    (d / "run.json").write_text(json.dumps(rec))
    pd.DataFrame(
        [{"round": i + 1, "test_acc": a, "val_acc": a, "class_acc": [a] * 10}
         for i, a in enumerate(accs)]
    ).to_parquet(d / "metrics.parquet", index=False)  # fmt: skip
    return str(d)


def render_claims(tmp_path: Path, runs: list[tuple[str, str]], sources_opt: dict) -> pd.DataFrame:
    agg = tmp_path / "claims.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    out = tmp_path / "out" / "claims"
    options = {"sources": sources_opt, "stand_ins": {"mnist5k": "CIFAR-10"}}
    render("claims", out, aggregate=agg, options=options)
    text = ("seeds", "note", "also_in", "shared_with")
    df = pd.read_csv(out.with_name("claims.csv"), dtype=dict.fromkeys(text, str))
    return df.assign(**{col: df[col].fillna("") for col in text})


TABLE3 = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": {}}}
KEY = "mnist5k (stand-in for CIFAR-10), α={}, C=0.2, E=2, R=2"


# a third method of the setting, no claim's: the setting's seed-to-seed variance rests on 4
# degrees of freedom with 3 seeds (its small departures from the seeds' pattern are the noise)
BYSTANDER = "bystander"
BYSTANDER_NOISE = {0: 0.002, 1: -0.001, 2: 0.0, 3: -0.002, 4: 0.001, 5: 0.0}


def pair_runs(root: Path, table: str, gaps: dict, *, treatment="fedgkd", baseline="fedavg",
              base=None, bystander=True, **kw) -> list:  # fmt: skip
    """Runs of two methods per alpha and seed, the treatment ``gaps[alpha][seed]`` ahead, and
    (``bystander``) a third method close to the baseline."""
    base = base or {0: 0.70, 1: 0.60, 2: 0.65, 3: 0.62, 4: 0.66, 5: 0.63}  # pairing resolves
    runs = []
    for alpha, gap in gaps.items():
        for seed, g in enumerate(gap):
            a = base[seed]
            methods = [(baseline, 0.0), (treatment, g)]
            if bystander:
                methods.append((BYSTANDER, BYSTANDER_NOISE[seed]))
            for label, extra in methods:
                d = make_run(
                    root,
                    f"{table}-{label}-{alpha}-{seed}-{len(runs)}",
                    [a - 0.1, a + extra],
                    strategy=label,
                    alpha=alpha,
                    seed=seed,
                    **kw,
                )
                runs.append((f"{table}/{label}", d))  # fmt: skip
    return runs
