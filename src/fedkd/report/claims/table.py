"""Layout ``claims``: every claim of the registry with its verdict, and the verdict of each of its
settings, from the runs that check it. Drawn from one aggregate of the runs of the configuration's
other tables, each run's label prefixed with its table ("table3/fedgkd"), and from option
``sources`` (per table: its paper key, layout, options and best_of columns), which the workflow
fills in; the configuration's own claims (option ``claims``, its ``claims:`` entries,
claims/declared.py) come first, in a section of their own.

A claim reads the settings of every table it selects. The same two sets of runs compared on the
same value (table 3 at α 0.5 and table 5 at C 0.2; a final round and the last of the at-round
columns) are one comparison: a claim keeps it once and names the other tables that share it; a
comparison two claims share is named in both. Runs that diverged or collapsed to chance are named
and count with what they reached; a run with no value to compare makes its setting "failed".

The work is split so: runs.py reads each method's values per setting and seed, compare.py makes
a claim's rows, verdict.py (with scipy.stats) tests them, evaluate.py puts a claim together (plain
data), and page.py / page_html.py write it out.
"""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.claims.declared import DeclaredClaimError, declared_claims
from fedkd.report.claims.evaluate import evaluate_all
from fedkd.report.claims.page import ClaimView, claims_doc
from fedkd.report.claims.page_html import html_page
from fedkd.report.options import Options
from fedkd.report.writers import TableDoc


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    sources = opts.mapping("sources")
    stand_ins = {str(k): str(v) for k, v in opts.mapping("stand_ins").items()}
    try:  # the configuration's own claims: checked when the workflow planned
        declared = declared_claims(opts.values.get("claims"))
    except DeclaredClaimError as exc:
        raise ReportError(f"option 'claims': {exc}") from None
    results = evaluate_all(split_labels(df), sources, stand_ins, declared)
    views = [ClaimView(res) for res in results]
    doc = claims_doc(views, opts)
    doc.html = html_page(views)
    return doc


def split_labels(df: pd.DataFrame) -> pd.DataFrame:
    """The aggregate with its "table/label" labels split into columns ``table`` and ``label``."""
    bad = sorted({lab for lab in df["label"].unique() if "/" not in str(lab)})
    if bad:
        raise ReportError(
            f"the claims aggregate has labels {bad} without their table ('table3/fedgkd'); build "
            "it through the workflow (the entry's runs are its sources' runs)"
        )
    parts = df["label"].astype(str).str.split("/", n=1, expand=True)
    return df.assign(table=parts[0], label=parts[1])
