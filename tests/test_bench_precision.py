"""``fedkd bench --precision-check``'s pairing: each precision against the first, seed by seed,
with a paired t-test where scipy is installed and the differences spread."""

import sys

import pytest

from fedkd.tools.bench.precision import paired_differences


def records(accs: dict[str, list[float]]) -> list[dict]:
    return [
        {"precision": p, "seed": seed, "final_acc": acc, "best_acc": acc}
        for p, values in accs.items()
        for seed, acc in enumerate(values)
    ]


def test_differences_are_taken_seed_by_seed_and_tested_in_pairs():
    # tf32 - fp32 per seed: 1, 2, 3; t = 2 / (1 / sqrt 3) = 3.4641 on 2 degrees of freedom
    checked = records({"fp32": [10.0, 20.0, 30.0], "tf32": [11.0, 22.0, 33.0]})
    got = paired_differences(checked, "tf32", "fp32", "final_acc")
    assert got["differences"] == [1.0, 2.0, 3.0] and got["mean"] == 2.0
    assert got["t"] == pytest.approx(3.4641016, rel=1e-6)
    assert got["p"] == pytest.approx(0.0741799, rel=1e-4)  # two-sided, Student's t with 2 d.f.


def test_equal_differences_have_no_spread_to_test():
    checked = records({"fp32": [0.5, 0.6], "tf32": [0.5, 0.6]})  # a CPU: tf32 is fp32
    got = paired_differences(checked, "tf32", "fp32", "best_acc")
    assert (got["t"], got["p"], got["why"]) == (None, None, "no spread to test")


def test_without_scipy_the_differences_stand_and_the_test_is_named_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # import scipy raises ImportError
    checked = records({"fp32": [10.0, 20.0, 30.0], "tf32": [11.0, 22.0, 33.0]})
    got = paired_differences(checked, "tf32", "fp32", "final_acc")
    assert got["differences"] == [1.0, 2.0, 3.0] and got["p"] is None
    assert got["why"] == "no t-test: scipy is not installed"
