"""CIFAR-10/100 from the official "python version" (pickled batches), as a folder or the tar.gz
archive (extracted once next to it); the pickles are read with an allow-list unpickler, so a
tampered file cannot run code."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from fedkd.data.base import (
    ArraySplit,
    DatasetCorruptError,
    FedDataset,
    as_labels,
    split_train_val,
)
from fedkd.data.download import extract_archive, fetch_or_explain

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
CIFAR = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "archive": "cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
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
        "meta": "meta",
        "names_key": "fine_label_names",
        "labels_key": "fine_labels",
        "num_classes": 100,
        "mean": (0.5071, 0.4867, 0.4408),
        "std": (0.2675, 0.2565, 0.2761),
    },
}


class _SafeUnpickler(pickle.Unpickler):
    """Only what the official CIFAR pickles (Python 2 + numpy, or Python 3) reference."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        if module == "numpy.core.multiarray" and hasattr(np, "_core"):
            module = "numpy._core.multiarray"  # numpy 2 moved it; the old name only warns
        return super().find_class(module, name)


def _str(v) -> str:
    return v.decode("latin1") if isinstance(v, bytes) else str(v)


def _read_cifar_pickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            # latin1: the official files are Python 2 pickles (numpy arrays need it)
            obj = _SafeUnpickler(f, encoding="latin1").load()
    except Exception as exc:
        raise DatasetCorruptError(
            f"{path} is not a readable CIFAR batch ({type(exc).__name__}: {exc}); delete the "
            f"folder and place the official archive again"
        ) from exc
    if not isinstance(obj, dict):
        raise DatasetCorruptError(f"{path} does not hold a CIFAR batch dictionary; delete it")
    return {_str(k): v for k, v in obj.items()}


def _cifar_arrays(folder: Path, files: list[str], labels_key: str):
    xs, ys = [], []
    for name in files:
        path = folder / name
        if not path.is_file():
            raise DatasetCorruptError(
                f"{path} is missing from {folder}; delete the folder and place the official "
                f"archive again"
            )
        batch = _read_cifar_pickle(path)
        try:
            data = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            labels = np.asarray(batch[labels_key], dtype=np.int64)
        except (KeyError, ValueError) as exc:
            raise DatasetCorruptError(
                f"{path} lacks a valid 'data'/'{labels_key}' entry ({exc}); delete it"
            ) from exc
        if len(data) != len(labels):
            raise DatasetCorruptError(f"{path}: {len(data)} images but {len(labels)} labels")
        xs.append(data)
        ys.append(labels)
    return torch.from_numpy(np.concatenate(xs)), as_labels(np.concatenate(ys))


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
    train_x, train_y = _cifar_arrays(folder, info["train"], info["labels_key"])
    test_x, test_y = _cifar_arrays(folder, info["test"], info["labels_key"])
    meta = _read_cifar_pickle(folder / info["meta"]) if (folder / info["meta"]).is_file() else {}
    names = [_str(n) for n in meta.get(info["names_key"], [])]
    train, val = split_train_val(ArraySplit(train_x, train_y), seed)
    return FedDataset(
        name, "image", info["num_classes"], train, val, ArraySplit(test_x, test_y),
        mean=info["mean"], std=info["std"], class_names=names, source=str(folder),
    )  # fmt: skip


def load_cifar10(root: Path, seed: int, download: bool, *, check_md5: bool = True) -> FedDataset:
    return _load_cifar("cifar10", root, seed, download, check_md5)


def load_cifar100(root: Path, seed: int, download: bool, *, check_md5: bool = True) -> FedDataset:
    return _load_cifar("cifar100", root, seed, download, check_md5)
