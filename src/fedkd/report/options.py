"""Render options: ``--options`` parsing and typed, checked access to one output's options."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedkd.files import UnreadableFileError, read_regular_file
from fedkd.report.aggregate import ReportError
from fedkd.values import load_json

# an options file holds one target's options: a few kB
MAX_OPTIONS_BYTES = 1 << 20

# Standard deviation over seeds: population (ddof=0), as numpy's default, which is what the FL
# codebases these papers come from print; option "ddof": 1 gives the sample standard deviation.
DEFAULT_DDOF = 0


def load_options(text: str | None) -> dict:
    """``--options``: a JSON object, or ``@path`` to a file holding one."""
    if text is None or text == "":
        return {}
    source = "--options"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"options file {path}"
        try:
            # a FIFO or a device in its place is refused unread (reading one never ends)
            text = read_regular_file(path, "an options file", MAX_OPTIONS_BYTES).decode("utf-8")
        except (OSError, UnreadableFileError, UnicodeDecodeError) as exc:
            raise ReportError(f"{source} cannot be read: {exc}") from exc
    try:
        value = load_json(text, source)
    except ValueError as exc:  # malformed, not UTF-8, or nested deeper than values.MAX_DEPTH
        raise ReportError(f"{source} is not valid JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise ReportError(f"{source} must be a JSON object, got {text!r}")
    return value


def options_taken(allowed: Iterable[str]) -> set[str]:
    """The option names a target takes: its layout's ``allowed`` and those of every target."""
    return set(allowed) | {"caption", "label"}


class Options:
    """Typed access to one target's options; unknown names and bad values raise ReportError."""

    def __init__(self, target: str, values: dict, allowed: Iterable[str]):
        self.target = target
        self.values = dict(values)
        allowed = options_taken(allowed)
        unknown = sorted(set(self.values) - allowed)
        if unknown:
            raise ReportError(
                f"unknown option(s) {unknown} for target {target!r}; "
                f"its options are: {', '.join(sorted(allowed))}"
            )

    def _bad(self, name: str, want: str) -> ReportError:
        return ReportError(
            f"option {name!r} of target {self.target!r} must be {want}, got {self.values[name]!r}"
        )

    def has(self, name: str) -> bool:
        return name in self.values and self.values[name] is not None

    def str_list(self, name: str, default: list[str] | None = None) -> list[str] | None:
        if not self.has(name):
            return default
        v = self.values[name]
        if isinstance(v, str) or not isinstance(v, list) or not v:
            raise self._bad(name, "a non-empty list of strings")
        if not all(isinstance(x, str) for x in v):
            raise self._bad(name, "a non-empty list of strings")
        if len(set(v)) != len(v):
            raise self._bad(name, "a list without repeated entries")
        return list(v)

    def num_list(self, name: str, default: list[float] | None = None, integer=False):
        if not self.has(name):
            return default
        v = self.values[name]
        ok = isinstance(v, list) and v and all(_is_number(x) for x in v)
        if ok and integer:
            ok = all(float(x).is_integer() and x >= 1 for x in v)
        if not ok:
            raise self._bad(
                name, "a non-empty list of positive integers" if integer else "a list of numbers"
            )
        return [int(x) for x in v] if integer else [float(x) for x in v]

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        v = self.values.get(name, default)
        if v not in choices:
            raise self._bad(name, "one of " + ", ".join(repr(c) for c in choices))
        return v

    def boolean(self, name: str, default: bool) -> bool:
        v = self.values.get(name, default)
        if not isinstance(v, bool):
            raise self._bad(name, "true or false")
        return v

    def integer(self, name: str, default: int, lo: int = 0, hi: int | None = None) -> int:
        v = self.values.get(name, default)
        if not _is_number(v) or not float(v).is_integer() or v < lo or (hi is not None and v > hi):
            rng = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
            raise self._bad(name, rng)
        return int(v)

    def number(self, name: str, default: float, lo: float = 0.0) -> float:
        v = self.values.get(name, default)
        if not _is_number(v) or v <= lo:
            raise self._bad(name, f"a number > {lo}")
        return float(v)

    def mapping(self, name: str) -> dict:
        v = self.values.get(name) or {}
        if not isinstance(v, dict):
            raise self._bad(name, "a JSON object")
        return dict(v)

    def text(self, name: str, default: str) -> str:
        v = self.values.get(name, default)
        if not isinstance(v, str):
            raise self._bad(name, "a string")
        return v

    def ddof(self) -> int:
        return self.integer("ddof", DEFAULT_DDOF, 0, 1)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
