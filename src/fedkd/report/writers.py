"""Output files: a table document as LaTeX (booktabs), Markdown and CSV; a figure as PDF and PNG.
Every file is written atomically and without timestamps, so the same inputs give the same bytes."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedkd.report.text import Text, tex_escape

PNG_DPI = 150


def write_atomic(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, str):
        data = data.encode()
    tmp.write_bytes(data)
    os.replace(tmp, path)


def output_path(prefix: str | Path, suffix: str) -> Path:
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + suffix)


@dataclass
class TableDoc:
    caption: str  # plain text
    label: str
    columns: list[Text]  # one header entry per column, stub columns first
    body: list[list[Text]]
    n_stub: int  # leading columns that name the row (left-aligned)
    csv: pd.DataFrame
    groups: list[tuple[Text, int]] | None = None  # an upper header row: (text, span) left to right
    needs: tuple[str, ...] = ("booktabs",)
    blank_repeats: bool = True  # LaTeX: print a repeated first stub value once per group
    notes: list[str] = field(default_factory=list)


def _styled_tex(t: Text) -> str:
    if t.style == "best":
        return rf"\textbf{{{t.tex}}}"
    if t.style == "second":
        return rf"\underline{{{t.tex}}}"
    return t.tex


def _styled_md(t: Text) -> str:
    if t.style == "best":
        return f"**{t.md}**"
    if t.style == "second":
        return f"<u>{t.md}</u>"
    return t.md


def to_latex(doc: TableDoc, name: str) -> str:
    ncol = len(doc.columns)
    spec = "l" * doc.n_stub + "c" * (ncol - doc.n_stub)
    out = [
        f"% fedkd render {name}; needs \\usepackage{{{','.join(doc.needs)}}}",
        r"\begin{table}[htbp]",
        r"\centering",
        rf"\caption{{{tex_escape(doc.caption)}}}",
        rf"\label{{{doc.label}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
    ]
    if doc.groups:
        cells, rules, col = [], [], 1
        for text, span in doc.groups:
            if span == 1:
                cells.append(text.tex)
            else:
                cells.append(rf"\multicolumn{{{span}}}{{c}}{{{text.tex}}}")
            if text.tex:
                rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
            col += span
        out.append(" & ".join(cells) + r" \\")
        out.append(" ".join(rules))
    out.append(" & ".join(c.tex for c in doc.columns) + r" \\")
    out.append(r"\midrule")
    prev = None
    for row in doc.body:
        texts = [_styled_tex(t) for t in row]
        if doc.blank_repeats and doc.n_stub > 1:
            first = row[0].tex
            if prev is not None and first == prev:
                texts[0] = ""
            elif prev is not None:
                out.append(r"\midrule")
            prev = first
        out.append(" & ".join(texts) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(out)


def to_markdown(doc: TableDoc) -> str:
    headers = [c.md for c in doc.columns]
    if doc.groups:
        col = 0
        for text, span in doc.groups:
            for j in range(col, col + span):
                if text.md:
                    headers[j] = f"{text.md} {headers[j]}".strip()
            col += span
    lines = [f"Table: {doc.caption}", ""]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append(
        "|" + "|".join(":--" if j < doc.n_stub else ":-:" for j in range(len(headers))) + "|"
    )
    for row in doc.body:
        lines.append("| " + " | ".join(_styled_md(t) for t in row) + " |")
    lines.append("")
    return "\n".join(lines)


def write_table(doc: TableDoc, prefix, name: str) -> list:
    paths = []
    for suffix, text in (
        (".tex", to_latex(doc, name)),
        (".md", to_markdown(doc)),
        (".csv", _csv_text(doc.csv)),
    ):
        path = output_path(prefix, suffix)
        write_atomic(path, text)
        paths.append(path)
    return paths


def _csv_text(df: pd.DataFrame) -> str:
    df = df.copy()
    for col in df.columns:
        if pd.api.types.is_float_dtype(df[col]):
            df[col] = df[col].round(6)
    return df.to_csv(index=False, lineterminator="\n")


def save_figure(fig, prefix, caption: str, label: str) -> list[Path]:
    """PREFIX.pdf and PREFIX.png; the caption and label go into the files' metadata."""
    import matplotlib

    pdf_meta = {
        "CreationDate": None,
        "ModDate": None,
        "Producer": "fedkd",
        "Creator": "fedkd render",
        "Title": caption,
        "Subject": label,
    }
    png_meta = {"Software": None, "Title": caption, "Description": label}
    paths = []
    with matplotlib.rc_context({"svg.hashsalt": "fedkd"}):
        for suffix, kwargs in (
            (".pdf", {"format": "pdf", "metadata": pdf_meta}),
            (".png", {"format": "png", "metadata": png_meta, "dpi": PNG_DPI}),
        ):
            buf = io.BytesIO()
            fig.savefig(buf, **kwargs)
            path = output_path(prefix, suffix)
            write_atomic(path, buf.getvalue())
            paths.append(path)
    return paths
