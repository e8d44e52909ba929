"""Tiny datasets written in the official on-disk formats, so the real loaders can be exercised offline."""

from __future__ import annotations

import gzip
import io
import pickle
import shutil
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np


def _dump(obj: dict, path: Path) -> None:
    """A protocol-2 pickle as Python 3 writes it (bytes keys)."""
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _py2(v) -> bytes:
    """Pickle opcodes for ``v`` as Python 2 + numpy 1 wrote the official CIFAR files: byte strings
    are py2 ``str`` (BINSTRING) and arrays go through numpy.core.multiarray._reconstruct."""
    if isinstance(v, bytes):
        return b"T" + struct.pack("<i", len(v)) + v
    if isinstance(v, int):
        return b"J" + struct.pack("<i", v)
    if isinstance(v, list):
        return b"](" + b"".join(_py2(i) for i in v) + b"e"
    if isinstance(v, dict):
        return b"}(" + b"".join(_py2(k) + _py2(x) for k, x in v.items()) + b"u"
    assert isinstance(v, np.ndarray) and v.dtype == np.uint8
    dtype = b"cnumpy\ndtype\n" + _py2(b"u1") + b"J\0\0\0\0J\1\0\0\0\x87R"
    dtype += b"(J\3\0\0\0" + _py2(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffJ\0\0\0\0tb"
    shape = b"(" + b"".join(_py2(int(n)) for n in v.shape) + b"t"
    return (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n(J\0\0\0\0t" + _py2(b"b") + b"\x87R"
        + b"(J\1\0\0\0" + shape + dtype + b"\x89" + _py2(v.tobytes()) + b"tb"
    )  # fmt: skip


def _dump_py2(obj: dict, path: Path) -> None:
    path.write_bytes(b"\x80\x02" + _py2(obj) + b".")


def write_cifar10(root: Path, per_batch: int = 8, n_test: int = 10, seed: int = 0) -> dict:
    """root/cifar-10-batches-py with data_batch_1..5, test_batch, batches.meta; returns the arrays."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    xs, ys = [], []
    for i in range(1, 7):
        n = per_batch if i < 6 else n_test
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=n)]
        name = f"data_batch_{i}" if i < 6 else "test_batch"
        _dump_py2(
            {
                b"batch_label": name.encode(),
                b"labels": labels,
                b"data": data,
                b"filenames": [f"img{j}.png".encode() for j in range(n)],
            },
            folder / name,
        )
        xs.append(data)
        ys.append(labels)
    names = [
        b"airplane",
        b"automobile",
        b"bird",
        b"cat",
        b"deer",
        b"dog",
        b"frog",
        b"horse",
        b"ship",
        b"truck",
    ]
    _dump_py2(
        {b"num_cases_per_batch": per_batch, b"label_names": names, b"num_vis": 3072},
        folder / "batches.meta",
    )
    return {
        "train_x": np.concatenate(xs[:5]).reshape(-1, 3, 32, 32),
        "train_y": np.concatenate(ys[:5]),
        "test_x": xs[5].reshape(-1, 3, 32, 32),
        "test_y": np.asarray(ys[5]),
        "class_names": [n.decode() for n in names],
    }


def write_cifar100(root: Path, n_train: int = 30, n_test: int = 10, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        fine = [int(v) for v in rng.integers(0, 100, size=n)]
        _dump(
            {
                b"filenames": [b"x.png"] * n,
                b"batch_label": split.encode(),
                b"fine_labels": fine,
                b"coarse_labels": [f // 5 for f in fine],
                b"data": data,
            },
            folder / split,
        )
        out[f"{split}_x"], out[f"{split}_y"] = data.reshape(-1, 3, 32, 32), np.asarray(fine)
    names = [f"class{i}".encode() for i in range(100)]
    _dump(
        {
            b"fine_label_names": names,
            b"coarse_label_names": [f"super{i}".encode() for i in range(20)],
        },
        folder / "meta",
    )
    out["class_names"] = [n.decode() for n in names]
    return out


def tar_folder(root: Path, folder: str, archive: str) -> Path:
    """Pack root/folder into root/archive (tar.gz) and remove the folder, as in the official download."""
    path = root / archive
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root / folder, arcname=folder)
    shutil.rmtree(root / folder)
    return path


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _jpeg(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _decoded(blob: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")).transpose(2, 0, 1)


def write_tinyimagenet(
    root: Path,
    wnids=("n01443537", "n01629819", "n01641577"),
    per_class: int = 4,
    val_per_class: int = 2,
    seed: int = 2,
) -> dict:
    """root/tiny-imagenet-200.zip with wnids.txt, words.txt, train/<wnid>/images, val/images + annotations.
    Returns the expected decoded arrays (one training image is greyscale, as some official ones are)."""
    rng = np.random.default_rng(seed)
    files: dict[str, bytes] = {"wnids.txt": "\n".join(wnids).encode() + b"\n"}
    files["words.txt"] = "".join(
        f"{w}\tthing {i}, other name\n" for i, w in enumerate(wnids)
    ).encode()
    train_x, train_y, test_x, test_y, ann = [], [], [], [], []
    for c, w in enumerate(wnids):
        files[f"train/{w}/{w}_boxes.txt"] = b""
        for j in range(per_class):
            shape = (64, 64) if (c, j) == (0, 0) else (64, 64, 3)
            blob = _jpeg(rng.integers(0, 256, size=shape, dtype=np.uint8))
            files[f"train/{w}/images/{w}_{j}.JPEG"] = blob
            train_x.append(_decoded(blob))
            train_y.append(c)
    for k in range(val_per_class * len(wnids)):
        c = k % len(wnids)
        blob = _jpeg(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8))
        files[f"val/images/val_{k}.JPEG"] = blob
        ann.append(f"val_{k}.JPEG\t{wnids[c]}\t0\t0\t63\t63")
        test_x.append(_decoded(blob))
        test_y.append(c)
    files["val/val_annotations.txt"] = ("\n".join(ann) + "\n").encode()
    path = root / "tiny-imagenet-200.zip"
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, blob in files.items():
            z.writestr(f"tiny-imagenet-200/{name}", blob)
    return {
        "train_x": np.stack(train_x),
        "train_y": np.asarray(train_y),
        "test_x": np.stack(test_x),
        "test_y": np.asarray(test_y),
        "class_names": [f"thing {i}, other name" for i in range(len(wnids))],
    }


def write_idx(path: Path, arr: np.ndarray) -> None:
    """An idx file of unsigned bytes (magic 0x00000800 | ndim, big-endian dims), gzipped if *.gz."""
    raw = (
        struct.pack(">I", 0x0800 | arr.ndim)
        + struct.pack(f">{arr.ndim}I", *arr.shape)
        + arr.astype(np.uint8).tobytes()
    )
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)


def write_mnist(
    root: Path, n_train: int = 40, n_test: int = 12, gz: bool = True, seed: int = 3
) -> dict:
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    out = {}
    ext = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx(raw / f"{prefix}-images-idx3-ubyte{ext}", x)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte{ext}", y)
        out[f"{prefix}_x"], out[f"{prefix}_y"] = x, y
    return out


def write_text_split(folder: Path, split: str, rows: list[tuple[str, int]], fmt: str) -> None:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"text": [t for t, _ in rows], "label": [y for _, y in rows]})
    if fmt == "parquet":
        df.to_parquet(folder / f"{split}.parquet", index=False)
    else:
        df.to_csv(folder / f"{split}.csv", index=False)


def text_rows(n: int, num_classes: int, seed: int) -> list[tuple[str, int]]:
    """Short documents whose first word names the class, so labels and tokens are easy to check."""
    rng = np.random.default_rng(seed)
    filler = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "news",
        "report",
        "today",
        "market",
        "game",
        "film",
    ]
    rows = []
    for i in range(n):
        y = i % num_classes
        words = [f"label{y}"] + list(rng.choice(filler, size=int(rng.integers(2, 8))))
        rows.append((" ".join(words).title() + "!", y))
    return rows
