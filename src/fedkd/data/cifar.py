"""CIFAR-10/100 from the official "python version" (pickled batches), as a folder or the tar.gz
archive (extracted once next to it); the pickles are read with an allow-list unpickler, so a
tampered file cannot run code, and are held to the official files' shapes (3,072 bytes an image,
at most 10,000 images a batch, 50,000 in CIFAR-100's train file) before any array is made, so a
crafted few-byte file cannot declare a huge one."""

from __future__ import annotations

import io
import math
import pickle
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
from fedkd.data.download import extract_archive, fetch_or_explain
from fedkd.files import UnreadableFileError, read_regular_file

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
CIFAR = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "archive": "cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "images_per_file": 10_000,  # each train batch and the test batch
        "meta": "batches.meta",
        "names_key": "label_names",
        "labels_key": "labels",
        "num_classes": 10,
        # normalisation constants of the FedGKD (and FedDF) code's CIFAR loader
        "mean": (0.4914, 0.4822, 0.4465),
        "std": (0.2023, 0.1994, 0.2010),
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "archive": "cifar-100-python.tar.gz",
        "md5": "eb9058c3a382ffc7106e4002c42a8d85",
        "train": ["train"],
        "test": ["test"],
        "images_per_file": {"train": 50_000, "test": 10_000},
        "meta": "meta",
        "names_key": "fine_label_names",
        "labels_key": "fine_labels",
        "num_classes": 100,
        "mean": (0.5071, 0.4867, 0.4408),
        "std": (0.2675, 0.2565, 0.2761),
    },
}


try:  # numpy 2 moved it; the old name only warns
    from numpy._core.multiarray import scalar as _np_scalar
except ImportError:  # numpy 1
    from numpy.core.multiarray import scalar as _np_scalar

IMAGE_BYTES = 3 * 32 * 32
# a batch file is its images' bytes, in a pickle of at most twice that (a byte string written as
# UTF-8 text), plus labels and file names (about 300 KB in the official files)
PICKLE_SLACK = 4 << 20
MAX_META_BYTES = 1 << 20
MAX_SCALAR_BYTES = 16


class _ArrayType:
    """What the unpickler gives for ``numpy.ndarray``: the official pickles name it only as the
    type ``_reconstruct`` makes, and calling ``numpy.ndarray(shape)`` would allocate any size."""

    def __new__(cls, *args):
        raise pickle.UnpicklingError(
            f"refusing to call numpy.ndarray{args!r}: an array of any size from a few bytes"
        )


class _SafeUnpickler(pickle.Unpickler):
    """Only what the official CIFAR pickles (Python 2 + numpy, or Python 3) reference, and no
    array of more than ``max_array_bytes``: ``_reconstruct`` checks the shape it is asked for
    before it allocates (the official files ask for an empty array and fill it from the bytes
    they hold, which numpy checks against the shape)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def __init__(self, file, max_array_bytes: int, **kwargs):
        super().__init__(file, **kwargs)
        self.max_array_bytes = max_array_bytes

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        if name == "ndarray":
            return _ArrayType
        if name == "_reconstruct":
            return self._reconstruct
        if name == "dtype":
            return _numeric_dtype
        if name == "scalar":
            return _small_scalar
        return super().find_class(module, name)

    def _reconstruct(self, subtype, shape, dtype):
        if subtype is not _ArrayType:
            raise pickle.UnpicklingError(f"refusing to make a {subtype!r} array")
        if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise pickle.UnpicklingError(f"refusing an array of shape {shape!r}")
        size = math.prod(shape) * _numeric_dtype(dtype).itemsize
        if size > self.max_array_bytes:
            raise pickle.UnpicklingError(
                f"an array of shape {shape} ({size:,} bytes) is larger than any array of the "
                f"official file ({self.max_array_bytes:,} bytes)"
            )
        return np.ndarray(shape, _numeric_dtype(dtype))


def _numeric_dtype(*args) -> np.dtype:
    """A dtype of numbers only: the official arrays are uint8 (an object or void dtype could
    stand for anything, of any size)."""
    dtype = np.dtype(*args)
    if dtype.kind not in "biuf":
        raise pickle.UnpicklingError(f"refusing an array of dtype {dtype}")
    return dtype


def _small_scalar(dtype, data=None):
    dtype = _numeric_dtype(dtype)
    if dtype.itemsize > MAX_SCALAR_BYTES:
        raise pickle.UnpicklingError(f"refusing a scalar of dtype {dtype}")
    return _np_scalar(dtype, data) if data is not None else _np_scalar(dtype)


def _str(v) -> str:
    return v.decode("latin1") if isinstance(v, bytes) else str(v)


def _read_cifar_pickle(path: Path, max_array_bytes: int, max_file_bytes: int) -> dict:
    again = "delete the folder and place the official archive again"
    try:
        raw = read_regular_file(path, "a CIFAR file", max_file_bytes)
    except UnreadableFileError as exc:
        raise DatasetCorruptError(f"{exc}; {again}") from None
    try:
        # latin1: the official files are Python 2 pickles (numpy arrays need it)
        unpickler = _SafeUnpickler(io.BytesIO(raw), max_array_bytes, encoding="latin1")
        obj = unpickler.load()
    except Exception as exc:
        raise DatasetCorruptError(
            f"{path} is not a readable CIFAR batch ({type(exc).__name__}: {exc}); {again}"
        ) from exc
    if not isinstance(obj, dict):
        raise DatasetCorruptError(f"{path} does not hold a CIFAR batch dictionary; delete it")
    return {_str(k): v for k, v in obj.items()}


def _cifar_arrays(folder: Path, files: list[str], info: dict):
    """The images and labels of ``files``, each file held to at most ``info["images_per_file"]``
    images (an int, or {file: count}) of 3,072 bytes, with a label of its classes each."""
    labels_key, images_per_file = info["labels_key"], info["images_per_file"]
    xs, ys = [], []
    for name in files:
        path = folder / name
        if not path.is_file():
            raise DatasetCorruptError(
                f"{path} is missing from {folder}; delete the folder and place the official "
                f"archive again"
            )
        most = images_per_file if isinstance(images_per_file, int) else images_per_file[name]
        batch = _read_cifar_pickle(path, most * IMAGE_BYTES, 2 * most * IMAGE_BYTES + PICKLE_SLACK)
        data, labels = batch.get("data"), batch.get(labels_key)
        if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
            shape = data.shape if isinstance(data, np.ndarray) else type(data).__name__
            raise DatasetCorruptError(
                f"{path}: its 'data' must be an array of 3,072 bytes an image (the official "
                f"N x 3,072), not {shape}; delete the folder and place the official archive again"
            )
        if len(data) > most:
            raise DatasetCorruptError(
                f"{path} holds {len(data):,} images, more than the official file's {most:,}; "
                f"delete the folder and place the official archive again"
            )
        if not isinstance(labels, (list, np.ndarray)) or len(labels) != len(data):
            count = len(labels) if isinstance(labels, (list, np.ndarray)) else "no"
            raise DatasetCorruptError(
                f"{path}: {len(data)} images but {count} '{labels_key}' labels; delete it"
            )
        try:
            data = np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32)
            labels = np.asarray(labels, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise DatasetCorruptError(
                f"{path} lacks a valid 'data'/'{labels_key}' entry ({exc}); delete it"
            ) from exc
        check_label_range(labels, info["num_classes"], path)
        xs.append(data)
        ys.append(labels)
    return torch.from_numpy(np.concatenate(xs)), as_labels(np.concatenate(ys))


def _class_names(meta: dict, info: dict, path: Path) -> list[str]:
    """The meta file's names, one per class; none where the file or its key is absent."""
    key, k = info["names_key"], info["num_classes"]
    names = meta.get(key)
    if names is None:
        return []
    if not isinstance(names, list):
        problem = f"is a {type(names).__name__}, not a list of names"
    elif len(names) != k:
        problem = f"holds {len(names)} class names for the {k} classes"
    else:
        odd = [n for n in names if not isinstance(n, (bytes, str))]
        if not odd:
            return [_str(n) for n in names]
        problem = f"holds a {type(odd[0]).__name__} among its names"
    raise DatasetCorruptError(
        f"{path}: its {key} {problem}; delete the folder and place the official archive again"
    )


def _load_cifar(name: str, root: Path, seed: int, download: bool, check: bool) -> FedDataset:
    info = CIFAR[name]
    folder = root / info["folder"]
    archive = root / info["archive"]
    if not folder.is_dir():
        if not archive.is_file():
            fetch_or_explain(
                CIFAR_URL + info["archive"], archive, download,
                f"{name}: neither {folder} nor {archive} exists",
            )  # fmt: skip
        extract_archive(archive, root, info["folder"], info["md5"] if check else None)
    train_x, train_y = _cifar_arrays(folder, info["train"], info)
    test_x, test_y = _cifar_arrays(folder, info["test"], info)
    meta_file = folder / info["meta"]
    meta = _read_cifar_pickle(meta_file, 0, MAX_META_BYTES) if meta_file.is_file() else {}
    names = _class_names(meta, info, meta_file)
    train, val = split_train_val(ArraySplit(train_x, train_y), seed)
    return FedDataset(
        name, "image", info["num_classes"], train, val, ArraySplit(test_x, test_y),
        mean=info["mean"], std=info["std"], class_names=names, source=str(folder),
    )  # fmt: skip


def load_cifar10(root: Path, seed: int, download: bool, *, check_md5: bool = True) -> FedDataset:
    return _load_cifar("cifar10", root, seed, download, check_md5)


def load_cifar100(root: Path, seed: int, download: bool, *, check_md5: bool = True) -> FedDataset:
    return _load_cifar("cifar100", root, seed, download, check_md5)
