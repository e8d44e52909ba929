"""The GPU defaults: ``engine: auto`` on CUDA is the batched trainer with CUDA graphs and the
compiled folded step (for runs long enough to repay it), ``batched`` graphs alone,
``batched-compiled`` graphs and the compiled step, ``batched-eager`` neither, and run.json says which is on and why not; a failed compile falls back to the eager step;
``precision: tf32`` computes on a CPU what ``fp32`` computes, and the papers' GPU configuration
asks for it.

The selection is tested with the device given as a ``torch.device("cuda")`` value (nothing runs
on it). The trainer's compile and its fallback run on the CPU with ``torch.compile`` replaced;
one slow test compiles the folded student with the real compiler (inductor's CPU backend) and
holds the run to the eager one.
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from fedkd.config import RunSpec, SpecError
from fedkd.engine import choice, compiled_step
from fedkd.engine.choice import engine_choice
from fedkd.engine.compiled_step import COMPILE_OFF_CUDA, GRAPHS_ONLY
from fedkd.engine.cuda_graphs import EAGER, GRAPHS_OFF_CUDA
from fedkd.engine.run import Run
from fedkd.models import build_model
from fedkd.pipeline.plan import Plan
from fedkd.run_paths import parse_run_dir
from fedkd.strategies import get_strategy_class
from small_runs import TINY

ROOT = Path(__file__).resolve().parents[1]
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
# a batched run of two rounds, two clients a round, on the CPU
BATCHED = dict(TINY, participation=0.1, rounds=2, engine="batched", memory_format="contiguous")


def choose(engine: str, device: torch.device) -> dict:
    fedavg = get_strategy_class("fedavg")(None, None)
    return engine_choice(RunSpec(engine=engine), fedavg, build_model("cnn", 10, (1, 8, 8)), device)


def test_on_cuda_engine_auto_runs_graphed_with_the_compiled_step():
    """The default: a run too short to repay the compile stays eager all the same, below."""
    assert choose("auto", CUDA) == {
        "requested": "auto", "used": "batched", "reason": None,
        "cuda_graphs": True, "cuda_graphs_reason": None,
        "compile_step": True, "compile_step_reason": None,
    }  # fmt: skip


def test_on_cuda_engine_batched_runs_graphed_without_the_compiled_step_and_says_so():
    assert choose("batched", CUDA) == {
        "requested": "batched", "used": "batched", "reason": None,
        "cuda_graphs": True, "cuda_graphs_reason": None,
        "compile_step": False, "compile_step_reason": GRAPHS_ONLY,
    }  # fmt: skip
    assert "engine auto" in GRAPHS_ONLY and "batched-compiled" in GRAPHS_ONLY


def test_batched_compiled_runs_graphed_and_compiled_on_cuda():
    assert choose("batched-compiled", CUDA) == {
        "requested": "batched-compiled", "used": "batched", "reason": None,
        "cuda_graphs": True, "cuda_graphs_reason": None,
        "compile_step": True, "compile_step_reason": None,
    }  # fmt: skip


def test_batched_eager_turns_graphs_and_compile_off_and_says_so():
    got = choose("batched-eager", CUDA)
    assert got["used"] == "batched" and got["reason"] is None
    assert (got["cuda_graphs"], got["cuda_graphs_reason"]) == (False, EAGER)
    assert (got["compile_step"], got["compile_step_reason"]) == (False, EAGER)
    assert "batched-eager" in EAGER


@pytest.mark.parametrize("engine", ["batched", "batched-eager", "batched-compiled"])
def test_off_cuda_the_batched_trainer_is_eager_with_the_reason(engine):
    got = choose(engine, CPU)
    assert got["used"] == "batched"
    assert (got["cuda_graphs"], got["cuda_graphs_reason"]) == (False, GRAPHS_OFF_CUDA)
    assert (got["compile_step"], got["compile_step_reason"]) == (False, COMPILE_OFF_CUDA)
    assert choose("auto", CPU)["used"] == "sequential"


def test_batched_eager_is_an_engine_value_outside_the_identity():
    assert (
        RunSpec(engine="batched-eager").hash()
        == RunSpec().hash()
        == RunSpec(engine="batched").hash()
    )
    with pytest.raises(SpecError, match="batched-eager"):
        RunSpec(engine="graphs")


def train(spec: RunSpec, out: Path) -> tuple[dict, list]:
    record = Run(spec, out, log=lambda msg: None).run()
    import pandas as pd

    metrics = pd.read_parquet(out / "metrics.parquet")
    return record, metrics[["test_acc", "test_loss", "train_loss"]].values.tolist()


def force_compile(monkeypatch, compile_function) -> None:
    """The batched trainer compiles on the CPU, through ``compile_function`` standing in for
    torch.compile (the real compiler is not what is tested)."""
    monkeypatch.setattr(choice, "compile_choice", lambda engine, device: (True, None))
    monkeypatch.setattr(compiled_step, "compile_function", compile_function)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 0)  # a short run compiles too


def test_a_short_run_stays_eager_and_says_why(monkeypatch, tmp_path):
    def unexpected(fn):
        raise AssertionError("a short run compiled")

    force_compile(monkeypatch, unexpected)
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 20_000)
    record, _ = train(RunSpec(**BATCHED), tmp_path / "r")
    reason = record["engine"]["compile_step_reason"]
    assert record["engine"]["compile_step"] is False
    assert re.fullmatch(
        r"the run has \d+ batched steps left to take, fewer than 20,000: compiling \(tens of "
        r"seconds\) would cost more than it saves",
        reason,
    ), reason


def test_the_compiled_step_is_tried_once_and_used_for_every_step(monkeypatch, tmp_path):
    eager_record, eager = train(RunSpec(**BATCHED), tmp_path / "eager")
    assert eager_record["engine"]["compile_step"] is False
    calls = {"compiled": 0, "called": 0}

    def counting(fn):
        calls["compiled"] += 1

        def wrapper(*args, **kwargs):
            calls["called"] += 1
            return fn(*args, **kwargs)

        return wrapper

    force_compile(monkeypatch, counting)
    record, compiled = train(RunSpec(**BATCHED), tmp_path / "compiled")
    engine = record["engine"]
    assert engine["compile_step"] is True and engine["compile_step_reason"] is None
    assert engine["compile_step_seconds"] >= 0
    assert calls["compiled"] == 1
    # the trial call, then every step of every round through the compiled forward
    assert calls["called"] > 1 + BATCHED["rounds"]
    # the trial before the first step changes nothing the run computes
    assert compiled == eager
    on_disk = json.loads((tmp_path / "compiled" / "run.json").read_text())["engine"]
    assert on_disk["compile_step"] is True


@pytest.mark.parametrize("where", ["compiling", "first call"])
def test_a_failed_compile_falls_back_to_the_eager_step_with_the_reason(
    where, monkeypatch, tmp_path
):
    _, eager = train(RunSpec(**BATCHED, seed=1), tmp_path / "eager")

    def broken(fn):
        if where == "compiling":
            raise RuntimeError("inductor is unavailable\nmore detail")

        def fails(*args, **kwargs):
            raise AssertionError("a guard failed")

        return fails

    force_compile(monkeypatch, broken)
    record, fallen_back = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    assert record["status"] == "complete"
    engine = json.loads((tmp_path / "run" / "run.json").read_text())["engine"]
    assert engine["compile_step"] is False
    message = (
        "RuntimeError: inductor is unavailable"
        if where == "compiling"
        else "AssertionError: a guard failed"
    )
    assert engine["compile_step_reason"] == (
        f"torch.compile failed ({message}); the batched step runs eagerly"
    )
    assert fallen_back == eager


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("g++") is None, reason="inductor's CPU backend needs a C++ compiler"
)
@pytest.mark.parametrize("norm", ["group", "batch"])
def test_the_real_compiler_builds_the_folded_student_and_the_run_follows_the_eager_one(
    norm, monkeypatch, tmp_path
):
    """torch.compile itself (inductor, on the CPU) of the folded ResNet-8 (GroupNorm, and
    BatchNorm, whose slot mask changes with a client's short last batch: compiled as a constant,
    it would be wrong there), forward and backward: grouped convolutions, the norms over the
    clients' channels, the folded linear layer, with fedgkd's teacher beside it. Compiled kernels
    sum in their own order, so the run follows the eager one to rounding, not bit for bit (seen:
    2e-6 relative after 2 rounds)."""
    spec = dict(BATCHED, model="resnet8", model_options={"norm": norm}, strategy="fedgkd")
    _, eager = train(RunSpec(**spec), tmp_path / "eager")
    force_compile(monkeypatch, compiled_step.compile_function)
    record, compiled = train(RunSpec(**spec), tmp_path / "compiled")
    engine = record["engine"]
    assert engine["compile_step"] is True, engine["compile_step_reason"]
    assert engine["compile_step_seconds"] > 0
    assert eager[0] != eager[1]  # it trained: the second round's numbers are not the first's
    for compiled_round, eager_round in zip(compiled, eager, strict=True):
        assert compiled_round == pytest.approx(eager_round, rel=1e-4)


# ---------------------------------------------------------------------------------- tf32
@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_tf32_computes_on_a_cpu_what_fp32_computes_and_is_recorded(engine, tmp_path, tf32_flags):
    base = dict(BATCHED, engine=engine)
    fp32_record, fp32 = train(RunSpec(**base, precision="fp32"), tmp_path / "fp32")
    tf32_record, tf32 = train(RunSpec(**base, precision="tf32"), tmp_path / "tf32")
    assert tf32 == fp32  # bit for bit: a CPU has no TF32
    assert tf32_record["precision"] == {
        "precision": "tf32", "autocast": None, "cudnn_allow_tf32": True,
        "cuda_matmul_allow_tf32": True, "float32_matmul_precision": "high",
    }  # fmt: skip
    assert fp32_record["precision"]["cudnn_allow_tf32"] is False
    # part of the run's identity: on a GPU the numbers differ
    assert tf32_record["spec_hash"] != fp32_record["spec_hash"]


def planned_precisions(config: str) -> set[str]:
    """The precision of every run the configuration plans, as its run spec resolves."""
    plan = Plan(yaml.safe_load((ROOT / "config" / config).read_text()))
    runs = [parse_run_dir(run) for run in plan.all_runs()]
    assert runs
    return {
        RunSpec(**plan.run_spec(r["dataset"], r["variant"], r["setting"], r["seed"])).precision
        for r in runs
    }


def test_the_papers_gpu_configuration_asks_for_tf32_and_the_cpu_one_for_fp32():
    assert planned_precisions("paper.yaml") == {"tf32"}
    assert planned_precisions("config.yaml") == {"fp32"}
