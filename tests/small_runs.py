"""The small run the hostile-input and damaged-file tests train: one client of 180 images a round
and a narrowed CNN, as a RunSpec's keys and as `fedkd train` flags, and the environment their
commands run in (a fixed hash seed); and the strategy parameters that keep a
comparison's server-side work small."""

import os

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
