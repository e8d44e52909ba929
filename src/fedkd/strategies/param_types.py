"""A strategy's parameters against the types its ``Params`` dataclass declares: numbers read as
their declared type (``mu: 1`` and ``mu: 1.0`` are one run), and each given value checked against
its annotation (plain types, ``Literal`` choices, ``None``). Ranges and choices with their meaning
are ``CheckedParams``' (fedkd.strategies._params); this module reads annotations only, so the
configuration can check a spec without building the strategy."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from fedkd.values import as_float, as_int, is_finite_number, is_int, yaml11_note


@functools.cache  # a strategy's Params are fixed; planning 100,000 runs read them 200,000 times
def _param_types(cls) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls.Params)


def _type_parts(hint) -> tuple[tuple[type, ...], tuple[Any, ...] | None, bool]:
    """(plain types, Literal choices or None, whether None is allowed) of a Params annotation."""
    import types
    import typing

    args = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or (typing.get_origin(hint) is typing.Union)
        else (hint,)
    )
    nullable = type(None) in args
    plain, choices = [], None
    for a in args:
        if a is type(None):
            continue
        if typing.get_origin(a) is typing.Literal:
            choices = typing.get_args(a)
        else:
            plain.append(a)
    return tuple(plain), choices, nullable


def normalise_params(cls, params: dict[str, Any]) -> dict[str, Any]:
    """Strategy parameters as their declared types want them: numbers from text, floats for
    float parameters (``mu: 1`` and ``mu: 1.0`` are one run), ints from integral floats."""
    hints = _param_types(cls)
    out = {}
    for key, value in params.items():
        plain, _, _ = _type_parts(hints[key]) if key in hints else ((), None, False)
        if float in plain:
            value = as_float(value)
        elif int in plain:
            value = as_int(value)
        out[key] = value
    return out


def _type_name(plain, choices, nullable) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}
    parts = [names.get(t, t.__name__) for t in plain]
    if choices:
        parts.append("one of " + ", ".join(map(str, choices)))
    if nullable:
        parts.append("null")
    return " or ".join(parts)


def param_type_errors(cls, params: dict[str, Any]) -> list[str]:
    """Each given strategy parameter against the type its Params dataclass declares."""
    hints = _param_types(cls)
    errors = []
    for key, value in params.items():
        if key not in hints:
            continue  # named by Strategy.param_errors
        plain, choices, nullable = _type_parts(hints[key])
        ok = (
            (value is None and nullable)
            or (choices is not None and value in choices)
            or (bool in plain and isinstance(value, bool))
            or (int in plain and is_int(value))
            or (float in plain and is_finite_number(value))
            or (str in plain and isinstance(value, str))
        )
        if not ok:
            errors.append(
                f"params.{key}={value!r} must be {_type_name(plain, choices, nullable)} "
                f"(strategy {cls.name!r}, e.g. --param {key}={_example(cls, key)})"
                f"{yaml11_note(value)}"
            )
    return errors


def _example(cls, key: str) -> str:
    """The parameter's default as it is written on the command line."""
    default = {f.name: f.default for f in dataclasses.fields(cls.Params)}.get(key)
    return json.dumps(default) if default is None or isinstance(default, bool) else str(default)
