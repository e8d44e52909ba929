"""The papers' claims, checked against the runs: a registry of claims (one module per paper under
claims/papers/, each with a tuple ``CLAIMS``, found without being listed), the test procedure
(verdict.py), each claim checked on the paper's own cells (paper_check.py) and the
table layout ``claims`` (table.py, which names the modules it draws on).

A claim names the config entries whose runs it compares (``tables``) and two of their column
labels; ``sources`` tells the workflow which entries' runs the claims table needs, so it draws on
the runs the other tables already have. Kept free of heavy imports: the Snakefile plans with it.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from fedkd.report.claims.claim import PAPERS, Claim

__all__ = ["Claim", "all_claims", "sources"]


@cache
def all_claims() -> tuple[Claim, ...]:
    """Every claim of every module under claims/papers/, the FedGKD paper's first, then its
    companions (in fedkd.report.claims.claim.PAPERS order), each paper's in module order."""
    from fedkd.report.claims import papers

    found: list[Claim] = []
    for info in sorted(pkgutil.iter_modules(papers.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{papers.__name__}.{info.name}")
        claims = getattr(module, "CLAIMS", None)
        if claims is None:
            continue
        for claim in claims:
            if not isinstance(claim, Claim):
                raise TypeError(f"{module.__name__}.CLAIMS holds {claim!r}, which is not a Claim")
            found.append(claim)
    ids = [c.id for c in found]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"claim ids must be unique; repeated: {', '.join(dup)}")
    order = {p: i for i, p in enumerate(PAPERS)}
    return tuple(sorted(found, key=lambda c: order[c.paper]))  # stable: module order within


def sources(outputs: dict[str, dict], declared=()) -> dict[str, list[str]]:
    """Config entry name -> the column labels of its runs that some claim compares: every entry
    drawn from runs (layout input "aggregate") that a claim selects and that has both the claim's
    labels. ``outputs``: the configuration's tables and figures (name -> entry); ``declared``:
    the configuration's own ``claims:`` entries (an entry that makes no claim adds nothing: the
    configuration's validation names it)."""
    from fedkd.report.claims.declared import DeclaredClaimError, entry_claims
    from fedkd.report.targets import get_layout

    claims = []
    for index, entry in enumerate(declared or ()):
        try:
            claims += entry_claims(entry, index)
        except DeclaredClaimError:
            continue
    claims += all_claims()

    needed: dict[str, list[str]] = {}
    for name, entry in outputs.items():
        try:
            layout = get_layout(entry.get("layout", name))
        except KeyError:  # reported by the config's validation
            continue
        if layout.input != "aggregate" or layout.draws_from:
            continue
        labels = list(entry.get("columns") or {})
        for claim in claims:
            if not claim.selects(name, entry.get("paper"), layout.name):
                continue
            if claim.treatment in labels and claim.baseline in labels:
                wanted = needed.setdefault(name, [])
                wanted += [lab for lab in (claim.treatment, claim.baseline) if lab not in wanted]
    # each entry's labels in its own column order
    return {
        name: [lab for lab in outputs[name]["columns"] if lab in wanted]
        for name, wanted in needed.items()
    }
