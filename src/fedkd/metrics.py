"""Summary numbers of one run, as pure functions of its per-round metrics.

Every function takes a run's rows: the ``metrics.parquet`` DataFrame, or the list of per-round
dicts the engine builds (one per round, with ``round`` counted from 1). Accuracies are fractions
in [0, 1], as stored; targets are given in the same unit.

    best_accuracy(df)             highest test accuracy over the rounds (fedgkd tables 3-5, 7-9)
    best_round(df)                the round where it was reached (the first, on ties)
    final_accuracy(df)            test accuracy after the last round (fedgkd table 5)
    val_selected_accuracy(df)     test accuracy at the round best on the validation split
                                  (model selection without the test set)
    accuracy_at_round(df, r)      test accuracy after round r (fedgkd table 6)
    rounds_to_target(df, target)  first round reaching the target, None if never (feddf table 1)
    forgetting(table)             fedntd eq. 5 on a rounds x classes accuracy table
    forgetting_from_rows(df)      the same, from the per-round ``class_acc`` column
    summary(df)                   all of the above that need no argument, as a dict
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

ACC = "test_acc"


def _frame(rows: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a DataFrame sorted by round; an empty run is an error, not a silent NaN."""
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if len(df) == 0:
        raise ValueError("the run has no rounds; there is no accuracy to summarise")
    if "round" in df.columns:
        df = df.sort_values("round", kind="stable").reset_index(drop=True)
    return df


def best_accuracy(rows, column: str = ACC) -> float:
    """The highest value of ``column`` over all rounds ("top-1 accuracy, best round")."""
    return float(_frame(rows)[column].max())


def best_round(rows, column: str = ACC) -> int:
    """The round (1-based, as in the ``round`` column) with the highest ``column``; first on ties."""
    df = _frame(rows)
    return int(df["round"].iloc[int(np.argmax(df[column].to_numpy()))])


def final_accuracy(rows, column: str = ACC) -> float:
    """``column`` after the last recorded round."""
    return float(_frame(rows)[column].iloc[-1])


def val_selected_accuracy(rows, column: str = ACC, selector: str = "val_acc") -> float:
    """``column`` at the round with the highest ``selector`` (the first on ties): the test
    accuracy a run reports when its round is chosen on the validation split, not the test set.
    NaN for runs recorded without validation accuracy."""
    df = _frame(rows)
    if selector not in df.columns or df[selector].isna().all():
        return math.nan
    return float(df[column].iloc[int(np.nanargmax(df[selector].to_numpy(dtype=np.float64)))])


def accuracy_at_round(rows, round: int, column: str = ACC) -> float:
    """``column`` after round ``round`` (1-based). A round the run did not reach is an error."""
    df = _frame(rows)
    hit = df.loc[df["round"] == round, column]
    if hit.empty:
        raise ValueError(
            f"the run has no round {round}; its rounds are "
            f"{int(df['round'].min())}..{int(df['round'].max())}"
        )
    return float(hit.iloc[0])


def rounds_to_target(rows, target: float, column: str = ACC) -> int | None:
    """The first round whose ``column`` is >= ``target``; None when no round reaches it.

    ``target`` is a fraction like the stored accuracies (0.8 for feddf's 80%)."""
    if target > 1:
        raise ValueError(f"target={target} looks like a percentage; accuracies are fractions")
    df = _frame(rows)
    reached = df.loc[df[column] >= target, "round"]
    return None if reached.empty else int(reached.iloc[0])


def forgetting(class_acc: Any) -> float:
    """Forgetting of fedntd eq. (5), a backward-transfer measure (Chaudhry et al., 2018):

        F = 1/C * sum_c max_{t in 1..T-1} (A_c^t - A_c^T)

    with A_c^t the global model's test accuracy on class c after round t and T the last round:
    the mean over classes of (best accuracy in an earlier round - final accuracy). ``class_acc``
    is a (rounds x classes) array, rows in round order. The maximum runs over the rounds before
    the last, as in the equation, so a class whose final accuracy is its best contributes a
    negative gap (F is not clipped at 0). Classes without test samples (NaN columns) are left
    out. Fewer than two rounds have no earlier round: the result is NaN.
    """
    table = np.asarray(class_acc, dtype=np.float64)
    if table.ndim != 2:
        raise ValueError(f"class_acc must be a rounds x classes table, got shape {table.shape}")
    if table.shape[0] < 2:
        return math.nan
    present = ~np.isnan(table).all(axis=0)
    table = table[:, present]
    if table.shape[1] == 0:
        return math.nan
    gap = np.nanmax(table[:-1], axis=0) - table[-1]
    return float(np.nanmean(gap))


def class_accuracy_table(rows) -> np.ndarray:
    """The per-round ``class_acc`` lists stacked into a (rounds x classes) array."""
    df = _frame(rows)
    return np.stack([np.asarray(v, dtype=np.float64) for v in df["class_acc"]])


def forgetting_from_rows(rows) -> float:
    """fedntd eq. (5) forgetting of a run, from its per-round ``class_acc`` column."""
    return forgetting(class_accuracy_table(rows))


def summary(rows, column: str = ACC) -> dict[str, Any]:
    """Best/final accuracy, best round and forgetting of one run."""
    df = _frame(rows)
    return {
        "rounds": int(len(df)),
        "best_acc": best_accuracy(df, column),
        "best_round": best_round(df, column),
        "final_acc": final_accuracy(df, column),
        "val_selected_acc": val_selected_accuracy(df, column),
        "forgetting": forgetting_from_rows(df) if "class_acc" in df.columns else math.nan,
    }
