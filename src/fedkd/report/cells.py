"""Table cells: the mean and spread over seeds of one quantity, or why there is none; its text
(with the collapse mark ``†`` when a run of it collapsed, ``fedkd.collapse``, and ``‡`` when it
lacks a seed other cells of its table have) and its highlight among the cells it is compared
with."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fedkd.collapse import CAPTION_NOTE, MARK
from fedkd.report.options import DEFAULT_DDOF
from fedkd.report.text import DASH, Text, tex_escape


@dataclass
class Cell:
    """One table cell: a mean over seeds, or why there is none."""

    kind: str  # "value", "missing", "absent", "diverged", "incomplete", STOPPED, "not reached"
    values: list[float] = field(default_factory=list)  # one per run
    seeds: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    ddof: int = DEFAULT_DDOF
    collapsed: list[str] = field(default_factory=list)  # its runs that stayed at chance
    # seeds other cells of its table have and it lacks (no run): its mean is over fewer seeds
    missing_seeds: list[int] = field(default_factory=list)
    # the seeds of all its runs, a run without a value among them (one that diverged)
    run_seeds: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else float("nan")

    @property
    def std(self) -> float:
        # undefined for one seed with ddof=1: NaN, and the cell shows the mean alone
        if len(self.values) <= self.ddof:
            return float("nan")
        return float(np.std(self.values, ddof=self.ddof))

    def text(self) -> str:
        """Display text of a non-value cell."""
        if self.kind == "absent":  # no cell by design: left empty, as the paper's table does
            return ""
        return DASH if self.kind == "missing" else self.kind


# a cell one of whose runs ended at its stop_at_acc, short of its planned rounds: its best and
# final accuracy would be those of the rounds it happened to play
STOPPED = "stopped at target"


def make_cell(
    runs: dict[str, pd.DataFrame] | None,
    value_of: Callable[[pd.DataFrame, str], float | None],
    ddof: int,
    *,
    partial_ok: bool = False,
    none_means: str = "missing",
) -> Cell:
    """Evaluate ``value_of(rows, status)`` on every run of a cell.

    A diverged or unfinished run makes the cell "diverged" / "incomplete", and a run that stopped
    at its stop_at_acc before its last round STOPPED, unless ``partial_ok`` (the quantity only
    needs rounds the run did complete, e.g. accuracy at round 10 of a run that diverged in round
    60); then only a missing value turns the cell into that status. A run whose value is None
    makes the cell ``none_means`` ("missing" or "not reached").
    """
    if not runs:
        return Cell("missing", ddof=ddof)
    values, seeds, names, collapsed = [], [], [], []
    failed: set[str] = set()
    for run in sorted(runs, key=lambda r: (int(runs[r]["seed"].iloc[0]), r)):
        rows = runs[run]
        status = str(rows["status"].iloc[0])
        bad = None if status == "complete" else "diverged" if status == "diverged" else "incomplete"
        played = rows[rows["round"] >= 1]
        if bad is None and len(played) < int(rows["rounds_planned"].iloc[0]):
            bad = STOPPED  # complete before its last round: it reached its stop_at_acc
        if bad and not partial_ok:
            failed.add(bad)
            continue
        v = value_of(played, status) if len(played) else None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            failed.add(bad or none_means)
            continue
        values.append(float(v))
        seeds.append(int(rows["seed"].iloc[0]))
        names.append(run)
        if "collapsed" in rows.columns and bool(rows["collapsed"].iloc[0]):
            collapsed.append(run)
    run_seeds = sorted({int(rows["seed"].iloc[0]) for rows in runs.values()})
    for kind in ("diverged", "incomplete", STOPPED, none_means):
        if kind in failed:
            return Cell(kind, ddof=ddof, runs=sorted(runs), run_seeds=run_seeds)
    return Cell("value", values, seeds, names, ddof, collapsed, run_seeds=run_seeds)


def fmt_mean_std(mean: float, std: float, decimals: int) -> tuple[str, str]:
    m, s = f"{mean:.{decimals}f}", f"{std:.{decimals}f}"
    return f"{m}$\\pm${s}", f"{m} ± {s}"


def cell_text(cell: Cell, scale: float, decimals: int) -> Text:
    if cell.kind != "value":
        return Text.plain(cell.text())
    # one seed has no spread to show: "5.00", not "5.00 ± 0.00"
    if cell.n < 2 or math.isnan(cell.std):
        text = Text.plain(f"{cell.mean * scale:.{decimals}f}")
    else:
        text = Text(*fmt_mean_std(cell.mean * scale, cell.std * scale, decimals))
    text = collapse_marked(text) if cell.collapsed else text
    return marked(text, SHORT_MARK) if cell.missing_seeds else text


# the mark of a cell with fewer seeds than its table's others, and what the caption says about it
SHORT_MARK = "‡"
SHORT_NOTE = (
    f"{SHORT_MARK}: the cell lacks a seed other cells of the table have (no run of it): its mean "
    "is over fewer seeds (the CSV's missing_seeds names them)."
)


def marked(text: Text, mark: str) -> Text:
    return Text(text.tex + tex_escape(mark), text.md + mark, text.style)


def collapse_marked(text: Text) -> Text:
    """``text`` with the mark of a cell fed by a collapsed run."""
    return marked(text, MARK)


def mark_short_cells(cells: list[Cell]) -> None:
    """Give each valued cell of one table the seeds the table's other cells have runs of and it
    lacks (a seed whose run diverged elsewhere is still one of the table's seeds)."""
    every = set().union(*(c.run_seeds or c.seeds for c in cells))
    for c in cells:
        if c.kind == "value":
            c.missing_seeds = sorted(every - set(c.seeds))


def with_collapse_note(caption: str, body: list[list[Text]]) -> str:
    """The caption, with what the collapse and short-cell marks mean when a cell of ``body``
    carries them."""
    for mark, note in ((MARK, CAPTION_NOTE), (SHORT_MARK, SHORT_NOTE)):
        if any(mark in t.md for line in body for t in line) and note not in caption:
            caption = f"{caption} {note}" if caption else note
    return caption


def highlight(cells: list[tuple[Any, Cell]], scale: float, decimals: int, higher_better=True):
    """{key: "best" | "second"} among value cells, ranked by the mean as displayed (so equal
    shown values share a rank); nothing is marked when fewer than two cells have values."""
    shown = {k: round(c.mean * scale, decimals) for k, c in cells if c.kind == "value"}
    if len(shown) < 2:
        return {}
    ranks = sorted(set(shown.values()), reverse=higher_better)
    out = {k: "best" for k, v in shown.items() if v == ranks[0]}
    if len(ranks) > 1:
        out.update({k: "second" for k, v in shown.items() if v == ranks[1]})
    return out
