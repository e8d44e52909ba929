"""The batched trainer's guards, on a CPU: masking of finished clients by overwriting (not by a
product), the CUDA-graph bookkeeping (graphs dropped with the buffers they read, one memory pool
per run) under a stand-in capture, and the memory format it refuses.

The setting is tests/test_trainers.py's (unequal clients, so some finish before the round's
longest and are masked for its remaining steps)."""

import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine import batched, choice, client
from fedkd.engine.choice import engine_choice
from fedkd.engine.static_buffers import static
from fedkd.models import build_model
from fedkd.strategies import get_strategy_class
from test_trainers import SHAPES, SMALL, data_for, train

CNN = dict(SMALL, **SHAPES["cnn-mnist5k"][0], engine="batched")
FEDAVG = get_strategy_class("fedavg")


@pytest.fixture(autouse=True)
def keep_trainer(monkeypatch):
    """Keep each run's trainer past its end (a run drops it) for the tests to inspect."""
    monkeypatch.setattr(client.TrainEnv, "release", lambda env: None)


def trainer_of(run) -> batched.BatchedTrainer:
    trainer = run.env._trainer
    assert isinstance(trainer, batched.BatchedTrainer)
    return trainer


def masked_steps(trainer: batched.BatchedTrainer) -> int:
    """Steps of the last round in which some client had finished (its active flag 0)."""
    return int((trainer.float_table[:, trainer.batch] == 0).any(dim=1).sum())


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_non_finite_loss_of_a_finished_client_changes_nothing(optimizer, tmp_path, monkeypatch):
    """A finished client's loss made NaN (0 x inf: its gradient NaN too) leaves every client's
    weights, optimizer state and recorded loss as they are without it. (Masked by a product,
    inf x 0 = NaN reached the finished client's momentum and weights, and its recorded loss
    stopped the run as diverged.)"""
    data = data_for("cnn-mnist5k")
    spec = RunSpec(**dict(CNN, optimizer=optimizer, lr=0.05 if optimizer == "sgd" else 1e-3))
    plain = train(spec, tmp_path / "plain", data)
    local_loss = FEDAVG.local_loss

    def poisoned(self, batch, ctx):
        finished = batch.weight.sum() == 0  # a finished client's slots all weigh 0
        return local_loss(self, batch, ctx) * torch.where(finished, torch.inf, 1.0)

    monkeypatch.setattr(FEDAVG, "local_loss", poisoned)
    hit = train(spec, tmp_path / "hit", data)
    a, b = trainer_of(plain), trainer_of(hit)
    assert masked_steps(b) > 0, "no client finished early: the setting tests nothing"
    state = ["buf"] if optimizer == "sgd" else ["exp_avg", "exp_avg_sq"]
    assert torch.equal(a.params.rows, b.params.rows)
    for name in state:
        assert torch.equal(getattr(a.opt, name), getattr(b.opt, name)), name
    assert torch.equal(a.loss_sum, b.loss_sum)
    for n, t in plain.global_model.state_dict().items():
        assert torch.equal(t, hit.global_model.state_dict()[n]), n


def leaves(value) -> list[torch.Tensor]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in leaves(v)]
    return [value]


class StandInGraph:
    """Stands in for ``GraphedStep`` on a CPU: "captures" on its first call by noting the
    buffers the step reads (the round's declared values), and at every later call ("replay")
    checks that they are still the trainer's buffers before running the step eagerly."""

    made: list["StandInGraph"] = []

    def __init__(self, device, pool, stream):
        self.pool, self.stream, self.buffers = pool, stream, None
        StandInGraph.made.append(self)

    @property
    def captures_next(self) -> bool:
        return self.buffers is None  # its first call is its "capture"

    def step(self, step_fn) -> None:
        trainer = step_fn.__self__
        now = {
            (kind, name): leaves(trainer._store[(kind, name)])
            for kind, values in trainer.values.items()
            for name in values
        }
        if self.buffers is None:
            self.buffers = now
        for key, tensors in self.buffers.items():
            assert all(a is b for a, b in zip(tensors, now[key], strict=True)), (
                f"a graph captured on {key} replays after its buffer was replaced"
            )
        step_fn()


def test_graphs_go_with_replaced_buffers_and_share_one_pool(tmp_path, monkeypatch):
    """A declared value whose shape changes (2, then 3, then 2 again) gets a new buffer each
    time; the graph captured on the old one is dropped, so the first shape's graph, captured
    in round 1, is not replayed in round 3 on a freed buffer. Every graph gets the run's one
    pool and one capture stream (each graph had a stream of its own: the allocator reuses a
    block only on the stream that freed it, so the pool was not shared)."""
    pools, streams = [], []
    monkeypatch.setattr(choice, "graphs_choice", lambda engine, device: (True, None))
    monkeypatch.setattr(batched, "graph_pool", lambda: pools.append(object()) or pools[-1])
    monkeypatch.setattr(
        batched, "capture_stream", lambda device: streams.append(object()) or streams[-1]
    )
    monkeypatch.setattr(batched, "GraphedStep", StandInGraph)
    StandInGraph.made = []
    local_loss = FEDAVG.local_loss

    def client_begin(self, client):
        client.own("vec", torch.zeros(3 if client.round == 1 else 2))

    def loss(self, batch, ctx):
        return local_loss(self, batch, ctx) + 0 * ctx.own["vec"].sum()

    monkeypatch.setattr(FEDAVG, "client_begin", client_begin)
    monkeypatch.setattr(FEDAVG, "local_loss", loss)
    run = train(RunSpec(**dict(CNN, rounds=3)), tmp_path / "r", data_for("cnn-mnist5k"))
    assert len(StandInGraph.made) == 3  # one per round: each round replaced the buffer
    assert len(pools) == 1 and all(g.pool is pools[0] for g in StandInGraph.made)
    assert len(streams) == 1 and all(g.stream is streams[0] for g in StandInGraph.made)
    assert list(trainer_of(run).graphs.values()) == [StandInGraph.made[-1]]


def test_graphs_are_kept_while_their_buffers_are():
    """Values copied into the buffers they had (the same shapes) keep their graphs."""
    trainer = batched.BatchedTrainer.__new__(batched.BatchedTrainer)
    trainer._store, trainer.graphs = {}, {}
    first = trainer._keep("own", "v", static(None, torch.zeros(2, 3)))
    key = ((), (("own", "v", ((2, 3), torch.float32)),))
    trainer.graphs[key] = "graph"
    again = trainer._keep("own", "v", static(first, torch.ones(2, 3)))
    assert again is first and trainer.graphs == {key: "graph"}
    trainer._keep("own", "v", static(first, torch.ones(2, 4)))
    assert trainer.graphs == {}


def test_channels_last_falls_back_to_the_sequential_trainer_with_the_reason():
    model = build_model("cnn", 10, (1, 28, 28))
    fedavg = FEDAVG(None, None)
    cpu = torch.device("cpu")
    choice = engine_choice(RunSpec(engine="batched"), fedavg, model, cpu, channels_last=True)
    assert choice["used"] == "sequential"
    assert "memory_format" in choice["reason"] and "channels_last" in choice["reason"]
    assert engine_choice(RunSpec(engine="batched"), fedavg, model, cpu)["used"] == "batched"


def test_a_local_loss_vmap_cannot_run_is_named_with_the_fix(tmp_path, monkeypatch):
    """A local_loss that breaks the batched trainer's contract (here: .item(), a branch on a
    tensor's value) stops the run with what to do in fedkd's terms, not torch's alone."""
    local_loss = FEDAVG.local_loss

    def branching(self, batch, ctx):
        loss = local_loss(self, batch, ctx)
        return loss * 2 if loss.item() > 1e9 else loss

    monkeypatch.setattr(FEDAVG, "local_loss", branching)
    with pytest.raises(RuntimeError) as stopped:
        train(RunSpec(**CNN), tmp_path / "run", data_for("cnn-mnist5k"))
    message = str(stopped.value)
    assert "strategy 'fedavg': its local_loss cannot run in the batched trainer" in message
    assert ".item()" in message  # torch's own words, for the line that broke it
    assert "batched = False" in message and "engine: sequential" in message, message


@pytest.mark.parametrize("declared_by", ["own", "own_per_step"])
def test_an_own_value_whose_shape_differs_between_clients_is_named_with_the_fix(
    declared_by, tmp_path, monkeypatch
):
    """own() values (and own_per_step() rows) are stacked over the round's clients: one whose
    shape depends on the client stopped the run in torch's words, naming neither the strategy
    nor the value."""

    def client_begin(self, client):
        if declared_by == "own":
            client.own("scale", torch.ones(client.client_id + 1))
        else:
            client.own_per_step("scale", torch.ones(client.num_steps, client.client_id + 1))

    def local_loss(self, batch, ctx):
        values = ctx.own if declared_by == "own" else ctx.step
        return batch.ce() + 0.0 * values["scale"].sum()

    monkeypatch.setattr(FEDAVG, "client_begin", client_begin)
    monkeypatch.setattr(FEDAVG, "local_loss", local_loss)
    with pytest.raises(ValueError) as stopped:
        train(RunSpec(**CNN), tmp_path / "run", data_for("cnn-mnist5k"))
    message = str(stopped.value)
    assert f"strategy 'fedavg': {declared_by}('scale') has shape and dtype" in message, message
    assert "same shape and dtype for every client" in message and "batched = False" in message
