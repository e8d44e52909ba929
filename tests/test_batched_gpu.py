"""The batched engine on CUDA, with CUDA graphs and its compiled step (``engine: batched``, the
default there) and without either (``batched-eager``), against the sequential engine.

Skipped without a GPU (``bash scripts/gpu-tests.sh`` on a CUDA machine runs it); with
``FEDKD_TEST_DEVICE=cpu`` (``bash scripts/gpu-tests.sh --device cpu``) the comparisons without
graphs run on the CPU and the graphed ones are skipped with the reason. Every strategy is compared
(all train on the batched trainer), with the server-side work kept small; every strategy passed
on an H200 with and without graphs (2026-11-28, 877b17b: 31 passed), before the step was
compiled: the compiled step has not run on a GPU yet. The weights are compared
The weights are compared
relative to how far training moved them, like tests/test_trainers.py, but the bound is looser:
this setting trains 2 rounds of 2 local epochs (about 60 steps), over which float32 differences
in summation order grow. On a CPU in float32 the two trainers end 3e-2 to 4.5e-2 of the update
apart (fedavg, fedgkd, scaffold, moon), in float64 3e-15 (fedavg): the same computation, summed
in another order and amplified by training. GPU kernels (cuDNN's grouped convolutions, cuBLAS's
batched matmuls) sum in other orders again, so the bound is 0.1 of the update: it catches gross
faults (a client left out, a graph replaying stale buffers); tests/test_trainers.py's float64
and short float32 comparisons on a CPU catch the subtle ones.
"""

import json

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine import compiled_step
from fedkd.engine.run import Run
from fedkd.strategies import strategy_names
from small_runs import SMALL_SERVER_PARAMS

pytestmark = pytest.mark.gpu  # the device fixture (tests/conftest.py) skips without a GPU

SMALL = dict(
    dataset="mnist5k", clients=8, participation=0.5, partition="dirichlet", alpha=0.5,
    local_epochs=2, rounds=2, batch_size=32, grad_clip=1.0, seed=3,
)  # fmt: skip


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


def compare_with_sequential(strategy: str, engine: str, device: str, tmp_path) -> dict:
    """Train ``strategy`` through the sequential trainer and through ``engine``; returns the
    batched run's engine record."""
    base = dict(
        SMALL, strategy=strategy, device=device, params=SMALL_SERVER_PARAMS.get(strategy, {})
    )
    seq, _, ms = train(RunSpec(engine="sequential", **base), tmp_path / "seq")
    bat, record, mb = train(RunSpec(engine=engine, **base), tmp_path / "bat")
    recorded = json.loads((tmp_path / "bat" / "run.json").read_text())["engine"]
    assert recorded["used"] == "batched" and recorded["cuda_graphs"] == (engine == "batched")
    assert record["status"] == "complete"
    init = Run(RunSpec(**base), tmp_path / "init", log=lambda msg: None)
    init.prepare()
    assert update_diff(seq.global_model, bat.global_model, init.global_model) <= 0.1
    # at most 1% of the test images apart; accuracies are counts over the test set, so exactly
    # 1% (0.91 - 0.90 = 0.010000000000000009 in floats) must pass
    assert (ms["test_acc"] - mb["test_acc"]).abs().max() <= 0.01 + 1e-9
    return recorded


@pytest.mark.parametrize("strategy", strategy_names())
@pytest.mark.parametrize("engine", ["batched-eager", "batched"])
def test_batched_on_cuda_matches_sequential(strategy, engine, device, tmp_path):
    """``batched``: on CUDA with CUDA graphs (a 2-round run is too short to compile its step:
    the next test compiles it), ``batched-eager`` without."""
    if engine == "batched":
        skip_without_cuda_graphs(device)
    compare_with_sequential(strategy, engine, device, tmp_path)


# one strategy of each kind of declaration: none, a shared model, per-client tensors, a
# per-client model and a shared one
COMPILED = ["fedavg", "fedgkd", "scaffold", "moon"]


@pytest.mark.parametrize("strategy", COMPILED)
def test_compiled_graphed_step_on_cuda_matches_sequential(strategy, device, tmp_path, monkeypatch):
    """``engine: batched-compiled``: CUDA graphs and the compiled folded step (compiled here
    whatever the run's length). A compile that fails is a finding: the run.json reason says why."""
    skip_without_cuda_graphs(device)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    recorded = compare_with_sequential(strategy, "batched-compiled", device, tmp_path)
    assert recorded["compile_step"] is True, recorded["compile_step_reason"]


@pytest.mark.parametrize("compiled", [False, True])
def test_graphed_run_repeats_itself(compiled, device, tmp_path, monkeypatch):
    skip_without_cuda_graphs(device)
    if compiled:
        monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)
    spec = RunSpec(
        engine="batched-compiled" if compiled else "batched", deterministic=True,
        **dict(SMALL, strategy="fedavg", device=device),
    )  # fmt: skip
    a, ra, ma = train(spec, tmp_path / "a")
    b, _, mb = train(spec, tmp_path / "b")
    assert ra["engine"]["compile_step"] is compiled
    assert max_abs_diff(a.global_model, b.global_model) == 0
    assert list(ma["test_acc"]) == list(mb["test_acc"])
