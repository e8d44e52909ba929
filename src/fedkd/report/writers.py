"""Output files: a table document as LaTeX (booktabs), Markdown, CSV and HTML; a figure as PDF and PNG.
Every file is written atomically and without timestamps, so the same inputs give the same bytes.

User text is text in every format: escaped for LaTeX, Markdown and HTML (fedkd.report.text); a
CSV cell that a spreadsheet would take for a formula starts with "'"; a control character (NUL
included) is written as U+FFFD ("?" in LaTeX), never as itself."""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedkd.files import atomic_write
from fedkd.report.aggregate import ReportError
from fedkd.report.text import (
    CONTROL,
    LINE_BREAK,
    REPLACEMENT,
    TEX_REPLACEMENT,
    Text,
    md_escape,
    md_paragraph,
    tex_escape,
)

PNG_DPI = 150


def write_atomic(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = data.encode() if isinstance(data, str) else data
    atomic_write(path, lambda file: file.write(data))


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
    # the same table laid out for a screen (e.g. methods as rows), shown in the HTML when this
    # layout is wider than HTML_WIDTH (fedkd.report.writers.for_screen)
    screen: TableDoc | None = None
    # the HTML page's body in place of the table (the claims: one block per claim), with
    # HTML_BLOCK_STYLE; the caption and notes frame it as they frame a table
    html: str | None = None
    # LaTeX column types of a table too long and wide for a page (the claims): set, the .tex is
    # a landscape longtable in small type, these columns ("p{...}" wraps its text)
    long_columns: tuple[str, ...] | None = None


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


# `code` in a caption (a config key, a value): Markdown's backticks
CODE = re.compile(r"`([^`]+)`")


def caption_tex(caption: str) -> str:
    """A plain-text caption in LaTeX: escaped, its `code` spans in typewriter type."""
    return CODE.sub(lambda m: rf"\texttt{{{m[1]}}}", tex_escape(caption))


def caption_html(caption: str) -> str:
    return CODE.sub(lambda m: f"<code>{m[1]}</code>", html.escape(caption))


def caption_md(caption: str) -> str:
    """A plain-text caption in Markdown: escaped as any text, but for its `code` spans."""
    parts = CODE.split(str(caption))  # text, code, text, ...: a code span's text at odd places
    return "".join(
        f"`{CONTROL.sub(REPLACEMENT, LINE_BREAK.sub(' ', part))}`" if i % 2 else md_escape(part)
        for i, part in enumerate(parts)
    )


# what a LaTeX \label may hold here: no brace, backslash or comment character, which would end
# it and run what follows as LaTeX
TEX_LABEL = re.compile(r"[A-Za-z0-9:._+\-/ ]+")


def tex_label(label: str) -> str:
    if not TEX_LABEL.fullmatch(label):
        raise ReportError(
            f"label {label!r} is not a LaTeX label; use letters, digits and ':._+-/' "
            '(e.g. "tab:table3")'
        )
    return label


def to_latex(doc: TableDoc, name: str) -> str:
    ncol = len(doc.columns)
    spec = "l" * doc.n_stub + "c" * (ncol - doc.n_stub)
    needs = doc.needs
    if doc.long_columns is not None:
        if len(doc.long_columns) != ncol:
            raise ValueError(f"{len(doc.long_columns)} long_columns for {ncol} columns")
        spec = "".join(doc.long_columns)
        needs += tuple(n for n in LONG_NEEDS if n not in needs)
    if "amssymb" not in needs and any(r"\checkmark" in t.tex for t in _texts(doc)):
        needs += ("amssymb",)  # a "✓" in a label or caption (tex_escape)
    head = f"% fedkd render {' '.join(name.split())}; needs \\usepackage{{{','.join(needs)}}}"
    caption = rf"\caption{{{caption_tex(doc.caption)}}}"
    label = rf"\label{{{tex_label(doc.label)}}}"
    if doc.long_columns is not None:
        out = [head, r"\begin{landscape}", r"\scriptsize", r"\setlength{\tabcolsep}{3pt}",
               rf"\begin{{longtable}}{{{spec}}}", caption + label + r" \\", r"\toprule"]  # fmt: skip
    else:
        out = [head, r"\begin{table}[htbp]", r"\centering", caption, label,
               rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]  # fmt: skip
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
    header = " & ".join(c.tex for c in doc.columns) + r" \\"
    out += [header, r"\midrule"]
    if doc.long_columns is not None:  # the header again atop every later page
        out += [r"\endfirsthead", r"\toprule", header, r"\midrule", r"\endhead",
                r"\bottomrule", r"\endlastfoot"]  # fmt: skip
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
    if doc.long_columns is not None:
        out += [r"\end{longtable}", r"\end{landscape}", ""]
    else:
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return CONTROL.sub(TEX_REPLACEMENT, "\n".join(out))


LONG_NEEDS = ("longtable", "array", "pdflscape")


def _texts(doc: TableDoc):
    yield Text(caption_tex(doc.caption), "")
    yield from doc.columns
    yield from (text for text, _ in doc.groups or ())
    yield from (t for row in doc.body for t in row)


def to_markdown(doc: TableDoc) -> str:
    headers = [c.md for c in doc.columns]
    if doc.groups:
        col = 0
        for text, span in doc.groups:
            for j in range(col, col + span):
                if text.md:
                    headers[j] = f"{text.md} {headers[j]}".strip()
            col += span
    lines = [f"Table: {caption_md(doc.caption)}", ""]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append(
        "|" + "|".join(":--" if j < doc.n_stub else ":-:" for j in range(len(headers))) + "|"
    )
    for row in doc.body:
        lines.append("| " + " | ".join(_styled_md(t) for t in row) + " |")
    lines.append("")
    lines += [f"{md_paragraph(note)}\n" for note in doc.notes]
    return CONTROL.sub(REPLACEMENT, "\n".join(lines))


HTML_STYLE = """body{font-family:system-ui,sans-serif;margin:1em;color:#222}
table{border-collapse:collapse;font-size:14px}caption{caption-side:top;text-align:left;
max-width:60em;margin-bottom:.6em;line-height:1.4}th,td{padding:3px 10px;white-space:nowrap}
thead tr:last-child th{border-bottom:1px solid #444}thead tr:first-child th{border-top:2px solid
#444}tbody tr:last-child td{border-bottom:2px solid #444}td.stub,th.stub{text-align:left}
td,th{text-align:center}tr.group td{border-top:1px solid #bbb}"""


# the blocks of a TableDoc with ``html`` (the claims): readable at a laptop's width, a block's
# settings table wrapping its last (setting) column instead of scrolling
HTML_BLOCK_STYLE = """body{max-width:72em}section.claim{margin:1.2em 0 1.6em;padding-top:.4em;
border-top:2px solid #444}section.claim h3{font-size:16px;margin:.2em 0 .3em;line-height:1.5}
p.meta,p.gap,p.quote,p.note,ol.notes{margin:.25em 0;font-size:13px;line-height:1.4}
p.meta{color:#555}p.quote{font-style:italic;color:#333}ol.notes{color:#444;padding-left:1.6em}
section.claim table{margin:.4em 0;font-size:13px}section.claim td.stub{white-space:normal;
min-width:18em}span.verdict{display:inline-block;padding:0 .45em;border-radius:.3em;
font-weight:600;white-space:nowrap}span.table{color:#777}caption{max-width:72em}
h3.idle{font-size:15px;margin-top:1.6em;border-top:2px solid #444;padding-top:.4em}
ul.idle{font-size:13px;line-height:1.4;color:#444}"""


def _html_text(t: Text) -> str:
    text = html.escape(t.shown)
    if t.style == "best":
        return f"<b>{text}</b>"
    if t.style == "second":
        return f"<u>{text}</u>"
    return text


# Pixels the report's table pane has on a laptop screen: a 1,400 px window less the report's
# menu (about 280 px) and margins. A table wider than this scrolls sideways.
HTML_WIDTH = 1050
# per character of a cell at the table's 14 px font, and a cell's padding
CHAR_PX, CELL_PAD_PX = 8, 20


def estimated_width(doc: TableDoc) -> int:
    """The table's width in pixels, from its longest entry per column (an upper estimate)."""
    width = 0
    for j, head in enumerate(doc.columns):
        texts = [head.shown] + [row[j].shown for row in doc.body if j < len(row)]
        width += max(len(t) for t in texts) * CHAR_PX + CELL_PAD_PX
    return width


def for_screen(doc: TableDoc) -> TableDoc:
    """The layout the HTML shows: the table's own, unless it is wider than HTML_WIDTH and it has
    a narrower screen layout."""
    if doc.screen is not None and estimated_width(doc) > HTML_WIDTH:
        if estimated_width(doc.screen) < estimated_width(doc):
            return doc.screen
    return doc


def to_html(doc: TableDoc) -> str:
    """The table as a standalone HTML page: what `snakemake --report` shows (it embeds HTML
    files; a CSV would be shown as its long form, one line per cell). A table too wide for a
    laptop screen is shown in its screen layout (for_screen); the .tex and .md keep the paper's."""
    doc = for_screen(doc)
    if doc.html is not None:
        return CONTROL.sub(REPLACEMENT, "\n".join([
            "<!DOCTYPE html>",
            '<html><head><meta charset="utf-8">',
            f"<title>{html.escape(doc.label)}</title><style>{HTML_STYLE}\n{HTML_BLOCK_STYLE}"
            "</style></head><body>",
            f'<p class="caption">{caption_html(doc.caption)}</p>',
            doc.html,
            *(f"<p>{html.escape(note)}</p>" for note in doc.notes),
            "</body></html>",
            "",
        ]))  # fmt: skip
    out = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.label)}</title><style>{HTML_STYLE}</style></head><body>",
        "<table>",
        f"<caption>{caption_html(doc.caption)}</caption>",
        "<thead>",
    ]
    if doc.groups:
        cells = "".join(
            f'<th colspan="{span}">{_html_text(text)}</th>' for text, span in doc.groups
        )
        out.append(f"<tr>{cells}</tr>")
    heads = "".join(
        f"<th{' class=stub' if j < doc.n_stub else ''}>{_html_text(c)}</th>"
        for j, c in enumerate(doc.columns)
    )
    out += [f"<tr>{heads}</tr>", "</thead>", "<tbody>"]
    prev, prev_row = None, None
    for row in doc.body:
        first = row[0].md if row else None
        # like the LaTeX table: a rule between groups of rows sharing their first key
        group = doc.n_stub > 1 and prev is not None and first != prev
        texts = [_html_text(t) for t in row]
        if doc.blank_repeats and prev_row is not None:
            # a stub value the row above shows, under the same values to its left, once
            for j in range(doc.n_stub - 1):
                if row[j].md != prev_row[j].md:
                    break
                texts[j] = ""
        cells = "".join(
            f"<td{' class=stub' if j < doc.n_stub else ''}>{text}</td>"
            for j, text in enumerate(texts)
        )
        out.append(f"<tr{' class=group' if group else ''}>{cells}</tr>")
        prev, prev_row = first, row
    out += ["</tbody>", "</table>"]
    out += [f"<p>{html.escape(note)}</p>" for note in doc.notes]
    out += ["</body></html>", ""]
    return CONTROL.sub(REPLACEMENT, "\n".join(out))


def write_table(doc: TableDoc, prefix, name: str) -> list:
    paths = []
    for suffix, text in (
        (".tex", to_latex(doc, name)),
        (".md", to_markdown(doc)),
        (".csv", _csv_text(doc.csv)),
        (".html", to_html(doc)),
    ):
        path = output_path(prefix, suffix)
        write_atomic(path, text)
        paths.append(path)
    return paths


# a cell starting with one of these is a formula to a spreadsheet (OWASP, "CSV Injection")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A text cell as a spreadsheet shows it: one that would start a formula ("=HYPERLINK(...)")
    after a "'", control characters as U+FFFD; numbers, and text that is one ("-0.5"), as they
    are."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START) and not _is_number(value):
        value = "'" + value
    return CONTROL.sub(REPLACEMENT, value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text == text.strip()  # float() allows the spaces a formula could hide behind


def _csv_text(df: pd.DataFrame) -> str:
    df = df.copy()
    for col in df.columns:
        if pd.api.types.is_float_dtype(df[col]):
            df[col] = df[col].round(6)
        elif not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].map(csv_cell)
    df.columns = [csv_cell(str(c)) for c in df.columns]
    return df.to_csv(index=False, lineterminator="\n")


def save_figure(fig, prefix, caption: str, label: str) -> list[Path]:
    """PREFIX.pdf and PREFIX.png; the caption and label go into the files' metadata."""
    import matplotlib

    caption, label = CONTROL.sub(REPLACEMENT, caption), CONTROL.sub(REPLACEMENT, label)
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
