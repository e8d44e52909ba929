"""The small run the hostile-input and damaged-file tests train: one client of 180 images a round
and a narrowed CNN, as a RunSpec's keys and as `fedkd train` flags, and the environment their
commands run in (a fixed hash seed); the strategy parameters that keep a comparison's
server-side work small; and a few CIFAR-shaped images for the trainers' ResNet tests."""

import os

import torch

from fedkd.data.base import ArraySplit, FedDataset

TINY = dict(
    dataset="mnist5k", clients=20, participation=0.05, local_epochs=1, device="cpu",
    model_options={"channels": [4, 8], "hidden": 16},
)  # fmt: skip
TINY_ARGS = [
    "--dataset", "mnist5k", "--clients", "20", "--participation", "0.05", "--local-epochs", "1",
    "--device", "cpu", "--model-options", "{channels: [4, 8], hidden: 16}",
]  # fmt: skip
ENV = {**os.environ, "PYTHONHASHSEED": "0"}

# server-side work kept small where a strategy has a knob for it, in the tests that compare the
# trainers (the clients' side is what they test); noise is feddf's unlabeled data, since its
# CIFAR-shaped default, CIFAR-100, is not on disk
SMALL_SERVER_PARAMS = {
    "feddf": {"max_steps": 4, "eval_every": 2, "patience": 4, "unlabeled": "noise"},
    "fedgkd": {"buffer": 2},
    "fedgkd+": {"buffer": 2},
    "fedgkd-vote": {"buffer": 2},
}


def cifar_shaped(n_train=96, n_val=24, n_test=24) -> FedDataset:
    """A few random CIFAR-10-shaped images (uint8 3x32x32, random labels) for runs that test
    the trainers' arithmetic, not accuracy."""
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> ArraySplit:
        x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=gen)
        return ArraySplit(x, torch.randint(0, 10, (n,), generator=gen))

    return FedDataset(
        "cifar-shaped", "image", 10, split(n_train), split(n_val), split(n_test),
        mean=(0.49, 0.48, 0.45), std=(0.25, 0.24, 0.26), source="synthetic (test)",
    )  # fmt: skip
