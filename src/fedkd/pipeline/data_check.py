"""Before the first job starts: is each dataset that the runs still to train read where its loader
looks? A missing one is said once, in its loader's words, and no job starts (rather than every
partition job of the dataset failing with the same message).

The check is cheap and errs towards starting: a dataset is taken as present when any of the names
its loader looks for exists under its data root (the jobs read it and say what is wrong with it);
otherwise its loader is asked, with downloads off, and only its "not found" counts. With
``FEDKD_DOWNLOAD=1`` nothing is checked: the jobs fetch what is missing. Not checked: the Hugging
Face tokenizer a text dataset's default options read (its jobs name it when it is missing).

The names live here, not in the loaders (fedkd.data.cifar, .mnist, .tinyimagenet, .text): a
loader's source is part of the code hash of every run on its dataset, so moving them there would
re-train those runs. tests/test_data_check.py holds each entry to its loader."""

from __future__ import annotations

import os
from pathlib import Path

# dataset → what its loader looks for under the data root, any one of which it reads
LOOKED_FOR: dict[str, tuple[str, ...]] = {
    "cifar10": ("cifar-10-batches-py", "cifar-10-python.tar.gz"),
    "cifar100": ("cifar-100-python", "cifar-100-python.tar.gz"),
    "tinyimagenet": ("tiny-imagenet-200", "tiny-imagenet-200.zip", "tiny-imagenet-200.uint8.pt"),
    "mnist": ("MNIST/raw",),
    "agnews": ("ag_news",),
    "sst5": ("sst5",),
}


def data_root(configured: str | None) -> Path:
    """Where a job looks: the configuration's data_root, else ``$FEDKD_DATA``, else ``./data``
    (fedkd.data.base.default_root, without importing torch)."""
    if configured:
        return Path(configured)
    return Path(os.environ.get("FEDKD_DATA") or "data").expanduser().resolve()


def missing_datasets(roots: dict[str, str | None]) -> list[str]:
    """For each dataset (name → its configured data_root, or None) whose files are absent, its
    loader's message saying what to place where; sorted by dataset."""
    absent = {}
    for name in sorted(roots):
        looked_for = LOOKED_FOR.get(name)
        if looked_for is None:  # mnist5k, synthtext: no files
            continue
        root = data_root(roots[name])
        if not any(_there(root / entry) for entry in looked_for):
            absent[name] = root
    if not absent:
        return []  # without importing torch (fedkd.data.base), a second and more
    from fedkd.data.base import download_allowed

    if download_allowed(None):
        return []
    return [reason for name, root in absent.items() if (reason := not_found(name, root))]


def _there(path: Path) -> bool:
    """Whether ``path`` exists; one that cannot be looked at (no permission) counts, for its job
    to say what is wrong."""
    try:
        return path.exists()
    except OSError:
        return True


def not_found(name: str, root: Path) -> str | None:
    """The loader's own message when it finds nothing of ``name`` under ``root`` (downloads off),
    else None: whatever else it finds wrong is for the jobs to say, as they read the data."""
    from fedkd.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset(name, root, download=False)
    except DatasetNotFoundError as exc:
        return str(exc)
    except Exception:
        return None
    return None


def message(reasons: list[str]) -> str:
    """What the workflow prints, before any job, when datasets are missing."""
    lines = "\n".join(f"  {r}" for r in reasons)
    return (
        f"fedkd: the runs to train read data that is not there, so no job was started:\n{lines}\n"
        "docs/datasets.md lists each dataset's files. Snakemake's --no-hooks skips this check: the\n"
        "runs on the datasets that are there train, and the jobs of the others fail."
    )
