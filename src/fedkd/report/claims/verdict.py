"""The verdict on one claim in one setting, from the per-seed differences of paired runs.

Runs with the same seed share their data partition (and client sampling), so the difference
treatment − baseline within a seed removes what the partition does to both; the seeds are
independent draws. The interval is the paired t-interval, mean ± t_{n−1, 0.975} · sd / √n: with the
2–3 seeds a reproduction affords, no rank test or bootstrap can reach 95% at all (two seeds: a sign
test's smallest two-sided p is 0.5), so t is the one interval there is, and it is wide.

Pure Python: Student's t quantile is computed here (scipy is no dependency of fedkd).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95
VERDICTS = ("holds", "contradicted", "inconclusive", "not run")
_Z = 1.959963984540054  # the standard normal 0.975 quantile
_EXACT_DF = 2000  # above this the quantile comes from Hill's expansion (error < 1e-9)


def t_abs_cdf(x: float, df: int) -> float:
    """P(|T| <= x) for Student's t with integer ``df`` >= 1 (the closed form for integer degrees
    of freedom, Abramowitz & Stegun 26.7.3-4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    if x <= 0:
        return 0.0
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


def _normal_quantile(p: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class Verdict:
    n: int  # paired seeds
    effect: float  # mean of the per-seed differences (treatment − baseline)
    sd: float  # their sample standard deviation (ddof 1); NaN below two seeds
    ci_low: float
    ci_high: float
    verdict: str
    seeds_needed: int | None  # the smallest n whose interval would exclude 0 at this sd and effect


def paired_verdict(diffs: Sequence[float], direction: str) -> Verdict:
    """Verdict from per-seed differences treatment − baseline; ``direction`` is the claimed sign:
    "higher" (> 0) or "lower" (< 0). holds: the 95% interval lies entirely on the claimed side of
    0; contradicted: entirely on the other; inconclusive: it contains 0, or there is one seed (no
    interval); not run: no pair."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
    values = [float(d) for d in diffs]
    if any(not math.isfinite(d) for d in values):
        raise ValueError(f"differences must be finite numbers, got {values}")
    n = len(values)
    nan = math.nan
    if n == 0:
        return Verdict(0, nan, nan, nan, nan, "not run", None)
    effect = sum(values) / n
    if n == 1:
        return Verdict(1, effect, nan, nan, nan, "inconclusive", None)
    sd = math.sqrt(sum((d - effect) ** 2 for d in values) / (n - 1))
    half = t_quantile(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
    low, high = effect - half, effect + half
    above, below = low > 0, high < 0
    if direction == "lower":
        above, below = below, above
    verdict = "holds" if above else "contradicted" if below else "inconclusive"
    return Verdict(n, effect, sd, low, high, verdict, seeds_needed(effect, sd))


def seeds_needed(effect: float, sd: float, cap: int = 1_000_000) -> int | None:
    """The smallest n >= 2 with t_{n−1, 0.975} · sd / √n < |effect|: how many seeds would put the
    interval clear of 0 if the effect and the spread stayed as observed. None when no n up to
    ``cap`` does (a zero effect never does)."""
    if not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0:
        return None
    if sd == 0:
        return 2
    q = 0.5 + LEVEL / 2
    # t > z, so n >= (z·sd/|effect|)²: start there and walk up
    n = max(2, math.floor((_Z * sd / abs(effect)) ** 2))
    while n <= cap:
        if t_quantile(q, n - 1) * sd / math.sqrt(n) < abs(effect):
            return n
        n += 1
    return None
