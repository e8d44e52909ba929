"""The claims' test procedure (fedkd.report.claims.verdict): Student's t (scipy) against printed
tables, the power against simulation, the two-way residual variance, and the properties a verdict must have — more
settings never turn a contradicted claim into one that holds, less spread never weakens a verdict
and more never strengthens one, an interval wholly on one side of a bound never gets the other
side's verdict, and three coincident differences do not hold by their own spread."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkd.report.claims.verdict import (
    ALPHA,
    MAX_SEEDS,
    Estimate,
    Hypothesis,
    claim_verdict,
    combine,
    contrast,
    holm,
    pair_residual,
    paired_verdict,
    seeds_to_resolve,
    t_power,
    t_quantile,
    t_sf,
    two_way_residual,
    verdicts,
)

RANK = {"contradicted": 0, "inconclusive": 1, "holds": 2}


# --------------------------------------------------------------------------- Student's t
@pytest.mark.parametrize(
    "df, q",  # Student's t 0.975 quantiles as printed in the standard tables
    [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (14, 2.145), (120, 1.980)],
)
def test_t_quantile_matches_the_printed_table(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=6e-4)
    q_exact = t_quantile(0.975, df)
    assert t_sf(q_exact, df) == pytest.approx(0.025, rel=1e-9)
    assert t_sf(-q_exact, df) == pytest.approx(0.975, rel=1e-12)
    # the interval a verdict prints uses the same quantile
    assert Estimate(0.0, 1.0, df, 3).interval()[1] == pytest.approx(q, abs=6e-4)


@pytest.mark.parametrize("n, d, alpha", [(3, 1.0, 0.025), (5, 1.0, 0.025), (10, 0.5, 0.0025)])
def test_the_power_of_a_one_sided_t_test_matches_simulation(n, d, alpha):
    """The noncentral t's tail against the share of simulated samples (mean d, sd 1) whose
    one-sided t-test rejects: 200,000 samples, a binomial sd of the share below 0.0012."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(d, 1.0, (200_000, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = float((t > t_quantile(1 - alpha, n - 1)).mean())
    assert t_power(d * math.sqrt(n), n - 1, alpha) == pytest.approx(simulated, abs=0.005)


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([]) == []


# --------------------------------------------------------------------------- the variance
def test_the_two_way_residual_is_the_textbook_one():
    # 3 methods x 3 seeds: residual SS by hand; additive data have none
    values = {"a": {0: 70.0, 1: 60.0, 2: 65.0}, "b": {0: 72.0, 1: 62.5, 2: 66.5},
              "c": {0: 70.5, 1: 59.5, 2: 65.0}}  # fmt: skip
    res = two_way_residual(values, [0, 1, 2])
    rows = [[values[m][s] for s in range(3)] for m in "abc"]
    g = sum(map(sum, rows)) / 9
    rm = [sum(r) / 3 for r in rows]
    cm = [sum(r[j] for r in rows) / 3 for j in range(3)]
    ss = sum((rows[i][j] - rm[i] - cm[j] + g) ** 2 for i in range(3) for j in range(3))
    assert (res.df, res.methods, res.seeds) == (4, 3, 3)
    assert res.variance == pytest.approx(ss / 4, rel=1e-12)
    additive = {m: {s: 10.0 * k + 3.0 * s for s in range(3)} for k, m in enumerate("abc")}
    assert two_way_residual(additive, [0, 1, 2]).variance == 0
    # a method without one of the seeds is not in the block; 8 methods x 3 seeds: 14 df
    assert two_way_residual({**values, "d": {0: 1.0, 1: 2.0}}, [0, 1, 2]).methods == 3
    many = {str(k): {s: float(k + s + (k * s) % 3) for s in range(3)} for k in range(8)}
    assert two_way_residual(many, [0, 1, 2]).df == 14
    # the check of equal variance: one method far noisier than the rest is named
    assert not res.unequal and "holds" not in res.text
    wild = {**additive, "d": {0: 5.0, 1: 30.0, 2: 0.0}}
    noisy = two_way_residual(wild, [0, 1, 2])
    assert noisy.unequal and noisy.largest == "d" and noisy.largest_share > 0.5
    assert "d holds" in noisy.text and "unequal" in noisy.text


def test_two_methods_give_the_paired_t_test():
    diffs = [2.0, 2.2, 1.8]
    est = contrast(diffs)
    sd = math.sqrt(sum((d - 2.0) ** 2 for d in diffs) / 2)
    assert pair_residual(diffs).variance == pytest.approx(sd**2 / 2)
    assert est.se == pytest.approx(sd / math.sqrt(3)) and est.df == 2
    low, high = est.interval()
    # Student's t on 2 df has the CDF 1/2 + t / (2 sqrt(2 + t^2)): its 0.975 quantile is
    # a sqrt(2 / (1 - a^2)) with a = 0.95 (4.3027)
    half = 0.95 * math.sqrt(2 / (1 - 0.95**2)) * sd / math.sqrt(3)
    assert (low, high) == pytest.approx((2 - half, 2 + half), rel=1e-9)


def test_three_coincident_differences_do_not_hold_by_their_own_spread():
    """(1.4, 1.4, 1.5): alone a paired t-test gives p 0.0003 on 2 degrees of freedom; here the
    variance is the setting's (its other methods scatter by about 1 point from seed to seed), and
    the claim is inconclusive. Without other methods, 2 degrees of freedom give no verdict."""
    diffs = [1.4, 1.4, 1.5]
    base = {0: 70.0, 1: 60.0, 2: 65.0}
    noise = [(0.9, -1.1, 0.3), (-0.6, 1.2, -0.5), (1.3, 0.2, -1.4), (-0.8, -0.4, 1.0)]
    values = {"base": base, "treated": {s: base[s] + d for s, d in enumerate(diffs)}}
    values |= {f"m{k}": {s: base[s] + e[s] for s in range(3)} for k, e in enumerate(noise)}
    residual = two_way_residual(values, [0, 1, 2])
    assert residual.df == 10
    setting = paired_verdict(diffs, "higher", residual=residual)
    assert setting.verdict == "inconclusive" and setting.p_holds > ALPHA
    assert setting.ci_low < 0 < setting.ci_high
    assert paired_verdict(diffs, "higher").verdict == "too few seeds"
    # nor does equivalence hold on three near-zero differences by their own spread
    assert paired_verdict([0, 0, 0.1], "higher", test="equivalence", margin=1).verdict == (
        "too few seeds"
    )


def test_a_noisy_pair_does_not_hold_on_its_quiet_neighbours_variance():
    """(1.2, 1.6, 2.0) against a setting whose six other methods keep to within 0.1 of the
    seeds' pattern: the setting's variance alone would show the effect above 0.8, but the pair's
    own differences scatter by 0.4, and their paired t-test (2 df) does not. Both tests must show
    it: the row is inconclusive, with the pair's own, wider interval and its larger p."""
    diffs = [1.2, 1.6, 2.0]
    base = {0: 70.0, 1: 60.0, 2: 65.0}
    quiet = [(0.1, -0.1, 0.0), (-0.1, 0.0, 0.1), (0.0, 0.1, -0.1), (0.1, 0.0, -0.1),
             (-0.1, 0.1, 0.0), (0.0, -0.1, 0.1)]  # fmt: skip
    values = {"base": base, "treated": {s: base[s] + d for s, d in enumerate(diffs)}}
    values |= {f"m{k}": {s: base[s] + e[s] for s in range(3)} for k, e in enumerate(quiet)}
    residual = two_way_residual(values, [0, 1, 2])
    est = contrast(diffs, residual)
    assert (est.df, est.own_df) == (14, 2) and est.own_se == pytest.approx(0.4 / math.sqrt(3))
    hyp = Hypothesis("stated-gap", "higher", 1.6)  # shown above 0.8
    pooled_alone = verdicts([replace(est, own_se=None)], hyp)[0]
    assert pooled_alone.verdict == "holds"
    (v,) = verdicts([est], hyp)
    assert v.verdict == "inconclusive" and est.own_is_wider()
    paired = paired_verdict(diffs, "higher", test="stated-gap", margin=1.6)
    assert v.p_holds == pytest.approx(max(pooled_alone.p_holds,
                                          hyp.pvalues(1.6, est.own_se, 2)[0]))  # fmt: skip
    assert (v.ci_low, v.ci_high) == pytest.approx((paired.ci_low, paired.ci_high))
    # the same pair with its differences as tight as the setting: both tests show it
    tight = contrast([1.55, 1.6, 1.65], residual)
    assert verdicts([tight], hyp)[0].verdict == "holds"


def test_both_tests_decide_together():
    """The contrast is shown on a side only where the setting's variance and the pair's own
    differences both show it: each side's p is the larger of the two, the interval the wider."""
    hyp = Hypothesis()
    pooled_holds = Estimate(2.0, 0.5, 14, 3, own_se=0.2, own_df=2)
    assert not pooled_holds.own_is_wider()
    (v,) = verdicts([pooled_holds], hyp)
    # the larger p, though the pair's own interval is the narrower: 2 df have heavier tails
    assert v.verdict == "holds" and v.p_holds == pytest.approx(t_sf(2.0 / 0.2, 2))
    assert t_sf(2.0 / 0.2, 2) > t_sf(2.0 / 0.5, 14)
    assert (v.ci_low, v.ci_high) == pytest.approx((2 - t_quantile(0.975, 14) * 0.5,
                                                   2 + t_quantile(0.975, 14) * 0.5))  # fmt: skip
    own_fails = Estimate(2.0, 0.5, 14, 3, own_se=1.0, own_df=2)
    (v,) = verdicts([own_fails], hyp)
    assert v.verdict == "inconclusive" and v.p_holds == pytest.approx(t_sf(2.0, 2))
    assert v.ci_low == pytest.approx(2 - t_quantile(0.975, 2) * 1.0)
    # contradicted likewise needs both
    (v,) = verdicts([Estimate(-2.0, 0.5, 14, 3, own_se=1.0, own_df=2)], hyp)
    assert v.verdict == "inconclusive" and v.p_contradicted == pytest.approx(t_sf(2.0, 2))
    (v,) = verdicts([Estimate(-2.0, 0.5, 14, 3, own_se=0.3, own_df=2)], hyp)
    assert v.verdict == "contradicted"
    # no spread in the pair: its own test shows any effect, and the setting's decides
    (v,) = verdicts([Estimate(2.0, 0.5, 14, 3, own_se=0.0, own_df=2)], hyp)
    assert v.verdict == "holds" and v.p_holds == pytest.approx(t_sf(4.0, 14))


def test_combined_contrasts_carry_both_tests():
    """A trend or an average: the settings' variances and the pairs' own, each summed with
    Welch–Satterthwaite degrees of freedom; a part that is a lone paired test brings that one."""
    a = Estimate(1.0, 0.3, 14, 3, own_se=0.6, own_df=2)
    b = Estimate(2.0, 0.4, 14, 3, own_se=0.8, own_df=2)
    both = combine([a, b], (-1.0, 1.0))
    assert both.se == pytest.approx(0.5) and both.own_se == pytest.approx(1.0)
    assert both.own_df == math.floor(1.0**2 / (0.6**4 / 2 + 0.8**4 / 2))
    lone = Estimate(2.0, 0.4, 2, 3)  # the paired t-test alone: its only test is both
    mixed = combine([a, lone], (0.5, 0.5))
    assert mixed.own_se == pytest.approx(math.sqrt(0.25 * 0.6**2 + 0.25 * 0.4**2))
    assert combine([Estimate(1.0, 0.3, 14, 3), lone], (0.5, 0.5)).own_se is None


# --------------------------------------------------------------------------- one setting
def _est(effect: float, se: float, df: int = 14, n: int = 3) -> Estimate:
    return Estimate(effect, se, df, n)


def test_verdicts_of_one_setting_against_a_pooled_variance():
    hyp = Hypothesis()
    assert verdicts([_est(2.0, 0.5)], hyp)[0].verdict == "holds"
    assert verdicts([_est(-2.0, 0.5)], hyp)[0].verdict == "contradicted"
    assert verdicts([_est(0.5, 0.5)], hyp)[0].verdict == "inconclusive"
    lower = Hypothesis(direction="lower")
    assert verdicts([_est(-2.0, 0.5)], lower)[0].verdict == "holds"
    ni = Hypothesis("non-inferiority", "higher", 0.5)
    assert verdicts([_est(0.0, 0.1)], ni)[0].verdict == "holds"
    assert verdicts([_est(-1.0, 0.1)], ni)[0].verdict == "contradicted"
    eq = Hypothesis("equivalence", "higher", 1.0)
    assert verdicts([_est(0.0, 0.1)], eq)[0].verdict == "holds"
    assert verdicts([_est(2.0, 0.1)], eq)[0].verdict == "contradicted"
    assert verdicts([_est(0.5, 0.6)], eq)[0].verdict == "inconclusive"
    # too few seeds, too few degrees of freedom, a seed lost: no verdict
    assert verdicts([_est(5.0, 0.1, n=2)], hyp)[0].verdict == "too few seeds"
    assert verdicts([_est(5.0, 0.1, df=3)], hyp)[0].verdict == "too few seeds"
    assert verdicts([Estimate(5.0, 0.1, 14, 3, lost=1)], hyp)[0].verdict == "too few seeds"
    assert verdicts([Estimate(5.0, 0.1, 14, 3, lost=1, failed=1)], hyp)[0].verdict == "failed"
    assert verdicts([contrast([])], hyp)[0].verdict == "not run"
    with pytest.raises(ValueError, match="finite"):
        contrast([1.0, math.nan, 3.0])
    with pytest.raises(ValueError, match="direction"):
        Hypothesis(direction="up")


def test_a_stated_gap_is_reproduced_when_shown_above_half_of_it():
    gap = Hypothesis("stated-gap", "higher", 1.6)
    assert gap.bounds() == (0.8,)
    assert verdicts([_est(1.6, 0.3)], gap)[0].verdict == "holds"  # a faithful reproduction
    assert verdicts([_est(3.2, 0.3)], gap)[0].verdict == "holds"  # more than stated
    assert verdicts([_est(0.0, 0.1)], gap)[0].verdict == "contradicted"  # a tie never holds
    assert verdicts([_est(1.0, 0.6)], gap)[0].verdict == "inconclusive"
    assert gap.in_region(0.9) and not gap.in_region(0.7)
    # the paper's own point bears a stated gap out when it reaches it
    assert gap.on_claimed_side(1.6) and not gap.on_claimed_side(1.5)


def test_no_spread_is_the_limit_of_the_t_test():
    hyp = Hypothesis()
    assert verdicts([_est(1.0, 0.0)], hyp)[0].verdict == "holds"
    assert verdicts([_est(-1.0, 0.0)], hyp)[0].verdict == "contradicted"
    on = verdicts([_est(0.0, 0.0)], hyp)[0]
    assert on.verdict == "inconclusive" and on.p_holds == 0.5


def test_power_only_from_five_seeds_on():
    hyp = Hypothesis()
    three = verdicts([_est(0.4, 0.5)], hyp)[0]
    assert three.more_seeds and three.seeds_needed is None
    five = verdicts([_est(0.4, 0.5, df=28, n=5)], hyp)[0]
    assert not five.more_seeds and five.seeds_needed > 5
    assert seeds_to_resolve(0.01, _est(0.01, 5.0, n=5)) == MAX_SEEDS + 1
    assert seeds_to_resolve(0.0, _est(0.0, 1.0, n=5)) is None
    # with the pair's own test beside it, the seeds the weaker of the two needs
    pooled = _est(0.4, 0.5, df=28, n=5)
    noisy_pair = replace(pooled, own_se=1.0, own_df=4)
    assert seeds_to_resolve(0.4, noisy_pair) > seeds_to_resolve(0.4, pooled)
    assert seeds_to_resolve(0.4, replace(pooled, own_se=0.1, own_df=4)) == (
        seeds_to_resolve(0.4, pooled)
    )


# --------------------------------------------------------------------------- over settings
def test_every_setting_needs_no_correction_to_hold_and_holm_to_be_contradicted():
    """Two settings each at raw one-sided p about 0.02 hold the every-setting claim (Holm would
    double them past 2.5%); a contradiction is corrected over the settings."""
    hyp = Hypothesis()
    se = 1.0
    effect = t_quantile(1 - 0.02, 14) * se  # raw p 0.02
    rows = verdicts([_est(effect, se), _est(effect, se)], hyp, "each")
    assert [v.verdict for v in rows] == ["holds", "holds"]
    assert rows[0].p_holds == pytest.approx(0.02)
    assert claim_verdict([v.verdict for v in rows]) == "holds"
    against = verdicts([_est(-effect, se), _est(-effect, se)], hyp, "each")
    assert [v.verdict for v in against] == ["inconclusive", "inconclusive"]
    assert against[0].p_contradicted == pytest.approx(0.04) and against[0].adjusted
    # any setting: the mirror image
    some = verdicts([_est(effect, se), _est(effect, se)], hyp, "any")
    assert some[0].verdict == "inconclusive" and some[0].adjusted == "holds"
    assert claim_verdict(["inconclusive", "holds"], "any") == "holds"
    assert claim_verdict(["contradicted", "contradicted"], "any") == "contradicted"
    assert claim_verdict(["contradicted", "inconclusive"], "any") == "inconclusive"


def test_the_average_is_one_test_of_the_mean_contrast():
    parts = [_est(1.0, 0.5, df=14), _est(2.0, 0.5, df=14), _est(3.0, 1.0, df=4)]
    mean = combine(parts, [1 / 3] * 3)
    assert mean.effect == pytest.approx(2.0)
    var = (0.25 + 0.25 + 1.0) / 9
    assert mean.se == pytest.approx(math.sqrt(var))
    satterthwaite = var**2 / ((0.25 / 9) ** 2 / 14 * 2 + (1.0 / 9) ** 2 / 4)
    assert mean.df == math.floor(satterthwaite)
    trend = combine(parts[:2], (-1.0, 1.0))
    assert trend.effect == pytest.approx(1.0) and trend.se == pytest.approx(math.sqrt(0.5))


def test_a_claims_verdict_over_its_settings():
    assert claim_verdict(["holds"] * 9) == "holds"
    assert claim_verdict(["holds"] * 8 + ["contradicted"]) == "contradicted"
    assert claim_verdict(["holds", "inconclusive", "too few seeds"]) == "inconclusive"
    assert claim_verdict(["holds", "failed", "too few seeds"]) == "too few seeds"
    assert claim_verdict(["holds", "failed"]) == "failed" and claim_verdict([]) == "not run"


# --------------------------------------------------------------------------- properties
effects = st.floats(-5, 5, allow_nan=False)
ses = st.floats(0.01, 3, allow_nan=False)
hypotheses = st.builds(
    Hypothesis,
    st.sampled_from(["superiority", "non-inferiority", "equivalence", "stated-gap"]),
    st.sampled_from(["higher", "lower"]),
    st.floats(0.1, 3),
)
rows = st.lists(st.tuples(effects, ses, st.integers(4, 30)), min_size=1, max_size=6)


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


@settings(max_examples=300, deadline=None)
@given(st.tuples(effects, ses, st.integers(4, 30), ses, st.integers(2, 30)), hypotheses)
def test_with_the_pairs_own_test_the_interval_still_decides_and_holding_gets_no_easier(row, hyp):
    effect, se, df, own_se, own_df = row
    est = Estimate(effect, se, df, 3, own_se=own_se, own_df=own_df)
    (v,) = verdicts([est], hyp)
    (alone,) = verdicts([replace(est, own_se=None)], hyp)
    if v.verdict in ("holds", "contradicted"):
        assert alone.verdict == v.verdict  # a second test never makes a side easier to show
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

    def verdict(scale: float) -> str:
        values = {
            f"m{i}": {s: base[s] + (gap if i == 0 else 0.0) + scale * e[s] for s in seeds}
            for i, e in enumerate(noise)
        }
        diffs = [values["m0"][s] - values["m1"][s] for s in seeds]
        residual = two_way_residual(values, seeds)
        return verdicts([contrast(diffs, residual)], hyp)[0].verdict

    wide, narrow = verdict(1.0), verdict(k)
    if wide in ("holds", "contradicted"):
        assert narrow == wide
    if narrow == "inconclusive":
        assert wide == "inconclusive"
