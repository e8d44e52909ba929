"""Student's t distribution, the power of a one-sided t-test, and Holm's step-down correction:
pure Python (scipy is no dependency), checked against scipy's values where it is installed."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
def t_test_power(n: int, standardized: float, alpha: float = 0.025) -> float:
    """Power of the one-sided one-sample t-test at level ``alpha`` with ``n`` observations when
    the true mean lies ``standardized`` standard deviations beyond the tested bound."""
    if n < 2:
        raise ValueError(f"a t-test needs n >= 2 observations, got {n}")
    return t_power(standardized * math.sqrt(n), n - 1, alpha)


def t_power(lam: float, df: int, alpha: float = 0.025) -> float:
    """P(T' > t_{1−α, df}) for T' noncentral t with ``df`` degrees of freedom and noncentrality
    ``lam`` (the true distance from the bound over the standard error): the power of a one-sided
    t-test. Computed as E[Φ(λ − c·S)] over S = √(χ²_ν/ν) (Simpson's rule on S's density), within
    1e-6 of the exact value for df >= 2."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    nu = int(df)
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
