"""The aggregate job's runs come from results/aggregate/<name>.runs (rule runs_list), never from
its command line: written by the workflow, up to date until the plan's runs change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
