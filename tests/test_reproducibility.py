"""Checkpoints restore on any device type; the deterministic switch; the TF32 policy; RNG capture
and restore; the command recorded in run.json.

The GPU side of this (kill and resume on CUDA, bit-identical repeats) is tests/gpu/; these CPU
tests pin the rules it relies on: a checkpoint is read onto the CPU, RNG states stay CPU byte
tensors, and model and strategy state land on the run's device."""

import io
import json
import os
import random
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import load_checkpoint, save_checkpoint
from fedkd.engine.reproducibility import (
    capture_rng,
    configure_determinism,
    configure_precision,
    restore_rng,
)
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
    expected = _draws()
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)]
    _draws()  # move every generator on
    # on a CPU run the accelerator state is ignored, whatever its form; the rest is restored
    restore_rng(state, torch.device("cpu"))
    assert _draws() == expected


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


@pytest.mark.parametrize("deterministic", [False, True])
def test_tf32_follows_the_precision_for_convolutions_and_matmuls_alike(deterministic, tf32_flags):
    """fp32 is IEEE float32 (TF32 off, deterministic or not); tf32 asks for TF32; bf16 lets the
    float32 leftovers use TF32. Each call sets both flags either way, so no run inherits the
    previous run's."""
    configure_determinism(deterministic, torch.device("cpu"))
    sequence = ("bf16", "fp32", "tf32", "fp32", "bf16", "tf32", "bf16", "fp32")
    try:
        for precision in sequence:
            tf32 = precision != "fp32"
            rec = configure_precision(precision)
            assert torch.backends.cudnn.allow_tf32 is tf32
            assert torch.backends.cuda.matmul.allow_tf32 is tf32
            assert rec == {
                "precision": precision,
                "autocast": "bfloat16" if precision == "bf16" else None,
                "cudnn_allow_tf32": tf32,
                "cuda_matmul_allow_tf32": tf32,
                "float32_matmul_precision": "high" if tf32 else "highest",
            }
    finally:
        configure_determinism(False, torch.device("cpu"))


def test_the_precision_is_set_and_recorded_after_code_that_used_torchs_legacy_setter():
    """A process where other code (a strategy module of one's own, a notebook) called
    ``torch.set_float32_matmul_precision``: torch 2.9 and later refuse to read the precision
    back through the legacy getter, and a run must neither fail nor keep that code's TF32."""
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("torch before 2.9 has one precision API only")
    probe = (
        "import json, torch\n"
        "torch.set_float32_matmul_precision('high')\n"
        "from fedkd.engine.reproducibility import configure_precision\n"
        "print(json.dumps([configure_precision('fp32'), configure_precision('tf32')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    fp32, tf32 = json.loads(out.stdout)
    assert (fp32["cudnn_allow_tf32"], fp32["cuda_matmul_allow_tf32"]) == (False, False)
    assert (tf32["cudnn_allow_tf32"], tf32["cuda_matmul_allow_tf32"]) == (True, True)
    assert fp32["float32_matmul_precision"] == "ieee" and tf32["float32_matmul_precision"] == "high"


def test_an_unknown_precision_is_refused_by_the_policy(tf32_flags):
    with pytest.raises(ValueError, match="precision='tf16'; use one of fp32, tf32, bf16"):
        configure_precision("tf16")


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_the_run_record_holds_the_tf32_settings_and_a_command_a_shell_gives_back(
    precision, tmp_path, monkeypatch, tf32_flags
):
    # the opposite of what the run must set, so a run that set nothing would fail
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision == "fp32"
    argv = ["fedkd", "train", "--out", str(tmp_path / "a b"), "--set", "params={mu: 0.5}",
            "--label", "note=it's $HOME"]  # fmt: skip
    monkeypatch.setattr(sys, "orig_argv", argv)
    run = Run(RunSpec(rounds=1, precision=precision, **SMALL), tmp_path / "r")
    run.prepare()
    rec = json.loads(json.dumps(run._run_record("running")))  # as run.json holds it
    tf32 = precision != "fp32"
    assert rec["precision"]["cudnn_allow_tf32"] is tf32
    assert rec["precision"]["cuda_matmul_allow_tf32"] is tf32
    assert rec["precision"]["precision"] == precision
    assert shlex.split(rec["command"]) == argv


def test_each_attempt_that_trained_rounds_a_run_keeps_is_recorded():
    """A run resumed (on any device) keeps, per earlier attempt, the round it trained through
    and its device, precision, engine, determinism, versions, command and working directory; an attempt
    that trained no round the checkpoint keeps is not listed."""
    from fedkd.engine.run import earlier_attempts

    first = {"device": {"type": "cuda"}, "precision": {"precision": "tf32"}, "engine": {"used": "batched"},
             "determinism": {"memory_format": "contiguous"}, "versions": {"torch": "2.13"},
             "command": "fedkd train a", "cwd": "/w"}  # fmt: skip
    after_first = earlier_attempts(first, 3)
    assert after_first == [{"rounds_through": 3, **first}]
    second = {**first, "device": {"type": "cpu"}, "earlier_attempts": after_first}
    after_second = earlier_attempts(second, 5)
    assert [a["rounds_through"] for a in after_second] == [3, 5]
    assert after_second[1]["device"] == {"type": "cpu"}
    failed = {**first, "earlier_attempts": after_second}  # trained nothing past round 5
    assert earlier_attempts(failed, 5) == after_second
    assert earlier_attempts({"earlier_attempts": "damaged"}, 0) == []


def test_a_resume_names_each_change_of_arithmetic_and_what_restores_it():
    """Engine, memory format, device and CPU kernels are left out of a run's identity, so a
    run resumes under others; each changes the numbers, and the resume's warning names the
    rounds trained otherwise and the flags that give an uninterrupted run's numbers. A key an
    older record lacks is not compared."""
    from fedkd.engine.run import changed_arithmetic

    def record(engine, layout, capability="AVX512", variables=None):
        device = {"name": "cpu (x)", "threads": 1, "cpu_capability": capability,
                  "kernel_environment": variables or {}}  # fmt: skip
        determinism = {"memory_format": layout, "deterministic": False}
        return {"device": device, "engine": {"used": engine}, "determinism": determinism}

    now = record("batched", "contiguous")
    attempts = [{"rounds_through": 2, **record("sequential", "channels_last")},
                {"rounds_through": 5, **record("batched", "contiguous", "AVX2",
                                               {"DNNL_MAX_CPU_ISA": "AVX2"})}]  # fmt: skip
    said = changed_arithmetic(attempts, now)
    assert "engine batched now, sequential for rounds 1-2" in said, said
    assert "memory format contiguous now, channels_last for rounds 1-2" in said, said
    assert "CPU kernels AVX512 now, AVX2 for rounds 3-5" in said, said
    assert "kernel variables none now, DNNL_MAX_CPU_ISA=AVX2 for rounds 3-5" in said, said
    assert "with --engine sequential and with --memory-format channels_last and " in said, said
    assert "torch threads" not in said and "device cpu" not in said, said
    assert changed_arithmetic([{"rounds_through": 2, **now}], now) == ""
    # another torch, CUDA runtime or cuDNN has other kernels: named, with the version to restore
    versions = {"torch": "2.13.0", "cuda": "12.8", "cudnn": "91002"}
    upgraded = {**now, "versions": {**versions, "torch": "2.14.0", "cudnn": "91100"}}
    said = changed_arithmetic([{"rounds_through": 4, **now, "versions": versions}], upgraded)
    assert "torch 2.14.0 now, 2.13.0 for rounds 1-4" in said, said
    assert "cuDNN 91100 now, 91002 for rounds 1-4" in said, said
    assert "CUDA" not in said and "with torch 2.13.0 and with cuDNN 91002" in said, said
    older = {"rounds_through": 2, "device": {"name": "cpu (x)"}, "engine": {"used": "batched"}}
    assert changed_arithmetic([older], now) == ""


def test_the_run_record_identifies_the_data_and_the_partition_it_trained_on(tmp_path):
    """run.json's ``dataset.sha256`` is the digest of the splits as loaded (one pixel changes
    it) and ``partition_sha256`` that of the clients' sample assignment (another seed's
    differs): a run's record names the data it trained on, not only the dataset's name."""
    from fedkd.data import load_dataset
    from fedkd.data.partition import draw_partition, write_partition

    def record(seed, **keys):
        run = Run(RunSpec(rounds=1, seed=seed, **SMALL, **keys), tmp_path / f"r{seed}")
        run.prepare()
        return json.loads(json.dumps(run._run_record("running")))

    rec = record(0)
    ds = load_dataset("mnist5k", seed=0)
    assert ds.describe()["sha256"] == rec["dataset"]["sha256"]
    ds.train.x[0, 0, 0, 0] ^= 1
    assert ds.describe()["sha256"] != rec["dataset"]["sha256"]
    assert len(rec["partition_sha256"]) == 64
    assert record(1)["partition_sha256"] != rec["partition_sha256"]
    file = tmp_path / "partition.parquet"
    write_partition(file, *draw_partition("mnist5k", "dirichlet-equal", 10, 0, alpha=1.0))
    assert record(0, partition_file=str(file))["partition_sha256"] == rec["partition_sha256"]


def test_the_run_record_names_the_cpu_kernels_that_decide_the_numbers(tmp_path):
    """One machine gives other float32 numbers under another ATen instruction set or oneDNN
    ISA limit (ATEN_CPU_CAPABILITY=avx2, DNNL_MAX_CPU_ISA=AVX2 on an AVX-512 CPU move a 3-round
    run's test loss), and two CPU models do too: run.json names the CPU model, the instruction
    set torch dispatched for, and the kernel variables the process was started with."""
    from fedkd.provenance import KERNEL_VARIABLES, cpu_model

    probe = (
        "import json, sys\n"
        "from fedkd.config import RunSpec\n"
        "from fedkd.engine.run import Run\n"
        f"run = Run(RunSpec(rounds=1, **{SMALL!r}), sys.argv[1])\n"
        "run.prepare()\n"
        "print(json.dumps(run._run_record('running')['device']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    steered = {"ATEN_CPU_CAPABILITY": "default", "DNNL_MAX_CPU_ISA": "SSE41"}
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "r")],
        env={**env, **steered}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    device = json.loads(out.stdout)
    assert device["cpu_capability"] == "DEFAULT"
    assert device["kernel_environment"] == steered
    assert device["name"] == f"cpu ({cpu_model()})"
    here = Run(RunSpec(rounds=1, **SMALL), tmp_path / "here")
    here.prepare()
    assert here._run_record("running")["device"]["cpu_capability"] == (
        torch.backends.cpu.get_cpu_capability()
    )


def test_the_run_record_names_the_nvidia_driver(tmp_path):
    """``versions.nvidia_driver`` is read from the driver's own file, in the formats of its
    proprietary and open kernel modules; "none" where there is no driver, as on this CPU."""
    from fedkd.provenance import nvidia_driver

    closed = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    )
    opened = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
        "(dvs-builder@U16-I3-C04-3-2)  Thu Jan 16 21:40:14 UTC 2025\nGCC version:  gcc 12.3.0\n"
    )
    for text, version in ((closed, "550.54.15"), (opened, "570.86.15"), ("garbled\n", "unknown")):
        (tmp_path / "version").write_text(text)
        assert nvidia_driver(tmp_path / "version") == version
    assert nvidia_driver(tmp_path / "absent") == "none"
    run = Run(RunSpec(rounds=1, **SMALL), tmp_path / "r")
    run.prepare()
    assert run._run_record("running")["versions"]["nvidia_driver"] == nvidia_driver()
