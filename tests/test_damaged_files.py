"""A run's files damaged or replaced: a metrics.parquet cut short, holding fewer rounds than
run.json records, or a directory, a FIFO or a device in a file's place; and a run stopped with
Ctrl-C. `fedkd status` names such a run as damaged with the fix, `fedkd aggregate` refuses it,
`fedkd train` rebuilds the metrics from the checkpoint (or refuses when there is none), and none
of them waits on a FIFO or reads a device. The commands reading a FIFO run in a subprocess with a
timeout, so that a reader that waits on it fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fedkd.config import RunSpec
from fedkd.engine.run import Run
from fedkd.engine.run_outputs import read_metrics
from fedkd.files import CHECKPOINT, METRICS, RUN_JSON, MetricsError, RunRecordError
from fedkd.report import ReportError, aggregate_runs
from fedkd.tools.status import collect, report
from small_runs import ENV, TINY, TINY_ARGS

TIMEOUT = 30  # seconds: a command that reads a FIFO would wait for ever


def fedkd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedkd", *args], env=ENV, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip


def cut_short(path: Path) -> None:
    """The file's first 1,000 bytes, as a copy interrupted midway leaves it."""
    path.write_bytes(path.read_bytes()[:1000])


def first_round_only(path: Path) -> None:
    metrics = pd.read_parquet(path)
    metrics.iloc[:1].to_parquet(path)


def into_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()  # pyarrow reads an empty directory as an empty table


DAMAGE = {
    "cut short": cut_short,
    "the first round only": first_round_only,
    "a directory": into_directory,
}


def status_run(root: Path, variant: str, status: str, rounds_done: int) -> Path:
    """A run folder as training leaves it, with its checkpoint (five rounds planned)."""
    from test_status import make_run

    run = make_run(root, variant, status, rounds_done)
    (run / CHECKPOINT).write_bytes(b"a checkpoint")
    return run


# --------------------------------------------------------------------------- status
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_status_names_a_finished_runs_damaged_metrics_and_the_fix(tmp_path, damage):
    root = tmp_path / "runs"
    status_run(root, "fedavg", "complete", 5)
    bad = status_run(root, "moon", "complete", 5)
    DAMAGE[damage](bad / METRICS)
    progress = collect(root)
    assert [p.state for p in progress] == ["done", "damaged"]
    text = report(progress, root)
    assert text.startswith(f"{root}: 1 of 2 runs done, 0 running, 1 damaged\n"), text
    line = next(line for line in text.splitlines() if "damaged  " in line)
    assert str(bad / METRICS) in line
    assert f"delete it and run the same `fedkd train --out {bad}` command again" in line
    assert "rebuilds it from checkpoint.pt" in line
    if damage == "the first round only":
        assert "holds 1 round, fewer than the 5 its run.json records as done" in line


def test_status_and_aggregate_name_a_finished_run_without_metrics_and_the_fix(tmp_path):
    """status counted a complete run with no metrics.parquet as done, though the report cannot
    use it; aggregate refused it without the fix. Training writes it again from the checkpoint."""
    root = tmp_path / "runs"
    status_run(root, "fedavg", "complete", 5)
    bad = status_run(root, "moon", "complete", 5)
    (bad / METRICS).unlink()
    still = status_run(root, "scaffold", "running", 2)
    (still / METRICS).unlink()  # a run still training has not written it yet: running
    progress = collect(root)
    assert [p.state for p in progress] == ["done", "damaged", "running"]
    text = report(progress, root)
    fix = f"{bad / METRICS} is missing; run the same `fedkd train --out {bad}` command again"
    assert f"damaged  {fix}: it rebuilds it from checkpoint.pt" in text, text
    # a diverged run is finished too: its rounds are what the at-rounds tables count
    failed = status_run(root, "fedprox", "diverged", 3)
    (failed / METRICS).unlink()
    assert [p.state for p in collect(root)] == ["done", "damaged", "damaged", "running"]
    for status in ("complete", "diverged"):
        run = aggregate_run(tmp_path, f"gone-{status}")
        record = json.loads((run / RUN_JSON).read_text())
        (run / RUN_JSON).write_text(json.dumps({**record, "status": status}))
        (run / METRICS).unlink()
        with pytest.raises(ReportError) as err:
            aggregate_runs([("fedavg", str(run))])
        assert str(err.value) == (
            f"run {run} (label 'fedavg'): {run / METRICS} is missing; run the same "
            f"`fedkd train --out {run}` command again: it rebuilds it from checkpoint.pt"
        )


def test_status_keeps_a_running_runs_damaged_metrics_running(tmp_path):
    """A run still training writes its metrics again after every round and at its end."""
    root = tmp_path / "runs"
    cut_short(status_run(root, "fedavg", "running", 2) / METRICS)
    assert [p.state for p in collect(root)] == ["running"]


def test_status_reads_no_fifo_or_device_in_a_files_place(tmp_path):
    root = tmp_path / "runs"
    status_run(root, "fedavg", "complete", 5)
    fifo = status_run(root, "fedprox", "complete", 5) / METRICS
    fifo.unlink()
    os.mkfifo(fifo)
    device = status_run(root, "moon", "complete", 5) / METRICS
    device.unlink()
    device.symlink_to("/dev/zero")
    record = status_run(root, "scaffold", "running", 2) / RUN_JSON
    record.unlink()
    os.mkfifo(record)
    done = fedkd("status", "--runs", str(root))
    assert done.returncode == 0, done.stderr
    assert "1 of 4 runs done, 0 running, 3 damaged" in done.stdout
    assert f"{fifo} is a FIFO, not a metrics file; delete it" in done.stdout
    assert f"{device} is a device, not a metrics file; delete it" in done.stdout
    assert f"{record} is a FIFO, not a run record; remove it" in done.stdout


# --------------------------------------------------------------------------- aggregate
def aggregate_run(root: Path, name: str) -> Path:
    """A run folder as training leaves it for the report: two rounds done, a checkpoint."""
    from report_runs import make_run

    run = make_run(root, name, [0.3, 0.5])
    record = json.loads((run / RUN_JSON).read_text())
    (run / RUN_JSON).write_text(json.dumps({**record, "rounds_done": 2}))
    (run / CHECKPOINT).write_bytes(b"a checkpoint")
    return run


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_aggregate_refuses_damaged_metrics_naming_the_run_and_the_fix(tmp_path, damage):
    good = aggregate_run(tmp_path, "good")
    bad = aggregate_run(tmp_path, "bad")
    DAMAGE[damage](bad / METRICS)
    with pytest.raises(ReportError) as err:
        aggregate_runs([("fedavg", str(good)), ("fedavg", str(bad))])
    message = str(err.value)
    assert message.startswith(f"run {bad} (label 'fedavg'): {bad / METRICS} is ")
    fix = f"delete it and run the same `fedkd train --out {bad}` command again"
    assert f"{fix}: it rebuilds it from checkpoint.pt" in message
    if damage == "the first round only":
        assert "holds 1 round, fewer than the 2 its run.json records as done" in message
    (bad / CHECKPOINT).unlink()
    with pytest.raises(ReportError, match="with no checkpoint.pt to rebuild it from, it trains"):
        aggregate_runs([("fedavg", str(bad))])


def test_aggregate_reads_no_fifo_in_a_files_place(tmp_path):
    record = aggregate_run(tmp_path, "record") / RUN_JSON
    record.unlink()
    os.mkfifo(record)
    metrics = aggregate_run(tmp_path, "metrics") / METRICS
    metrics.unlink()
    os.mkfifo(metrics)
    runs_file = tmp_path / "runs.txt"
    os.mkfifo(runs_file)
    out = str(tmp_path / "agg.parquet")
    for args, named in (
        (["--run", f"x={record.parent}"], f"{record} is a FIFO, not a run record; remove it"),
        (["--run", f"x={metrics.parent}"], f"{metrics} is a FIFO, not a metrics file; delete it"),
        (["--runs-file", str(runs_file)], f"{runs_file} is a FIFO, not a runs file"),
    ):
        done = fedkd("aggregate", "-o", out, *args)
        assert done.returncode == 2 and named in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- train
def quiet(msg: str) -> None:
    pass


def finished_run(out: Path) -> tuple[RunSpec, pd.DataFrame]:
    spec = RunSpec(**TINY, rounds=2)
    assert Run(spec, out, log=quiet).run()["status"] == "complete"
    return spec, read_metrics(out / METRICS)


@pytest.mark.parametrize("damage", ["cut short", "the first round only"])
def test_train_rebuilds_a_finished_runs_damaged_metrics_from_the_checkpoint(
    tmp_path, fake_rounds, damage
):
    out = tmp_path / "run"
    spec, rows = finished_run(out)
    DAMAGE[damage](out / METRICS)
    said = []
    record = Run(spec, out, log=said.append).run()
    assert record["status"] == "complete" and record["rounds_done"] == 2
    pd.testing.assert_frame_equal(read_metrics(out / METRICS), rows)
    assert f"[fedkd] {out / METRICS} is damaged (" in said[0]
    assert said[0].endswith("; rebuilding it from checkpoint.pt")
    assert sum("rebuilding" in line for line in said) == 1, said
    # and then it is complete: nothing to do
    said.clear()
    Run(spec, out, log=said.append).run()
    assert said == [f"[fedkd] {out}: already complete, nothing to do"]


def test_train_refuses_an_unreadable_record_until_it_is_deleted_then_makes_it_again(
    tmp_path, fake_rounds
):
    """An edited run.json is made again from the checkpoint (tests/test_bit_flips.py); one that
    cannot be read is refused with the fix, and once deleted the same command writes it again."""
    out = tmp_path / "run"
    spec, rows = finished_run(out)
    record = json.loads((out / RUN_JSON).read_text())
    (out / RUN_JSON).write_bytes(b"\xf3" + (out / RUN_JSON).read_bytes()[1:])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RunRecordError) as err:
        Run(spec, out, log=quiet).run()
    assert str(err.value).startswith(f"{out / RUN_JSON} is damaged (not UTF-8 text")
    assert f"delete it and run the same `fedkd train --out {out}` command again" in str(err.value)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    (out / RUN_JSON).unlink()
    assert Run(spec, out, log=quiet).run()["summary"] == record["summary"]
    pd.testing.assert_frame_equal(read_metrics(out / METRICS), rows)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_train_without_a_checkpoint_to_rebuild_from_refuses_and_touches_nothing(
    tmp_path, fake_rounds, damage
):
    out = tmp_path / "run"
    spec, _ = finished_run(out)
    if damage != "a directory":  # a directory cannot be written over: refused, checkpoint or not
        (out / CHECKPOINT).unlink()
    DAMAGE[damage](out / METRICS)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(MetricsError) as err:
        Run(spec, out, log=quiet).run()
    message = str(err.value)
    assert message.startswith(f"{out / METRICS} is ")
    assert f"delete it and run the same `fedkd train --out {out}` command again" in message
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert (out / METRICS).is_dir() == (damage == "a directory")


def test_train_names_the_damaged_metrics_in_one_line(tmp_path, fake_rounds, capsys):
    from fedkd.cli import main

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--rounds", "2", *TINY_ARGS]) == 0
    (out / CHECKPOINT).unlink()
    cut_short(out / METRICS)
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--rounds", "2", *TINY_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedkd train: error: {out / METRICS} is damaged (not a readable Parquet")
    assert "with no checkpoint.pt to rebuild it from, it trains the run anew" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- Ctrl-C
@pytest.fixture
def ctrl_c_in_round_2(monkeypatch, fake_rounds):
    """The second round is interrupted as Ctrl-C interrupts it (SIGINT: KeyboardInterrupt)."""
    fake_round = Run._round

    def interrupted(self, r: int) -> dict:
        if r == 1:
            raise KeyboardInterrupt
        return fake_round(self, r)

    monkeypatch.setattr(Run, "_round", interrupted)


def test_ctrl_c_records_the_rounds_done_and_says_how_to_resume(tmp_path, ctrl_c_in_round_2):
    out = tmp_path / "runs" / "mnist5k" / "fedavg" / "x-R3" / "seed0"
    spec = RunSpec(**TINY, rounds=3)
    said = []
    with pytest.raises(KeyboardInterrupt):
        Run(spec, out, log=said.append).run()
    assert said[-1] == (
        f"[fedkd] {out}: stopped after round 1 of 3; run the same command again to resume"
    )
    record = json.loads((out / RUN_JSON).read_text())
    assert record["status"] == "stopped" and record["rounds_done"] == 1
    assert "interrupted" in record["error"]
    text = report(collect(tmp_path / "runs"), tmp_path / "runs")
    assert "stopped  mnist5k/fedavg/x-R3/seed0  round 1/3" in text
    # as a workflow job leaves it: Snakemake removes a failed job's outputs, and the job's log
    # ends in the line above, which `fedkd status` reads for the rounds done (a moment ago)
    (out / RUN_JSON).unlink()
    (out / METRICS).unlink()
    log = tmp_path / "logs" / "train" / "mnist5k" / "fedavg" / "x-R3" / "seed0.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(said) + "\n")
    (progress,) = collect(tmp_path / "runs")
    assert (progress.state, progress.rounds_done) == ("stopped", 1), progress


def test_a_stop_just_after_a_checkpoint_is_saved_counts_its_round(tmp_path, monkeypatch,
                                                                  fake_rounds):  # fmt: skip
    """Ctrl-C or SIGTERM between the checkpoint's rename and the run's count of it: run.json
    says the rounds the checkpoint holds (1), not those counted before it was saved (0)."""
    import fedkd.engine.run as run_module

    real_save = run_module.save_checkpoint

    def save_then_stopped(path, state):
        real_save(path, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "save_checkpoint", save_then_stopped)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Run(RunSpec(**TINY, rounds=3), out, log=quiet).run()
    record = json.loads((out / RUN_JSON).read_text())
    assert record["status"] == "stopped" and record["rounds_done"] == 1


def test_a_run_stopped_by_ctrl_c_resumes_after_its_last_round(tmp_path, fake_rounds):
    out = tmp_path / "run"
    spec = RunSpec(**TINY, rounds=3)
    Run(spec, out, log=quiet).run(stop_after_round=1)
    record = json.loads((out / RUN_JSON).read_text())
    (out / RUN_JSON).write_text(json.dumps({**record, "status": "stopped", "rounds_done": 1}))
    said = []
    assert Run(spec, out, log=said.append).run()["status"] == "complete"
    assert f"[fedkd] resuming {out} after round 1/3" in said
    assert read_metrics(out / METRICS)["round"].tolist() == [1, 2, 3]


def test_ctrl_c_through_the_command_exits_130_with_one_line(tmp_path, ctrl_c_in_round_2, capsys):
    from fedkd.cli import main

    out = tmp_path / "run"
    try:
        code = main(["train", "--out", str(out), "--rounds", "3", *TINY_ARGS])
    except KeyboardInterrupt:  # caught here: one escaping a test would end the whole session
        code = "KeyboardInterrupt"
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"[fedkd] {out}: stopped after round 1 of 3; run the same command again to resume"
    )
    assert code == 130


def test_sigterm_records_the_run_as_stopped_as_ctrl_c_does(tmp_path):
    """SIGTERM (a SLURM time limit or scancel, `kill`) ended `fedkd train` at once: run.json
    said "running" with no process behind it, and the log said nothing of where it stopped."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "fedkd", "train", "--out", str(out), "--rounds", "500"]
    proc = subprocess.Popen([*argv, *TINY_ARGS], env=ENV, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / CHECKPOINT).exists():  # a round done, its checkpoint written
            assert proc.poll() is None and time.monotonic() < deadline, "no round was done"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    record = json.loads((out / RUN_JSON).read_text())
    done = record["rounds_done"]
    assert record["status"] == "stopped" and 1 <= done < 500, record
    assert record["error"].startswith("terminated (SIGTERM"), record
    assert read_metrics(out / METRICS)["round"].tolist() == list(range(1, done + 1))
    assert err.splitlines()[-1] == (
        f"[fedkd] {out}: stopped after round {done} of 500; run the same command again to resume"
    )
    assert "Traceback" not in err


# --------------------------------------------------------------------------- render's inputs
def test_an_options_file_or_a_partition_that_is_a_fifo_is_refused_unread(tmp_path):
    """`fedkd render --options @FILE`, the partition readers and the aggregate reader opened a
    FIFO and waited for a writer forever; each now refuses it by name (a subprocess, so a
    regression times out)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import sys\n"
        "from fedkd.data.partition import read_partition\n"
        "from fedkd.report.aggregate import read_aggregate\n"
        "from fedkd.report.figures.partition import read_partition_counts\n"
        "from fedkd.report.options import load_options\n"
        "for read in (lambda: load_options('@' + sys.argv[1]), lambda: read_partition(sys.argv[1]),\n"
        "             lambda: read_partition_counts(sys.argv[1]), lambda: read_aggregate(sys.argv[1])):\n"
        "    try:\n"
        "        read()\n"
        "    except ValueError as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    options, partition, figure, aggregate = done.stdout.splitlines()
    assert options == f"options file {fifo} cannot be read: {fifo} is a FIFO, not an options file"
    assert partition.startswith(f"partition file {fifo} cannot be read as a partition: ")
    assert partition.endswith(
        f"{fifo} is a FIFO, not a partition file; delete it and run the workflow (or `fedkd "
        "partition`) again to write it anew"
    )
    assert figure == f"partition file {fifo} cannot be read: {fifo} is a FIFO, not a partition file"
    assert aggregate == (
        f"aggregate file {fifo} cannot be read: {fifo} is a FIFO, not an aggregate file"
    )


def test_a_file_that_grows_after_its_size_is_read_is_read_whole_or_refused(tmp_path, monkeypatch):
    """read_regular_file reads the size fstat gives, then what the file has grown by since, up to
    one byte past the limit: all of it while under the limit, refused past it."""
    import fedkd.files as files

    path = tmp_path / "grows"
    path.write_bytes(bytes(range(200)) * 30)  # 6,000 bytes, of which fstat will report 100
    data = path.read_bytes()
    real_stat, real_fstat = os.stat, os.fstat

    def before_growth(real):
        def status(target, *args, **kwargs):
            info = real(target, *args, **kwargs)
            return os.stat_result((*info[:6], 100, *info[7:10]))

        return status

    monkeypatch.setattr(files, "READ_CHUNK", 1_000)  # the growth is read in several chunks
    monkeypatch.setattr(files.os, "stat", before_growth(real_stat))
    monkeypatch.setattr(files.os, "fstat", before_growth(real_fstat))
    assert files.read_regular_file(path, "a test file", 6_000) == data
    with pytest.raises(
        files.UnreadableFileError, match="damaged \\(more than a test file's 5,999 b"
    ):
        files.read_regular_file(path, "a test file", 5_999)
