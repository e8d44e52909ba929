"""Checkpoints that detect their own corruption: a magic header and a SHA-256 of the payload."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch

MAGIC = b"FEDKDCK1"


class CheckpointCorruptError(RuntimeError):
    pass


def save_checkpoint(path: str | Path, obj: Any) -> None:
    """Write atomically (temporary file, fsync, rename) so a kill never leaves half a checkpoint."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + hashlib.sha256(data).digest() + data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> Any:
    """Read a checkpoint onto the CPU. Always the CPU: RNG states must stay CPU byte tensors,
    and model and strategy state are moved to the run's device by their owners on restore."""
    path = Path(path)
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
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
