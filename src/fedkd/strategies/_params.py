"""Declared ranges of strategy parameters, checked in one place.

A strategy's ``Params`` dataclass derives from ``CheckedParams`` and declares each number's range
with ``ranged``:

    @dataclass
    class FedProxParams(CheckedParams):
        mu: float = ranged(0.01, at_least(0))

Every range is checked when ``Params`` is built, so ``Strategy.param_value_errors`` names a bad
value when the configuration is read or a run planned, before any job starts, rather than inside
the training job. Checks that relate two parameters go into ``check``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """An interval of the real line; a bound of None is unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "any number"


def at_least(low: float) -> Range:
    return Range(low=low)


def above(low: float) -> Range:
    return Range(low=low, low_open=True)


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low, high, low_open, high_open)


def ranged(default: Any, allowed: Range, meaning: str = "") -> Any:
    """A dataclass field with ``default`` whose value must lie in ``allowed``; ``meaning`` says
    in the error what the bound is for (e.g. "0: no distillation")."""
    return dataclasses.field(default=default, metadata={"range": allowed, "meaning": meaning})


class CheckedParams:
    """Base of a strategy's ``Params`` dataclass: an integer parameter given a whole float (5.0)
    holds the int, one with a fraction is refused; then every declared range, then ``check``."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            allowed = f.metadata.get("range")
            value = getattr(self, f.name)
            # a value of another type is named by the configuration's type check
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            integer = f.type in (int, "int")
            if integer and isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(f"params.{f.name}={value!r} must be an integer")
                value = int(value)
                setattr(self, f.name, value)
            if allowed is not None and not allowed.holds(value):
                kind = "an integer " if integer else ""
                meaning = f.metadata.get("meaning")
                raise ValueError(
                    f"params.{f.name}={value!r} must be {kind}{allowed}"
                    + (f" ({meaning})" if meaning else "")
                )
        self.check()

    def check(self) -> None:
        """Checks that relate several parameters; raise ValueError("params.NAME=...")."""


def describe(params_class: type) -> str:
    """Each parameter of a ``Params`` dataclass with its default and, where declared, its range:
    ``mu=0.01 (>= 0), tau=1.0 (> 0)``; "(none)" for a strategy without parameters."""
    parts = []
    for f in dataclasses.fields(params_class):
        default = "null" if f.default is None else f.default
        allowed = f.metadata.get("range")
        parts.append(f"{f.name}={default}" + (f" ({allowed})" if allowed else ""))
    return ", ".join(parts) or "(none)"
