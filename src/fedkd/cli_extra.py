"""Commands added by later stages (aggregate, render, bench); each registers its subparser here."""

from __future__ import annotations


def register(sub) -> None:
    pass
