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


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> Any:
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
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
