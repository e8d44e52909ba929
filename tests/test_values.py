"""Every value is read one way, whatever its source: a `fedkd train` flag, --set, --param, a run
spec file, or the workflow's configuration (which Snakemake reads with its own YAML 1.1 loader and
the workflow reads again). The table below is each notation and the one reading or refusal it
gets; every row is read from every source."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from dataclasses import dataclass

import pytest
import yaml

from fedkd.cli import _spec_from_args, build_parser, main
from fedkd.config import RunSpec, SpecError
from fedkd.pipeline import ConfigError, Plan, validate_config
from fedkd.pipeline.config_file import read_config_files
from fedkd.values import MAX_DEPTH
from planning_checks import SCHEMA, snakemake_dry_run

DEEP = "[" * 100_000


@dataclass(frozen=True)
class Refused:
    """The value is refused with a message matching ``pattern`` (a regular expression)."""

    pattern: str


@dataclass(frozen=True)
class Row:
    text: str  # as written
    key: str  # a run spec key the notation is tried on
    value: object  # its reading there, or Refused
    param: tuple[str, str]  # (strategy, parameter) the notation is tried on
    param_value: object


NOT_YAML = Refused(r"is not valid YAML: .* at line \d+, column \d+")
TOO_DEEP = Refused(f"nested deeper than {MAX_DEPTH} levels")
BUFFER, GAMMA = ("fedgkd", "buffer"), ("fedgkd", "gamma")
TAU_SQUARED, DISTILL_CLIP = ("fedntd", "tau_squared"), ("feddf", "grad_clip")


def bool_refused(key: str, text: str) -> Refused:
    return Refused(rf"{key}\W+'{text}' must be true or false.*\({text} is text in YAML 1\.2")


TABLE = [
    # YAML 1.1 read 010 as 8: the YAML 1.2 core schema, JSON and Python read ten (no reading is
    # its key's default, which a value that never reached the spec would leave)
    Row("020", "rounds", 20, BUFFER, 20),
    Row("010", "seed", 10, BUFFER, 10),
    Row("0o10", "rounds", 8, BUFFER, 8),
    Row("0x10", "rounds", 16, BUFFER, 16),
    # YAML 1.1 read 1:30 as 90 (base 60): text, which a number key refuses
    Row(
        "1:30",
        "rounds",
        Refused(r"rounds\W+'1:30'.* not a base-60 number"),
        BUFFER,
        Refused(r"params\.buffer='1:30' must be an integer.* not a base-60 number"),
    ),  # fmt: skip
    # YAML 1.1 read yes/no/on as booleans: text, which a true/false key refuses
    Row(
        "yes",
        "eval_local",
        bool_refused("eval_local", "yes"),
        TAU_SQUARED,
        bool_refused("params.tau_squared", "yes"),
    ),  # fmt: skip
    Row(
        "no",
        "deterministic",
        bool_refused("deterministic", "no"),
        TAU_SQUARED,
        bool_refused("params.tau_squared", "no"),
    ),  # fmt: skip
    Row(
        "on",
        "eval_local",
        bool_refused("eval_local", "on"),
        TAU_SQUARED,
        bool_refused("params.tau_squared", "on"),
    ),  # fmt: skip
    # and a text key takes them as the text they are
    Row(
        "no",
        "augment",
        Refused(r"augment\W+'no'"),
        TAU_SQUARED,
        bool_refused("params.tau_squared", "no"),
    ),  # fmt: skip
    Row("-0.0", "momentum", 0.0, GAMMA, 0.0),
    Row("2e-5", "weight_decay", 2e-5, GAMMA, 2e-5),
    Row(
        ".inf",
        "lr",
        Refused(r"lr\W+inf must be a finite number"),
        GAMMA,
        Refused(r"params\.gamma=inf must be a number"),
    ),  # fmt: skip
    Row("~", "grad_clip", None, DISTILL_CLIP, None),
    Row("[1, 2", "rounds", NOT_YAML, BUFFER, NOT_YAML),
    Row(DEEP, "rounds", TOO_DEEP, BUFFER, TOO_DEEP),
]
IDS = [f"{row.text[:8]}-{row.key}" for row in TABLE]


def test_no_reading_of_the_table_is_its_keys_default():
    defaults = RunSpec()
    for row in TABLE:
        if not isinstance(row.value, Refused):
            assert getattr(defaults, row.key) != row.value, row


# ----------------------------------------------------------------------------- the sources
def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def parse_train(*argv: str) -> RunSpec:
    """`fedkd train` reading its arguments; argparse's usage error raised as SpecError."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser("train").parse_args(["train", "--out", "x", *argv])
    except SystemExit:
        raise SpecError(err.getvalue().strip().splitlines()[-1]) from None
    return _spec_from_args(args)


def from_flag(key, text, tmp_path):
    return parse_train(flag_name(key), text)


def from_set(key, text, tmp_path):
    return parse_train("--set", f"{key}={text}")


def from_spec_file(key, text, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(f"{key}: {text}\n")
    return RunSpec.from_file(path)


def from_config(key, text, tmp_path, variant_params=""):
    """The workflow's configuration, read as the Snakefile reads it (read_config_files, then
    validate_config), and the run spec it plans for the one run of variant `v`."""
    defaults = f"  {key}: {text}\n" if key and key != "seed" else ""
    seeds = text if key == "seed" else "0"  # a configuration's seeds are a list of their own
    path = tmp_path / "config.yaml"
    base = {"partition": "iid", "alpha": "null", "clients": "4", "rounds": "2"}
    # the key tested replaces its base value (a key given twice is refused)
    base_lines = "".join(f"  {k}: {v}\n" for k, v in base.items() if k != key)
    path.write_text(
        f"name: values\nseeds: [{seeds}]\n" + "defaults:\n" + base_lines + defaults
        + f"variants:\n  v: {{strategy: {variant_params or 'fedavg'}}}\n"
        "tables:\n  t:\n    layout: grid\n    caption: x\n"
        "    grid: {dataset: [mnist5k]}\n    columns: {v: v}\n"
    )  # fmt: skip
    try:
        cfg = read_config_files([path])
        validate_config(cfg, SCHEMA)
    except ConfigError as exc:
        raise SpecError(str(exc)) from None
    plan = Plan(cfg)
    (run,) = plan.all_runs()
    dataset, variant, setting, seed = run.split("/")[2:]
    return RunSpec.from_dict(plan.run_spec(dataset, variant, setting, seed.removeprefix("seed")))


def config_with_param(strategy, key, text, tmp_path):
    return from_config(None, None, tmp_path, f"{strategy}, params: {{{key}: {text}}}")


SOURCES = {"flag": from_flag, "--set": from_set, "spec file": from_spec_file, "config": from_config}
PARAM_SOURCES = {
    "--param": lambda s, k, t, tmp: parse_train("--strategy", s, "--param", f"{k}={t}"),
    "--set params": lambda s, k, t, tmp: parse_train(
        "--set", f"strategy={s}", "--set", f"params={{{k}: {t}}}"
    ),  # fmt: skip
    "spec file": lambda s, k, t, tmp: from_spec_file("params", f"{{{k}: {t}}}\nstrategy: {s}", tmp),
    "config": config_with_param,
}
# where each source's refusal of a malformed or over-deep value says the value came from
NAMED = {
    "flag": lambda key: f"argument {flag_name(key)}: value",
    "--set": lambda key: f"the value of --set {key} ",
    "--param": lambda key: f"the value of --param {key} ",
    "--set params": lambda key: "the value of --set params ",
    "spec file": lambda key: "run spec file ",
    "config": lambda key: "configuration file ",
}


def outcome(read, *args) -> RunSpec | str:
    try:
        return read(*args)
    except SpecError as exc:
        return str(exc)


def check(got, expected, source: str, key: str) -> None:
    if isinstance(expected, Refused):
        assert isinstance(got, str), f"{source}: read as {got!r}, expected a refusal"
        assert re.search(expected.pattern, got), f"{source}: {got!r}"
        if expected in (NOT_YAML, TOO_DEEP):
            assert "\n" not in got, f"{source}: one line, no traceback: {got!r}"
            assert NAMED[source](key) in got, f"{source}: the source is named in {got!r}"
    else:
        assert not isinstance(got, str), f"{source}: refused: {got}"
        assert got == expected and type(got) is type(expected), f"{source}: {got!r}"
        if isinstance(expected, float) and expected == 0:
            assert math.copysign(1.0, got) == 1.0, f"{source}: -0.0 is stored as 0.0"


@pytest.mark.parametrize("row", TABLE, ids=IDS)
@pytest.mark.parametrize("source", SOURCES)
def test_a_spec_key_reads_each_notation_one_way_from_every_source(row, source, tmp_path):
    got = outcome(SOURCES[source], row.key, row.text, tmp_path)
    check(got if isinstance(got, str) else getattr(got, row.key), row.value, source, row.key)


@pytest.mark.parametrize("row", TABLE, ids=IDS)
@pytest.mark.parametrize("source", PARAM_SOURCES)
def test_a_strategy_parameter_reads_each_notation_one_way_from_every_source(row, source, tmp_path):
    strategy, key = row.param
    got = outcome(PARAM_SOURCES[source], strategy, key, row.text, tmp_path)
    check(got if isinstance(got, str) else got.params[key], row.param_value, source, key)


# ----------------------------------------------------------------------------- -0.0, one spec
@pytest.mark.parametrize("source", SOURCES)
def test_minus_zero_is_zero_in_the_spec_and_its_hash(source, tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    minus = SOURCES[source]("momentum", "-0.0", tmp_path / "a")
    zero = SOURCES[source]("momentum", "0.0", tmp_path / "b")
    assert minus.hash() == zero.hash() and minus.to_dict() == zero.to_dict()
    # nested, where no key's type normalises it: an option's value
    assert RunSpec(dataset_options={"x": -0.0}).hash() == RunSpec(dataset_options={"x": 0.0}).hash()


def test_a_run_recorded_with_minus_zero_names_the_key_in_the_conflict(tmp_path):
    """A run recorded before -0.0 and 0.0 were one value kept a hash of -0.0: the refusal names
    the key, not an earlier fedkd."""
    from fedkd.engine.run import Run
    from fedkd.engine.run_outputs import RunConflictError

    spec = RunSpec(momentum=0.0)
    recorded = {**spec.to_dict(), "momentum": -0.0}
    old_hash = spec.hash() + "0"  # any hash other than today's
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"spec": recorded, "spec_hash": old_hash}))
    with pytest.raises(RunConflictError) as err:
        Run(spec, out).run()
    assert "momentum: -0.0 there, 0.0 now" in str(err.value)
    assert "earlier fedkd" not in str(err.value)


# ----------------------------------------------------------------------------- the sources' edges
def test_malformed_and_deep_values_are_one_line_errors_naming_the_flag(capsys, tmp_path):
    for argv, named in [
        (["--set", "params={a: [1"], "--set params"),
        (["--param", "gamma=[1"], "--param gamma"),
        (["--set", f"rounds={DEEP}"], "--set rounds"),
        (["--model-options", DEEP], "argument --model-options"),
    ]:
        with contextlib.suppress(SystemExit):  # argparse's usage error exits 2
            assert main(["train", "--out", str(tmp_path / "x"), *argv]) == 2
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err, err
        assert not (tmp_path / "x").exists()


def test_a_label_is_kept_as_written(tmp_path, monkeypatch):
    """A label is a tag, not a YAML value: the variant named 010 stays '010', and no text is
    malformed."""
    from fedkd import cli

    got = {}

    class FakeRun:
        def __init__(self, spec, out, labels):
            got.update(labels)

        def run(self):
            return {"status": "complete"}

    monkeypatch.setattr("fedkd.engine.run.Run", FakeRun)
    argv = ["train", "--out", str(tmp_path), "--label", "variant=010", "--label", "note=[1, {"]
    assert cli.main(argv) == 0
    assert got == {"variant": "010", "note": "[1, {"}
    assert cli.main(["train", "--out", str(tmp_path), "--label", "novalue"]) == 2


@pytest.mark.parametrize(
    "argv,fragment",
    [(["--clients", "1:30"], "argument --clients: '1:30' is not an integer"),
     (["--clients", "4", "--alpha", ".nan"], "argument --alpha: '.nan' is not a finite number"),
     (["--clients", "4", "--seed", "yes"], "argument --seed: 'yes' is not an integer")],
)  # fmt: skip
def test_fedkd_partition_reads_its_numbers_like_every_other_flag(argv, fragment, capsys):
    parser = build_parser("partition")
    with pytest.raises(SystemExit):
        parser.parse_args(["partition", "--dataset", "mnist5k", "--out", "x", *argv])
    assert fragment in capsys.readouterr().err
    args = parser.parse_args(["partition", "--dataset", "mnist5k", "--out", "x", "--clients",
                              "010", "--seed", "1e1", "--alpha", ".5"])  # fmt: skip
    assert (args.clients, args.seed, args.alpha) == (10, 10, 0.5)


@pytest.mark.parametrize(
    "text,fragment",
    [("[1, 2", "is not valid JSON"), (DEEP, f"nested deeper than {MAX_DEPTH} levels"),
     ('"x"', "must hold a mapping")],
)  # fmt: skip
def test_a_json_spec_file_is_read_with_the_same_bounds(text, fragment, tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=re.escape(fragment)) as err:
        RunSpec.from_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_config_file_that_is_not_yaml_or_too_deep_is_named(tmp_path):
    for text, fragment in [("a: [1", "is not valid YAML"), (DEEP, "nested deeper than")]:
        path = tmp_path / "c.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"configuration file {re.escape(str(path))} "):
            read_config_files([path])
        with pytest.raises(ConfigError, match=fragment):
            read_config_files([path])


def test_the_workflow_and_status_read_a_config_file_with_the_same_bounds(tmp_path):
    """One reader (read_config_file) for the workflow and `fedkd status`: a FIFO is refused
    without being read (reading it would wait for a writer), a file past 1 MiB without being read
    whole, bytes that are not UTF-8 by name; only the words naming the file differ."""

    from fedkd.tools.status import StatusError, _load_config

    fifo, big, latin = tmp_path / "pipe.yaml", tmp_path / "big.yaml", tmp_path / "latin.yaml"
    os.mkfifo(fifo)
    big.write_text("a: " + "1" * (2 << 20))
    latin.write_bytes(b"caption: caf\xe9\n")
    for path, fragment in [(fifo, "is not a regular file"), (big, "is larger than 1,048,576"),
                           (latin, "is not UTF-8 text")]:  # fmt: skip
        with pytest.raises(ConfigError, match=f"configuration file {re.escape(str(path))} "
                           f"{fragment}"):  # fmt: skip
            read_config_files([path])
        with pytest.raises(StatusError, match=f"--configfile {re.escape(str(path))} {fragment}"):
            _load_config(path)


def test_the_config_files_merge_as_snakemake_merges_them_then_config_over_them(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.json"
    first.write_text("defaults: {rounds: 010, lr: 0.1}\nseeds: [1]\n")
    second.write_text(json.dumps({"defaults": {"lr": 0.2}}))
    cfg = read_config_files([first, second], {"seeds": [2], "defaults": {"clients": 7}})
    assert cfg == {"defaults": {"rounds": 10, "lr": 0.2, "clients": 7}, "seeds": [2]}


# ----------------------------------------------------------------------------- through Snakemake
WORKFLOW_CONFIG = """\
name: values
seeds: [010]
defaults: {partition: iid, alpha: null, clients: 4, rounds: 0x10, participation: 0.5}
variants:
  v: {strategy: fedgkd, params: {buffer: 010, gamma: -0.0}}
tables:
  t: {layout: grid, caption: x, grid: {dataset: [mnist5k]}, columns: {v: v}}
"""


def test_the_workflow_plans_the_values_as_fedkd_reads_them(tmp_path):
    """Snakemake's own loader reads seeds [010] as [8]; the workflow plans seed 10, 16 rounds,
    and passes the training job the values `fedkd train` reads."""
    assert yaml.safe_load(WORKFLOW_CONFIG)["seeds"] == [8], "YAML 1.1, as Snakemake reads it"
    proc = snakemake_dry_run(tmp_path, WORKFLOW_CONFIG)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    runs = set(re.findall(r"results/runs/mnist5k/v/\S+/seed\d+", out))
    assert runs and all(r.endswith("/seed10") for r in runs), runs
    assert all(r.split("/")[-2].endswith("-R16") for r in runs), runs


def test_bad_values_in_the_config_fail_the_dry_run_naming_variant_key_value_and_range(tmp_path):
    """Strategy parameter ranges are checked when the workflow plans, not in the training job.
    (A true/false key given yes is refused by the schema: the configuration source of the table
    above.)"""
    text = WORKFLOW_CONFIG.replace(
        "params: {buffer: 010, gamma: -0.0}", "params: {buffer: -1, temperature: 0}"
    )
    proc = snakemake_dry_run(tmp_path, text)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "variant v on mnist5k: params.buffer=-1 must be an integer >= 1" in out
    assert "variant v on mnist5k: params.temperature=0.0 must be > 0" in out
    assert "Building DAG" not in out and not (tmp_path / "results").exists()
