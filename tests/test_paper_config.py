"""config/paper.yaml against the papers' text where it reads the papers' scope: which settings
a figure or table runs and on which model (each choice's evidence is written next to its key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedkd.data import default_model
from fedkd.pipeline import Plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))


def spec_of(plan: Plan, run: str) -> dict:
    dataset, variant, setting, seed = run.split("/")[2:]
    return plan.run_spec(dataset, variant, setting, seed.removeprefix("seed"))


def test_feddf_table1_runs_resnet8_with_batchnorm_as_feddfs_code(plan):
    runs = [r for _, r in plan.target_runs("rounds_to_target")]
    assert runs
    for run in runs:
        spec = spec_of(plan, run)
        model = default_model(spec["dataset"]) if spec["model"] == "auto" else spec["model"]
        assert (model, spec.get("model_options", {}).get("norm")) == ("resnet8", "batch"), run
        assert spec.get("bn_running_stats") == "last-client", run
    # the other CIFAR tables keep FedGKD's GroupNorm
    table3 = spec_of(plan, plan.target_runs("table3")[0][1])
    assert table3.get("model_options", {}).get("norm", "group") == "group"
