"""A run folder checked before its rows enter an aggregate: a table is never silently wrong.

A folder the workflow trained (results/runs/DATASET/VARIANT/SETTING/seedN) must hold the run its
path names: run.json's dataset, variant label, setting and seed spell that path again, and its
spec hashes to its recorded spec_hash (so a hand-edited spec shows). Its metrics must be the
rounds run.json records: rounds 1..N once each, N the rounds it records as done, and its best and
final test accuracy those of the summary. A swapped, moved, relabelled or edited folder is refused
with its path and what disagrees; a table built from it would show another run's numbers.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd

from fedkd.digests import DigestMismatch
from fedkd.run_paths import normalise_path_keys, parse_run_dir, parse_setting, setting_id
from fedkd.values import is_int

# the end of a path the workflow spells for a run (fedkd.run_paths.run_dir), wherever it lies
RUN_PATH_TAIL = re.compile(r"(?:^|.*/)([^/]+/[^/]+/[^/]+/seed[0-9]+)/*")


class RunMismatch(ValueError):
    """A run folder whose path, run.json and metrics disagree; the message names the folder."""


def run_path_keys(run_dir: str) -> dict[str, str] | None:
    """The dataset, variant, setting and seed a run path spells in its last four names
    (DATASET/VARIANT/SETTING/seedN, SETTING a canonical run setting), below results/runs or
    anywhere else; None for a folder named otherwise (a run trained by hand, as /tmp/myrun)."""
    m = RUN_PATH_TAIL.fullmatch(Path(run_dir).as_posix())
    if m is None:
        return None
    keys = parse_run_dir(f"results/runs/{m[1]}")
    try:
        parse_setting(keys["setting"])
    except ValueError:
        return None
    return keys


def check_run_path(run_dir: str, rec: dict) -> None:
    """run.json's spec and variant label against the path they were trained under, and against
    the folder the path leads to (a link may lead elsewhere) when that is named as a run too."""
    _check_path_keys(run_dir, run_dir, rec)
    real = os.path.realpath(run_dir)
    if real != os.path.abspath(run_dir):
        _check_path_keys(f"{run_dir} (which leads to {real})", real, rec)


def _check_path_keys(shown: str, run_dir: str, rec: dict) -> None:
    keys = run_path_keys(run_dir)
    if keys is None:
        return
    spec = rec.get("spec") if isinstance(rec.get("spec"), dict) else {}
    labels = rec.get("labels") if isinstance(rec.get("labels"), dict) else {}
    recorded = {
        "dataset": spec.get("dataset"),
        "variant": labels.get("variant"),
        "setting": _recorded_setting(spec),
        "seed": str(spec["seed"]) if is_int(spec.get("seed")) else spec.get("seed"),
    }
    differ = [
        f"{key} {keys[key]!r} in the path, {recorded[key]!r} in run.json"
        for key in ("dataset", "variant", "setting", "seed")
        if recorded[key] != keys[key]
    ]
    if differ:
        raise RunMismatch(
            f"run folder {shown} does not hold the run its path names ({'; '.join(differ)}): "
            "it was moved, swapped or edited; delete the folder and let the workflow train the "
            "run again"
        )


def _recorded_setting(spec: dict) -> str | None:
    try:
        return setting_id(normalise_path_keys(dict(spec)))
    except (KeyError, TypeError, ValueError):
        return None


def check_spec_hash(run_dir: str, rec: dict) -> None:
    """A recorded spec_hash is the hash of the recorded spec (RunSpec.hash, from the values as
    recorded), so a spec edited after training is refused."""
    from fedkd.config import IDENTITY_UNLESS_DEFAULT, NOT_IN_IDENTITY, identity_hash

    recorded_hash, spec = rec.get("spec_hash"), rec.get("spec")
    if recorded_hash is None or not isinstance(spec, dict):
        return
    identity = {k: v for k, v in spec.items() if k not in NOT_IN_IDENTITY}
    for key, default in IDENTITY_UNLESS_DEFAULT.items():
        if key in identity and identity[key] == default:
            identity.pop(key)
    if identity_hash(identity) != recorded_hash:
        raise RunMismatch(
            f"run folder {run_dir}: the spec in its run.json does not hash to its recorded "
            f"spec_hash {recorded_hash!r}, so run.json was edited after the run; delete the "
            "folder and train the run again"
        )


def check_metrics_against_record(run_dir: str, rec: dict, metrics: pd.DataFrame) -> None:
    """The metrics of a finished run (complete or diverged) are the rounds its run.json records:
    rounds 1..rounds_done once each, and the summary's best and final test accuracy."""
    if rec.get("status") not in ("complete", "diverged") or not len(metrics):
        return
    fix = "the metrics belong to another run or were edited; delete the folder and train again"
    rounds = sorted(metrics["round"].tolist())
    done = rec.get("rounds_done")
    expected = list(range(1, (done if is_int(done) else len(rounds)) + 1))
    if rounds != expected:
        shown = rounds if len(rounds) <= 8 else [*rounds[:3], "...", *rounds[-3:]]
        raise RunMismatch(
            f"run folder {run_dir}: its metrics hold rounds {shown}, and its run.json records "
            f"rounds 1 to {len(expected)}; {fix}"
        )
    spec = rec.get("spec") if isinstance(rec.get("spec"), dict) else {}
    if is_int(spec.get("rounds")) and len(rounds) > spec["rounds"]:
        raise RunMismatch(
            f"run folder {run_dir}: its metrics hold {len(rounds)} rounds, more than the "
            f"{spec['rounds']} of its spec; {fix}"
        )
    summary = rec.get("summary") if isinstance(rec.get("summary"), dict) else {}
    if "test_acc" not in metrics.columns:
        return  # named by the accuracy check
    acc = metrics.sort_values("round", kind="mergesort")["test_acc"]
    acc = pd.to_numeric(acc, errors="coerce").astype("float64")
    for key, value in (("best_acc", acc.max()), ("final_acc", acc.iloc[-1])):
        recorded = summary.get(key)
        if isinstance(recorded, (int, float)) and not _same(recorded, value):
            raise RunMismatch(
                f"run folder {run_dir}: its run.json records {key} {recorded!r}, and its metrics "
                f"give {float(value)!r}; {fix}"
            )


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def check_record_seal(run_dir: str, rec: dict) -> None:
    """A sealed run.json (``fedkd.digests.seal_run_record``) hashes to its ``record_sha256``: its
    summary, status and rounds are those the run wrote."""
    from fedkd.digests import check_record_seal as check

    try:
        check(rec)
    except DigestMismatch as exc:
        raise RunMismatch(
            f"run folder {run_dir}: its run.json is damaged or was edited after the run ({exc}); "
            "delete its run.json and run the same `fedkd train` command again (it rebuilds the "
            "record from checkpoint.pt), or delete the folder and train the run again"
        ) from None


def check_run_links(run_dir: str) -> None:
    """A run folder below results/ is read through no link (at its folders, run.json or
    metrics.parquet): what a link leads to may be another run."""
    from fedkd.files import METRICS, READS, RUN_JSON, SymlinkError, refuse_links_in_results

    try:
        for name in (RUN_JSON, METRICS):
            refuse_links_in_results(Path(run_dir) / name, READS)
    except SymlinkError as exc:
        raise RunMismatch(f"run {run_dir}: {exc}") from None
