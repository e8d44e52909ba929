"""Tiny-ImageNet from the official zip (``train/<wnid>/images``, ``val/images`` with
``val_annotations.txt``; the labelled val set serves as the test set), or its extracted folder;
decoded once into a uint8 cache next to it, which names the copy it was decoded from and is
decoded again when that copy changes. Every image must be what the official ones are, a
64x64 picture of at most ``MAX_IMAGE_BYTES``: its size is read before it is decoded, so a file
declaring a huge picture is refused without the memory to decode it."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import zipfile
from collections import Counter
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
from fedkd.data.base import (
    check_md5 as verify_md5,  # the loaders' keyword ``check_md5`` would shadow it
)
from fedkd.data.download import fetch_or_explain
from fedkd.echo import safe_message
from fedkd.files import UnreadableFileError, atomic_write, read_regular_file

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
# the FedGKD code normalises its downsampled ImageNet loader (Tiny-ImageNet included) to [-1, 1]
TINY_MEAN = (0.5, 0.5, 0.5)
TINY_STD = (0.5, 0.5, 0.5)
IMAGE_SIZE = (64, 64)
NUM_CLASSES = 200
# the official JPEGs are 1-4 KB; the bound keeps a crafted file from being read whole
MAX_IMAGE_BYTES = 1 << 20


class _ZipTree:
    """Read files of the Tiny-ImageNet tree from the zip or from the extracted folder alike."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path) if path.suffix == ".zip" else None
        self.files: dict[str, list[str]] = {}  # folder → file names, indexed once (120,000 files)
        if self.zip is not None:
            for name in self.zip.namelist():
                folder, _, file = name.removeprefix("tiny-imagenet-200/").rpartition("/")
                if file:
                    self.files.setdefault(folder, []).append(file)

    def read(self, rel: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes; refused (``DatasetCorruptError``) unread when it holds more than
        ``max_bytes`` (in the zip: as its directory records it, checked again as it is read)."""
        if self.zip is not None:
            name = f"tiny-imagenet-200/{rel}"
            if max_bytes is None:
                return self.zip.read(name)
            size = self.zip.getinfo(name).file_size
            if size <= max_bytes:
                with self.zip.open(name) as file:
                    data = file.read(max_bytes + 1)
                size = max(size, len(data))
        else:
            if max_bytes is None:
                return (self.path / rel).read_bytes()
            try:
                data = read_regular_file(self.path / rel, "an image", max_bytes)
            except UnreadableFileError as exc:
                raise DatasetCorruptError(f"{exc}; {AGAIN}") from None
            size = len(data)
        if size > max_bytes:
            raise DatasetCorruptError(
                f"{self.path}: {rel} holds {size:,} bytes, more than any image of the official "
                f"dataset ({max_bytes:,}); {AGAIN}"
            )
        return data

    def listdir(self, rel: str) -> list[str]:
        if self.zip is not None:
            return sorted(self.files.get(rel, []))
        return sorted(p.name for p in (self.path / rel).iterdir() if p.is_file())


def _decode_rgb(blob: bytes, where: str) -> np.ndarray:
    """The 64x64 RGB image of ``blob`` (``where`` names it); its size is checked on the header,
    before the picture is decoded."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(blob)) as img:
            if img.size != IMAGE_SIZE:
                raise DatasetCorruptError(
                    f"{where} is a {img.size[0]}x{img.size[1]} image, not 64x64 as every "
                    f"Tiny-ImageNet image; {AGAIN}"
                )
            return np.asarray(img.convert("RGB")).transpose(2, 0, 1)  # some are greyscale
    except Image.DecompressionBombError as exc:
        raise DatasetCorruptError(f"{where} declares a huge image ({exc}); {AGAIN}") from None


AGAIN = "the dataset is damaged or crafted: delete it and place the official one again"


def _check_file_name(name: str, listed_in: str) -> None:
    """A name the index files give must be a plain file or folder name: with ``/``, ``\\`` or
    ``..`` it could point outside the dataset folder (``../../etc/passwd``)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise DatasetCorruptError(
            f"{listed_in} names {name!r}, not a plain file name inside the dataset; the file is "
            f"damaged or crafted: delete the dataset and place the official one again"
        )


def _read_tiny(tree: _ZipTree) -> dict:
    wnids = [w.strip() for w in tree.read("wnids.txt").decode().splitlines() if w.strip()]
    words = {}
    for line in tree.read("words.txt").decode().splitlines():
        if "\t" in line:
            w, text = line.split("\t", 1)
            words[w] = text.strip()
    for w in wnids:
        _check_file_name(w, "wnids.txt")
    # a class past the 200th gets label 200+, which the 200-way model's loss stops on mid-run
    if len(wnids) > NUM_CLASSES or len(set(wnids)) < len(wnids):
        twice = sorted(w for w, n in Counter(wnids).items() if n > 1)
        raise DatasetCorruptError(
            f"{tree.path}: wnids.txt lists {len(wnids)} classes"
            + (f", naming {', '.join(twice)} more than once" if twice else "")
            + f"; Tiny-ImageNet has {NUM_CLASSES} distinct ones. {AGAIN}"
        )
    label = {w: i for i, w in enumerate(wnids)}
    train_x, train_y = [], []
    listed = {w: tree.listdir(f"train/{w}/images") for w in wnids}
    for w, names in listed.items():
        if not names:  # a zip without the folder lists nothing where a folder would be missing
            raise DatasetCorruptError(f"{tree.path}: train/{w}/images holds no image; {AGAIN}")
    for w, n in _short_classes({w: len(names) for w, names in listed.items()}):
        raise DatasetCorruptError(
            f"{tree.path}: train/{w}/images holds {len(listed[w])} images where another "
            f"class holds {n}: the copy is incomplete; {AGAIN}"
        )
    for w, names in listed.items():
        for name in names:
            rel = f"train/{w}/images/{name}"
            train_x.append(_decode_rgb(tree.read(rel, MAX_IMAGE_BYTES), f"{tree.path}: {rel}"))
            train_y.append(label[w])
    test_x, test_y = [], []
    annotations = [
        parts
        for parts in (
            line.split("\t") for line in tree.read("val/val_annotations.txt").decode().splitlines()
        )
        if len(parts) >= 2
    ]
    per_class = Counter(parts[1] for parts in annotations)
    for w, n in _short_classes({w: per_class[w] for w in wnids}):
        raise DatasetCorruptError(
            f"{tree.path}: val/val_annotations.txt lists {per_class[w]} images of {w} where "
            f"another class has {n}: the copy is incomplete; {AGAIN}"
        )
    for parts in annotations:
        _check_file_name(parts[0], "val/val_annotations.txt")
        rel = f"val/images/{parts[0]}"
        test_x.append(_decode_rgb(tree.read(rel, MAX_IMAGE_BYTES), f"{tree.path}: {rel}"))
        test_y.append(label[parts[1]])
    return {
        "train_x": torch.from_numpy(np.stack(train_x)),
        "train_y": as_labels(train_y),
        "test_x": torch.from_numpy(np.stack(test_x)),
        "test_y": as_labels(test_y),
        "class_names": [words.get(w, w) for w in wnids],
    }


def _short_classes(counts: dict[str, int]) -> list[tuple[str, int]]:
    """(class, the most any class has) for each class with fewer: every Tiny-ImageNet class
    holds as many images as the others (500 for training, 50 for validation)."""
    most = max(counts.values(), default=0)
    return [(w, most) for w, n in counts.items() if n < most]


def _cache_problem(arrays) -> str | None:
    """What makes ``arrays`` other than what ``_read_tiny`` returns (None: nothing): the cache
    is read in the archive's place, so a damaged one must not train or fail later unnamed."""
    if not isinstance(arrays, dict):
        return f"it holds a {type(arrays).__name__}, not a dictionary"
    missing = [
        k for k in ("train_x", "train_y", "test_x", "test_y", "class_names") if k not in arrays
    ]
    if missing:
        return f"it lacks {', '.join(missing)}"
    for split in ("train", "test"):
        x, y = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if (
            not isinstance(x, torch.Tensor)
            or x.dtype != torch.uint8
            or x.shape[1:] != (3, *IMAGE_SIZE)
        ):
            what = (
                f"{x.dtype} of {'x'.join(map(str, x.shape[1:]))}"
                if isinstance(x, torch.Tensor)
                else type(x).__name__
            )
            return f"its {split}_x are {what}, not uint8 images of 3x64x64"
        if not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.dim() != 1:
            return f"its {split}_y is not a vector of int64 labels"
        if len(x) != len(y):
            return f"its {split} split has {len(x)} images but {len(y)} labels"
        outside = y[(y < 0) | (y >= NUM_CLASSES)]
        if len(outside):
            return (
                f"its {split}_y holds {len(outside)} labels outside the {NUM_CLASSES} classes, "
                f"the first {int(outside[0])}"
            )
    names = arrays["class_names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "its class_names are not a list of names"
    return None


def copy_identity(path: Path) -> str:
    """What tells one copy of the data from another without decoding it: the archive's size and
    modification time; for a folder, each folder's modification time (it changes as images are
    added, removed or renamed) and each other file's size and time, some 400 entries, where
    statting each of the 120,000 images is slow on a network file system. An image edited
    in place is not noticed."""
    if path.is_file():
        st = path.stat()
        return f"file {st.st_size} {st.st_mtime_ns}"
    h = hashlib.sha256()

    def visit(folder: Path, rel: str) -> None:
        h.update(f"{rel}/\0{folder.stat().st_mtime_ns}\n".encode())
        if folder.name == "images":
            return
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_dir():
                visit(Path(entry.path), f"{rel}/{entry.name}")
            else:
                st = entry.stat()
                h.update(f"{rel}/{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())

    visit(path, ".")
    return f"folder {h.hexdigest()}"


def _made_from(arrays: dict, copy: Path | None) -> str | None:
    """Why a sound cache is not of ``copy`` (the folder or archive there now), or None."""
    if copy is None:  # the cache stands alone: its copy was moved away after decoding
        return None
    made = arrays.get("made_from")
    if made is None:
        return "it does not name the copy it was decoded from"
    if made != {"name": copy.name, "identity": copy_identity(copy)}:
        return f"it was decoded from another copy than {copy}"
    return None


def load_tinyimagenet(
    root: Path, seed: int, download: bool, *, check_md5: bool = True, cache: bool = True
) -> FedDataset:
    archive = root / "tiny-imagenet-200.zip"
    folder = root / "tiny-imagenet-200"
    cache_file = root / "tiny-imagenet-200.uint8.pt"
    # the copy a cache is of: the folder, read before the archive as below
    copy = folder if folder.is_dir() else archive if archive.is_file() else None
    arrays, source = None, None
    if cache and cache_file.is_file():
        try:
            arrays = torch.load(cache_file, weights_only=True)
            source = str(cache_file)
        except Exception as exc:
            raise DatasetCorruptError(
                f"{cache_file} cannot be read ({exc}); delete it (it is rebuilt from the archive)"
            ) from exc
        problem = _cache_problem(arrays)
        if problem:
            raise DatasetCorruptError(
                f"{cache_file} is not a Tiny-ImageNet cache as fedkd writes it: {problem}; "
                f"delete it (it is rebuilt from the archive)"
            )
        stale = _made_from(arrays, copy)
        if stale:
            note = f"tinyimagenet: {cache_file}: {stale}; decoding {copy} again"
            print(safe_message(note), file=sys.stderr)
            arrays = None
    if arrays is None:
        if folder.is_dir():
            tree = _ZipTree(folder)
        else:
            if not archive.is_file():
                fetch_or_explain(
                    TINY_URL,
                    archive,
                    download,
                    f"tinyimagenet: neither {folder} nor {archive} exists",
                )
            if check_md5:
                verify_md5(archive, TINY_MD5)
            try:
                tree = _ZipTree(archive)
            except (zipfile.BadZipFile, OSError) as exc:
                raise DatasetCorruptError(
                    f"{archive} is not a readable zip ({exc}); it is incomplete or damaged: "
                    f"delete it and place the official file there again"
                ) from exc
        try:
            arrays = _read_tiny(tree)
        except DatasetCorruptError:
            raise
        except (KeyError, FileNotFoundError, zipfile.BadZipFile, OSError, ValueError) as exc:
            raise DatasetCorruptError(
                f"{tree.path} does not have the official Tiny-ImageNet layout or is damaged "
                f"({type(exc).__name__}: {exc}); delete it and place the official file again"
            ) from exc
        source = str(tree.path)
        if cache:  # decoding 110,000 JPEGs takes minutes; later runs read the tensors
            made = {"name": tree.path.name, "identity": copy_identity(tree.path)}
            cached = {**arrays, "made_from": made}
            atomic_write(cache_file, lambda file: torch.save(cached, file))
    train, val = split_train_val(ArraySplit(arrays["train_x"], arrays["train_y"]), seed)
    return FedDataset(
        "tinyimagenet", "image", NUM_CLASSES, train, val,
        ArraySplit(arrays["test_x"], arrays["test_y"]), mean=TINY_MEAN, std=TINY_STD,
        class_names=list(arrays["class_names"]), source=source,
    )  # fmt: skip
