"""The values a researcher types: YAML and JSON text read one way, and bounded.

Every source of a value (a flag, ``--set``, ``--param``, a run spec file, the workflow's
configuration) is read by ``load_yaml`` under the YAML 1.2 core schema, the reading JSON, Python
and every current YAML tool share, where PyYAML alone reads YAML 1.1:

==============  ===============  ==================================================
written         read as          YAML 1.1 (PyYAML, Snakemake's loader) read
==============  ===============  ==================================================
``010``         10               8 (octal by a leading zero)
``0o10``        8                the text ``0o10``
``0x10``        16               16
``1:30``        the text         90 (base 60); a number key refuses the text
``yes``/``no``  the text         true/false; a true/false key refuses the text
``on``/``off``  the text         true/false
``1e-5``        0.00001          the text ``1e-5``
``1_000``       the text         1000
``2024-01-02``  the text         a date
``-0.0``        -0.0             -0.0 (a run spec stores and hashes it as 0.0)
``.inf``        infinity         infinity (a run spec refuses it)
``~``, null     null             null
==============  ===============  ==================================================

A document is refused (``ValueTooLarge``, a ValueError) when its aliases expand it beyond
``MAX_NODES`` values or it nests deeper than ``MAX_DEPTH`` levels: an "alias bomb" of a few hundred
bytes expands to gigabytes as soon as anything walks it, and 100,000 ``[`` exhaust the parser's
recursion. ``load_json`` bounds the nesting of JSON (run.json, spec and partition metadata) the same
way before ``json.loads`` recurses into it. ``check_size`` applies the bounds to an object loaded
elsewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import Any

import yaml

from fedkd.echo import shown

MAX_NODES = 100_000  # values in one document once its aliases are expanded
MAX_DEPTH = 50  # nesting levels

# the YAML 1.2 core schema's plain scalars (YAML 1.2.2, section 10.3.2)
NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class ValueTooLarge(ValueError):
    """A document or value whose aliases or nesting exceed the bounds."""


class YAMLValueError(ValueError):
    """Text that is not a YAML value (malformed, or a tag this reader does not construct)."""


def core_int(text: str) -> int:
    """An integer as the YAML 1.2 core schema reads it: decimal (leading zeros included),
    ``0o`` octal or ``0x`` hexadecimal."""
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def core_float(text: str) -> float:
    """A float as the YAML 1.2 core schema reads it (``.inf``, ``-.inf``, ``.nan`` included)."""
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


class _Loader(yaml.SafeLoader):
    """SafeLoader reading plain scalars under the YAML 1.2 core schema (null, true/false,
    decimal, octal ``0o`` and hexadecimal ``0x`` integers, floats in every decimal notation),
    everything else as text, refusing to nest deeper than ``MAX_DEPTH`` levels, and refusing a
    key given twice in one mapping (YAML requires unique keys; PyYAML keeps the last silently).
    A key given by a merge (``<<``) and again in the mapping is the merge's override, not a
    duplicate."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:  # an unhashable key: the base constructor names it
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {shown(key)} is given twice (first on line "
                        f"{first_line[key]}); keep one", key_node.start_mark,
                    )  # fmt: skip
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def compose_node(self, parent, index):
        depth = getattr(self, "_depth", 0) + 1
        if depth > MAX_DEPTH + 1:  # MAX_DEPTH nested collections, then the values they hold
            raise ValueTooLarge(f"is nested deeper than {MAX_DEPTH} levels; flatten it")
        self._depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth - 1


_Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:null", NULL, ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", BOOL, list("tTfF")),
    ("tag:yaml.org,2002:int", INT, list("-+0123456789")),
    ("tag:yaml.org,2002:float", FLOAT, list("-+0123456789.")),
    # merge keys (<<) are not part of YAML 1.2 but read the same in every PyYAML loader
    ("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"]),
):
    _Loader.add_implicit_resolver(_tag, _pattern, _first)


def _construct_bool(loader, node) -> bool:
    text = loader.construct_scalar(node)
    if not BOOL.match(text):  # an explicit !!bool on yes/no/on/off
        raise yaml.constructor.ConstructorError(
            None, None, f"{shown(text)} is not a boolean; write true or false", node.start_mark
        )
    return text.lower() == "true"


def _construct_number(read):
    def construct(loader, node):
        text = loader.construct_scalar(node)
        try:
            return read(text)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown(text)} is not a number", node.start_mark
            ) from None

    return construct


_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_number(core_int))
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_number(core_float))


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line and column of the text)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def load_yaml(text: str, where: str = "the YAML text") -> Any:
    """One YAML document read under the YAML 1.2 core schema (see the module doc).

    Raises ``ValueTooLarge`` (naming ``where``) if it nests deeper than ``MAX_DEPTH`` levels or
    its aliases expand it beyond ``MAX_NODES`` values, and ``YAMLValueError`` (naming ``where``,
    in one line) if it is not YAML; both are ValueErrors. Constructing shares each aliased value
    (no expansion), so the size check runs before anything walks the result."""
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except ValueTooLarge as exc:
        raise ValueTooLarge(f"{where} {exc}") from None
    except yaml.YAMLError as exc:
        raise YAMLValueError(f"{where} is not valid YAML: {yaml_problem(exc)}") from None
    except RecursionError:  # a bound above this one (the interpreter's) was reached first
        raise ValueTooLarge(f"{where} is nested too deeply to read; flatten it") from None
    check_size(value, where)
    return value


# a JSON string (escapes included) or one bracket: the only tokens that decide nesting
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_depth(text: str) -> int:
    """The deepest nesting of brackets in JSON text, outside its strings; a scan that stops at
    ``MAX_DEPTH + 1`` (it needs no recursion, whatever the text)."""
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif token in "]}":
            depth -= 1
    return deepest


# from 2^53 on a float no longer holds every integer: 12345678901234567.0 is ...568, and
# 9007199254740993.0 is 2^53 itself, so 2^53 is no longer known to be the integer written
EXACT_FLOAT_INTS = 2**53


def exact_int(value: Any) -> Any:
    """An integral float as the int it holds exactly (5.0 → 5); a larger one, or anything else,
    unchanged, so that an integer check refuses it rather than rounding to a neighbour."""
    if isinstance(value, float) and value.is_integer() and abs(value) < EXACT_FLOAT_INTS:
        return int(value)
    return value


def load_json(text: str | bytes, where: str = "the JSON text") -> Any:
    """``json.loads`` of ``text`` once its nesting is known to be at most ``MAX_DEPTH`` levels
    (``json.loads`` recurses per level: 100,000 ``[`` raise RecursionError). Raises
    ``ValueTooLarge`` naming ``where``; a malformed text raises ``json.JSONDecodeError`` and
    bytes that are not UTF-8 ``UnicodeDecodeError``, both ValueErrors, as ``json.loads`` does."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if json_depth(text) > MAX_DEPTH:
        raise ValueTooLarge(f"{where} is nested deeper than {MAX_DEPTH} levels; flatten it")
    return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, where))


def _unique_keys(pairs: list[tuple[str, Any]], where: str) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (``json.loads`` keeps the
    last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{where}: key {shown(key)} is given twice in one object; keep one")
        out[key] = value
    return out


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (numbers, true/false, null, lists, mappings); for
    argparse's ``type=``, so a value that cannot be read is a usage error naming the flag."""
    try:
        return load_value(text, f"value {shown(text, 40)}")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ------------------------------------------------------------------ argparse types of flags
def integer(text: str) -> int:
    """An integer flag read like every other value (YAML 1.2: ``010`` is 10, ``1e3`` is 1000,
    ``1:30`` and ``true`` are refused, and so is an integral float from 2^53 on, which is not
    known to be exact); for argparse's ``type=``."""
    value = exact_int(parse_value(text))
    if not (is_finite_number(value) and isinstance(value, int)):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer, e.g. 10")
    return value


def number(text: str) -> float:
    """A finite number flag read like every other value (YAML 1.2: ``1e-5``, ``.5``; ``nan``,
    ``.inf`` and ``1:30`` are refused); for argparse's ``type=``."""
    value = parse_value(text)
    if not is_finite_number(value):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number, e.g. 0.5 or 1e-3")
    return float(value)


def integer_from(low: int, high: int | None = None, high_text: str | None = None):
    """An ``integer`` flag from ``low`` to ``high`` (None: no upper bound; ``high_text``: how the
    message spells it); for argparse's ``type=``, which names the flag in the message."""
    span = f"from {low} to {high_text or high}" if high is not None else f"of at least {low}"

    def bounded(text: str) -> int:
        value = integer(text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{shown(text)} must be an integer {span}")
        return value

    return bounded


def positive_number(text: str) -> float:
    """A finite ``number`` flag above 0 (a duration, a timeout); for argparse's ``type=``."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{shown(text)} must be a number above 0, e.g. 600")
    return value


def load_value(text: str, where: str) -> Any:
    """One value given on the command line, read as YAML; an empty text is refused (YAML reads
    it as null, so ``--grad-clip ''`` would silently disable clipping): null is written out."""
    if not text.strip():
        raise ValueError(f"{where} is empty; give a value (write null for none)")
    return load_yaml(text, where)


def check_size(value: Any, where: str, limit: int = MAX_NODES) -> None:
    """Refuse ``value`` (nested dicts and lists) if it expands to more than ``limit`` values or
    ``MAX_DEPTH`` levels; shared sub-objects (YAML aliases) are counted once each time they
    appear, but measured once, so the check itself costs the size of the document."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(v: Any, depth: int) -> int:  # depth: the collections v is nested in, itself included
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

    size(value, 1)


def as_number(value: Any) -> Any:
    """``value`` as an int or float if it is text that the YAML 1.2 core schema reads as a
    number (text a quoted value, YAML 1.1 or Snakemake's ``--config`` left: ``"1e-5"``,
    ``"010"`` is 10), else unchanged."""
    if isinstance(value, str):
        text = value.strip()
        if INT.match(text):
            return core_int(text)
        if FLOAT.match(text):
            return core_float(text)
    return value


# text that YAML 1.1 (Snakemake's loader, and fedkd before it read YAML 1.2) took for a boolean or
# a base-60 number, and YAML 1.2 leaves as text
_YAML11_BOOLS = {
    spelt for word in ("y", "yes", "n", "no", "on", "off")
    for spelt in (word, word.capitalize(), word.upper())
}  # fmt: skip
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")


def yaml11_note(value: Any) -> str:
    """For text YAML 1.1 read otherwise (``yes``, ``1:30``, ``1_000``): a note for an error
    message saying what to write instead, with a leading space; else ``""``."""
    if not isinstance(value, str):
        return ""
    if value in _YAML11_BOOLS:
        return f" ({value} is text in YAML 1.2, not a boolean)"
    if _SEXAGESIMAL.match(value):
        return f" ({value} is text in YAML 1.2, not a base-60 number: write the number itself)"
    if "_" in value and isinstance(as_number(value.replace("_", "")), (int, float)):
        return f" ({value} is text in YAML 1.2: write the number without _)"
    return ""


def is_int(value: Any) -> bool:
    """An int, never a bool (``True`` is an int to Python, not a count to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """An int or float (never a bool) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_zero(value: Any) -> Any:
    """``value`` with every ``-0.0`` inside it (dicts, lists) made ``0.0``: the two are one number,
    and a spec hashed from its JSON would otherwise tell them apart."""
    if isinstance(value, float):
        return value + 0.0  # -0.0 + 0.0 is 0.0; every other float unchanged
    if isinstance(value, dict):
        return {k: positive_zero(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(positive_zero(v) for v in value)
    return value


def as_float(v: Any) -> Any:
    """A float value as meant: text spelling a number read, an int (never a bool) as a float,
    -0.0 as 0.0 (one number, one spec); anything else unchanged, for validation to name."""
    v = as_number(v)
    if is_int(v):
        return float(v)
    return v + 0.0 if isinstance(v, float) else v


def as_int(v: Any) -> Any:
    """An int value as meant: text spelling a number read, an integral float as an int where
    the float holds it exactly (a larger one stays a float, so the check refuses it)."""
    return exact_int(as_number(v))
