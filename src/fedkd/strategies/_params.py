"""Declared ranges and choices of strategy parameters, checked in one place.

A strategy's ``Params`` dataclass derives from ``CheckedParams`` and declares each number's range
with ``ranged`` and each fixed set of texts with ``chosen``:

    @dataclass
    class FedDistillPlusParams(CheckedParams):
        coef: float = ranged(0.1, at_least(0))
        target: str = chosen("global", {"global": "FedGen's code", "uniform": "..."})

Every range and choice is checked when ``Params`` is built; ``CheckedParams.value_errors`` names
every bad value of a mapping without building it, so ``Strategy.param_value_errors`` refuses a
configuration when it is read or a run planned, before any job starts, rather than inside the
training job. Checks that relate two parameters go into ``check``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from fedkd.values import exact_int


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


def chosen(default: str, choices: dict[str, str]) -> Any:
    """A dataclass field with ``default`` whose value must be one of ``choices``, each named
    with what it selects (``{"current": "the paper", "initial": "the released code"}``)."""
    if default not in choices:
        raise ValueError(f"default {default!r} is not one of its choices {list(choices)}")
    return dataclasses.field(default=default, metadata={"choices": dict(choices)})


class CheckedParams:
    """Base of a strategy's ``Params`` dataclass: a text parameter must be one of its declared
    choices; an integer parameter given a whole float (5.0) holds the int, one with a fraction is
    refused; then every declared range, then ``check``. Every bad value is named at once."""

    def __post_init__(self) -> None:
        errors = []
        for f in dataclasses.fields(self):
            problem, value = _field_problem(f, getattr(self, f.name))
            if problem:
                errors.append(problem)
            elif value is not getattr(self, f.name):
                setattr(self, f.name, value)  # the int a whole float stands for
        if errors:
            raise ValueError("\n".join(errors))
        self.check()

    def check(self) -> None:
        """Checks that relate several parameters; raise ValueError("params.NAME=...")."""

    @classmethod
    def value_errors(cls, values: dict[str, Any]) -> list[str]:
        """Every problem of ``values`` (parameter name → value; a parameter left out takes its
        default) that building the dataclass would refuse, each with its value and what is
        allowed: every field's range or choices, then, if those hold, ``check``. Unknown names
        are ``Strategy.param_errors``'s to name."""
        errors = []
        for f in dataclasses.fields(cls):
            if f.name in values:
                problem, _ = _field_problem(f, values[f.name])
                if problem:
                    errors.append(problem)
        if not errors:
            # a check between parameters reads them all: only once each one is valid, so that a
            # refused value's default standing in for it is not named as a second error
            try:
                cls(**values)
            except ValueError as exc:
                errors.append(str(exc))
        return errors


def _field_problem(f: dataclasses.Field, value: Any) -> tuple[str | None, Any]:
    """What is wrong with ``value`` for the field ``f`` (None: nothing), and the value the field
    holds (a whole float given for an integer becomes the int)."""
    choices = f.metadata.get("choices")
    if choices is not None and isinstance(value, str) and value not in choices:
        listed = ", ".join(f"'{c}' ({meaning})" for c, meaning in choices.items())
        return f"params.{f.name}={value!r}; use one of {listed}", value
    # a value of another type is named by the configuration's type check
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, value
    integer = f.type in (int, "int")
    if integer and isinstance(value, float):
        exact = exact_int(value)
        if not isinstance(exact, int):  # a fraction, or beyond what a float holds exactly
            return (
                f"params.{f.name}={value!r} must be an integer (a float holds integers exactly "
                f"only below 2^53; write it without a decimal point)"
            ), value
        value = exact
    allowed = f.metadata.get("range")
    if allowed is not None and not allowed.holds(value):
        kind = "an integer " if integer else ""
        meaning = f.metadata.get("meaning")
        return (
            f"params.{f.name}={value!r} must be {kind}{allowed}"
            + (f" ({meaning})" if meaning else "")
        ), value
    return None, value


def describe(params_class: type) -> str:
    """Each parameter of a ``Params`` dataclass with its default and, where declared, its range or
    choices: ``mu=0.01 (>= 0), first_negative=none (one of none, global, initial, own-init)``;
    "(none)" for a strategy without parameters."""
    parts = []
    for f in dataclasses.fields(params_class):
        default = "null" if f.default is None else f.default
        allowed = f.metadata.get("range")
        choices = f.metadata.get("choices")
        if choices:
            allowed = "one of " + ", ".join(choices)
        parts.append(f"{f.name}={default}" + (f" ({allowed})" if allowed else ""))
    return ", ".join(parts) or "(none)"
