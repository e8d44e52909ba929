"""Run-spec validation: every bad value is refused with a message naming the key and the value."""

import pytest

from fedkd.config import RunSpec, SpecError, parse_override


def test_defaults_are_valid_and_hash_is_stable():
    a, b = RunSpec(), RunSpec()
    assert a.hash() == b.hash()
    assert RunSpec(seed=1).hash() != a.hash()
    assert RunSpec(device="cpu").hash() == a.hash(), "the device does not change a run's identity"


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("dataset", "imagenet", "dataset='imagenet'"),
        ("strategy", "fedfoo", "strategy='fedfoo'"),
        ("partition", "random", "partition='random'"),
        ("alpha", 0, "alpha=0"),
        ("alpha", -1.0, "alpha=-1.0"),
        ("participation", 0, "participation=0"),
        ("participation", 1.5, "participation=1.5"),
        ("clients", 0, "clients=0"),
        ("rounds", 0, "rounds=0"),
        ("lr", -0.1, "lr=-0.1"),
        ("device", "tpu", "device='tpu'"),
    ],
)
def test_bad_values_are_named(key, value, fragment):
    with pytest.raises(SpecError) as err:
        RunSpec(**{key: value})
    assert fragment in str(err.value)


def test_all_errors_reported_at_once():
    with pytest.raises(SpecError) as err:
        RunSpec(alpha=0, participation=2.0, rounds=-1)
    msg = str(err.value)
    assert "alpha=0" in msg and "participation=2.0" in msg and "rounds=-1" in msg


def test_unknown_key_and_unknown_strategy_param():
    with pytest.raises(SpecError, match="'roundz' \\(did you mean 'rounds'\\?\\)"):
        RunSpec.from_dict({"roundz": 3})
    with pytest.raises(SpecError, match="params.gamma"):
        RunSpec(strategy="fedavg", params={"gamma": 0.1})


def test_shards_needs_shards_per_client():
    with pytest.raises(SpecError, match="shards=None"):
        RunSpec(partition="shards", alpha=None)
    RunSpec(partition="shards", alpha=None, shards=2)
    with pytest.raises(SpecError, match="shards=2000000 is more than 1,000,000"):
        RunSpec(partition="shards", shards=2_000_000)  # a slip of the exponent


def test_spec_file_and_overrides(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("dataset: mnist5k\nrounds: 3\nstrategy: fedprox\nparams: {mu: 0.1}\n")
    spec = RunSpec.from_file(f, {"rounds": 5})
    assert spec.rounds == 5 and spec.params == {"mu": 0.1}
    assert parse_override("alpha=0.5") == ("alpha", 0.5)
    assert parse_override("grad_clip=null") == ("grad_clip", None)
    with pytest.raises(SpecError, match="key=value"):
        parse_override("alpha")
    with pytest.raises(SpecError, match="does not exist"):
        RunSpec.from_file(tmp_path / "missing.yaml")


# ----------------------------------------------------------------------------- typed values
import json  # noqa: E402
import math  # noqa: E402

from fedkd.cli import _spec_from_args, build_parser, main  # noqa: E402
from fedkd.config import FLOAT_KEYS, INT_KEYS, NULLABLE  # noqa: E402
from fedkd.values import ValueTooLarge, load_yaml  # noqa: E402


def spec_of_flags(*argv: str) -> RunSpec:
    return _spec_from_args(build_parser("train").parse_args(["train", "--out", "x", *argv]))


def flag(key: str) -> str:
    return f"--{key.replace('_', '-')}"


# each nullable key with what else the spec needs for null to be valid there
NULL_NEEDS = {"alpha": {"partition": "iid"}}


def test_the_nullable_keys_are_exactly_the_optional_fields():
    import dataclasses
    import typing

    hints = typing.get_type_hints(RunSpec)
    optional = {
        f.name for f in dataclasses.fields(RunSpec) if type(None) in typing.get_args(hints[f.name])
    }
    assert optional == set(NULLABLE)


@pytest.mark.parametrize("key", sorted(NULLABLE))
def test_null_reaches_the_spec_from_every_source(key, tmp_path):
    needs = NULL_NEEDS.get(key, {})
    extra = [a for k, v in needs.items() for a in (flag(k), v)]
    assert getattr(spec_of_flags(*extra, flag(key), "null"), key) is None, "a flag"
    assert getattr(spec_of_flags(*extra, "--set", f"{key}=null"), key) is None, "--set"
    f = tmp_path / "spec.yaml"
    f.write_text("".join(f"{k}: {v}\n" for k, v in needs.items()) + f"{key}: null\n")
    assert getattr(RunSpec.from_file(f), key) is None, "a YAML spec file"
    j = tmp_path / "spec.json"
    j.write_text(json.dumps({**needs, key: None}))
    assert getattr(RunSpec.from_file(j), key) is None, "a JSON spec file"


def test_an_absent_flag_keeps_the_default_and_a_given_one_overrides_the_file(tmp_path):
    assert spec_of_flags().grad_clip == 10.0
    f = tmp_path / "spec.yaml"
    f.write_text("grad_clip: 5.0\n")
    args = build_parser("train").parse_args(["train", str(f), "--out", "x", "--grad-clip", "null"])
    assert _spec_from_args(args).grad_clip is None


def tiny_digits():
    """128 random 28x28 "digits" of 2 classes: a run of a second on any CPU."""
    import torch

    from fedkd.data.base import ArraySplit, FedDataset

    g = torch.Generator().manual_seed(0)

    def split(n):
        x = torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
        return ArraySplit(x, torch.arange(n) % 2)

    return FedDataset(
        "mnist5k", "image", 2, split(128), split(16), split(32), mean=(0.5,), std=(0.5,)
    )


def test_grad_clip_null_trains_without_clipping_and_records_null(tmp_path, monkeypatch):
    import torch

    import fedkd.engine.run_setup as run_setup

    monkeypatch.setattr(run_setup, "load_dataset", lambda *a, **k: tiny_digits())
    calls = []
    real = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(
        torch.nn.utils, "clip_grad_norm_", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    argv = [
        "train", "--dataset", "mnist5k", "--clients", "2", "--participation", "0.5",
        "--local-epochs", "1", "--rounds", "1", "--engine", "sequential", "--device", "cpu",
        "--model-options", "{channels: [4, 8], hidden: 16}", "--batch-size", "32",
    ]  # fmt: skip
    assert main([*argv, "--grad-clip", "null", "--out", str(tmp_path / "off")]) == 0
    record = json.loads((tmp_path / "off" / "run.json").read_text())
    assert record["spec"]["grad_clip"] is None and not calls, "no clipping, null recorded"
    # 5, not the default 10: the record shows the value given
    assert main([*argv, "--grad-clip", "5e0", "--out", str(tmp_path / "on")]) == 0
    assert json.loads((tmp_path / "on" / "run.json").read_text())["spec"]["grad_clip"] == 5.0
    assert calls, "the same run with a clip value clips"


# a number written the ways researchers write it, and the value each means: no key's default,
# so a value that never reached the spec cannot pass for one read right
NOTATIONS = {"5e-1": 0.5, "5E-1": 0.5, ".5": 0.5, "5.0e-1": 0.5, "50e-2": 0.5, "0.5": 0.5}
INT_NOTATIONS = {"2e1": 20, "2E1": 20, "2.0e1": 20, "20": 20, "20.0": 20}


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("text", sorted(NOTATIONS))
def test_float_keys_read_every_notation_from_every_source(key, text, tmp_path):
    value = NOTATIONS[text]
    assert getattr(RunSpec(), key) != value
    assert getattr(spec_of_flags(flag(key), text), key) == value
    assert getattr(spec_of_flags("--set", f"{key}={text}"), key) == value
    f = tmp_path / "spec.yaml"
    f.write_text(f"{key}: {text}\n")
    assert getattr(RunSpec.from_file(f), key) == value
    assert getattr(RunSpec(**{key: text}), key) == value  # quoted text, e.g. from another tool
    assert type(getattr(spec_of_flags(flag(key), text), key)) is float


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("text", sorted(INT_NOTATIONS))
def test_int_keys_read_every_notation_from_every_source(key, text, tmp_path):
    needs = {"shards": ["--partition", "shards"]}.get(key, [])
    assert getattr(RunSpec(), key) != 20
    got = getattr(spec_of_flags(*needs, flag(key), text), key)
    assert got == 20 and type(got) is int
    assert getattr(spec_of_flags(*needs, "--set", f"{key}={text}"), key) == 20
    f = tmp_path / "spec.yaml"
    f.write_text(("partition: shards\n" if needs else "") + f"{key}: {text}\n")
    assert getattr(RunSpec.from_file(f), key) == 20


def test_param_sets_one_parameter_and_keeps_the_others(tmp_path):
    """--param changes the parameter it names; the others keep the values the spec file or
    --params gave (it replaced the whole mapping: buffer 3 in the file trained as 5)."""
    spec_file = tmp_path / "gkd.yaml"
    spec_file.write_text("strategy: fedgkd\nparams: {buffer: 3, gamma: 0.3}\n")
    spec = spec_of_flags(str(spec_file), "--param", "gamma=0.1")
    assert spec.params == {"buffer": 3, "gamma": 0.1}
    flags = ("--strategy", "fedgkd", "--params", "{buffer: 3}", "--param", "gamma=0.1")
    assert spec_of_flags(*flags).params == {"buffer": 3, "gamma": 0.1}
    # --params replaces the file's mapping whole, then --param adds to it
    spec = spec_of_flags(str(spec_file), "--params", "{buffer: 2}", "--param", "gamma=0.1")
    assert spec.params == {"buffer": 2, "gamma": 0.1}
    spec_file.write_text("strategy: fedgkd\nparams: [3]\n")
    with pytest.raises(SpecError, match="params of run spec file .* is \\[3\\], not a mapping"):
        spec_of_flags(str(spec_file), "--param", "gamma=0.1")


def test_weight_decay_1e_minus_5_is_accepted_as_1e_minus_5(tmp_path):
    # over a spec file's 0.5: 1e-5 is also the default, which a dropped flag would leave
    f = tmp_path / "spec.yaml"
    f.write_text("weight_decay: 0.5\n")
    assert spec_of_flags(str(f), "--weight-decay", "1e-5").weight_decay == 1e-5
    assert spec_of_flags("--lr", "5E-4").lr == 5e-4


def test_strategy_params_read_every_notation_and_their_declared_type():
    assert spec_of_flags("--strategy", "fedprox", "--param", "mu=1e-2").params == {"mu": 0.01}
    spec = spec_of_flags("--strategy", "fedgen", "--params", "{gen_lr: 1e-4, gen_steps: 5e1}")
    assert spec.params == {"gen_lr": 1e-4, "gen_steps": 50}
    assert type(spec.params["gen_steps"]) is int
    # mu 1 and mu 1.0 are one run
    one = RunSpec(strategy="fedprox", params={"mu": 1})
    assert (
        one.params == {"mu": 1.0}
        and one.hash() == RunSpec(strategy="fedprox", params={"mu": 1.0}).hash()
    )


@pytest.mark.parametrize("key", ["alpha", "lr", "weight_decay", "grad_clip"])
def test_a_float_key_given_an_integer_holds_a_float(key):
    assert getattr(RunSpec(), key) != 3.0  # a dropped flag would keep the default
    spec = spec_of_flags(flag(key), "3")
    assert getattr(spec, key) == 3.0 and type(getattr(spec, key)) is float


def test_the_same_number_spelt_twice_is_one_spec():
    # values other than the defaults (alpha 1.0, lr 0.05), which two dropped flags would share
    assert spec_of_flags("--alpha", "2").hash() == spec_of_flags("--alpha", "2.0").hash()
    assert spec_of_flags("--alpha", "2").alpha == 2.0
    assert spec_of_flags("--alpha", "2").hash() != RunSpec().hash()
    assert spec_of_flags("--lr", "5e-3").hash() == spec_of_flags("--lr", "0.005").hash()
    assert spec_of_flags("--lr", "5e-3").hash() != RunSpec().hash()


# ----------------------------------------------------------------------------- refused values
@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_refused_for_every_float_key(key, bad):
    with pytest.raises(SpecError) as err:
        RunSpec(**{key: bad})
    assert f"{key}={bad!r}" in str(err.value)


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_flags_are_refused(text):
    with pytest.raises(SpecError, match="lr=.* must be a finite number"):
        spec_of_flags(f"--lr={text}")


@pytest.mark.parametrize("key", ["clients", "rounds", "local_epochs", "batch_size", "seed"])
def test_true_is_not_an_integer(key):
    with pytest.raises(SpecError) as err:
        RunSpec(**{key: True})
    assert f"{key}=True" in str(err.value)


def test_eval_local_and_deterministic_must_be_booleans():
    for key in ("eval_local", "deterministic"):
        with pytest.raises(SpecError, match=f"{key}='maybe' must be true or false"):
            RunSpec(**{key: "maybe"})
        assert getattr(spec_of_flags(flag(key), "true"), key) is True


def test_seeds_must_fit_a_signed_64_bit_integer():
    RunSpec(seed=2**63 - 1)
    for seed in (2**63, 2**64 + 5, -1):
        with pytest.raises(SpecError, match=r"seed=.* must be an integer from 0 to 2\^63 - 1"):
            RunSpec(seed=seed)


def test_counts_have_a_sensible_bound():
    with pytest.raises(SpecError, match="rounds=1000000000000 is more than 100,000"):
        spec_of_flags("--rounds", "1e12")
    with pytest.raises(SpecError, match="rounds=2.5 must be a positive integer"):
        RunSpec(rounds=2.5)


def test_model_options_are_checked_against_the_model():
    RunSpec(model="resnet8", model_options={"norm": "batch", "head_init": "he"})
    RunSpec(model="cnn", model_options={"channels": [16, 32], "hidden": 128})
    RunSpec(model="distilbert", dataset="synthtext", model_options={"pretrained": None})
    cases = [
        ("resnet8", {"channels": [1, 2]}, "model_options.channels is not an option of model 'resnet8'"),
        ("resnet8", {"norm": "bn"}, "model_options.norm='bn' is unknown; choose one of: group, batch"),
        ("cnn", {"hidden": -3}, "model_options.hidden=-3 must be an integer from 1 to 4,096"),
        ("cnn", {"channels": [16]}, "model_options.channels=[16] must be two integers from 1 to 4,096"),
        # a width no machine holds: refused here, not by torch after the run has started
        ("cnn", {"channels": [10**6, 10**6]}, "model_options.channels=[1000000, 1000000] must be two integers from 1 to 4,096"),
        ("cnn", {"hidden": 4097}, "model_options.hidden=4097 must be an integer from 1 to 4,096"),
        ("auto", {"nrom": "batch"}, "model_options.nrom is not an option of model 'cnn'"),
    ]  # fmt: skip
    for model, options, fragment in cases:
        with pytest.raises(SpecError) as err:
            RunSpec(model=model, model_options=options)
        assert fragment in str(err.value)


def test_the_model_option_table_names_build_model_keywords():
    import inspect

    from fedkd.model_options import _model_option_checks
    from fedkd.models import MODELS, build_model

    keywords = set(inspect.signature(build_model).parameters)
    checks = _model_option_checks()
    assert set(checks) == set(MODELS)
    for options in checks.values():
        assert set(options) <= keywords


def test_strategy_parameter_types_are_named_with_an_example(capsys):
    with pytest.raises(SpecError) as err:
        spec_of_flags("--strategy", "fedgkd", "--param", "gamma=abc")
    assert "params.gamma='abc' must be a number (strategy 'fedgkd', e.g. --param gamma=0.2)" in str(
        err.value
    )
    for params, fragment in [
        ({"buffer": 2.5}, "params.buffer=2.5 must be an integer"),
        ({"buffer": True}, "params.buffer=True must be an integer"),
        ({"regularizer": 3}, "params.regularizer=3 must be a text"),
        ({"gamma": math.nan}, "params.gamma=nan must be a number"),
    ]:
        with pytest.raises(SpecError) as err:
            RunSpec(strategy="fedgkd", params=params)
        assert fragment in str(err.value)
    RunSpec(strategy="feddf", params={"grad_clip": None})  # float | None
    # through the CLI: exit status 2 and the message, no traceback
    code = main(["train", "--out", "x", "--strategy", "fedgkd", "--param", "gamma=abc"])
    assert code == 2 and "params.gamma='abc'" in capsys.readouterr().err


BOMB = "\n".join(
    ["model_options:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
    + [
        f"  {c}: &{c} [{', '.join([f'*{p}'] * 9)}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
)


def test_an_alias_bomb_is_refused_without_expanding_it(tmp_path, capsys):
    f = tmp_path / "spec.yaml"
    f.write_text(BOMB + "\n")
    with pytest.raises(SpecError, match=f"run spec file {f} expands to more than"):
        RunSpec.from_file(f)
    with pytest.raises(ValueTooLarge):
        load_yaml(BOMB)
    with pytest.raises(SystemExit):  # a flag value: argparse's usage error (exit 2)
        spec_of_flags("--model-options", "{" + BOMB.split("\n", 1)[1].replace("\n", ",") + "}")
    assert "argument --model-options: value" in capsys.readouterr().err
    # built elsewhere (Snakemake's loader shares the aliased lists): bounded before it is walked
    import yaml as pyyaml

    shared = pyyaml.safe_load(BOMB)["model_options"]
    with pytest.raises(SpecError, match="model_options expands to more than 1,000 values"):
        RunSpec(model_options=shared)


def test_a_spec_conflict_names_the_keys_and_values_that_differ(tmp_path):
    from fedkd.config import spec_differences

    recorded = RunSpec(alpha=0.5, rounds=3).to_dict()
    assert spec_differences(recorded, RunSpec(alpha=0.1, rounds=3)) == ["alpha: 0.5 there, 0.1 now"]
    # an older record of `--alpha 1` (an int) holds the same value as 1.0 now; its hash, taken
    # from the value as written then, differs, and the key is named for it
    old = {**RunSpec().to_dict(), "alpha": 1}
    assert spec_differences(old, RunSpec(alpha=1.0)) == [
        "alpha: 1 there, 1.0 now (the same value, but the recorded hash was taken from it as "
        "written then)"
    ]
    # the refusal itself
    from fedkd.engine.run import Run
    from fedkd.engine.run_outputs import RunConflictError

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(
        json.dumps({"spec": RunSpec(seed=1).to_dict(), "spec_hash": RunSpec(seed=1).hash()})
    )
    with pytest.raises(RunConflictError, match="seed: 1 there, 0 now"):
        Run(RunSpec(seed=0), out).run()


NOT_NULLABLE = [f.name for f in __import__("dataclasses").fields(RunSpec) if f.name not in NULLABLE]


@pytest.mark.parametrize("key", NOT_NULLABLE)
def test_null_is_refused_naming_the_key_where_a_key_needs_a_value(key):
    with pytest.raises(SpecError) as err:
        RunSpec.from_dict({key: None})
    assert f"{key}=None" in str(err.value)
