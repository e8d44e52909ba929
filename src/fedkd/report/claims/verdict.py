"""The verdict on a claim: in each setting, and over the settings the claim covers.

The procedure (docs/pipeline.md, "How the claims are tested", states it in full):

1. Seed-to-seed variance per setting. Runs with the same seed share their data partition and
   client sampling, so a setting's runs form a two-way layout, method × seed, with the seed as
   a block. Its residual mean square (the additive model method + seed, (m − 1)(n − 1) degrees
   of freedom: 14 for 8 methods × 3 seeds) estimates the noise of one run once the partition's
   effect is removed, from *all* methods of the setting, not from the two a claim compares:
   three differences that happen to agree cannot manufacture certainty. With two methods it is
   the paired t-test's variance (var(differences) / 2).
2. Each claim's contrast (treatment − baseline, the mean over seeds of the per-seed
   differences) is tested against that variance (standard error √(2·σ²/n), Student's t with the
   residual's degrees of freedom) and against the pair's own differences (the paired t-test,
   n − 1 degrees of freedom). A side is shown only where both show it (intersection-union), so
   the test's level holds where either the methods' variances are equal or the pair's
   differences normal: alone, the first lets a noisy pair hold on its quiet neighbours'
   variance, the second lets three coincident differences hold. Each side's p is the larger of
   the two, the interval the wider. Each claim is one pre-specified contrast, not a search among
   the setting's m − 1 comparisons with a baseline, so no many-to-one (Dunnett) correction
   applies; a claim against several baselines is several claims that must each hold.
3. The claim's hypothesis (``Hypothesis``) is two one-sided tests at 2.5%, one for the claimed
   region and one for its complement, read off the same 95% t-interval.
4. Over the settings, by what the claim says:
     every setting ("each"): an intersection-union test — it holds when every setting holds at
       2.5%, with no correction (each must pass on its own, so more settings only make holding
       harder); it is contradicted when some setting is shown on the other side, a claim about
       *any* setting, so those p-values are Holm-corrected over the claim's settings.
     on average ("mean"): one test of the mean of the settings' contrasts, whose variance is the
       sum of theirs over k² (the settings' runs are independent), with Welch–Satterthwaite
       degrees of freedom.
     in some setting ("any"): the mirror image — holds with Holm over the settings, contradicted
       when every setting is (intersection-union, no correction).
   A trend (the gap grows from one setting to another) is the difference of two settings'
   contrasts, tested the same way.

A verdict needs ``MIN_SEEDS`` paired seeds and a setting's variance resting on ``MIN_DF`` degrees
of freedom: below that, "too few seeds" (the pair's own test, only ever withholding a verdict
beside it, may rest on fewer). A row missing a seed of its setting (a run without a
defined value, or without its pair) gets no verdict: a claim never holds on a subset of its
seeds. Student's t, its quantiles and the noncentral t come from scipy.stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.95
ALPHA = (1 - LEVEL) / 2  # each one-sided test: the 95% interval's two tails
MIN_SEEDS = 3  # paired seeds a row needs for a verdict
# degrees of freedom the variance needs: with 2 (a lone pair, 3 seeds) the t quantile is 4.30
# and the estimate's own relative sd 71%, so the test's level rests on the normality of three
# numbers (a skewed difference gives it 11% false positives at a nominal 2.5%)
MIN_DF = 4
POWER = 0.8  # "seeds to resolve": the n at which the test has this power
POWER_MIN_SEEDS = 5  # below this a power figure from the observed effect is noise: none given
MAX_SEEDS = 100  # beyond this, "seeds to resolve" is written "> 100"
TESTS = ("superiority", "non-inferiority", "equivalence", "stated-gap")
AGGREGATES = ("each", "mean", "any")
VERDICTS = ("holds", "contradicted", "inconclusive", "too few seeds", "failed", "not run")
# a stated gap g is reproduced when the effect is shown above this share of it (non-inferiority
# to the paper's own gap with margin g/2): a faithful reproduction holds with the power of the
# test against g/2, a tie never does, and the test has one bound, so it is monotone
REPRODUCED_SHARE = 0.5
# a method holding more than this share of a setting's residual sum of squares (with 3 or more
# methods) marks the equal-variance assumption as doubtful there (a collapsed or unstable method)
DOMINANT_SHARE = 0.5


# --------------------------------------------------------------------------- distributions
def t_sf(x: float, df: float) -> float:
    """P(T > x) for Student's t with ``df`` degrees of freedom."""
    return float(stats.t.sf(x, df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    return float(stats.t.ppf(p, df))


def t_power(lam: float, df: float, alpha: float = ALPHA) -> float:
    """The power of a one-sided t-test at level ``alpha``: P(T' > t_{1−α, df}) for T'
    noncentral t with noncentrality ``lam`` (the true distance from the bound over the standard
    error)."""
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, lam))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the same order as given): sorted ascending, the i-th
    smallest (from 0) becomes max over j <= i of min(1, (k − j)·p_(j)). (scipy has no Holm; six
    lines do not earn statsmodels its place.)"""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------- hypotheses
@dataclass(frozen=True)
class Hypothesis:
    """What a claim says about the effect (treatment − baseline): ``test`` against ``margin``
    (>= 0, in the claim's unit), in ``direction`` ("higher": the treatment's values are claimed
    higher; "lower": lower, e.g. fewer rounds). For a stated gap, ``margin`` is the gap g.

        superiority       the effect exceeds +m          ("outperforms", "by more than m")
        non-inferiority   the effect exceeds −m          ("no more benefit" from the other)
        equivalence       the effect lies within ±m      ("comparable")
        stated-gap        the effect exceeds g/2         ("outperforms by 5.6%", "over 2.7%"
                                                          where 2.7 is the paper's own gap)
    """

    test: str = "superiority"
    direction: str = "higher"
    margin: float = 0.0

    def __post_init__(self):
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {self.test!r}")
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"direction must be 'higher' or 'lower', got {self.direction!r}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {self.margin!r}")
        if self.test != "superiority" and self.margin == 0:
            raise ValueError(
                f"a {self.test} claim needs a margin > 0 (the gap it states or tolerates)"
            )

    @property
    def sign(self) -> int:
        return 1 if self.direction == "higher" else -1

    def bounds(self) -> tuple[float, ...]:
        """The effect values (raw, not signed) that separate the claimed region from the rest."""
        m = self.margin
        if self.test == "superiority":
            return (self.sign * m,)
        if self.test == "non-inferiority":
            return (-self.sign * m,)
        if self.test == "stated-gap":
            return (self.sign * m * REPRODUCED_SHARE,)
        return (-m, m)

    def in_region(self, effect: float) -> bool:
        """Whether an effect lies strictly inside the region the tests show (beyond the bound)."""
        if self.test == "equivalence":
            return -self.margin < effect < self.margin
        (bound,) = self.bounds()
        return self.sign * (effect - bound) > 0

    def on_claimed_side(self, effect: float) -> bool:
        """Whether a point (the paper's own mean gap) bears the claim out: in the tested region,
        and for a stated gap at least the gap the paper states (its own measurement, rounded)."""
        if self.test == "stated-gap":
            return self.sign * effect >= self.margin
        return self.in_region(effect)

    def pvalues(self, effect: float, se: float, df: int) -> tuple[float, float]:
        """One-sided p-values (claimed region, its complement) of the t-tests. se = 0 (no spread
        in the whole setting): the limit of the t-test as the spread shrinks, so that less spread
        never weakens a result: p 0 beyond a bound, 1 short of it, 0.5 on it."""

        def above(bound: float) -> float:  # H1: effect > bound
            if se == 0:
                return 0.0 if effect > bound else 1.0 if effect < bound else 0.5
            return t_sf((effect - bound) / se, df)

        def below(bound: float) -> float:  # H1: effect < bound
            if se == 0:
                return 0.0 if effect < bound else 1.0 if effect > bound else 0.5
            return t_sf((bound - effect) / se, df)

        if self.test == "equivalence":
            lo, hi = -self.margin, self.margin
            return max(above(lo), below(hi)), min(below(lo), above(hi))
        (bound,) = self.bounds()
        if self.sign > 0:
            return above(bound), below(bound)
        return below(bound), above(bound)

    def distance(self, effect: float) -> float:
        """How far the effect lies from the nearest bound (what a power computation needs)."""
        return min(abs(effect - b) for b in self.bounds())


# --------------------------------------------------------------------------- the variance
@dataclass(frozen=True)
class Residual:
    """The seed-to-seed variance of one run in a setting: the residual mean square of the
    additive two-way model method + seed, on ``methods`` × ``seeds`` runs."""

    variance: float
    df: int
    methods: int
    seeds: int
    # the check of equal variance across methods: the method with the largest share of the
    # residual sum of squares, and that share (1/methods each if all are alike)
    largest: str = ""
    largest_share: float = 0.0

    @property
    def unequal(self) -> bool:
        """Whether one method holds more than DOMINANT_SHARE of the residual (with 3+ methods):
        the equal-variance assumption is doubtful, and the note says so."""
        return self.methods >= 3 and self.largest_share > DOMINANT_SHARE

    @property
    def text(self) -> str:
        text = (
            f"σ = {math.sqrt(self.variance):.3g} from {self.methods} methods × {self.seeds} "
            f"seeds ({self.df} df)"
        )
        if self.unequal:
            text += (
                f"; {self.largest} holds {self.largest_share:.0%} of the residual, so the "
                "methods' variances look unequal and the test is less trustworthy here"
            )
        return text


def two_way_residual(values: dict[str, dict[int, float]], seeds: Sequence[int]) -> Residual:
    """The residual of the method × seed layout of ``values`` (method -> seed -> value) on
    ``seeds``, from the methods that have a value at every one of them (a complete block)."""
    names = [m for m, v in values.items() if all(s in v for s in seeds)]
    rows = [[float(values[m][s]) for s in seeds] for m in names]
    m, n = len(rows), len(seeds)
    if m < 2 or n < 2:
        return Residual(math.nan, 0, m, n)
    for row in rows:
        if not all(math.isfinite(y) for y in row):
            raise ValueError(f"values must be finite numbers, got {row}")
    grand = math.fsum(map(math.fsum, rows)) / (m * n)
    row_means = [math.fsum(r) / n for r in rows]
    col_means = [math.fsum(r[j] for r in rows) / m for j in range(n)]
    per_method = [
        math.fsum((y - row_means[i] - col_means[j] + grand) ** 2 for j, y in enumerate(r))
        for i, r in enumerate(rows)
    ]
    ss = math.fsum(per_method)
    df = (m - 1) * (n - 1)
    scale = max([1.0] + [abs(y) for r in rows for y in r])
    variance = ss / df
    if variance <= (1e-12 * scale) ** 2:  # equal up to rounding: no spread at all
        return Residual(0.0, df, m, n)
    top = max(range(m), key=per_method.__getitem__)
    return Residual(variance, df, m, n, names[top], per_method[top] / ss)


def pair_residual(diffs: Sequence[float]) -> Residual:
    """The residual of a layout of two methods with these per-seed differences: var(d) / 2."""
    values = {"a": dict(enumerate(diffs)), "b": dict.fromkeys(range(len(diffs)), 0.0)}
    return two_way_residual(values, list(range(len(diffs))))


# --------------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """A contrast: its value, standard error and degrees of freedom; ``n`` the seeds it rests on
    (the fewest of its parts); ``lost``: seeds of its setting(s) without a defined pair, of
    which ``failed`` were lost to runs without a defined value. ``se`` and ``df`` are the
    setting's variance's; ``own_se`` and ``own_df`` the paired t-test's on the two methods' own
    differences, the second test the contrast must pass (None: the estimate is that test)."""

    effect: float
    se: float
    df: int
    n: int
    lost: int = 0
    failed: int = 0
    own_se: float | None = None
    own_df: int = 0

    def tests(self) -> list[tuple[float, int]]:
        """(se, df) of each test the contrast must pass: the setting's variance, then the
        pair's own (where it is a second test)."""
        tests = [(self.se, self.df)]
        if self.own_se is not None and self.own_df >= 1 and not math.isnan(self.own_se):
            tests.append((self.own_se, self.own_df))
        return tests

    def own_is_wider(self) -> bool:
        """Whether the pair's own test gives the wider interval (and so decides)."""
        tests = self.tests()
        return len(tests) == 2 and _half_width(*tests[1]) > _half_width(*tests[0])

    def interval(self) -> tuple[float, float]:
        """The 95% t-interval: with two tests, the wider of theirs (both centred on the effect),
        whose ends decide as both tests together do."""
        if self.df < 1 or math.isnan(self.se):
            return math.nan, math.nan
        half = max(_half_width(se, df) for se, df in self.tests())
        return self.effect - half, self.effect + half


def _half_width(se: float, df: int) -> float:
    return t_quantile(0.5 + LEVEL / 2, df) * se


def contrast(diffs: Sequence[float], residual: Residual | None = None, *, lost: int = 0,
             failed: int = 0) -> Estimate:  # fmt: skip
    """The mean of per-seed differences tested against ``residual`` (the setting's variance)
    and against the differences' own spread (the paired t-test, n − 1 degrees of freedom);
    without a residual, the paired t-test alone."""
    values = [float(d) for d in diffs]
    if any(not math.isfinite(d) for d in values):
        raise ValueError(f"differences must be finite numbers, got {values}")
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, 0, lost, failed)
    own = pair_residual(values)
    mean = math.fsum(values) / n
    if residual is None:
        residual, own = own, None
    if residual.df < 1:
        return Estimate(mean, math.nan, 0, n, lost, failed)
    se = math.sqrt(2 * residual.variance / n)
    if own is None or own.df < 1:
        return Estimate(mean, se, residual.df, n, lost, failed)
    own_se = math.sqrt(2 * own.variance / n)  # var(d) / n: the paired t-test's
    return Estimate(mean, se, residual.df, n, lost, failed, own_se, own.df)


def combine(parts: Sequence[Estimate], weights: Sequence[float]) -> Estimate:
    """Σ wᵢ·effectᵢ of independent estimates: variance Σ wᵢ²·seᵢ², Welch–Satterthwaite degrees
    of freedom (rounded down: the conservative side), for the settings' variances and, where
    some part has one, for the pairs' own (a part without one brings its only test)."""
    if not parts or any(p.n == 0 for p in parts):
        n = min((p.n for p in parts), default=0)
        return Estimate(math.nan, math.nan, 0, n, sum(p.lost for p in parts),
                        sum(p.failed for p in parts))  # fmt: skip
    effect = math.fsum(w * p.effect for p, w in zip(parts, weights, strict=True))
    n = min(p.n for p in parts)
    lost, failed = sum(p.lost for p in parts), sum(p.failed for p in parts)
    if any(p.df < 1 for p in parts):
        return Estimate(effect, math.nan, 0, n, lost, failed)
    se, df = _welch([(p.se, p.df) for p in parts], weights)
    if all(len(p.tests()) == 1 for p in parts):
        return Estimate(effect, se, df, n, lost, failed)
    own_se, own_df = _welch([p.tests()[-1] for p in parts], weights)
    return Estimate(effect, se, df, n, lost, failed, own_se, own_df)


def _welch(tests: Sequence[tuple[float, int]], weights: Sequence[float]) -> tuple[float, int]:
    """The standard error and Welch–Satterthwaite degrees of freedom of Σ wᵢ·effectᵢ."""
    terms = [(w * se) ** 2 for (se, _), w in zip(tests, weights, strict=True)]
    var = math.fsum(terms)
    if var == 0:
        return 0.0, sum(df for _, df in tests)
    denom = math.fsum(t * t / df for t, (_, df) in zip(terms, tests, strict=True))
    return math.sqrt(var), max(1, math.floor(var * var / denom + 1e-9))


# --------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Verdict:
    n: int  # paired seeds
    effect: float  # the contrast treatment − baseline; NaN without seeds
    se: float  # its standard error; NaN without a variance
    df: int  # the variance's degrees of freedom (0: none)
    ci_low: float  # the 95% t-interval of the effect; NaN without a variance
    ci_high: float
    p_holds: float  # one-sided p of the claimed region, as it decides (Holm-adjusted where
    p_contradicted: float  # ``adjusted`` says so); the same for its complement; NaN untested
    verdict: str
    seeds_needed: int | None  # seeds for 80% power (n >= POWER_MIN_SEEDS only); None else
    adjusted: str = ""  # "holds" or "contradicted": the side whose p is Holm-adjusted
    more_seeds: bool = False  # unresolved, and too few seeds for a power figure
    # the paired t-test on the pair's own differences, the second test (NaN, 0: none)
    own_se: float = math.nan
    own_df: int = 0


def _untested_verdict(est: Estimate) -> str:
    if est.failed:
        return "failed"
    return "too few seeds" if est.n or est.lost else "not run"


def _testable(est: Estimate) -> bool:
    return est.n >= MIN_SEEDS and est.df >= MIN_DF and not math.isnan(est.se) and est.lost == 0


def verdicts(estimates: Sequence[Estimate], hyps: Hypothesis | Sequence[Hypothesis],
             aggregate: str = "each") -> list[Verdict]:  # fmt: skip
    """The verdict of each row of one claim (``hyps``: one hypothesis for all rows, or one per
    row). ``aggregate`` "each": the holds side at 2.5% per row (intersection-union), the
    contradicted side Holm-corrected over the tested rows; "any": the reverse; "mean" (rows
    that only describe, the average decides) or a lone row: no correction."""
    if isinstance(hyps, Hypothesis):
        hyps = [hyps] * len(estimates)
    if len(hyps) != len(estimates):
        raise ValueError(f"{len(estimates)} estimates but {len(hyps)} hypotheses")
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
    tested = [i for i, e in enumerate(estimates) if _testable(e)]
    raw = {i: _pvalues(hyps[i], estimates[i]) for i in tested}
    p_for = {i: raw[i][0] for i in tested}
    p_against = {i: raw[i][1] for i in tested}
    adjusted = ""
    if aggregate == "each" and len(tested) > 1:
        p_against = dict(zip(tested, holm([raw[i][1] for i in tested]), strict=True))
        adjusted = "contradicted"
    elif aggregate == "any" and len(tested) > 1:
        p_for = dict(zip(tested, holm([raw[i][0] for i in tested]), strict=True))
        adjusted = "holds"
    out = []
    for i, est in enumerate(estimates):
        low, high = est.interval()
        nan = math.nan
        if i in raw:
            verdict = (
                "holds" if p_for[i] <= ALPHA else "contradicted" if p_against[i] <= ALPHA
                else "inconclusive"
            )  # fmt: skip
            p_h, p_c = p_for[i], p_against[i]
        else:
            verdict, p_h, p_c = _untested_verdict(est), nan, nan
        needed, more = None, False
        if verdict in ("inconclusive", "too few seeds") and est.n:
            if est.n >= POWER_MIN_SEEDS and est.df >= MIN_DF and est.se > 0:
                needed = seeds_to_resolve(hyps[i].distance(est.effect), est)
            else:
                more = True
        tests = est.tests()
        own_se, own_df = tests[1] if len(tests) == 2 else (math.nan, 0)
        out.append(Verdict(est.n, est.effect, est.se, est.df, low, high, p_h, p_c, verdict,
                           needed, adjusted if i in raw else "", more, own_se, own_df))  # fmt: skip
    return out


def _pvalues(hyp: Hypothesis, est: Estimate) -> tuple[float, float]:
    """One-sided p-values (claimed region, its complement) of the contrast's tests together:
    each side is shown when every test shows it (intersection-union), so its p is the largest."""
    ps = [hyp.pvalues(est.effect, se, df) for se, df in est.tests()]
    return max(p[0] for p in ps), max(p[1] for p in ps)


def claim_verdict(verdicts: list[str], aggregate: str = "each") -> str:
    """A claim's verdict from its rows': "each": contradicted if any row is, holds if every one
    does; "any": holds if any row does, contradicted if every one is; else the first of
    inconclusive, too few seeds, failed, not run that some row has."""
    if not verdicts:
        return "not run"
    if aggregate == "any":
        if "holds" in verdicts:
            return "holds"
        if all(v == "contradicted" for v in verdicts):
            return "contradicted"
    else:
        if "contradicted" in verdicts:
            return "contradicted"
        if all(v == "holds" for v in verdicts):
            return "holds"
    return next(v for v in VERDICTS[2:] if v in verdicts)


def seeds_to_resolve(distance: float, est: Estimate, alpha: float = ALPHA) -> int | None:
    """The smallest number of seeds (>= MIN_SEEDS) at which the one-sided test has POWER (80%)
    to tell an effect ``distance`` from the bound, if the observed variance were the truth: the
    standard error shrinks as 1/√n and the degrees of freedom grow with the seeds. MAX_SEEDS + 1
    when even MAX_SEEDS fall short; None where it cannot be said."""
    if not (math.isfinite(distance) and math.isfinite(est.se)) or est.se <= 0 or distance == 0:
        return None
    tests = est.tests()
    if any(se <= 0 for se, _ in tests[1:]):
        tests = tests[:1]  # no spread in the pair: its own test shows any effect

    def power(n: int) -> float:
        """The power of the weaker test at n seeds: each se shrinks as 1/√n, each df grows by
        its own df per seed (m − 1 for the setting's, 1 for the pair's)."""
        return min(
            t_power(
                abs(distance) / (se * math.sqrt(est.n / n)),
                max(1, math.floor(df / max(1, est.n - 1) * (n - 1))),
                alpha,
            )
            for se, df in tests
        )

    if power(MAX_SEEDS) < POWER:
        return MAX_SEEDS + 1
    if power(MIN_SEEDS) >= POWER:
        return MIN_SEEDS
    lo, hi = MIN_SEEDS, MAX_SEEDS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(mid) >= POWER:
            hi = mid
        else:
            lo = mid
    return hi


def paired_verdict(diffs: Sequence[float], direction: str, *, test: str = "superiority",
                   margin: float = 0.0, residual: Residual | None = None,
                   failed: int = 0) -> Verdict:  # fmt: skip
    """The verdict of one setting on its own (no correction)."""
    hyp = Hypothesis(test, direction, margin)
    est = contrast(diffs, residual, lost=failed, failed=failed)
    return verdicts([est], hyp)[0]
