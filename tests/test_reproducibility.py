"""Checkpoints restore on any device type; the deterministic switch; RNG capture and restore.

The GPU side of this (kill and resume on CUDA, bit-identical repeats) is tests/gpu/; these CPU
tests pin the rules it relies on: a checkpoint is read onto the CPU, RNG states stay CPU byte
tensors, and model and strategy state land on the run's device."""

import io
import random

import numpy as np
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import load_checkpoint, save_checkpoint
from fedkd.engine.reproducibility import capture_rng, configure_determinism, restore_rng
from fedkd.engine.run import Run

SMALL = dict(
    dataset="mnist5k", clients=10, participation=0.2, alpha=1.0, local_epochs=1, device="cpu"
)


def _draws():
    return (torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)])


def test_checkpoint_is_read_onto_the_cpu_and_its_rng_state_restores(tmp_path):
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    state = {"rng": capture_rng(torch.device("cpu")), "w": torch.ones(2)}
    expected = _draws()
    save_checkpoint(tmp_path / "c.pt", state)
    _draws()  # move every generator on
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert loaded["rng"]["torch"].device.type == "cpu"
    assert loaded["rng"]["torch"].dtype == torch.uint8
    restore_rng(loaded["rng"], torch.device("cpu"))
    assert _draws() == expected


def test_rng_states_read_onto_another_device_are_refused_by_torch_but_not_by_restore():
    """The failure a CUDA resume hit: torch.load(map_location=<device>) moved the CPU generator
    state off the CPU, and torch.set_rng_state refuses it. ``restore_rng`` takes any copy."""
    buf = io.BytesIO()
    torch.save({"torch": torch.get_rng_state()}, buf)
    buf.seek(0)
    # a float copy stands in for a state on another device: both fail the same check in torch
    wrong = torch.load(buf, map_location="cpu")["torch"].to(torch.float32)
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.set_rng_state(wrong)
    state = capture_rng(torch.device("cpu"))
    expected = torch.rand(4)
    state["torch"] = state["torch"].to(torch.float32)
    restore_rng(state, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)


def test_older_checkpoints_with_every_gpus_state_are_read():
    state = capture_rng(torch.device("cpu"))
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)]
    # on a CPU run the accelerator state is ignored, whatever its form
    restore_rng(state, torch.device("cpu"))


@pytest.mark.slow
def test_resume_places_model_and_strategy_state_on_the_run_device(tmp_path):
    spec = RunSpec(strategy="fedavgm", rounds=2, **SMALL)
    Run(spec, tmp_path / "r").run(stop_after_round=1)
    run = Run(spec, tmp_path / "r")
    run.prepare()
    saved = load_checkpoint(tmp_path / "r" / "checkpoint.pt")
    assert run._restore(saved) == (1, saved["rows"])
    assert all(p.device == run.device for p in run.global_model.parameters())
    assert all(v.device == run.device for v in run.strategy.velocity.values())
    assert torch.equal(torch.get_rng_state(), saved["rng"]["torch"])


def test_deterministic_is_validated_and_leaves_the_run_identity_alone():
    base = RunSpec(**SMALL)
    det = RunSpec(**SMALL, deterministic=True)
    assert det.hash() == base.hash(), "a run switched to deterministic kernels still resumes"
    assert det.to_dict()["deterministic"] is True  # recorded in run.json's spec
    with pytest.raises(ValueError, match="deterministic='yes' must be true or false"):
        RunSpec(**SMALL, deterministic="yes")


def test_configure_determinism_sets_and_unsets_the_flags():
    try:
        rec = configure_determinism(True, torch.device("cpu"))
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert rec["deterministic"] is True
    finally:
        rec = configure_determinism(False, torch.device("cpu"))
    assert not torch.are_deterministic_algorithms_enabled()
    assert rec["deterministic"] is False


@pytest.mark.slow
def test_deterministic_cpu_run_equals_the_default_run_and_is_recorded(tmp_path):
    import json

    import pandas as pd

    spec = RunSpec(strategy="fedavg", rounds=2, **SMALL)
    Run(spec, tmp_path / "a").run()
    try:
        Run(RunSpec(**{**spec.to_dict(), "deterministic": True}), tmp_path / "b").run()
    finally:
        configure_determinism(False, torch.device("cpu"))
    a = pd.read_parquet(tmp_path / "a" / "metrics.parquet")
    b = pd.read_parquet(tmp_path / "b" / "metrics.parquet")
    pd.testing.assert_series_equal(a["test_acc"], b["test_acc"])
    pd.testing.assert_series_equal(a["test_loss"], b["test_loss"])
    rec = json.loads((tmp_path / "b" / "run.json").read_text())
    assert rec["determinism"]["deterministic"] is True
