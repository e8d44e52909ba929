"""Where an output goes in `snakemake --report`: the paper it reproduces (category) and its table
or figure there (subcategory), read from the reference its caption gives, e.g. "(fedgkd Table 3)"
or "(FedCAD Fig. 1)". Outputs without one are grouped as "Other tables" / "Other figures".

Also how configuration text reaches the report as text. Snakemake renders captions and the front
page as Jinja templates, then as reStructuredText with docutils' ``raw`` and ``include``
directives enabled, and embeds each report job's params in a ``<script>`` element of the page;
``rst_text`` and ``script_safe_json`` make a value inert in all three."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

from fedkd.collapse import COLLAPSE_MARGIN

# the papers as the configuration's captions cite them → their section title
PAPERS = {
    "fedgkd": "FedGKD (Yao et al.)",
    "feddf": "FedDF (Lin et al.)",
    "fedntd": "FedNTD (Lee et al.)",
    "fedcad": "FedCAD (He et al.)",
}
_REFERENCE = re.compile(
    r"\b(" + "|".join(PAPERS) + r")\s+(Table|Fig\.|Figure)\s*(\d+)", re.IGNORECASE
)


def report_section(
    caption: str, output: str, name: str, section: str | None = None
) -> tuple[str, str]:
    """(category, subcategory) of an output whose layout makes ``output`` ("table"/"figure");
    ``section``: its layout's own section (the claims table's), whatever its caption cites."""
    if section:
        return section, name
    found = _REFERENCE.search(caption or "")
    if not found:
        return f"Other {output}s", name
    kind = "Table" if found[2].lower() == "table" else "Fig."
    return PAPERS[found[1].lower()], f"{kind} {found[3]}"


# reST markup starts with ASCII punctuation (directives "..", roles and links "`", "_", "|",
# "[", ":", lists "-", "*", "#.", tables "+"), and the Unicode bullets start lists; a backslash
# before any of them shows it as itself. That also breaks every "{{", "{%" and "{#" of Jinja,
# and every "</script" and "<!--" of the page's script elements.
_RST_ESCAPED = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" + "•‣⁃")
REPLACEMENT = "\ufffd"  # what a control character (NUL included) shows as


def rst_text(text: object) -> str:
    """``text`` as one line of reStructuredText that shows exactly those characters: markup,
    directives, roles, links and substitutions come out as the characters typed. Line breaks
    and tabs become spaces (a caption is one paragraph: an indented or underlined line would
    start a block); other control characters, NUL included, become U+FFFD (docutils marks its
    own escapes with NUL)."""
    out = []
    for ch in " ".join(str(text).split()):
        if ch in _RST_ESCAPED:
            out.append("\\" + ch)
        elif unicodedata.category(ch) == "Cc":
            out.append(REPLACEMENT)
        else:
            out.append(ch)
    return "".join(out)


def script_safe_json(value: object) -> str:
    """``json.dumps(value, sort_keys=True)`` with "<", ">" and "&" written as \\u escapes: the
    same JSON to any parser, and no "</script" or "<!--" when Snakemake embeds it in its page."""
    text = json.dumps(value, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def restrict_docutils(config_file: Path, environ=os.environ) -> None:
    """Have docutils read ``config_file`` (workflow/report/docutils.conf: no file insertion)
    after the configuration files it reads already, through ``DOCUTILSCONFIG``: Snakemake's
    report renders its reStructuredText with docutils' defaults, which read any file named."""
    current = environ.get("DOCUTILSCONFIG")
    if current is None:  # docutils' own list, which DOCUTILSCONFIG replaces
        files = ["/etc/docutils.conf", "./docutils.conf", "~/.docutils"]
    else:
        files = current.split(os.pathsep)
    if str(config_file) not in files:
        environ["DOCUTILSCONFIG"] = os.pathsep.join([*files, str(config_file)])


def figure_how(layout: str, ddof: int = 0) -> str:
    """What a figure of ``layout`` draws, for its entry in `snakemake --report`: lines and bands,
    bars, bubbles or points, and which spread, so that the report says of each figure what it
    shows."""
    spread = f"± the {'population' if ddof == 0 else 'sample'} standard deviation over the seeds"
    notes = (
        " A note beside a label names its runs that diverged, never finished, stopped before the "
        f"last round or collapsed (never got {COLLAPSE_MARGIN:.0%} of the way from chance to a perfect test "
        "accuracy), and the seeds it has no run of."
    )
    return {
        "curves": f"Lines are the mean over the seeds; a band around a line is {spread}.{notes}",
        "fedcad": f"Lines are the mean over the seeds; a band around a line is {spread}.{notes}",
        "forgetting": f"Bars are the mean over the seeds; an error bar is {spread}.{notes}",
        "partition": "Each panel is one partition file (the first seed's); a bubble's area is the "
        "samples of a class on a client.",
        "tsne": "One run (the first seed): its final global model and a local model trained from "
        "it, each embedded by t-SNE.",
    }.get(layout, "")


def figure_metadata(input: str) -> str:
    """What a figure's PDF title holds beyond the caption: the run setting, for a figure drawn
    from an aggregate (fedkd.report.setting)."""
    if input == "aggregate":
        return " with the run setting (clients, C, E, rounds, model, data sizes, seeds)"
    return ""
