"""No table is silently wrong: `fedkd aggregate` checks each run folder against the path it was
trained under (dataset, variant, setting, seed), its spec against its recorded hash, and its
metrics against its run.json, and refuses a swapped, relabelled or edited folder by its path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fedkd.config import RunSpec
from fedkd.engine.run import Run
from fedkd.report import ReportError, aggregate_runs
from fedkd.run_paths import run_dir
from small_runs import TINY


def quiet(msg: str) -> None:
    pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[int, Path]:
    """Two real runs (seeds 0 and 1, two rounds each) where the workflow puts them."""
    root = tmp_path_factory.mktemp("project")
    runs = {}
    for seed in (0, 1):
        spec = RunSpec(**TINY, rounds=2, seed=seed)
        path = root / run_dir({**spec.to_dict(), "dataset": spec.dataset}, "fedavg", seed)
        Run(spec, path, log=quiet, labels={"variant": "fedavg"}).run()
        runs[seed] = path
    return runs


@pytest.fixture
def runs(trained, tmp_path) -> dict[int, Path]:
    """A copy of the trained runs under tmp_path/results/runs, free to damage."""
    copies = {}
    for seed, path in trained.items():
        rel = path.as_posix()[path.as_posix().index("results/runs/") :]
        copies[seed] = tmp_path / rel
        shutil.copytree(path, copies[seed])
    return copies


def edit_record(run: Path, change) -> None:
    record = json.loads((run / "run.json").read_text())
    change(record)
    (run / "run.json").write_text(json.dumps(record))


def test_real_runs_in_their_own_folders_aggregate(runs):
    df = aggregate_runs([("FedAvg", str(runs[0])), ("FedAvg", str(runs[1]))])
    assert sorted(df["seed"].unique()) == [0, 1] and len(df) == 4


def test_swapped_run_folders_are_refused_naming_the_folder(runs, tmp_path):
    parked = tmp_path / "parked"
    runs[0].rename(parked)
    runs[1].rename(runs[0])
    parked.rename(runs[1])
    with pytest.raises(ReportError) as refused:
        aggregate_runs([("FedAvg", str(runs[0])), ("FedAvg", str(runs[1]))])
    message = str(refused.value)
    assert f"run folder {runs[0]} does not hold the run its path names" in message
    assert "seed '0' in the path, '1' in run.json" in message


def test_a_run_moved_to_another_variant_or_setting_is_refused(runs):
    other_variant = Path(str(runs[0]).replace("/fedavg/", "/fedprox/"))
    other_variant.parent.mkdir(parents=True)
    shutil.copytree(runs[0], other_variant)
    with pytest.raises(ReportError, match="variant 'fedprox' in the path, 'fedavg' in run.json"):
        aggregate_runs([("FedProx", str(other_variant))])
    setting = runs[0].parent.name
    longer = Path(str(runs[0]).replace(setting, setting.replace("-R2", "-R20")))
    longer.parent.mkdir(parents=True)
    shutil.copytree(runs[0], longer)
    with pytest.raises(ReportError, match=f"setting '{longer.parent.name}' in the path"):
        aggregate_runs([("FedAvg", str(longer))])


def test_a_relabelled_run_is_refused(runs):
    edit_record(runs[0], lambda r: r["labels"].update(variant="fedgkd"))
    with pytest.raises(ReportError, match="variant 'fedavg' in the path, 'fedgkd' in run.json"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def test_a_spec_edited_after_the_run_is_refused(runs):
    # lr is in no path: only the recorded hash tells the edit
    edit_record(runs[0], lambda r: r["spec"].update(lr=0.5))
    with pytest.raises(ReportError, match=f"run folder {runs[0]}: the spec in its run.json does"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def unseal(run: Path) -> None:
    """run.json as written before records carried the hashes of their metrics and themselves:
    the checks of the metrics against the summary still refuse what those hashes would."""
    edit_record(run, lambda r: [r.pop(k) for k in ("metrics_sha256", "record_sha256")])


def test_metrics_of_another_run_are_refused(runs):
    shutil.copy(runs[1] / "metrics.parquet", runs[0] / "metrics.parquet")
    # the record holds the hash of its own metrics
    with pytest.raises(
        ReportError, match=f"{runs[0]}/metrics.parquet is damaged .its SHA-256 is not the"
    ):
        aggregate_runs([("FedAvg", str(runs[0]))])
    unseal(runs[0])
    with pytest.raises(ReportError, match=f"run folder {runs[0]}: its run.json records best_acc"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def test_edited_or_extra_metrics_rows_are_refused(runs):
    metrics = pd.read_parquet(runs[0] / "metrics.parquet")
    metrics.to_parquet(runs[0] / "metrics.parquet", index=False)  # the same rows, other bytes
    with pytest.raises(ReportError, match="metrics.parquet is damaged .its SHA-256 is not the"):
        aggregate_runs([("FedAvg", str(runs[0]))])
    unseal(runs[0])  # without the hash, the rows are checked against the summary
    edited = metrics.copy()
    edited.loc[edited.index[-1], "test_acc"] = 0.99
    edited.to_parquet(runs[0] / "metrics.parquet", index=False)
    with pytest.raises(ReportError, match=r"its run.json records (best|final)_acc"):
        aggregate_runs([("FedAvg", str(runs[0]))])
    longer = pd.concat([metrics, metrics.tail(1).assign(round=3)], ignore_index=True)
    longer.to_parquet(runs[0] / "metrics.parquet", index=False)
    with pytest.raises(ReportError, match=r"its metrics hold rounds \[1, 2, 3\]"):
        aggregate_runs([("FedAvg", str(runs[0]))])
    twice = pd.concat([metrics.head(1), metrics.head(1)], ignore_index=True)
    twice.to_parquet(runs[0] / "metrics.parquet", index=False)
    with pytest.raises(ReportError, match=r"its metrics hold rounds \[1, 1\]"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def test_a_run_reached_through_a_link_below_results_is_refused_naming_it(runs, tmp_path):
    """A variant folder replaced by a link to a folder elsewhere holding a run of the same path:
    the aggregate reads no run through it (its numbers would be another run's)."""
    variant = runs[0].parents[1]
    elsewhere = tmp_path / "elsewhere" / "fedavg"
    elsewhere.parent.mkdir()
    variant.rename(elsewhere)
    variant.symlink_to(elsewhere)
    with pytest.raises(ReportError, match=rf"{variant} is a symbolic link .*reads no run"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def test_a_run_folder_outside_results_is_checked_against_its_path(runs, tmp_path):
    """A label pointed at a folder outside results/runs is checked as one inside: by the
    DATASET/VARIANT/SETTING/seedN its path ends with, and by the folder a link there leads to."""
    tail = runs[0].relative_to(runs[0].parents[3])  # mnist5k/fedavg/SETTING/seed0
    copied = tmp_path / "backup" / tail
    shutil.copytree(runs[1], copied)  # seed 1's run under seed 0's name
    with pytest.raises(ReportError, match=rf"run folder {copied} does not hold .*seed '0' in the"):
        aggregate_runs([("FedAvg", str(copied))])
    # a link named as the run it holds, leading to a folder named as another
    linked = tmp_path / "linked" / tail.parent / "seed1"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(copied)
    with pytest.raises(ReportError, match=rf"{linked} \(which leads to {copied}\) does not"):
        aggregate_runs([("FedAvg", str(linked))])
    shutil.copytree(runs[0], tmp_path / "by-hand" / "my-run")  # a name of one's own: not a path
    df = aggregate_runs([("FedAvg", str(tmp_path / "by-hand" / "my-run"))])
    assert df["seed"].tolist() == [0, 0]


def test_an_edit_to_a_sealed_record_is_refused(runs):
    """The summary is in no path and no spec: the record's own hash tells the edit."""
    edit_record(runs[0], lambda r: r["summary"].update(best_acc=0.99))
    with pytest.raises(ReportError, match=f"run folder {runs[0]}: its run.json is damaged or was"):
        aggregate_runs([("FedAvg", str(runs[0]))])


def test_status_calls_damaged_a_finished_run_the_aggregate_refuses(runs):
    """`fedkd status` reads the same run.json and metrics.parquet: an edited sealed record, or
    another run's metrics, is damaged there too, named with the fix, not counted as done."""
    from fedkd.tools.status import collect

    root = runs[0].parents[3]
    assert [p.state for p in collect(root)] == ["done", "done"]
    edit_record(runs[0], lambda r: r.update(rounds_done=1))
    shutil.copy(runs[0] / "metrics.parquet", runs[1] / "metrics.parquet")
    first, second = collect(root)
    assert (first.state, second.state) == ("damaged", "damaged")
    assert f"{runs[0]}/run.json is damaged or was edited after the run" in first.problem
    assert "does not hash to the record_sha256 it records" in first.problem
    assert f"{runs[1]}/metrics.parquet is damaged (its SHA-256 is not the" in second.problem
    assert f"`fedkd train --out {runs[1]}` command again" in second.problem
