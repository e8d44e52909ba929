"""The workflow's console, a Snakemake logger plugin (``--logger fedkd``, set in
profiles/default): one line as each job starts, one as it finishes with the step count and an
ETA, instead of Snakemake's default of about eight (a timestamp line, "Select jobs to
execute...", "Execute 1 jobs...", "Finished jobid: ...", the progress line, blank lines).

The plugin is the package ``snakemake_logger_plugin_fedkd``, installed with fedkd; its
``LogHandler`` is :class:`ConsoleHandler`. It is built on ``snakemake-interface-logger-plugins``
alone (the records' ``event`` fields, the handler's base class and the output settings), never
on Snakemake's own modules, whose names may change in any release. Every other record (errors,
the workflow's start, a dry run's job blocks) is formatted and filtered by what Snakemake attaches
to a handler that declares no formatter and no filter of its own (``has_formatter`` and
``has_filter`` false): its default ones, so they read as without the plugin. Snakemake's log file
under ``.snakemake/log/`` keeps the default, complete format. The ETA adds, for every rule, the
jobs left times the mean time its finished jobs took, divided over the jobs that ran at once.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections import defaultdict

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

# Snakemake's scheduler chatter, one of each per scheduling step (the last one: Snakemake 9.0)
CHATTER = re.compile(
    r"^(Select jobs to execute\.\.\.|Execute \d+ jobs\.\.\.|Waiting for more resources\.)$"
)


def fmt_duration(seconds: float) -> str:
    """A duration as the console and `fedkd status` print it: "5 s", "1 min 15 s", "1 h 02 min"."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """Jobs started and finished per rule, and the ETA they imply."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.total: dict[str, int] = {}  # rule -> jobs planned (Snakemake's job stats)
        self.started: dict[int, tuple[str, str, float]] = {}  # jobid -> (rule, what, start)
        self.durations: dict[str, list[float]] = defaultdict(list)
        self.finished: dict[str, int] = defaultdict(int)
        # jobid -> rule of the jobs that failed: no work left (under keep-going nothing runs them
        # again), nor running, unless Snakemake retries one (it starts again)
        self.failed: dict[int, str] = {}
        self.max_running = 1
        self.last_finished: str | None = None

    def plan(self, stats: dict) -> None:
        self.total = {r: int(n) for r, n in stats.items() if r != "total"}

    def start(self, jobid: int, rule: str, what: str) -> None:
        self.failed.pop(jobid, None)
        self.started[jobid] = (rule, what, self.clock())
        self.max_running = max(self.max_running, len(self.started))

    def finish(self, jobid: int) -> None:
        rule, what, began = self.started.pop(jobid, (None, f"job {jobid}", None))
        if rule is not None:
            self.durations[rule].append(self.clock() - began)
            self.finished[rule] += 1
        self.last_finished = what

    def fail(self, jobid: int | None) -> None:
        """A job that failed: it took no measurable time of its rule's jobs."""
        rule, _, _ = self.started.pop(jobid, (None, None, None))
        if rule is not None:
            self.failed[jobid] = rule

    def eta(self) -> float | None:
        """Seconds left, or None until a job has finished. A rule none of whose jobs has finished
        yet counts at the mean of all jobs, or longer if its running jobs have already taken
        longer."""
        measured = [d for ds in self.durations.values() for d in ds]
        if not self.total or not measured:
            return None
        overall = sum(measured) / len(measured)
        work = 0.0
        for rule, n in self.total.items():
            left = n - self.finished[rule] - sum(r == rule for r in self.failed.values())
            if left <= 0:
                continue
            ds = self.durations.get(rule)
            now = self.clock()
            ages = [now - t for r, _, t in self.started.values() if r == rule]
            # no job of the rule done yet: at least as long as its running ones have taken
            per_job = sum(ds) / len(ds) if ds else max([overall, *ages])
            # a running job has part of its time behind it: count it at half
            running = len(ages)
            work += (left - running / 2) * per_job
        return work / self.max_running


def _what(record: dict) -> str:
    """A job in a few words: the rule's message, else the rule and its outputs."""
    if record.get("rule_msg"):
        return str(record["rule_msg"])
    outputs = record.get("output") or []
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    return f"{record.get('rule_name', 'job')} {', '.join(outputs)}".strip()


def _clock_time() -> str:
    return time.strftime("[%H:%M:%S]")


def percentage(done: int, total: int) -> str:
    """``done`` of ``total`` in whole percent, with more decimals while it would read 0% or
    100% before the end (1 of 1,000 steps is 0.1%, 999 of them 99.9%)."""
    if done >= total:
        return "100%"
    if done <= 0:
        return "0%"
    digits = 0
    while float(f"{done / total:.{digits}%}"[:-1]) in (0.0, 100.0):
        digits += 1
    return f"{done / total:.{digits}%}"


# ANSI colours as Snakemake's console uses them: errors red, warnings and plain messages yellow,
# job records green
COLOURS = {"ERROR": 31, "CRITICAL": 35, "WARNING": 33, "DEBUG": 34, "INFO": 32}
YELLOW_INFO = {LogEvent.RUN_INFO, LogEvent.SHELLCMD, LogEvent.JOB_STARTED, None}


def colours_wanted(stream, nocolor: bool) -> bool:
    """Colour only on a terminal that is not "dumb", and not with ``--nocolor``."""
    if nocolor or os.environ.get("TERM") == "dumb" or sys.platform == "win32":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ConsoleHandler(LogHandlerBase):
    """The logger plugin's handler: Snakemake hands it every record (from its queue listener's
    thread, so a Ctrl-C never lands inside a console write). Job starts and finishes it writes
    itself, one line each; the rest through the formatter and filter Snakemake attached. A dry
    run keeps Snakemake's full job blocks."""

    clock = staticmethod(time.monotonic)

    def __post_init__(self) -> None:
        if not hasattr(self, "filters"):
            # the interface's base class before 2.0 leaves logging.Handler's own set-up undone
            logging.Handler.__init__(self)
        out = self.common_settings
        self.stream = sys.stdout if getattr(out, "stdout", False) else sys.stderr
        self.dryrun = bool(getattr(out, "dryrun", False))
        self.nocolor = bool(getattr(out, "nocolor", False))
        self.progress = Progress(lambda: self.clock())
        self.last_was_job_info = False

    def filter(self, record: logging.LogRecord) -> bool:
        """The job and ETA bookkeeping sees every record, even those a ``--quiet`` setting then
        drops; the scheduler's chatter and the "Finished jobid" line are dropped (the progress
        line names the finished job), the rest goes to the attached filters."""
        event = getattr(record, "event", None)
        if event == LogEvent.RUN_INFO and isinstance(getattr(record, "stats", None), dict):
            self.progress.plan(record.stats)
        elif event == LogEvent.JOB_INFO:
            self.progress.start(record.jobid, record.rule_name, _what(record.__dict__))
        elif event == LogEvent.JOB_FINISHED:
            self.progress.finish(record.job_id)
        elif event == LogEvent.JOB_ERROR:
            self.progress.fail(getattr(record, "jobid", None))
        if not self.dryrun and (
            event in (LogEvent.JOB_FINISHED, LogEvent.JOB_STARTED)  # "Execute N jobs..."
            or (event is None and CHATTER.match(str(record.msg or "")))
        ):
            return False
        return bool(super().filter(record))

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        if not self.dryrun and event == LogEvent.JOB_INFO:
            return f"{_clock_time()} start  {_what(record.__dict__)}"
        if not self.dryrun and event == LogEvent.PROGRESS:
            done, total = record.__dict__["done"], record.__dict__["total"]
            eta = self.progress.eta()
            tail = f", ETA ~{fmt_duration(eta)}" if eta is not None and done < total else ""
            what = self.progress.last_finished or "a job"
            return (
                f"{_clock_time()} done   {what}  "
                f"({done} of {total} steps, {percentage(done, total)}{tail})"
            )
        if self.formatter is None and record.msg is None:
            return ""
        return super().format(record)  # the formatter Snakemake attached

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            event = getattr(record, "event", None)
            # a dry run's job blocks are set apart by a blank line, as Snakemake's console does
            if self.dryrun and event == LogEvent.JOB_INFO and not self.last_was_job_info:
                self.stream.write("\n")
            self.last_was_job_info = event == LogEvent.JOB_INFO
            if text in (None, "", "None"):
                return
            if colours_wanted(self.stream, self.nocolor) and record.levelname in COLOURS:
                yellow = record.levelno == logging.INFO and event in YELLOW_INFO
                code = COLOURS["WARNING" if yellow else record.levelname]
                text = f"\033[{code}m{text}\033[0m"
            self.stream.write(text + "\n")
            self.stream.flush()
        except (KeyboardInterrupt, SystemExit):
            pass  # Snakemake has handled them already
        except BrokenPipeError:
            raise
        except Exception:
            self.handleError(record)

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return False  # Snakemake attaches its default filter (quiet, printshellcmds, debug)

    @property
    def has_formatter(self) -> bool:
        return False  # Snakemake attaches its default formatter, used for every other record

    @property
    def needs_rulegraph(self) -> bool:
        return False
