"""The verdict on a claim in one setting, from the per-seed differences of paired runs, and over
the settings of one claim.

Runs with the same seed share their data partition (and client sampling), so the difference
treatment − baseline within a seed removes what the partition does to both; the seeds are
independent draws. The interval is the paired t-interval, mean ± t_{n−1, 0.975} · sd / √n: with the
3–5 seeds a reproduction affords, no rank test or bootstrap can reach 95% (three seeds: a sign
test's smallest one-sided p is 0.125), so t is the one interval there is, and it is wide.

A claim states a hypothesis about the effect (treatment − baseline, signed so that the claimed
direction is positive) against a margin m >= 0 in the claim's unit:

    superiority       the effect exceeds +m          ("outperforms", "by more than 2.7%")
    non-inferiority   the effect exceeds −m          ("no more benefit" from the other method)
    equivalence       the effect lies within ±m      ("comparable")
    stated-gap        above 0 and not below g        ("outperforms FedAvg by 5.6%")

Each is two one-sided t-tests at 2.5% (holds: the claimed region; contradicted: its complement),
so with one setting a verdict is read off the 95% interval: holds when the interval lies inside
the claimed region, contradicted when it lies outside, inconclusive when it spans the margin.
Within a claim the settings' p-values are corrected by Holm's step-down method (each side its
own family), so a claim tested in nine settings does not hold by chance one time in three.

A stated gap is what the authors measured, not a lower bound: as a superiority margin it would
hold for a faithful reproduction (true gap g) only when the noise pushes the whole interval
above g, about one time in forty. So its two one-sided tests are against different bounds:
holds when the effect is shown above 0 and not shown below g; contradicted when it is shown
below g (which includes not beating the baseline at all); inconclusive otherwise. A tie cannot
hold, and a faithful reproduction holds with about the power of the plain test against 0 (less
the 2.5% at most of being shown below g).

Fewer than ``MIN_SEEDS`` valid pairs give no verdict: "too few seeds", or "failed" where runs
were lost to divergence, collapse or a non-finite value.

Every seed giving the same difference (tied 1,000-image accuracies, integer rounds) leaves no
spread to estimate: the t-interval shrinks to the point and would hold with p = 0. Such a row is
decided by the exact sign test instead (p = 0.5^n on the side the value lies, distribution-free):
three equal differences are "too few seeds" (0.125 > 2.5%); six, all beyond the margin, hold.

Pure Python: Student's t and the noncentral t power are computed here (scipy is no dependency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95
ALPHA = (1 - LEVEL) / 2  # each one-sided test: the 95% interval's two tails
MIN_SEEDS = 3  # below this a t-interval rests on one or two spreads: no verdict
POWER = 0.8  # "seeds to resolve": the n at which the test has this power
MAX_SEEDS = 100  # beyond this, "seeds to resolve" is written "> 100"
TESTS = ("superiority", "non-inferiority", "equivalence", "stated-gap")
VERDICTS = ("holds", "contradicted", "inconclusive", "too few seeds", "failed", "not run")
_Z = 1.959963984540054  # the standard normal 0.975 quantile
_EXACT_DF = 2000  # above this the quantile comes from Hill's expansion (error < 1e-9)


# --------------------------------------------------------------------------- Student's t
def t_abs_cdf(x: float, df: int) -> float:
    """P(|T| <= x) for Student's t with integer ``df`` >= 1 (the closed form for integer degrees
    of freedom, Abramowitz & Stegun 26.7.3-4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    theta = math.atan(x / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd
        if df == 1:
            return 2 * theta / math.pi
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):  # 1 + 2/3 c² + (2·4)/(3·5) c⁴ + ...
            term *= c2 * k / (k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0
    for k in range(1, df - 2, 2):  # 1 + 1/2 c² + (1·3)/(2·4) c⁴ + ...
        term *= c2 * k / (k + 1)
        total += term
    return s * total


def t_sf(x: float, df: int) -> float:
    """P(T > x), the upper tail of Student's t with integer ``df``."""
    tail = (1 - t_abs_cdf(abs(x), df)) / 2
    return tail if x >= 0 else 1 - tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with integer ``df``."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must lie in (0.5, 1), got {p}")
    if df > _EXACT_DF:
        return _hill(p, df)
    want = 2 * p - 1  # P(|T| <= q)
    lo, hi = 0.0, 1.0
    while t_abs_cdf(hi, df) < want:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_abs_cdf(mid, df) < want:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return (lo + hi) / 2


def _hill(p: float, df: int) -> float:
    """Cornish-Fisher expansion of the t quantile in 1/df (Hill 1970), for large df."""
    z = _Z if p == 0.975 else _normal_quantile(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _normal_quantile(p: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _normal_cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --------------------------------------------------------------------------- power
def t_test_power(n: int, standardized: float, alpha: float = ALPHA) -> float:
    """Power of the one-sided one-sample t-test at level ``alpha`` with ``n`` observations when
    the true mean lies ``standardized`` standard deviations beyond the tested bound: P(T' >
    t_{1−α, n−1}) for T' noncentral t with n − 1 degrees of freedom and noncentrality
    standardized·√n. Computed as E[Φ(λ − c·S)] over S = √(χ²_ν/ν) (Simpson's rule on S's
    density), within 1e-6 of the exact value for n >= 3."""
    if n < 2:
        raise ValueError(f"a t-test needs n >= 2 observations, got {n}")
    nu = n - 1
    lam = standardized * math.sqrt(n)
    c = t_quantile(1 - alpha, nu)
    log_norm = math.log(2) + (nu / 2) * math.log(nu / 2) - math.lgamma(nu / 2)
    width = 12 / math.sqrt(2 * nu)
    lo, hi = max(0.0, 1 - width), 1 + width if nu > 1 else 12.0
    steps = 600  # even

    def integrand(s: float) -> float:
        if s <= 0:
            density = math.exp(log_norm) if nu == 1 else 0.0
        else:
            density = math.exp(log_norm + (nu - 1) * math.log(s) - nu * s * s / 2)
        return density * _normal_cdf(lam - c * s)

    h = (hi - lo) / steps
    total = integrand(lo) + integrand(hi)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * integrand(lo + i * h)
    return min(1.0, max(0.0, total * h / 3))


def seeds_to_resolve(distance: float, sd: float, alpha: float = ALPHA) -> int | None:
    """The smallest n (>= MIN_SEEDS) at which a one-sided t-test at level ``alpha`` has POWER
    (80%) to tell an effect ``distance`` away from the tested bound, at standard deviation
    ``sd`` (the observed values plugged in as if true: a planning figure, not a promise).
    MAX_SEEDS + 1 when even MAX_SEEDS seeds fall short; None when it cannot be said (no
    spread observed, or the effect sits on the bound)."""
    if not (math.isfinite(distance) and math.isfinite(sd)) or sd <= 0 or distance == 0:
        return None
    d = abs(distance) / sd
    if t_test_power(MAX_SEEDS, d, alpha) < POWER:
        return MAX_SEEDS + 1
    if t_test_power(MIN_SEEDS, d, alpha) >= POWER:
        return MIN_SEEDS
    lo, hi = MIN_SEEDS, MAX_SEEDS  # power(lo) < POWER <= power(hi); power grows with n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if t_test_power(mid, d, alpha) >= POWER:
            hi = mid
        else:
            lo = mid
    return hi


def sign_test_seeds(alpha: float = ALPHA) -> int:
    """The fewest seeds (>= MIN_SEEDS) at which differences all on one side reach one-sided
    level ``alpha`` in the sign test (p = 0.5^n): 6 at 2.5%. Where every seed agrees exactly, the
    sign test is the test there is, and this is the n it needs."""
    return max(MIN_SEEDS, math.ceil(math.log2(1 / alpha) - 1e-12))


# --------------------------------------------------------------------------- hypotheses
@dataclass(frozen=True)
class Hypothesis:
    """What a claim says about the effect (treatment − baseline): ``test`` against ``margin``
    (>= 0, in the claim's unit), in ``direction`` ("higher": the treatment's values are claimed
    higher; "lower": lower, e.g. fewer rounds). For a stated gap, ``margin`` is the gap g."""

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
            return (0.0, self.sign * m)
        return (-m, m)

    def on_claimed_side(self, effect: float) -> bool:
        """Whether an effect (a point, e.g. a paper's mean gap) lies in the claimed region. A
        point has no spread, so for a stated gap "not shown below g" is "not below g"."""
        e = self.sign * effect
        if self.test == "superiority":
            return e > self.margin
        if self.test == "stated-gap":
            return e >= self.margin
        if self.test == "non-inferiority":
            return e > -self.margin
        return -self.margin < effect < self.margin

    def pvalues(self, mean: float, se: float, df: int) -> tuple[float, float]:
        """One-sided p-values (claimed region, its complement) of the t-tests. se = 0: every
        difference is the same, so no spread is known and the t-test does not apply (it would
        give p = 0); the exact sign test does: p = 0.5^n where that value lies beyond the bound,
        else 1."""
        sign_p = 0.5 ** (df + 1)

        def above(bound: float) -> float:  # H1: effect > bound
            if se == 0:
                return sign_p if mean > bound else 1.0
            return t_sf((mean - bound) / se, df)

        def below(bound: float) -> float:  # H1: effect < bound
            if se == 0:
                return sign_p if mean < bound else 1.0
            return t_sf((bound - mean) / se, df)

        if self.test == "equivalence":
            lo, hi = -self.margin, self.margin
            return max(above(lo), below(hi)), min(below(lo), above(hi))
        if self.test == "stated-gap":
            # holds: beyond 0 in the claimed direction; contradicted: short of the gap
            zero, gap = self.bounds()
            if self.sign > 0:
                return above(zero), below(gap)
            return below(zero), above(gap)
        (bound,) = self.bounds()
        if self.sign > 0:
            return above(bound), below(bound)
        return below(bound), above(bound)

    def distance(self, effect: float) -> float:
        """How far the effect lies from the bound whose test would settle the row (what a power
        computation needs): the nearest one; for a stated gap the farther one, as either of its
        two tests gives a verdict and the one against the farther bound gets there first."""
        if self.test == "stated-gap":
            return max(abs(effect - b) for b in self.bounds())
        return min(abs(effect - b) for b in self.bounds())


# --------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Sample:
    """One row's per-seed differences, and how many seeds were lost to failed runs (diverged,
    collapsed, non-finite)."""

    diffs: tuple[float, ...]
    failed: int = 0


@dataclass(frozen=True)
class Verdict:
    n: int  # valid paired seeds
    effect: float  # mean of the per-seed differences (treatment − baseline); NaN without seeds
    sd: float  # their sample standard deviation (ddof 1); NaN below two seeds
    ci_low: float  # the 95% paired t-interval of the effect (uncorrected); NaN below two seeds
    ci_high: float
    p_holds: float  # Holm-adjusted one-sided p of the claimed region; NaN without a test
    p_contradicted: float  # the same for its complement
    verdict: str
    seeds_needed: int | None  # seeds for 80% power at the observed effect and spread (see
    # seeds_to_resolve); None where it cannot be said or the row is resolved


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the same order as given): sorted ascending, the i-th
    smallest (from 0) becomes max over j <= i of min(1, (k − j)·p_(j))."""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def family_verdicts(
    samples: Sequence[Sample], hyps: Hypothesis | Sequence[Hypothesis]
) -> list[Verdict]:
    """The verdict of each row of one claim (``hyps``: one hypothesis for all rows, or one per
    row where the margin differs): rows with at least MIN_SEEDS valid seeds are tested (their
    p-values corrected together by Holm, each side its own family); the others are "too few
    seeds", or "failed" where failed runs took the seeds, or "not run" without any. A row shown
    on both sides (a stated gap's effect above 0 and below g) is contradicted: it fell short."""
    if isinstance(hyps, Hypothesis):
        hyps = [hyps] * len(samples)
    if len(hyps) != len(samples):
        raise ValueError(f"{len(samples)} samples but {len(hyps)} hypotheses")
    stats = [_describe(s) for s in samples]
    tested = [i for i, s in enumerate(samples) if len(s.diffs) >= MIN_SEEDS]
    raw = {i: hyps[i].pvalues(stats[i][0], stats[i][1] / math.sqrt(len(samples[i].diffs)),
                              len(samples[i].diffs) - 1) for i in tested}  # fmt: skip
    hold = dict(zip(tested, holm([raw[i][0] for i in tested]), strict=True))
    contra = dict(zip(tested, holm([raw[i][1] for i in tested]), strict=True))
    family = max(1, len(tested), sum(1 for s in samples if s.diffs))
    out = []
    for i, sample in enumerate(samples):
        n = len(sample.diffs)
        effect, sd, low, high = stats[i]
        nan = math.nan
        if i in hold:
            verdict = (
                "contradicted" if contra[i] <= ALPHA else "holds" if hold[i] <= ALPHA
                else "inconclusive"
            )  # fmt: skip
            p_h, p_c = hold[i], contra[i]
        else:
            verdict = "failed" if sample.failed else "too few seeds" if n else "not run"
            p_h = p_c = nan
        needed = None
        off_bounds = n > 0 and hyps[i].distance(effect) > 0
        if verdict == "inconclusive" and sd == 0 and off_bounds:
            # every seed on one side, but too few for the sign test to tell
            verdict = "too few seeds"
        if verdict in ("inconclusive", "too few seeds", "failed") and n >= 2:
            # the strictest of Holm's steps (α/k): enough seeds for every row of the claim
            if sd == 0:
                needed = sign_test_seeds(ALPHA / family) if off_bounds else None
            else:
                needed = seeds_to_resolve(hyps[i].distance(effect), sd, ALPHA / family)
        out.append(Verdict(n, effect, sd, low, high, p_h, p_c, verdict, needed))
    return out


def paired_verdict(
    diffs: Sequence[float], direction: str, *, test: str = "superiority", margin: float = 0.0,
    failed: int = 0,
) -> Verdict:  # fmt: skip
    """The verdict of one setting on its own (a family of one: no correction)."""
    hyp = Hypothesis(test, direction, margin)
    return family_verdicts([Sample(tuple(diffs), failed)], hyp)[0]


def _describe(sample: Sample) -> tuple[float, float, float, float]:
    """(mean, sd, interval low, interval high) of the differences; NaN where undefined."""
    values = [float(d) for d in sample.diffs]
    if any(not math.isfinite(d) for d in values):
        raise ValueError(f"differences must be finite numbers, got {values}")
    n, nan = len(values), math.nan
    if n == 0:
        return nan, nan, nan, nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, nan, nan, nan
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in values) / (n - 1))
    if sd <= 1e-12 * max(1.0, abs(mean)):  # equal up to rounding: no spread at all
        sd = 0.0
    half = t_quantile(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half
