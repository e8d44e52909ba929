"""Hostile inputs and faults: a run resumed at its last round, crafted checkpoints, two runs on
one directory, damaged run records, a full disk, and kills at random moments (crafted dataset
files: tests/test_hostile_data.py; collapsed runs: tests/test_collapse.py). Each test is an
attack that once succeeded."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import (
    MAGIC,
    CheckpointUnsafeError,
    check_plain,
    load_checkpoint,
    save_checkpoint,
)
from fedkd.engine.reproducibility import capture_rng, restore_rng
from fedkd.engine.run import Run
from fedkd.engine.run_outputs import (
    LOCK,
    RunConflictError,
    RunLock,
    read_metrics,
)
from fedkd.files import METRICS, RUN_JSON, RunRecordError
from fedkd.report import ReportError, aggregate_runs, render, write_aggregate
from fedkd.tools.status import collect, report
from small_runs import ENV, TINY, TINY_ARGS


def quiet(msg: str) -> None:
    pass


def fedkd(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedkd", *args], env=ENV, capture_output=True, text=True, **kwargs
    )


# --------------------------------------------------------------------------- 1. resume at the end
@pytest.mark.parametrize(
    "spec",
    [dict(rounds=2), dict(rounds=3, stop_at_acc=0.55)],  # the target is reached in round 1 of 3
    ids=["last-round", "target-reached"],
)
def test_a_run_resumed_after_its_last_round_writes_its_outputs_again(tmp_path, fake_rounds, spec):
    """The workflow deletes the outputs of an interrupted or forced job, the checkpoint stays: the
    run then trains no round and must still write metrics.parquet (before, it wrote a "complete"
    run.json and no metrics, and the job failed for good)."""
    out = tmp_path / "run"
    spec = RunSpec(**TINY, **spec)
    first = Run(spec, out, log=quiet).run()
    assert first["status"] == "complete"
    rows = read_metrics(out / METRICS)
    for name in (METRICS, RUN_JSON):
        (out / name).unlink()
    again = Run(spec, out, log=quiet).run()
    assert again["status"] == "complete" and (out / METRICS).exists()
    pd.testing.assert_frame_equal(read_metrics(out / METRICS), rows)
    assert again["summary"]["best_acc"] == first["summary"]["best_acc"]
    # the metrics alone deleted (run.json still says complete): the same
    (out / METRICS).unlink()
    Run(spec, out, log=quiet).run()
    pd.testing.assert_frame_equal(read_metrics(out / METRICS), rows)


# --------------------------------------------------------------------------- 2. crafted checkpoints
class _Payload:
    """Unpickled by a full unpickler, this creates a directory: the observable stand-in for any
    code (os.system worked the same way)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def write_crafted_checkpoint(path: Path, marker: Path) -> None:
    """The file header, a valid SHA-256 and a pickle whose loading runs code."""
    buf = io.BytesIO()
    torch.save({"spec_hash": "x", "rows": [_Payload(marker)]}, buf)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MAGIC + hashlib.sha256(data).digest() + data)


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path):
    marker = tmp_path / "code-ran"
    ck = tmp_path / "checkpoint.pt"
    write_crafted_checkpoint(ck, marker)
    with pytest.raises(CheckpointUnsafeError, match=r"checkpoint .*checkpoint\.pt holds objects"):
        load_checkpoint(ck)
    assert not marker.exists()


def test_a_crafted_checkpoint_is_refused_by_train_and_features(tmp_path):
    marker = tmp_path / "code-ran"
    run = tmp_path / "run"
    write_crafted_checkpoint(run / "checkpoint.pt", marker)
    train = fedkd("train", "--out", str(run), "--rounds", "1", *TINY_ARGS)
    assert train.returncode == 2, train.stderr
    assert "fedkd train: error: checkpoint" in train.stderr and "was not loaded" in train.stderr
    assert "Traceback" not in train.stderr
    assert not marker.exists()
    # a "complete" run whose checkpoint was replaced: fedkd features reads it too
    spec = RunSpec(**TINY, rounds=1).to_dict()
    (run / RUN_JSON).write_text(json.dumps({"status": "complete", "spec": spec}))
    feats = fedkd("features", "--run", str(run), "--out", str(tmp_path / "f.npz"))
    assert feats.returncode == 2, feats.stderr
    assert "fedkd features: error: checkpoint" in feats.stderr and str(run) in feats.stderr
    assert not marker.exists()


def test_what_a_checkpoint_may_hold_is_checked_before_it_is_written(tmp_path):
    check_plain({"a": [torch.ones(2), (1, 2.0, "x", None, True)], 3: {"b": b"raw"}})
    with pytest.raises(TypeError, match=r"checkpoint\['strategy'\]\['w'\] is a numpy.ndarray"):
        save_checkpoint(tmp_path / "c.pt", {"strategy": {"w": np.zeros(2)}})
    assert not list(tmp_path.iterdir()), "nothing written"
    # the RNG states are plain data and survive the round trip
    state = {"rng": capture_rng(torch.device("cpu"))}
    check_plain(state)
    save_checkpoint(tmp_path / "c.pt", state)
    draws = (np.random.rand(3), torch.rand(3))
    restore_rng(load_checkpoint(tmp_path / "c.pt")["rng"], torch.device("cpu"))
    again = (np.random.rand(3), torch.rand(3))
    assert np.array_equal(draws[0], again[0]) and torch.equal(draws[1], again[1])


@pytest.mark.skipif(
    not hasattr(torch.serialization, "safe_globals"),
    reason="torch before 2.5 cannot allow NumPy's array in a weights_only load",
)
def test_a_checkpoint_written_before_plain_rng_states_still_loads(tmp_path):
    """Earlier checkpoints hold NumPy's generator state as an array: read, and restored."""
    np.random.seed(7)
    state = {"rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                     "python": random.getstate(), "cuda": None, "mps": None}}  # fmt: skip
    expected = np.random.rand(3)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    (tmp_path / "old.pt").write_bytes(MAGIC + hashlib.sha256(data).digest() + data)
    restore_rng(load_checkpoint(tmp_path / "old.pt")["rng"], torch.device("cpu"))
    assert np.array_equal(np.random.rand(3), expected)


# --------------------------------------------------------------------------- 4. one run per directory
def test_a_run_directory_being_written_is_refused_to_a_second_run(tmp_path, fake_rounds):
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(out):
        with pytest.raises(RunConflictError) as err:
            Run(RunSpec(**TINY, rounds=1, seed=1), out, log=quiet).run()
    message = str(err.value)
    assert str(out) in message and f"pid {os.getpid()}" in message
    assert "another output directory" in message
    assert not (out / RUN_JSON).exists(), "the refused run wrote nothing"
    # released: the same run now goes ahead
    assert Run(RunSpec(**TINY, rounds=1, seed=1), out, log=quiet).run()["status"] == "complete"


def test_the_lock_of_a_killed_run_is_released(tmp_path):
    """flock dies with its process (kill -9 included), so a killed run resumes."""
    out = tmp_path / "run"
    out.mkdir()
    code = (
        "import sys, time; from fedkd.engine.run_outputs import RunLock; "
        f"RunLock({str(out)!r}).acquire(); print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunConflictError, match=f"pid {holder.pid}"):
            RunLock(out).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunLock(out)
    lock.acquire()
    assert str(os.getpid()) in (out / LOCK).read_text()
    lock.release()


def test_a_file_system_without_locks_lets_the_run_go_on_with_a_warning(tmp_path, monkeypatch):
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with RunLock(tmp_path) as lock:
        assert lock.unsupported and "No locks available" in lock.unsupported
    # a whole run on such a file system: it trains to the end and says it could not lock
    lines: list[str] = []
    out = tmp_path / "run"
    assert Run(RunSpec(**TINY, rounds=1), out, log=lines.append).run()["status"] == "complete"
    warnings = [line for line in lines if "cannot be locked" in line]
    assert len(warnings) == 1 and "No locks available" in warnings[0] and str(out) in warnings[0]


@pytest.mark.slow
def test_two_runs_started_together_on_one_directory_one_is_refused(tmp_path):
    """Before the lock both ended "complete" and the directory held one of them."""
    out = str(tmp_path / "run")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fedkd",
                "train",
                "--out",
                out,
                "--rounds",
                "2",
                "--seed",
                str(seed),
                *TINY_ARGS,
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for seed in (1, 2)
    ]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert out in refused and (
        "being written by another run" in refused or "different spec" in refused
    )
    winner = next(seed for seed, (code, _) in zip((1, 2), results, strict=True) if code == 0)
    record = json.loads((tmp_path / "run" / RUN_JSON).read_text())
    assert record["status"] == "complete" and record["spec"]["seed"] == winner


# --------------------------------------------------------------------------- 6. clear errors
@pytest.mark.parametrize("content", ['{"status": "complete",', "[1, 2]", "\xff\xfe"])
def test_a_damaged_run_record_is_named_with_its_fix_in_train_aggregate_and_status(
    tmp_path, content, capsys
):
    from fedkd.cli import main

    run = tmp_path / "runs" / "mnist5k" / "fedavg" / "x-R3" / "seed0"
    run.mkdir(parents=True)
    (run / RUN_JSON).write_bytes(content.encode("latin-1"))
    fix = f"delete it and run the same `fedkd train --out {run}` command again"
    with pytest.raises(RunRecordError, match="damaged") as err:
        Run(RunSpec(**TINY, rounds=1), run, log=quiet).run()
    assert str(run / RUN_JSON) in str(err.value) and fix in str(err.value)
    assert main(["train", "--out", str(run), "--rounds", "1", *TINY_ARGS]) == 2
    assert fix in capsys.readouterr().err
    with pytest.raises(ReportError, match="damaged") as err:
        aggregate_runs([("fedavg", str(run))])
    assert str(run / RUN_JSON) in str(err.value) and fix in str(err.value)
    progress = collect(tmp_path / "runs")
    assert [p.state for p in progress] == ["damaged"]
    text = report(progress, tmp_path / "runs")
    assert "1 damaged" in text and str(run / RUN_JSON) in text and fix in text


def test_a_deeply_nested_run_record_is_named_not_a_recursion_error(tmp_path, capsys):
    """100,000 `[` in run.json: json.loads would recurse once per level; train and aggregate
    name the file and the fix instead."""
    from fedkd.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_JSON).write_text("[" * 100_000)
    fix = f"delete it and run the same `fedkd train --out {run}` command again"
    with pytest.raises(RunRecordError, match="nested deeper than 50 levels") as err:
        Run(RunSpec(**TINY, rounds=1), run, log=quiet).run()
    assert str(run / RUN_JSON) in str(err.value) and fix in str(err.value)
    assert main(["train", "--out", str(run), "--rounds", "1", *TINY_ARGS]) == 2
    err_text = capsys.readouterr().err
    assert "nested deeper" in err_text and "Traceback" not in err_text
    with pytest.raises(ReportError, match="nested deeper than 50 levels"):
        aggregate_runs([("fedavg", str(run))])


def test_a_full_disk_stops_the_run_with_a_clear_message_and_no_temporary_file(
    tmp_path, fake_rounds, monkeypatch, capsys
):
    from fedkd.cli import main
    from fedkd.engine import checkpoint

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", no_space)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--rounds", "2", *TINY_ARGS]) == 2
    err = capsys.readouterr().err
    assert "no space left on device" in err and "run the same command again" in err
    assert "Traceback" not in err
    assert not list(out.glob("*.tmp")), sorted(p.name for p in out.iterdir())
    record = json.loads((out / RUN_JSON).read_text())
    assert record["status"] == "stopped" and "no space left" in record["error"]
    # space again: the same command finishes the run
    monkeypatch.undo()
    assert Run(RunSpec(**TINY, rounds=2), out, log=quiet).run()["status"] == "complete"


def test_aggregate_and_table_writers_leave_no_temporary_file_on_failure(tmp_path, monkeypatch):
    from test_report import make_run

    run = make_run(tmp_path / "runs", "a", [0.5, 0.6])
    df = aggregate_runs([("fedavg", str(run))])

    def half_parquet(table, file, *args, **kwargs):
        file.write(b"PAR1 half")
        raise OSError(errno.ENOSPC, "No space left on device", getattr(file, "name", None))

    # the aggregate's Parquet writer (page checksums and the values' digest, fedkd.digests)
    monkeypatch.setattr("fedkd.report.aggregate.write_parquet", half_parquet)
    with pytest.raises(OSError, match="No space"):
        write_aggregate(df, tmp_path / "agg.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    monkeypatch.undo()
    write_aggregate(df, tmp_path / "agg.parquet")

    real_fdopen = os.fdopen

    class HalfFile:
        """A file that takes ten bytes, then finds the disk full."""

        def __init__(self, file):
            self.file = file

        def write(self, data):
            self.file.write(data[:10])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    def fdopen(fd, mode="r", *args, **kwargs):
        file = real_fdopen(fd, mode, *args, **kwargs)
        return HalfFile(file) if "w" in mode else file

    monkeypatch.setattr(os, "fdopen", fdopen)
    tables = tmp_path / "tables"
    with pytest.raises(OSError, match="No space"):
        render("grid", tables / "t", aggregate=tmp_path / "agg.parquet")
    monkeypatch.undo()
    assert not list(tables.glob("*.tmp")) and not list(tables.glob("*"))


# --------------------------------------------------------------------------- kills at random moments
def _train_cmd(out: Path, rounds: int) -> list[str]:
    return [sys.executable, "-m", "fedkd", "train", "--out", str(out), "--rounds", str(rounds),
            *TINY_ARGS]  # fmt: skip


@pytest.mark.slow
def test_kills_at_random_moments_then_resumes_end_bit_identical(tmp_path):
    """SIGKILL at random moments (start-up, a round, a checkpoint write, the last record), each
    time the same command again; then the workflow's deletion of a finished job's outputs. The
    metrics equal an uninterrupted run's, and no temporary file is left."""
    rounds = 4
    t0 = time.monotonic()
    subprocess.run(_train_cmd(tmp_path / "full", rounds), env=ENV, check=True, capture_output=True)
    wall = time.monotonic() - t0  # an uninterrupted run, start-up included
    full = read_metrics(tmp_path / "full" / METRICS)
    out = tmp_path / "killed"
    rng = random.Random(20)
    kills = 0
    for _ in range(10):
        proc = subprocess.Popen(
            _train_cmd(out, rounds), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            # within the first 60 % of a fresh run's time: a resumed run, with less to do, may
            # finish first (then the loop ends)
            proc.wait(timeout=rng.uniform(0.1, 0.6) * wall)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            continue
        assert proc.returncode == 0
        break
    else:  # killed every time: once more, to the end
        last = subprocess.run(_train_cmd(out, rounds), env=ENV, capture_output=True, text=True)
        assert last.returncode == 0, last.stderr
    assert kills >= 1, "the run finished before any kill"
    cols = ["round", "test_acc", "test_loss", "train_loss", "val_acc"]
    pd.testing.assert_frame_equal(read_metrics(out / METRICS)[cols], full[cols])
    assert not list(out.glob("*.tmp"))
    # the workflow deletes the outputs of a job it saw interrupted: the checkpoint brings them back
    for name in (METRICS, RUN_JSON):
        (out / name).unlink()
    done = subprocess.run(_train_cmd(out, rounds), env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(read_metrics(out / METRICS)[cols], full[cols])
    assert json.loads((out / RUN_JSON).read_text())["status"] == "complete"
    assert not math.isnan(full["test_acc"].iloc[-1])


def test_report_json_values_are_read_within_the_depth_bound(tmp_path):
    """A render's options and a partition file's metadata are JSON read within values.MAX_DEPTH:
    100,000 nested brackets are refused in one ReportError naming the source, not a
    RecursionError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fedkd.report.figures.partition import read_partition_counts
    from fedkd.report.options import load_options

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ReportError, match="deeper than"):
        load_options(deep)
    path = tmp_path / "partition.parquet"
    table = pa.table({"client": [0, 1], "label": [0, 1]})
    pq.write_table(table.replace_schema_metadata({"fedkd": deep}), path)
    with pytest.raises(ReportError, match=f"{path}.*deeper than"):
        read_partition_counts(path)
