"""Which of the papers' settings a run's dataset takes its strategy defaults from.

The papers set their NLP hyperparameters once for AG News and SST-5, so every text dataset (the
generated ``synthtext`` included) shares one setting, ``"text"``, read from the dataset registry's
kind rather than from a list of names. Image datasets keep their own name, since the papers' values
differ per dataset (e.g. FedGen's coefficient 0.1 on CIFAR-10 and 1 on CIFAR-100); the offline
MNIST stand-ins take CIFAR-10's values, as config/config.yaml has them stand in for CIFAR-10.
"""

from __future__ import annotations

from fedkd.data import dataset_kind

TEXT = "text"
STAND_INS = {"mnist": "cifar10", "mnist5k": "cifar10"}


def paper_setting(dataset: str) -> str:
    """``"text"`` for a text dataset, else the image dataset whose paper values apply."""
    if dataset_kind(dataset) == "text":
        return TEXT
    key = dataset.lower()
    return STAND_INS.get(key, key)


def is_text(dataset: str) -> bool:
    return paper_setting(dataset) == TEXT
