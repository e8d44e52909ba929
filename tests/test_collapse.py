"""Collapsed runs: the rule (a global model that never got 5% of the way from chance to a perfect
accuracy), its mark in the aggregate and every cell it feeds, accuracies outside [0, 1]
refused at aggregation, and the record a collapsed run keeps."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from fedkd.collapse import CAPTION_NOTE, MARK, collapse_threshold, is_collapsed
from fedkd.config import RunSpec
from fedkd.engine.run import Run
from fedkd.engine.run_outputs import (
    summarize,
)
from fedkd.files import RUN_JSON
from fedkd.report import ReportError, aggregate_runs, render, write_aggregate
from small_runs import TINY


def quiet(msg: str) -> None:
    pass


def test_the_collapse_rule():
    assert collapse_threshold(10) == pytest.approx(0.145)
    assert collapse_threshold(2) == pytest.approx(0.525)
    assert collapse_threshold(100) == pytest.approx(0.0595)
    assert is_collapsed([0.1] * 50, 10)  # MOON at alpha 0.1: 10.00 % in every round
    assert is_collapsed([0.1, 0.12, 0.144], 10)
    assert not is_collapsed([0.1, 0.12, 0.146], 10)
    assert not is_collapsed([0.1, float("nan"), 0.3], 10)
    assert is_collapsed([0.52], 2) and not is_collapsed([0.53], 2)
    assert not is_collapsed([], 10) and not is_collapsed([0.1], None)
    rows = [{"round": 1, "test_acc": 0.1, "val_acc": 0.1, "seconds": 1.0}]
    assert summarize(rows, 10)["collapsed"] and summarize(rows, 10)["chance_acc"] == 0.1
    rows[0]["test_acc"] = 0.9
    assert not summarize(rows, 10)["collapsed"]


def test_a_collapsed_run_is_marked_in_the_aggregate_and_in_every_cell_it_feeds(tmp_path):
    from test_report import make_run

    root = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(root, "fedavg0", [0.3, 0.6], seed=0)),
        ("fedavg", make_run(root, "fedavg1", [0.3, 0.62], seed=1)),
        ("moon", make_run(root, "moon0", [0.1, 0.1], seed=0, strategy="moon")),
        ("moon", make_run(root, "moon1", [0.3, 0.5], seed=1, strategy="moon")),
    ]
    # the record's own mark wins; a record without one (older) is judged from its rows
    rec = json.loads((root / "moon1" / RUN_JSON).read_text())
    rec["summary"]["collapsed"] = False
    (root / "moon1" / RUN_JSON).write_text(json.dumps(rec))
    df = aggregate_runs([(label, str(d)) for label, d in runs])
    flagged = df.drop_duplicates("run").set_index("run")["collapsed"]
    assert flagged.to_dict() == {str(d): d.name == "moon0" for _, d in runs}
    agg = tmp_path / "agg.parquet"
    write_aggregate(df, agg)
    prefix = tmp_path / "table"
    render("grid", prefix, aggregate=agg, options={"columns": ["fedavg", "moon"]})
    md = prefix.with_name("table.md").read_text()
    tex = prefix.with_name("table.tex").read_text()
    moon_cell = "30.00 ± 20.00"  # best rounds 10 % and 50 %
    assert f"{moon_cell}{MARK}" in md and "61.00 ± 1.00" in md and f"61.00 ± 1.00{MARK}" not in md
    assert r"$^\dagger$" in tex
    assert CAPTION_NOTE in md and "collapsed" in tex
    csv = pd.read_csv(prefix.with_name("table.csv"))
    best = csv[csv["stat"] == "best"].set_index("label")["collapsed"]
    assert best.to_dict() == {"fedavg": 0, "moon": 1}
    # without a collapsed run: no mark and no note
    healthy = tmp_path / "healthy.parquet"
    write_aggregate(df[df["run"] != str(root / "moon0")], healthy)
    render("grid", tmp_path / "h", aggregate=healthy, options={"columns": ["fedavg", "moon"]})
    text = (tmp_path / "h.md").read_text()
    assert MARK not in text and "collapsed" not in text


@pytest.mark.parametrize(
    "column,values,fragment",
    [
        ("test_acc", [0.3, 1.5], "test_acc=1.5 in round 2 lies outside [0, 1]"),
        ("test_acc", [-0.1, 0.5], "test_acc=-0.1 in round 1 lies outside [0, 1]"),
        ("test_acc", [0.3, math.nan], "test_acc=nan in round 2 is missing"),
        ("test_acc", [0.3, math.inf], "test_acc=inf in round 2 is not finite"),
        ("local_acc", [0.3, 2.0], "local_acc=2.0 in round 2 lies outside [0, 1]"),
        ("class_acc", [[0.5, 0.5], [0.5, 7.0]], "class_acc=7.0 in round 2 lies outside [0, 1]"),
        ("class_acc", [[0.5, 0.5], [0.5, math.inf]], "class_acc=inf in round 2 is not finite"),
        ("class_acc", [[True, False], [True, True]], "class_acc=True in round 1 is not a number"),
        ("val_acc", [0.3, -math.inf], "val_acc=-inf in round 2 is not finite"),
    ],
)  # fmt: skip
def test_an_accuracy_outside_0_1_is_refused_at_aggregation_naming_the_run(
    tmp_path, column, values, fragment
):
    from test_report import make_run

    good = make_run(tmp_path, "good", [0.3, 0.5])
    bad = make_run(tmp_path, "bad", [0.3, 0.5])
    metrics = pd.read_parquet(bad / "metrics.parquet")
    metrics[column] = pd.Series(values, dtype=object if column == "class_acc" else float)
    metrics.to_parquet(bad / "metrics.parquet")
    with pytest.raises(ReportError) as err:
        aggregate_runs([("fedavg", str(good)), ("fedavg", str(bad))])
    assert f"run {bad} (label 'fedavg'): {fragment}" in str(err.value)
    assert "metrics.parquet was damaged or edited" in str(err.value)


def test_accuracies_not_measured_and_a_run_that_completed_no_round_are_let_through(tmp_path):
    """NaN is how a run records what it did not measure (no validation split, local models not
    evaluated), and a run that diverged in round 1 has only the aggregate's round-0 row."""
    from test_report import make_run

    run = make_run(tmp_path, "run", [0.3, 0.5])
    metrics = pd.read_parquet(run / "metrics.parquet")
    metrics["val_acc"] = math.nan
    metrics["local_acc"] = math.nan
    metrics["class_acc"] = pd.Series([[0.5, math.nan], [1.0, 0.0]], dtype=object)
    metrics.to_parquet(run / "metrics.parquet")
    diverged = make_run(tmp_path, "diverged", [], status="diverged", rounds=3)
    df = aggregate_runs([("fedavg", str(run)), ("fedavg", str(diverged))])
    assert df["test_acc"].isna().sum() == 1  # the diverged run's round-0 row
    assert df.loc[df["run"] == str(diverged), "round"].tolist() == [0]


def test_a_collapsed_run_records_it(tmp_path, monkeypatch):
    def chance_round(self, r: int) -> dict:
        return {"round": r + 1, "test_acc": 0.1, "test_loss": 2.3, "val_acc": 0.1,
                "val_loss": 2.3, "seconds": 0.0}  # fmt: skip

    monkeypatch.setattr(Run, "_round", chance_round)
    record = Run(RunSpec(**TINY, rounds=2), tmp_path / "run", log=quiet).run()
    assert record["status"] == "complete"
    assert record["summary"]["collapsed"] is True and record["summary"]["chance_acc"] == 0.1
