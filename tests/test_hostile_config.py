"""Hostile and mistaken configuration values end at planning in one message naming the value,
never in a traceback of the workflow or of a job after the runs trained."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedkd.pipeline import ConfigError, validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def small_config() -> dict:
    return yaml.safe_load(
        """
name: mine
seeds: [0]
defaults: {partition: dirichlet-equal, alpha: 0.5, clients: 4, participation: 0.5,
           local_epochs: 1, rounds: 2}
variants: {fedavg: {strategy: fedavg}, fedprox: {strategy: fedprox}}
resources:
  train: {threads: 1, gpu: 0, mem_mb: 2000, runtime: 10}
tables:
  table3:
    layout: grid
    caption: x
    grid: {dataset: [mnist5k], alpha: [0.5, 0.1]}
    columns: {FedAvg: fedavg, FedProx: fedprox}
"""
    )


def errors_of(cfg: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, SCHEMA)
    return str(info.value)


# ----------------------------------------------------------------------------- NaN and infinity
def rounds_to_target(accuracy: float) -> dict:
    cfg = small_config()
    cfg["tables"]["rtt"] = {
        "layout": "rounds_to_target", "caption": "x",
        "grid": {"dataset": ["mnist5k"], "alpha": [0.5]}, "columns": {"FedAvg": "fedavg"},
        "options": {"targets": [{"alpha": 0.5, "accuracy": accuracy}]},
    }  # fmt: skip
    return cfg


def with_claim(**fields) -> dict:
    cfg = small_config()
    claim = {"statement": "x", "tables": "table3", "treatment": "FedProx", "baseline": "FedAvg"}
    cfg["claims"] = [{**claim, **fields}]
    cfg["tables"]["claims"] = {"layout": "claims", "caption": "x"}
    return cfg


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_nan_and_infinity_are_refused_by_the_keys_no_run_spec_holds(bad):
    """JSON schema comparisons are false for NaN, so `exclusiveMinimum: 0` let .nan through:
    client_epoch_seconds then failed Snakemake's planning of every train job with "cannot
    convert float NaN to integer", a NaN target accuracy with a ReportError traceback, and an
    infinite margin made a non-inferiority claim hold whatever the runs."""
    cfg = small_config()
    cfg["resources"]["train"]["client_epoch_seconds"] = bad
    where = "resources.train.client_epoch_seconds"
    assert f"{where}: {bad} must be a finite number" in errors_of(cfg)
    message = errors_of(rounds_to_target(bad))
    assert f"tables.rtt.options.targets[0].accuracy: {bad} must be a finite number" in message
    message = errors_of(with_claim(test="non-inferiority", margin=bad))
    assert f"claims[0].margin: {bad} must be a finite number" in message
    message = errors_of(with_claim(where={"alpha": [bad]}))
    assert f"claims[0].where.alpha[0]: {bad} must be a finite number" in message


def test_finite_values_of_those_keys_pass():
    cfg = rounds_to_target(0.5)
    cfg["resources"]["train"]["client_epoch_seconds"] = 2.5
    validate_config(cfg, SCHEMA)
    validate_config(with_claim(test="non-inferiority", margin=1.0, where={"alpha": [0.1]}), SCHEMA)
