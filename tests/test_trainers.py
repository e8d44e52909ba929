"""The two trainers behind ``train_clients``: the batched one against the sequential one.

Every registered strategy trains two rounds with both trainers on ResNet-8-GN with CIFAR-shaped
data (crop-flip on), on ResNet-8 with BatchNorm (FedDF's model: each client's statistics over its
own samples, the padding of a short batch left out; running statistics and batch counts in the
upload) and on the stand-in CNN with mnist5k. The only difference is the order of
floating-point sums (grouped convolutions, batched matmuls, flat clipping norms): the two
trainings may end 1e-3 of the distance the weights moved apart (seen: about 1e-6 in float32; 1e-15
relative when both run in float64, which is too slow on a CPU for every strategy), the accuracies to one test sample, so the bounds hold
on any x86 CPU. The partition is "dirichlet" (unequal client sizes): the
clients take different numbers of steps (the shorter ones are masked once finished) and their
last batches differ in size (padded with zero-weight slots). Seed 3 samples a client in both
rounds next to first-time clients, so per-client state (MOON's previous model, SCAFFOLD's c_i)
is present for some clients of a round and absent for others. While the batched trainer runs,
every step is checked for host syncs.
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
from fedkd.engine.choice import engine_choice
from fedkd.engine.compiled_step import COMPILE_OFF_CUDA
from fedkd.engine.cuda_graphs import GRAPHS_OFF_CUDA
from fedkd.engine.flat_optim import FlatAdam, FlatSGD, clip_rows_
from fedkd.engine.folding import bind, fold, fold_error, folded_shape, param_kinds
from fedkd.engine.run import Run
from fedkd.models import build_model
from fedkd.strategies import get_strategy_class, strategy_names
from fedkd.tools.opcount import count_ops
from small_runs import SMALL_SERVER_PARAMS, cifar_shaped

SMALL = dict(
    clients=6, participation=0.5, partition="dirichlet", alpha=0.5, local_epochs=1, rounds=2,
    batch_size=8, grad_clip=1.0, seed=3, device="cpu", memory_format="contiguous",
)  # fmt: skip
BATCHED = [n for n in strategy_names() if get_strategy_class(n).batched]
# the fast subset: one strategy per kind of declaration (none, shared model, per-client model
# and shared model, per-client tensors, per-step values)
FAST = {"fedavg", "fedgkd", "moon", "scaffold", "fedgen"}


def reduced_mnist5k(n_train=96) -> FedDataset:
    ds = load_dataset("mnist5k", seed=0)

    def head(split: ArraySplit, n: int) -> ArraySplit:
        return ArraySplit(split.x[:n].clone(), split.y[:n].clone())

    return FedDataset(
        ds.name, ds.kind, ds.num_classes, head(ds.train, n_train), head(ds.val, 24),
        head(ds.test, 24), mean=ds.mean, std=ds.std, source=ds.source,
    )  # fmt: skip


SHAPES = {
    "resnet8-cifar": (dict(dataset="cifar10", model="resnet8", augment="crop-flip"), cifar_shaped),
    "resnet8bn-cifar": (
        dict(
            dataset="cifar10", model="resnet8", augment="crop-flip", model_options={"norm": "batch"}
        ),
        cifar_shaped,
    ),
    "cnn-mnist5k": (
        dict(dataset="mnist5k", model="cnn", model_options={"channels": [4, 8], "hidden": 16}),
        reduced_mnist5k,
    ),
}
_DATA: dict[str, FedDataset] = {}


def data_for(shape: str) -> FedDataset:
    if shape not in _DATA:
        _DATA[shape] = SHAPES[shape][1]()
    return _DATA[shape]


@pytest.fixture
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def train(spec: RunSpec, out: Path, data: FedDataset, **kwargs) -> Run:
    run = Run(spec, out, log=lambda msg: None, dataset=data)
    run.run(**kwargs)
    return run


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "metrics.parquet")


def engine_used(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["engine"]


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten() for t in model.state_dict().values()])


def rel_diff(a: nn.Module, b: nn.Module) -> float:
    """||a - b|| / ||b|| over all the model's weights."""
    return float((flat(a) - flat(b)).norm() / flat(b).norm())


def update_diff(a: nn.Module, b: nn.Module, init: nn.Module) -> float:
    """How far apart two trainings of the same model ended, relative to how far they moved it:
    ||a - b|| / ||b - init||. (Per tensor, a bias that barely moved from zero would turn float
    noise into a large relative difference.)"""
    return float((flat(a) - flat(b)).norm() / (flat(b) - flat(init)).norm())


class SyncWatch:
    """Counts host syncs inside every batched step of a run."""

    def __init__(self, monkeypatch):
        from fedkd.engine import batched

        self.steps, self.syncs = 0, 0
        original = batched.BatchedTrainer._step
        watch = self

        def step(trainer):
            with count_ops() as c:
                original(trainer)
            watch.steps += 1
            watch.syncs += c.syncs

        monkeypatch.setattr(batched.BatchedTrainer, "_step", step)


# with BatchNorm: a shared frozen model's statistics (fedgkd's teacher) and a per-client one's
# (moon's previous model) besides the student's
FAST_BN = {"fedavg", "fedgkd", "moon"}


def strategy_cases():
    for shape in SHAPES:
        for name in BATCHED:
            fast = {"resnet8-cifar": FAST, "resnet8bn-cifar": FAST_BN}.get(shape, ())
            slow = name not in fast and name != "fedavg"
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(shape, name, marks=marks, id=f"{shape}-{name}")


# FedDF's server step (Adam from the average, on uniform noise) carries the trainers' float32
# rounding past the bound on the ResNets (1e-2 seen with GroupNorm, 2e-3 with BatchNorm); in
# float64 they agree to 1e-13
IN_FLOAT64 = {("resnet8-cifar", "feddf"), ("resnet8bn-cifar", "feddf")}


@pytest.mark.parametrize("shape,strategy", list(strategy_cases()))
def test_batched_trainer_matches_sequential(shape, strategy, tmp_path, monkeypatch, request):
    bound = 1e-3
    if (shape, strategy) in IN_FLOAT64:
        request.getfixturevalue("float64")
        bound = 1e-12
    options, _ = SHAPES[shape]
    data = data_for(shape)
    base = dict(SMALL, **options, strategy=strategy, params=SMALL_SERVER_PARAMS.get(strategy, {}))
    if strategy == "fedavg":
        base["eval_local"] = True  # runs after batched training, on the written-back weights
    seq = train(RunSpec(**base, engine="sequential"), tmp_path / "seq", data)
    watch = SyncWatch(monkeypatch)
    kc = train(RunSpec(**base, engine="batched"), tmp_path / "kc", data)
    assert engine_used(tmp_path / "seq")["used"] == "sequential"
    assert engine_used(tmp_path / "kc") == {
        "requested": "batched", "used": "batched", "reason": None,
        "cuda_graphs": False, "cuda_graphs_reason": GRAPHS_OFF_CUDA,
        "compile_step": False, "compile_step_reason": COMPILE_OFF_CUDA,
    }  # fmt: skip
    assert watch.steps > 0 and watch.syncs == 0
    ms, mk = metrics(tmp_path / "seq"), metrics(tmp_path / "kc")
    one_sample = 1 / len(data.test) + 1e-9
    assert ms["test_acc"].tolist() == pytest.approx(mk["test_acc"].tolist(), abs=one_sample)
    assert ms["local_acc"].tolist() == pytest.approx(
        mk["local_acc"].tolist(), abs=one_sample, nan_ok=True
    )
    assert ms["train_loss"].tolist() == pytest.approx(mk["train_loss"].tolist(), rel=1e-4)
    init = Run(RunSpec(**base), tmp_path / "init", log=lambda m: None, dataset=data)
    init.prepare()
    # training moved the weights (a trainer that did nothing would match trivially), and both
    # trainers moved them the same way
    assert rel_diff(init.global_model, kc.global_model) > 1e-3
    assert update_diff(seq.global_model, kc.global_model, init.global_model) <= bound


@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_batchnorm_running_statistics_travel_in_the_upload_and_are_averaged(engine, tmp_path):
    """FedAvg averages the whole model: each client's upload holds its BatchNorm running
    statistics as its training left them, and the round's global model their weighted mean (a
    global model that kept its initial statistics would evaluate with mean 0, variance 1)."""
    from fedkd.engine.client import train_clients
    from fedkd.runtime.seeding import sample_clients
    from fedkd.strategies.base import weighted_average

    options = dict(SHAPES["resnet8-cifar"][0], model_options={"norm": "batch"})
    spec = RunSpec(**dict(SMALL, **options), engine=engine)
    run = Run(spec, tmp_path, log=lambda m: None, dataset=data_for("resnet8-cifar"))
    run.prepare()
    start = {k: v.clone() for k, v in run.global_model.state_dict().items()}
    stats = [k for k in start if k.endswith(("running_mean", "running_var"))]
    assert stats, "the model has BatchNorm statistics"
    selected = sample_clients(spec.seed, 0, spec.clients, spec.participation)
    payload = run.strategy.payload(0, run.global_model)
    updates, _ = train_clients(0, selected, run.global_model, payload, run.strategy, run.env)
    assert run.env.engine(run.strategy)["used"] == engine
    for u in updates:
        for k in stats:
            assert not torch.equal(u.state[k], start[k]), (
                f"client {u.client_id} uploads {k} unchanged"
            )
        assert int(u.state["stem.1.num_batches_tracked"]) == u.num_steps
    expected = weighted_average([u.state for u in updates], run.strategy.client_weights(updates))
    run.global_model.load_state_dict(run.strategy.aggregate(0, run.global_model, updates))
    for k in stats:
        assert torch.allclose(run.global_model.state_dict()[k], expected[k], rtol=1e-6, atol=0)


@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_a_local_loss_that_is_not_a_scalar_is_refused_by_name(engine, tmp_path, monkeypatch):
    """A loss left per sample (batch.mean forgotten) stopped the run inside torch: "grad can be
    implicitly created only for scalar outputs", or a size mismatch in the batched trainer."""
    from fedkd.strategies.base import per_sample_ce

    cls = get_strategy_class("fedavg")
    monkeypatch.setattr(cls, "local_loss", lambda self, b, ctx: per_sample_ce(b.logits, b.y))
    spec = RunSpec(**SMALL, **SHAPES["cnn-mnist5k"][0], strategy="fedavg", engine=engine)
    with pytest.raises(ValueError) as refused:
        train(spec, tmp_path, data_for("cnn-mnist5k"))
    assert str(refused.value) == (
        "strategy 'fedavg': local_loss returned a tensor of shape (8,); it must return a scalar "
        "(average per-sample terms with batch.mean(...))"
    )


def test_the_setting_exercises_unequal_clients_and_repeat_participants():
    from fedkd.data.partition import client_indices, partition_labels
    from fedkd.runtime.seeding import sample_clients

    s = RunSpec(**SMALL)
    data = data_for("resnet8-cifar")
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


def test_adam_matches_sequential(tmp_path):
    data = data_for("cnn-mnist5k")
    base = dict(SMALL, **SHAPES["cnn-mnist5k"][0], optimizer="adam", lr=1e-3, weight_decay=1e-4)
    seq = train(RunSpec(**base, engine="sequential"), tmp_path / "seq", data)
    kc = train(RunSpec(**base, engine="batched"), tmp_path / "kc", data)
    assert engine_used(tmp_path / "kc")["used"] == "batched"
    one_sample = 1 / len(data.test) + 1e-9
    assert metrics(tmp_path / "seq")["test_acc"].tolist() == pytest.approx(
        metrics(tmp_path / "kc")["test_acc"].tolist(), abs=one_sample
    )
    init = Run(RunSpec(**base), tmp_path / "init", log=lambda m: None, dataset=data)
    init.prepare()
    assert update_diff(seq.global_model, kc.global_model, init.global_model) <= 1e-3


@pytest.mark.parametrize("model", ["resnet8", "cnn"])
def test_folded_network_is_k_separate_networks(model, float64):
    """Outputs and gradients of the folded network equal K separate models'."""
    k = 3
    torch.manual_seed(0)
    nets = [build_model(model, 10, (3, 32, 32), projection_head=True) for _ in range(k)]
    folded = fold(nets[0], k)
    kinds = param_kinds(nets[0])
    tensors = {}
    for n, p in nets[0].named_parameters():
        stacked = torch.stack([dict(m.named_parameters())[n].detach() for m in nets])
        if kinds[n] == "linear_weight":
            stacked = stacked.transpose(1, 2)
        tensors[n] = stacked.reshape(folded_shape(p.shape, k, kinds[n])).clone()
    bind(folded, tensors, requires_grad=True)
    x = torch.randn(5, k, 3, 32, 32)
    f, logits = folded.features_and_logits(x.flatten(1, 2))
    assert logits.shape == (k, 5, 10) and f.shape[0] == k
    logits.square().sum().backward()
    for c, m in enumerate(nets):
        fc, lc = m.features_and_logits(x[:, c])
        assert torch.allclose(lc, logits[c], rtol=1e-10, atol=1e-12)
        assert torch.allclose(fc, f[c], rtol=1e-10, atol=1e-12)
        lc.square().sum().backward()
        for n, p in m.named_parameters():
            g = folded.get_parameter(n).grad
            g = g.view(k, *g.shape[1:]) if kinds[n].startswith("linear") else g.view(k, *p.shape)
            g = g[c].t() if kinds[n] == "linear_weight" else g[c]
            assert torch.allclose(p.grad, g, rtol=1e-9, atol=1e-12), n


def test_flat_optimizers_step_each_row_like_torch_and_leave_finished_rows_alone(float64):
    """Each row steps as torch's optimizer does on it alone; a finished row keeps its weights
    and state exactly, even where its gradient holds NaN and inf."""

    class Spec:
        lr, momentum, weight_decay = 0.1, 0.9, 1e-3

    torch.manual_seed(0)
    k, p = 3, 7
    start = torch.randn(k, p)
    grads = [torch.randn(k, p) for _ in range(4)]
    active = torch.tensor([[1.0, 1.0, 1.0]] * 2 + [[1.0, 0.0, 1.0]] * 2)  # row 1 stops after 2
    for cls, torch_opt in ((FlatSGD, torch.optim.SGD), (FlatAdam, torch.optim.Adam)):
        rows = start.clone()
        opt = cls(rows, Spec)
        coefs = opt.coefficients(active, Spec.lr)
        for t, g in enumerate(grads):
            g = g.clone()
            clip_rows_(g, 1.0)
            finished = active[t] == 0
            g[finished] = torch.nan  # a finished row's gradient never reaches it
            g[finished, 0] = torch.inf
            opt.step(rows, g, coefs[t], finished)
        for r in range(k):
            w = start[r].clone().requires_grad_()
            ref = torch_opt([w], lr=Spec.lr, weight_decay=Spec.weight_decay,
                            **({"momentum": Spec.momentum} if torch_opt is torch.optim.SGD else {}))  # fmt: skip
            for t, g in enumerate(grads):
                if active[t, r] == 0:
                    break
                w.grad = g[r].clone()
                torch.nn.utils.clip_grad_norm_([w], 1.0)
                ref.step()
            assert torch.allclose(rows[r], w.detach(), rtol=1e-12, atol=1e-14), (cls, r)
        assert torch.isfinite(rows).all()
        state = [opt.buf] if cls is FlatSGD else [opt.exp_avg, opt.exp_avg_sq]
        assert all(torch.isfinite(t).all() for t in state), cls


@pytest.mark.slow
def test_batched_step_stays_within_its_kernel_budget():
    """The op budget of one 4-client step of ResNet-8-GN (``fedkd bench --ops``): counts, not
    times, so the same on any machine."""
    from fedkd.tools.bench.ops import ops_report

    counts = dict(ops_report(["fedavg", "fedgkd"]))
    assert counts["fedavg"]["kernels"] <= 120 and counts["fedavg"]["syncs"] == 0
    assert counts["fedgkd"]["kernels"] <= 160 and counts["fedgkd"]["syncs"] == 0


def test_unsupported_models_and_settings_fall_back_with_a_reason():
    spec = RunSpec(engine="batched")
    cpu = torch.device("cpu")
    fedavg = get_strategy_class("fedavg")(None, None)
    assert (
        engine_choice(spec, fedavg, build_model("resnet8", 10, (3, 32, 32)), cpu)["used"]
        == "batched"
    )
    bn_model = build_model("resnet8", 10, (3, 32, 32), norm="batch")
    assert engine_choice(spec, fedavg, bn_model, cpu)["used"] == "batched"
    bn_model.stem[1].momentum = None  # a cumulative average: not the BatchNorm that folds
    bn = engine_choice(spec, fedavg, bn_model, cpu)
    assert bn["used"] == "sequential" and "BatchNorm stem.1" in bn["reason"]

    class NotDeclared(nn.Module):
        pass

    assert "not declared foldable" in fold_error(NotDeclared())
    compiled = engine_choice(RunSpec(engine="batched", compile="default"), fedavg,
                             build_model("cnn", 10, (1, 28, 28)), cpu)  # fmt: skip
    assert compiled["used"] == "sequential" and "compile" in compiled["reason"]
    seq = engine_choice(
        RunSpec(engine="sequential"), fedavg, build_model("cnn", 10, (1, 8, 8)), cpu
    )
    assert seq == {"requested": "sequential", "used": "sequential", "reason": None}
    auto_cpu = engine_choice(RunSpec(engine="auto"), fedavg, build_model("cnn", 10, (1, 8, 8)), cpu)
    assert auto_cpu["requested"] == "auto" and auto_cpu["used"] == "sequential"
    assert "CUDA" in auto_cpu["reason"]
    auto_cuda = engine_choice(RunSpec(engine="auto"), fedavg, build_model("cnn", 10, (1, 8, 8)),
                              torch.device("cuda"))  # fmt: skip
    assert auto_cuda["used"] == "batched" and auto_cuda["reason"] is None
    assert auto_cuda["cuda_graphs"] is True and auto_cuda["compile_step"] is True


def test_engine_and_stop_keys_are_validated_and_keep_existing_hashes():
    with pytest.raises(SpecError, match="engine"):
        RunSpec(engine="vmap")
    with pytest.raises(SpecError, match="stop_at_acc"):
        RunSpec(stop_at_acc=1.5)
    assert RunSpec(engine="sequential").hash() == RunSpec(engine="batched").hash()
    assert "engine" not in RunSpec().identity() and "stop_at_acc" not in RunSpec().identity()
    assert RunSpec(stop_at_acc=0.5).hash() != RunSpec().hash()


def test_stop_at_acc_ends_the_run_complete_and_counts_the_saved_rounds(tmp_path):
    data = data_for("cnn-mnist5k")
    base = dict(SMALL, **SHAPES["cnn-mnist5k"][0], rounds=4, stop_at_acc=0.01)
    record = train(RunSpec(**base, engine="batched"), tmp_path / "r", data).run()
    assert record["status"] == "complete"
    assert record["rounds_done"] == 1 and record["rounds_saved"] == 3
    assert len(metrics(tmp_path / "r")) == 1


KILLED_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    from test_trainers import SHAPES, SMALL, data_for
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    spec = RunSpec(**dict(SMALL, **SHAPES["resnet8-cifar"][0], rounds=3, strategy="moon",
                   engine="batched"))
    run = Run(spec, sys.argv[1], log=lambda msg: print(msg, file=sys.stderr, flush=True),
              dataset=data_for("resnet8-cifar"))
    run.run()
    torch.save(run.global_model.state_dict(), sys.argv[1] + "/final.pt")
    """
)


@pytest.mark.slow
def test_killed_batched_run_resumes_bit_identical(tmp_path):
    """A batched run (MOON: per-client state in the checkpoint) SIGKILLed after its first
    checkpoint, then started again, ends with the same metrics and bit-identical weights as an
    uninterrupted one."""
    script = tmp_path / "train.py"
    script.write_text(KILLED_SCRIPT.format(tests=str(Path(__file__).parent)))
    # a string-hash seed unlike this process's and the resuming one's: nothing may depend on it
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    spec = RunSpec(**dict(SMALL, **SHAPES["resnet8-cifar"][0], rounds=3, strategy="moon",
                          engine="batched"))  # fmt: skip
    full = train(spec, tmp_path / "full", data_for("resnet8-cifar"))
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=env,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "checkpoint.pt").exists():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(metrics(out)) < 3, "the run finished before it could be killed"
    env["PYTHONHASHSEED"] = "2"
    done = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    cols = ["round", "test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(metrics(tmp_path / "full")[cols], metrics(out)[cols])
    resumed = torch.load(out / "final.pt")
    for k, v in full.global_model.state_dict().items():
        assert torch.equal(v, resumed[k]), k
