"""The workflow's console (fedkd.pipeline.console, the logger plugin ``--logger fedkd``): one line
per job start, one per finish with the step count and an ETA, fed the same log records
Snakemake's scheduler emits; the plugin built on snakemake-interface-logger-plugins alone, for the
Snakemake releases pyproject.toml declares."""

from __future__ import annotations

import ast
import io
import itertools
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

from fedkd.pipeline.console import ConsoleHandler, Progress, fmt_duration, percentage

REPO = Path(__file__).resolve().parents[1]
PLUGIN_FILES = [
    REPO / "src" / "fedkd" / "pipeline" / "console.py",
    *sorted((REPO / "src" / "snakemake_logger_plugin_fedkd").rglob("*.py")),
]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def settings(dryrun: bool = False) -> SimpleNamespace:
    """Snakemake's output settings as a logger plugin receives them (a quiet console)."""
    return SimpleNamespace(printshellcmds=False, nocolor=True, quiet=set(), debug_dag=False,
                           verbose=False, show_failed_logs=False, stdout=False, dryrun=dryrun)  # fmt: skip


def snakemakes(cls, out):
    """Snakemake's default filter or formatter for the output settings ``out``, built from
    whichever of them its release's class takes (they differ between releases)."""
    import inspect

    names = list(inspect.signature(cls).parameters)
    return cls(**{n: getattr(out, n) for n in names if hasattr(out, n)})


_LOGGER_NUMBERS = itertools.count()


def console(dryrun: bool = False, clock=None):
    """A logger wired as Snakemake wires one with ``--logger fedkd``: the plugin's handler only,
    with Snakemake's default filter and formatter attached, as Snakemake attaches them to a
    handler whose has_filter and has_formatter are false (the test may use Snakemake's own
    modules; the plugin does not)."""
    from snakemake.logging import DefaultFilter, DefaultFormatter

    # a name never used before: a logger lives as long as the process, with its handlers
    logger = logging.getLogger(f"test-console-{next(_LOGGER_NUMBERS)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    out = settings(dryrun)
    handler = ConsoleHandler(out, None)
    assert not handler.has_filter and not handler.has_formatter
    handler.addFilter(snakemakes(DefaultFilter, out))
    handler.setFormatter(snakemakes(DefaultFormatter, out))
    handler.stream = stream
    handler.clock = clock or Clock()
    logger.addHandler(handler)
    return logger, stream


def job_info(logger, jobid, rule, msg=None, output=("out.txt",)):
    logger.info(
        f" Rule: {rule}, Jobid: {jobid}",
        extra=dict(event=LogEvent.JOB_INFO, jobid=jobid, rule_msg=msg, rule_name=rule,
                   local=True, input=[], output=list(output), log=[], benchmark=None,
                   wildcards={}, reason="Missing output files", resources={}, priority=0,
                   threads=1, indent=False, is_checkpoint=False),
    )  # fmt: skip


def finish(logger, jobid, rule, done, total):
    logger.info("Select jobs to execute...")
    logger.info(f"Finished jobid: {jobid} (Rule: {rule})",
                extra=dict(event=LogEvent.JOB_FINISHED, job_id=jobid))  # fmt: skip
    logger.info(None, extra=dict(event=LogEvent.PROGRESS, done=done, total=total))


def test_one_line_per_start_and_finish_with_an_eta():
    clock = Clock()
    logger, stream = console(clock=clock)
    logger.info("Job stats: ...", extra=dict(event=LogEvent.RUN_INFO,
                                             stats={"train": 3, "render": 1, "total": 4}))  # fmt: skip
    logger.info("Select jobs to execute...")
    logger.info("Execute 2 jobs...", extra=dict(event=LogEvent.JOB_STARTED, jobs=[1, 2]))
    job_info(logger, 1, "train", "train results/runs/a")
    job_info(logger, 2, "train", "train results/runs/b")
    clock.now = 12.0
    finish(logger, 1, "train", 1, 4)
    clock.now = 20.0
    finish(logger, 2, "train", 2, 4)
    job_info(logger, 3, "train", "train results/runs/c")
    job_info(logger, 4, "render", None, output=["results/tables/t.tex", "results/tables/t.md"])
    lines = stream.getvalue().splitlines()
    body = lines[1:]  # the job stats, as Snakemake prints them
    assert lines[0] == "Job stats: ..."
    assert len(body) == 6 and all(line.startswith("[") for line in body), body
    assert body[0].endswith("] start  train results/runs/a")
    # after the first: 2 train jobs left at 12 s, one of them running (half done), the render job
    # at the mean of all (12 s), two at a time: (1.5 * 12 + 12) / 2
    assert body[2].endswith("] done   train results/runs/a  (1 of 4 steps, 25%, ETA ~15 s)")
    # after the second: train jobs took 12 and 20 s; 1 train + 1 render at 16 s, over 2
    assert body[3].endswith("] done   train results/runs/b  (2 of 4 steps, 50%, ETA ~16 s)")
    # a rule without a message: its name and outputs, on one line
    assert body[5].endswith("] start  render results/tables/t.tex, results/tables/t.md")
    assert not any("Select jobs" in line or "Execute" in line or "Finished" in line
                   for line in lines)  # fmt: skip


def test_the_last_step_has_no_eta_and_errors_keep_snakemakes_format():
    logger, stream = console()
    logger.info("Job stats", extra=dict(event=LogEvent.RUN_INFO, stats={"train": 1, "total": 1}))
    job_info(logger, 7, "train", "train results/runs/a")
    finish(logger, 7, "train", 1, 1)
    assert stream.getvalue().splitlines()[-1].endswith("(1 of 1 steps, 100%)")
    logger.error("Error in rule train: the full block", extra=dict(event=None))
    assert stream.getvalue().splitlines()[-1] == "Error in rule train: the full block"


def test_a_dry_run_keeps_snakemakes_job_blocks():
    logger, stream = console(dryrun=True)
    job_info(logger, 1, "train", "train results/runs/a")
    text = stream.getvalue()
    assert "Job 1: train results/runs/a\nReason: Missing output files" in text
    assert "] start" not in text


def test_snakemake_finds_the_plugin_and_the_default_profile_names_it():
    from pathlib import Path

    import yaml

    plugin = LoggerPluginRegistry().get_plugin("fedkd")
    assert plugin.log_handler is ConsoleHandler
    profile = Path(__file__).parents[1] / "profiles" / "default" / "config.yaml"
    assert yaml.safe_load(profile.read_text())["logger"] == ["fedkd"]


def test_eta_waits_for_a_measurement_and_counts_running_jobs_at_half():
    clock = Clock()
    progress = Progress(clock)
    progress.plan({"train": 4, "total": 4})
    progress.start(1, "train", "a")
    assert progress.eta() is None
    clock.now = 8.0
    progress.finish(1)
    progress.start(2, "train", "b")
    # 3 left at 8 s, one of them half done, one at a time
    assert progress.eta() == pytest.approx(2.5 * 8.0)


def job_error(logger, jobid, rule):
    logger.error(
        f"Error in rule {rule}, jobid: {jobid}",
        extra=dict(event=LogEvent.JOB_ERROR, jobid=jobid, rule_name=rule, rule_msg=None,
                   input=[], output=["out.txt"], log=[], conda_env=None, container_img=None,
                   aux={}, indent=False, shellcmd=None),
    )  # fmt: skip


def test_a_failed_job_is_neither_running_nor_left_unless_it_is_retried():
    """Under keep-going (the default profile) a failed job is over: it no longer counts as a job
    in flight, which would halve the ETA of a one-core build for the rest of it, nor as a job
    left; a retry of it (--retries) starts it again."""
    clock = Clock()
    logger, stream = console(clock=clock)
    logger.info("Job stats", extra=dict(event=LogEvent.RUN_INFO,
                                        stats={"train": 4, "total": 4}))  # fmt: skip
    job_info(logger, 1, "train", "train results/runs/a")
    clock.now = 5.0
    job_error(logger, 1, "train")
    job_info(logger, 2, "train", "train results/runs/b")
    clock.now = 15.0
    finish(logger, 2, "train", 1, 4)
    # 2 train jobs left at 10 s, one at a time
    assert stream.getvalue().splitlines()[-1].endswith("(1 of 4 steps, 25%, ETA ~20 s)")
    job_info(logger, 1, "train", "train results/runs/a")  # retried
    clock.now = 25.0
    finish(logger, 1, "train", 2, 4)
    assert stream.getvalue().splitlines()[-1].endswith("(2 of 4 steps, 50%, ETA ~20 s)")


def test_fmt_duration():
    assert [fmt_duration(s) for s in (5, 75, 3725)] == ["5 s", "1 min 15 s", "1 h 02 min"]


def test_a_rule_with_no_finished_job_counts_at_least_its_running_jobs_age():
    clock = Clock()
    progress = Progress(clock)
    progress.plan({"partition": 1, "train": 2, "total": 3})
    progress.start(1, "partition", "p")
    progress.start(2, "train", "a")
    clock.now = 1.0
    progress.finish(1)  # partitions take 1 s
    clock.now = 10.0
    # train: none done; the running one has taken 10 s already: 2 left (one half done) at 10 s
    assert progress.eta() == pytest.approx(1.5 * 10.0 / 2)


def test_percentages_never_read_0_or_100_before_the_end():
    assert [percentage(d, t) for d, t in ((0, 3), (1, 3), (1, 4), (3, 3))] == [
        "0%",
        "33%",
        "25%",
        "100%",
    ]
    assert percentage(1, 1000) == "0.1%" and percentage(999, 1000) == "99.9%"
    assert percentage(9999, 10000) == "99.99%"


def test_the_quiet_setting_drops_the_lines_but_not_the_bookkeeping():
    """``--quiet rules`` drops the start lines through Snakemake's filter; the ETA still counts
    the jobs it did not show."""
    from snakemake.logging import DefaultFilter
    from snakemake.settings.enums import Quietness

    clock = Clock()
    logger, stream = console(clock=clock)
    handler = logger.handlers[0]
    handler.filters[:] = [snakemakes(DefaultFilter, settings())]
    handler.filters[0].quiet = {Quietness.RULES}
    logger.info("Job stats", extra=dict(event=LogEvent.RUN_INFO, stats={"train": 2, "total": 2}))
    job_info(logger, 1, "train", "train results/runs/a")
    clock.now = 10.0
    finish(logger, 1, "train", 1, 2)
    assert "start" not in stream.getvalue()
    assert (
        stream.getvalue()
        .splitlines()[-1]
        .endswith("done   train results/runs/a  (1 of 2 steps, 50%, ETA ~10 s)")
    )


# ----------------------------------------------------------------------------- on the interface


def snakemake_imports(path: Path) -> set[str]:
    """The top-level modules named snakemake* that a file imports, anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {n.split(".")[0] for n in names if n.startswith("snakemake")}


def test_the_plugin_imports_only_the_logger_plugin_interface_of_snakemakes():
    """Neither the plugin's source nor anything it imports reaches into Snakemake itself: only
    the interface packages, whose names and classes are Snakemake's promise to plugins."""
    allowed = {"snakemake_interface_logger_plugins", "snakemake_logger_plugin_fedkd"}
    for path in PLUGIN_FILES:
        assert snakemake_imports(path) <= allowed, (path, snakemake_imports(path) - allowed)
    code = (
        "import sys, snakemake_logger_plugin_fedkd\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('snakemake'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    loaded = {m.split(".")[0] for m in proc.stdout.split()}
    # the logger interface builds on snakemake-interface-common, Snakemake's plugins' common base
    assert loaded <= allowed | {"snakemake_interface_common"}, loaded
    assert "snakemake_logger_plugin_fedkd" in loaded


def test_the_source_check_sees_an_import_of_snakemake_anywhere(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from snakemake.logging import DefaultFormatter\n")
    assert snakemake_imports(path) == {"snakemake"}


def declared_range(package: str):
    """The version specifier pyproject.toml declares for ``package``."""
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(Requirement(d).specifier for d in deps if Requirement(d).name == package)


def test_the_installed_snakemake_is_in_the_declared_range_and_the_snakefile_asks_its_floor():
    """The supported Snakemake range is declared, the installed one (the end this install can
    test; every test here runs on it) is in it, and the Snakefile's min_version is its floor."""
    from importlib.metadata import version

    snakemake = declared_range("snakemake")
    assert version("snakemake") in snakemake, (version("snakemake"), str(snakemake))
    floor = [s.version for s in snakemake if s.operator == ">="]
    ceiling = [s.version for s in snakemake if s.operator == "<"]
    assert floor and ceiling, f"pyproject.toml declares no closed range: {snakemake}"
    assert f'min_version("{floor[0]}")' in (REPO / "Snakefile").read_text()
    interface = declared_range("snakemake-interface-logger-plugins")
    assert version("snakemake-interface-logger-plugins") in interface, str(interface)


TOY_SNAKEFILE = """
rule all:
    input: expand("o{i}.txt", i=range(2))
rule make:
    output: "o{i}.txt"
    message: "make {output}"
    shell: "touch {output}"
"""


def test_snakemake_runs_a_workflow_through_the_plugin_with_the_default_profile(tmp_path):
    """Snakemake loads the plugin through the default profile (read as the workflow's own, as in
    a checkout), attaches its defaults, and the console shows one line per start and per finish:
    the profile's `quiet` setting keeps the progress lines (Snakemake before 9.6 dropped them).
    scripts/floor-test.sh runs this at the declared floor."""
    (tmp_path / "Snakefile").write_text(TOY_SNAKEFILE)
    shutil.copytree(REPO / "profiles" / "default", tmp_path / "profiles" / "default")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "workflow specific profile profiles/default" in out, out
    assert re.search(r"^\[\d\d:\d\d:\d\d\] start  make o0\.txt$", out, re.M), out
    assert re.search(r"^\[\d\d:\d\d:\d\d\] done   all  \(3 of 3 steps, 100%\)$", out, re.M), out
    assert "Finished jobid" not in out and "Select jobs" not in out
