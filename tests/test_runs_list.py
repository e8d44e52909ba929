"""The aggregate job's runs come from results/aggregate/<name>.runs (rule runs_list), never from
its command line: written by the workflow, up to date until the plan's runs change. The job is
given the SHA-256 of the list the plan names, and refuses a list file of another: a line deleted
or pointed at another folder is an error naming the file, never a table without that run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedkd.pipeline import Plan
from fedkd.report import ReportError, read_runs_file

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "config" / "tiny.yaml"


def snakemake(workdir: Path, configfile: Path, *args: str) -> str:
    cmd = [
        sys.executable, "-m", "snakemake", *args, "--cores", "1",
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_runs_list_is_written_once_and_again_when_the_runs_change(tmp_path):
    target = "results/aggregate/table7.runs"
    snakemake(tmp_path, TINY, target)
    runs = (tmp_path / target).read_text().splitlines()
    assert runs == [
        "M=1\tresults/runs/mnist5k/fedgkd-M1/dirichlet-equal-a0.1-K10-C0.2-E1-R3/seed0",
        "M=2\tresults/runs/mnist5k/fedgkd-M2/dirichlet-equal-a0.1-K10-C0.2-E1-R3/seed0",
    ]
    log = tmp_path / "results/logs/aggregate/table7.runs.log"
    assert log.read_text() == f"{target}: 2 runs\n"
    assert "Nothing to be done" in snakemake(tmp_path, TINY, target, "-n")
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(TINY.read_text().replace("M=1:", "Mone:"))
    assert "Mone:" in renamed.read_text()
    assert "list the runs of results/aggregate/table7.runs" in snakemake(
        tmp_path, renamed, target, "-n"
    )
    plan = snakemake(tmp_path, TINY, "results/aggregate/table7.parquet", "-n", "-p")
    assert f"--runs-file {target}" in plan and "--run " not in plan
    sha256 = Plan(yaml.safe_load(TINY.read_text())).runs_list_sha256("table7")
    assert f"--runs-sha256 {sha256}" in plan


@pytest.fixture
def runs_list(tmp_path) -> tuple[Path, str]:
    """table7's runs list as the workflow writes it, and the plan's SHA-256 of it."""
    plan = Plan(yaml.safe_load(TINY.read_text()))
    path = tmp_path / "table7.runs"
    path.write_text(plan.runs_list("table7"))
    return path, plan.runs_list_sha256("table7")


def test_the_runs_list_the_plan_names_is_read(runs_list):
    path, sha256 = runs_list
    assert [label for label, _ in read_runs_file(path, sha256)] == ["M=1", "M=2"]


def edited(text: str) -> dict[str, str]:
    lines = text.splitlines(keepends=True)
    return {
        "a line deleted": lines[0],
        "a label pointed at another run": text.replace("fedgkd-M1", "fedgkd-M2", 1),
        "a label pointed outside results/runs": text.replace("results/runs/", "/tmp/runs/", 1),
        "a comment added": "# by hand\n" + text,
    }


@pytest.mark.parametrize("edit", list(edited("a\n")))
def test_an_edited_runs_list_is_refused_naming_the_file(runs_list, edit):
    path, sha256 = runs_list
    path.write_text(edited(path.read_text())[edit])
    with pytest.raises(ReportError, match=rf"runs file {path} does not list the runs the config"):
        read_runs_file(path, sha256)
    read_runs_file(path)  # a list given by hand, without the plan's hash: read as written


def test_fedkd_aggregate_refuses_an_edited_runs_list_in_one_line(runs_list, tmp_path, capsys):
    from fedkd.cli import main

    path, sha256 = runs_list
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    out = tmp_path / "table7.parquet"
    args = ["aggregate", "--out", str(out), "--runs-file", str(path), "--runs-sha256", sha256]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedkd aggregate: error: runs file {path} does not list") and (
        err.count("\n") == 1
    ), err
    assert not out.exists()
