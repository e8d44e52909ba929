"""``fedkd status [TARGET ...] [--configfile FILE]``: how far the training runs of what is being
built are, from their run.json and metrics.parquet alone (it works while Snakemake runs, on a
cluster's shared disk too; fedkd.tools.run_progress reads each run).

Which runs count, as Snakemake would pick them: the runs the TARGETs need (the same targets as
``snakemake``, e.g. results/tables/table3.tex, planned from --configfile or the default
config/config.yaml, fedkd.pipeline.Plan); with --configfile alone, every run of that
configuration; with neither, every run found in the runs folder. Before any run (no runs folder
yet) the planned runs are all not started. Nothing of Snakemake's own state is read: give the
targets and --configfile the workflow was started with.

A run is done (complete), failed (diverged, a result; or an error it recorded, which the line shows:
once its cause is fixed, re-running the workflow resumes it from its checkpoint), running, stopped
(killed or crashed without a record: its process is gone, or on another host no round for a while,
or it recorded why it stopped, e.g. a full disk, or its job ended without a run.json, as Snakemake
removes a failed job's outputs, the line then giving its log's last line; re-running the workflow
resumes it from its checkpoint), damaged (its run.json cannot be read, holds a field of the wrong
type, does not hash to its record_sha256 or names another run than its folder's path, or a
finished run's metrics.parquet is missing, cannot be read, is not the file its metrics_sha256
names or holds fewer rounds than run.json records; the line names the file, the reason and the
fix), outdated (with a configuration: started by the workflow under other flags or code than
the configuration and the sources give now, by its ``.stamp``, so Snakemake trains it again
from round 1) or not started. A
directory, FIFO or device in a file's place is refused unread (fedkd.files). A process counts as
the run's only if its start time is the one run.json recorded (fedkd.runtime.processes), not
merely its pid. The ETA adds the rounds left at the measured seconds per round, divided over the
runs in flight; a run with a stop_at_acc counts at its planned rounds, which makes the ETA an
upper bound, said so.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

from fedkd.echo import safe_message
from fedkd.files import read_regular_file
from fedkd.pipeline.console import fmt_duration
from fedkd.tools.run_progress import STALE_SECONDS, RunProgress, collect


class StatusError(ValueError):
    """Bad input to `fedkd status` (a missing runs folder, an unreadable config)."""


DEFAULT_CONFIG = Path("config/config.yaml")
RUNS_PREFIX = Path("results/runs")


# the workflow's schema: in the folder status runs in (the workflow's, as its targets are named),
# else in the checkout this package is installed from
SCHEMA = Path("workflow", "schemas", "config.schema.yaml")


def _schema() -> Path | None:
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (base / SCHEMA).is_file():
            return base / SCHEMA
    return None


def _load_config(configfile: Path) -> dict:
    """The configuration as the workflow reads it (fedkd.pipeline.validation.read_config_file:
    a regular file within the bounds train applies to a spec file, at most 1 MiB), refused as the
    workflow refuses it (validate_config, where the workflow's schema is found)."""
    from fedkd.pipeline.validation import (
        ConfigError,
        normalise_config,
        read_config_file,
        validate_config,
    )

    where = f"--configfile {configfile}"
    try:
        config = read_config_file(configfile, where)
    except ConfigError as exc:
        raise StatusError(str(exc)) from None
    if config is None:
        raise StatusError(f"{where} is empty; give the workflow's configuration")
    schema = _schema()
    if schema is None:
        normalise_config(config)  # numbers as the workflow reads them, defaults completed
        return config
    try:
        validate_config(config, schema)  # completes it as normalise_config does
    except ConfigError as exc:
        raise StatusError(f"{where}: {exc}") from None
    return config


def targets_and_runs(given: list[str], runs: str | None, configfile: str | None):
    """``fedkd status``'s TARGETs and runs folder: a folder given alone is the runs folder (``fedkd
    status RUNS``: every run found there); beside --configfile, --runs or a target it is refused,
    as the runs folder it would replace is theirs."""
    targets = []
    for t in given:
        if Path(t).is_dir() and not t.rstrip("/").endswith(("results/tables", "results/figures")):
            if configfile or runs or len(given) > 1:
                raise StatusError(
                    f"{t} is a folder, not a target; give a runs folder with --runs, or a "
                    "table or figure such as results/tables/table3.tex"
                )
            runs = t
        else:
            targets.append(t)
    return targets, runs or str(RUNS_PREFIX)


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
    return _planned(configfile, targets)[1]


def _planned(configfile: Path, targets: list[str] | None):
    """The configuration's plan and ``planned_runs``."""
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
    return plan, sorted(_relative(r) for r in runs)


def outdated_runs(plan, root: Path, runs: list[str]) -> set[str]:
    """The runs among ``runs`` (relative to ``root``) whose ``.stamp`` (the flags and code hash
    the workflow's train job started them under) is not the one the configuration and sources
    give now: Snakemake trains them again (the train rule's params changed), from round 1."""
    from fedkd.run_paths import parse_run_dir

    stale = set()
    for run in runs:
        try:
            stamp = read_regular_file(root / run / ".stamp", "a run's stamp", 1024).decode()
        except (OSError, ValueError):  # UnreadableFileError and UnicodeDecodeError included
            continue  # not started by the workflow, or not yet
        if stamp.strip() != plan.train_stamp(**parse_run_dir(str(RUNS_PREFIX / run))):
            stale.add(run)
    return stale


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
    pending = [r for r in runs if r.state in LEFT or _to_rerun(r)]
    work = sum(r.rounds_left * (r.seconds_per_round or typical) for r in pending)
    in_flight = max(1, sum(r.state == "running" for r in runs))
    return work / in_flight


STATES = ("done", "running", "stopped", "failed", "damaged", "outdated", "not started")
LEFT = ("running", "stopped", "outdated", "not started")  # trained (again) by the workflow
_STOP_IN_PATH = re.compile(r"-stop[0-9.]+/")  # fedkd.run_paths: a setting with stop_at_acc


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
        if r.state == "stopped" and r.problem:  # no run.json to give its rounds
            lines.append(f"  stopped  {r.path}  {r.problem}")
            continue
        lines.append(
            f"  {r.state:8} {r.path}  round {r.rounds_done}/{r.rounds}, {speed}{left}{unverified}"
        )
    lines += [f"  outdated {r.path}" for r in runs if r.state == "outdated"]
    if counts["outdated"]:
        lines.append("outdated: trained under other flags or code than the configuration and "
                     "the sources give now; the workflow trains them again from round 1")  # fmt: skip
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
    pending = [r for r in runs if r.state in (*LEFT, "damaged") or _to_rerun(r)]
    left, eta = len(pending), eta_seconds(runs)
    runs_left = f"{left:,} run{'s' if left > 1 else ''}"
    # a run with a stop_at_acc (a rounds-to-target run) counts at its planned rounds
    early = sum(bool(_STOP_IN_PATH.search(r.path)) for r in pending)
    bound = "at most " if early else ""
    if not left:
        lines.append("ETA: nothing left to train")
    elif eta is None:
        lines.append("ETA: unknown until a run has finished a round")
    elif not counts["running"]:
        lines.append(
            f"ETA: {bound}~{fmt_duration(eta)} of training left ({runs_left}, none running now)"
        )
    else:
        lines.append(
            f"ETA: {bound}~{fmt_duration(eta)} ({runs_left} to finish, {counts['running']} at a "
            "time)"
        )
    if early and eta is not None:
        lines.append(
            f"  {early:,} of them stop once they reach their target accuracy (stop_at_acc), "
            "likely well before their planned rounds, which the ETA counts"
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
        plan, planned = _planned(Path(configfile), targets)
        what = f"{' '.join(targets) or 'all outputs'} of {configfile}"
    else:
        planned, what = None, None
    if planned is None and not root.is_dir():
        raise StatusError(
            f"runs folder {root} does not exist; give the folder holding the runs with --runs "
            "(default results/runs, under the workflow's working directory), or the targets and "
            "--configfile the workflow was started with to count the runs it plans"
        )
    runs = collect(root, planned, stale_after=stale_after)
    if planned is not None:
        stale = outdated_runs(plan, root, [r.path for r in runs if r.state in REDONE])
        runs = [replace(r, state="outdated", rounds_done=0) if r.path in stale else r for r in runs]
    return report(runs, root, what, notes)


# the states of a run that the workflow trains again when its stamp changed (a running run's job
# is Snakemake's own; a damaged one is named with its fix)
REDONE = ("done", "stopped", "failed")
