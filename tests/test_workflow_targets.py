"""Rule all asks for every file the tables and figures are made from, not the tables alone.

Snakemake (since 7.7) remakes no missing file whose consumers are present and up to date. The
refusals tell the user to delete a damaged metrics.parquet, partition file or runs list (or a
run folder) and run the workflow again; with only the tables as targets that run said "Nothing
to be done" and left the file missing (a damaged partition: its run never trained again)."""

from __future__ import annotations

from pathlib import Path

import yaml

from fedkd.pipeline import Plan
from fedkd.pipeline.snakefile import default_targets, made_from
from fedkd.run_paths import parse_run_dir, run_files

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"


def tiny_plan() -> Plan:
    return Plan(yaml.safe_load(TINY.read_text()))


def test_rule_all_asks_for_every_run_partition_runs_list_aggregate_and_features_file():
    plan = tiny_plan()
    targets = set(default_targets(plan, reporting=False))
    runs = sorted(plan.all_runs())
    assert len(runs) == 13  # config/tiny.yaml's runs, as its header says
    for run in runs:
        assert set(run_files(run)) <= targets, run
        keys = parse_run_dir(run)
        spec = plan.run_spec(keys["dataset"], keys["variant"], keys["setting"], keys["seed"])
        assert spec["partition_file"] in targets, run
    for name in plan.names(input="aggregate"):
        assert f"results/aggregate/{name}.parquet" in targets
        assert f"results/aggregate/{name}.runs" in targets
    for name in plan.names(input="run"):
        assert f"results/features/{name}.npz" in targets
    assert set(plan.all_outputs()) <= targets


def test_the_files_made_from_are_listed_once_each_and_no_report_asks_for_them(
    tmp_path, monkeypatch
):
    plan = tiny_plan()
    wanted = made_from(plan)
    assert len(wanted) == len(set(wanted))
    # a report reports the outputs built so far: none in an empty folder, no run file either
    monkeypatch.chdir(tmp_path)
    assert default_targets(plan, reporting=True) == []
