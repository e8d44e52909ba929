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
    with pytest.raises(SpecError, match="roundz"):
        RunSpec.from_dict({"roundz": 3})
    with pytest.raises(SpecError, match="params.gamma"):
        RunSpec(strategy="fedavg", params={"gamma": 0.1})


def test_shards_needs_shards_per_client():
    with pytest.raises(SpecError, match="shards=None"):
        RunSpec(partition="shards", alpha=None)
    RunSpec(partition="shards", alpha=None, shards=2)


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
