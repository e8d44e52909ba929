"""The batched engine on CUDA, with CUDA graphs (``engine: batched``), with graphs and its
compiled step (``batched-compiled``, and ``auto``, the default, for long runs) and without either
(``batched-eager``),
against the sequential engine. What each engine value turns on is read from where the engine
decides it (``expected_engine``), and a test that runs on every machine holds that to the
engine's choice on a CUDA device, so the GPU tests cannot expect something else.

Skipped without a GPU (``bash scripts/gpu-tests.sh`` on a CUDA machine runs it); with
``FEDKD_TEST_DEVICE=cpu`` (``bash scripts/gpu-tests.sh --device cpu``) the comparisons without
graphs run on the CPU and the graphed ones are skipped with the reason. Every strategy is compared
(all train on the batched trainer), with the server-side work kept small (feddf and moon in float64:
IN_FLOAT64 says why), and three on ResNet-8 with BatchNorm
in float64. On a GPU the recorded
runs are in bench/results.jsonl (rows h200-gpu-tests-2-*). The weights are compared relative to how
far training moved them, like tests/test_trainers.py, but the bound is looser: this setting trains 2 rounds of 2 local epochs (about 60 steps), over which float32 differences
in summation order grow. On a CPU in float32 the two trainers end 3e-2 to 4.5e-2 of the update
apart (fedavg, fedgkd, scaffold, moon), in float64 3e-15 (fedavg): the same computation, summed
in another order and amplified by training. GPU kernels (cuDNN's grouped convolutions, cuBLAS's
batched matmuls) sum in other orders again, so the bound is 0.1 of the update: it catches gross
faults (a client left out, a graph replaying stale buffers); tests/test_trainers.py's float64
and short float32 comparisons on a CPU catch the subtle ones.
"""

import json
from contextlib import contextmanager

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine import compiled_step
from fedkd.engine.choice import engine_choice
from fedkd.engine.compiled_step import compile_choice
from fedkd.engine.cuda_graphs import graphs_choice
from fedkd.engine.run import Run
from fedkd.models import build_model
from fedkd.strategies import get_strategy_class, strategy_names
from small_runs import SMALL_SERVER_PARAMS

pytestmark = pytest.mark.gpu  # the device fixture (tests/conftest.py) skips without a GPU

SMALL = dict(
    dataset="mnist5k", clients=8, participation=0.5, partition="dirichlet", alpha=0.5,
    local_epochs=2, rounds=2, batch_size=32, grad_clip=1.0, seed=3,
)  # fmt: skip


CUDA = torch.device("cuda")  # a value: nothing runs on it where there is no GPU
# the engine values the GPU tests run
GPU_ENGINES = ("batched-eager", "batched", "batched-compiled")


def expected_engine(engine: str, device: torch.device = CUDA) -> dict:
    """run.json's ``cuda_graphs`` and ``compile_step`` for ``engine`` on ``device``, as the engine
    decides them (the functions ``fedkd.engine.choice`` calls). A compiled step is expected where
    the run is long enough: the compiled tests make every run so (``COMPILE_MIN_STEPS`` 0)."""
    return {
        "cuda_graphs": graphs_choice(engine, device)[0],
        "compile_step": compile_choice(engine, device)[0],
    }


def test_the_gpu_tests_expect_the_engines_choices_on_cuda():
    """On any machine: for every engine value the GPU tests run, ``expected_engine`` is the
    engine's own choice on a CUDA device (``engine_choice``, given the device as a value), and
    ``batched-compiled`` is graphed and compiled, as docs/performance.md says."""
    fedavg = get_strategy_class("fedavg")(None, None)
    model = build_model("cnn", 10, (1, 28, 28))
    for engine in GPU_ENGINES:
        chosen = engine_choice(RunSpec(engine=engine), fedavg, model, CUDA)
        assert chosen["used"] == "batched", chosen
        assert expected_engine(engine) == {
            key: chosen[key] for key in ("cuda_graphs", "compile_step")
        }, engine
    assert expected_engine("batched-compiled") == {"cuda_graphs": True, "compile_step": True}
    assert expected_engine("batched-eager") == {"cuda_graphs": False, "compile_step": False}


def train(spec: RunSpec, out):
    run = Run(spec, out, log=lambda msg: None)
    record = run.run()
    return run, record, pd.read_parquet(out / "metrics.parquet")


def skip_without_cuda_graphs(device: str) -> None:
    if device != "cuda":
        pytest.skip("CUDA graphs need a CUDA device")


def max_abs_diff(a, b) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


def flat(model) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten().cpu() for t in model.state_dict().values()])


def update_diff(a, b, init) -> float:
    """||a - b|| / ||b - init||: how far apart two trainings ended, relative to how far they
    moved the model (tests/test_trainers.py)."""
    return float((flat(a) - flat(b)).norm() / (flat(b) - flat(init)).norm())


def compare_with_sequential(
    strategy: str, engine: str, device: str, tmp_path, bound: float = 0.1, **keys
) -> dict:
    """Train ``strategy`` through the sequential trainer and through ``engine`` (with run spec
    ``keys`` besides SMALL's), their weights at most ``bound`` of the update apart; returns the
    batched run's engine record."""
    base = dict(
        SMALL, strategy=strategy, device=device, params=SMALL_SERVER_PARAMS.get(strategy, {}),
        **keys,
    )  # fmt: skip
    seq, _, ms = train(RunSpec(engine="sequential", **base), tmp_path / "seq")
    bat, record, mb = train(RunSpec(engine=engine, **base), tmp_path / "bat")
    recorded = json.loads((tmp_path / "bat" / "run.json").read_text())["engine"]
    assert recorded["used"] == "batched", recorded["reason"]
    # graphs off where they were chosen on is a capture that failed: the reason says why
    want = expected_engine(engine, torch.device(device))
    assert recorded["cuda_graphs"] == want["cuda_graphs"], recorded.get("cuda_graphs_reason")
    assert record["status"] == "complete"
    init = Run(RunSpec(**base), tmp_path / "init", log=lambda msg: None)
    init.prepare()
    assert update_diff(seq.global_model, bat.global_model, init.global_model) <= bound
    # at most 1% of the test images apart; accuracies are counts over the test set, so exactly
    # 1% (0.91 - 0.90 = 0.010000000000000009 in floats) must pass
    assert (ms["test_acc"] - mb["test_acc"]).abs().max() <= 0.01 + 1e-9
    return recorded


@contextmanager
def default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


# Compared in float64, to rounding, where float32 rounding carries too far for the float32
# bounds: feddf's server distillation (Adam from the average, on noise; on a CPU 0.16 of the
# update apart after 2 rounds), and moon, whose contrastive term moved one H200 run's test
# accuracy 1.5 points from the sequential trainer's (batched-eager, weights within the bound)
IN_FLOAT64 = {"feddf", "moon"}


def compare(strategy: str, engine: str, device: str, tmp_path) -> dict:
    """``compare_with_sequential`` in float32, or in float64 for IN_FLOAT64's strategies."""
    if strategy not in IN_FLOAT64:
        return compare_with_sequential(strategy, engine, device, tmp_path)
    with default_dtype(torch.float64):
        return compare_with_sequential(strategy, engine, device, tmp_path, bound=1e-9)


@pytest.mark.parametrize("strategy", strategy_names())
@pytest.mark.parametrize("engine", ["batched-eager", "batched"])
def test_batched_on_cuda_matches_sequential(strategy, engine, device, tmp_path):
    """``batched``: on CUDA with CUDA graphs, without the compiled step (the next test compiles
    it), ``batched-eager`` without either."""
    if engine == "batched":
        skip_without_cuda_graphs(device)
    compare(strategy, engine, device, tmp_path)


@pytest.mark.parametrize("strategy", strategy_names())
def test_compiled_graphed_step_on_cuda_matches_sequential(strategy, device, tmp_path, monkeypatch):
    """``engine: batched-compiled``: CUDA graphs and the compiled folded step (compiled here
    whatever the run's length), for every strategy. A compile that fails is a finding: the
    run.json reason says why."""
    skip_without_cuda_graphs(device)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    recorded = compare(strategy, "batched-compiled", device, tmp_path)
    assert recorded["compile_step"] is expected_engine("batched-compiled")["compile_step"], (
        recorded["compile_step_reason"]
    )


@pytest.mark.parametrize("engine", ["batched", "batched-compiled"])
def test_a_decaying_rate_reaches_the_graphed_step(engine, device, tmp_path, monkeypatch):
    """lr_decay changes the optimizer's coefficients every round, which a captured step reads
    from its tables: graphed (and compiled) runs decay as the sequential one does."""
    skip_without_cuda_graphs(device)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    compare_with_sequential("scaffold", engine, device, tmp_path, lr_decay=0.5)


@pytest.mark.parametrize("compiled", [False, True])
def test_graphed_run_repeats_itself(compiled, device, tmp_path, monkeypatch):
    """``batched`` (graphs alone), and the default ``auto`` with the compiled step (here for a
    run of any length)."""
    skip_without_cuda_graphs(device)
    if compiled:
        monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    spec = RunSpec(
        engine="auto" if compiled else "batched", deterministic=True,
        **dict(SMALL, strategy="fedavg", device=device),
    )  # fmt: skip
    a, ra, ma = train(spec, tmp_path / "a")
    b, _, mb = train(spec, tmp_path / "b")
    assert ra["engine"]["cuda_graphs"] is True, ra["engine"]["cuda_graphs_reason"]
    assert ra["engine"]["compile_step"] is compiled, ra["engine"]["compile_step_reason"]
    assert max_abs_diff(a.global_model, b.global_model) == 0
    assert list(ma["test_acc"]) == list(mb["test_acc"])


def test_a_capture_that_fails_on_cuda_falls_back_to_the_eager_step(device, tmp_path, monkeypatch):
    """A real capture failure: the step syncs with the host while its stream captures, which
    CUDA refuses. The run completes on the eager step, run.json saying why, with the weights of
    a batched-eager run (the warm-up steps before the capture are eager steps too)."""
    skip_without_cuda_graphs(device)
    from fedkd.engine.batched import BatchedTrainer

    step = BatchedTrainer._step

    def syncing_step(self):
        if torch.cuda.is_current_stream_capturing():
            self.t.item()  # a host sync: not permitted while a stream captures
        step(self)

    monkeypatch.setattr(BatchedTrainer, "_step", syncing_step)
    base = dict(SMALL, strategy="fedavg", device=device, deterministic=True)
    eager, _, me = train(RunSpec(engine="batched-eager", **base), tmp_path / "eager")
    fallen, record, mf = train(RunSpec(engine="batched", **base), tmp_path / "graphs")
    engine = json.loads((tmp_path / "graphs" / "run.json").read_text())["engine"]
    assert record["status"] == "complete"
    assert engine["cuda_graphs"] is False
    assert engine["cuda_graphs_reason"].startswith("capturing the step as a CUDA graph failed (")
    assert max_abs_diff(eager.global_model, fallen.global_model) == 0
    assert list(me["test_acc"]) == list(mf["test_acc"])


@pytest.mark.parametrize("strategy", ["fedavg", "fedgkd", "moon"])
@pytest.mark.parametrize("engine", GPU_ENGINES)
def test_batchnorm_folds_on_cuda_as_it_trains_sequentially(
    strategy, engine, device, tmp_path, monkeypatch
):
    """ResNet-8 with BatchNorm (FedDF Table 1's model): each client's statistics over its own
    samples, its running statistics in the upload; with a shared frozen model's statistics
    (fedgkd's teacher) and a per-client one's (moon's previous model). In float64: in float32
    the early rounds of BatchNorm carry summation order into accuracy (fedavg on a CPU: 1.8
    points apart, weights 0.008 of the update), in float64 the trainers end 2.5e-12 apart."""
    if engine != "batched-eager":
        skip_without_cuda_graphs(device)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    bn = {"model": "resnet8", "model_options": {"norm": "batch"}}
    with default_dtype(torch.float64):
        compare_with_sequential(strategy, engine, device, tmp_path, bound=1e-9, **bn)


def test_an_fp32_run_after_a_tf32_run_in_the_same_process_computes_fp32(
    device, tmp_path, tf32_flags
):
    """Each run sets the process's TF32 flags from its own precision: an fp32 run after a tf32
    run in the same process (a benchmark, a test session) ends bit-identical to the fp32 run
    before it, and the tf32 run between them computes other numbers (TF32 took effect)."""
    if device != "cuda":
        pytest.skip("TF32 needs a CUDA device (on a CPU tf32 computes fp32's numbers)")
    base = dict(SMALL, strategy="fedavg", device=device, deterministic=True, engine="batched")
    before, _, mb = train(RunSpec(precision="fp32", **base), tmp_path / "before")
    tf32, record, _ = train(RunSpec(precision="tf32", **base), tmp_path / "tf32")
    after, _, ma = train(RunSpec(precision="fp32", **base), tmp_path / "after")
    assert record["precision"]["cuda_matmul_allow_tf32"] is True
    assert max_abs_diff(before.global_model, tf32.global_model) > 0
    assert max_abs_diff(before.global_model, after.global_model) == 0
    assert list(mb["test_acc"]) == list(ma["test_acc"])
