"""fedkd's YAML and JSON readers: the YAML 1.2 core schema, duplicate keys, empty values, integral
floats beyond exact floats, and the depth bound checked before a parser recurses."""

from __future__ import annotations

import json
import math
import re

import pytest

from fedkd.config import RunSpec, SpecError
from fedkd.pipeline import ConfigError
from fedkd.pipeline.config_file import read_config_files
from fedkd.values import MAX_DEPTH, ValueTooLarge, as_number, json_depth, load_json, load_yaml
from test_values import parse_train

DEEP = "[" * 100_000


# ----------------------------------------------------------------------------- the loaders
@pytest.mark.parametrize(
    "text,value",
    [("010", 10), ("0o10", 8), ("0x10", 16), ("1:30", "1:30"), ("yes", "yes"), ("no", "no"),
     ("on", "on"), ("off", "off"), ("-0.0", -0.0), ("1e-5", 1e-5), (".inf", math.inf),
     ("-.inf", -math.inf), ("~", None), ("null", None), ("true", True), ("FALSE", False),
     ("1_000", "1_000"), ("2024-01-02", "2024-01-02"), ("=", "="), ("+12", 12), (".5", 0.5)],
)  # fmt: skip
def test_the_yaml_loader_follows_the_yaml_1_2_core_schema(text, value):
    got = load_yaml(text)
    assert got == value and type(got) is type(value)
    assert load_yaml(f"[{text}]") == [value], "inside a collection too"
    # text read elsewhere (Snakemake's --config, a quoted value) reads the same as a number
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert as_number(text) == value and type(as_number(text)) is type(value)


def test_nan_is_read_as_nan():
    assert math.isnan(load_yaml(".nan")) and math.isnan(as_number(".NaN"))


def test_an_explicit_bool_tag_on_yes_is_refused_not_read_as_true():
    with pytest.raises(ValueError, match="'yes' is not a boolean"):
        load_yaml("!!bool yes")


@pytest.mark.parametrize(
    "text,key,first",
    [
        ("a: 1\nb: 2\na: 3\n", "'a'", 1),
        ("{a: 1, a: 2}", "'a'", 1),
        ("x:\n  1: a\n  1.0: b\n", "1.0", 2),
    ],
)
def test_a_key_given_twice_is_refused_not_read_as_the_last(text, key, first):
    """YAML requires unique keys; PyYAML keeps the last silently (a second ``defaults:`` block
    appended to a config replaced the first whole)."""
    with pytest.raises(
        ValueError, match=f"key {re.escape(key)} is given twice \\(first on line {first}\\)"
    ):
        load_yaml(text)


@pytest.mark.parametrize(
    "argv", [["--grad-clip", ""], ["--set", "grad_clip="], ["--param", "mu= "]]
)
def test_an_empty_value_is_refused_not_read_as_null(argv):
    """YAML reads an empty text as null: --grad-clip '' disabled clipping without a word."""
    with pytest.raises(SpecError, match="is empty; give a value \\(write null for none\\)"):
        parse_train("--strategy", "fedprox", *argv)
    assert parse_train("--grad-clip", "null").grad_clip is None


def test_an_integral_float_beyond_exact_floats_is_refused_not_rounded():
    """12345678901234567.0 is the float 12345678901234568: as a seed it would train another run
    than the one written."""
    assert parse_train("--seed", "9007199254740991.0").seed == 2**53 - 1
    # 2^53 + 1 written reads as the float 2^53: no float from 2^53 on is known to be exact
    with pytest.raises(SpecError, match="must be an integer"):
        parse_train("--seed", "9007199254740993.0")
    with pytest.raises(SpecError, match="seed=1.2345678901234568e\\+16 must be an integer"):
        parse_train("--seed", "12345678901234567.0")
    assert parse_train("--seed", "12345678901234567").seed == 12345678901234567


def test_a_merge_keys_override_is_not_a_duplicate():
    text = "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 5\n"
    assert load_yaml(text)["d"] == {"x": 5, "y": 2}


def test_a_json_key_given_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match="key 'rounds' is given twice"):
        load_json('{"rounds": 1, "rounds": 7}', "the text")
    spec = tmp_path / "s.json"
    spec.write_text('{"strategy": "fedavg", "rounds": 1, "rounds": 7}')
    with pytest.raises(SpecError, match=f"{re.escape(str(spec))}: key 'rounds' is given twice"):
        RunSpec.from_file(spec)
    config = tmp_path / "c.yaml"
    config.write_text("defaults: {rounds: 3}\nseeds: [0]\ndefaults: {rounds: 2}\n")
    with pytest.raises(ConfigError, match="key 'defaults' is given twice \\(first on line 1\\)"):
        read_config_files([config])


@pytest.mark.parametrize("deep", [DEEP, "- " * 100_000 + "x", "{a: " * 100_000])
def test_deep_yaml_is_refused_before_the_parser_recurses(deep):
    with pytest.raises(ValueTooLarge, match=f"the text is nested deeper than {MAX_DEPTH} levels"):
        load_yaml(deep, "the text")


def test_the_depth_bound_is_the_same_for_yaml_json_and_loaded_objects():
    from fedkd.values import check_size

    at_bound, beyond = (
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    )
    assert load_yaml(at_bound) is not None and load_json(at_bound) is not None
    check_size(json.loads(at_bound), "x")
    for read in (load_yaml, load_json):
        with pytest.raises(ValueTooLarge):
            read(beyond)
    with pytest.raises(ValueTooLarge):
        check_size(json.loads(beyond), "x")


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth('{"a": "[[[[[[", "b": ["\\"[", 1]}') == 2
    assert load_json('{"a": "' + "[" * 1000 + '"}') == {"a": "[" * 1000}
    with pytest.raises(ValueTooLarge, match="run.json is nested deeper"):
        load_json(DEEP, "run.json")
