"""The workflow's console, a Snakemake logger plugin (``--logger fedkd``, set in
profiles/default): one line as each job starts, one as it finishes with the step count and an
ETA, instead of Snakemake's default of about eight (a timestamp line, "Select jobs to
execute...", "Execute 1 jobs...", "Finished jobid: ...", the progress line, blank lines).

The plugin is the package ``snakemake_logger_plugin_fedkd``, installed with fedkd; its
``LogHandler`` is :class:`ConsoleHandler`. Snakemake's log file under ``.snakemake/log/`` keeps
the default, complete format, and a dry run keeps Snakemake's job blocks. The ETA adds, for
every rule, the jobs left times the mean time its finished jobs took, divided over the jobs that
ran at once.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections import defaultdict

from snakemake.logging import (
    ColorizingTextHandler,
    DefaultFilter,
    DefaultFormatter,
    LogEvent,
    format_percentage,
)
from snakemake_interface_logger_plugins.base import LogHandlerBase

# Snakemake's scheduler chatter, one of each per scheduling step
CHATTER = re.compile(r"^(Select jobs to execute\.\.\.|Execute \d+ jobs\.\.\.)$")


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
        self.max_running = 1
        self.last_finished: str | None = None

    def plan(self, stats: dict) -> None:
        self.total = {r: int(n) for r, n in stats.items() if r != "total"}

    def start(self, jobid: int, rule: str, what: str) -> None:
        self.started[jobid] = (rule, what, self.clock())
        self.max_running = max(self.max_running, len(self.started))

    def finish(self, jobid: int) -> None:
        rule, what, began = self.started.pop(jobid, (None, f"job {jobid}", None))
        if rule is not None:
            self.durations[rule].append(self.clock() - began)
            self.finished[rule] += 1
        self.last_finished = what

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
            left = n - self.finished[rule]
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


class ConsoleFormatter(logging.Formatter):
    """Formats the records the filter lets through; other records as Snakemake's formatter."""

    def __init__(self, fallback: logging.Formatter, progress: Progress):
        super().__init__()
        self.fallback = fallback
        self.progress = progress

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO:
            return f"{_clock_time()} start  {_what(record.__dict__)}"
        if event == LogEvent.PROGRESS:
            done, total = record.__dict__["done"], record.__dict__["total"]
            eta = self.progress.eta()
            tail = f", ETA ~{fmt_duration(eta)}" if eta is not None and done < total else ""
            what = self.progress.last_finished or "a job"
            return (
                f"{_clock_time()} done   {what}  "
                f"({done} of {total} steps, {format_percentage(done, total)}{tail})"
            )
        return self.fallback.format(record)


class ConsoleFilter(logging.Filter):
    """Drops the scheduler's chatter and the "Finished jobid" line (the progress line names the
    finished job), and keeps the job and ETA bookkeeping up to date."""

    def __init__(self, handler: logging.Handler, progress: Progress):
        super().__init__()
        self.handler = handler
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if event == LogEvent.RUN_INFO and isinstance(getattr(record, "stats", None), dict):
            self.progress.plan(record.stats)
        elif event == LogEvent.JOB_INFO:
            self.progress.start(record.jobid, record.rule_name, _what(record.__dict__))
            # Snakemake's console writes a blank line before a job that follows another message
            self.handler.last_msg_was_job_info = True
        elif event == LogEvent.JOB_FINISHED:
            self.progress.finish(record.job_id)
            return False
        elif event == LogEvent.JOB_STARTED:  # "Execute N jobs..."
            return False
        elif event is None and CHATTER.match(str(record.msg or "")):
            return False
        return True


def console_stream(settings, clock=time.monotonic, stream=None) -> logging.Handler:
    """Snakemake's own console handler, with its default filter and formatter for ``settings``
    (Snakemake's output settings), and ours in front of them except in a dry run, which lists
    the jobs it would run in Snakemake's full format."""
    handler = ColorizingTextHandler(
        nocolor=settings.nocolor,
        stream=stream or (sys.stdout if settings.stdout else sys.stderr),
    )
    handler.addFilter(
        DefaultFilter(
            settings.quiet, settings.debug_dag, settings.verbose, settings.dryrun,
            settings.printshellcmds,
        )
    )  # fmt: skip
    formatter = DefaultFormatter(settings.quiet, settings.show_failed_logs)
    if settings.dryrun:
        handler.setFormatter(formatter)
        return handler
    progress = Progress(clock)
    # ours first: it must see every job record, even those the default filter drops
    handler.filters.insert(0, ConsoleFilter(handler, progress))
    handler.setFormatter(ConsoleFormatter(formatter, progress))
    return handler


class ConsoleHandler(LogHandlerBase):
    """The logger plugin's handler: Snakemake hands it every record (from its queue listener's
    thread, so a Ctrl-C never lands inside a console write) and it writes them through
    :func:`console_stream`."""

    def __post_init__(self) -> None:
        self.console = console_stream(self.common_settings)

    def emit(self, record: logging.LogRecord) -> None:
        self.console.handle(record)

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # the console's filters decide, Snakemake's default among them

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False
