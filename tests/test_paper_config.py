"""config/paper.yaml against the papers' text where it reads the papers' scope: which settings
a figure or table runs and on which model (each choice's evidence is written next to its key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedkd.data import default_model
from fedkd.pipeline import Plan
from fedkd.report import paper_values as pv
from fedkd.run_paths import parse_run_dir, parse_setting

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))


def settings(plan: Plan, target: str) -> dict[str, set[tuple[float, float]]]:
    """Per column label, the (alpha, C) pairs of the target's runs."""
    out: dict[str, set[tuple[float, float]]] = {}
    for label, run in plan.target_runs(target):
        s = parse_setting(parse_run_dir(run)["setting"])
        out.setdefault(label, set()).add((s["alpha"], s["participation"]))
    return out


def spec_of(plan: Plan, run: str) -> dict:
    dataset, variant, setting, seed = run.split("/")[2:]
    return plan.run_spec(dataset, variant, setting, seed.removeprefix("seed"))


def test_fig3_bottom_varies_c_under_every_alpha(plan):
    # fedgkd.tex, Fig. 3: a participation panel (alpha1_C, alpha05_C, alpha01_C) per alpha
    every = {(a, c) for a in (1.0, 0.5, 0.1) for c in (0.1, 0.2, 0.3, 0.4)}
    assert settings(plan, "curves_participation") == {"fedavg": every, "fedgkd": every}


def test_table5_runs_the_settings_of_the_papers_table5(plan):
    cells = pv.load_paper_values()["fedgkd_table5"]["cells"]
    paper = {(c["alpha"], c["participation"]) for c in cells}
    assert paper == {(0.5, c) for c in (0.1, 0.2, 0.3, 0.4)}
    ran = settings(plan, "table5")
    assert set(ran) == {c["method"] for c in cells}
    assert all(pairs == paper for pairs in ran.values()), ran


def test_table9_sst5_cells_are_table4_runs(plan):
    # Table 9's SST-5 none and KL cells are Table 4's FedAvg and FedGKD cells (40.39, 43.24)
    sst5 = {label: {r for lab, r in plan.target_runs(t) if lab == label and "/sst5/" in r}
            for t, label in (("table9", "none"), ("table9", "KL"))}  # fmt: skip
    table4 = {r for _, r in plan.target_runs("table4") if "/sst5/" in r}
    assert sst5["none"] and sst5["KL"] and sst5["none"] | sst5["KL"] <= table4
    spec = spec_of(plan, next(iter(sst5["KL"])))
    assert (spec["clients"], spec["participation"]) == (10, 0.4)  # 4 clients a round


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


def test_fedntd_table1_runs_fedntds_schedule_without_clipping(plan):
    # FedNTD (Appendix B): lr 0.01 decayed by 0.99 each round, Cutout on CIFAR-10 (side 16 in its
    # code); it names no clipping and its code clips nothing, where FedGKD's code clips at norm 10,
    # keeps its rate and cuts nothing out
    runs = [r for _, r in plan.target_runs("forgetting")]
    assert runs
    specs = [spec_of(plan, r) for r in runs]
    assert {(s["lr"], s["lr_decay"], s["grad_clip"], s["cutout"]) for s in specs} == {
        (0.01, 0.99, None, 16)
    }
    table3 = spec_of(plan, plan.target_runs("table3")[0][1])
    assert table3["grad_clip"] == 10.0 and table3.get("lr_decay", 1.0) == 1.0
    assert table3.get("cutout", 0) == 0
