"""Random CIFAR-10-shaped data for benchmarks and tests of cost (not of accuracy)."""

from __future__ import annotations

import torch

from fedkd.data.base import ArraySplit, FedDataset
from fedkd.data.cifar import CIFAR


def synthetic_cifar(n_train: int = 45_000, n_val: int = 5_000, n_test: int = 10_000) -> FedDataset:
    """Random CIFAR-10-shaped data (uint8 3×32×32, 10 classes): the cost of CIFAR-10, not its
    accuracy. Labels are balanced so the partitioners behave as on the real set."""
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> ArraySplit:
        x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=gen)
        return ArraySplit(x, torch.arange(n) % 10)

    return FedDataset(
        "synthetic-cifar10", "image", 10, split(n_train), split(n_val), split(n_test),
        mean=CIFAR["cifar10"]["mean"], std=CIFAR["cifar10"]["std"], source="synthetic (benchmark)",
    )  # fmt: skip
