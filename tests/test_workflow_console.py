"""The workflow around its jobs, each in a scratch directory of its own: a bad configuration
refused before any job, the report of a partial build, the console's lines, a failed job's
reason, the data check before any job (and --no-hooks), and lint/format."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from test_workflow import (
    MESSAGE,
    all_runs,
    freeze_sources,
    read_config,
    snakemake,
)

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
DEFAULT = REPO / "config" / "config.yaml"
PAPER = REPO / "config" / "paper.yaml"
TINY = REPO / "config" / "tiny.yaml"


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return freeze_sources(tmp_path_factory.mktemp("frozen-src"))


# ----------------------------------------------------------------------------- validation


def test_a_bad_config_is_refused_before_any_job_naming_every_bad_key(tmp_path, src):
    config = read_config(TINY)
    config["defaults"]["participation"] = 1.5
    config["tables"]["table3"]["grid"]["alpha"] = [1.0, -0.1]
    config["variants"]["fedgkd-M1"]["params"]["bufer"] = 3
    config["variants"]["fedavg"]["strategy"] = "fedavgg"
    config["tables"]["table5"]["columns"]["fedgkd"] = "no-such-variant"
    config["figures"]["curves"]["grid"]["datset"] = ["mnist5k"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, bad, "--cores", "1", src=src, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "defaults.participation: 1.5 is greater than the maximum of 1" in out
    assert "tables.table3.grid.alpha[1]: -0.1" in out
    assert "figures.curves.grid: 'datset' was unexpected; did you mean 'dataset'?" in out
    assert not (tmp_path / "results").exists(), "nothing ran"
    # with the schema errors fixed, the cross-references are checked, again all at once
    config["defaults"]["participation"] = 0.2
    config["tables"]["table3"]["grid"]["alpha"] = [1.0, 0.1]
    del config["figures"]["curves"]["grid"]["datset"]
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, bad, "--cores", "1", src=src, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "variants.fedavg.strategy: 'fedavgg' is not a registered strategy" in out
    assert "tables.table5.columns.fedgkd: variant 'no-such-variant' is not defined" in out
    assert (
        "variant fedgkd-M1 on mnist5k: params.bufer is not a parameter of strategy 'fedgkd'" in out
    )
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_report_after_a_partial_build_shows_what_exists(tmp_path, src):
    """After one table (here the traits table, which trains nothing) `snakemake --report` reports
    that table as HTML, in its paper's section, instead of stopping at the first missing output."""
    snakemake(tmp_path, TINY, "results/tables/table1.tex", "--cores", "1", src=src)
    snakemake(tmp_path, TINY, "--report", "results/report.html", src=src, timeout=600)
    html = (tmp_path / "results/report.html").read_text(errors="replace")
    assert "table1.html" in html and "table3.html" not in html
    assert "Reading the numbers" in html  # the front page defines ±


@pytest.mark.slow
def test_the_console_shows_one_short_line_a_job(tmp_path, src):
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert profile["printshellcmds"] is False and "reason" in profile["quiet"]
    proc = snakemake(tmp_path, DEFAULT, "results/tables/table3.tex", "-n", src=src)
    jobs = [ln for ln in proc.stdout.splitlines() if MESSAGE.fullmatch(ln.strip())]
    assert len(jobs) > 48, "a message line for every job"
    lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("  Command: ")]
    longest = max(lines, key=len)
    assert len(longest) < 200, longest[:300]  # an aggregate job names its list, not every run
    assert "fedkd train" not in proc.stdout, "commands stay in the logs"


@pytest.mark.slow
def test_a_failed_jobs_reason_is_on_the_console(tmp_path, src, monkeypatch):
    """The default profile prints a failed job's log under its error (show-failed-logs): the
    paper configuration without its data names the missing CIFAR-10 files and where they go,
    with no log to open."""
    target = "results/partitions/cifar10/dirichlet-equal-a0.1-K20/seed2.parquet"
    monkeypatch.delenv("FEDKD_DATA", raising=False)  # the data root: ./data under --directory
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    proc = snakemake(tmp_path, PAPER, target, "--cores", "1", src=src, timeout=600, check=False)
    assert proc.returncode != 0
    folder, archive = (
        tmp_path / "data/cifar-10-batches-py",
        tmp_path / "data/cifar-10-python.tar.gz",
    )
    said = f"fedkd partition: error: cifar10: neither {folder} nor {archive} exists; download"
    assert said in proc.stdout + proc.stderr


@pytest.mark.slow
def test_missing_datasets_are_said_once_before_any_job(tmp_path, src, monkeypatch):
    """Table 3 of the paper configuration without its data: each missing dataset is named once,
    in its loader's words, and no job starts (rather than 27 partition jobs failing alike); a dry
    run still lists the grid."""
    monkeypatch.delenv("FEDKD_DATA", raising=False)
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    target = "results/tables/table3.tex"
    proc = snakemake(tmp_path, PAPER, target, "--cores", "1", src=src, timeout=600, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "no job was started" in said
    for name, folder in [
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("tinyimagenet", "tiny-imagenet-200"),
    ]:
        assert said.count(f"{name}: neither {tmp_path / 'data' / folder} nor") == 1, said
    assert not (tmp_path / "results").exists()
    dry = snakemake(tmp_path, PAPER, target, "-n", src=src, timeout=600)
    assert "no job was started" not in dry.stdout + dry.stderr


@pytest.mark.slow
def test_no_hooks_starts_the_jobs_without_the_data_check(tmp_path, src, monkeypatch):
    """Snakemake's --no-hooks leaves the check out: the partition job starts and says what is
    missing itself (the runs whose data is there would train meanwhile)."""
    monkeypatch.delenv("FEDKD_DATA", raising=False)
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    run = next(
        r for r in sorted(all_runs(read_config(PAPER))) if r.startswith("results/runs/cifar10/")
    )
    target = f"{run}/run.json"
    checked = snakemake(tmp_path, PAPER, target, "--cores", "1", src=src, check=False)
    assert checked.returncode != 0 and "no job was started" in checked.stderr
    assert "fedkd partition: error" not in checked.stdout + checked.stderr
    unchecked = snakemake(
        tmp_path, PAPER, target, "--cores", "1", "--no-hooks", src=src, check=False
    )
    said = unchecked.stdout + unchecked.stderr
    assert unchecked.returncode != 0 and "no job was started" not in said
    assert "fedkd partition: error: cifar10: neither " in said


# ----------------------------------------------------------------------------- style


@pytest.mark.slow
def test_snakemake_lint_is_clean(tmp_path, src):
    proc = snakemake(tmp_path, DEFAULT, "--lint", src=src, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakefmt_check_is_clean():
    snakefmt = shutil.which("snakefmt")
    if snakefmt is None:
        pytest.skip("snakefmt is not installed (pip install -e '.[test]')")
    files = [SNAKEFILE, *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    proc = subprocess.run([snakefmt, "--check", *map(str, files)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
