"""Run summaries: best/final/at-round accuracy, rounds to target, fedntd forgetting (eq. 5)."""

import math

import numpy as np
import pandas as pd
import pytest

from fedkd.metrics import (
    accuracy_at_round,
    best_accuracy,
    best_round,
    class_accuracy_table,
    final_accuracy,
    forgetting,
    forgetting_from_rows,
    rounds_to_target,
    summary,
)

# a made-up run: accuracy peaks in round 3 and drops in the last round
ROWS = [
    {"round": 1, "test_acc": 0.30, "class_acc": [0.5, 0.2, 0.9]},
    {"round": 2, "test_acc": 0.60, "class_acc": [0.7, 0.4, 0.6]},
    {"round": 3, "test_acc": 0.85, "class_acc": [0.4, 0.3, 0.7]},
    {"round": 4, "test_acc": 0.80, "class_acc": [0.6, 0.5, 0.8]},
]


def test_best_final_and_at_round():
    df = pd.DataFrame(ROWS)
    assert best_accuracy(df) == 0.85
    assert best_round(df) == 3
    assert final_accuracy(df) == 0.80
    assert accuracy_at_round(df, 2) == 0.60
    assert accuracy_at_round(df, 4) == 0.80
    with pytest.raises(ValueError, match="no round 5"):
        accuracy_at_round(df, 5)


def test_rows_in_any_order_and_as_dicts_give_the_same_answers():
    shuffled = pd.DataFrame([ROWS[2], ROWS[0], ROWS[3], ROWS[1]])
    assert final_accuracy(shuffled) == 0.80
    assert final_accuracy(ROWS) == 0.80  # a list of per-round dicts, as the engine builds them
    assert best_round(ROWS) == 3


def test_best_round_is_the_first_on_ties():
    rows = [{"round": r, "test_acc": a} for r, a in [(1, 0.5), (2, 0.7), (3, 0.7)]]
    assert best_round(rows) == 2


def test_rounds_to_target_reached_on_equality_and_not_reached():
    assert rounds_to_target(ROWS, 0.60) == 2  # >= : round 2 reaches exactly 0.60
    assert rounds_to_target(ROWS, 0.61) == 3
    assert rounds_to_target(ROWS, 0.20) == 1
    assert rounds_to_target(ROWS, 0.90) is None
    with pytest.raises(ValueError, match="fraction"):
        rounds_to_target(ROWS, 80)


def test_forgetting_by_hand():
    # per class: best earlier round minus final round (fedntd eq. 5)
    #   class 0: max(0.5, 0.7, 0.4) - 0.6 = 0.1
    #   class 1: max(0.2, 0.4, 0.3) - 0.5 = -0.1   (final is the peak: a negative gap)
    #   class 2: max(0.9, 0.6, 0.7) - 0.8 = 0.1
    table = np.array([r["class_acc"] for r in ROWS])
    assert forgetting(table) == pytest.approx((0.1 - 0.1 + 0.1) / 3, abs=1e-12)


def test_forgetting_of_a_steady_or_improving_model():
    assert forgetting([[0.5, 0.5], [0.5, 0.5]]) == 0.0
    assert forgetting([[0.2, 0.3], [0.4, 0.6]]) == pytest.approx(-0.25)


def test_forgetting_skips_classes_without_test_samples_and_needs_two_rounds():
    nan = math.nan
    assert forgetting([[0.9, nan], [0.5, nan]]) == pytest.approx(0.4)
    assert math.isnan(forgetting([[0.9, 0.3]]))
    with pytest.raises(ValueError, match="rounds x classes"):
        forgetting([0.9, 0.3])


def test_forgetting_from_rows_reads_the_parquet_column(tmp_path):
    # the engine writes class_acc as a list column; parquet hands it back as arrays
    path = tmp_path / "metrics.parquet"
    pd.DataFrame(ROWS).to_parquet(path, index=False)
    df = pd.read_parquet(path)
    assert class_accuracy_table(df).shape == (4, 3)
    assert forgetting_from_rows(df) == pytest.approx(0.1 / 3, abs=1e-12)
    s = summary(df)
    assert s["rounds"] == 4 and s["best_round"] == 3 and s["final_acc"] == 0.80
    assert s["forgetting"] == pytest.approx(0.1 / 3, abs=1e-12)


def test_an_empty_run_is_an_error():
    with pytest.raises(ValueError, match="no rounds"):
        best_accuracy(pd.DataFrame())


def test_val_selected_accuracy_reads_test_accuracy_at_the_best_validation_round():
    from fedkd.metrics import val_selected_accuracy

    rows = [
        {"round": 1, "test_acc": 0.50, "val_acc": 0.40},
        {"round": 2, "test_acc": 0.70, "val_acc": 0.65},  # best on validation
        {"round": 3, "test_acc": 0.80, "val_acc": 0.60},  # best on test
        {"round": 4, "test_acc": 0.60, "val_acc": 0.65},  # a tie: the first round wins
    ]
    assert val_selected_accuracy(rows) == 0.70
    assert math.isnan(val_selected_accuracy([{"round": 1, "test_acc": 0.5}]))
    assert summary(rows)["val_selected_acc"] == 0.70
