"""Server-side optimisers (fedavgm, scaffold, fednova), divergence handling and local accuracy.

Unit tests check each update rule on tiny tensors against values worked out by hand; the
integration tests (slow) train on the mnist5k sample and share runs through module fixtures.
"""

import json
import math

import pandas as pd
import pytest
import torch
from torch import nn

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import load_checkpoint
from fedkd.engine.run import Run
from fedkd.runtime.seeding import sample_clients
from fedkd.strategies import get_strategy_class
from fedkd.strategies._local_steps import effective_steps
from fedkd.strategies.base import (
    ClientContext,
    ClientUpdate,
    ServerContext,
    frozen_copy,
    weighted_average,
)
from fedkd.strategies.fedavg import FedAvg
from fedkd.strategies.fedavgm import FedAvgM, momentum_step
from fedkd.strategies.fednova import FedNova, nova_coefficients
from fedkd.strategies.scaffold import Scaffold, control_variate_term, option2_delta

# ---------------------------------------------------------------------------- unit tests


class Tiny(nn.Module):
    """One trainable vector and one float buffer (stands in for BatchNorm statistics)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(2))
        self.register_buffer("stat", torch.zeros(2))


def tiny(w, stat=(0.0, 0.0)) -> Tiny:
    m = Tiny()
    m.load_state_dict({"w": torch.tensor(w), "stat": torch.tensor(stat)})
    return m


def make(cls, num_clients=4, params=None, **spec_kw):
    spec = RunSpec(strategy=cls.name, params=params or {}, device="cpu", **spec_kw)
    ctx = ServerContext(
        spec=spec, num_classes=2, num_clients=num_clients, device=torch.device("cpu"),
        build_model=Tiny, dataset=None, client_sizes=[1] * num_clients,
        client_label_counts=torch.zeros(num_clients, 2, dtype=torch.long),
    )  # fmt: skip
    return cls(cls.make_params(spec.params, spec.dataset, spec.resolved_model), ctx)


def update(cid, w, stat=(0.0, 0.0), n=1, **extras) -> ClientUpdate:
    state = {"w": torch.tensor(w), "stat": torch.tensor(stat)}
    return ClientUpdate(cid, state, num_samples=n, num_steps=1, train_loss=0.0, extras=extras)


def test_strategies_are_registered_with_table1_traits():
    for name in ("fedavgm", "scaffold", "fednova"):
        cls = get_strategy_class(name)
        assert not cls.traits.proxy_data and not cls.traits.modifies_model
        assert not cls.uses_projection_head
    assert FedAvgM.traits.extra_information == "none"  # momentum lives on the server only
    assert Scaffold.traits.extra_information == "control variates"
    assert FedNova.traits.extra_information != "none"  # clients report a_i
    with pytest.raises(ValueError, match="params.momentum is not a parameter"):
        RunSpec(strategy="fedavgm", params={"momentum": 0.9})


# ------------------------------------------------ fedavgm


def test_momentum_step_by_hand():
    # v = 0.5 * 0.2 + (1 - 0.5) = 0.6;  x = 1 - 0.5 * 0.6 = 0.7
    x, v = momentum_step(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.2]), 0.5, 0.5)
    assert x.item() == pytest.approx(0.7) and v.item() == pytest.approx(0.6)


def test_fedavgm_two_rounds_by_hand_and_buffers_take_the_average():
    s = make(FedAvgM, params={"beta": 0.5, "server_lr": 1.0})
    g = tiny([1.0, 2.0])
    # round 1: avg (0.5, 1.5), Δx = (0.5, 0.5) = v, x = (0.5, 1.5)
    out = s.aggregate(0, g, [update(0, [0.0, 2.0], (2.0, 4.0)), update(1, [1.0, 1.0], (4.0, 6.0))])
    assert out["w"].tolist() == [0.5, 1.5]
    assert out["stat"].tolist() == [3.0, 5.0]  # no momentum on buffers
    g.load_state_dict(out)
    # round 2: avg (0.5, 1.0), Δx = (0, 0.5), v = 0.5 (0.5, 0.5) + Δx = (0.25, 0.75), x - v
    out = s.aggregate(1, g, [update(0, [0.5, 1.0]), update(1, [0.5, 1.0])])
    assert s.velocity["w"].tolist() == [0.25, 0.75]
    assert out["w"].tolist() == [0.25, 0.75]
    assert s.server_update(1, g, [])["momentum_norm"] == pytest.approx(math.hypot(0.25, 0.75))


def test_fedavgm_with_beta_0_and_lr_1_is_fedavg_exactly_every_round():
    s = make(FedAvgM, params={"beta": 0.0, "server_lr": 1.0})
    gen = torch.Generator().manual_seed(0)
    g = tiny([0.3, -0.7])
    for r in range(3):
        ups = [update(i, torch.randn(2, generator=gen).tolist()) for i in range(3)]
        out = s.aggregate(r, g, ups)
        ref = weighted_average([u.state for u in ups], s.client_weights(ups))
        assert torch.equal(out["w"], ref["w"])
        g.load_state_dict(out)


def test_fedavgm_state_round_trips():
    s = make(FedAvgM)
    s.aggregate(0, tiny([1.0, 2.0]), [update(0, [0.0, 0.0])])
    t = make(FedAvgM)
    t.load_state_dict(s.state_dict())
    assert torch.equal(t.velocity["w"], s.velocity["w"])
    assert s.state_dict()["velocity"]["w"].device.type == "cpu"


# ------------------------------------------------ scaffold


def test_control_variate_term_has_value_zero_and_gradient_c_minus_ci():
    p = torch.tensor([1.0, 2.0], requires_grad=True)
    corr = torch.tensor([0.5, -1.0])
    term = control_variate_term([p], [corr])
    assert term.item() == 0.0  # the reported training loss stays the task loss
    ((p**2).sum() + term).backward()
    assert p.grad.tolist() == [2.5, 3.0]  # 2p + (c - c_i)


def test_option2_delta_by_hand():
    # ((1, 0) - (0.8, 0.3)) / (2 * 0.1) - (0.1, -0.1) = (1.0, -1.5) - (0.1, -0.1)
    d = option2_delta(
        torch.tensor([1.0, 0.0]), torch.tensor([0.8, 0.3]), torch.tensor([0.1, -0.1]), 2, 0.1
    )
    torch.testing.assert_close(d, torch.tensor([0.9, -1.4]))


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_scaffold_client_recovers_the_gradient_under_the_engine_optimizer(rho):
    """With a constant gradient g the corrected local steps move lr * a * (g + c - c_i), so
    option II must give c_i+ = g exactly; it does for plain SGD and, with the momentum-corrected
    step count, for heavy-ball SGD too (dividing by K there would give about 4.6 g here)."""
    s = make(Scaffold, lr=0.1, momentum=rho, weight_decay=0.0)
    g = torch.tensor([0.3, -0.2])
    c_i = {"w": torch.tensor([0.05, 0.3])}
    s.c_local[0] = {k: v.clone() for k, v in c_i.items()}
    x = tiny([1.0, -1.0])
    payload = s.payload(0, x)
    payload["c"]["w"] = torch.tensor([0.2, -0.1])  # a non-zero server variate
    model = tiny([1.0, -1.0])
    client = ClientContext(
        client_id=0, round=0, model=model, global_model=frozen_copy(x), payload=payload,
        data=None, num_classes=2, device=torch.device("cpu"), build_model=Tiny, preprocess=None,
    )  # fmt: skip
    s.client_begin(client)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=rho)
    for _ in range(5):
        corr = client.declared.own["correction"]
        loss = (g * model.w).sum() + control_variate_term([model.w], [corr["w"]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        client.steps += 1
    up = s.client_end(client)
    torch.testing.assert_close(s.c_local[0]["w"], g)
    torch.testing.assert_close(up["delta_c"]["w"], g - c_i["w"])


def test_scaffold_server_by_hand():
    s = make(Scaffold, num_clients=4, params={"server_lr": 0.5})
    g = tiny([1.0, 2.0], (2.0, 2.0))
    s.payload(0, g)  # creates c = 0
    ups = [
        update(0, [0.0, 2.0], (2.0, 4.0), delta_c={"w": torch.tensor([0.4, -0.8])}),
        update(1, [1.0, 1.0], (4.0, 6.0), delta_c={"w": torch.tensor([0.8, 0.4])}),
    ]
    # x + 0.5 * (mean(y) - x) = (1, 2) + 0.5 * ((0.5, 1.5) - (1, 2))
    out = s.aggregate(0, g, ups)
    torch.testing.assert_close(out["w"], torch.tensor([0.75, 1.75]))
    # c += |S|/N * mean(Δc) = (1/4) * (1.2, -0.4)
    metrics = s.server_update(0, g, ups)
    torch.testing.assert_close(s.c["w"], torch.tensor([0.3, -0.1]))
    assert metrics["c_norm"] == pytest.approx(math.hypot(0.3, 0.1))
    assert set(s.c) == {"w"}, "buffers carry no control variate"


def test_scaffold_state_round_trips_per_client():
    s = make(Scaffold)
    s.payload(0, tiny([0.0, 0.0]))
    s.c["w"] += 1.0
    s.c_local = {3: {"w": torch.tensor([1.0, 2.0])}}
    t = make(Scaffold)
    t.load_state_dict(s.state_dict())
    assert torch.equal(t.c["w"], s.c["w"]) and torch.equal(t.c_local[3]["w"], s.c_local[3]["w"])


# ------------------------------------------------ fednova


def test_effective_steps_by_hand_and_against_torch_sgd():
    # tau 3, rho 0.5: gradients get 1 + .5 + .25, 1 + .5 and 1 -> 4.25
    assert effective_steps(3, 0.5) == pytest.approx(4.25)
    assert effective_steps(7, 0.0) == 7.0
    for tau, rho in [(5, 0.9), (12, 0.9), (4, 0.3)]:
        w = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1, momentum=rho)
        for _ in range(tau):
            opt.zero_grad()
            (2.0 * w).sum().backward()  # constant gradient 2
            opt.step()
        assert -w.item() == pytest.approx(0.1 * effective_steps(tau, rho) * 2.0, rel=1e-5)


def test_nova_coefficients_and_aggregate_by_hand():
    # p (0.25, 0.75), a (2, 4): tau_eff = 3.5; x = 1, y = (0, 3):
    # x - 3.5 (0.25 (1 - 0) / 2 + 0.75 (1 - 3) / 4) = 1 + 3.5 * 0.25 = 1.875
    k, k_x, tau_eff = nova_coefficients(torch.tensor([0.25, 0.75]), torch.tensor([2.0, 4.0]))
    assert tau_eff == 3.5 and k.tolist() == [0.4375, 0.65625] and k_x == -0.09375
    s = make(FedNova, partition="dirichlet")  # n_k weights
    ups = [
        update(0, [0.0, 1.0], (2.0, 0.0), n=1, a=torch.tensor(2.0, dtype=torch.float64)),
        update(1, [3.0, 1.0], (6.0, 0.0), n=3, a=torch.tensor(4.0, dtype=torch.float64)),
    ]
    out = s.aggregate(0, tiny([1.0, 1.0]), ups)
    assert out["w"].tolist() == [1.875, 1.0]
    assert out["stat"].tolist() == [5.0, 0.0]  # buffers: plain n_k average
    assert s.server_update(0, None, ups) == {"tau_eff": 3.5}


def test_fednova_with_equal_steps_is_fedavg():
    # equal a_i: tau_eff = a and every k_i = p_i, so x - a sum p_i (x - y_i) / a = sum p_i y_i
    s = make(FedNova)
    a = torch.tensor(effective_steps(15, 0.9), dtype=torch.float64)
    ups = [update(i, [float(i), -2.0 * i], a=a) for i in range(2)]
    out = s.aggregate(0, tiny([5.0, 5.0]), ups)
    assert torch.equal(
        out["w"], weighted_average([u.state for u in ups], s.client_weights(ups))["w"]
    )


# ---------------------------------------------------------------------------- integration

SPEC = dict(
    dataset="mnist5k", clients=5, participation=0.4, alpha=1.0, local_epochs=1, device="cpu"
)
# one client a round: the cheapest real runs, for the divergence and local-accuracy checks
ONE = {**SPEC, "participation": 0.2}
COLS = ["round", "test_acc", "test_loss", "train_loss", "bytes_sent", "bytes_received"]
QUIET = dict(log=lambda msg: None)


def metrics(out):
    return pd.read_parquet(out / "metrics.parquet")


def global_weights(out):
    return load_checkpoint(out / "checkpoint.pt")["global"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs shared by the tests below, made on first use: ``runs(key)`` -> output directory."""
    root = tmp_path_factory.mktemp("server")
    made = {}

    def get(key):
        if key not in made:
            kind, strategy = key
            out = root / f"{kind}-{strategy}"
            if kind == "round1":
                Run(RunSpec(strategy=strategy, rounds=1, **SPEC), out, **QUIET).run()
            elif kind == "straight":  # rounds 1-2 without interruption (the resume reference)
                Run(RunSpec(strategy=strategy, rounds=3, **SPEC), out, **QUIET).run(
                    stop_after_round=2
                )
            else:  # "cut": one round, the round-1 checkpoint read, then resumed to round 3
                spec = RunSpec(strategy=strategy, rounds=3, **SPEC)
                Run(spec, out, **QUIET).run(stop_after_round=1)
                made[("after1", strategy)] = load_checkpoint(out / "checkpoint.pt")
                Run(spec, out, **QUIET).run()
            made[key] = out
        return made[key]

    get.made = made
    return get


def round1_state(runs, strategy):
    runs(("cut", strategy))
    return runs.made[("after1", strategy)]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["scaffold", "fedavgm", "fednova"])
def test_first_round_equals_fedavg_exactly(runs, strategy):
    """scaffold: c = c_i = 0 in round 1, so the correction is an exact zero and the server step
    with lr 1 is FedAvg's sum; fedavgm: the velocity starts at zero, so round 1 is x - Δx = the
    average for any beta (beta = 0 in every round is checked above); fednova: the equal-size
    partition gives every client the same tau, hence equal a_i, and with two clients p = 1/2,
    so tau_eff / a_i = 1 exactly. The weights are bit-identical, not merely close."""
    assert_same_weights(
        round1_state(runs, strategy)["global"], global_weights(runs(("round1", "fedavg")))
    )
    ref = metrics(runs(("round1", "fedavg")))
    got = metrics(runs(("cut", strategy))).iloc[:1]
    cols = ["test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(got[cols], ref[cols])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["scaffold", "fedavgm", "fednova"])
def test_three_rounds_improve_on_round_one_and_bytes_are_counted(runs, strategy):
    df = metrics(runs(("cut", strategy)))
    assert list(df["round"]) == [1, 2, 3]
    assert df["test_acc"].iloc[2] > df["test_acc"].iloc[0]
    fedavg = metrics(runs(("round1", "fedavg"))).iloc[0]
    sent, received = df["bytes_sent"].iloc[0], df["bytes_received"].iloc[0]
    if strategy == "scaffold":  # c down, Δc up: one model-sized extra each way (no buffers)
        assert (sent, received) == (2 * fedavg["bytes_sent"], 2 * fedavg["bytes_received"])
    elif strategy == "fednova":  # one float64 a_i per client
        assert (sent, received) == (fedavg["bytes_sent"], fedavg["bytes_received"] + 2 * 8)
    else:
        assert (sent, received) == (fedavg["bytes_sent"], fedavg["bytes_received"])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["scaffold", "fedavgm"])
def test_resume_is_bit_identical(runs, strategy):
    """Rounds 1-2 in one go vs round 1, a restart from the checkpoint, then round 2 (and 3):
    round 2 is the first to use the restored state (velocity; c and the c_i of client 4, who
    trains in rounds 1 and 2), so it is where a lost or altered state would show."""
    full = metrics(runs(("straight", strategy)))
    cut = metrics(runs(("cut", strategy))).iloc[:2]
    server = [c for c in full.columns if c.startswith("server_")]
    assert server, "the server step reports its state"
    pd.testing.assert_frame_equal(full[COLS + server], cut[COLS + server])
    assert full["class_acc"].map(list).tolist() == cut["class_acc"].map(list).tolist()
    state = round1_state(runs, strategy)["strategy"]
    if strategy == "scaffold":
        # the state that must survive: c_i of round 1's clients, one of whom trains again later
        first = sample_clients(0, 0, 5, 0.4)
        assert sorted(state["c_local"]) == first
        assert set(first) & set(sample_clients(0, 1, 5, 0.4))
        assert any(t.abs().sum() > 0 for t in state["c"].values())
    else:
        assert any(t.abs().sum() > 0 for t in state["velocity"].values())


@pytest.mark.slow
def test_nan_loss_stops_the_run_as_diverged_and_keeps_earlier_rounds(tmp_path, monkeypatch):
    def poison_round_2(self, client):
        if client.round == 1:
            client.share("poison", float("nan"))

    def nan_when_poisoned(self, batch, ctx):
        ce = batch.ce()
        return ce * ctx.shared["poison"] if "poison" in ctx.shared else ce

    monkeypatch.setattr(FedAvg, "client_begin", poison_round_2)
    monkeypatch.setattr(FedAvg, "local_loss", nan_when_poisoned)
    spec = RunSpec(strategy="fedavg", rounds=3, **ONE)
    out = tmp_path / "r"
    record = Run(spec, out, **QUIET).run()  # returns normally
    assert record["status"] == "diverged" and "round 2" in record["error"]
    assert json.loads((out / "run.json").read_text())["status"] == "diverged"
    df = metrics(out)
    assert list(df["round"]) == [1] and math.isfinite(df["test_acc"].iloc[0])
    assert load_checkpoint(out / "checkpoint.pt")["round_done"] == 1
    # a second call must not train again
    before = (out / "metrics.parquet").read_bytes()

    def no_training(*args, **kwargs):
        raise AssertionError("a diverged run was trained again")

    monkeypatch.setattr("fedkd.engine.run.train_clients", no_training)
    again = Run(spec, out, **QUIET).run()
    assert again["status"] == "diverged"
    assert (out / "metrics.parquet").read_bytes() == before


@pytest.mark.slow
def test_a_strategys_non_finite_server_value_is_a_divergence(tmp_path, monkeypatch):
    # e.g. fedgkd-vote refuses a buffer whose validation losses are not finite
    def non_finite_in_round_2(self, round, global_model):
        if round == 1:
            raise FloatingPointError("non-finite validation loss in the buffer: [nan]")
        return {}

    monkeypatch.setattr(FedAvg, "payload", non_finite_in_round_2)
    record = Run(RunSpec(strategy="fedavg", rounds=3, **ONE), tmp_path / "r", **QUIET).run()
    assert record["status"] == "diverged" and "non-finite validation loss" in record["error"]
    assert list(metrics(tmp_path / "r")["round"]) == [1]


@pytest.mark.parametrize("when", ["from the start", "from round 2"])
def test_a_state_no_checkpoint_can_hold_is_the_users_to_fix(tmp_path, monkeypatch, when):
    """A strategy whose state_dict holds a deque stopped at its first checkpoint in check_plain's
    TypeError traceback; it is a one-line error (a ValueError) naming the entry and the fix,
    before any round trains where the state holds it from the start."""
    from collections import deque

    def state_dict(self):
        rounds = getattr(self, "rounds_seen", 0)
        return {"seen": deque() if when == "from the start" or rounds else []}

    def server_update(self, round, global_model, updates):
        self.rounds_seen = round + 1
        return {}

    monkeypatch.setattr(FedAvg, "state_dict", state_dict)
    monkeypatch.setattr(FedAvg, "load_state_dict", lambda self, state: None)
    monkeypatch.setattr(FedAvg, "server_update", server_update)
    with pytest.raises(ValueError) as refused:
        Run(RunSpec(strategy="fedavg", rounds=3, **ONE), tmp_path / "r", **QUIET).run()
    message = str(refused.value)
    assert "strategy 'fedavg': its state_dict()['seen'] is a collections.deque" in message
    assert "rebuild the objects in load_state_dict" in message
    written = tmp_path / "r" / "metrics.parquet"
    if when == "from the start":
        assert not written.exists()  # no round trained
    else:  # round 1 trained and its metrics were written before its checkpoint was refused
        assert list(metrics(tmp_path / "r")["round"]) == [1]


@pytest.mark.slow
def test_huge_learning_rate_diverges_in_round_one(tmp_path):
    out = tmp_path / "r"
    record = Run(RunSpec(rounds=2, lr=1e6, grad_clip=None, **ONE), out, **QUIET).run()
    assert record["status"] == "diverged" and record["rounds_done"] == 0
    assert len(metrics(out)) == 0


@pytest.mark.slow
def test_local_accuracy_is_recorded_only_when_asked(runs, tmp_path):
    out = tmp_path / "r"
    Run(RunSpec(rounds=1, eval_local=True, **ONE), out, **QUIET).run()
    row = metrics(out).iloc[0]
    assert 0.0 <= row["local_acc"] <= 1.0
    # with one client a round FedAvg's global model is that client's model
    assert row["local_acc"] == row["test_acc"]
    assert math.isnan(metrics(runs(("round1", "fedavg")))["local_acc"].iloc[0])
