"""Links planted where fedkd writes: at an output, at its temporary file's name, at a run folder,
its lock, its stamp and its log. Every writer goes through fedkd.files.atomic_write, which creates
its temporary file exclusively and refuses an output that is a link: the file the link points to
(outside results/, in a real attack) is left as it was, and the error names the link."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedkd import files
from fedkd.files import SymlinkError, atomic_write
from planted_links import VICTIM_TEXT, plant

# ----------------------------------------------------------------------------- the helper


def test_a_link_at_the_old_temporary_name_is_never_written_through(tmp_path, victim):
    out = tmp_path / "results" / "x.parquet"
    plant(out.with_name("x.parquet.tmp"), victim)
    atomic_write(out, lambda file: file.write(b"new"))
    assert victim.read_bytes() == VICTIM_TEXT
    assert out.read_bytes() == b"new" and not out.is_symlink()


def test_a_link_at_the_temporary_files_random_name_is_passed_over(tmp_path, victim, monkeypatch):
    """The temporary name is random, but even a link planted at the very name drawn is not
    followed: the file is created exclusively (O_EXCL | O_NOFOLLOW), and another name drawn."""
    names = iter(["planted", "planted", "free"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    out = tmp_path / "results" / "run.json"
    plant(out.with_name("run.json.planted.tmp"), victim)
    atomic_write(out, lambda file: file.write(b"{}"))
    assert victim.read_bytes() == VICTIM_TEXT
    assert out.read_bytes() == b"{}"
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.json", "run.json.planted.tmp"]


def test_an_output_that_is_a_link_is_refused_naming_it(tmp_path, victim):
    out = plant(tmp_path / "results" / "table.tex", victim)
    with pytest.raises(SymlinkError, match=rf"{out} is a symbolic link \(to {victim}\)"):
        atomic_write(out, lambda file: file.write(b"new"))
    assert victim.read_bytes() == VICTIM_TEXT and out.is_symlink()
    assert sorted(p.name for p in out.parent.iterdir()) == ["table.tex"], "no temporary left"


def test_a_link_planted_at_the_output_while_it_is_written_is_refused(tmp_path, victim):
    out = tmp_path / "results" / "metrics.parquet"
    out.parent.mkdir()

    def write(file):
        file.write(b"rows")
        out.symlink_to(victim)  # planted meanwhile

    with pytest.raises(SymlinkError, match=str(out)):
        atomic_write(out, write)
    assert victim.read_bytes() == VICTIM_TEXT


# ----------------------------------------------------------------------------- every writer


def _table_doc():
    from fedkd.report.text import Text
    from fedkd.report.writers import TableDoc

    return TableDoc(
        caption="c", label="tab:t", columns=[Text.plain("a")], body=[[Text.plain("1")]],
        n_stub=1, csv=pd.DataFrame({"a": [1]}),
    )  # fmt: skip


def _write_table(out: Path):
    from fedkd.report.writers import write_table

    write_table(_table_doc(), out.with_suffix(""), "t")


def _front_page(out: Path):
    from fedkd.report.agreement import write_front_page

    template = out.parent / "template.rst"
    template.write_text("Front page.\n")
    write_front_page(template, out.parent / "tables", out, stand_in=False)


def _aggregate(out: Path):
    from fedkd.report.aggregate import write_aggregate

    write_aggregate(pd.DataFrame({"run": ["r"], "round": [1]}), out)


def _partition(out: Path):
    from fedkd.data.partition import write_partition

    labels = np.arange(8) % 2
    write_partition(out, np.arange(8) % 2, labels, {"clients": 2, "num_classes": 2})


def _checkpoint(out: Path):
    from fedkd.engine.checkpoint import save_checkpoint

    save_checkpoint(out, {"round": 1})


def _run_json(out: Path):
    from fedkd.engine.run_outputs import write_json

    write_json(out, {"status": "complete"})


def _metrics(out: Path):
    from fedkd.engine.run_outputs import write_metrics

    write_metrics(out, [{"round": 1, "test_acc": 0.5}])


WRITERS = {
    "run.json": _run_json,
    "metrics.parquet": _metrics,
    "checkpoint.pt": _checkpoint,
    "aggregate.parquet": _aggregate,
    "partition.parquet": _partition,
    "front_page.rst": _front_page,
    # every format of a table: the .tex is written first, the .html last
    "t.tex": _write_table,
    "t.html": _write_table,
    "t.csv": _write_table,
    "t.md": _write_table,
}


@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_refuses_a_link_at_its_output_and_ignores_one_at_its_old_temporary_name(
    tmp_path, victim, name
):
    write = WRITERS[name]
    results = tmp_path / "results"
    out = results / name
    plant(out.with_name(name + ".tmp"), victim)  # the fixed name every writer once used
    write(out)
    assert out.is_file() and not out.is_symlink()
    assert victim.read_bytes() == VICTIM_TEXT

    out.unlink()
    plant(out, victim)
    with pytest.raises(SymlinkError, match=rf"{out} is a symbolic link"):
        write(out)
    assert victim.read_bytes() == VICTIM_TEXT
    left = [p.name for p in results.glob("*.tmp") if p.name != name + ".tmp"]
    assert not left, "no temporary file left"


def test_the_writers_all_go_through_atomic_write():
    """No module writes a file by another route: each open for writing, write_text/write_bytes,
    to_parquet, write_table or torch.save to a path is in fedkd.files (downloads aside)."""
    import re

    src = Path(files.__file__).parent
    route = re.compile(
        r"""\bopen\([^)]*["'][wax]b?["']|\.write_(text|bytes)\(|\.to_parquet\([^f]"""
        r"""|pq\.write_table\([^,]+, (?!file|buf)|torch\.save\([^,]+, (?!file|buf)"""
    )
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel in ("files.py", "data/download.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if route.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


# ----------------------------------------------------------------------------- run folders


def test_a_run_folder_that_is_a_link_is_refused_before_anything_is_written(tmp_path, victim):
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    from small_runs import TINY

    elsewhere = victim.parent
    (elsewhere / "checkpoint.pt").write_bytes(VICTIM_TEXT)
    out = plant(tmp_path / "results" / "runs" / "seed0", elsewhere)
    with pytest.raises(SymlinkError, match=rf"{out} is a symbolic link"):
        Run(RunSpec(**TINY, rounds=1, seed=0), out, log=lambda msg: None).run()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["checkpoint.pt", "victim.txt"]
    assert (elsewhere / "checkpoint.pt").read_bytes() == VICTIM_TEXT


def test_a_link_at_a_run_folders_lock_is_refused(tmp_path, victim):
    from fedkd.engine.run_outputs import RunLock

    run = tmp_path / "run"
    plant(run / "run.lock", victim)
    with pytest.raises(SymlinkError, match=rf"{run / 'run.lock'} is a symbolic link"):
        RunLock(run).acquire()
    assert victim.read_bytes() == VICTIM_TEXT


def test_a_link_at_a_gpu_slot_lock_is_not_written_through(tmp_path, victim):
    from fedkd.engine import gpu

    slots = tmp_path / "slots"
    slots.mkdir(mode=0o700)
    plant(slots / "slot0.lock", victim)
    with pytest.raises(OSError, match="slot0.lock"):
        gpu._claim_slot(1, 1, slots)
    assert victim.read_bytes() == VICTIM_TEXT


def test_a_shared_default_gpu_slot_folder_is_refused(tmp_path, monkeypatch):
    from fedkd.engine import gpu

    monkeypatch.setattr(gpu.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = gpu.default_lock_dir()
    folder.mkdir()
    folder.chmod(0o777)  # made first by someone else, for everyone
    with pytest.raises(ValueError, match=rf"{folder} .* writable by others.*FEDKD_GPU_LOCK_DIR"):
        gpu._claim_slot(1, 1, None)


@pytest.mark.slow
@pytest.mark.parametrize("where", [".stamp", "checkpoint.pt", "run folder", "log"])
def test_the_workflow_refuses_a_planted_link_in_a_runs_paths_naming_it(tmp_path, victim, where):
    """The train job's shell writes the run's .stamp, deletes a stale checkpoint.pt and writes
    its log: with a link at any of them (or at the run folder) `snakemake -n` stops, naming it."""
    from test_workflow import TINY, all_runs, freeze_sources, read_config, snakemake

    workdir = tmp_path / "work"
    src = freeze_sources(tmp_path / "src")
    run = sorted(all_runs(read_config(TINY)))[0]
    log = "results/logs/train/" + run.removeprefix("results/runs/") + ".log"
    link = {
        ".stamp": workdir / run / ".stamp",
        "checkpoint.pt": workdir / run / "checkpoint.pt",
        "run folder": workdir / run,
        "log": workdir / log,
    }[where]
    plant(link, victim if where != "run folder" else victim.parent)
    proc = snakemake(workdir, TINY, "-n", src=src, check=False, timeout=300)
    assert proc.returncode != 0
    assert f"{link.relative_to(workdir)} is a symbolic link" in proc.stdout + proc.stderr
    assert victim.read_bytes() == VICTIM_TEXT


def test_a_subprocess_writer_names_the_link_on_the_command_line(tmp_path, victim):
    """`fedkd render` (as a job runs it) exits 2 with the message, not a traceback."""
    from report_runs import agg_file, make_run

    agg = agg_file(tmp_path, [("fedavg", make_run(tmp_path / "runs", "a", [0.5]))])
    out = tmp_path / "tables" / "t"
    plant(out.with_name("t.tex"), victim)
    env = {**os.environ, "PYTHONPATH": str(Path(files.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-m", "fedkd", "render", "grid", "--aggregate", str(agg), "--out",
         str(out), "--options", '{"columns": ["fedavg"]}'],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{out}.tex is a symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert victim.read_bytes() == VICTIM_TEXT


@pytest.mark.parametrize("command", ["train", "partition", "aggregate"])
def test_an_out_path_that_is_a_link_is_refused_before_any_work(tmp_path, victim, command, capsys):
    from fedkd.cli import main

    out = plant(tmp_path / "results" / "out", victim.parent if command == "train" else victim)
    args = {
        "train": ["train", "--out", str(out), "--dataset", "mnist5k"],
        "partition": ["partition", "--out", str(out), "--dataset", "mnist5k", "--clients", "2"],
        "aggregate": ["aggregate", "--out", str(out), "--run", f"fedavg={tmp_path}"],
    }[command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"fedkd {command}: error: {out} is a symbolic link" in err, err
    assert victim.read_bytes() == VICTIM_TEXT and sorted(victim.parent.iterdir()) == [victim]


def test_status_calls_a_planned_run_folder_that_is_a_link_damaged_naming_it(tmp_path, victim):
    from fedkd.tools.status import collect

    root = tmp_path / "results" / "runs"
    name = "mnist5k/fedavg/iid-K2-C1-E1-R3/seed0"
    plant(root / name, victim.parent)
    (progress,) = collect(root, planned=[name])
    assert progress.state == "damaged"
    assert f"{root / name} is a symbolic link" in progress.problem


def test_the_planning_check_walks_a_runs_paths_down_to_the_first_missing_one(tmp_path, victim):
    from fedkd.files import refuse_links_below

    root = tmp_path / "results" / "runs"
    parts = ["mnist5k", "fedavg", "iid-K2-C1-E1-R3", "seed0"]
    refuse_links_below(root, parts, (".stamp",))  # nothing there yet
    run = root.joinpath(*parts)
    run.mkdir(parents=True)
    refuse_links_below(root, parts, (".stamp", "checkpoint.pt"))
    checkpoint = plant(run / "checkpoint.pt", victim)
    with pytest.raises(SymlinkError, match=rf"{checkpoint} is a symbolic link"):
        refuse_links_below(root, parts, (".stamp", "checkpoint.pt"))
    variant = root / "mnist5k" / "fedavg"
    variant.rename(tmp_path / "moved")
    plant(variant, tmp_path / "moved")  # a folder above the run
    with pytest.raises(SymlinkError, match=rf"{variant} is a symbolic link"):
        refuse_links_below(root, parts, (".stamp",))


# ----------------------------------------------------------------------------- folders below results/


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "template.rst"  # the front page test's own input
    }


@pytest.mark.parametrize("where", ["its folder", "a folder above it"])
@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_refuses_a_link_at_a_folder_below_results(tmp_path, victim, name, where):
    """results/tables (or results/logs, above results/logs/render) a link to a folder outside:
    the write is refused naming the link, and nothing there is written or replaced."""
    results = tmp_path / "results"
    outside = victim.parent
    if where == "its folder":
        link, out = results / "tables", results / "tables" / name
    else:
        (outside / "render").mkdir()
        link, out = results / "logs", results / "logs" / "render" / name
    plant(link, outside)
    before = _files(outside)
    with pytest.raises(SymlinkError, match=rf"{link} is a symbolic link \(to {outside}\)"):
        WRITERS[name](out)
    assert _files(outside) == before


@pytest.mark.parametrize("name", WRITERS)
def test_a_results_folder_that_is_itself_a_link_is_written_through(tmp_path, name):
    """Where the results live is the user's choice: results/ may lead to another disk."""
    disk = tmp_path / "disk" / "fedkd-results"
    disk.mkdir(parents=True)
    plant(tmp_path / "results", disk)
    WRITERS[name](tmp_path / "results" / name)
    assert (disk / name).is_file()


def test_the_planning_check_refuses_any_link_below_results_but_in_the_per_run_folders(
    tmp_path, victim, capsys
):
    from fedkd.pipeline.results_links import check_results_links

    results = tmp_path / "results"
    assert check_results_links(results) is None  # no results yet
    for folder in ("tables", "logs/render", "runs/mnist5k/fedavg", "logs/train/mnist5k"):
        (results / folder).mkdir(parents=True)
    # the run folders and their logs: checked job by job as the train jobs are planned
    plant(results / "runs" / "mnist5k" / "fedavg" / "iid-K2-C1-E1-R1", victim.parent)
    plant(results / "logs" / "train" / "mnist5k" / "x.log", victim)
    assert check_results_links(results) is None
    for link, target in [
        (results / "logs" / "render" / "t.log", victim),  # a job's shell writes its log there
        (results / "aggregate", victim.parent),
        (results / "report", victim.parent),
        (results / "tables" / "deep" / "er", victim.parent),
        (results / "features", victim.parent),
        (results / "runs", victim.parent),  # the per-run folders themselves are checked here
    ]:
        if link.is_dir():
            link.rename(tmp_path / link.name)
        plant(link, target)
        with pytest.raises(ValueError, match=rf"^{link} is a symbolic link"):
            check_results_links(results, error=ValueError)
        link.unlink()
    results.rename(tmp_path / "kept")
    plant(results, tmp_path / "kept")
    note = check_results_links(results)
    assert note and note.startswith(f"note: {results} is a symbolic link")
    assert capsys.readouterr().err == note + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["tables", "aggregate", "logs/render", "report"])
def test_the_workflow_refuses_a_link_below_results_before_any_job(tmp_path, victim, folder):
    from test_workflow import TINY, freeze_sources, snakemake

    workdir = tmp_path / "work"
    src = freeze_sources(tmp_path / "src")
    plant(workdir / "results" / folder, victim.parent)
    proc = snakemake(workdir, TINY, "-n", src=src, check=False, timeout=300)
    assert proc.returncode != 0
    assert f"results/{folder} is a symbolic link (to {victim.parent})" in proc.stdout + proc.stderr
    assert sorted(victim.parent.iterdir()) == [victim] and victim.read_bytes() == VICTIM_TEXT
    shutil.rmtree(workdir / "results")  # the link with it, not what it leads to
    elsewhere = tmp_path / "disk"
    elsewhere.mkdir()
    plant(workdir / "results", elsewhere)
    proc = snakemake(workdir, TINY, "-n", src=src, timeout=300)
    assert "note: results is a symbolic link" in proc.stderr
