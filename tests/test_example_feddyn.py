"""The FedDyn example (examples/feddyn/feddyn.py), a strategy with per-client and server state
kept outside the package, as docs/adding-a-strategy.md walks through it: its terms against
values worked out by hand, its state across rounds and a resume, and training through both
trainers to the same numbers. Loaded only through FEDKD_STRATEGY_MODULES, as a user's would be."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedkd.config import RunSpec, SpecError
from fedkd.strategies import MODULES_VARIABLE, get_strategy_class, strategy_names

FEDDYN = Path(__file__).resolve().parents[1] / "examples" / "feddyn" / "feddyn.py"


@pytest.fixture
def feddyn(monkeypatch):
    monkeypatch.setenv(MODULES_VARIABLE, str(FEDDYN))
    return get_strategy_class("feddyn")


def test_it_registers_with_checked_parameters_and_its_name(feddyn):
    from fedkd.report.names import display_name

    assert "feddyn" in strategy_names() and feddyn.batched
    assert feddyn.make_params({}, "mnist5k", "cnn").alpha == 0.01
    with pytest.raises(SpecError, match=r"params.alpha=0.0 must be > 0"):
        RunSpec(strategy="feddyn", params={"alpha": 0})
    assert display_name("feddyn") == "FedDyn"
    assert display_name("feddyn-alpha0.1") == "FedDyn (alpha=0.1)"
    assert display_name("feddyn-batched") == "FedDyn (batched)"


def test_the_local_term_and_its_gradient(feddyn):
    """-<g, w> + alpha/2 ||w - w0||^2 at w = (1, 2), w0 = (0, 1), g = (3, -1), alpha 0.5:
    -(3 - 2) + 0.25 * (1 + 1) = -0.5; its gradient -g + alpha (w - w0) = (-2.5, 1.5)."""
    term = __import__(feddyn.__module__).dynamic_term
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    value = term({"w": w}, {"w": torch.tensor([0.0, 1.0], dtype=torch.float64)},
                 {"w": torch.tensor([3.0, -1.0], dtype=torch.float64)}, 0.5)  # fmt: skip
    value.backward()
    assert value.item() == pytest.approx(-0.5, rel=1e-12)
    assert w.grad.tolist() == pytest.approx([-2.5, 1.5], rel=1e-12)


def server(feddyn, alpha: float, clients: int):
    spec = SimpleNamespace(partition="dirichlet-equal")
    return feddyn(feddyn.Params(alpha=alpha), SimpleNamespace(spec=spec, num_clients=clients))


def one_weight(value: float) -> torch.nn.Module:
    model = torch.nn.Linear(1, 1, bias=False).double()
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def update(client_id: int, value: float):
    from fedkd.strategies.base import ClientUpdate

    state = {"weight": torch.full((1, 1), value, dtype=torch.float64)}
    return ClientUpdate(client_id, state, num_samples=10, num_steps=1, train_loss=0.0)


def test_the_server_corrects_the_mean_by_its_state_over_rounds(feddyn):
    """Two of N = 4 clients, alpha 0.5, the global weight 0 as sent, clients at 1 and 3:
    h = -0.5/4 * (1 + 3) = -0.5 and w = 2 - h/alpha = 3. The next round (sent 3, clients at 3
    and 5): h = -0.5 - 0.5/4 * 2 = -0.75, w = 4 + 1.5 = 5.5. aggregate reads the model as sent."""
    strategy = server(feddyn, 0.5, 4)
    new = strategy.aggregate(0, one_weight(0.0), [update(0, 1.0), update(1, 3.0)])
    assert new["weight"].item() == pytest.approx(3.0, rel=1e-12)
    assert strategy.server_update(0, one_weight(3.0), [])["h_norm"] == pytest.approx(0.5)
    new = strategy.aggregate(1, one_weight(3.0), [update(2, 3.0), update(3, 5.0)])
    assert new["weight"].item() == pytest.approx(5.5, rel=1e-12)
    assert strategy.h["weight"].item() == pytest.approx(-0.75, rel=1e-12)


def test_a_client_keeps_its_state_between_the_rounds_it_is_sampled(feddyn):
    """g_k <- g_k - alpha (w_k - w_sent): twice for client 7 (sent 0, trained to 2; sent 1,
    trained to 0), alpha 0.5: g = -1, then -1 - 0.5 * (-1) = -0.5; a client never seen starts
    at zero; the state survives state_dict/load_state_dict."""
    from fedkd.strategies.base import ClientContext

    strategy = server(feddyn, 0.5, 10)

    def client_round(sent: float, trained: float):
        client = SimpleNamespace(client_id=7, model=one_weight(trained),
                                 global_model=one_weight(sent), device="cpu")  # fmt: skip
        assert feddyn.client_end(strategy, client) == {}

    client_round(0.0, 2.0)
    assert strategy.grads[7]["weight"].item() == pytest.approx(-1.0)
    client_round(1.0, 0.0)
    assert strategy.grads[7]["weight"].item() == pytest.approx(-0.5)
    restored = server(feddyn, 0.5, 10)
    restored.load_state_dict(strategy.state_dict())
    assert restored.grads[7]["weight"].item() == pytest.approx(-0.5)
    fresh = ClientContext.__new__(ClientContext)
    declared = {}
    fresh.client_id, fresh.model, fresh.device = 3, one_weight(5.0), "cpu"
    fresh.own = lambda name, value: declared.__setitem__(name, value)
    restored.client_begin(fresh)
    assert declared["grad"]["weight"].tolist() == [[0.0]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two rounds of FedDyn with each trainer (the batched one also stopped after its first round
    and resumed), and FedAvg's, on the stand-in CNN and 96 mnist5k
    images (tests/test_trainers.py's small setting, 6 clients, half of them a round: a client's
    state is used again when it is sampled again)."""
    from fedkd.engine.run import Run
    from test_trainers import SHAPES, SMALL, data_for, train

    out = tmp_path_factory.mktemp("feddyn_runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MODULES_VARIABLE, str(FEDDYN))
        data = data_for("cnn-mnist5k")
        base = dict(SMALL, **SHAPES["cnn-mnist5k"][0])
        dyn = dict(base, strategy="feddyn", params={"alpha": 0.1})
        runs = {
            "sequential": train(RunSpec(**dyn, engine="sequential"), out / "seq", data),
            "batched": train(RunSpec(**dyn, engine="batched"), out / "bat", data),
            "fedavg": train(RunSpec(**base, strategy="fedavg", engine="sequential"), out / "fa",
                            data),
            "init": Run(RunSpec(**dyn), out / "init", log=lambda m: None, dataset=data),
        }  # fmt: skip
        runs["init"].prepare()
        # stopped after its first round and started again: h and every g_k from the checkpoint
        train(RunSpec(**dyn, engine="batched"), out / "resumed", data, stop_after_round=1)
        runs["resumed"] = train(RunSpec(**dyn, engine="batched"), out / "resumed", data)
    dirs = {"sequential": out / "seq", "batched": out / "bat", "fedavg": out / "fa",
            "resumed": out / "resumed"}  # fmt: skip
    return {"dirs": dirs, "runs": runs, "data": data}


@pytest.mark.slow  # three short runs
def test_it_trains_through_both_trainers_alike(trained):
    from test_trainers import engine_used, metrics, update_diff

    dirs, runs = trained["dirs"], trained["runs"]
    assert engine_used(dirs["sequential"])["used"] == "sequential"
    assert engine_used(dirs["batched"])["used"] == "batched"
    seq, bat = metrics(dirs["sequential"]), metrics(dirs["batched"])
    assert len(seq) == len(bat) == 2
    assert seq["train_loss"].tolist() == pytest.approx(bat["train_loss"].tolist(), rel=1e-4)
    assert seq["server_h_norm"].tolist() == pytest.approx(bat["server_h_norm"].tolist(), rel=1e-3)
    assert (seq["server_h_norm"] > 0).all()  # a round metric, as server_{key}
    init = runs["init"].global_model
    # its own terms trained it (FedAvg from the same start ends elsewhere) ...
    assert update_diff(runs["sequential"].global_model, runs["fedavg"].global_model, init) > 1e-2
    # ... and both trainers the same way (tests/test_trainers.py's bound)
    assert update_diff(runs["sequential"].global_model, runs["batched"].global_model, init) <= 1e-3
    record = json.loads((dirs["batched"] / "run.json").read_text())
    assert record["spec"]["strategy"] == "feddyn" and record["strategy_params"] == {"alpha": 0.1}
    # the clients' state was kept: every client sampled so far has its g_k
    strategy = runs["sequential"].strategy
    assert strategy.grads and all(g["classifier.weight"].abs().sum() > 0
                                  for g in strategy.grads.values())  # fmt: skip


@pytest.mark.slow  # uses the runs above
def test_a_stopped_run_resumes_bit_for_bit(trained):
    from test_trainers import metrics

    dirs, runs = trained["dirs"], trained["runs"]
    whole, resumed = metrics(dirs["batched"]), metrics(dirs["resumed"])
    for column in ("test_acc", "train_loss", "server_h_norm"):
        assert whole[column].tolist() == resumed[column].tolist(), column
    a, b = runs["batched"].global_model.state_dict(), runs["resumed"].global_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(
        torch.equal(g, runs["resumed"].strategy.grads[cid][n])
        for cid, grads in runs["batched"].strategy.grads.items()
        for n, g in grads.items()
    )
