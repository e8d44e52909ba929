"""``fedkd status [TARGET ...] [--configfile FILE]``: how far the training runs of what is being
built are, from their run.json and metrics.parquet alone (it works while Snakemake runs, on a
cluster's shared disk too).

Which runs count, as Snakemake would pick them: the runs the TARGETs need (the same targets as
``snakemake``, e.g. results/tables/table3.tex, planned from --configfile or the default
config/config.yaml, fedkd.pipeline.Plan); with --configfile alone, every run of that
configuration; with neither, the runs the workflow running in this folder is building (its
.snakemake/locks), else every run found.

A run is done (complete), failed (diverged), running, stopped (killed or crashed: its process is
gone, or on another host no round for a while, or it recorded why it stopped, e.g. a full disk;
re-running the workflow resumes it from its checkpoint), damaged (its run.json cannot be read; the
line says how to fix it) or not started. The ETA adds the rounds left at the measured seconds per
round, divided over the runs in flight.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fedkd.files import RunRecordError, read_run_record

RUN_JSON = "run.json"
METRICS = "metrics.parquet"
# a "running" run that has not finished a round for this long (and for 5 of its own rounds) has
# been killed or has crashed: run.json says "running" until the process itself ends it
STALE_SECONDS = 600.0


class StatusError(ValueError):
    """Bad input to `fedkd status` (a missing runs folder, an unreadable config)."""


@dataclass
class RunProgress:
    path: str  # relative to the runs folder
    state: str  # done, failed, running, stopped, not started
    rounds_done: int
    rounds: int
    seconds_per_round: float | None  # mean over its rounds so far
    best_acc: float | None = None
    problem: str | None = None  # why a damaged run's record cannot be read, and the fix

    @property
    def rounds_left(self) -> int:
        return max(0, self.rounds - self.rounds_done)


def _updated_at(record: dict, run: Path) -> float:
    """When the run last wrote anything: the newest of run.json's "updated" and its files' mtimes
    (metrics.parquet and the checkpoint are rewritten after every round)."""
    newest = max((p.stat().st_mtime for p in run.iterdir() if p.is_file()), default=0.0)
    stamp = record.get("updated")
    if stamp:
        try:
            return max(newest, datetime.fromisoformat(stamp).timestamp())
        except ValueError:
            pass
    return newest


def process_alive(record: dict) -> bool | None:
    """Whether the process that wrote a "running" run.json still runs: None when it cannot be
    told from here (another host, or an older run.json without ``process``)."""
    proc = record.get("process") or {}
    pid = proc.get("pid")
    if not isinstance(pid, int) or proc.get("host") != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process with that pid
        pass
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            # killed but not yet reaped by its parent: a zombie is gone
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
            # the pid taken by another program since
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            return b"fedkd" in cmdline
        except (OSError, IndexError):
            return None
    return True


def read_run(run: Path, root: Path, now: float, stale_after: float = STALE_SECONDS) -> RunProgress:
    """The progress of one run directory (one holding run.json)."""

    rel = str(run.relative_to(root))
    try:
        record = read_run_record(run / RUN_JSON)
    except OSError:  # gone between the listing and the read
        return RunProgress(rel, "running", 0, 0, None)
    except RunRecordError as exc:
        return RunProgress(rel, "damaged", 0, _rounds_from_path(rel), None, problem=str(exc))
    rounds = int((record.get("spec") or {}).get("rounds") or 0)
    seconds, best = [], None
    if (run / METRICS).exists():
        from fedkd.engine.run_outputs import read_metrics

        try:
            metrics = read_metrics(run / METRICS, columns=["round", "test_acc", "seconds"])
            played = metrics[metrics["round"] >= 1]
            seconds = [float(s) for s in played["seconds"] if s == s and s > 0]
            best = float(played["test_acc"].max()) if len(played) else None
        except Exception:  # noqa: BLE001 - a file in the middle of being replaced
            pass
    done = int(record.get("rounds_done") or len(seconds))
    per_round = statistics.fmean(seconds) if seconds else None
    status = record.get("status")
    if status == "complete":
        state = "done"
    elif status == "diverged":
        state = "failed"
    elif status == "stopped" or process_alive(record) is False:
        state = "stopped"
    else:
        quiet_for = now - _updated_at(record, run)
        limit = max(stale_after, 5 * per_round) if per_round else stale_after
        state = "stopped" if quiet_for > limit else "running"
    return RunProgress(rel, state, done, rounds, per_round, best)


def collect(root: Path, planned: list[str] | None = None, now: float | None = None,
            stale_after: float = STALE_SECONDS) -> list[RunProgress]:  # fmt: skip
    """Every run under ``root``; with ``planned`` (run folders relative to ``root``) also those not
    started yet, and only those (runs of other configurations are left out)."""
    now = time.time() if now is None else now
    found = {str(p.parent.relative_to(root)): p.parent for p in sorted(root.rglob(RUN_JSON))}
    names = planned if planned is not None else sorted(found)
    out = []
    for name in names:
        if name in found:
            out.append(read_run(found[name], root, now, stale_after))
        else:
            rounds = _rounds_from_path(name)
            out.append(RunProgress(name, "not started", 0, rounds, None))
    return out


def _rounds_from_path(name: str) -> int:
    """The rounds of a planned run from its setting (…-R<rounds>, fedkd.pipeline.paths)."""
    for part in reversed(Path(name).parts):
        for piece in part.split("-"):
            if piece.startswith("R") and piece[1:].isdigit():
                return int(piece[1:])
    return 0


DEFAULT_CONFIG = Path("config/config.yaml")
LOCKS = Path(".snakemake/locks")
RUNS_PREFIX = Path("results/runs")


def _load_config(configfile: Path) -> dict:
    import yaml

    from fedkd.pipeline.validation import normalise_config

    try:
        config = yaml.safe_load(Path(configfile).read_text())
    except OSError as exc:
        raise StatusError(f"cannot read --configfile {configfile}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise StatusError(f"--configfile {configfile} is not valid YAML: {exc}") from None
    if not isinstance(config, dict):
        raise StatusError(f"--configfile {configfile} does not hold a mapping of keys")
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

    plan = Plan(_load_config(configfile))
    try:
        names = target_names(plan, targets) if targets else list(plan.outputs)
        runs = {run for name in names for _, run in plan.target_runs(name)}
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, StatusError):
            raise
        raise StatusError(
            f"--configfile {configfile} cannot be planned ({type(exc).__name__}: {exc}); "
            f"`snakemake -n --configfile {configfile}` names what is wrong"
        ) from None
    return sorted(_relative(r) for r in runs)


def _relative(run: str) -> str:
    # plan paths start at results/runs; the runs folder given may be elsewhere (another -d)
    return str(Path(run).relative_to(RUNS_PREFIX))


def workflow_runs(locks: Path = LOCKS) -> list[str] | None:
    """The runs the Snakemake workflow running in this folder trains (its output lock lists
    the outputs of every job it runs), relative to results/runs; None when none runs here."""
    found = sorted(locks.glob("*.output.lock")) if locks.is_dir() else []
    if not found:
        return None
    runs = set()
    for lock in found:
        try:
            lines = lock.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            path = Path(line.strip())
            if path.name == RUN_JSON and path.is_relative_to(RUNS_PREFIX):
                runs.add(_relative(str(path.parent)))
    return sorted(runs)


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def eta_seconds(runs: list[RunProgress]) -> float | None:
    """Rounds left × seconds per round (a run's own mean; the median of the measured runs for
    runs not begun), over the runs in flight (at least one). None: nothing measured yet."""
    measured = [r.seconds_per_round for r in runs if r.seconds_per_round]
    if not measured:
        return None
    typical = statistics.median(measured)
    pending = [r for r in runs if r.state in ("running", "stopped", "not started")]
    work = sum(r.rounds_left * (r.seconds_per_round or typical) for r in pending)
    in_flight = max(1, sum(r.state == "running" for r in runs))
    return work / in_flight


STATES = ("done", "running", "stopped", "failed", "damaged", "not started")


def report(runs: list[RunProgress], root: Path, what: str | None = None) -> str:
    """The text `fedkd status` prints: counts, each running run's progress, the ETA. ``what``
    names the runs counted (a target and its configuration)."""
    counts = {s: sum(r.state == s for r in runs) for s in STATES}
    shown = ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s] or s in ("done", "running"))
    lines = [f"{what or root}: {len(runs)} runs: {shown}"]
    for r in runs:
        if r.state not in ("running", "stopped"):
            continue
        speed = f"{r.seconds_per_round:.1f} s/round" if r.seconds_per_round else "first round"
        left = (
            f", ~{fmt_duration(r.rounds_left * r.seconds_per_round)} left"
            if r.seconds_per_round and r.state == "running" else ""
        )  # fmt: skip
        lines.append(f"  {r.state:8} {r.path}  round {r.rounds_done}/{r.rounds}, {speed}{left}")
    if counts["stopped"]:
        lines.append("stopped: killed or crashed (the process is gone, or no round for a while); "
                     "re-run the workflow to resume them from their checkpoints")  # fmt: skip
    for r in runs:
        if r.state == "failed":
            lines.append(f"  failed   {r.path}  diverged after round {r.rounds_done}")
        if r.state == "damaged":
            lines.append(f"  damaged  {r.problem}")
    left = sum(r.state in ("running", "stopped", "damaged", "not started") for r in runs)
    eta = eta_seconds(runs)
    if not left:
        lines.append("ETA: nothing left to train")
    elif eta is None:
        lines.append("ETA: unknown until a run has finished a round")
    elif not counts["running"]:
        runs_left = f"{left} run{'s' if left > 1 else ''}"
        lines.append(f"ETA: ~{fmt_duration(eta)} of training left ({runs_left}, none running now)")
    else:
        lines.append(
            f"ETA: ~{fmt_duration(eta)} ({left} runs to finish, {counts['running']} at a time)"
        )
    return "\n".join(lines)


def status_main(root: str | Path = "results/runs", configfile: str | Path | None = None,
                stale_after: float = STALE_SECONDS, targets: list[str] | None = None,
                locks: str | Path = LOCKS) -> str:  # fmt: skip
    """The report for the runs the targets need (see the module's docstring for which count)."""
    root = Path(root)
    if not math.isfinite(stale_after) or stale_after <= 0:
        raise StatusError(f"--stale-after must be a positive number of seconds, got {stale_after}")
    if not root.is_dir():
        raise StatusError(
            f"runs folder {root} does not exist; give the folder holding the runs with --runs "
            "(default results/runs, under the workflow's working directory)"
        )
    targets = list(targets or [])
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
        planned = workflow_runs(Path(locks))
        what = "the workflow running here (its runs to train)" if planned is not None else None
    return report(collect(root, planned, stale_after=stale_after), root, what)
