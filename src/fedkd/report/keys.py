"""Run keys: the aggregate's columns that place a run in a table, their grouping and row order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from fedkd.report.aggregate import SETTING_KEYS, ReportError
from fedkd.report.options import Options
from fedkd.report.text import format_key_value, key_value
from fedkd.setting_match import matches

# Default row order of a key: the papers list alpha from mild to strong heterogeneity (1, 0.5,
# 0.1); other numbers ascend; datasets follow the order of the dataset registry (fedkd.data).
DESCENDING_KEYS = ("alpha",)


def check_keys(df: pd.DataFrame, keys: list[str], option: str, target: str) -> None:
    bad = [k for k in keys if k not in df.columns]
    if bad:
        cols = [c for c in df.columns if c not in ("class_acc",)]
        raise ReportError(
            f"option {option!r} of target {target!r} names column(s) {bad} that the aggregate "
            f"does not have; run keys are: {', '.join(cols)}"
        )


def check_naming_options(df: pd.DataFrame, opts: Options) -> None:
    """Options ``column_names`` and ``order`` name what the output shows: labels of its columns
    (option ``columns``, else the aggregate's), run keys (or ``label``, ``stat``). A misspelt
    name matched nothing and was ignored, the column keeping its label, the rows their order."""
    names = opts.mapping("column_names")
    labels = opts.str_list("columns")
    if labels is None and "label" in df.columns and len(df):
        labels = sorted(map(str, df["label"].unique()))
    unknown = [k for k in names if labels is not None and k not in labels]
    if unknown:
        raise ReportError(
            f"option 'column_names' of target {opts.target!r} names label(s) {unknown} that are "
            f"not among its columns: {', '.join(labels)}"
        )
    keys = [k for k in opts.mapping("order") if k not in ("label", "stat")]
    check_keys(df, keys, "order", opts.target)


def order_rows(keys: list[str], tuples: Iterable[tuple], order: dict) -> list[tuple]:
    """Sort row-key tuples: values listed in option ``order`` (per key) first, in that order;
    then datasets in registry order, alpha descending, everything else ascending."""
    from fedkd.data import DATASETS

    def rank(key: str, v: Any):
        listed = order.get(key)
        if listed is not None:
            texts = [_order_text(x) for x in listed]
            t = _order_text(v)
            if t in texts:
                return (0, texts.index(t), 0.0, "")
        if v is None:
            return (3, 0, 0.0, "")
        if key == "dataset" and v in DATASETS:
            return (1, list(DATASETS).index(v), 0.0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (1, 0, -float(v) if key in DESCENDING_KEYS else float(v), "")
        return (2, 0, 0.0, str(v))

    return sorted(
        set(tuples), key=lambda t: tuple(rank(k, v) for k, v in zip(keys, t, strict=True))
    )


def _order_text(v: Any) -> str:
    """Values in option ``order`` may be given as numbers or strings ("1.0", 1, 1.0 all match)."""
    v = key_value(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{float(v):g}"
    if isinstance(v, str):
        try:
            return f"{float(v):g}"
        except ValueError:
            return v
    return str(v)


def group_runs(
    df: pd.DataFrame, keys: list[str]
) -> dict[tuple, dict[str, dict[str, pd.DataFrame]]]:
    """{row-key tuple: {label: {run dir: that run's rows sorted by round}}}."""
    out: dict[tuple, dict[str, dict[str, pd.DataFrame]]] = {}
    if df.empty:
        return out
    key_tuples = list(zip(*(_key_values(df[k]) for k in keys), strict=True)) if keys else None
    work = df.assign(_row=key_tuples if keys else [()] * len(df))
    for (row, label, run), rows in work.groupby(["_row", "label", "run"], sort=False, dropna=False):
        rows = rows.drop(columns="_row").sort_values("round", kind="mergesort")
        out.setdefault(row, {}).setdefault(label, {})[run] = rows.reset_index(drop=True)
    return out


def _key_values(column: pd.Series) -> np.ndarray:
    """``key_value`` of each of ``column``'s values, worked out once per distinct value: a run's
    keys repeat on every one of its rounds (a million rows in a paper grid's claims)."""
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    values = np.empty(len(uniques), dtype=object)
    values[:] = [key_value(v) for v in uniques]
    return values[codes]


def check_same_setting(runs: dict[str, pd.DataFrame], where: str, keys_hint: str) -> None:
    """Runs averaged together must differ only in their seed (and be distinct seeds)."""
    if len(runs) < 2:
        return
    first = {run: rows.iloc[0] for run, rows in runs.items()}
    for key in SETTING_KEYS:
        values = {format_key_value(key, r[key], None) for r in first.values()}
        if len(values) > 1:
            raise ReportError(
                f"{where} averages runs whose {key!r} differ ({sorted(values)}): "
                f"{', '.join(sorted(runs))}; add {key!r} to option {keys_hint!r} or give the runs "
                f"different labels"
            )
    seeds = [int(r["seed"]) for r in first.values()]
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise ReportError(
            f"{where} has several runs with seed(s) {dup}: {', '.join(sorted(runs))}; "
            f"each seed must appear once per cell"
        )


def selected_labels(df: pd.DataFrame, opts: Options) -> list[str]:
    """The labels (columns of a table, lines of a figure) to show, in order: option ``columns``,
    or every label of the aggregate; at least one must be in the aggregate."""
    present = sorted(df["label"].unique())
    labels = opts.str_list("columns", present)
    if not set(labels) & set(present):
        raise ReportError(
            f"none of the labels {labels} (option 'columns' of target {opts.target!r}) is in the "
            f"aggregate; its labels are: {', '.join(present)}"
        )
    return labels


def absent_settings(opts: Options) -> dict[str, list[dict]]:
    """Option ``absent``: {label: [setting, ...]}, the settings (run keys and values) where a
    column has no cell by design."""
    raw = opts.mapping("absent")
    bad = [
        str(label)
        for label, settings in raw.items()
        if not isinstance(settings, list) or not all(isinstance(s, dict) and s for s in settings)
    ]
    if bad:
        raise ReportError(
            f"option 'absent' of target {opts.target!r}: label(s) {', '.join(bad)} take a list of "
            'settings, each of run keys and their values, such as [{"local_epochs": 1}]'
        )
    # a misspelt key or a list for a value would match no cell, and the cells read missing
    for label, settings in raw.items():
        for setting in settings:
            at = f"option 'absent' of target {opts.target!r}: {label}'s setting {setting!r}"
            for key, value in setting.items():
                if key not in ABSENT_KEY_COLUMNS:
                    raise ReportError(
                        f"{at} names {key!r}, not a run key; the keys are: "
                        f"{', '.join(ABSENT_KEY_COLUMNS)}"
                    )
                if not isinstance(value, (str, int, float)):
                    raise ReportError(
                        f"{at} gives {key!r} the value {value!r}; give one value (a number, text "
                        "or true/false)"
                    )
    return raw


def absent_in_row(
    absent: dict[str, list[dict]], labels, keys: list[str], row: tuple, by_label: dict
) -> set[str]:
    """Those of ``labels`` that ``absent`` (absent_settings) names for a row of group_runs over
    ``keys`` (``row``, its runs ``by_label``): the row's setting is read once, and only where a
    label has absent settings."""
    named = [label for label in labels if label in absent]
    if not named:
        return set()
    setting = _row_setting(keys, row, by_label)
    return {label for label in named if any(matches(setting, s) for s in absent[label])}


# the run keys an ``absent`` setting names (the grid's), by the aggregate column holding each
ABSENT_KEY_COLUMNS = {
    **{k: k for k in ("dataset", "partition", "alpha", "shards", "clients", "participation")},
    "local_epochs": "local_epochs", "rounds": "rounds_planned", "eval_local": "eval_local",
}  # fmt: skip


def _row_setting(keys: list[str], row: tuple, by_label: dict[str, dict[str, pd.DataFrame]]) -> dict:
    """The run keys of a row (group_runs) as an ``absent`` setting names them: the row keys, and
    each key all its runs share, of whatever column (a grid point's key the rows need not show,
    as C where alpha tells the points apart)."""
    firsts = [rows.iloc[0] for runs in by_label.values() for rows in runs.values()]
    setting = {}
    for key, column in ABSENT_KEY_COLUMNS.items():
        values = {key_value(r[column]) for r in firsts if column in r.index}
        if len(values) == 1:
            setting[key] = values.pop()
    shown = dict(zip(keys, row, strict=True))
    if "rounds_planned" in shown:
        shown["rounds"] = shown["rounds_planned"]
    return {**setting, **shown}
