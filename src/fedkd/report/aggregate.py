"""Collect run directories into one long table: one row per (run, round), run keys repeated.

``fedkd aggregate --out FILE --run LABEL=RUN_DIR ...`` writes it as Parquet; every table and most
figures are rendered from such a file. The columns are fixed (``AGGREGATE_COLUMNS``), followed by
the strategies' ``server_*`` columns in name order, so the file is the same for the same runs.

Beyond the pipeline contract columns are added at the end of the run keys: ``val_size`` and
``dataset_kind`` (image or text), which table 2 shows, ``model_options``, ``run_choices`` (the
run-level choices of fedkd.run_choices, which captions name where not the default) and
``collapsed``: the
run's global model never got meaningfully above chance (``fedkd.collapse``; from run.json's
summary, or from the metrics for a run.json written before the mark existed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from fedkd.collapse import is_collapsed
from fedkd.digests import DigestMismatch, recorded_metrics_sha256, write_parquet
from fedkd.files import (
    MAX_AGGREGATE_BYTES,
    METRICS,
    RUN_JSON,
    MetricsError,
    atomic_write,
    metrics_expected,
    missing_metrics,
    read_metrics_table,
    read_parquet_file,
    read_run_record,
    refuse_links_in_results,
)
from fedkd.report.run_checks import (
    RunMismatch,
    check_metrics_against_record,
    check_record_seal,
    check_run_links,
    check_run_path,
    check_spec_hash,
)
from fedkd.run_choices import recorded_choices

# the run keys, one value per run, repeated on each of its rows
RUN_KEY_COLUMNS = [
    "label",
    "run",
    "strategy",
    "variant",
    "dataset",
    "model",
    "partition",
    "alpha",
    "shards",
    "clients",
    "participation",
    "local_epochs",
    "rounds_planned",
    "seed",
    "status",
    "eval_local",
    "params",
    "train_size",
    "test_size",
    "num_classes",
]
ROUND_COLUMNS = [
    "round",
    "test_acc",
    "test_loss",
    # the global model on the validation split: model selection without the test set
    "val_acc",
    "val_loss",
    "class_acc",
    "train_loss",
    "local_acc",
    "bytes_sent",
    "bytes_received",
    "seconds",
]
# model_options: a stand-in model's deviations from the paper's (e.g. a narrowed cnn), as JSON
# collapsed: the run's global model stayed at chance (fedkd.collapse); its table cells are marked
# run_choices: the run-level choices the papers leave open (fedkd.run_choices), as JSON
EXTRA_COLUMNS = ["val_size", "dataset_kind", "model_options", "run_choices", "collapsed"]
AGGREGATE_COLUMNS = RUN_KEY_COLUMNS + ROUND_COLUMNS + EXTRA_COLUMNS

SORT_KEYS = ["label", "dataset", "alpha", "participation", "local_epochs", "seed", "round"]

# the keys that decide a run's numbers apart from its seed: runs averaged into one table cell or
# one curve must agree on all of them
SETTING_KEYS = [
    "strategy",
    "params",
    "variant",
    "dataset",
    "model",
    "partition",
    "alpha",
    "shards",
    "clients",
    "participation",
    "local_epochs",
    "rounds_planned",
]

# Dirichlet concentration only means something for the Dirichlet partitioners, shards per client
# only for sharding; elsewhere the spec's default value is noise, so it is recorded as NaN
_ALPHA_SCHEMES = ("dirichlet", "dirichlet-equal")
_SHARD_SCHEMES = ("shards",)


class ReportError(ValueError):
    """Bad input to ``aggregate`` or ``render``; the message names the file, target or value."""


# --------------------------------------------------------------------------- reading one run
def _float_or_nan(v) -> float:
    return float("nan") if v is None else float(v)


def _run_keys(label: str, run_dir: str, rec: dict, where: Path) -> dict:
    spec = rec.get("spec")
    if not isinstance(spec, dict):
        raise ReportError(f"{where} has no 'spec' mapping; is this a fedkd run directory?")
    ds = rec.get("dataset") or {}
    labels = rec.get("labels") or {}
    partition = spec.get("partition")
    alpha = spec.get("alpha") if partition in _ALPHA_SCHEMES else None
    shards = spec.get("shards") if partition in _SHARD_SCHEMES else None
    try:
        return {
            "label": label,
            "run": run_dir,
            "strategy": spec["strategy"],
            "variant": str(labels.get("variant", "")),
            "dataset": spec["dataset"],
            "model": rec.get("model") or spec.get("model"),
            "partition": partition,
            "alpha": _float_or_nan(alpha),
            "shards": _float_or_nan(shards),
            "clients": int(spec["clients"]),
            "participation": float(spec["participation"]),
            "local_epochs": int(spec["local_epochs"]),
            "rounds_planned": int(spec["rounds"]),
            "seed": int(spec["seed"]),
            "status": str(rec.get("status", "")),
            "eval_local": bool(spec.get("eval_local", False)),
            "params": json.dumps(rec.get("strategy_params") or {}, sort_keys=True, default=str),
            "train_size": _int_or_none(ds.get("train")),
            "test_size": _int_or_none(ds.get("test")),
            "num_classes": _int_or_none(ds.get("num_classes")),
            "val_size": _int_or_none(ds.get("val")),
            "dataset_kind": str(ds.get("kind") or ""),
            "model_options": json.dumps(spec.get("model_options") or {}, sort_keys=True),
            "run_choices": json.dumps(
                recorded_choices(spec, str(rec.get("model") or spec.get("model"))),
                sort_keys=True,
            ),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"{where} lacks or has a bad spec value ({exc!r})") from exc


def _int_or_none(v):
    return None if v is None else int(v)


def _read_run(label: str, run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """A run's round columns (ROUND_COLUMNS, then its server_* columns) and its run keys (one
    value each, ``collapsed`` included), checked."""
    run_dir = str(run_dir)
    path = Path(run_dir)
    try:
        check_run_links(run_dir)
    except RunMismatch as exc:
        raise ReportError(f"{exc} (label {label!r})") from None
    if path.exists() and not path.is_dir():
        raise ReportError(
            f"run directory {run_dir} (label {label!r}) is a file, not a run's directory (the "
            "--out of its fedkd train); give the run's directory"
        )
    if not path.is_dir():
        raise ReportError(f"run directory {run_dir} (label {label!r}) does not exist")
    rec_path = path / RUN_JSON
    try:
        rec = read_run_record(rec_path)
    except FileNotFoundError as exc:
        raise ReportError(
            f"run directory {run_dir} (label {label!r}) has no {RUN_JSON}; the run never started"
        ) from exc
    except OSError as exc:
        raise ReportError(f"{rec_path} cannot be read: {exc}") from exc
    except ValueError as exc:  # RunRecordError: names the file and the fix
        raise ReportError(f"run {run_dir} (label {label!r}): {exc}") from exc
    keys = _run_keys(label, run_dir, rec, rec_path)
    try:
        check_run_path(run_dir, rec)
        check_spec_hash(run_dir, rec)
        check_record_seal(run_dir, rec)
    except RunMismatch as exc:
        raise ReportError(f"{exc} (label {label!r})") from None
    metrics_path = path / METRICS
    if metrics_path.exists() or metrics_path.is_symlink():
        try:
            # fewer rows than rounds done: a damaged file, which would pass for a shorter run;
            # other bytes than a finished run's record hashed: a damaged or swapped file
            table = read_metrics_table(
                metrics_path,
                rounds_done=rec.get("rounds_done"),
                sha256=recorded_metrics_sha256(rec),
            )
            metrics = table.to_pandas(use_threads=False)
        except MetricsError as exc:  # names the file, what is wrong and the fix
            raise ReportError(f"run {run_dir} (label {label!r}): {exc}") from None
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for odd columns
            raise ReportError(f"{metrics_path} cannot be read: {exc}") from exc
    elif metrics_expected(rec):  # finished with rounds recorded: they are gone
        raise ReportError(f"run {run_dir} (label {label!r}): {missing_metrics(path)}")
    else:
        metrics = pd.DataFrame()
    if len(metrics) and "round" not in metrics.columns:
        raise ReportError(f"{metrics_path} has no 'round' column")
    try:
        check_metrics_against_record(run_dir, rec, metrics)
    except RunMismatch as exc:
        raise ReportError(f"{exc} (label {label!r})") from None
    if len(metrics) == 0:
        # a run that diverged (or stopped) before finishing a round still shows in the tables
        metrics = pd.DataFrame([{"round": 0}])
    metrics = metrics.drop(columns=[c for c in ("clients",) if c in metrics.columns])
    metrics = metrics.sort_values("round", kind="mergesort").reset_index(drop=True)
    for col in ROUND_COLUMNS:
        if col not in metrics.columns:
            metrics[col] = None if col == "class_acc" else np.nan
    unknown = [c for c in metrics.columns if c not in ROUND_COLUMNS and not c.startswith("server_")]
    metrics = metrics.drop(columns=unknown)
    _check_accuracies(metrics, f"run {run_dir} (label {label!r})", metrics_path)
    keys["collapsed"] = _collapsed(rec, metrics, keys["num_classes"])
    return metrics, keys


def _collapsed(rec: dict, metrics: pd.DataFrame, num_classes: int | None) -> bool:
    """run.json's mark, else (a record written before it existed) the same rule on the rows."""
    summary = rec.get("summary")
    if isinstance(summary, dict) and "collapsed" in summary:
        return bool(summary["collapsed"])
    played = metrics[metrics["round"] >= 1]
    return is_collapsed(played["test_acc"].tolist(), num_classes)


# the accuracy columns: fractions in [0, 1]; NaN where a value was not measured (no validation
# split, local models not evaluated, a class absent from the test set, the round-0 row of a run
# that completed no round). A recorded round always has its test accuracy: a run that diverges
# stops before recording the round (fedkd.engine.run), so NaN there means a damaged file.
ACCURACY_COLUMNS = ("test_acc", "val_acc", "local_acc")


def _check_accuracies(metrics: pd.DataFrame, run: str, path: Path) -> None:
    """Refuse an accuracy outside [0, 1], infinite or not a number, or a recorded round without
    its test accuracy, naming the run, the round and the value: a table's mean would take it in
    and a claim could hold on it."""
    if _plainly_accuracies(metrics):
        return
    fix = f"its {path.name} was damaged or edited; delete {path.parent} and train the run again"
    rounds = metrics["round"].tolist()
    for col in (*ACCURACY_COLUMNS, "class_acc"):
        cells = metrics[col].tolist()
        if col == "class_acc":
            per_round = [[] if cell is None or _is_nan(cell) else _as_list(cell) for cell in cells]
        else:
            per_round = [[cell] for cell in cells]
        for r, values in zip(rounds, per_round, strict=True):
            required = col == "test_acc" and r >= 1
            if not required and _all_fractions_or_nan(values):
                continue  # the common case, judged at once
            for value in values:
                problem = _accuracy_problem(value, required)
                if problem:
                    shown = value.item() if isinstance(value, np.generic) else value
                    raise ReportError(f"{run}: {col}={shown!r} in round {r} {problem}; {fix}")


def _plainly_accuracies(metrics: pd.DataFrame) -> bool:
    """The common case, judged a column at a time: every accuracy a float in [0, 1] or NaN,
    and every recorded round's test accuracy known. False sends the run to the round-by-round
    check, which names what is wrong (a paper grid reads a million rounds: a check a round
    took most of an aggregate's time)."""
    for col in ACCURACY_COLUMNS:
        if not _all_fractions_or_nan(metrics[col].to_numpy()):
            return False
    rounds = metrics["round"].to_numpy()
    if rounds.dtype.kind not in "iu" or np.isnan(metrics["test_acc"].to_numpy()[rounds >= 1]).any():
        return False
    cells = [c for c in metrics["class_acc"].tolist() if c is not None and not _is_nan(c)]
    if not all(isinstance(c, np.ndarray) and c.ndim == 1 and c.dtype.kind == "f" for c in cells):
        return False
    return not cells or _all_fractions_or_nan(np.concatenate(cells))


def _all_fractions_or_nan(values: list) -> bool:
    array = np.asarray(values)
    if array.dtype.kind != "f":  # ints, bools, text, objects: judged one by one
        return False
    known = array[~np.isnan(array)]
    return bool(((known >= 0) & (known <= 1)).all())


def _as_list(cell) -> list:
    try:
        return list(cell)
    except TypeError:
        return [cell]  # a single value where per-class values belong: judged as one


def _is_nan(value) -> bool:
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def _accuracy_problem(value, required: bool) -> str | None:
    """Why ``value`` is not an accuracy, or None; NaN and null are accepted unless ``required``."""
    if value is None or _is_nan(value):
        return "is missing, and every recorded round has its test accuracy" if required else None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return "is not a number"
    if not math.isfinite(value):
        return "is not finite"
    if not 0 <= value <= 1:
        return "lies outside [0, 1], where every accuracy lies"
    return None


# --------------------------------------------------------------------------- the aggregate
def aggregate_runs(
    runs: list[tuple[str, str]], progress: Callable[[int, int], None] | None = None
) -> pd.DataFrame:
    """Read every (label, run_dir) and return the long table in its deterministic row order;
    ``progress(done, total)`` is called after each run is read."""
    if not runs:
        raise ReportError("no runs given; pass --run LABEL=RUN_DIR (or --runs-file FILE)")
    seen: set[tuple[str, str]] = set()
    frames, run_keys = [], []
    for label, run_dir in runs:
        key = (label, str(run_dir))
        if key in seen:
            raise ReportError(f"run {run_dir} is given twice under label {label!r}")
        seen.add(key)
        metrics, keys = _read_run(label, run_dir)
        frames.append(metrics)
        run_keys.append(keys)
        if progress is not None:
            progress(len(frames), len(runs))
    rounds = pd.concat(frames, ignore_index=True, sort=False)
    # each run's keys repeated on its rows, made in one go at the end: set on each run's frame
    # they took most of the time of an aggregate of 30,000 runs
    counts = [len(f) for f in frames]
    repeated = {
        k: [keys[k] for keys, n in zip(run_keys, counts, strict=True) for _ in range(n)]
        for k in run_keys[0]
    }
    df = pd.concat([rounds, pd.DataFrame(repeated, index=rounds.index)], axis=1)
    server = sorted(c for c in df.columns if c.startswith("server_"))
    df = df[AGGREGATE_COLUMNS + server]
    df = _normalise_types(df)
    df = df.sort_values(SORT_KEYS + ["run"], kind="mergesort", na_position="last")
    return df.reset_index(drop=True)


def _normalise_types(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in ("alpha", "shards", "participation", "test_acc", "test_loss", "train_loss"):
        df[col] = df[col].astype("float64")
    for col in ("val_acc", "val_loss"):
        df[col] = df[col].astype("float64")
    for col in ("local_acc", "seconds"):
        df[col] = df[col].astype("float64")
    for col in ("clients", "local_epochs", "rounds_planned", "seed", "round"):
        df[col] = df[col].astype("int64")
    # nullable: a round-0 row has no byte counts, an old run.json may lack dataset sizes
    for col in (
        "bytes_sent",
        "bytes_received",
        "train_size",
        "test_size",
        "num_classes",
        "val_size",
    ):
        df[col] = df[col].astype("Int64")
    df["eval_local"] = df["eval_local"].astype(bool)
    df["collapsed"] = df["collapsed"].astype(bool)
    df["class_acc"] = [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else _floats(v)
        for v in df["class_acc"]
    ]
    return df


def _floats(values) -> list[float]:
    """``values`` as a list of Python floats; a float64 array (as Parquet's lists are read) in
    one call, not a float() a value (ten million of them in a paper grid's claims)."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values.tolist()
    return [float(x) for x in values]


def write_aggregate(df: pd.DataFrame, out: str | Path) -> Path:
    """``df`` as Parquet with page checksums and its values' digest (``fedkd.digests``)."""
    import pyarrow as pa

    out = Path(out)
    refuse_links_in_results(out)  # before its folder is made through a link
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    atomic_write(out, lambda file: write_parquet(table, file))
    return out


def read_aggregate(path: str | Path | None) -> pd.DataFrame:
    if path is None:
        raise ReportError("this target needs --aggregate FILE (written by `fedkd aggregate`)")
    path = Path(path)
    if not path.exists():
        raise ReportError(f"aggregate file {path} does not exist; write it with `fedkd aggregate`")
    try:
        # read_parquet_file refuses a FIFO unread (it would be waited on for ever)
        df = read_parquet_file(path, "an aggregate file", MAX_AGGREGATE_BYTES).to_pandas(
            use_threads=False
        )
    except Exception as exc:  # a damaged one among them (a page's CRC, its values' digest)
        fix = "; make it again with `fedkd aggregate`" if isinstance(exc, DigestMismatch) else ""
        raise ReportError(f"aggregate file {path} cannot be read: {exc}{fix}") from exc
    missing = [c for c in RUN_KEY_COLUMNS + ["round", "test_acc"] if c not in df.columns]
    if missing:
        raise ReportError(
            f"aggregate file {path} lacks column(s) {missing}; re-create it with `fedkd aggregate`"
        )
    # `fedkd aggregate` checked every accuracy; a file written or edited otherwise is checked here
    # too (an accuracy in percent would render as 5500.00). A non-finite one is left to the
    # layouts, which name its run and leave it out
    for col in (c for c in ACCURACY_COLUMNS if c in df.columns):
        values = pd.to_numeric(df[col], errors="coerce")
        out_of_range = ~np.isinf(values) & ((values < 0) | (values > 1))
        bad = (values.isna() & df[col].notna()) | out_of_range
        if bad.any():
            first = df[bad].iloc[0]
            raise ReportError(
                f"aggregate file {path}: {col} {first[col]!r} of run {first.get('run', '?')} "
                f"(round {first['round']}) is not an accuracy in [0, 1]; re-create the file with "
                "`fedkd aggregate`"
            )
    return df
