"""The batched client engine against the sequential one: same numbers, same resumption.

Every strategy that declares ``batched = True`` runs two rounds on a reduced mnist5k with both
engines; the per-round test accuracies must be equal and the final global weights within 1e-4
(max abs). The partition is "dirichlet" (unequal client sizes) with batch 32, so clients stop at
different steps and last partial batches of different sizes are grouped apart; seed 3 samples
client 3 in both rounds next to first-time clients, so per-client state (MOON's previous model,
SCAFFOLD's c_i) is present for some clients of a round and absent for others.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from fedkd.config import RunSpec, SpecError
from fedkd.data import load_dataset
from fedkd.data.base import ArraySplit, FedDataset
from fedkd.engine.batched import FunctionalModel, StackedAdam, StackedSGD, engine_choice
from fedkd.engine.optim import ForeachSGD
from fedkd.engine.run import Run
from fedkd.engine.seeding import sample_clients
from fedkd.strategies import get_strategy_class, strategy_names

# Both engines at one memory layout: the sequential engine's CPU default, channels_last, reorders
# floating-point sums, which alone moves the weights by about 2.5e-4 after these 2 rounds
# (tests/test_engine.py checks that layout on its own).
SMALL = dict(
    dataset="mnist5k", clients=8, participation=0.375, partition="dirichlet", alpha=0.5,
    local_epochs=1, rounds=2, batch_size=32, grad_clip=1.0, seed=3, device="cpu",
    memory_format="contiguous",
)  # fmt: skip
# server-side work kept small where a strategy has a knob for it (the clients' side is the test)
PARAMS = {
    "feddf": {"max_steps": 4, "eval_every": 2, "patience": 4},
    "fedgkd": {"buffer": 2},
    "fedgkd+": {"buffer": 2},
    "fedgkd-vote": {"buffer": 2},
}
N_TRAIN, N_TEST = 960, 400


def reduced_mnist5k() -> FedDataset:
    ds = load_dataset("mnist5k", seed=0)

    def head(split: ArraySplit, n: int) -> ArraySplit:
        return ArraySplit(split.x[:n].clone(), split.y[:n].clone())

    return FedDataset(
        ds.name, ds.kind, ds.num_classes, head(ds.train, N_TRAIN), head(ds.val, 200),
        head(ds.test, N_TEST), mean=ds.mean, std=ds.std, source=ds.source,
    )  # fmt: skip


@pytest.fixture(scope="module")
def data():
    return reduced_mnist5k()


def train(spec: RunSpec, out: Path, data: FedDataset, **kwargs) -> Run:
    run = Run(spec, out, log=lambda msg: None, dataset=data)
    run.run(**kwargs)
    return run


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "metrics.parquet")


def engine_used(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["engine"]


def max_abs_diff(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


BATCHED = [n for n in strategy_names() if get_strategy_class(n).batched]


def test_the_setting_exercises_unequal_clients_and_repeat_participants(data):
    from fedkd.data.partition import client_indices, partition_labels

    s = RunSpec(**SMALL)
    parts = client_indices(
        partition_labels(data.train.y.numpy(), s.partition, s.clients, s.seed, alpha=s.alpha,
                         num_classes=10),
        s.clients,
    )  # fmt: skip
    rounds = [sample_clients(s.seed, r, s.clients, s.participation) for r in range(s.rounds)]
    last_batches = {len(parts[c]) % s.batch_size for c in rounds[0]}
    steps = {-(-len(parts[c]) // s.batch_size) for c in rounds[0]}
    assert len(last_batches) > 1 and len(steps) > 1, "clients should differ in size and steps"
    assert set(rounds[0]) & set(rounds[1]) and set(rounds[1]) - set(rounds[0])


@pytest.mark.parametrize("strategy", BATCHED)
def test_batched_matches_sequential(strategy, data, tmp_path):
    # fedavg also evaluates the local models (eval_local), which runs after batched training
    base = dict(
        SMALL, strategy=strategy, params=PARAMS.get(strategy, {}), eval_local=strategy == "fedavg"
    )
    seq = train(RunSpec(engine="sequential", **base), tmp_path / "seq", data)
    bat = train(RunSpec(engine="batched", **base), tmp_path / "bat", data)
    assert engine_used(tmp_path / "seq")["used"] == "sequential"
    assert engine_used(tmp_path / "bat") == {
        "requested": "batched", "used": "batched", "reason": None, "cuda_graphs": False,
    }  # fmt: skip
    ms, mb = metrics(tmp_path / "seq"), metrics(tmp_path / "bat")
    assert list(ms["test_acc"]) == list(mb["test_acc"])
    assert ms["local_acc"].tolist() == pytest.approx(mb["local_acc"].tolist(), nan_ok=True)
    assert ms["train_loss"].tolist() == pytest.approx(mb["train_loss"].tolist(), abs=1e-4)
    assert max_abs_diff(seq.global_model, bat.global_model) <= 1e-4
    # the clients really trained: the global model moved away from its initial weights
    init = Run(RunSpec(**base), tmp_path / "init", dataset=data)
    init.prepare()
    assert max_abs_diff(init.global_model, bat.global_model) > 1e-3


def test_adam_matches_sequential(data, tmp_path):
    base = dict(SMALL, strategy="fedprox", optimizer="adam", lr=1e-3, weight_decay=1e-4)
    seq = train(RunSpec(engine="sequential", **base), tmp_path / "seq", data)
    bat = train(RunSpec(engine="batched", **base), tmp_path / "bat", data)
    assert engine_used(tmp_path / "bat")["used"] == "batched"
    assert list(metrics(tmp_path / "seq")["test_acc"]) == list(
        metrics(tmp_path / "bat")["test_acc"]
    )
    assert max_abs_diff(seq.global_model, bat.global_model) <= 1e-4


def test_stacked_optimizers_step_rows_like_the_sequential_ones():
    """One step of a group of rows (a gathered, non-contiguous subset) against ForeachSGD and
    torch.optim.Adam on each row alone; rows outside the group do not move."""
    torch.manual_seed(0)
    spec = RunSpec(lr=0.1, momentum=0.9, weight_decay=0.01)
    w = torch.randn(4, 3, 2)
    grads = [torch.randn(4, 3, 2) for _ in range(2)]
    rows = torch.tensor([0, 2, 3])  # gathered rows; the engine's slice case is the runs' own
    stacked = {"w": w.clone()}
    sgd = StackedSGD(stacked, spec)
    for i, g in enumerate(grads):
        sgd.step(rows, ["w"], [stacked["w"][rows]], [g[rows].clone()], first=i == 0)
    adam_stacked = {"w": w.clone()}
    adam = StackedAdam(adam_stacked, spec)
    for i, g in enumerate(grads):
        adam.step(rows, ["w"], [adam_stacked["w"][rows]], [g[rows].clone()], step=i + 1)
    for r in range(4):
        p = nn.Parameter(w[r].clone())
        ref = ForeachSGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
        q = nn.Parameter(w[r].clone())
        ref_adam = torch.optim.Adam([q], lr=0.1, weight_decay=0.01, foreach=True)
        if r in rows.tolist():
            for g in grads:
                p.grad, q.grad = g[r].clone(), g[r].clone()
                ref.step()
                ref_adam.step()
        assert torch.equal(stacked["w"][r], p.detach())
        assert torch.allclose(adam_stacked["w"][r], q.detach(), atol=1e-7, rtol=0)


def test_functional_model_view_runs_the_module_with_given_weights():
    torch.manual_seed(0)
    from fedkd.models import build_model

    m = build_model("cnn", 10, (1, 28, 28), projection_head=True)
    other = build_model("cnn", 10, (1, 28, 28), projection_head=True)
    view = FunctionalModel(m, dict(other.named_parameters()))
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(view(x), other(x))
    assert torch.equal(view.features_and_logits(x)[1], other(x))
    z = other.features(x)
    assert torch.equal(view.classifier(z), other.classifier(z))
    assert [t is u for t, u in zip(view.parameters(), other.parameters(), strict=True)] == [
        True
    ] * len(list(other.parameters()))
    assert view.feature_dim == m.feature_dim


def test_unsupported_strategies_and_models_fall_back_with_a_reason(data, tmp_path):
    fedgen = get_strategy_class("fedgen")
    assert not fedgen.batched and fedgen.batched_reason
    base = dict(SMALL, strategy="fedgen", rounds=1, engine="batched")
    train(RunSpec(**base), tmp_path / "gen", data)
    engine = engine_used(tmp_path / "gen")
    assert engine["requested"] == "batched" and engine["used"] == "sequential"
    assert "fedgen" in engine["reason"] and "random" in engine["reason"]

    class WithNorm(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

    spec = RunSpec(engine="batched")
    fedavg = get_strategy_class("fedavg")(None, None)
    cpu = torch.device("cpu")
    bn = engine_choice(spec, fedavg, WithNorm(nn.BatchNorm2d(3)), cpu)
    assert bn["used"] == "sequential" and "BatchNorm" in bn["reason"]
    drop = engine_choice(spec, fedavg, WithNorm(nn.Dropout(0.1)), cpu)
    assert drop["used"] == "sequential" and "dropout" in drop["reason"]
    assert engine_choice(spec, fedavg, WithNorm(nn.Dropout(0.0)), cpu)["used"] == "batched"
    compiled = engine_choice(
        RunSpec(engine="batched", compile="default"), fedavg, WithNorm(nn.Linear(2, 2)), cpu
    )
    assert compiled["used"] == "sequential"
    seq = engine_choice(RunSpec(engine="sequential"), fedavg, WithNorm(nn.Linear(2, 2)), cpu)
    assert seq == {"requested": "sequential", "used": "sequential", "reason": None}
    # the default, auto: batched on CUDA, sequential (with the reason) on a CPU
    auto_cpu = engine_choice(RunSpec(), fedavg, WithNorm(nn.Linear(2, 2)), cpu)
    assert auto_cpu["requested"] == "auto" and auto_cpu["used"] == "sequential"
    assert "CUDA" in auto_cpu["reason"]
    auto_cuda = engine_choice(RunSpec(), fedavg, WithNorm(nn.Linear(2, 2)), torch.device("cuda"))
    assert auto_cuda["used"] == "batched" and auto_cuda["reason"] is None


def test_engine_and_stop_keys_are_validated_and_keep_existing_hashes():
    with pytest.raises(SpecError, match="engine='fast' is unknown"):
        RunSpec(engine="fast")
    with pytest.raises(SpecError, match="stop_at_acc"):
        RunSpec(stop_at_acc=1.5)
    # the engine does not change a run's identity; stop_at_acc does once it is set
    assert RunSpec(engine="sequential").hash() == RunSpec(engine="batched").hash()
    assert "engine" not in RunSpec().identity() and "stop_at_acc" not in RunSpec().identity()
    assert RunSpec(stop_at_acc=0.5).hash() != RunSpec().hash()
    # the hash of the default spec from before these keys existed
    assert RunSpec().hash() == "9288a144be299c3d"


def test_stop_at_acc_ends_the_run_complete_and_counts_the_saved_rounds(data, tmp_path):
    spec = RunSpec(**dict(SMALL, rounds=4, stop_at_acc=0.01))
    train(spec, tmp_path / "r", data)
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["status"] == "complete"
    assert record["rounds_done"] == 1 and record["rounds_saved"] == 3
    assert len(metrics(tmp_path / "r")) == 1
    # the same command again: complete, nothing to do
    again = Run(spec, tmp_path / "r", log=lambda msg: None, dataset=data).run()
    assert again["rounds_done"] == 1


KILLED_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    from test_batched import SMALL, reduced_mnist5k
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    spec = RunSpec(**dict(SMALL, rounds=3, strategy="scaffold", engine="batched"))
    run = Run(spec, sys.argv[1], log=lambda msg: print(msg, file=sys.stderr, flush=True),
              dataset=reduced_mnist5k())
    run.run()
    torch.save(run.global_model.state_dict(), sys.argv[1] + "/final.pt")
    """
)


def test_killed_batched_run_resumes_bit_identical(data, tmp_path):
    """A batched run SIGKILLed after its first checkpoint, then started again, ends with the
    same metrics and bit-identical weights as an uninterrupted one."""
    script = tmp_path / "train.py"
    script.write_text(KILLED_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    spec = RunSpec(**dict(SMALL, rounds=3, strategy="scaffold", engine="batched"))
    full = train(spec, tmp_path / "full", data)
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=env,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (out / "checkpoint.pt").exists():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(metrics(out)) < 3, "the run finished before it could be killed"
    done = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    cols = ["round", "test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(metrics(tmp_path / "full")[cols], metrics(out)[cols])
    resumed = torch.load(out / "final.pt")
    for k, v in full.global_model.state_dict().items():
        assert torch.equal(v, resumed[k]), k


def test_scratch_plan_shares_teachers_and_stacks_what_differs_per_client():
    """A module reloaded with each client's weights (MOON's previous model) is snapshotted and
    stacked; a teacher used unchanged by every client is shared; per-client tensors are stacked;
    a reference to a worker parameter (SCAFFOLD) becomes the client's functional parameter."""
    from torch.func import vmap

    from fedkd.engine.batched import plan_scratch, rebuild_scratch, snapshot_scratch

    torch.manual_seed(0)
    worker, reloaded, teacher = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2)
    states = [{k: torch.randn_like(v) for k, v in reloaded.state_dict().items()} for _ in range(2)]
    snapshots, signatures, cache = [], [], {}
    for k in range(2):
        reloaded.load_state_dict(states[k])  # as client_begin does, one client after another
        scratch = {
            "previous": reloaded, "teacher": teacher, "weights": torch.full((2,), float(k)),
            "params": [worker.weight], "coef": 0.5,
        }  # fmt: skip
        snaps, _, sig = snapshot_scratch(scratch, worker, cache)
        snapshots.append(snaps)
        signatures.append(sig)
    (cls,), class_of = plan_scratch(snapshots, signatures, worker)
    assert class_of == [0, 0]
    kinds = [entry[0] for entry in cls.plan]
    assert sorted(kinds) == ["module", "param", "shared", "tensor", "value"]
    x = torch.randn(2, 4, 3)
    client_params = {n: torch.randn(2, *p.shape) for n, p in worker.named_parameters()}

    def probe(params, x, per_client):
        from fedkd.engine.batched import FunctionalModel

        view = FunctionalModel(worker, params)
        s = rebuild_scratch(cls, per_client, view)
        assert s["teacher"] is teacher and s["coef"] == 0.5
        return s["previous"](x), s["weights"], s["params"][0]

    prev_out, weights, param = vmap(probe)(client_params, x, cls.stacked)
    for k in range(2):
        reloaded.load_state_dict(states[k])
        assert torch.allclose(prev_out[k], reloaded(x[k]))
        assert torch.equal(weights[k], torch.full((2,), float(k)))
        assert torch.equal(param[k], client_params["weight"][k])
