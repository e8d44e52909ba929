"""The papers' names of the strategies and of the variants built on them, for every table and
figure: ``display_name("fedgkd-vote")`` is "FedGKD-VOTE", ``display_name("fedgkd-M5")`` is
"FedGKD (M=5)". A strategy is shown by the name its class declares (``display_name``), else by its
class's name (``FedProx``), read from its module without importing it (fedkd.report.declared).
Only the exceptions are kept here: where a paper spells a strategy otherwise than its class is
named. Here, not in the strategy modules, because the sources a run depends on are hashed, and a renamed label must
not retrain anything."""

from __future__ import annotations

import re

from fedkd.report.declared import declared_strategies

# strategy → the papers' spelling, where it is not the strategy class's name
PAPER_NAMES = {
    "feddistill+": "FedDistill+",  # class FedDistillPlus
    "fedgkd+": "FedGKD+",  # class FedGKDPlus
    "fedgkd-vote": "FedGKD-VOTE",  # class FedGKDVote
    "moon": "MOON",  # class Moon
    "scaffold": "SCAFFOLD",  # class Scaffold
}


def strategy_display_names() -> dict[str, str]:
    """Every registered strategy's shown name, by its registry name."""
    names = {s.name: s.display_name or s.class_name for s in declared_strategies().values()}
    names.update((k, v) for k, v in PAPER_NAMES.items() if k in names)
    return names


# the papers' own spellings of their datasets
PAPER_DATASETS = {
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "tinyimagenet": "Tiny-ImageNet",
    "agnews": "AG News",
    "sst5": "SST-5",
    "mnist": "MNIST",
}


# a variant's word of up to this many letters is an abbreviation, shown in capitals (mse → MSE,
# cad → CAD); a longer one is a word, shown as written (batched)
ABBREVIATION_LETTERS = 4


def _suffix_text(part: str) -> str:
    """One dash-separated part of a variant name after its strategy: M5 → "M=5", mse → "MSE",
    batched → "batched"."""
    m = re.fullmatch(r"([A-Za-z]+)(\d+(?:\.\d+)?)", part)
    if m:
        return f"{m[1]}={m[2]}"
    if part.isalpha() and len(part) <= ABBREVIATION_LETTERS:
        return part.upper()
    return part


def display_name(name: str) -> str:
    """The paper's name of a strategy or of a variant "<strategy>-<part>-..." (its parts in
    brackets); any other label (e.g. "M=1", "none") is shown as it is."""
    names = strategy_display_names()
    if name in names:
        return names[name]
    # longest first, so "fedgkd-vote-M3" is FedGKD-VOTE's and not FedGKD's
    for strategy in sorted(names, key=len, reverse=True):
        if name.startswith(strategy + "-"):
            parts = [p for p in name[len(strategy) + 1 :].split("-") if p]
            if parts:
                return f"{names[strategy]} ({', '.join(map(_suffix_text, parts))})"
    return name


def paper_dataset_name(key) -> str:
    """A dataset as the papers spell it ("CIFAR-10"); any other name as it is."""
    return PAPER_DATASETS.get(str(key), str(key))
