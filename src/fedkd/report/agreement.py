"""The report's front page: its fixed text (workflow/report/workflow.rst) followed by a summary of
how the tables built so far compare with the paper, read from the ``<table>_vs_paper.csv``
companions (fedkd.report.tables.vs_paper). It leads with what is comparable: rows run on a
stand-in dataset by the ranking of the methods (method pairs ordered as in the paper), rows on the
paper's own datasets by their values. `snakemake --report` reads the front page from one file, so
the Snakefile writes the combined page under ``results/report/`` before the report is built."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from fedkd.files import atomic_write
from fedkd.report.claims.claim import DECLARED
from fedkd.report.claims.verdict import LEVEL, VERDICTS
from fedkd.report.sections import rst_text
from fedkd.report.tables.vs_paper import ABSOLUTE, pair_agreement
from fedkd.report.targets import CLAIMS_SECTION

COLUMNS = (
    "Table",
    "Paper cells with runs",
    "Method pairs ordered as in the paper (stand-ins)",
    "Within 2σ of the paper (paper's datasets)",
    "Mean abs. difference (paper's datasets)",
)


def summarise(tables_dir: Path) -> list[dict]:
    """One record per ``*_vs_paper.csv`` under ``tables_dir``, sorted by table name."""
    out = []
    for path in sorted(Path(tables_dir).glob("*_vs_paper.csv")):
        df = pd.read_csv(path)
        lacking = sorted({"status", "comparison", "within_2sd"} - set(df.columns))
        if lacking:
            raise ValueError(
                f"{path} is from an older fedkd (no {', '.join(map(repr, lacking))} column); "
                "delete it and re-render the table"
            )
        ok = df[df["status"] == "ok"]
        own = ok[ok["comparison"] == ABSOLUTE]
        # rounds and accuracy points are not averaged together
        units = sorted(set(own["unit"].astype(str)))
        unit = units[0] if len(units) == 1 else None
        pairs = pair_agreement(df)
        out.append(
            {
                "table": path.name.removesuffix("_vs_paper.csv"),
                "with_runs": len(df),
                "concordant": pairs["concordant"],
                "pairs": pairs["pairs"],
                "own": len(own),
                # judged: the paper gives the cell's standard deviation
                "judged": int(own["within_2sd"].notna().sum()),
                "within": int((own["within_2sd"].astype(str) == "True").sum()),
                "mean_abs_difference": float(own["difference"].abs().mean())
                if len(own) and unit
                else math.nan,
                "unit": unit,
            }
        )
    return out


def _share(k: int, n: int) -> str:
    return f"{k} of {n} ({100 * k / n:.0f}%)" if n else "–"


# always named, even at 0: the two verdicts that decide; the others only where some claim has them
DECISIVE = ("holds", "contradicted")


def claim_verdicts(claims_csv: Path, own: bool = False) -> pd.Series:
    """One verdict per claim, from the claims table's CSV: its ``claim_verdict`` column (every
    row of a claim repeats it), or, for a table with one row per claim, that row's verdict. The
    papers' claims, or (``own``) those the configuration declares itself."""
    df = pd.read_csv(claims_csv)
    if not {"claim", "verdict"} <= set(df.columns):
        raise ValueError(f"{claims_csv} has no 'claim' and 'verdict' columns; re-render it")
    if "paper" in df.columns:
        df = df[(df["paper"] == DECLARED) == own]
    column = "claim_verdict" if "claim_verdict" in df.columns else "verdict"
    per_claim = df.groupby("claim", sort=False)[column].agg(lambda v: set(v))
    mixed = sorted(c for c, v in per_claim.items() if len(v) != 1)
    if mixed:
        raise ValueError(
            f"{claims_csv} gives claim(s) {', '.join(mixed)} several verdicts and no "
            "'claim_verdict' column: it is from an older fedkd; delete it and re-render the table"
        )
    return per_claim.map(lambda v: next(iter(v)))


def claims_rst(claims_csv: Path) -> str:
    """The front page's first finding: how many of the papers' claims the runs support (counted
    per claim, not per setting), from the claims table (``claims`` layout) when it is built."""
    head = "**The papers' claims.** "
    if not claims_csv.exists():
        return head + "The claims table (``results/tables/claims.md``) is not built yet.\n\n"
    verdicts = claim_verdicts(claims_csv).value_counts()
    counts = _counts(verdicts)
    text = (
        head + f"Each of the papers' {int(verdicts.sum())} claims checked on this configuration's "
        f"runs (paired by seed, {LEVEL:.0%} interval of the effect, Holm's correction over a "
        f'claim\'s settings): {counts}. The first section, "{CLAIMS_SECTION}", has a block per '
        "claim and how each verdict is reached.\n\n"
    )
    own = claim_verdicts(claims_csv, own=True).value_counts()
    if own.sum():
        text += (
            f"**This configuration's claims.** Its {int(own.sum())} own claim"
            f"{'s' if own.sum() != 1 else ''}, tested the same way: {_counts(own)}; they open "
            "the claims table.\n\n"
        )
    return text


def _counts(verdicts: pd.Series) -> str:
    return ", ".join(
        f"{int(verdicts.get(v, 0))} {v}" for v in VERDICTS if v in DECISIVE or verdicts.get(v, 0)
    )


def summary_rst(records: list[dict], stand_in: bool) -> str:
    """The front page's agreement section in reStructuredText."""
    head = "**Agreement with the paper.** "
    if not records:
        return head + (
            "No comparison table is built yet; each ``<table>_vs_paper`` target adds a row here.\n"
        )
    concordant = sum(r["concordant"] for r in records)
    pairs = sum(r["pairs"] for r in records)
    own = sum(r["own"] for r in records)
    judged = sum(r["judged"] for r in records)
    within = sum(r["within"] for r in records)
    parts = []
    if pairs:
        parts.append(
            f"Where a stand-in dataset replaces the paper's, its accuracies are not the paper's, "
            f"so the methods are compared with each other: of {pairs} pairs of methods run in the "
            f"same setting, {_share(concordant, pairs)} are ordered as in the paper."
        )
    if own:
        parts.append(
            f"On the paper's own datasets, the reproduced mean lies within two of the paper's "
            f"standard deviations of its value for {_share(within, judged)} cells"
            + (
                f" ({own - judged} without a deviation in the paper are not judged)."
                if own > judged
                else "."
            )
        )
    if not parts:
        parts.append("No paper cell has a comparable run yet.")
    elif stand_in and not own:
        parts.append("No run of this configuration is on a dataset of the paper.")
    tables = ", ".join(_code(f"{r['table']}_vs_paper") for r in records)
    parts.append(f"Each table's rows: {tables} (rows without a run are left out).")
    rows = [list(COLUMNS)] + [
        [
            _code(r["table"]),
            str(r["with_runs"]),
            _share(r["concordant"], r["pairs"]),
            _share(r["within"], r["judged"]),
            "–" if math.isnan(r["mean_abs_difference"])
            else f"{r['mean_abs_difference']:.2f} {rst_text(r['unit'])}",
        ]
        for r in records
    ]  # fmt: skip
    return head + " ".join(parts) + "\n\n" + _list_table(rows)


def _code(name: str) -> str:
    """A file's name in monospace; one a file under results/tables/ was given by hand (any
    characters) as escaped plain text, since a literal cannot hold every character."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name):
        return f"``{name}``"
    return rst_text(name)


def _list_table(rows: list[list[str]]) -> str:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in rows:
        lines.append("   * - " + row[0])
        lines.extend("     - " + cell for cell in row[1:])
    return "\n".join(lines) + "\n"


# where the front page's template takes the configuration's name and description
NAME_FIELD = "@CONFIG_NAME@"
DESCRIPTION_FIELD = "@CONFIG_DESCRIPTION@"


def write_front_page(
    template: Path,
    tables_dir: Path,
    out: Path,
    stand_in: bool,
    name: str = "",
    description: str = "",
    summary: bool = True,
) -> Path:
    """Write the template, its fields filled with the configuration's ``name`` and
    ``description`` as text (fedkd.report.sections.rst_text), followed by the agreement summary
    (``summary``) to ``out`` (left untouched when the content is the same; written atomically, so
    a report built meanwhile never reads half a page) and return ``out``."""
    text = Path(template).read_text().rstrip("\n") + "\n\n"
    # both filled at once: a name holding the other field's marker stays the name
    # (a name of spaces alone is shown quoted: the template sets the name in bold, and empty bold
    # text is a docutils error)
    shown = rst_text(name) or rst_text(repr(name))
    fields = {NAME_FIELD: shown, DESCRIPTION_FIELD: rst_text(description)}
    text = re.sub("|".join(map(re.escape, fields)), lambda m: fields[m[0]], text)
    if summary:
        text += claims_rst(Path(tables_dir) / "claims.csv")
        text += summary_rst(summarise(tables_dir), stand_in)
    out = Path(out)
    if not out.exists() or out.read_text() != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode()
        atomic_write(out, lambda file: file.write(data))
    return out
