"""Tiny-ImageNet's decoded cache (tiny-imagenet-200.uint8.pt): read in place of the copy it was
decoded from, decoded again when that copy changed, refused naming itself when it is not as
fedkd writes it."""

from __future__ import annotations

import shutil

import pytest
import torch

import data_fixtures as fx
from fedkd.data import DatasetCorruptError, load_dataset


def test_tinyimagenet_cache(tmp_path):
    fx.write_tinyimagenet(tmp_path)
    first = load_dataset("tinyimagenet", tmp_path, check_md5=False)
    assert (tmp_path / "tiny-imagenet-200.uint8.pt").is_file()
    (tmp_path / "tiny-imagenet-200.zip").unlink()
    second = load_dataset("tinyimagenet", tmp_path)
    assert second.source.endswith("tiny-imagenet-200.uint8.pt")
    assert torch.equal(first.train.x, second.train.x) and first.class_names == second.class_names


@pytest.mark.parametrize("mode", ["zip", "folder"])
def test_a_tinyimagenet_cache_of_another_copy_is_decoded_again(tmp_path, capsys, mode):
    """The cache is read in the copy's place: a copy replaced after it was made (another
    archive, a folder whose files changed) trained on the old images until the cache was
    deleted by hand. A cache standing alone (its copy moved away) is still read."""
    import zipfile

    root = tmp_path / "data"
    fx.write_tinyimagenet(tmp_path / "a", seed=1)
    new = fx.write_tinyimagenet(tmp_path / "b", seed=2)

    def place(src):
        if mode == "zip":
            shutil.copy(src / "tiny-imagenet-200.zip", root / "tiny-imagenet-200.zip")
        else:
            shutil.rmtree(root / "tiny-imagenet-200", ignore_errors=True)
            with zipfile.ZipFile(src / "tiny-imagenet-200.zip") as z:
                z.extractall(root)

    root.mkdir()
    place(tmp_path / "a")
    old = load_dataset("tinyimagenet", root, check_md5=False)
    assert load_dataset("tinyimagenet", root).source.endswith(".uint8.pt")
    assert capsys.readouterr().err == ""
    place(tmp_path / "b")
    again = load_dataset("tinyimagenet", root, check_md5=False)
    assert "decoded from another copy" in capsys.readouterr().err
    assert not torch.equal(again.test.x, old.test.x)
    assert torch.equal(again.test.x, torch.as_tensor(new["test_x"]))
    # the rewritten cache is of the new copy, and read alone once the copy is gone
    assert load_dataset("tinyimagenet", root).source.endswith(".uint8.pt")
    if mode == "zip":
        (root / "tiny-imagenet-200.zip").unlink()
    else:
        shutil.rmtree(root / "tiny-imagenet-200")
    assert torch.equal(load_dataset("tinyimagenet", root).test.x, again.test.x)


def test_a_folder_copys_identity_sees_an_image_added_or_an_index_edited(tmp_path):
    import os
    import zipfile

    from fedkd.data.tinyimagenet import copy_identity

    fx.write_tinyimagenet(tmp_path)
    with zipfile.ZipFile(tmp_path / "tiny-imagenet-200.zip") as z:
        z.extractall(tmp_path / "x")
    folder = tmp_path / "x" / "tiny-imagenet-200"
    images = folder / "train" / "n01443537" / "images"
    first = copy_identity(folder)
    assert copy_identity(folder) == first
    extra = images / "n01443537_9.JPEG"
    extra.write_bytes((images / "n01443537_0.JPEG").read_bytes())
    # adding an entry moves the folder's time; set apart here, as two writes in one clock tick
    # may share a time
    os.utime(images, ns=(1, 1))
    added = copy_identity(folder)
    assert added != first
    annotations = folder / "val" / "val_annotations.txt"
    annotations.write_text(annotations.read_text() + "\n")
    assert copy_identity(folder) != added


def _tiny_cache(**changes) -> dict:
    arrays = {
        "train_x": torch.zeros(4, 3, 64, 64, dtype=torch.uint8),
        "train_y": torch.tensor([0, 1, 2, 199]),
        "test_x": torch.zeros(2, 3, 64, 64, dtype=torch.uint8),
        "test_y": torch.tensor([0, 1]),
        "class_names": ["a", "b"],
    }
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


@pytest.mark.parametrize(
    "cache, reason",
    [
        ([1, 2], "not a dictionary"),
        (_tiny_cache(train_y=None), "train_y"),
        (_tiny_cache(test_y=torch.tensor([0, 200])), "outside the 200 classes"),
        (_tiny_cache(train_y=torch.tensor([0, 1, 2])), "4 images but 3 labels"),
        (_tiny_cache(test_x=torch.zeros(2, 3, 32, 32, dtype=torch.uint8)), "3x32x32"),
        (_tiny_cache(train_x=torch.zeros(4, 3, 64, 64)), "float32"),
    ],
)
def test_a_tinyimagenet_cache_not_as_fedkd_writes_it_is_refused_naming_it(tmp_path, cache, reason):
    """The cache is read instead of the archive: a damaged one raised a bare KeyError or
    TypeError, and one with a label past the 200 classes loaded and stopped training in the loss."""
    torch.save(cache, tmp_path / "tiny-imagenet-200.uint8.pt")
    with pytest.raises(DatasetCorruptError, match=reason) as err:
        load_dataset("tinyimagenet", tmp_path)
    assert str(tmp_path / "tiny-imagenet-200.uint8.pt") in str(err.value)
    assert "delete it" in str(err.value)
