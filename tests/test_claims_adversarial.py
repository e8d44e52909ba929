"""The claims procedure on inputs built to fool it: ties, coinciding numbers (in a row and in an
average over settings), seeds that do not match between the pair, a single seed, NaN, no spread
at all, and a configuration's own claim on a value its table does not have."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claim_runs import TABLE3, config, make_run, pair_runs, render_claims
from fedkd.pipeline import validate_config
from fedkd.pipeline.config_file import ConfigError
from fedkd.report.claims.claim import Claim
from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.evaluate import _average
from fedkd.report.claims.verdict import contrast, paired_verdict, t_quantile

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
MEAN_CLAIM = Claim(id="x-beats-y", paper="fedgkd", source="Table 3", quote="q", treatment="x",
                   baseline="y", tables=("table3",), aggregate="mean")  # fmt: skip
STEP = 0.1  # one test example of 1,000, in pp


def _rows(diffs_by_setting: list[dict[int, float]], step: float = STEP) -> list[Comparison]:
    return [Comparison("t", {"alpha": i}, f"s{i}", d, 0, [], ("k", i), step=step)
            for i, d in enumerate(diffs_by_setting)]  # fmt: skip


def test_copies_of_one_setting_are_no_more_evidence_than_it():
    """Three settings whose per-seed differences are the same numbers (settings correlated at
    1): their average is that one setting, and it must not decide where the setting cannot."""
    one_step = {0: STEP, 1: STEP, 2: STEP}  # one test example ahead on every seed
    alone = _average(MEAN_CLAIM, _rows([one_step]))
    copies = _average(MEAN_CLAIM, _rows([one_step] * 3))
    assert alone.verdict.verdict == "inconclusive"
    assert copies.verdict.verdict == alone.verdict.verdict, copies.verdict


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=1, max_size=6),
)
def test_an_average_under_two_and_a_half_steps_never_holds_on_three_seeds(counts):
    """Per-seed means of differences on the measurement's lattice, however they coincide: as for
    one setting, on 3 seeds an average needs more than t(0.975, 2)/√3 = 2.48 steps to hold."""
    rows = _rows([{s: c * STEP for s, c in enumerate(seeds)} for seeds in counts])
    avg = _average(MEAN_CLAIM, rows)
    if avg.verdict.verdict == "holds":
        assert avg.verdict.effect > t_quantile(0.975, 2) / math.sqrt(3) * STEP * (1 - 1e-9)


def test_one_example_ahead_everywhere_does_not_hold_on_average(tmp_path):
    """FedGKD one test example (0.1 pp) ahead of FedAvg on every seed of every setting: no row
    holds, and the claim on their average must not hold either."""
    gaps = {alpha: [0.001, 0.001, 0.001] for alpha in (1.0, 0.5, 0.1)}
    df = render_claims(tmp_path, pair_runs(tmp_path / "runs", "table3", gaps), TABLE3)
    claim = df[df["claim"] == "fedgkd-beats-fedavg"]
    assert (claim.loc[claim["row"] == "setting", "verdict"] == "inconclusive").all()
    average = claim[claim["row"] == "average"].iloc[0]
    assert average["effect"] == pytest.approx(0.1)
    assert average["verdict"] != "holds" and average["claim_verdict"] != "holds", average


def test_seeds_that_do_not_match_between_the_pair_decide_nothing(tmp_path):
    """FedGKD far ahead on seeds 0-3, FedAvg run on seeds 1-4: three paired seeds, but seeds 0
    and 4 have no pair, so the row is 'too few seeds', never a verdict on the subset."""
    runs = []
    for seed in range(5):
        a = 0.60 + 0.01 * seed
        for label, extra, seeds in (("fedgkd", 0.05, {0, 1, 2, 3}), ("fedavg", 0.0, {1, 2, 3, 4})):
            if seed in seeds:
                d = make_run(tmp_path / "runs", f"{label}-{seed}", [a - 0.1, a + extra],
                             strategy=label, seed=seed)  # fmt: skip
                runs.append((f"table3/{label}", d))
    row = render_claims(tmp_path, runs, TABLE3).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 3 and row["seeds"] == "1;2;3"
    assert row["verdict"] == "too few seeds" and row["claim_verdict"] != "holds"
    assert "seed(s) 0, 4 without a pair" in row["note"]


def test_one_seed_nan_and_no_spread():
    assert paired_verdict([30.0], "higher", step=STEP).verdict == "too few seeds"
    assert paired_verdict([30.0, 31.0], "higher", step=STEP).verdict == "too few seeds"
    with pytest.raises(ValueError, match="finite"):
        contrast([1.0, math.nan, 2.0])
    # a tie on every seed never holds a superiority, with or without a known step
    assert paired_verdict([0.0, 0.0, 0.0], "higher", step=STEP).verdict == "inconclusive"
    assert paired_verdict([0.0, 0.0, 0.0], "higher").verdict == "inconclusive"
    # constant differences without a step: no spread, the t statistic undefined: no verdict
    assert paired_verdict([5.0, 5.0, 5.0], "higher").verdict == "inconclusive"
    assert paired_verdict([-5.0, -5.0, -5.0], "higher").verdict == "inconclusive"
    # and no interval: a zero-width 95% interval [5, 5] would claim a certainty the test lacks
    v = paired_verdict([5.0, 5.0, 5.0], "higher")
    assert math.isnan(v.ci_low) and math.isnan(v.ci_high), v


def test_an_own_claim_on_rounds_to_target_needs_a_table_with_targets():
    """tiny's table3 is a grid without target accuracies: a claim on its rounds to a target is
    refused when the workflow plans, not after training, when the claims page is rendered."""
    cfg = config("tiny")
    cfg["claims"] = [{"statement": "FedGKD needs fewer rounds.", "tables": "table3",
                      "treatment": "fedgkd", "baseline": "fedavg", "direction": "lower",
                      "metric": "rounds_to_target"}]  # fmt: skip
    with pytest.raises(ConfigError, match="rounds_to_target"):
        validate_config(cfg, SCHEMA, check_specs=False)


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({"metric": "at_round", "rounds_from": 50},
         "rounds_from 50 is past the last round of the runs of 'table3' (3)"),
        ({"metric": "local_final"}, "which the runs of 'table3' do not evaluate (eval_local false)"),
    ],
)  # fmt: skip
def test_an_own_claim_on_a_value_its_runs_never_have_is_refused_at_planning(claim, message):
    """A round past the runs' last, or the local accuracy of runs that do not evaluate it: no
    seed would ever have the value, so the page's "too few seeds" would mislead."""
    cfg = config("tiny")
    rounds = cfg["defaults"]["rounds"]
    assert isinstance(rounds, int) and rounds < 50 and not cfg["defaults"].get("eval_local")
    cfg["claims"] = [{"statement": "FedGKD is ahead.", "tables": "table3", "treatment": "fedgkd",
                      "baseline": "fedavg", **claim}]  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(cfg, SCHEMA, check_specs=False)
    cfg["claims"][0].pop("rounds_from", None)
    if claim["metric"] == "at_round":  # from round 1, on table6's rounds 1 and 3: valid
        cfg["claims"][0]["tables"] = "table6"
        validate_config(cfg, SCHEMA, check_specs=False)


@pytest.mark.parametrize(
    ("trend", "message"),
    [
        ({"key": "dataset", "start": "mnist5k", "end": "synthtext"},
         "got start 'mnist5k', end 'synthtext'"),
        ({"key": "alpha"}, "grows toward 'low' or 'high', got ''"),
    ],
)  # fmt: skip
def test_a_bad_trend_is_refused_naming_the_value_given(trend, message):
    cfg = config("tiny")
    cfg["claims"] = [{"statement": "The gap grows.", "tables": "table3", "treatment": "fedgkd",
                      "baseline": "fedavg", "trend": trend}]  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    assert message in str(refused.value), str(refused.value)
