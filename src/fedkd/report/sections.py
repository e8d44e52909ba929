"""Where an output goes in `snakemake --report`: the paper it reproduces (category) and its table
or figure there (subcategory), read from the reference its caption gives, e.g. "(fedgkd Table 3)"
or "(FedCAD Fig. 1)". Outputs without one are grouped as "Other tables" / "Other figures"."""

from __future__ import annotations

import re

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
