"""`fedkd status` tells a running run from a stopped one by its process: a live process keeps a
run running through a long round, one that is gone (or a pid that another program or another
start took) does not, and an older record without a start time runs unverified."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedkd.runtime import processes
from fedkd.runtime.processes import is_same_process, process_identity
from fedkd.tools.status import collect, report
from test_status import SETTING, make_run


def test_a_recent_round_keeps_a_long_run_running(tmp_path):
    """run.json is written when a run starts and ends; its metrics after every round."""
    root = tmp_path / "runs"
    run = make_run(root, "fedavg", "running", 2, age=3600)
    now = time.time()
    os.utime(run / "metrics.parquet", (now, now))
    assert [r.state for r in collect(root)] == ["running"]


def started(proc: subprocess.Popen, word: bytes) -> subprocess.Popen:
    """``proc`` once /proc shows its command line (Popen returns as the exec begins, a moment
    before the kernel shows the new one)."""
    deadline = time.monotonic() + 10
    while word not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the process never showed its command line"
        time.sleep(0.01)
    return proc


def sleeper() -> subprocess.Popen:
    # "fedkd" in its command line, as a training process has
    cmd = [sys.executable, "-c", "import time; time.sleep(60)", "fedkd"]
    return started(subprocess.Popen(cmd), b"fedkd")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_run_whose_process_is_gone_is_stopped_at_once(tmp_path, how):
    root = tmp_path / "runs"
    proc = sleeper()
    try:
        make_run(root, "fedavg", "running", 2, process=process_identity(proc.pid))
        # on another host the process cannot be seen: its last round decides
        make_run(root, "fedprox", "running", 2, process={"host": "elsewhere", "pid": proc.pid})
        assert [r.state for r in collect(root)] == ["running", "running"]
        assert "unverified" not in report(collect(root), root)
    finally:
        proc.send_signal(how)
        proc.wait()
    states = {r.path.split("/")[1]: r.state for r in collect(root)}
    assert states == {"fedavg": "stopped", "fedprox": "running"}
    text = report(collect(root), root)
    assert "stopped  mnist5k/fedavg" in text and "re-run the workflow to resume" in text
    # nothing in flight: the training left, not a time to wait
    assert "ETA: ~6 s of training left (1 run, none running now)" in report(
        [r for r in collect(root) if r.state == "stopped"], root
    )


def test_a_live_process_keeps_its_run_running_through_a_long_round(tmp_path):
    """A first round longer than --stale-after (a ResNet-50 round) on this host: its process
    still runs, so the run is running; the time without a round decides only where the process
    cannot be seen (another host)."""
    root = tmp_path / "runs"
    proc = sleeper()
    try:
        identity = process_identity(proc.pid)
        make_run(root, "fedavg", "running", 0, age=3600, process=identity)
        make_run(root, "fedprox", "running", 0, age=3600, process={**identity, "host": "elsewhere"})
        states = {r.path.split("/")[1]: r.state for r in collect(root)}
        assert states == {"fedavg": "running", "fedprox": "stopped"}
    finally:
        proc.kill()
        proc.wait()


def test_a_live_pid_started_at_another_time_is_not_the_run(tmp_path):
    """The pid of a killed run handed to a later process (with fedkd in its command line, too):
    its start time differs from the recorded one, so the run is stopped, not running."""
    root = tmp_path / "runs"
    proc = sleeper()
    try:
        identity = process_identity(proc.pid)
        assert isinstance(identity["start"], int) and identity["host"] == socket.gethostname()
        assert is_same_process(identity) is True
        make_run(root, "fedavg", "running", 2, process=identity)
        make_run(
            root, "fedprox", "running", 2, process={**identity, "start": identity["start"] - 1}
        )
        states = {r.path.split("/")[1]: r.state for r in collect(root)}
        assert states == {"fedavg": "running", "fedprox": "stopped"}
        assert is_same_process({**identity, "boot": "another boot"}) is False, "rebooted since"
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_process_not_yet_reaped_is_gone():
    proc = sleeper()
    identity = process_identity(proc.pid)
    proc.kill()
    try:
        deadline = time.monotonic() + 10
        while processes.process_stat(proc.pid)[0] != "Z":  # killed, its parent not told yet
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert is_same_process(identity) is False
    finally:
        proc.wait()
    assert is_same_process(identity) is False


def test_an_older_record_without_start_time_runs_unverified(tmp_path):
    root = tmp_path / "runs"
    proc = sleeper()
    try:
        make_run(root, "fedavg", "running", 2,
                 process={"host": socket.gethostname(), "pid": proc.pid})  # fmt: skip
        progress = collect(root)
        assert [(r.state, r.unverified) for r in progress] == [("running", True)]
        assert "(process unverified: its run.json predates recorded start times)" in report(
            progress, root
        )
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_taken_by_another_program_is_not_the_run(tmp_path):
    root = tmp_path / "runs"
    # alive, and no fedkd in its command line ("sleep 60"; the test runner's own names fedkd
    # when the checkout or its virtual environment lies in a folder so named)
    proc = started(subprocess.Popen(["sleep", "60"]), b"sleep")
    try:
        assert b"fedkd" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        make_run(root, "fedavg", "running", 2,
                 process={"host": socket.gethostname(), "pid": proc.pid})  # fmt: skip
        assert [r.state for r in collect(root)] == ["stopped"]
    finally:
        proc.kill()
        proc.wait()


def test_the_start_time_is_read_after_the_command_names_last_parenthesis(tmp_path, monkeypatch):
    # field 2 is the command name in parentheses, which may hold ") " itself
    fields = ["S", *map(str, range(4, 22)), "123456", "999"]  # fields 3..23, 22 = start
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text(f"42 (a) 1 2 (b) {' '.join(fields)}\n")
    monkeypatch.setattr(processes, "PROC", tmp_path)
    assert processes.process_stat(42) == ("S", 123456)
    assert processes.process_stat(43) is None, "no such process"
    (tmp_path / "44").mkdir()
    (tmp_path / "44" / "stat").write_text("44 (truncated")
    assert processes.process_stat(44) is None


@pytest.mark.parametrize(
    "record", [[1], None, {"pid": 2**80}, {"pid": True}, {"pid": "1"}, {"pid": 0}, {"pid": -1}]
)
def test_a_record_that_is_no_process_identity_cannot_tell(record):
    if isinstance(record, dict):
        record = {"host": socket.gethostname(), **record}
    assert is_same_process(record) is None


def test_a_run_killed_before_its_first_checkpoint_has_no_round_done(tmp_path):
    """A kill in round 1 after its metrics were written but before its checkpoint: run.json's 0
    rounds done is what the run resumes from (all 5 rounds again), not the metrics' one row."""
    root = tmp_path / "runs"
    run = make_run(root, "fedavg", "running", 1, seconds=2.0, age=3600)
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "rounds_done": 0}))
    os.utime(run / "run.json", (time.time() - 3600,) * 2)
    progress = collect(root)
    assert [(r.state, r.rounds_done, r.rounds_left) for r in progress] == [("stopped", 0, 5)]
    text = report(progress, root)
    assert f"stopped  mnist5k/fedavg/{SETTING}/seed0  round 0/5, 2.0 s/round" in text
    assert "ETA: ~10 s of training left (1 run, none running now)" in text


def test_a_temporary_file_renamed_while_status_lists_it_is_no_damage(tmp_path, monkeypatch):
    """On another host a run's last write decides; a write's temporary file that the training
    renames between status's listing of the folder and its look at the file leaves the run
    running, not damaged (once in about a thousand reads under steady writes)."""
    root = tmp_path / "runs"
    run = make_run(root, "fedavg", "running", 2, process={"host": "elsewhere", "pid": 1})
    (run / "metrics.parquet.0123456789ab.tmp").write_bytes(b"")
    is_file = Path.is_file

    def renamed_after_the_check(path: Path) -> bool:
        found = is_file(path)
        if path.name.endswith(".tmp"):
            path.unlink()  # the writer's rename, just after the check
        return found

    monkeypatch.setattr(Path, "is_file", renamed_after_the_check)
    progress = collect(root)
    assert [(r.state, r.problem) for r in progress] == [("running", None)]
