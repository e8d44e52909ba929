"""Checkpoints that detect their own corruption (a magic header and a SHA-256 of the payload) and
hold nothing but data: tensors, and dicts, lists, tuples, strings, numbers, booleans and None.

The SHA-256 detects accidents, it authenticates nothing, so a checkpoint is read with torch's
``weights_only`` unpickler, which builds only those types: a crafted file cannot run code. What a
run saves is checked against the same types before it is written (``check_plain``), so a
strategy that put another object into its state fails at its first checkpoint, not on resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from fedkd.files import UnreadableFileError, atomic_write, check_regular_file

MAGIC = b"FEDKDCK1"
_PLAIN_SCALARS = (str, int, float, bool, type(None), bytes)


class CheckpointCorruptError(RuntimeError):
    pass


class CheckpointUnsafeError(CheckpointCorruptError):
    """A checkpoint with objects other than tensors and plain data: refused, never unpickled."""


def _legacy_numpy_globals() -> list:
    # checkpoints written before RNG states were plain hold NumPy's generator state as a uint32
    # array; these rebuild a plain array (numbers, no code) and are all they may add
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # NumPy 1
        from numpy.core.multiarray import _reconstruct
    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def check_plain(obj: Any, where: str = "checkpoint") -> None:
    """Raise TypeError naming the first entry of ``obj`` that is not a tensor or plain data."""
    if isinstance(obj, torch.Tensor) or isinstance(obj, _PLAIN_SCALARS):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has a key {key!r} of type {type(key).__name__}")
            check_plain(value, f"{where}[{key!r}]")
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}; a checkpoint holds only "
        f"tensors, dicts, lists, tuples, strings, numbers, booleans and None"
    )


def save_checkpoint(path: str | Path, obj: Any) -> None:
    """Write atomically (temporary file, fsync, rename) so a kill never leaves half a checkpoint,
    and a failed write (a full disk) leaves the previous one and no temporary file."""
    check_plain(obj)
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()

    def write(file) -> None:
        file.write(MAGIC + hashlib.sha256(data).digest() + data)
        file.flush()
        os.fsync(file.fileno())

    atomic_write(Path(path), write)


def load_checkpoint(path: str | Path) -> Any:
    """Read a checkpoint onto the CPU. Always the CPU: RNG states must stay CPU byte tensors,
    and model and strategy state are moved to the run's device by their owners on restore."""
    path = Path(path)
    try:  # a FIFO or device in its place would block the read or never end it
        check_regular_file(path, "a checkpoint")
    except UnreadableFileError as exc:
        raise CheckpointCorruptError(
            f"{exc}; it was not used. Delete it to restart this run from round 0."
        ) from None
    raw = path.read_bytes()
    head, digest, data = (
        raw[: len(MAGIC)],
        raw[len(MAGIC) : len(MAGIC) + 32],
        raw[len(MAGIC) + 32 :],
    )
    if head != MAGIC or hashlib.sha256(data).digest() != digest:
        raise CheckpointCorruptError(
            f"checkpoint {path} is corrupt (bad header or checksum); it was not used. "
            f"Delete it to restart this run from round 0, or restore it from a backup."
        )
    # torch before 2.5 has no safe_globals: there a legacy checkpoint is refused as unsafe
    allow = getattr(torch.serialization, "safe_globals", None)
    try:
        with allow(_legacy_numpy_globals()) if allow else contextlib.nullcontext():
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = str(exc).splitlines()
        found = next((line.strip() for line in reason if "GLOBAL" in line), reason[0][:200])
        raise CheckpointUnsafeError(
            f"checkpoint {path} holds objects other than tensors and plain data ({found}); it "
            f"was not loaded, as loading it could run code. A fedkd run never writes such a "
            f"file: delete it to restart this run from round 0, or restore it from a backup."
        ) from None
