"""A claim evaluated on the runs: its rows' verdicts and its own (plain data; the page in
page.py writes them out)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from fedkd.report.claims import all_claims
from fedkd.report.claims.claim import DECLARED, Claim, stands_for
from fedkd.report.claims.compare import Comparison, comparisons, dedup, trend_comparisons
from fedkd.report.claims.paper_check import PaperCheck, check_on_paper, paper_gaps
from fedkd.report.claims.runs import SettingValues, pool_methods, setting_values
from fedkd.report.claims.verdict import (
    MIN_SEEDS,
    Estimate,
    Hypothesis,
    claim_verdict,
    contrast,
    verdicts,
)  # fmt: skip
from fedkd.report.tables.vs_paper import paper_setting_text
from fedkd.report.text import DASH, key_value

DECIMALS = {"pp": 2, "rounds": 1, "F": 3}


@dataclass
class ClaimResult:
    claim: Claim
    rows: list[Comparison]
    verdict: str
    summary: str  # the sign count, e.g. "ahead in 7 of 9 settings"
    average: Comparison | None = None  # the mean over settings (aggregate "mean")
    reason: str = ""  # why there is no row
    paper_check: PaperCheck | None = None  # the claim on the paper's own cells
    stand_ins: dict = field(default_factory=dict)
    scope: tuple[int, int] | None = None  # (the paper's settings tested, all the claim's)


def evaluate(claim: Claim, runs: pd.DataFrame, sources: dict, stand_ins: dict,
             memo: dict | None = None) -> ClaimResult:  # fmt: skip
    """One claim on the runs (``memo``: what the claims of one table share, see setting_values)."""
    tables = [
        name for name, info in sources.items()
        if claim.selects(name, info.get("paper"), str(info.get("layout", "")))
    ]  # fmt: skip
    values: list[SettingValues] = []
    for name in tables:
        if {claim.treatment, claim.baseline} <= held_labels(sources[name], runs, name):
            # every method: the setting's variance needs them; selected only when the memo has
            # not grouped this table yet (a filter of every round of every run, else per claim)
            rows = lambda n=name: runs[runs["table"] == n]  # noqa: E731
            values += setting_values(claim, name, sources[name], rows, stand_ins, memo)
    # the variance of a setting from every table's methods in it
    pool_methods(claim, values, sources, runs, {} if memo is None else memo)
    if claim.trend is not None:
        rows = trend_comparisons(claim, values, stand_ins)
    else:
        rows = comparisons(claim, values, stand_ins)
    rows = dedup(rows)
    result = ClaimResult(claim, [], "not run", "", stand_ins=stand_ins,
                         paper_check=_check_on_paper(claim))  # fmt: skip
    if len(rows) == 1 and rows[0].key == ("none",):
        result.reason = rows[0].notes[0]
        return result
    if not rows:
        result.reason = _not_run_reason(claim, tables, runs)
        return result
    gaps, _ = paper_gaps(claim) if claim.paper != DECLARED else ([], "")
    for r in rows:
        r.paper_gap, disagreement = _row_paper_gap(claim, r, stand_ins, gaps)
        if disagreement:
            r.notes.append(disagreement)
    if gaps and claim.trend is None:
        # the paper's settings the runs test: a verdict holds on these, not beyond them
        tested = {
            g.setting for r in rows if r.diffs for g in _paper_cells(claim, r, stand_ins, gaps)
        }
        result.scope = (len(tested), len(gaps))
    hyps = [Hypothesis(claim.test, claim.direction, r.margin, claim.gap_fraction) for r in rows]
    # rows of a claim on the average only describe: the average decides, uncorrected
    ests = [estimate(r) for r in rows]
    found = verdicts(ests, hyps, claim.aggregate)
    for r, h, v, est in zip(rows, hyps, found, ests, strict=True):
        r.verdict = v
        _note_no_spread(r, h)
        _note_floor(r, est)
        _note_withheld(r, h)
        _per_protocol(r, h)
    result.rows = rows
    if claim.aggregate == "mean":
        result.average = _average(claim, rows)
        result.verdict = result.average.verdict.verdict
        left_out = [r.verdict.verdict for r in rows if not r.diffs]
        if left_out:
            # an average over fewer settings than the claim's is not the claim's average
            result.verdict = claim_verdict(left_out)
    else:
        result.verdict = claim_verdict([r.verdict.verdict for r in rows], claim.aggregate)
    result.summary = sign_count(claim, rows, hyps)
    return result


def _check_on_paper(claim: Claim) -> PaperCheck:
    """A configuration's own claim is no paper's: nothing to check it on."""
    if claim.paper == DECLARED:
        return PaperCheck("uncheckable", (), math.nan, "a configuration's own claim")
    return check_on_paper(claim)


def held_labels(info: dict, runs: pd.DataFrame, table: str) -> set[str]:
    """The column labels a table holds: those its source lists (``labels``: the table's columns,
    which the workflow passes, so a column whose runs are all missing still counts), else those
    with runs. A claim reads a table that holds both its methods; one that holds one of them is
    a table the configuration did not give the other (tiny's Table 3 has no FedProx column)."""
    listed = info.get("labels")
    if listed:
        return {str(label) for label in listed}
    return set(runs.loc[runs["table"] == table, "label"])


def _note_no_spread(r: Comparison, hyp: Hypothesis) -> None:
    v = r.verdict
    if v is None or v.n < MIN_SEEDS or v.se != 0 or r.neither_reached:
        return
    r.notes.append(
        "no spread at all between the pair's per-seed differences, and no measurement step "
        "known to floor it (the test-set size is not recorded): the t-test is undefined, so the "
        "row has no verdict"
    )


def _per_protocol(r: Comparison, hyp: Hypothesis) -> None:
    """A non-inferiority or an equivalence that holds counting collapsed runs must hold without
    them too (per protocol, as such trials are judged): runs of both methods stuck at chance
    look alike whatever the methods, so intention to treat alone favours these claims."""
    v = r.verdict
    if hyp.test not in ("non-inferiority", "equivalence") or v is None or v.verdict != "holds":
        return
    if not r.collapsed_seeds:
        return
    kept = [r.diffs[s] for s in sorted(r.diffs) if s not in r.collapsed_seeds]
    alone = verdicts([contrast(kept, step=r.step, open_above=r.open_above,
                               open_below=r.open_below)], hyp)[0]  # fmt: skip
    if alone.verdict == "holds":
        return
    r.verdict = replace(v, verdict="inconclusive")
    r.notes.append(
        f"holds only with the collapsed runs counted: without seed(s) "
        f"{', '.join(map(str, sorted(r.collapsed_seeds)))} it is {alone.verdict} "
        f"({len(kept)} seeds), and a {hyp.test} claim must hold both ways"
    )


def _note_withheld(r: Comparison, hyp: Hypothesis) -> None:
    """Say which verdict the bounds rule out, and why (``Hypothesis.withheld``)."""
    holds, against = hyp.withheld(r.open_above, r.open_below)
    if not (holds or against) or r.neither_reached or r.verdict is None or r.verdict.df < 1:
        return
    which = "hold nor be contradicted" if holds and against else "hold" if holds else (
        "be contradicted")  # fmt: skip
    if hyp.test == "equivalence" and not against:  # one region of the contradiction is left
        side = f"below -{hyp.margin:g}" if r.open_above else f"above +{hyp.margin:g}"
        which = f"hold, nor be contradicted by a difference {side}"
    r.notes.append(f"{'; '.join(r.open_why)}: the row cannot {which} on these values")


def _note_floor(r: Comparison, est: Estimate) -> None:
    """Say so where the measurement's step, not the differences' spread, set the interval."""
    v = r.verdict
    if v is None or v.n < MIN_SEEDS or not est.floored or r.neither_reached:
        return
    r.notes.append(
        f"the differences spread by less than the measurement resolves (sd {est.sd:.3g} below "
        f"its step {est.step:.3g}): the step is taken as their sd"
    )


def estimate(r: Comparison) -> Estimate:
    """The row's contrast: the paired t-test on its per-seed differences (for a trend, the
    per-seed change of the gap between its two settings)."""
    diffs = [r.diffs[s] for s in sorted(r.diffs)]
    return contrast(diffs, lost=r.failed + r.missing, failed=r.failed, step=r.step,
                    open_above=r.open_above, open_below=r.open_below)  # fmt: skip


def _average(claim: Claim, rows: list[Comparison]) -> Comparison:
    """The mean over settings (those with valid pairs), one test: per seed the mean of the
    settings' differences, then the paired t-test on those per-seed means, which carries the
    covariance of settings that share their seeds."""
    used = [r for r in rows if r.diffs]
    notes = []
    left = [r.text for r in rows if not r.diffs]
    if left:
        notes.append(
            f"left out of the average (no valid pair): {'; '.join(left)}; the claim's verdict "
            "is theirs, as this is not the average over all its settings"
        )
    failed = sum(r.failed for r in used)
    text = f"average over {len(used)} setting{'' if len(used) == 1 else 's'}"
    seeds = sorted(set.intersection(*(set(r.diffs) for r in used))) if used else []
    every = set().union(*(set(r.diffs) for r in used)) if used else set()
    if len(every) > len(seeds):
        notes.append(
            f"seed(s) {', '.join(map(str, sorted(every - set(seeds))))} not in every setting: "
            "no average on the others alone"
        )
    per_seed = {s: math.fsum(r.diffs[s] for r in used) / len(used) for s in seeds}
    missing = sum(r.missing for r in used) + len(every) - len(seeds)
    avg = Comparison("", {}, text, per_seed, failed, notes, ("average",), float(claim.margin),
                     missing=missing, open_above=any(r.open_above for r in used),
                     open_below=any(r.open_below for r in used),
                     open_why=list(dict.fromkeys(w for r in used for w in r.open_why)),
                     collapsed_seeds=frozenset().union(*(r.collapsed_seeds for r in used)))  # fmt: skip
    # the floor is the measurement's step, not the finer lattice (h/k) the mean of k values
    # lies on: k settings that coincide (correlated at 1) are one setting's evidence, and with
    # h/k three per-seed means one example ahead would hold where no setting can
    avg.step = max((r.step for r in used), default=0.0)
    hyp = Hypothesis(claim.test, claim.direction, float(claim.margin), claim.gap_fraction)
    est = estimate(avg)
    avg.verdict = verdicts([est], hyp)[0]
    _note_floor(avg, est)
    _note_withheld(avg, hyp)
    _per_protocol(avg, hyp)
    paper = [r.paper_gap for r in used if r.paper_gap is not None]
    avg.paper_gap = math.fsum(paper) / len(paper) if paper and len(paper) == len(used) else None
    return avg


def sign_count(claim: Claim, rows: list[Comparison], hyps: list[Hypothesis]) -> str:
    """E.g. "ahead in 7 of 9 settings": the settings whose effect lies on the claimed side."""
    seen = [(r, h) for r, h in zip(rows, hyps, strict=True) if r.verdict and r.verdict.n]
    if not seen:
        return ""
    k = sum(h.on_claimed_side(r.verdict.effect) for r, h in seen)
    n = len(seen)
    unit = "setting" if n == 1 else "settings"
    if claim.trend is not None:
        return f"the gap grows in {k} of {n} {'comparison' if n == 1 else 'comparisons'}"
    if claim.test == "equivalence":
        return f"within the margin in {k} of {n} {unit}"
    if claim.test == "stated-gap":
        return f"at or above the stated gap in {k} of {n} {unit}"
    return f"ahead in {k} of {n} {unit}"


def _not_run_reason(claim: Claim, tables: list[str], runs: pd.DataFrame) -> str:
    if tables and any(
        set(runs.loc[runs["table"] == t, "label"]) >= {claim.treatment, claim.baseline}
        for t in tables
    ):
        where = ", ".join(f"{k} in {list(v)}" for k, v in claim.where.items())
        if not where and isinstance(claim.margin, dict):
            where = "a dataset the paper states a gap for"
        return f"no setting of {', '.join(tables)} has both methods' runs with {where}"
    return (
        f"no table of this configuration has runs of both {claim.treatment!r} and "
        f"{claim.baseline!r} (tables the claim reads: {', '.join(claim.tables)})"
    )


def _name_shared(results: list[ClaimResult]) -> None:
    """A comparison that rows of several claims make is named in each (so two claims resting on
    the same runs are not read as two pieces of evidence)."""
    owners: dict[tuple, list[str]] = {}
    for res in results:
        for r in res.rows:
            if r.key[0] not in ("trend", "none"):
                owners.setdefault(r.key, []).append(res.claim.id)
    for res in results:
        for r in res.rows:
            others = [c for c in owners.get(r.key, []) if c != res.claim.id]
            r.shared_with = list(dict.fromkeys(others))


# --------------------------------------------------------------------------- the paper's gaps
def _row_paper_gap(
    claim: Claim, row: Comparison, stand_ins: dict, gaps: list
) -> tuple[float | None, str]:
    """The paper's gap (of ``gaps``, the claim's) in the setting a row stands for, and a note
    where the paper's cells disagree. A paper setting matches when all its keys match the row's
    (its dataset through the stand-ins); of several, the most specific (the most keys: Table 5's
    CIFAR-10, α 0.5, C 0.1 over Table 3's CIFAR-10, α 0.5, which names no C). Equally specific
    matches with one gap give it; with different gaps (a stand-in for two paper datasets) none,
    and the note gives them."""
    best = _paper_cells(claim, row, stand_ins, gaps)
    if not best:
        return None, ""
    found = {round(g.gap, 9) for g in best}  # the same cell read through two tables: one gap
    if len(found) == 1:
        return best[0].gap, ""
    cells = "; ".join(
        f"{paper_setting_text(dict(g.setting))}: {number_text(g.gap, claim.unit)}" for g in best
    )
    return None, f"the paper's gap differs between the settings this row stands for ({cells})"


def _paper_cells(claim: Claim, row: Comparison, stand_ins: dict, gaps: list) -> list:
    """The paper's settings (of ``gaps``) a row stands for: the most specific that match."""
    if claim.trend is not None or not row.setting:
        return []
    sub = row.setting.get("sub", "")
    matches = []
    for g in gaps:
        ok = True
        for key, value in g.setting:
            if key == "dataset":
                ok = stands_for(row.setting.get("dataset"), value, stand_ins)
            elif key == "round":
                ok = sub == f"round {value}"
            elif key == "target_accuracy":
                ok = sub == f"T = {value * 100:g}%"
            else:
                mine = key_value(row.setting.get(key))
                ok = mine is not None and _equal(mine, value)
            if not ok:
                break
        if ok:
            matches.append(g)
    if not matches:
        return []
    most = max(len(g.setting) for g in matches)
    return [g for g in matches if len(g.setting) == most]


def _equal(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return str(a) == str(b)


def evaluate_all(runs: pd.DataFrame, sources: dict, stand_ins: dict,
                 declared: tuple[Claim, ...] = ()) -> list[ClaimResult]:  # fmt: skip
    """The configuration's own claims (``declared``), then every claim of the registry,
    evaluated on ``runs`` (the aggregate, labels split)."""
    memo: dict = {}
    claims = (*declared, *all_claims())
    results = [evaluate(claim, runs, sources, stand_ins, memo) for claim in claims]
    _name_shared(results)
    return results


def number_text(x, unit: str, signed: bool = True) -> str:
    """A value in its unit's decimals, signed, with a true minus: "+1.23", "−4.0"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    text = f"{x:+.{DECIMALS[unit]}f}" if signed else f"{x:.{DECIMALS[unit]}f}"
    return text.replace("-", "−")
