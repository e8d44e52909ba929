"""`fedkd status`: counts of done / running / stopped / failed / not started runs, each running
run's progress and an ETA, from run.json and metrics.parquet alone (no training here)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from fedkd.cli import main
from fedkd.status import StatusError, collect, eta_seconds, report, status_main

SETTING = "dirichlet-equal-a1-K10-C0.2-E1-R5"


def make_run(root: Path, variant: str, status: str, rounds_done: int, seconds: float = 2.0,
             age: float = 0.0, seed: int = 0) -> Path:  # fmt: skip
    run = root / "mnist5k" / variant / SETTING / f"seed{seed}"
    run.mkdir(parents=True)
    updated = datetime.fromtimestamp(time.time() - age, UTC).isoformat(timespec="seconds")
    record = {"status": status, "spec": {"rounds": 5}, "rounds_done": rounds_done,
              "updated": updated}  # fmt: skip
    (run / "run.json").write_text(json.dumps(record))
    rounds = list(range(1, rounds_done + 1))
    pd.DataFrame(
        {"round": rounds, "test_acc": [0.1 * r for r in rounds], "seconds": [seconds] * len(rounds)}
    ).to_parquet(run / "metrics.parquet")
    return run


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "results" / "runs"
    make_run(root, "fedavg", "complete", 5)
    make_run(root, "fedprox", "running", 2, seconds=3.0)  # 3 rounds left at 3 s
    make_run(root, "moon", "running", 1, seconds=2.0, age=3600)  # an hour without a round
    make_run(root, "fedgen", "diverged", 2)
    return root


def test_counts_each_state_and_the_running_runs_progress(runs):
    states = {r.path.split("/")[1]: r.state for r in collect(runs)}
    assert states == {"fedavg": "done", "fedprox": "running", "moon": "stopped", "fedgen": "failed"}
    text = report(collect(runs), runs)
    assert "4 runs: 1 done, 1 running, 1 stopped, 1 failed" in text
    assert f"running  mnist5k/fedprox/{SETTING}/seed0  round 2/5, 3.0 s/round, ~9 s left" in text
    assert "re-run the workflow to resume" in text
    assert "fedgen" in text and "diverged after round 2" in text


def test_eta_is_the_rounds_left_at_each_runs_speed_over_the_runs_in_flight(runs):
    progress = collect(runs)
    # fedprox 3 rounds x 3 s + moon (stopped) 4 rounds x 2 s, one run in flight
    assert eta_seconds(progress) == pytest.approx(3 * 3.0 + 4 * 2.0)
    assert "ETA: ~17 s (2 runs to finish, 1 at a time)" in report(progress, runs)


def test_planned_runs_not_started_count_at_the_median_speed(runs):
    planned = [f"mnist5k/{v}/{SETTING}/seed0" for v in ("fedavg", "fedprox", "moon", "fedgen")]
    planned.append(f"mnist5k/scaffold/{SETTING}/seed0")
    progress = collect(runs, planned)
    assert [r.state for r in progress][-1] == "not started"
    assert progress[-1].rounds == 5, "rounds read from the run's setting (R5)"
    # the median of the measured speeds (2, 3, 2, 2 s) for its 5 rounds
    assert eta_seconds(progress) == pytest.approx(17.0 + 5 * 2.0)
    assert "1 not started" in report(progress, runs)


def test_nothing_left_and_nothing_measured(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "fedavg", "complete", 5)
    assert "ETA: nothing left to train" in report(collect(root), root)
    fresh = tmp_path / "fresh"
    make_run(fresh, "fedavg", "running", 0)
    assert "ETA: unknown until a run has finished a round" in report(collect(fresh), fresh)


def test_the_command_prints_the_report_and_names_a_missing_folder(runs, capsys, tmp_path):
    assert main(["status", str(runs)]) == 0
    assert "1 done, 1 running" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "runs folder" in err and "nope" in err and "does not exist" in err
    with pytest.raises(StatusError, match="--stale-after"):
        status_main(runs, stale_after=-1)


def test_the_configfile_adds_the_runs_not_started(tmp_path, capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    root = Path("results/runs")
    root.mkdir(parents=True)
    assert main(["status", "--configfile", str(repo / "config" / "tiny.yaml")]) == 0
    out = capsys.readouterr().out
    assert "0 done, 0 running" in out and "not started" in out
    assert main(["status", "--configfile", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read --configfile" in capsys.readouterr().err
