"""``lr_decay``: round r (1-based) trains at lr * lr_decay^(r-1), as FedNTD's code steps its
scheduler after each round. Both trainers take the round's rate, and so does SCAFFOLD's control
variate (the rate its clients trained at); lr_decay 1 keeps every existing run's hash and rate."""

from __future__ import annotations

import pytest

from fedkd.config import RunSpec
from fedkd.engine import flat_optim, sequential
from fedkd.engine.run import Run
from fedkd.strategies import scaffold
from test_trainers import SHAPES, SMALL, data_for, engine_used, metrics, train, update_diff

DECAYING = dict(SMALL, **SHAPES["cnn-mnist5k"][0], rounds=3, lr=0.1, lr_decay=0.5)
RATES = [0.1, 0.05, 0.025]  # rounds 1, 2, 3


def test_the_rate_of_each_round_and_a_constant_rate_unchanged():
    spec = RunSpec(lr=0.1, lr_decay=0.5)
    assert [spec.lr_of_round(r) for r in range(3)] == RATES
    constant = RunSpec(lr=0.05)
    assert all(constant.lr_of_round(r) == 0.05 for r in range(100))
    assert RunSpec(lr=0.05, lr_decay=1).hash() == constant.hash()
    assert RunSpec(lr=0.05, lr_decay=0.99).hash() != constant.hash()


@pytest.mark.parametrize("bad", [0, -0.5, 1.01, float("nan")])
def test_a_decay_outside_0_1_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match="lr_decay=.* must lie in \\(0, 1\\]"):
        RunSpec(lr_decay=bad)


def rates_seen(monkeypatch, engine: str, optimizer: str) -> list[float]:
    """The learning rate each round's local training took, per client (sequential) or per
    round (batched)."""
    seen = []
    if engine == "sequential":
        make = sequential.make_optimizer

        def recording(model, spec, lr):
            seen.append(lr)
            return make(model, spec, lr)

        monkeypatch.setattr(sequential, "make_optimizer", recording)
    else:
        cls = flat_optim.FlatSGD if optimizer == "sgd" else flat_optim.FlatAdam
        coefficients = cls.coefficients

        def recording(self, active, lr):
            seen.append(lr)
            return coefficients(self, active, lr)

        monkeypatch.setattr(cls, "coefficients", recording)
    return seen


@pytest.mark.parametrize("engine", ["sequential", "batched"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_each_trainer_trains_a_round_at_its_rate(engine, optimizer, tmp_path, monkeypatch):
    seen = rates_seen(monkeypatch, engine, optimizer)
    spec = RunSpec(**{**DECAYING, "optimizer": optimizer}, engine=engine)
    train(spec, tmp_path / engine, data_for("cnn-mnist5k"))
    assert engine_used(tmp_path / engine)["used"] == engine
    per_round = spec.clients_per_round if engine == "sequential" else 1
    assert seen == [rate for rate in RATES for _ in range(per_round)]


def test_both_trainers_decay_alike_and_the_decay_moves_the_weights(tmp_path):
    data = data_for("cnn-mnist5k")
    seq = train(RunSpec(**DECAYING, engine="sequential"), tmp_path / "seq", data)
    kc = train(RunSpec(**DECAYING, engine="batched"), tmp_path / "kc", data)
    constant = train(RunSpec(**{**DECAYING, "lr_decay": 1.0}), tmp_path / "const", data)
    init = Run(RunSpec(**DECAYING), tmp_path / "init", log=lambda m: None, dataset=data)
    init.prepare()
    assert update_diff(seq.global_model, kc.global_model, init.global_model) <= 1e-3
    # the first round is the same (the rate decays after it); later rounds are not
    first = [metrics(tmp_path / d)["train_loss"].iloc[0] for d in ("seq", "const")]
    assert first[0] == pytest.approx(first[1], rel=1e-6)
    assert update_diff(seq.global_model, constant.global_model, init.global_model) > 1e-2


def test_scaffold_updates_its_control_variate_at_the_rate_its_clients_trained(
    tmp_path, monkeypatch
):
    """SCAFFOLD's option II divides the model change by the local steps times the local rate:
    with a decaying rate that is the round's rate, not the first one."""
    seen = []
    delta = scaffold.option2_delta

    def recording(x, y, c, k, lr):
        seen.append(lr)
        return delta(x, y, c, k, lr)

    monkeypatch.setattr(scaffold, "option2_delta", recording)
    spec = RunSpec(**DECAYING, strategy="scaffold", engine="sequential")
    train(spec, tmp_path / "scaffold", data_for("cnn-mnist5k"))
    assert sorted(set(seen), reverse=True) == RATES
