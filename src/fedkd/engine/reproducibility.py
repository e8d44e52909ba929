"""Random-number state in checkpoints, deterministic kernels on GPUs, and the float32 arithmetic
of GPU convolutions and matmuls (TF32 or not).

A checkpoint is always read onto the CPU (``load_checkpoint``): RNG states are CPU byte tensors
whatever device the run uses, and each generator is put back where it lives here. Model and
strategy state are placed by their owners (``load_state_dict`` copies into the device's
parameters; strategies move their state to ``ctx.device``), so a run saved on one device type
resumes on another.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from fedkd.config import PRECISIONS

# cuBLAS needs a fixed workspace for reproducible GEMMs; it reads the variable when its handle is
# created, so it is set before the run's first CUDA operation
CUBLAS_WORKSPACE = ":4096:8"


def capture_rng(device: torch.device) -> dict[str, Any]:
    """Every generator a run draws from: Python, NumPy, torch's CPU generator and the default
    generator of the run's accelerator (only that one: a retried job may see other GPUs)."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": _numpy_state(),
        "python": random.getstate(),
        "cuda": None,
        "mps": None,
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    elif device.type == "mps":
        state["mps"] = torch.mps.get_rng_state()
    return state


def _numpy_state() -> tuple:
    # plain data for a checkpoint (fedkd.engine.checkpoint): the key array as a tensor
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))


def _set_numpy_state(state) -> None:
    name, keys, pos, has_gauss, cached = state
    if isinstance(keys, torch.Tensor):
        keys = keys.numpy()
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _byte_tensor(t: torch.Tensor) -> torch.Tensor:
    # the setters accept only CPU uint8 tensors; a checkpoint read with another map_location
    # (or written by an older version) may hold them elsewhere
    return t.detach().to("cpu", torch.uint8)


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Put the generators back. Accelerator state is restored only on the same device type (a
    run moved between CPU and GPU continues with the CPU-side generators, which drive client
    sampling, shuffling and initialisation)."""
    torch.set_rng_state(_byte_tensor(state["torch"]))
    _set_numpy_state(state["numpy"])
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda is not None and device.type == "cuda":
        if isinstance(cuda, (list, tuple)):  # older checkpoints saved every visible GPU's state
            cuda = cuda[device.index or 0] if len(cuda) > (device.index or 0) else None
        if cuda is not None:
            torch.cuda.set_rng_state(_byte_tensor(cuda), device)
    mps = state.get("mps")
    if mps is not None and device.type == "mps":
        torch.mps.set_rng_state(_byte_tensor(mps))


def configure_determinism(enabled: bool, device: torch.device) -> dict[str, Any]:
    """Switch deterministic kernels on or off for this process; returns what was set (recorded
    in run.json). On the CPU the engine's kernels repeat bit for bit either way."""
    if enabled and device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    # the call imports torch._dynamo (a noticeable part of a job's start-up): made only on a change
    if torch.are_deterministic_algorithms_enabled() != enabled:
        torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    # autotuned convolutions where results may vary run to run anyway
    torch.backends.cudnn.benchmark = device.type == "cuda" and not enabled
    return {
        "deterministic": enabled,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def tf32_allowed(precision: str) -> bool:
    """The TF32 policy, one rule for cuDNN convolutions and cuBLAS matmuls alike.

    ``fp32`` (the default) is IEEE float32 on every device: TF32 off, whether or not the run is
    ``deterministic`` (TF32 kernels repeat too: determinism is not the question, the numbers
    are). TF32 keeps 10 of float32's 23 mantissa bits (with it emulated on a CPU, a 2-round run
    of tests/test_batched_gpu.py moved by 1.3e-2). ``tf32`` asks for it: TF32 convolutions and
    matmuls on a GPU that has them (NVIDIA Ampere and later), float32 everywhere else; a CPU has
    no TF32, so there it computes what ``fp32`` computes (tested). It is a precision of its own,
    part of a run's identity, because on a GPU its numbers differ from ``fp32``'s.
    ``bf16`` already trains under bfloat16 autocast (8 mantissa bits): the float32 convolutions
    and matmuls left outside autocast may then use TF32 too."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision in ("tf32", "bf16")


def configure_precision(precision: str) -> dict[str, Any]:
    """Set the process's TF32 flags by ``tf32_allowed`` and return the effective settings (read
    back from torch, recorded in run.json). Only the CUDA flags are set: CPU arithmetic is
    float32 either way. Set on every device, so a process never carries one run's flags into
    the next. Set through ``allow_tf32``, which every torch from 2.3 on has (newer ones keep it
    in step with their ``fp32_precision`` settings; mixing the two APIs in one process is an
    error there, so this module uses only the one)."""
    allowed = tf32_allowed(precision)
    torch.backends.cudnn.allow_tf32 = allowed
    torch.backends.cuda.matmul.allow_tf32 = allowed
    return {
        "precision": precision,
        "autocast": "bfloat16" if precision == "bf16" else None,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": _matmul_precision(),
    }


def _matmul_precision() -> str | None:
    """torch's float32 matmul precision, as it reads it back: its legacy getter refuses to
    answer in a process that set it through both APIs (torch 2.9 and later; a strategy module of
    one's own may have called ``torch.set_float32_matmul_precision``), where the new one does."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return getattr(torch.backends.cuda.matmul, "fp32_precision", None)
