"""The properties a claims verdict must have, over generated rows: more settings never turn a
contradicted claim into one that holds, less spread never weakens a verdict and more never
strengthens one, an interval wholly on one side of a bound never gets the other side's verdict,
and less noise in the data never gives a setting a weaker verdict."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedkd.report.claims.verdict import (
    Hypothesis,
    claim_verdict,
    contrast,
    paired_verdict,
    verdicts,
)
from test_claims_verdict import _est, effects, ses

RANK = {"contradicted": 0, "inconclusive": 1, "holds": 2}
hypotheses = st.builds(
    Hypothesis,
    st.sampled_from(["superiority", "non-inferiority", "equivalence", "stated-gap"]),
    st.sampled_from(["higher", "lower"]),
    st.floats(0.1, 3),
)
rows = st.lists(st.tuples(effects, ses, st.integers(4, 30)), min_size=1, max_size=6)


# --------------------------------------------------------------------------- properties
def _claim(rows_, hyp, aggregate="each"):
    found = verdicts([_est(e, s, df) for e, s, df in rows_], hyp, aggregate)
    return claim_verdict([v.verdict for v in found], aggregate), found


@settings(max_examples=300, deadline=None)
@given(rows, rows, hypotheses)
def test_more_settings_never_turn_contradicted_into_holds(first, more, hyp):
    before, _ = _claim(first, hyp)
    after, _ = _claim(first + more, hyp)
    if before == "contradicted":
        assert after != "holds"
    if before != "holds":  # an every-setting claim only gets harder to hold
        assert after != "holds"


@settings(max_examples=300, deadline=None)
@given(rows, hypotheses, st.floats(0.05, 0.95), st.sampled_from(["each", "any"]))
def test_less_spread_never_weakens_a_verdict_and_more_never_strengthens_one(rows_, hyp, k, agg):
    """Scaling every standard error by k < 1: a row that held still holds, one that was
    contradicted is still contradicted; the claim's verdict likewise."""
    wide_claim, wide = _claim(rows_, hyp, agg)
    narrow_claim, narrow = _claim([(e, s * k, df) for e, s, df in rows_], hyp, agg)
    for w, n in zip(wide, narrow, strict=True):
        if w.verdict in ("holds", "contradicted"):
            assert n.verdict == w.verdict
    if wide_claim in ("holds", "contradicted"):
        assert narrow_claim == wide_claim


@settings(max_examples=300, deadline=None)
@given(st.tuples(effects, ses, st.integers(4, 30)), hypotheses)
def test_an_interval_wholly_on_one_side_never_gets_the_other_sides_verdict(row, hyp):
    (v,) = verdicts([_est(*row)], hyp)
    inside = [all(hyp.in_region(x) for x in (v.ci_low, v.ci_high))]
    outside = [not hyp.in_region(x) for x in (v.ci_low, v.ci_high)]
    if hyp.test != "equivalence" and all(outside):
        assert v.verdict != "holds"
    if all(inside):
        assert v.verdict != "contradicted"
    # and a single-bound verdict is exactly what the interval shows
    if hyp.test != "equivalence":
        (bound,) = hyp.bounds()
        strictly = not (min(v.ci_low, v.ci_high) <= bound <= max(v.ci_low, v.ci_high))
        assert (v.verdict != "inconclusive") == strictly


@pytest.mark.parametrize("spread", [0.05, 0.2, 0.5, 1.0, 2.0])
def test_shrinking_the_datas_spread_never_weakens_a_setting(spread):
    """The same differences around their mean, scaled: from the data, not the standard error."""
    centre, shape = 1.0, [-1.0, 0.5, 0.5, 1.2, -1.2]
    hyp = Hypothesis()
    last = None
    for scale in (4.0, 2.0, 1.0, 0.5, 0.25):
        diffs = [centre + spread * scale * x for x in shape]
        rank = RANK[paired_verdict(diffs, "higher").verdict]
        assert last is None or rank >= last
        last = rank
    assert hyp.bounds() == (0.0,)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.floats(-2, 2), min_size=3, max_size=3), min_size=3, max_size=8),
    st.floats(-3, 3),
    st.floats(0.05, 0.95),
    hypotheses,
)
def test_a_setting_with_less_noise_never_gets_a_weaker_verdict(noise, gap, k, hyp):
    """A whole setting (methods × 3 seeds: seed effects, a gap between the first two methods,
    noise): scaling the noise of every run by k < 1 keeps a verdict that held or contradicted,
    and scaling it up never turns an unresolved row into a resolved one."""
    seeds = [0, 1, 2]
    base = {0: 70.0, 1: 60.0, 2: 65.0}
    # the noise as departures from additivity (centred per method and per seed), so that
    # scaling it leaves every method's mean, and so the effect, where it is
    m = len(noise)
    rows = [sum(e) / 3 for e in noise]
    cols = [sum(e[s] for e in noise) / m for s in seeds]
    grand = sum(rows) / m
    noise = [[e[s] - rows[i] - cols[s] + grand for s in seeds] for i, e in enumerate(noise)]

    def estimate(scale: float):
        values = {
            f"m{i}": {s: base[s] + (gap if i == 0 else 0.0) + scale * e[s] for s in seeds}
            for i, e in enumerate(noise)
        }
        return contrast([values["m0"][s] - values["m1"][s] for s in seeds])

    def verdict(scale: float) -> str:
        return verdicts([estimate(scale)], hyp)[0].verdict

    # noise scaled down to rounding is no spread: contrast rounds a spread within 1e-12 of the
    # differences' scale to none, where the t statistic is undefined and the row inconclusive
    # by design (a zero-width interval would claim certainty); the property is about noise
    assume(estimate(k).se > 0 or estimate(1.0).se == 0)
    wide, narrow = verdict(1.0), verdict(k)
    if wide in ("holds", "contradicted"):
        assert narrow == wide
    if narrow == "inconclusive":
        assert wide == "inconclusive"
