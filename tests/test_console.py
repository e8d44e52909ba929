"""The workflow's console (fedkd.pipeline.console, the logger plugin ``--logger fedkd``): one line
per job start, one per finish with the step count and an ETA, fed the same log records
Snakemake's scheduler emits."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest
from snakemake.logging import LogEvent
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

from fedkd.pipeline.console import ConsoleHandler, Progress, console_stream, fmt_duration


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def settings(dryrun: bool = False) -> SimpleNamespace:
    """Snakemake's output settings as a logger plugin receives them (a quiet console)."""
    return SimpleNamespace(printshellcmds=False, nocolor=True, quiet=set(), debug_dag=False,
                           verbose=False, show_failed_logs=False, stdout=False, dryrun=dryrun)  # fmt: skip


def console(dryrun: bool = False, clock=None):
    """A logger wired as Snakemake wires one with ``--logger fedkd``: the plugin's handler only."""
    logger = logging.getLogger(f"test-console-{id(object())}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    handler = ConsoleHandler(settings(dryrun), None)
    handler.console = console_stream(settings(dryrun), clock or Clock(), stream)
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
