"""The report's front page: its fixed text (workflow/report/workflow.rst) followed by a summary of
how close every table built so far comes to the paper, read from the ``<table>_vs_paper.csv``
companions. `snakemake --report` reads the front page from one file, so the Snakefile writes the
combined page under ``results/report/`` before the report is built."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

COLUMNS = ("Table", "Paper cells", "With runs", "Within seed range", "Mean abs. difference")


def summarise(tables_dir: Path) -> list[dict]:
    """One record per ``*_vs_paper.csv`` under ``tables_dir``, sorted by table name."""
    out = []
    for path in sorted(Path(tables_dir).glob("*_vs_paper.csv")):
        df = pd.read_csv(path)
        if "status" not in df.columns:
            raise ValueError(f"{path} has no 'status' column; delete it and re-render the table")
        ok = df[df["status"] == "ok"]
        diff = ok["difference"].abs()
        # rounds and accuracy points are not averaged together
        units = sorted(set(df["unit"].astype(str))) if "unit" in df.columns else ["points"]
        unit = units[0] if len(units) == 1 else None
        out.append(
            {
                "table": path.name.removesuffix("_vs_paper.csv"),
                "cells": len(df),
                "with_runs": len(ok),
                "within": int(ok["within_range"].astype(bool).sum()),
                "mean_abs_difference": float(diff.mean()) if len(ok) and unit else math.nan,
                "unit": unit,
            }
        )
    return out


def summary_rst(records: list[dict], stand_in: bool) -> str:
    """The front page's agreement section in reStructuredText."""
    head = "**Agreement with the paper.** "
    if not records:
        return head + (
            "No comparison table is built yet; each ``<table>_vs_paper`` target adds a row here.\n"
        )
    cells = sum(r["cells"] for r in records)
    with_runs = sum(r["with_runs"] for r in records)
    within = sum(r["within"] for r in records)
    text = head + (
        f"Of {cells} paper cells in the {len(records)} comparison tables built so far, {with_runs} "
        f"have reproduced runs, and for {within} of those the paper value lies within the "
        "reproduced seed range (min..max over seeds)."
    )
    if stand_in:
        text += (
            " This configuration runs stand-in datasets, so the differences measure the stand-in "
            "set-up, not the methods."
        )
    rows = [list(COLUMNS)] + [
        [
            f"``{r['table']}``",
            str(r["cells"]),
            str(r["with_runs"]),
            str(r["within"]),
            "–" if math.isnan(r["mean_abs_difference"])
            else f"{r['mean_abs_difference']:.2f} {r['unit']}",
        ]
        for r in records
    ]  # fmt: skip
    return text + "\n\n" + _list_table(rows)


def _list_table(rows: list[list[str]]) -> str:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in rows:
        lines.append("   * - " + row[0])
        lines.extend("     - " + cell for cell in row[1:])
    return "\n".join(lines) + "\n"


def write_front_page(template: Path, tables_dir: Path, out: Path, stand_in: bool) -> Path:
    """Write the template followed by the agreement summary to ``out`` (left untouched when the
    content is the same) and return ``out``."""
    text = Path(template).read_text().rstrip("\n") + "\n\n"
    text += summary_rst(summarise(tables_dir), stand_in)
    out = Path(out)
    if not out.exists() or out.read_text() != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return out
