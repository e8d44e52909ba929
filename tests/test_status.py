"""`fedkd status`: counts of done / running / stopped / failed / not started runs, each running
run's progress and an ETA, from run.json and metrics.parquet alone (no training here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.cli import main
from fedkd.pipeline import Plan
from fedkd.run_paths import parse_run_dir, parse_setting
from fedkd.runtime.processes import process_identity
from fedkd.tools import run_progress
from fedkd.tools.status import StatusError, collect, eta_seconds, planned_runs, report, status_main

REPO = Path(__file__).resolve().parents[1]

SETTING = "dirichlet-equal-a1-K10-C0.2-E1-R5"


def record_for(run: Path | str, **fields) -> dict:
    """A run record whose spec and variant are those its path names (results/runs/DATASET/
    VARIANT/SETTING/seedN), with ``fields``."""
    keys = parse_run_dir(str(run))
    spec = {**parse_setting(keys["setting"]), "dataset": keys["dataset"], "seed": int(keys["seed"])}
    return {"spec": spec, "labels": {"variant": keys["variant"]}, **fields}


def path_spec(seed: int = 0) -> dict:
    """The spec of the run a path mnist5k/VARIANT/SETTING/seedN names (its status checks it)."""
    return {**parse_setting(SETTING), "dataset": "mnist5k", "seed": seed}


def make_run(root: Path, variant: str, status: str, rounds_done: int, seconds: float = 2.0,
             age: float = 0.0, seed: int = 0, process: dict | None = None) -> Path:  # fmt: skip
    """A run folder as training leaves it, last written ``age`` seconds ago."""
    run = root / "mnist5k" / variant / SETTING / f"seed{seed}"
    run.mkdir(parents=True)
    then = time.time() - age
    updated = datetime.fromtimestamp(then, UTC).isoformat(timespec="seconds")
    record = {"status": status, "spec": path_spec(seed), "labels": {"variant": variant},
              "rounds_done": rounds_done, "updated": updated}  # fmt: skip
    if process is not None:
        record["process"] = process
    (run / "run.json").write_text(json.dumps(record))
    rounds = list(range(1, rounds_done + 1))
    pd.DataFrame(
        {"round": rounds, "test_acc": [0.1 * r for r in rounds], "seconds": [seconds] * len(rounds)}
    ).to_parquet(run / "metrics.parquet")
    for f in run.iterdir():
        os.utime(f, (then, then))
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
    assert "1 of 4 runs done, 1 running, 1 stopped, 1 failed" in text
    assert f"running  mnist5k/fedprox/{SETTING}/seed0  round 2/5, 3.0 s/round, ~9 s left" in text
    assert "re-run the workflow to resume" in text
    assert "fedgen" in text and "diverged after round 2" in text


def test_a_run_that_recorded_an_error_is_failed_with_it_and_left_to_rerun(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "fedavg", "complete", 5)
    gone = {**process_identity(os.getpid()), "start": process_identity(os.getpid())["start"] - 1}
    crashed = make_run(root, "moon", "failed", 3, seconds=2.0, process=gone)
    record = json.loads((crashed / "run.json").read_text())
    record["error"] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    (crashed / "run.json").write_text(json.dumps(record))
    progress = collect(root)
    assert {r.path.split("/")[1]: r.state for r in progress} == {"fedavg": "done", "moon": "failed"}
    text = report(progress, root)
    assert "1 of 2 runs done, 0 running, 1 failed" in text
    assert (
        f"failed   mnist5k/moon/{SETTING}/seed0  after round 3: RuntimeError: CUDA error: an "
        "illegal memory access was encountered; fix the cause, then re-run the workflow" in text
    )
    # it trains again once fixed: its 2 rounds left count, where a diverged run's do not
    assert "ETA: ~4 s of training left (1 run, none running now)" in text


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
    assert main(["status", "--runs", str(runs)]) == 0
    assert "1 of 4 runs done, 1 running" in capsys.readouterr().out
    assert main(["status", str(runs)]) == 0, "a folder given as before targets: the runs folder"
    assert "1 of 4 runs done, 1 running" in capsys.readouterr().out
    assert main(["status", "--runs", str(tmp_path / "nope")]) == 2
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
    planned = len(Plan(yaml.safe_load((repo / "config" / "tiny.yaml").read_text())).all_runs())
    assert f"0 of {planned} runs done, 0 running, {planned} not started" in out
    assert main(["status", "--configfile", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read --configfile" in capsys.readouterr().err


DAMAGED = {
    # a field of another type than training writes: (run.json text, the reason named)
    "updated is a number": ('{"status": "running", "updated": 5}', "updated is 5, not an ISO"),
    "updated is no date": ('{"status": "running", "updated": "soon"}', "updated is 'soon'"),
    "process is a list": ('{"status": "running", "process": [1]}', "process is [1], not an obj"),
    "a huge pid": (
        f'{{"status": "running", "process": {{"pid": {2**80}}}}}',
        f"process.pid is {2**80}, not a process id",
    ),  # fmt: skip
    "spec is text": ('{"status": "complete", "spec": "x"}', "spec is 'x', not the run's spec"),
    "rounds is text": (
        '{"status": "complete", "spec": {"rounds": "abc"}}',
        "spec.rounds is 'abc', not a count",
    ),  # fmt: skip
    "status is a number": ('{"status": 3}', "status is 3, not a text"),
    "rounds_done negative": ('{"status": "running", "rounds_done": -2}', "rounds_done is -2"),
    # more rounds than a float holds would overflow the ETA
    "rounds beyond any run": (
        '{"status": "running", "spec": {"rounds": 1%s}}' % ("0" * 400),
        f"spec.rounds is 1{'0' * 39}... (401 characters), not a count",
    ),  # fmt: skip
    "invalid JSON": ('{"status": "complete",', "not valid JSON"),
    "nested 100k deep": ("[" * 100_000, "deep"),
    "an empty file": ("", "not valid JSON"),
}


def _damaged_line(text: str, path: Path) -> str:
    named = [line for line in text.splitlines() if str(path) in line]
    assert len(named) == 1, text
    return named[0]


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_run_record_is_named_and_the_other_runs_counted(tmp_path, case):
    content, reason = DAMAGED[case]
    root = tmp_path / "runs"
    make_run(root, "fedavg", "complete", 5)
    make_run(root, "fedprox", "running", 2, seconds=3.0)
    bad = make_run(root, "moon", "running", 1) / "run.json"
    bad.write_text(content)
    progress = collect(root)
    assert [r.state for r in progress] == ["done", "running", "damaged"]
    text = report(progress, root)
    assert text.startswith(f"{root}: 1 of 3 runs done, 1 running, 1 damaged\n"), text
    line = _damaged_line(text, bad)
    assert line.startswith("  damaged  ") and reason in line and "damaged (" in line, line
    assert len(line) < 2 * len(str(bad)) + 250, "the reason in brief, not the whole value"
    assert "ETA: ~" in text, "the report goes on past the damaged run"


def test_a_folder_named_run_json_and_an_unreadable_one_are_named(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    make_run(root, "fedavg", "complete", 5)
    folder = make_run(root, "moon", "running", 1) / "run.json"
    folder.unlink()
    folder.mkdir()
    unreadable = make_run(root, "fedprox", "running", 1) / "run.json"
    unreadable.chmod(0)
    if os.geteuid() == 0:  # root reads any file: refuse this one as the kernel would
        real_read = run_progress.read_run_record

        def read(path):
            if Path(path) == unreadable:
                raise PermissionError(13, "Permission denied", str(path))
            return real_read(path)

        monkeypatch.setattr(run_progress, "read_run_record", read)
    text = report(collect(root), root)
    assert text.startswith(f"{root}: 1 of 3 runs done, 0 running, 2 damaged\n"), text
    assert "is a directory, not a run record; remove it" in _damaged_line(text, folder)
    assert "cannot be read (Permission denied)" in _damaged_line(text, unreadable)


def test_any_error_reading_one_run_names_it_and_the_report_goes_on(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    make_run(root, "fedavg", "complete", 5)
    broken = make_run(root, "moon", "running", 1)
    real_read = run_progress.read_run

    def read_run(run, *args, **kwargs):
        if run == broken:
            raise MemoryError("no memory left")
        return real_read(run, *args, **kwargs)

    monkeypatch.setattr(run_progress, "read_run", read_run)
    text = report(collect(root), root)
    assert text.startswith(f"{root}: 1 of 2 runs done, 0 running, 1 damaged\n"), text
    assert "cannot be read (MemoryError: no memory left)" in _damaged_line(
        text, broken / "run.json"
    )


def test_targets_count_the_runs_that_target_needs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = REPO / "config" / "tiny.yaml"
    plan = Plan(yaml.safe_load(config.read_text()))
    table3 = sorted({run.removeprefix("results/runs/") for _, run in plan.target_runs("table3")})
    assert planned_runs(config, Path("results/runs"), ["results/tables/table3.tex"]) == table3
    # the comparison and the HTML need the same runs; two targets, their runs once each
    table7 = {run.removeprefix("results/runs/") for _, run in plan.target_runs("table7")}
    both = planned_runs(config, Path("results/runs"),
                        ["results/tables/table3_vs_paper.html", "results/tables/table7.md"])  # fmt: skip
    assert both == sorted(set(table3) | table7) and len(both) > len(table3)
    assert len(planned_runs(config, Path("results/runs"), ["all"])) == len(plan.all_runs())
    # one run of the target done: the rest not started
    done = Path("results/runs") / table3[0]
    done.mkdir(parents=True)
    (done / "run.json").write_text(json.dumps(record_for(done, status="complete")))
    pd.DataFrame({"round": [1], "test_acc": [0.1], "seconds": [2.0]}).to_parquet(
        done / "metrics.parquet"
    )
    args = ["status", "results/tables/table3.tex", "--configfile", str(config)]
    assert main(args) == 0
    out = capsys.readouterr().out
    head = f"results/tables/table3.tex of {config}: 1 of {len(table3)} runs done, 0 running, "
    assert out.startswith(head + f"{len(table3) - 1} not started"), out


def test_a_wrong_target_names_the_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results/runs").mkdir(parents=True)
    config = str(REPO / "config" / "tiny.yaml")
    assert main(["status", "results/tables/table33.tex", "--configfile", config]) == 2
    err = capsys.readouterr().err
    assert "'results/tables/table33.tex'" in err and "results/tables/table3.tex" in err
    # targets without --configfile read config/config.yaml of the folder, as snakemake does
    assert main(["status", "results/tables/table3.tex"]) == 2
    assert "config/config.yaml" in capsys.readouterr().err


def test_without_targets_every_run_found_counts_and_snakemakes_locks_are_not_read(tmp_path,
                                                                                   monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    root = Path("results/runs")
    make_run(root, "fedavg", "complete", 5)
    make_run(root, "fedprox", "running", 2)
    locks = Path(".snakemake/locks")
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/runs/mnist5k/fedgen/x-R5/seed0/run.json\n")
    assert status_main(root).startswith("results/runs: 1 of 2 runs done, 1 running\n")


def test_no_runs_folder_and_nothing_to_plan_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StatusError, match="results/runs does not exist; give the folder"):
        status_main("results/runs")


def test_before_any_run_the_papers_configuration_is_0_of_1254_done(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results/runs here
    assert main(["status", "--configfile", str(REPO / "config" / "paper.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"all outputs of {REPO / 'config' / 'paper.yaml'}: 0 of 1,254 runs "
                          "done, 0 running, 1,254 not started\n"), out  # fmt: skip


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)  # 9**10 values once expanded, in 400 bytes


def test_an_alias_bomb_configfile_is_refused_at_once_through_the_command(tmp_path):
    (tmp_path / "bomb.yaml").write_text(ALIAS_BOMB)
    fedkd = [sys.executable, "-c", "import sys; from fedkd.cli import main; sys.exit(main())"]
    done = subprocess.run([*fedkd, "status", "--configfile", "bomb.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("fedkd status: error: --configfile bomb.yaml expands to more than")
    # the refusal itself (the modules imported) within a second
    started = time.monotonic()
    with pytest.raises(StatusError, match="bomb.yaml expands to more than"):
        status_main(tmp_path / "runs", configfile=tmp_path / "bomb.yaml")
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "content, error",
    [
        ("[" * 100_000, "--configfile c.yaml is nested"),
        ("a: [1, 2", "--configfile c.yaml is not valid YAML: "),
        ("- 1\n- 2\n", "--configfile c.yaml does not hold a mapping of keys"),
        ("a: " + "1" * (2 << 20), "--configfile c.yaml is larger than 1,048,576 bytes"),
        (b"a: \xff", "--configfile c.yaml"),
    ],
    ids=["deep", "bad YAML", "a list", "too large", "not UTF-8"],
)
def test_a_configfile_beyond_the_bounds_is_one_line_error(tmp_path, monkeypatch, capsys,
                                                          content, error):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    if isinstance(content, bytes):
        Path("c.yaml").write_bytes(content)
    else:
        Path("c.yaml").write_text(content)
    assert main(["status", "--configfile", "c.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedkd status: error: {error}") and err.count("\n") == 1, err


def test_a_configfile_that_is_no_file_is_refused_without_reading_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe.yaml")  # reading it would wait for a writer forever
    with pytest.raises(StatusError, match="--configfile pipe.yaml is not a regular file"):
        status_main(configfile="pipe.yaml")
    with pytest.raises(StatusError, match="--configfile . is not a regular file"):
        status_main(configfile=".")


def test_a_configuration_that_cannot_be_planned_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results/runs").mkdir(parents=True)
    broken = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    del broken["defaults"]
    Path("broken.yaml").write_text(yaml.safe_dump(broken))
    assert main(["status", "results/tables/table3.tex", "--configfile", "broken.yaml"]) == 2
    err = capsys.readouterr().err
    assert "--configfile broken.yaml: the configuration has 1 error(s):" in err
    assert "'defaults' is a required property" in err


def test_a_configuration_the_workflow_refuses_is_refused_with_its_errors(tmp_path, capsys,
                                                                          monkeypatch):  # fmt: skip
    """As snakemake -n refuses it (docs/pipeline.md: every reader of a configuration): a misspelt
    key and a value out of range, each named, and no count of runs."""
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    config["defaults"]["clinets"] = config["defaults"].pop("clients")
    config["defaults"]["participation"] = 1.5
    Path("typo.yaml").write_text(yaml.safe_dump(config))
    assert main(["status", "--configfile", "typo.yaml"]) == 2
    err = capsys.readouterr().err
    assert "--configfile typo.yaml: the configuration has 2 error(s):" in err
    assert "'clinets' was unexpected; did you mean 'clients'?" in err
    assert "defaults.participation: 1.5 is greater than the maximum of 1" in err


def test_a_folder_beside_a_configuration_or_targets_is_refused(tmp_path, capsys, monkeypatch):
    """`fedkd status FOLDER` reads the runs found there; beside --configfile or a target a folder
    is no target, and taking it for the runs folder gave wrong counts."""
    monkeypatch.chdir(tmp_path)
    Path("results/runs/mnist5k").mkdir(parents=True)
    config = str(REPO / "config" / "tiny.yaml")
    for argv in (["results/runs/mnist5k", "--configfile", config],
                 ["results/tables/table3.tex", "results/runs/mnist5k"],
                 ["results/runs/mnist5k", "--runs", "results/runs"]):  # fmt: skip
        assert main(["status", *argv]) == 2
        err = capsys.readouterr().err
        assert (
            "results/runs/mnist5k is a folder, not a target; give a runs folder with --runs" in err
        )
    assert main(["status", "results/runs/mnist5k"]) == 0


def _started_without_record(root: Path, log_text: str | None, age: float) -> str:
    """A run folder as a failed job leaves it under the workflow: Snakemake has removed run.json
    and metrics.parquet (a failed job's outputs), the stamp and the checkpoint stay; its job's
    log, if any, last written ``age`` seconds ago."""
    name = f"mnist5k/moon/{SETTING}/seed0"
    run = root / name
    run.mkdir(parents=True)
    (run / ".stamp").write_text("abc\n")
    (run / "checkpoint.pt").write_bytes(b"not read")
    if log_text is not None:
        log = root.parent / "logs" / "train" / f"{name}.log"
        log.parent.mkdir(parents=True)
        log.write_text(log_text)
        then = time.time() - age
        os.utime(log, (then, then))
    return name


@pytest.mark.parametrize(
    ("log_text", "age", "state", "says"),
    [
        ("[workflow] host h\nTraceback (most recent call last):\n  File x\nRuntimeError: CUDA "
         "error: out of memory\n\n", 5, "stopped", "ends: RuntimeError: CUDA error: out of memory"),
        ("[workflow] host h\nfedkd train: error: the dataset cifar10 is not in data/\n", 5,
         "stopped", "ends: fedkd train: error: the dataset cifar10 is not in data/"),
        ("[workflow] host h\n", 3600, "stopped", "ends: [workflow] host h"),
        # a cluster's time limit (SIGTERM) a moment ago: not a job that is starting
        ("[workflow] host h\n[fedkd] round 3/5  acc 0.5\n[fedkd] results/runs/x: stopped after "
         "round 3 of 5; run the same command again to resume\n", 5, "stopped",
         "ends: [fedkd] results/runs/x: stopped after round 3 of 5; run the same command again "
         "to resume"),
        (None, 0, "stopped", "no log says why"),
        # a job that is starting: its log written a moment ago, no error in it
        ("[workflow] host h\n", 5, "running", None),
    ],
)  # fmt: skip
def test_a_run_whose_job_left_no_run_json_is_not_taken_for_not_started(
    tmp_path, log_text, age, state, says
):
    root = tmp_path / "results" / "runs"
    name = _started_without_record(root, log_text, age)
    planned = [name, f"mnist5k/fedavg/{SETTING}/seed0"]
    for progress in (collect(root, planned), collect(root)):  # planned, and found by its folder
        assert progress[0].path == name and progress[0].state == state
    progress = collect(root, planned)
    assert progress[1].state == "not started"
    assert progress[0].rounds_done == (3 if "after round 3" in (log_text or "") else 0)
    text = report(progress, root)
    if says is None:
        assert f"running  {name}  round 0/5, first round" in text
    else:
        log = root.parent / "logs" / "train" / f"{name}.log"
        assert (
            f"stopped  {name}  its last job ended without a run.json (Snakemake removes a failed "
            "job's outputs); " in text
        )
        assert says in text
        if log_text is not None:
            assert f"its log {log} {says}" in text


def test_the_eta_of_runs_that_stop_at_a_target_is_an_upper_bound(tmp_path):
    """A rounds-to-target run (its setting ends -stop<acc>) is counted at its planned rounds,
    though it ends once it reaches the target: the ETA says "at most" and why."""
    root = tmp_path / "runs"
    make_run(root, "fedavg", "running", 2, seconds=3.0)
    planned = [f"mnist5k/fedavg/{SETTING}/seed0", f"mnist5k/moon/{SETTING}-stop0.8/seed0"]
    text = report(collect(root, planned), root)
    # 3 rounds left x 3 s, and the rounds-to-target run's 5 planned rounds at that speed
    assert "ETA: at most ~24 s (2 runs to finish, 1 at a time)" in text
    assert "  1 of them stop once they reach their target accuracy (stop_at_acc)" in text
    assert "at most" not in report(collect(root, planned[:1]), root)


def test_a_run_copied_under_another_runs_path_is_damaged(tmp_path, capsys):
    """A finished run's folder copied to seed 1's path holds seed 0's run: the aggregate
    refuses it, and status does not count it done."""
    root = tmp_path / "results" / "runs"
    run = make_run(root, "fedavg", "complete", 5)
    shutil.copytree(run, run.with_name("seed1"))
    assert main(["status", "--runs", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 runs done" in out and "1 damaged" in out, out
    assert "seed '1' in the path, '0' in run.json" in out, out
