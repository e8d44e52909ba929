"""The values a researcher types: YAML text read the way it is meant, and bounded.

PyYAML reads YAML 1.1, where a float needs a decimal point and a signed exponent: ``1e-5``,
``5E-4`` and ``1.0e5`` stay strings there, while every other tool (JSON, Python, YAML 1.2) reads
them as numbers. ``load_yaml`` reads them as numbers, and refuses a document whose aliases
expand it beyond ``MAX_NODES`` values or ``MAX_DEPTH`` levels (an "alias bomb" of a few hundred
bytes expands to gigabytes as soon as anything walks it). ``check_size`` applies the same bound to
an object loaded elsewhere (Snakemake reads the workflow's configuration itself).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

# a plain decimal number's mantissa and exponent, in the spellings YAML 1.2, JSON and Python
# accept (1e-5, 5E-4, 1.0e5, .5e3, 1.e-2, .5, 10)
_MANTISSA = r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)"
_EXPONENT = r"[eE][-+]?[0-9]+"
EXPONENT_NUMBER = re.compile(_MANTISSA + _EXPONENT)  # what YAML 1.1 leaves as text
NUMBER = re.compile(f"{_MANTISSA}(?:{_EXPONENT})?")  # any plain decimal number

MAX_NODES = 100_000  # values in one document once its aliases are expanded
MAX_DEPTH = 50  # nesting levels


class ValueTooLarge(ValueError):
    """A document or value whose aliases or nesting exceed the bounds."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads exponent numbers as floats."""


_Loader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(f"^(?:{EXPONENT_NUMBER.pattern})$"), list("-+0123456789.")
)


def load_yaml(text: str, where: str = "the YAML text") -> Any:
    """One YAML document, exponent numbers as floats; ValueTooLarge (naming ``where``) if its
    aliases expand it beyond the bounds. Constructing shares each aliased value (no expansion),
    so the check runs before anything walks the result."""
    value = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    check_size(value, where)
    return value


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (numbers in any notation, true/false, null, lists,
    mappings); for argparse's ``type=``, so a value too large to read is a usage error."""
    import argparse

    try:
        return load_yaml(text, f"value {text[:40]!r}...")
    except ValueTooLarge as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a YAML value: {exc}") from None


def check_size(value: Any, where: str, limit: int = MAX_NODES) -> None:
    """Refuse ``value`` (nested dicts and lists) if it expands to more than ``limit`` values or
    ``MAX_DEPTH`` levels; shared sub-objects (YAML aliases) are counted once each time they
    appear, but measured once, so the check itself costs the size of the document."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(v: Any, depth: int) -> int:
        if not isinstance(v, (dict, list, tuple)):
            return 1
        if depth > MAX_DEPTH:
            raise ValueTooLarge(f"{where} is nested deeper than {MAX_DEPTH} levels; flatten it")
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueTooLarge(f"{where} contains itself (a recursive YAML alias); remove it")
        active.add(key)
        items = [*v.keys(), *v.values()] if isinstance(v, dict) else list(v)
        total = 1 + sum(size(item, depth + 1) for item in items)
        active.discard(key)
        sizes[key] = total
        if total > limit:
            raise ValueTooLarge(
                f"{where} expands to more than {limit:,} values (YAML aliases repeating other "
                "values?); write the values out, without aliases that multiply them"
            )
        return total

    size(value, 0)


def as_number(value: Any) -> Any:
    """``value`` as an int or float if it is text spelling a plain decimal number (``1e-5``,
    ``5E-4``, ``.5``: what YAML 1.1 or a quoted value leaves as text), else unchanged."""
    if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        text = value.strip().replace("_", "")
        return float(text) if any(c in text for c in ".eE") else int(text)
    return value


def is_finite_number(value: Any) -> bool:
    """An int or float (never a bool) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
