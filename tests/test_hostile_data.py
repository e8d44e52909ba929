"""Crafted dataset and partition files: small on disk and huge in memory (CIFAR batch pickles
declaring 50,000-image arrays, Tiny-ImageNet images declaring thousands of pixels a side, a
decompression bomb, an MNIST gzip bomb), crafted MNIST headers, Tiny-ImageNet names that leave the
data root, partitions with empty clients, metadata of the wrong shape or rows that do not match the
training split. Each is refused with the loader's error, naming the file, before the memory is
taken."""

from __future__ import annotations

import gzip
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


@pytest.mark.parametrize(
    "names, message",
    [(5, r"int"), ([b"cat"] * 3, r"3 class names"), ([b"cat"] * 9 + [7], r"int")],
    ids=["number", "three", "not-a-name"],
)
def test_cifar_class_names_not_one_per_class_are_refused(tmp_path, names, message):
    """batches.meta's label_names: a number raised a bare TypeError; three names for ten
    classes loaded, and the features file and t-SNE plot named classes from them."""
    fx.write_cifar10(tmp_path)
    meta = tmp_path / "cifar-10-batches-py" / "batches.meta"
    meta.write_bytes(pickle.dumps({b"label_names": names}, 2))
    with pytest.raises(DatasetCorruptError, match=r"batches\.meta.*label_names.*" + message):
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


# --------------------------------------------------------------------------- 7. loaders
def test_an_mnist_gzip_bomb_is_refused_before_it_inflates(tmp_path, monkeypatch):
    from fedkd.data import mnist

    monkeypatch.setattr(mnist, "MAX_IDX_BYTES", 1 << 20)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    bomb = raw / "train-images-idx3-ubyte.gz"
    n = 40_000  # 40,000 28x28 images: 31 MB inflated, 31 kB compressed
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b"\0\0\x08\x03" + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2)
        for _ in range(n // 1000):
            f.write(bytes(1000 * 28 * 28))
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DatasetCorruptError, match=r"more than 1048576 bytes once decompressed"):
            mnist._read_idx(bomb, ndim=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"inflated {peak} bytes before refusing"


def crafted_idx(path: Path, ndim: int, shape: tuple[int, ...], body: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        bytes([0, 0, 0x08, ndim]) + b"".join(n.to_bytes(4, "big") for n in shape) + body
    )
    return path


@pytest.mark.parametrize(
    "ndim,shape,body,fragment",
    [
        (0, (), b"\x07", "announces 0 dimensions where MNIST's images have 3"),
        (1, (4,), bytes(4), "announces 1 dimensions where MNIST's images have 3"),
        # 2^96 - ...: a product that wraps around in 64-bit arithmetic
        (3, (2**32 - 1,) * 3, bytes(16), "announces shape (4294967295, 4294967295, 4294967295) "
         "(79,228,162,458,924,105,385,300,197,375 bytes) but 16 bytes follow"),
        (3, (2**32 - 1, 2**32 - 1, 1), bytes(16), "but 16 bytes follow"),
    ],
)  # fmt: skip
def test_a_crafted_mnist_header_is_named_with_its_reason(tmp_path, ndim, shape, body, fragment):
    from fedkd.data import load_dataset

    fx.write_mnist(tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    for old in raw.glob("train-images-idx3-ubyte*"):
        old.unlink()
    images = crafted_idx(raw / "train-images-idx3-ubyte", ndim, shape, body)
    with pytest.raises(DatasetCorruptError) as err:
        load_dataset("mnist", tmp_path, seed=0)
    assert str(images) in str(err.value) and fragment in str(err.value)


def test_a_labels_file_with_image_dimensions_is_refused(tmp_path):
    from fedkd.data import mnist

    labels = crafted_idx(tmp_path / "t10k-labels-idx1-ubyte", 3, (1, 1, 1), b"\x01")
    with pytest.raises(DatasetCorruptError, match="announces 3 dimensions where MNIST's labels"):
        mnist._read_idx(labels, ndim=1)
    assert mnist._read_idx(crafted_idx(labels, 1, (2,), b"\x01\x02"), ndim=1).tolist() == [1, 2]


def test_official_mnist_files_are_read_below_the_cap(tmp_path):
    from fedkd.data import mnist

    exp = fx.write_mnist(tmp_path)
    ds = mnist.load_mnist(tmp_path, seed=0, download=False)
    assert len(ds.train) + len(ds.val) == len(exp["train_y"])
    # the real training images file (47,040,016 bytes) fits
    assert 16 + 60_000 * 28 * 28 <= mnist.MAX_IDX_BYTES


def test_tinyimagenet_folder_mode_refuses_names_that_leave_the_data_root(tmp_path):
    import zipfile

    from fedkd.data import load_dataset

    fx.write_tinyimagenet(tmp_path / "zip")
    folder = tmp_path / "data" / "tiny-imagenet-200"
    with zipfile.ZipFile(tmp_path / "zip" / "tiny-imagenet-200.zip") as z:
        z.extractall(tmp_path / "data")
    # an image outside the data root, named through ../ in val_annotations.txt
    outside = tmp_path / "secret.JPEG"
    outside.write_bytes((folder / "val" / "images" / "val_0.JPEG").read_bytes())
    ann = folder / "val" / "val_annotations.txt"
    lines = ann.read_text().splitlines()
    lines[0] = "../../../../secret.JPEG\t" + lines[0].split("\t", 1)[1]
    ann.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetCorruptError, match=r"val_annotations\.txt names '\.\./\.\./"):
        load_dataset("tinyimagenet", tmp_path / "data", seed=0, cache=False)


def test_a_partition_with_empty_clients_is_refused(tmp_path):
    from fedkd.data.partition import read_partition, write_partition

    labels = np.arange(40) % 4
    assignment = np.arange(40) % 3  # clients 0..2 hold everything, client 3 nothing
    path = tmp_path / "p.parquet"
    write_partition(path, assignment, labels, {"clients": 4, "num_samples": 40})
    with pytest.raises(
        ValueError, match=r"p\.parquet: 1 of its 4 clients hold no training sample \(client 3\)"
    ):
        read_partition(path)
    write_partition(path, assignment, labels, {"clients": 3, "num_samples": 40})
    assert read_partition(path)[0].tolist() == assignment.tolist()


@pytest.mark.parametrize("clients", [4.0, "4", True, 1e18])
def test_partition_metadata_is_read_by_its_types(tmp_path, clients):
    """A client count written as 4.0 (by another tool) is 4, and the empty-client check runs;
    one of another type is refused naming the key rather than skipping the check, and so is a
    float beyond 2^53 (1e18), past which floats do not hold every integer."""
    from fedkd.data.partition import read_partition, write_partition

    labels = np.arange(40) % 4
    assignment = np.arange(40) % 3  # client 3 holds nothing
    path = tmp_path / "p.parquet"
    write_partition(path, assignment, labels, {"clients": clients, "num_samples": 40})
    if clients == 4.0 and not isinstance(clients, bool):
        match = r"1 of its 4 clients hold no training sample \(client 3\)"
    else:
        match = re.escape(f"its metadata holds clients={clients!r} (must be a positive integer)")
    with pytest.raises(ValueError, match=match) as err:
        read_partition(path)
    assert str(path) in str(err.value)


def test_partition_metadata_of_the_wrong_shape_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fedkd.data.partition import read_partition

    table = pa.table({"index": pa.array([0, 1]), "client": pa.array([0, 1], pa.int32()),
                      "label": pa.array([0, 1], pa.int32())})  # fmt: skip
    for meta, fragment in [
        (b"[1, 2]", "its metadata is a JSON list, not an object"),
        (b"[" * 100_000, "nested deeper than 50 levels"),
        (b'{"seed": -1, "alpha": "x"}', "seed=-1 (must be an integer >= 0), alpha='x'"),
    ]:
        pq.write_table(table.replace_schema_metadata({b"fedkd": meta}), tmp_path / "p.parquet")
        with pytest.raises(ValueError, match=re.escape(fragment)):
            read_partition(tmp_path / "p.parquet")


@pytest.mark.parametrize("rows, num_samples", [(3_100, 3_600), (3_100, None), (3_700, None)])
def test_a_partition_of_another_length_than_the_training_split_is_refused(
    tmp_path, rows, num_samples
):
    """A partition file whose rows do not cover the training split one to one is refused before
    training: fewer rows left the last samples on no client without a word (its metadata still
    said 3,600), more named samples the split does not have."""
    from fedkd.config import RunSpec
    from fedkd.data.partition import draw_partition, write_partition
    from fedkd.engine.run import Run

    assignment, labels, meta = draw_partition("mnist5k", "dirichlet-equal", 10, 0, alpha=1.0)
    assert len(assignment) == 3_600  # mnist5k's training split at seed 0
    if rows > len(assignment):
        extra = rows - len(assignment)
        assignment = np.concatenate([assignment, np.arange(extra) % 10])
        labels = np.concatenate([labels, np.arange(extra) % 10])
    if num_samples is None:  # a file written without the count
        del meta["num_samples"]
    path = tmp_path / "p.parquet"
    write_partition(path, assignment[:rows], labels[:rows], meta)
    spec = RunSpec(dataset="mnist5k", clients=10, alpha=1.0, rounds=1, seed=0, device="cpu",
                   partition_file=str(path))  # fmt: skip
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} has {rows} rows but the "
                       "training split has 3600 samples"):  # fmt: skip
        Run(spec, tmp_path / "run").prepare()
