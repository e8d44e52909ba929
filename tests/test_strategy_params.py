"""Strategy parameter ranges: declared once on each Params field, refused when a run spec is read
(before any job starts), named with the strategy, the value and the range."""

import dataclasses
import typing

import pytest

from fedkd.cli import main
from fedkd.config import RunSpec, SpecError
from fedkd.strategies import get_strategy_class, strategy_names
from fedkd.strategies._params import Range, above, at_least, within

NUMBER_TYPES = (int, float)


def numeric_fields(cls):
    """(strategy class, field) for every int or float parameter of every registered strategy."""
    hints = typing.get_type_hints(cls.Params)
    for f in dataclasses.fields(cls.Params):
        plain = [a for a in typing.get_args(hints[f.name]) or (hints[f.name],) if a is not None]
        if any(a in NUMBER_TYPES for a in plain) and hints[f.name] is not bool:
            yield f


ALL_NUMERIC = [
    (name, f.name) for name in strategy_names() for f in numeric_fields(get_strategy_class(name))
]


def field_of(strategy: str, key: str):
    return next(f for f in dataclasses.fields(get_strategy_class(strategy).Params) if f.name == key)


def declared_range(strategy: str, f: dataclasses.Field) -> Range:
    """The range ``ranged(...)`` declared on parameter ``f`` of ``strategy``."""
    assert "range" in f.metadata, (
        f"{strategy}'s parameter {f.name!r} declares no range: write its default as "
        f'ranged({f.default!r}, at_least(0), "what the value means"), or with above() or '
        "within() (fedkd.strategies._params; docs/adding-a-strategy.md, Params)"
    )
    return f.metadata["range"]


def outside(r: Range) -> list[float]:
    """Values just beyond each finite bound of ``r``."""
    values = []
    if r.low is not None:
        values.append(r.low if r.low_open else r.low - 1)
    if r.high is not None:
        values.append(r.high if r.high_open else r.high + 1)
    return values


def spec_errors_of(strategy: str, params: dict) -> str:
    with pytest.raises(SpecError) as err:
        RunSpec(strategy=strategy, dataset="mnist5k", params=params)
    return str(err.value)


def test_every_numeric_parameter_of_every_strategy_declares_a_range():
    """A new strategy's number without a declared range would take any value silently."""
    assert len(ALL_NUMERIC) > 30
    for strategy, key in ALL_NUMERIC:
        declared_range(strategy, field_of(strategy, key))


@pytest.mark.parametrize(("strategy", "key"), ALL_NUMERIC)
def test_defaults_lie_in_their_range_and_every_bound_is_refused_at_read_time(strategy, key):
    f = field_of(strategy, key)
    r = declared_range(strategy, f)
    assert f.default is None or r.holds(f.default), (strategy, key, f.default, r)
    bad_values = outside(r)
    assert bad_values, f"{strategy}.{key}: range {r} has no bound"
    for bad in bad_values:
        message = spec_errors_of(strategy, {key: bad})
        assert f"params.{key}=" in message and str(r) in message, message
        assert f"strategy {get_strategy_class(strategy).name!r}" in message, message


def test_a_number_without_a_range_is_named_with_the_fix():
    """Under `-k <name>` (docs/adding-a-strategy.md) only the parametrized test runs: its failure
    for a number declared without a range says how to declare one."""

    @dataclasses.dataclass
    class Params:
        decay: float = 0.01

    with pytest.raises(AssertionError) as refused:
        declared_range("toy", dataclasses.fields(Params)[0])
    message = str(refused.value)
    assert "toy's parameter 'decay' declares no range" in message, message
    assert "ranged(0.01, at_least(0), " in message, message


def test_range_bounds_open_and_closed():
    assert at_least(0).holds(0) and not at_least(0).holds(-1e-12)
    assert not above(0).holds(0) and above(0).holds(1e-12)
    r = within(0, 1, low_open=True)
    assert not r.holds(0) and r.holds(1) and not r.holds(1 + 1e-12)
    assert not within(0, 1).holds(float("nan"))
    assert [str(at_least(1)), str(above(0)), str(within(0, 1, high_open=True))] == [
        ">= 1",
        "> 0",
        "in [0, 1)",
    ]


def test_integer_parameters_say_integer():
    assert "params.buffer=0 must be an integer >= 1" in spec_errors_of("fedgkd", {"buffer": 0})


def test_every_bad_parameter_is_named_at_once():
    message = spec_errors_of("feddf", {"lr": 0, "batch_size": 0, "unlabeled_fraction": 0})
    for key in ("lr", "batch_size", "unlabeled_fraction"):
        assert f"params.{key}=" in message, message


def test_a_misspelt_parameter_and_a_bad_value_are_named_at_once():
    """An unknown name hid every range error beside it: the value came up only on the next try."""
    message = spec_errors_of("fedprox", {"muu": 0.1, "mu": -2})
    assert "params.muu is not a parameter of strategy 'fedprox'" in message, message
    assert "params.mu=-2.0 must be >= 0" in message, message


def test_every_kind_of_bad_value_is_named_at_once_with_what_is_allowed():
    """Ranges, choices and integers together, through the spec and when Params is built
    directly: each bad parameter once, with its value and its range or choices."""
    from fedkd.strategies.fedgkd import FedGKDParams

    message = spec_errors_of("fedgkd", {"buffer": 0, "gamma": -1, "m1_teacher": "first"})
    for fragment in (
        "params.buffer=0 must be an integer >= 1",
        "params.gamma=-1.0 must be >= 0",
        "params.m1_teacher='first'; use one of 'current' (the paper), 'initial'",
    ):
        assert message.count(fragment) == 1, message
    with pytest.raises(ValueError) as err:
        FedGKDParams(buffer=2.5, temperature=0.0, regularizer="l1")
    lines = str(err.value).splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("params.buffer=2.5 must be an integer (a float"), lines
    assert lines[1].startswith("params.regularizer='l1'; use one of 'kl'"), lines
    assert lines[2] == "params.temperature=0.0 must be > 0", lines


def test_fedcad_bounds_in_the_wrong_order_are_one_error_naming_both():
    message = spec_errors_of("fedcad", {"beta": 0.9, "gamma": 0.1})
    assert "params.beta=0.9 must be <= params.gamma=0.1" in message
    # the default beta standing in for the refused one is not named as a second error
    assert message.count("params.beta=") == 1, message


@pytest.mark.parametrize(
    ("strategy", "params", "fragment"),
    [
        ("fedgen", {"sample_labels": "batch"}, "params.sample_labels='batch'; use one of 'all'"),
        ("fedgen", {"label_counts": "x"}, "'ones' (all ones (the FedGKD authors' release))"),
        ("fedgen", {"round_index": "0"}, "'zero-based' (t = r (FedGen's code))"),
        ("feddf", {"unlabeled": "imagenet32"}, "params.unlabeled='imagenet32' is neither"),
        ("feddistill+", {"target": "teacher"}, "'uniform' (the FedGKD repository's released"),
        ("fedgkd", {"regularizer": "l1"}, "params.regularizer='l1'; use one of 'kl' (the paper)"),
        ("moon", {"first_negative": "x"}, "'own-init' (the client's own initialisation, MOON's"),
    ],
)
def test_text_choices_are_refused_at_read_time(strategy, params, fragment):
    message = spec_errors_of(strategy, params)
    assert fragment in message, message
    assert message.count(f"params.{next(iter(params))}=") == 1, message  # named once


# a text parameter whose values are not a fixed set: a dataset name or a kind of data
OPEN_TEXTS = {("feddf", "unlabeled")}


def test_every_text_parameter_declares_its_choices_and_each_is_refused_when_built():
    """Built directly too (a checkpoint's or a test's Params), not only through the spec."""
    texts = [
        (name, f)
        for name in strategy_names()
        for f in dataclasses.fields(get_strategy_class(name).Params)
        if typing.get_type_hints(get_strategy_class(name).Params)[f.name] is str
    ]
    assert len(texts) >= 7
    for name, f in texts:
        if (name, f.name) in OPEN_TEXTS:
            continue
        choices = f.metadata.get("choices")
        assert choices and f.default in choices, (name, f.name)
        params_class = get_strategy_class(name).Params
        for choice in choices:
            try:
                assert getattr(params_class(**{f.name: choice}), f.name) == choice
            except ValueError as err:  # a check between parameters (m1_teacher wants buffer 1)
                assert "use one of" not in str(err), (name, f.name, choice)
        with pytest.raises(ValueError, match=rf"params\.{f.name}='nope'; use one of"):
            params_class(**{f.name: "nope"})


def test_train_refuses_a_bad_parameter_before_it_loads_anything(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--strategy",
            "fedprox",
            "--dataset",
            "mnist5k",
            "--param",
            "mu=-1",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "params.mu=-1.0 must be >= 0" in err, err
    assert not out.exists()


def test_strategies_details_lists_each_parameter_with_default_and_range(capsys):
    assert main(["strategies", "--details"]) == 0
    out = capsys.readouterr().out
    assert "mu=0.01 (>= 0)" in out
    assert "beta=0.25 (in [0, 1]), gamma=0.5 (in [0, 1]), temperature=1.0 (> 0)" in out
    assert "parameters: (none)" in out  # fedavg, fednova
    assert "first_negative=none (one of none, global, initial, own-init)" in out


def test_an_integer_parameter_holds_an_int_and_refuses_a_fraction():
    """Built directly (a checkpoint's or a test's Params, not the configuration's), an integer
    parameter given a whole float holds the int; one with a fraction is refused by name."""
    from fedkd.strategies.feddf import FedDFParams
    from fedkd.strategies.fedgkd import FedGKDParams

    params = FedDFParams(batch_size=128.0, max_steps=0.0)
    assert (params.batch_size, params.max_steps) == (128, 0)
    assert type(params.batch_size) is int and type(FedGKDParams(buffer=3.0).buffer) is int
    with pytest.raises(ValueError, match=r"params\.buffer=2\.5 must be an integer"):
        FedGKDParams(buffer=2.5)
    # beyond 2^53 a float no longer holds every integer: it is refused, not rounded to another
    with pytest.raises(
        ValueError, match=r"params\.max_steps=9007199254740994\.0 must be an integer \(a float"
    ):
        FedDFParams(max_steps=2.0**53 + 2)
