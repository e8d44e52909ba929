"""Whether run keys match a setting the configuration writes (a column's case or ``absent``
setting, a claim's ``where`` value): numbers compare as numbers, so alpha 1 and 1.0 (or a NumPy
integer read back from the aggregate) are the same value."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real


def same_value(a, b) -> bool:
    if isinstance(a, Real) and isinstance(b, Real):
        return float(a) == float(b)
    return a == b


def matches(keys: Mapping, setting: Mapping) -> bool:
    """Each key of ``setting`` but ``variant`` has its value in ``keys``."""
    return all(k in keys and same_value(keys[k], v) for k, v in setting.items() if k != "variant")
