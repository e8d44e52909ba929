"""The papers' names of the strategies and of the variants built on them, for every table and
figure: ``display_name("fedgkd-vote")`` is "FedGKD-VOTE", ``display_name("fedgkd-M5")`` is
"FedGKD (M=5)". Keyed by the strategy registry's names (tests/test_report.py checks that every
registered strategy has one); kept here rather than in the strategy modules because the sources a
run depends on are hashed, and a renamed label must not retrain anything."""

from __future__ import annotations

import re

STRATEGY_NAMES = {
    "fedavg": "FedAvg",
    "fedavgm": "FedAvgM",
    "fedcad": "FedCAD",
    "feddf": "FedDF",
    "feddistill+": "FedDistill+",
    "fedgen": "FedGen",
    "fedgkd": "FedGKD",
    "fedgkd+": "FedGKD+",
    "fedgkd-vote": "FedGKD-VOTE",
    "fedlsd": "FedLSD",
    "fednova": "FedNova",
    "fedntd": "FedNTD",
    "fedprox": "FedProx",
    "moon": "MOON",
    "scaffold": "SCAFFOLD",
}

# the papers' own spellings of their datasets
PAPER_DATASETS = {
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "tinyimagenet": "Tiny-ImageNet",
    "agnews": "AG News",
    "sst5": "SST-5",
    "mnist": "MNIST",
}

# longest first, so "fedgkd-vote-M3" is FedGKD-VOTE's and not FedGKD's
_BY_LENGTH = sorted(STRATEGY_NAMES, key=len, reverse=True)


def _suffix_text(part: str) -> str:
    """One dash-separated part of a variant name after its strategy: M5 → "M=5", mse → "MSE"."""
    m = re.fullmatch(r"([A-Za-z]+)(\d+(?:\.\d+)?)", part)
    if m:
        return f"{m[1]}={m[2]}"
    return part.upper() if part.isalpha() else part


def display_name(name: str) -> str:
    """The paper's name of a strategy or of a variant "<strategy>-<part>-..." (its parts in
    brackets); any other label (e.g. "M=1", "none") is shown as it is."""
    if name in STRATEGY_NAMES:
        return STRATEGY_NAMES[name]
    for strategy in _BY_LENGTH:
        if name.startswith(strategy + "-"):
            parts = [p for p in name[len(strategy) + 1 :].split("-") if p]
            if parts:
                return f"{STRATEGY_NAMES[strategy]} ({', '.join(map(_suffix_text, parts))})"
    return name


def paper_dataset_name(key) -> str:
    """A dataset as the papers spell it ("CIFAR-10"); any other name as it is."""
    return PAPER_DATASETS.get(str(key), str(key))
