"""The progress of training runs, read from their folders alone: run.json and metrics.parquet,
and for a run whose job left no run.json, its checkpoint, the workflow's stamp and its job's log.
``collect`` gives one ``RunProgress`` a run; ``fedkd.tools.status`` counts and reports them."""

from __future__ import annotations

import math
import os
import re
import stat
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fedkd.config import UPPER
from fedkd.digests import DigestMismatch, check_record_seal, recorded_metrics_sha256
from fedkd.echo import shown
from fedkd.files import (
    CHECKPOINT,
    METRICS,
    RUN_JSON,
    MetricsError,
    RunRecordError,
    link_problem,
    metrics_expected,
    missing_metrics,
    read_metrics_table,
    read_run_record,
)
from fedkd.runtime.processes import is_same_process, is_verified, valid_pid

# a "running" run whose process cannot be seen from here (another host) that has not finished a
# round for this long (and for 5 of its own rounds) has been killed or has crashed: run.json says
# "running" until the process itself ends it
STALE_SECONDS = 600.0


@dataclass
class RunProgress:
    path: str  # relative to the runs folder
    state: str  # done, failed, running, stopped, damaged, not started
    rounds_done: int
    rounds: int
    seconds_per_round: float | None  # mean over its rounds so far
    best_acc: float | None = None
    # why a damaged run's record cannot be read, and the fix; or the error a failed run recorded
    problem: str | None = None
    # running on the word of an older run.json: its pid lives and runs fedkd, but without the
    # recorded start time it cannot be told from a later fedkd process given the same pid
    unverified: bool = False

    @property
    def rounds_left(self) -> int:
        return max(0, self.rounds - self.rounds_done)


def _fix(path: Path) -> str:
    return (
        f"delete it and run the same `fedkd train --out {path.parent}` command again (it "
        f"resumes from checkpoint.pt when there is one)"
    )


def _is_count(value: object, upper: int | None = None) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return value >= 0 and (upper is None or value <= upper)


def _is_rounds(value: object) -> bool:
    return _is_count(value, UPPER["rounds"])  # a run is refused more rounds than that


def record_problem(record: dict) -> str | None:
    """What in a run record `fedkd status` reads is not of the type training writes (None: all
    of it is): each field may be absent or null, never of another type."""

    def wrong(field: str, value: object, expected: str) -> str:
        # 40 characters: the reason in brief, on a status line that names the file too
        return f"{field} is {shown(value, 40)}, not {expected}"

    checks = [
        ("status", record.get("status"), lambda v: isinstance(v, str), "a text"),
        ("rounds_done", record.get("rounds_done"), _is_rounds, "a count of rounds"),
        ("spec", record.get("spec"), lambda v: isinstance(v, dict), "the run's spec (an object)"),
        ("process", record.get("process"), lambda v: isinstance(v, dict), "an object"),
    ]
    for field, value, ok, expected in checks:
        if value is not None and not ok(value):
            return wrong(field, value, expected)
    updated = record.get("updated")
    if updated is not None:
        if not isinstance(updated, str):
            return wrong("updated", updated, "an ISO date and time")
        try:
            datetime.fromisoformat(updated)
        except ValueError:
            return wrong("updated", updated, "an ISO date and time")
    rounds = (record.get("spec") or {}).get("rounds")
    if rounds is not None and not _is_rounds(rounds):
        return wrong("spec.rounds", rounds, "a count of rounds")
    process = record.get("process") or {}
    if "pid" in process and not valid_pid(process["pid"]):
        return wrong("process.pid", process["pid"], "a process id")
    if process.get("host") is not None and not isinstance(process["host"], str):
        return wrong("process.host", process["host"], "a host name")
    if process.get("start") is not None and not _is_count(process["start"]):
        return wrong("process.start", process["start"], "a start time in clock ticks")
    if process.get("boot") is not None and not isinstance(process["boot"], str):
        return wrong("process.boot", process["boot"], "a boot id")
    return None


def load_record(path: Path) -> dict:
    """The run record at ``path``, or ``RunRecordError`` naming the file, what is wrong and the
    fix: not a file, too large, unreadable, not a JSON object, or a field of the wrong type."""
    try:
        record = read_run_record(path)  # refuses a directory, a FIFO or a device unread
    except (RunRecordError, FileNotFoundError):
        raise
    except OSError as exc:
        raise RunRecordError(
            f"{path} cannot be read ({exc.strerror or exc}); check its permissions"
        ) from None
    except (ValueError, RecursionError) as exc:  # a JSON nested too deeply to read
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise RunRecordError(f"{path} is damaged ({reason}); {_fix(path)}") from None
    problem = record_problem(record)
    if problem is not None:
        raise RunRecordError(f"{path} is damaged ({problem}); {_fix(path)}")
    try:  # as the aggregate and training check it: an edited summary, status or rounds
        check_record_seal(record)
    except DigestMismatch as exc:
        raise RunRecordError(
            f"{path} is damaged or was edited after the run ({exc}); {_fix(path)}"
        ) from None
    return record


def _updated_at(record: dict, run: Path) -> float:
    """When the run last wrote anything: the newest of run.json's "updated" and its files' mtimes
    (metrics.parquet and the checkpoint are rewritten after every round)."""
    newest = 0.0
    for path in run.iterdir():
        try:
            info = path.stat()
        except FileNotFoundError:  # a write's temporary file, renamed since the listing
            continue
        if stat.S_ISREG(info.st_mode):
            newest = max(newest, info.st_mtime)
    stamp = record.get("updated")
    if stamp:
        try:
            return max(newest, datetime.fromisoformat(stamp).timestamp())
        except (ValueError, OverflowError, OSError):
            pass
    return newest


def read_run(run: Path, root: Path, now: float, stale_after: float = STALE_SECONDS) -> RunProgress:
    """The progress of one run directory (one holding run.json)."""

    rel = str(run.relative_to(root))
    try:
        record = load_record(run / RUN_JSON)
    except FileNotFoundError:  # removed since the listing: as if never begun
        return RunProgress(rel, "not started", 0, _rounds_from_path(rel), None)
    except RunRecordError as exc:
        return RunProgress(rel, "damaged", 0, _rounds_from_path(rel), None, problem=str(exc))
    # the report package (pandas) only once a run is read
    from fedkd.report.run_checks import RunMismatch, check_run_path

    try:  # a run copied or moved under another run's path, as the aggregate refuses it
        check_run_path(str(run), record)
    except RunMismatch as exc:
        return RunProgress(rel, "damaged", 0, _rounds_from_path(rel), None, problem=str(exc))
    rounds = (record.get("spec") or {}).get("rounds") or 0
    status = record.get("status")
    # a finished run's metrics are what the report reads: damaged, the run is not done (a run
    # still training writes them again every round, and once more at its end)
    finished = status in ("complete", "diverged")
    seconds, best = [], None
    if (run / METRICS).exists() or (run / METRICS).is_symlink():
        try:  # a finished run's file must be the one its record hashed, as the report reads it
            metrics = read_metrics_table(
                run / METRICS,
                columns=["round", "test_acc", "seconds"],
                rounds_done=record.get("rounds_done") if finished else None,
                sha256=recorded_metrics_sha256(record),
            ).to_pandas(use_threads=False)
        except FileNotFoundError:  # removed since the check
            pass
        except Exception as exc:  # noqa: BLE001 - whatever it is, the metrics cannot be read
            if finished:
                problem = (
                    str(exc)
                    if isinstance(exc, MetricsError)  # names the file, the reason and the fix
                    else f"{run / METRICS} cannot be read ({type(exc).__name__}: {exc}); check it"
                )
                return _damaged_metrics(rel, record, rounds, problem)
        else:
            try:
                played = metrics[metrics["round"] >= 1]
                seconds = [float(s) for s in played["seconds"] if s == s and 0 < s < math.inf]
                best = float(played["test_acc"].max()) if len(played) else None
            except (KeyError, TypeError, ValueError):  # columns of another type or name
                pass
    elif metrics_expected(record):  # what the report reads is gone
        return _damaged_metrics(rel, record, rounds, missing_metrics(run))
    # run.json's count, 0 included: it is what the checkpoint holds (the metrics may hold a
    # round more, written before the kill); the rows only for a record without the field
    done = record.get("rounds_done")
    done = len(seconds) if done is None else done
    per_round = statistics.fmean(seconds) if seconds else None
    process = record.get("process")
    alive = is_same_process(process) if process else None
    problem = None
    if status == "complete":
        state = "done"
    elif status == "diverged":
        state = "failed"
    elif status == "failed":  # the error its last attempt recorded, whether or not it has exited
        state, problem = "failed", str(record.get("error") or "no error recorded")
    elif status == "stopped" or alive is False:
        state = "stopped"
    elif alive is True:  # its process runs here, however long its round takes
        state = "running"
    else:  # another host, or no way to tell: a round within the last while
        quiet_for = now - _updated_at(record, run)
        limit = max(stale_after, 5 * per_round) if per_round else stale_after
        state = "stopped" if quiet_for > limit else "running"
    unverified = state == "running" and alive is True and not is_verified(process)
    return RunProgress(
        rel, state, done, rounds, per_round, best, problem=problem, unverified=unverified
    )


def _damaged_metrics(rel: str, record: dict, rounds: int, problem: str) -> RunProgress:
    """A finished run whose metrics the report cannot read: damaged, with ``problem`` (the file,
    the reason and the fix)."""
    return RunProgress(
        rel, "damaged", record.get("rounds_done") or 0, rounds, None, problem=problem
    )


def _damaged_run(run: Path, root: Path, exc: BaseException) -> RunProgress:
    rel = str(run.relative_to(root))
    problem = f"{run / RUN_JSON} cannot be read ({type(exc).__name__}: {exc}); check it"
    return RunProgress(rel, "damaged", 0, _rounds_from_path(rel), None, problem=problem)


def collect(root: Path, planned: list[str] | None = None, now: float | None = None,
            stale_after: float = STALE_SECONDS) -> list[RunProgress]:  # fmt: skip
    """Every run under ``root``; with ``planned`` (run folders relative to ``root``) also those not
    started yet, and only those (runs of other configurations are left out)."""
    now = time.time() if now is None else now
    # no runs folder yet (the workflow is still partitioning): every planned run not started
    found, started = _run_folders(root)
    names = planned if planned is not None else sorted(set(found) | started)
    out = []
    for name in names:
        if name in found:
            try:
                out.append(read_run(found[name], root, now, stale_after))
            except Exception as exc:  # noqa: BLE001 - one run's trouble must not hide the rest
                out.append(_damaged_run(found[name], root, exc))
        # a run folder that is a link is not searched, and training refuses it
        elif problem := link_problem(root / name):
            out.append(
                RunProgress(name, "damaged", 0, _rounds_from_path(name), None, problem=problem)
            )
        elif name in started:
            out.append(_without_record(root, name, now, stale_after))
        else:
            out.append(RunProgress(name, "not started", 0, _rounds_from_path(name), None))
    return out


# the files a training job leaves in its run folder that Snakemake does not remove when the job
# fails (run.json and metrics.parquet are its outputs, which it does): the workflow's code stamp,
# written before training starts, and the checkpoint
STARTED_MARKS = (".stamp", CHECKPOINT)
# the last line of a job's log that says it ended in an error: a traceback's last line, or
# fedkd's one-line refusal
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b|fedkd \w+: error:)")
# fedkd train's last line when it was stopped (SIGTERM: a cluster's time limit, scancel; Ctrl-C)
_STOPPED_LINE = re.compile(
    r": stopped (?:after round (\d+)|before round 1) of \d+; run the same command again"
)


def _run_folders(root: Path) -> tuple[dict[str, Path], set[str]]:
    """One walk of ``root`` (on a cluster's shared disk, each walk is a listing of every run
    folder): the folders holding a run.json, whatever stands at that name (a directory or a link
    there is a damaged run), by their names relative to ``root``; and the other folders whose
    training has started at some time (a regular file of ``STARTED_MARKS``). Links to folders
    are not followed."""
    found: dict[str, Path] = {}
    started: set[str] = set()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        name = str(here.relative_to(root))
        if RUN_JSON in files or RUN_JSON in dirs:
            found[name] = here
        elif any(m in files and (here / m).is_file() and not (here / m).is_symlink()
                 for m in STARTED_MARKS):  # fmt: skip
            started.add(name)
    return found, started


def _without_record(root: Path, name: str, now: float, stale_after: float) -> RunProgress:
    """A run whose job started but that holds no run.json: Snakemake removed it with the other
    outputs of a failed job, or the job is starting (run.json comes once its data are loaded).
    Its job's log, where the workflow keeps it (results/logs/train/RUN.log beside
    results/runs/RUN), tells them apart: written within ``stale_after`` seconds and not ending in
    an error or in fedkd's stop (with the rounds it had done), the job is taken to be starting;
    otherwise the run is stopped, and the log's last line says why."""
    rounds = _rounds_from_path(name)
    log = root.parent / "logs" / "train" / f"{name}.log"
    last, written = _last_line(log)
    stopped = _STOPPED_LINE.search(last)
    ended = stopped or _ERROR_LINE.match(last)
    if written is not None and now - written <= stale_after and not ended:
        return RunProgress(name, "running", 0, rounds, None)
    why = f"its log {log} ends: {last}" if last else "no log says why"
    return RunProgress(
        name, "stopped", int(stopped[1] or 0) if stopped else 0, rounds, None,
        problem=f"its last job ended without a run.json (Snakemake removes a failed job's "
        f"outputs); {why}",
    )  # fmt: skip


def _last_line(log: Path, tail: int = 4096) -> tuple[str, float | None]:
    """The last non-empty line of ``log`` (cut to 300 characters) and when it was written;
    ("", None) where there is no such regular file."""
    try:
        if log.is_symlink() or not log.is_file():
            return "", None
        with log.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - tail))
            text = f.read().decode("utf-8", errors="replace")
        written = log.stat().st_mtime
    except OSError:
        return "", None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1][:300] if lines else ""), written


def _rounds_from_path(name: str) -> int:
    """The rounds of a planned run from its setting (…-R<rounds>, fedkd.run_paths)."""
    for part in reversed(Path(name).parts):
        for piece in part.split("-"):
            if piece.startswith("R") and piece[1:].isdigit():
                return int(piece[1:])
    return 0
