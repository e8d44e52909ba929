"""The setting's seed-to-seed variance beside a claim's verdict: the residual mean square of the
method × seed layout over every method of the setting. It shows how noisy the setting's runs are
beside the pair's own spread, and names a method holding most of it (a collapsed or unstable
method). It decides nothing (``fedkd.report.claims.verdict`` decides on the pair's own runs)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# a method holding more than this share of a setting's residual sum of squares (with 3 or more
# methods) is named in the setting's diagnostic (a collapsed or unstable method)
DOMINANT_SHARE = 0.5


@dataclass(frozen=True)
class Residual:
    """The seed-to-seed variance of one run in a setting, a diagnostic beside the verdict: the
    residual mean square of the additive two-way model method + seed, on ``methods`` × ``seeds``
    runs."""

    variance: float
    df: int
    methods: int
    seeds: int
    # the method with the largest share of the residual sum of squares, and that share
    # (1/methods each if all are alike)
    largest: str = ""
    largest_share: float = 0.0

    @property
    def unequal(self) -> bool:
        """Whether one method holds more than DOMINANT_SHARE of the residual (with 3+ methods)."""
        return self.methods >= 3 and self.largest_share > DOMINANT_SHARE

    @property
    def text(self) -> str:
        text = (
            f"setting σ = {math.sqrt(self.variance):.3g} from {self.methods} methods × "
            f"{self.seeds} seeds ({self.df} df; a diagnostic, not a test)"
        )
        if self.unequal:
            text += (
                f"; {self.largest} holds {self.largest_share:.0%} of the setting's residual (its "
                "runs are the noisiest; the verdict rests on the pair's own differences)"
            )
        return text


def two_way_residual(values: dict[str, dict[int, float]], seeds: Sequence[int]) -> Residual:
    """The residual of the method × seed layout of ``values`` (method -> seed -> value) on
    ``seeds``, from the methods that have a finite value at every one of them (a complete
    block: a bystander's run without one leaves the diagnostic, never the pair's verdict)."""
    names = [
        m for m, v in values.items() if all(s in v and math.isfinite(v[s]) for s in seeds)
    ]  # fmt: skip
    rows = [[float(values[m][s]) for s in seeds] for m in names]
    m, n = len(rows), len(seeds)
    if m < 2 or n < 2:
        return Residual(math.nan, 0, m, n)
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
