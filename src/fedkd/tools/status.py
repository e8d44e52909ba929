"""``fedkd status [TARGET ...] [--configfile FILE]``: how far the training runs of what is being
built are, from their run.json and metrics.parquet alone (it works while Snakemake runs, on a
cluster's shared disk too).

Which runs count, as Snakemake would pick them: the runs the TARGETs need (the same targets as
``snakemake``, e.g. results/tables/table3.tex, planned from --configfile or the default
config/config.yaml, fedkd.pipeline.Plan); with --configfile alone, every run of that
configuration; with neither, every run found in the runs folder. Before any run (no runs folder
yet) the planned runs are all not started. Nothing of Snakemake's own state is read: give the
targets and --configfile the workflow was started with.

A run is done (complete), failed (diverged, a result; or an error it recorded, which the line
shows: once its cause is fixed, re-running the workflow resumes it from its checkpoint), running,
stopped (killed or crashed without a record: its process is gone, or on another host no round for a
while, or it recorded why it stopped, e.g. a full disk; re-running the workflow resumes it from its
checkpoint), damaged (its run.json cannot be read or holds a field of the wrong type, or a finished
run's metrics.parquet is missing, cannot be read or holds fewer rounds than run.json records; the
line names the file, the reason and the fix) or not started. A directory, FIFO or device in a
file's place is refused unread (fedkd.files). A process counts as the run's only if its start time
is the one run.json recorded (fedkd.runtime.processes), not merely its pid. The ETA adds the rounds
left at the measured seconds per round, divided over the runs in flight.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fedkd.config import UPPER
from fedkd.echo import safe_message
from fedkd.files import (
    METRICS,
    RUN_JSON,
    MetricsError,
    RunRecordError,
    link_problem,
    metrics_expected,
    missing_metrics,
    read_run_record,
)
from fedkd.pipeline.console import fmt_duration
from fedkd.runtime.processes import is_same_process, is_verified, valid_pid

# a "running" run whose process cannot be seen from here (another host) that has not finished a
# round for this long (and for 5 of its own rounds) has been killed or has crashed: run.json says
# "running" until the process itself ends it
STALE_SECONDS = 600.0


class StatusError(ValueError):
    """Bad input to `fedkd status` (a missing runs folder, an unreadable config)."""


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


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
        return f"{field} is {_shown(value)}, not {expected}"

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
    return record


def _updated_at(record: dict, run: Path) -> float:
    """When the run last wrote anything: the newest of run.json's "updated" and its files' mtimes
    (metrics.parquet and the checkpoint are rewritten after every round)."""
    newest = max((p.stat().st_mtime for p in run.iterdir() if p.is_file()), default=0.0)
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
    rounds = (record.get("spec") or {}).get("rounds") or 0
    status = record.get("status")
    # a finished run's metrics are what the report reads: damaged, the run is not done (a run
    # still training writes them again every round, and once more at its end)
    finished = status in ("complete", "diverged")
    seconds, best = [], None
    if (run / METRICS).exists() or (run / METRICS).is_symlink():
        from fedkd.engine.run_outputs import read_metrics

        try:
            metrics = read_metrics(
                run / METRICS,
                columns=["round", "test_acc", "seconds"],
                rounds_done=record.get("rounds_done") if finished else None,
            )
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
    done = record.get("rounds_done") or len(seconds)
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
    listed = sorted(root.rglob(RUN_JSON)) if root.is_dir() else []
    found = {str(p.parent.relative_to(root)): p.parent for p in listed}
    names = planned if planned is not None else sorted(found)
    out = []
    for name in names:
        if name in found:
            try:
                out.append(read_run(found[name], root, now, stale_after))
            except Exception as exc:  # noqa: BLE001 - one run's trouble must not hide the rest
                out.append(_damaged_run(found[name], root, exc))
        else:
            # a run folder that is a link is not searched, and training refuses it
            problem = link_problem(root / name)
            state = "damaged" if problem else "not started"
            out.append(RunProgress(name, state, 0, _rounds_from_path(name), None, problem=problem))
    return out


def _rounds_from_path(name: str) -> int:
    """The rounds of a planned run from its setting (…-R<rounds>, fedkd.run_paths)."""
    for part in reversed(Path(name).parts):
        for piece in part.split("-"):
            if piece.startswith("R") and piece[1:].isdigit():
                return int(piece[1:])
    return 0


DEFAULT_CONFIG = Path("config/config.yaml")
RUNS_PREFIX = Path("results/runs")


def _load_config(configfile: Path) -> dict:
    """The configuration as the workflow reads it (fedkd.pipeline.validation.read_config_file:
    a regular file within the bounds train applies to a spec file, at most 1 MiB)."""
    from fedkd.pipeline.validation import ConfigError, normalise_config, read_config_file

    where = f"--configfile {configfile}"
    try:
        config = read_config_file(configfile, where)
    except ConfigError as exc:
        raise StatusError(str(exc)) from None
    if config is None:
        raise StatusError(f"{where} is empty; give the workflow's configuration")
    normalise_config(config)  # numbers as the workflow reads them, defaults completed
    return config


def target_names(plan, targets: list[str]) -> list[str]:
    """The outputs (config entry names) the targets stand for, as the workflow's rules name their
    files: results/tables/<name>.{tex,md,csv,html} (and <name>_vs_paper.*),
    results/figures/<name>.{pdf,png}, results/aggregate/<name>.parquet,
    results/features/<name>.npz; "all" is every output."""
    from fedkd.pipeline.plan import VS_PAPER

    names = []
    for target in targets:
        if target == "all":
            names += list(plan.outputs)
            continue
        path = Path(target)
        stem = path.name.split(".", 1)[0]
        folder = path.parent.as_posix().rstrip("/")
        folders = ("results/tables", "results/figures", "results/aggregate", "results/features")
        if folder.endswith(folders) and stem.removesuffix(VS_PAPER) in plan.outputs:
            names.append(stem.removesuffix(VS_PAPER))
            continue
        known = ", ".join(
            f"results/{'tables' if plan.layout(n).output == 'table' else 'figures'}/{n}."
            f"{'tex' if plan.layout(n).output == 'table' else 'pdf'}"
            for n in plan.outputs
        )
        raise StatusError(f"target {target!r} is not an output of this configuration; its "
                          f"outputs: {known} (or all)")  # fmt: skip
    return list(dict.fromkeys(names))


def planned_runs(configfile: Path, root: Path, targets: list[str] | None = None) -> list[str]:
    """The run folders, relative to ``root`` (results/runs), that the configuration needs for
    ``targets`` (None or empty: for every output)."""
    from fedkd.pipeline import Plan

    config = _load_config(configfile)
    try:
        plan = Plan(config)
        names = target_names(plan, targets) if targets else list(plan.outputs)
        runs = {run for name in names for _, run in plan.target_runs(name)}
    except StatusError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the configuration gets wrong, named
        raise StatusError(
            f"--configfile {configfile} cannot be planned ({type(exc).__name__}: {exc}); "
            f"`snakemake -n --configfile {configfile}` names what is wrong"
        ) from None
    return sorted(_relative(r) for r in runs)


def _relative(run: str) -> str:
    # plan paths start at results/runs; the runs folder given may be elsewhere (another -d)
    return str(Path(run).relative_to(RUNS_PREFIX))


def eta_seconds(runs: list[RunProgress]) -> float | None:
    """Rounds left × seconds per round (a run's own mean; the median of the measured runs for
    runs not begun), over the runs in flight (at least one). None: nothing measured yet."""
    measured = [r.seconds_per_round for r in runs if r.seconds_per_round]
    if not measured:
        return None
    typical = statistics.median(measured)
    pending = [r for r in runs if r.state in ("running", "stopped", "not started") or _to_rerun(r)]
    work = sum(r.rounds_left * (r.seconds_per_round or typical) for r in pending)
    in_flight = max(1, sum(r.state == "running" for r in runs))
    return work / in_flight


STATES = ("done", "running", "stopped", "failed", "damaged", "not started")


def _to_rerun(run: RunProgress) -> bool:
    """A failed run that recorded an error (not a diverged one): it trains again once fixed."""
    return run.state == "failed" and run.problem is not None


def report(runs: list[RunProgress], root: Path, what: str | None = None,
           notes: list[str] | tuple[str, ...] = ()) -> str:  # fmt: skip
    """The text `fedkd status` prints: counts, each running run's progress, the ETA. ``what``
    names the runs counted (a target and its configuration); ``notes`` follow the counts."""
    counts = {s: sum(r.state == s for r in runs) for s in STATES}
    shown = "".join(
        f", {counts[s]:,} {s}" for s in STATES[1:] if counts[s] or s == "running"
    )  # fmt: skip
    lines = [f"{what or root}: {counts['done']:,} of {len(runs):,} runs done{shown}", *notes]
    for r in runs:
        if r.state not in ("running", "stopped"):
            continue
        speed = f"{r.seconds_per_round:.1f} s/round" if r.seconds_per_round else "first round"
        left = (
            f", ~{fmt_duration(r.rounds_left * r.seconds_per_round)} left"
            if r.seconds_per_round and r.state == "running" else ""
        )  # fmt: skip
        unverified = (
            " (process unverified: its run.json predates recorded start times)"
            if r.unverified else ""
        )  # fmt: skip
        lines.append(
            f"  {r.state:8} {r.path}  round {r.rounds_done}/{r.rounds}, {speed}{left}{unverified}"
        )
    if counts["stopped"]:
        lines.append("stopped: killed or crashed (the process is gone, or no round for a while); "
                     "re-run the workflow to resume them from their checkpoints")  # fmt: skip
    for r in runs:
        if _to_rerun(r):
            lines.append(
                f"  failed   {r.path}  after round {r.rounds_done}: {r.problem}; fix the cause, "
                "then re-run the workflow to resume it from its checkpoint"
            )
        elif r.state == "failed":
            lines.append(f"  failed   {r.path}  diverged after round {r.rounds_done}")
        if r.state == "damaged":
            lines.append(f"  damaged  {r.problem}")
    left = sum(
        r.state in ("running", "stopped", "damaged", "not started") or _to_rerun(r) for r in runs
    )
    eta = eta_seconds(runs)
    runs_left = f"{left:,} run{'s' if left > 1 else ''}"
    if not left:
        lines.append("ETA: nothing left to train")
    elif eta is None:
        lines.append("ETA: unknown until a run has finished a round")
    elif not counts["running"]:
        lines.append(f"ETA: ~{fmt_duration(eta)} of training left ({runs_left}, none running now)")
    else:
        lines.append(
            f"ETA: ~{fmt_duration(eta)} ({runs_left} to finish, {counts['running']} at a time)"
        )
    # a run folder's name is the user's text: no escape sequence or bidi override of it reaches
    # the terminal (fedkd.echo), and every path is printed whole
    return safe_message("\n".join(lines), line_limit=100_000)


def status_main(root: str | Path = "results/runs", configfile: str | Path | None = None,
                stale_after: float = STALE_SECONDS,
                targets: list[str] | None = None) -> str:  # fmt: skip
    """The report for the runs the targets need (see the module's docstring for which count).
    Before any run (no runs folder yet: the workflow is still partitioning, or has not begun)
    the planned runs count as not started."""
    root = Path(root)
    if not math.isfinite(stale_after) or stale_after <= 0:
        raise StatusError(f"--stale-after must be a positive number of seconds, got {stale_after}")
    if root.exists() and not root.is_dir():
        raise StatusError(f"runs folder {root} is not a folder; give the runs folder with --runs")
    targets = list(targets or [])
    notes: list[str] = []
    if targets or configfile:
        if configfile is None:
            if not DEFAULT_CONFIG.exists():
                raise StatusError(
                    f"no --configfile given and no {DEFAULT_CONFIG} here; run from the "
                    "workflow's folder or give the configuration with --configfile"
                )
            configfile = DEFAULT_CONFIG
        planned = planned_runs(Path(configfile), root, targets)
        what = f"{' '.join(targets) or 'all outputs'} of {configfile}"
    else:
        planned, what = None, None
    if planned is None and not root.is_dir():
        raise StatusError(
            f"runs folder {root} does not exist; give the folder holding the runs with --runs "
            "(default results/runs, under the workflow's working directory), or the targets and "
            "--configfile the workflow was started with to count the runs it plans"
        )
    return report(collect(root, planned, stale_after=stale_after), root, what, notes)
