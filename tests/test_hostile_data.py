"""Crafted dataset files that are small on disk and huge in memory: CIFAR batch pickles declaring
50,000-image arrays, Tiny-ImageNet images declaring thousands of pixels a side or a decompression
bomb. Each is refused with the loader's error, naming the file, before the memory is taken."""

from __future__ import annotations

import pickle
import re
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import data_fixtures as fx
from fedkd.data import cifar, load_dataset, tinyimagenet
from fedkd.data.base import DatasetCorruptError

try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy 1
    from numpy.core.multiarray import _reconstruct

# the memory a refused load may take at the most (a 50,000-image batch is 153.6 MB)
REFUSED_PEAK = 8 << 20


class Declared:
    """Pickles as a call that makes an array of ``shape`` from a few bytes of pickle."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def tiny_batches(folder: Path, make_array) -> None:
    """The six CIFAR-10 batch files, each a few hundred bytes declaring 50,000 images."""
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": make_array((50_000, 3072)), b"labels": make_array((50_000,))}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def peak_of(load) -> int:
    tracemalloc.start()
    try:
        load()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    "make_array",
    [
        # numpy.ndarray(shape, "B"): an uninitialised array of any size
        lambda shape: Declared(np.ndarray, (shape, "B")),
        # _reconstruct(ndarray, shape, "B"): the official pickles' own call, with a large shape
        lambda shape: Declared(_reconstruct, (np.ndarray, shape, b"B")),
    ],
    ids=["ndarray", "reconstruct"],
)
def test_six_tiny_cifar_pickles_declaring_50000_images_are_refused_before_allocation(
    tmp_path, make_array
):
    folder = tmp_path / "cifar-10-batches-py"
    tiny_batches(folder, make_array)
    assert all(p.stat().st_size < 400 for p in folder.iterdir())
    errors = []

    def load():
        with pytest.raises(DatasetCorruptError) as info:
            load_dataset("cifar10", tmp_path, seed=0)
        errors.append(str(info.value))

    assert peak_of(load) < REFUSED_PEAK
    assert re.search(r"data_batch_1 is not a readable CIFAR batch", errors[0]), errors[0]
    assert re.search(r"numpy.ndarray\(\(50000, 3072\)|shape \(50000, 3072\)", errors[0])


def test_a_cifar_batch_with_more_images_than_the_official_file_is_refused(tmp_path, monkeypatch):
    fx.write_cifar10(tmp_path, per_batch=8)
    load_dataset("cifar10", tmp_path, seed=0)  # 8 images a batch: within the bound
    monkeypatch.setitem(cifar.CIFAR["cifar10"], "images_per_file", 7)
    with pytest.raises(DatasetCorruptError, match=r"data_batch_1 holds 8 images, more than .* 7"):
        load_dataset("cifar10", tmp_path, seed=0)


def test_cifar100_train_and_test_have_their_own_bounds():
    per_file = cifar.CIFAR["cifar100"]["images_per_file"]
    assert per_file == {"train": 50_000, "test": 10_000}
    assert cifar.CIFAR["cifar10"]["images_per_file"] == 10_000


@pytest.mark.parametrize(
    "batch, message",
    [
        ({b"data": np.zeros((4, 3000), np.uint8), b"labels": [0] * 4}, r"3,072 bytes an image"),
        ({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0] * 3}, r"4 images but 3"),
        ({b"data": [[0] * 3072] * 4, b"labels": [0] * 4}, r"not list"),
        ({b"data": np.zeros((4, 3072), object), b"labels": [0] * 4}, r"dtype object"),
        ({b"data": np.zeros((4, 3072), "V1"), b"labels": [0] * 4}, r"dtype \|V1"),
    ],
    ids=["width", "labels", "list", "object", "void"],
)
def test_a_cifar_batch_not_shaped_as_the_official_ones_is_refused(tmp_path, batch, message):
    fx.write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps(batch, 2))
    with pytest.raises(DatasetCorruptError, match=r"data_batch_2.*" + message):
        load_dataset("cifar10", tmp_path, seed=0)


def test_a_cifar_file_larger_than_any_official_one_is_refused_unread(tmp_path, monkeypatch):
    fx.write_cifar10(tmp_path)
    monkeypatch.setattr(cifar, "PICKLE_SLACK", 0)  # 2 x 10,000 images' bytes: 61 MB
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    with open(path, "r+b") as f:
        f.truncate(2 * 10_000 * 3072 + 1)  # sparse: no disk taken
    with pytest.raises(DatasetCorruptError, match=r"test_batch is damaged .*61,440,001 bytes"):
        load_dataset("cifar10", tmp_path, seed=0)


# ----------------------------------------------------------------------------- Tiny-ImageNet


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` pixels and holds none: a few dozen bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 16)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def replace_in_zip(path: Path, name: str, blob: bytes) -> None:
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    files[f"tiny-imagenet-200/{name}"] = blob
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in files.items():
            z.writestr(n, data)


TRAIN_IMAGE = "train/n01629819/images/n01629819_1.JPEG"


@pytest.mark.parametrize(
    "blob, message",
    [
        (png_header(6000, 6000), r"is a 6000x6000 image, not 64x64"),
        (png_header(64, 65), r"is a 64x65 image, not 64x64"),
        (png_header(20_000, 20_000), r"declares a huge image \(Image size"),
    ],
    ids=["large", "off-by-one", "bomb"],
)
def test_a_tinyimagenet_image_not_64x64_is_refused_before_decoding(tmp_path, blob, message):
    fx.write_tinyimagenet(tmp_path)
    replace_in_zip(tmp_path / "tiny-imagenet-200.zip", TRAIN_IMAGE, blob)
    errors = []

    def load():
        with pytest.raises(DatasetCorruptError) as info:
            load_dataset("tinyimagenet", tmp_path, seed=0, check_md5=False, cache=False)
        errors.append(str(info.value))

    assert peak_of(load) < REFUSED_PEAK
    assert re.search(re.escape(TRAIN_IMAGE) + " " + message, errors[0]), errors[0]
    assert "delete it and place the official one again" in errors[0]


def test_a_tinyimagenet_image_file_larger_than_any_official_one_is_refused_unread(
    tmp_path, monkeypatch
):
    fx.write_tinyimagenet(tmp_path)
    monkeypatch.setattr(tinyimagenet, "MAX_IMAGE_BYTES", 64)  # smaller than any JPEG
    with pytest.raises(DatasetCorruptError, match=r"train/n01443537/images/\S+ holds [\d,]+ bytes"):
        load_dataset("tinyimagenet", tmp_path, seed=0, check_md5=False, cache=False)
    # the extracted folder alike
    with zipfile.ZipFile(tmp_path / "tiny-imagenet-200.zip") as z:
        z.extractall(tmp_path / "data")
    with pytest.raises(DatasetCorruptError, match=r"n01443537_0\.JPEG is damaged"):
        load_dataset("tinyimagenet", tmp_path / "data", seed=0, cache=False)
