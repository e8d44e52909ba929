"""Collapsed runs: a run whose global model never got meaningfully above chance.

A model that predicts one class for everything (or guesses) scores about chance, ``1/K`` on the
balanced test sets used here (K classes). Such a run may still end "complete" with a finite loss
(at α=0.1 MOON can sit at exactly 10.00 % on a 10-class task in every round), so the tables would
show its chance-level number as a result. The rule, on the global model's test accuracy:

    collapsed  ⇔  the run played at least one round, and in every round
                  test_acc < chance + COLLAPSE_MARGIN × (1 − chance),   chance = 1/K

i.e. the best round covered less than 5 % of the way from chance to a perfect score: below
14.5 % for 10 classes, 5.95 % for 100, 5.5 % for 200, 52.5 % for 2. The run's record
(run.json ``summary.collapsed``), the aggregate (column ``collapsed``) and every table cell
that averages such a run carry the mark; the caption explains it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

COLLAPSE_MARGIN = 0.05
# the mark of a table cell fed by a collapsed run, and what the caption says about it
MARK = "†"
CAPTION_NOTE = (
    f"{MARK}: at least one run of the cell collapsed: its global model never got {COLLAPSE_MARGIN:.0%} "
    "of the way from chance (1/classes) to a perfect test accuracy in any round."
)


def chance_accuracy(num_classes: int) -> float:
    return 1.0 / num_classes


def collapse_threshold(num_classes: int) -> float:
    """The test accuracy a run must reach in some round not to count as collapsed."""
    chance = chance_accuracy(num_classes)
    return chance + COLLAPSE_MARGIN * (1.0 - chance)


def is_collapsed(test_acc: Iterable[float], num_classes: int | None) -> bool:
    """The rule above; False without rounds or without a class count (nothing to judge)."""
    if not num_classes or num_classes < 2:
        return False
    accs = [float(a) for a in test_acc if a is not None and not math.isnan(float(a))]
    return bool(accs) and max(accs) < collapse_threshold(num_classes)
