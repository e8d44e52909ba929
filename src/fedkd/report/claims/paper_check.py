"""A claim checked on the paper's own numbers (``fedkd.report.paper_values``): the gap treatment −
baseline in each of the paper's settings the claim covers, and whether the paper's means bear the
claim out. A claim they do not is not the paper's claim (tests/test_claims.py evaluates every
claim so); the claims table shows the paper's gap beside the reproduction's.

The paper's cells are means over its seeds with no pairing, so this is a check of the point
values only: the claim's region (claim.Hypothesis.on_claimed_side) on each setting's gap, on
their mean (aggregate "mean"), or on the change of the gap between the extreme settings (trend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from fedkd.report.claims.claim import Claim
from fedkd.report.claims.verdict import Hypothesis

# the keys of a paper cell that make its setting (the method's and the value's keys aside)
SETTING_KEYS = (
    "dataset", "alpha", "partition", "shards", "participation", "local_epochs", "target_accuracy",
)  # fmt: skip
# "drop" reads the best round from another table than the last round's
DROP_BEST_FROM = {"fedgkd_table6": "fedgkd_table3"}


@dataclass(frozen=True)
class PaperGap:
    setting: tuple  # ((key, value), ...) of SETTING_KEYS present, plus ("round", r) for at_round
    treatment: float
    baseline: float

    @property
    def gap(self) -> float:
        return self.treatment - self.baseline

    def get(self, key: str):
        return dict(self.setting).get(key)


@dataclass(frozen=True)
class PaperCheck:
    status: str  # "holds", "fails", or "uncheckable"
    gaps: tuple[PaperGap, ...]
    effect: float  # the paper's gap as the claim reads it: mean gap, or mean change of the gap
    reason: str  # why it fails, or why it cannot be checked

    @property
    def holds(self) -> bool:
        return self.status == "holds"


def hypothesis(claim: Claim, dataset: str | None = None, stand_ins=None) -> Hypothesis:
    """The claim's hypothesis in a setting on ``dataset`` (its margin may be per dataset)."""
    margin = 0.0
    if isinstance(claim.margin, Mapping):
        if dataset is not None:
            margin, _ = claim.margin_for(dataset, stand_ins or {})
    else:
        margin = float(claim.margin)
    return Hypothesis(claim.test, claim.direction, margin, claim.gap_fraction)


@cache
def _shipped_values() -> dict:
    """The shipped paper values, read once (the claims check each claim on them twice)."""
    from fedkd.report.paper_values import load_paper_values

    return load_paper_values()


def paper_gaps(claim: Claim, values: dict | None = None) -> tuple[list[PaperGap], str]:
    """The paper's gap in each of its settings the claim covers, and why there are none."""
    values = _shipped_values() if values is None else values
    keys = [k for k in claim.tables if k in values]
    if not keys:
        return [], "the paper prints no table of these runs (" + ", ".join(claim.tables) + ")"
    found: dict[tuple, dict[str, float]] = {}
    for key in keys:
        for setting, method, value in _values(claim, key, values):
            if method in (claim.treatment, claim.baseline) and claim.accepts(dict(setting), {}):
                found.setdefault(setting, {})[method] = value
    gaps = _each_cell_once([
        PaperGap(setting, v[claim.treatment], v[claim.baseline])
        for setting, v in found.items()
        if claim.treatment in v and claim.baseline in v
    ])  # fmt: skip
    if not gaps:
        what = f"{claim.metric} of both {claim.treatment!r} and {claim.baseline!r}"
        return [], f"the paper's {', '.join(keys)} print no {what} in the claim's settings"
    return gaps, ""


def _each_cell_once(gaps: list[PaperGap]) -> list[PaperGap]:
    """The gaps less those that another gap repeats in a more specific setting, with the same
    two means: the paper printing one cell in two tables (Table 3's CIFAR-10, α 0.5 is Table 5's
    C 0.2), which is one setting, not two."""

    def repeated(g: PaperGap) -> bool:
        mine = set(g.setting)
        return any(
            mine < set(o.setting) and (o.treatment, o.baseline) == (g.treatment, g.baseline)
            for o in gaps
        )

    return [g for g in gaps if not repeated(g)]


def _values(claim: Claim, key: str, values: dict):
    """(setting, method, value) of each cell of table ``key`` that the claim's metric reads."""
    cells = values[key]["cells"]
    metric = claim.metric
    if metric == "drop":
        best_key = DROP_BEST_FROM.get(key)
        if best_key is None or best_key not in values:
            return
        best = {
            (_setting(c), c.get("method")): c["mean"]
            for c in values[best_key]["cells"]
            if c.get("stat", "best") == "best" and "round" not in c
        }
        last: dict[tuple, tuple[int, dict]] = {}
        for c in cells:
            if "round" in c:
                k = (_setting(c), c.get("method"))
                if k not in last or c["round"] > last[k][0]:
                    last[k] = (c["round"], c)
        for (setting, method), (_, c) in last.items():
            if (setting, method) in best:
                yield setting, method, best[(setting, method)] - c["mean"]
        return
    # a table whose cells name no statistic prints one accuracy per method and setting (FedNTD's
    # Table 1): the accuracy its claims read, whichever round the paper took it at
    one_accuracy = not any("stat" in c for c in cells)
    for c in cells:
        setting = _setting(c)
        if metric == "best" and c.get("stat", "best") == "best" and "round" not in c:
            value = c["mean"]
        elif metric == "final" and (
            c.get("stat") == "final" or one_accuracy and "round" not in c and "mean" in c
        ):
            value = c["mean"]
        elif metric == "at_round" and "round" in c and c["round"] >= claim.rounds_from:
            setting, value = (*setting, ("round", c["round"])), c["mean"]
        elif metric == "rounds_to_target" and "target_accuracy" in c:
            value = c["mean"]
        elif metric == "forgetting" and c.get("forgetting") is not None:
            value = c["forgetting"]
        else:
            continue
        yield setting, c.get("method"), float(value)


def _setting(cell: dict) -> tuple:
    return tuple((k, cell[k]) for k in SETTING_KEYS if k in cell)


def check_on_paper(claim: Claim, values: dict | None = None) -> PaperCheck:
    """Whether the paper's own means bear the claim out (see the module's docstring)."""
    gaps, why = paper_gaps(claim, values)
    if not gaps:
        return PaperCheck("uncheckable", (), math.nan, why)
    if claim.trend is not None:
        return _check_trend(claim, gaps)
    if claim.aggregate == "mean":
        effect = math.fsum(g.gap for g in gaps) / len(gaps)
        ok = hypothesis(claim).on_claimed_side(effect)
        why = "" if ok else f"the mean gap over the paper's {len(gaps)} settings is {effect:+.3g}"
        return PaperCheck("holds" if ok else "fails", tuple(gaps), effect, why)
    bad = [g for g in gaps if not hypothesis(claim, g.get("dataset")).on_claimed_side(g.gap)]
    effect = math.fsum(g.gap for g in gaps) / len(gaps)
    if bad:
        where = "; ".join(f"{_text(g.setting)}: {g.gap:+.3g}" for g in bad)
        return PaperCheck("fails", tuple(gaps), effect, f"the paper's gap fails in {where}")
    return PaperCheck("holds", tuple(gaps), effect, "")


def _check_trend(claim: Claim, gaps: list[PaperGap]) -> PaperCheck:
    trend = claim.trend
    groups: dict[tuple, dict] = {}
    for g in gaps:
        rest = tuple((k, v) for k, v in g.setting if k != trend.key)
        groups.setdefault(rest, {})[g.get(trend.key)] = g.gap
    changes = []
    for by_value in groups.values():
        ends = trend_ends(trend, list(by_value))
        if ends is not None:
            start, end = ends
            changes.append((by_value[end] - by_value[start]) * (1 if claim.direction == "higher"
                                                                else -1))  # fmt: skip
    if not changes:
        return PaperCheck("uncheckable", tuple(gaps), math.nan,
                          f"the paper has no two settings apart in {trend.key}")  # fmt: skip
    effect = math.fsum(changes) / len(changes)
    ok = all(c > 0 for c in changes)
    why = "" if ok else f"the paper's gap does not grow: changes {[round(c, 3) for c in changes]}"
    return PaperCheck("holds" if ok else "fails", tuple(gaps), effect, why)


def trend_ends(trend, values: list, stands=None) -> tuple | None:
    """(start, end) of a trend among the setting values present: the extreme values of a
    numeric key (the gap grows from start to end), or the datasets standing for the trend's
    start and end datasets (``stands(value, paper_dataset)``, identity by default). None when
    there are no two distinct ends."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if trend.key == "dataset":
        stands = stands or (lambda v, d: v == d)
        starts = [v for v in present if stands(v, trend.start) and not stands(v, trend.end)]
        ends = [v for v in present if stands(v, trend.end) and not stands(v, trend.start)]
        if len(starts) != 1 or len(ends) != 1:
            return None
        return starts[0], ends[0]
    numbers = sorted({float(v) for v in present})
    if len(numbers) < 2:
        return None
    low, high = numbers[0], numbers[-1]
    pick = {float(v): v for v in present}
    return (pick[high], pick[low]) if trend.toward == "low" else (pick[low], pick[high])


def _text(setting: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting)
