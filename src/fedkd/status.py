"""``fedkd status [RUNS_DIR]``: how far the training runs under results/runs are, from their
run.json and metrics.parquet alone (it works while Snakemake runs, on a cluster's shared disk too).

A run is done (complete), failed (diverged), running (its last round is recent), stopped (no round
for a while: killed or crashed; re-running the workflow resumes it from its checkpoint), damaged
(its run.json cannot be read; the line says how to fix it) or, given the configuration, not
started. The ETA adds the rounds left at the measured seconds per round,
divided over the runs in flight.
"""

from __future__ import annotations

import math
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
    """When the run last wrote a round: run.json's "updated", else the newest file's mtime."""
    stamp = record.get("updated")
    if stamp:
        try:
            return datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            pass
    return max((p.stat().st_mtime for p in run.iterdir() if p.is_file()), default=0.0)


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
    elif status == "stopped":  # the run recorded why it stopped (a full disk)
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


def planned_runs(configfile: Path, root: Path) -> list[str]:
    """The run folders the configuration needs, relative to ``root`` (results/runs)."""
    import yaml

    from fedkd.pipeline import Plan
    from fedkd.pipeline.validation import normalise_config

    try:
        config = yaml.safe_load(configfile.read_text())
    except OSError as exc:
        raise StatusError(f"cannot read --configfile {configfile}: {exc.strerror}") from None
    normalise_config(config)  # numbers as the workflow reads them, defaults completed
    runs = Plan(config).all_runs()
    # plan paths start at results/runs; the runs folder given may be elsewhere (another -d)
    return sorted(str(Path(r).relative_to("results/runs")) for r in runs)


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


def report(runs: list[RunProgress], root: Path) -> str:
    """The text `fedkd status` prints: counts, each running run's progress, the ETA."""
    counts = {s: sum(r.state == s for r in runs) for s in STATES}
    shown = ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s] or s in ("done", "running"))
    lines = [f"{root}: {len(runs)} runs: {shown}"]
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
        lines.append("stopped: no round for a while (killed or crashed); re-run the workflow to "
                     "resume them from their checkpoints")  # fmt: skip
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
    else:
        in_flight = max(1, counts["running"])
        lines.append(f"ETA: ~{fmt_duration(eta)} ({left} runs to finish, {in_flight} at a time)")
    return "\n".join(lines)


def status_main(root: str | Path = "results/runs", configfile: str | Path | None = None,
                stale_after: float = STALE_SECONDS) -> str:  # fmt: skip
    root = Path(root)
    if not root.is_dir():
        raise StatusError(
            f"runs folder {root} does not exist; give the folder holding the runs "
            "(default results/runs, under the workflow's working directory)"
        )
    planned = planned_runs(Path(configfile), root) if configfile else None
    if not math.isfinite(stale_after) or stale_after <= 0:
        raise StatusError(f"--stale-after must be a positive number of seconds, got {stale_after}")
    return report(collect(root, planned, stale_after=stale_after), root)
