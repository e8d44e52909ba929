"""Columns that show the best of a sweep (config ``fedgen: {best_of: [fedgen-coef0.1, ...]}``).

The aggregate holds every listed variant's runs under the column's label; per setting (row keys)
the variant with the highest mean is kept and the others dropped, so a layout then draws the
label as usual. The paper tunes FedGen's coefficient and "takes the best": the choice is made on
the validation split where every candidate has it (the mean over seeds of each run's best
validation accuracy: no choice by the test set), else on the table's own statistic; ties go to
the earlier variant in the list. A variant with a run that diverged or never finished is never
chosen, and leaves the choice among the others on validation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.cells import STOPPED, Cell, make_cell
from fedkd.report.keys import check_same_setting, group_runs
from fedkd.report.options import Options
from fedkd.report.text import Text

MARKS = "abcdefghijklmnopqrstuvwxyz"
# the validation cells that let a sweep be chosen on validation: a value, or a run that failed
RANKED_ON_VALIDATION = ("value", "diverged", "incomplete", STOPPED)


def best_of_option(opts: Options) -> dict[str, list[str]]:
    """Option ``best_of``: {label: [variant, ...]} (the workflow fills it from the config)."""
    raw = opts.mapping("best_of")
    for label, variants in raw.items():
        ok = isinstance(variants, list) and len(variants) >= 2
        if (
            not ok
            or not all(isinstance(v, str) for v in variants)
            or len(set(variants)) != len(variants)
        ):
            raise ReportError(
                f"option 'best_of' of target {opts.target!r} maps {label!r} to {variants!r}; "
                "give a list of two or more distinct variant names"
            )
    return {label: list(v) for label, v in raw.items()}


def pick_best_of(
    df: pd.DataFrame,
    keys: list[str],
    opts: Options,
    fallback: Callable[[pd.DataFrame, str], float | None],
    **how,
) -> tuple[pd.DataFrame, dict[tuple[tuple, str], str]]:
    """Keep, per (row keys, best_of label), only the chosen variant's runs.

    Returns the filtered aggregate and {(row, label): chosen variant}. ``fallback`` is the table's
    statistic of a run, used where some candidate has no validation accuracy (always, when not
    ``by_validation``: rounds to a target rank by rounds). With validation accuracy the choice
    never reads the test set. ``how``: ``best_of_choices``' keywords."""
    df, chosen, _ = best_of_choices(df, keys, opts, fallback, **how)
    return df, chosen


def best_of_choices(
    df: pd.DataFrame,
    keys: list[str],
    opts: Options,
    fallback: Callable[[pd.DataFrame, str], float | None],
    *,
    higher_better: bool = True,
    partial_ok: bool = False,
    by_validation: bool = True,
) -> tuple[pd.DataFrame, dict[tuple[tuple, str], str], dict[tuple[tuple, str], int]]:
    """``pick_best_of``, and {(row, label): candidates} for the choices made on ``fallback``,
    the statistic of the test set (a test comparing the chosen variant on it needs to know)."""
    sweeps = best_of_option(opts)
    if not sweeps or df.empty:
        return df, {}, {}
    ddof = opts.ddof()
    drop: set[tuple[str, str]] = set()  # (label, run)
    chosen: dict[tuple[tuple, str], str] = {}
    on_test: dict[tuple[tuple, str], int] = {}
    for row, by_label in group_runs(df[df["label"].isin(sweeps)], keys).items():
        for label, runs in by_label.items():
            listed = sweeps[label]
            by_variant: dict[str, dict[str, pd.DataFrame]] = {}
            for run, rows in runs.items():
                variant = str(rows["variant"].iloc[0])
                if variant not in listed:
                    raise ReportError(
                        f"target {opts.target!r}: run {run} (label {label!r}) is variant "
                        f"{variant!r}, which option best_of does not list for it ({listed})"
                    )
                by_variant.setdefault(variant, {})[run] = rows
            candidates = [v for v in listed if v in by_variant]
            for v in candidates:
                check_same_setting(
                    by_variant[v], f"{opts.target} best_of {label!r} variant {v!r}", "rows"
                )
            by_val = {v: make_cell(by_variant[v], _best_validation, ddof) for v in candidates}
            # a candidate that diverged, never finished or stopped early is passed over on either
            # split: it does not send the others' choice to the test set
            if by_validation and all(c.kind in RANKED_ON_VALIDATION for c in by_val.values()):
                scores, better_high = by_val, True
            else:
                scores = {
                    v: make_cell(by_variant[v], fallback, ddof, partial_ok=partial_ok)
                    for v in candidates
                }
                better_high = higher_better
                if len(candidates) > 1:
                    on_test[(row, label)] = len(candidates)
            best = _best(candidates, scores, better_high)
            chosen[(row, label)] = best
            drop |= {(label, run) for v in candidates if v != best for run in by_variant[v]}
    keep = [(lab, run) not in drop for lab, run in zip(df["label"], df["run"], strict=True)]
    return df[keep].reset_index(drop=True), chosen, on_test


def _best_validation(rows: pd.DataFrame, status: str) -> float:
    """A run's highest validation accuracy over its rounds (NaN: recorded without one)."""
    from fedkd import metrics

    return metrics.best_accuracy(rows, "val_acc") if "val_acc" in rows.columns else math.nan


def _best(candidates: list[str], scores: dict[str, Cell], higher_better: bool) -> str:
    def rank(v: str):
        c = scores[v]
        if c.kind != "value" or math.isnan(c.mean):
            return (1, 0.0)
        return (0, -c.mean if higher_better else c.mean)

    # min over (rank, list position): ties by list order
    return min(candidates, key=lambda v: (rank(v), candidates.index(v)))


def mark(text: Text, label: str, variant: str | None, opts: Options) -> Text:
    """A chosen cell's text with the variant's footnote marker (a, b, ... in list order)."""
    if variant is None:
        return text
    letter = MARKS[best_of_option(opts)[label].index(variant)]
    return Text(f"{text.tex}$^{{{letter}}}$", f"{text.md}<sup>{letter}</sup>", text.style)


def caption_note(opts: Options, how: str) -> str:
    """What the markers mean, for the caption; '' without best_of columns."""
    sweeps = best_of_option(opts)
    if not sweeps:
        return ""
    parts = []
    for label, variants in sweeps.items():
        keyed = ", ".join(f"{MARKS[i]}: {v}" for i, v in enumerate(variants))
        parts.append(f"{label} shows the best of {len(variants)} variants per setting ({keyed})")
    return (
        "; ".join(parts)
        + f", chosen by the best validation accuracy (mean over seeds; {how} where a run lacks "
        "validation accuracy); the mark says which."
    )
