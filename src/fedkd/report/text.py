"""Text of tables and figures: run-key values and headers, labels, and escaping for LaTeX and
Markdown."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedkd.echo import BIDI_CONTROLS
from fedkd.report.aggregate import ReportError
from fedkd.report.names import display_name

DASH = "–"  # a cell with no runs
SETTING_STYLE_KEYS = ("alpha", "participation", "local_epochs", "shards", "clients")

# Row-key columns: how their header reads in LaTeX and Markdown.
KEY_HEADERS = {
    "dataset": ("Dataset", "Dataset"),
    "alpha": (r"$\alpha$", "α"),
    "participation": ("$C$", "C"),
    "local_epochs": ("$E$", "E"),
    "clients": ("Clients", "Clients"),
    "partition": ("Partition", "Partition"),
    "shards": ("$s$", "s"),  # shards per client, fedntd's notation
    "model": ("Model", "Model"),
    "strategy": ("Strategy", "Strategy"),
    "variant": ("Variant", "Variant"),
    "rounds_planned": ("Rounds", "Rounds"),
    "label": ("Method", "Method"),
    "stat": ("Selection", "Selection"),  # which round's test accuracy (grid layouts)
}


def key_value(v: Any) -> Any:
    """A hashable, NaN-safe form of a run-key value (NaN and None become None)."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


# Partition schemes as the papers name them (fedntd: "Sharding" and "LDA"); option row_names
# overrides these like any other value.
DEFAULT_VALUE_NAMES = {
    "partition": {
        "dirichlet-equal": "Dirichlet (equal sizes)",
        "dirichlet": "LDA",
        "shards": "Sharding",
        "iid": "IID",
    }
}


def format_key_value(key: str, v: Any, names: dict | None) -> str:
    """Display text of a run-key value, through the ``row_names`` option when it maps it
    (``names`` None: the raw value, for machine-readable output and comparisons)."""
    v = key_value(v)
    text = DASH if v is None else (f"{v:g}" if isinstance(v, float) else str(v))
    if names is None:
        return text
    per_key = names.get(key)
    if isinstance(per_key, dict) and text in per_key:
        return str(per_key[text])
    if text in names and not isinstance(names[text], dict):
        return str(names[text])
    return DEFAULT_VALUE_NAMES.get(key, {}).get(text, text)


# Greek letters in math mode; the capitals shaped like Latin letters as those letters
_GREEK_NAMES = (
    r"\beta \gamma \delta \epsilon \zeta \eta \theta \iota \kappa \lambda \mu \nu \xi \pi \rho "
    r"\varsigma \tau \upsilon \phi \chi \psi \omega \Gamma \Delta \Theta \Lambda \Xi \Pi \Sigma "
    r"\Upsilon \Phi \Psi \Omega"
).split()
_GREEK = {
    **dict(zip("βγδεζηθικλμνξπρςτυφχψωΓΔΘΛΞΠΣΥΦΨΩ", (f"${n}$" for n in _GREEK_NAMES), strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΧο", "ABEZHIKMNOPTXo", strict=True)),
}

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "α": r"$\alpha$",
    "±": r"$\pm$",
    "✓": r"$\checkmark$",
    "✗": r"$\times$",
    "†": r"$^\dagger$",  # the mark of a table cell fed by a collapsed run (fedkd.collapse)
    "‡": r"$^\ddagger$",  # the mark of a cell with fewer seeds than its table's others
    "σ": r"$\sigma$",
    # OT1, LaTeX's default font encoding, prints these three as "—", "¡" and "¿"
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    # a blank line would end the paragraph inside a \caption or a table cell: an error
    "\n": " ",
    # signs the claims page writes, and mathematics a label may hold, that LaTeX's utf8 input
    # does not set up (pdflatex stops at them)
    "−": "$-$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≈": r"$\approx$",
    "≠": r"$\neq$",
    "√": r"$\surd$",
    "∞": r"$\infty$",
    "∓": r"$\mp$",
    "⇒": r"$\Rightarrow$",
    "∑": r"$\sum$",
    **_GREEK,
}
# the non-ASCII characters LaTeX's utf8 input typesets with no package (the kernel's tables for
# its default encodings): Latin-1, most of Latin Extended-A and these punctuation marks and
# symbols; any other is written as TEX_REPLACEMENT, as pdflatex would stop at it
TEX_TEXT = re.compile(
    "[\u00a0-\u00ac\u00ae-\u0125\u0128-\u0137\u0139-\u013e\u0141-\u0148\u014a-\u0165"
    "\u0168-\u017e‐-‖‘-‚“-„•…‰‱‹›※‽⁄№℗℞℠™Ω℮←↑→↓◦◯♪⟨⟩]"
)
# what a control character (NUL included) or a bidi formatting character is written as: never
# itself, in any output format (U+202E in a label would reorder the rest of its table row)
REPLACEMENT = "\ufffd"
TEX_REPLACEMENT = "?"  # U+FFFD is in no standard LaTeX font
# all control characters but tab and line feed, and the bidi formatting characters
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(sorted(BIDI_CONTROLS)) + "]")


def tex_escape(text: str) -> str:
    """Plain text -> LaTeX (captions, names and labels given in options are plain text) that
    pdflatex typesets with no package but the table's: a character it cannot is written in math
    mode where it has a symbol (Greek letters, ≤), else as TEX_REPLACEMENT."""
    text = CONTROL.sub(TEX_REPLACEMENT, str(text).replace("\r", " "))
    return "".join(_TEX_SPECIAL.get(ch) or _tex_char(ch) for ch in text)


def _tex_char(ch: str) -> str:
    return ch if ch.isascii() or TEX_TEXT.match(ch) else TEX_REPLACEMENT


_MD_SPECIAL = {
    "\\": "\\\\",
    "|": r"\|",
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "`": r"\`",
    "*": r"\*",
    "~": r"\~",
}
LINE_BREAK = re.compile(r"[\r\n\v\f\x85\u2028\u2029]+")
# CommonMark's inline markup a plain text could still form: a link or image ("](", "][", a
# reference definition's "]:"), and "_" emphasis, which an "_" between two letters or digits
# cannot open or close (so "head_init" stays as written)
_MD_LINK = re.compile(r"\](?=[(\[:])")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_escape(text: str) -> str:
    """Plain text -> a Markdown table cell or caption line, shown as written and never as markup:
    "|", "\\", "`", "*", "~", a "]" that would close a link and a "_" that could emphasise are
    backslash-escaped, HTML's "<", ">" and "&" written as entities (Markdown passes raw HTML
    through), line breaks as a space (one would end the table row), control characters as
    U+FFFD."""
    text = CONTROL.sub(REPLACEMENT, LINE_BREAK.sub(" ", str(text)))
    text = "".join(_MD_SPECIAL.get(ch, ch) for ch in text)
    return _MD_UNDERSCORE.sub(r"\\_", _MD_LINK.sub(r"\\]", text))


# what starts a heading, a list item or a thematic break at the start of a line
_MD_BLOCK_START = re.compile(r"(#{1,6}|[-+]|\d{1,9}[.)])(?=\s|$)|-{3,}")


def md_paragraph(text: str) -> str:
    """Plain text -> a Markdown paragraph of its own line: ``md_escape``, and a start that would
    make it a heading, a list item or a code block escaped or dropped (leading spaces)."""
    text = md_escape(str(text).lstrip())
    start = _MD_BLOCK_START.match(text)
    return text if start is None else f"{text[: start.end() - 1]}\\{text[start.end() - 1 :]}"


def md_unescape(md: str) -> str:
    """The text ``md_escape`` escaped (Markdown a name gives, as text: its tags stay characters)."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md))  # every ASCII punctuation


@dataclass
class Text:
    """One rendered table entry in both output languages, with its highlight."""

    tex: str
    md: str
    style: str = ""  # "", "best", "second"

    @classmethod
    def plain(cls, text: str) -> Text:
        return cls(tex_escape(text), md_escape(text))

    @property
    def shown(self) -> str:
        """The entry as plain text (a figure's legend, a caption, the HTML page escapes it)."""
        return md_unescape(self.md)


def key_header(key: str) -> Text:
    tex, md = KEY_HEADERS.get(key, (tex_escape(key), md_escape(key)))
    return Text(tex, md)


def setting_text(key: str, value, names: dict) -> Text:
    """A run-key value as a column header: "α=0.1", "C=0.2", or just the value (dataset names)."""
    text = format_key_value(key, value, names)
    if key in SETTING_STYLE_KEYS and text == format_key_value(key, value, None):
        head = key_header(key)
        return Text(f"{head.tex}={tex_escape(text)}", f"{head.md}={md_escape(text)}")
    return Text.plain(text)


def label_text(label: str, names: dict) -> Text:
    """A label's shown name: plain text (escaped for LaTeX), or {"tex": ..., "md": ...} to give
    LaTeX markup such as "FedGKD$^{+}$" verbatim. Without one, a strategy or variant label
    reads as the papers name it (fedkd.report.names: "fedgkd-M5" → "FedGKD (M=5)")."""
    name = names.get(label, display_name(label))
    if isinstance(name, dict):
        if not {"tex", "md"} <= set(name) or not all(isinstance(v, str) for v in name.values()):
            raise ReportError(
                f"the name given for {label!r} must be a string or an object with string 'tex' "
                f"and 'md' entries, got {name!r}"
            )
        return Text(name["tex"], md_escape(name["md"]))
    return Text.plain(str(name))
