"""The claims table on constructed runs: each verdict, non-finite, collapsed and diverged runs,
averages and trends, comparisons two claims share, a pair judged on its own differences and
independently of the other methods of its setting, and the setting's variance."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from claim_runs import BYSTANDER, CLAIMS, KEY, TABLE3, make_run, pair_runs, render_claims
from fedkd.report import aggregate_runs, render, write_aggregate


def test_claims_table_gives_each_verdict_on_constructed_runs(tmp_path):
    """FedGKD against FedAvg in Table 3, paired by seed: clearly ahead at alpha 1 (holds),
    clearly behind at alpha 0.5 (contradicted), either way at alpha 0.1 (inconclusive); MOON has
    no runs (not run). FedGKD > FedAvg is a claim on the average: it is inconclusive."""
    gaps = {1.0: [0.020, 0.022, 0.018], 0.5: [-0.020, -0.022, -0.018], 0.1: [0.03, -0.03, 0.01]}
    df = render_claims(tmp_path, pair_runs(tmp_path / "runs", "table3", gaps), TABLE3)
    claim = df[df["claim"] == "fedgkd-beats-fedavg"]
    beats = claim.set_index("setting")
    assert beats.loc[KEY.format(1), "verdict"] == "holds"
    assert beats.loc[KEY.format(0.5), "verdict"] == "contradicted"
    assert beats.loc[KEY.format(0.1), "verdict"] == "inconclusive"
    assert beats.loc[KEY.format(1), "effect"] == pytest.approx(2.0)  # percentage points
    assert beats.loc[KEY.format(0.1), "effect"] == pytest.approx(1 / 3)
    assert beats.loc[KEY.format(1), "paper_gap"] == pytest.approx(79.14 - 77.30)  # CIFAR-10 α=1
    # the claim is on the average over settings: its row decides
    average = claim[claim["row"] == "average"].iloc[0]
    assert average["effect"] == pytest.approx((2 - 2 + 1 / 3) / 3)
    assert (claim["claim_verdict"] == average["verdict"]).all()
    assert (claim["claim_summary"] == "ahead in 2 of 3 settings").all()
    # three seeds give no power figure worth printing: "more seeds needed"
    assert beats.loc[KEY.format(0.1), "more_seeds"] and pd.isna(
        beats.loc[KEY.format(0.1), "seeds_needed"]
    )
    # the test is the pair's paired t on 2 degrees of freedom; the setting's variance (three
    # methods × three seeds, 4 degrees of freedom) is a diagnostic beside it
    assert (beats.loc[[KEY.format(a) for a in (1, 0.5, 0.1)], "df"] == 2).all()
    assert (
        "from 3 methods × 3 seeds (4 df; a diagnostic" in beats.loc[KEY.format(1), "variance_from"]
    )
    assert beats.loc[KEY.format(1), "sd"] == pytest.approx(0.2, rel=1e-6)
    assert beats.loc[KEY.format(1), "step"] == pytest.approx(0.1)  # 1,000 test examples
    assert (beats["n"] == 3).all() and (beats["seeds"] == "0;1;2").all()
    # three CIFAR-10 settings of the paper's eleven (Tables 3 and 4): the scope it holds on
    assert (claim["scope"] == "tested on 3 of the paper's 11 settings").all()
    moon = df[df["claim"] == "fedgkd-beats-moon"]
    assert list(moon["verdict"]) == ["not run"] and "moon" in moon["note"].iloc[0]
    # every claim has a row, and every row names its stand-in
    assert set(df["claim"]) == {c.id for c in CLAIMS}
    ran = df[(df["verdict"] != "not run") & (df["row"] == "setting")]
    assert ran["setting"].str.contains("stand-in for CIFAR-10").all()
    # the trend: FedGKD − FedAvg from α=1 (+2) to α=0.1 (+1/3) shrinks here
    trend = df[df["claim"] == "fedgkd-gap-grows-with-heterogeneity"].iloc[0]
    assert trend["row"] == "trend" and trend["effect"] == pytest.approx(1 / 3 - 2)
    assert "α=0.1 against α=1" in trend["setting"]
    md = (tmp_path / "out" / "claims.md").read_text()
    assert "paired t-test" in md and f"Table: {len(CLAIMS)} claims: " in md and "Holm" in md
    # the page's rows are effects with intervals: its caption names the seeds, and no "±"
    caption = md.splitlines()[0]
    assert "seeds 0, 1, 2" in caption and "±" not in caption
    # the Markdown and LaTeX say, beside the verdict, which of the paper's settings it is about
    for ext in ("md", "tex"):
        text = (tmp_path / "out" / f"claims.{ext}").read_text()
        assert "[fedgkd-beats-fedavg] (tested on 3 of the paper's 11 settings)" in text


def test_a_nan_or_inf_run_is_named_and_fails_its_setting(tmp_path):
    """One complete run with a NaN final accuracy, one with inf, in the aggregate the table reads
    (aggregation refuses them now; an aggregate written before, or by hand, may hold them): the
    table builds, the runs are named, and a setting with a seed that has no value to compare
    is "failed": it does not hold on the other seeds."""
    gaps = {1.0: [0.02, 0.022, 0.018, 0.021], 0.5: [0.02, 0.022, 0.018]}
    runs = pair_runs(tmp_path / "runs", "table3", gaps)
    agg = tmp_path / "claims.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    df = pd.read_parquet(agg)
    bad = {"table3-fedgkd-1.0-3-10": math.nan, "table3-fedgkd-0.5-2-19": math.inf}
    for name, value in bad.items():
        last = df["run"].str.endswith(name) & (df["round"] == 2)
        assert last.sum() == 1
        df.loc[last, "test_acc"] = value
    df.to_parquet(agg, index=False)
    out = tmp_path / "out" / "claims"
    render("claims", out, aggregate=agg, options={"sources": TABLE3, "stand_ins": {}})
    table = pd.read_csv(out.with_name("claims.csv"), dtype=str, keep_default_na=False)
    rows = table[table["claim"] == "fedgkd-beats-fedavg"].set_index("setting")
    kept = rows.loc["mnist5k, α=1, C=0.2, E=2, R=2"]  # 3 of 4 seeds: no verdict on a subset
    assert kept["n"] == "3" and kept["verdict"] == "failed" and kept["seeds"] == "0;1;2"
    assert "FedGKD seed 3: non-finite test_acc nan at round(s) 2" in kept["note"]
    assert "table3-fedgkd-1.0-3-10" in kept["note"]
    lost = rows.loc["mnist5k, α=0.5, C=0.2, E=2, R=2"]  # 2 seeds left: no verdict, the cause named
    assert lost["n"] == "2" and lost["failed"] == "1" and lost["verdict"] == "failed"
    assert "non-finite test_acc inf" in lost["note"]


def test_runs_stuck_at_chance_count_with_what_they_reached(tmp_path):
    """10.0 vs 10.0 on a 10-class task: the runs collapsed, and they count as they are (marked
    †): a tie, not a "failed" setting that discards them."""
    runs = []
    for seed in range(3):
        for label, acc in (("fedavg", 0.1), ("fedgkd", 0.1), (BYSTANDER, 0.5 + seed / 100)):
            d = make_run(tmp_path / "runs", f"{label}{seed}", [0.1, acc], strategy=label,
                         seed=seed, collapsed=label != BYSTANDER)  # fmt: skip
            runs.append((f"table3/{label}", d))
    row = render_claims(tmp_path, runs, TABLE3).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["verdict"] == "inconclusive" and row["n"] == 3 and row["failed"] == 0
    assert row["effect"] == 0
    assert row["setting"].endswith("†") and "collapsed to chance" in row["note"]
    md = (tmp_path / "out" / "claims.md").read_text()
    assert "collapsed" in md  # the caption says what † means


def test_a_collapsed_seed_is_never_dropped_from_a_holds(tmp_path):
    """FedGKD 2 points ahead on three seeds and at chance on the fourth: counted, the mean is
    far below 0 and the claim does not hold (left out, it would: +2.0 on three seeds)."""
    runs = pair_runs(tmp_path / "runs", "table3", {1.0: [0.02, 0.021, 0.019, 0.02]})
    chance = tmp_path / "runs" / "table3-fedgkd-1.0-3-10"
    rec = json.loads((chance / "run.json").read_text())
    (chance / "run.json").write_text(json.dumps({**rec, "summary": {"collapsed": True}}))
    metrics = pd.read_parquet(chance / "metrics.parquet").assign(test_acc=0.1)
    metrics.to_parquet(chance / "metrics.parquet", index=False)
    row = render_claims(tmp_path, runs, TABLE3).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 4 and row["seeds"] == "0;1;2;3" and row["verdict"] != "holds"
    assert row["effect"] == pytest.approx((2 + 2.1 + 1.9 + (10 - 62)) / 4)
    assert "FedGKD seed 3 collapsed to chance" in row["note"]
    assert row["claim_verdict"] != "holds"


def test_a_setting_whose_runs_all_diverged_counts_what_they_reached(tmp_path):
    runs = []
    for seed in range(3):
        for label in ("fedavg", "fedgkd"):
            d = make_run(tmp_path / "runs", f"{label}{seed}", [0.5], strategy=label, seed=seed,
                         status="diverged", rounds=2)  # fmt: skip
            runs.append((f"table3/{label}", d))
    row = render_claims(tmp_path, runs, TABLE3).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 3 and row["effect"] == 0 and row["failed"] == 0
    assert (
        "FedAvg seeds 0, 1, 2 diverged after round 1, counted with what it reached ("
        in (row["note"])
    )
    assert "runs/fedavg0, fedavg1" in row["note"]
    # two methods and three seeds decide by the paired t-test (2 df): a tie never holds
    assert row["verdict"] == "inconclusive" and row["claim_verdict"] == "inconclusive"


def test_an_average_without_all_its_settings_does_not_decide_the_claim(tmp_path):
    runs = pair_runs(tmp_path / "runs", "table3", {1.0: [0.02, 0.022, 0.018],
                                                   0.1: [0.02, 0.022, 0.018]})  # fmt: skip
    agg = tmp_path / "claims.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    df = pd.read_parquet(agg)
    # every FedGKD run at α 0.1 without a value to compare: no pair in that setting
    df.loc[df["run"].str.contains("table3-fedgkd-0.1-") & (df["round"] == 2), "test_acc"] = math.nan
    df.to_parquet(agg, index=False)
    out = tmp_path / "out" / "claims"
    render("claims", out, aggregate=agg, options={"sources": TABLE3, "stand_ins": {}})
    table = pd.read_csv(out.with_name("claims.csv"))
    claim = table[table["claim"] == "fedgkd-beats-fedavg"].set_index("row")
    assert claim.loc["average", "verdict"] == "holds" and claim.loc["average", "n"] == 3
    assert claim.loc["average", "setting"] == "average over 1 setting"
    assert "left out of the average" in claim.loc["average", "note"]
    assert (claim["claim_verdict"] == "failed").all()


def test_a_run_that_diverged_counts_with_what_it_reached(tmp_path):
    runs = pair_runs(tmp_path / "runs", "table3", {1.0: [0.1, 0.1, 0.12, 0.11]})
    diverged = tmp_path / "runs" / "table3-fedgkd-1.0-3-10" / "run.json"
    rec = json.loads(diverged.read_text())
    diverged.write_text(json.dumps({**rec, "status": "diverged"}))
    row = render_claims(tmp_path, runs, TABLE3).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 4 and row["seeds"] == "0;1;2;3" and row["failed"] == 0
    assert "FedGKD seed 3 diverged after round 2, counted with what it reached" in row["note"]
    assert row["verdict"] == "holds"


def test_the_same_runs_make_one_row_naming_the_tables_that_share_them(tmp_path):
    """Table 3 at α 0.5 and Table 5 at C 0.2 are the same runs: FedGKD+ vs MOON (which reads
    both) keeps one row and names the other; a comparison of two claims is named in both."""
    runs = pair_runs(tmp_path / "runs", "table3", {0.5: [0.02, 0.03, 0.025]},
                     treatment="fedgkd+", baseline="moon")  # fmt: skip
    runs += [(lab.replace("table3/", "table5/"), d) for lab, d in runs]
    runs += pair_runs(tmp_path / "runs", "table5", {0.5: [0.02, 0.03, 0.025]},
                      treatment="fedgkd+", baseline="moon", participation=0.4)  # fmt: skip
    src = {**TABLE3, "table5": {"paper": "fedgkd_table5", "layout": "grid_by_stat",
                                "options": {}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    moon = df[(df["claim"] == "fedgkd+-beats-moon")]
    assert len(moon) == 2  # C=0.2 once (tables 3 and 5), C=0.4
    shared = moon[moon["also_in"] != ""].iloc[0]
    assert shared["table"] == "table3" and shared["also_in"].startswith("table5: ")
    # both rows read Table 5, whose sentence on "our proposed methods" is a claim of its own
    # over the same runs: each row names the other claim
    per_c = df[df["claim"] == "fedgkd+-beats-moon-per-participation"]
    assert len(per_c) == 2
    assert (moon["shared_with"] == "fedgkd+-beats-moon-per-participation").all()
    assert (per_c["shared_with"] == "fedgkd+-beats-moon").all()


def test_a_comparison_two_claims_share_is_named_in_both(tmp_path):
    """The final round of table 5 is the last at-round column of table 6 when both hold the same
    runs: two claims, one comparison, each row naming the other claim."""
    runs = pair_runs(tmp_path / "runs", "table5", {0.5: [0.02, 0.03, 0.025]})
    runs += [(lab.replace("table5/", "table6/"), d) for lab, d in runs]
    src = {
        "table5": {"paper": "fedgkd_table5", "layout": "grid_by_stat", "options": {},
                   "best_of": {}},
        "table6": {"paper": "fedgkd_table6", "layout": "at_rounds", "options": {"rounds": [2]},
                   "best_of": {}},
    }  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    final = df[df["claim"] == "fedgkd-final-beats-fedavg-per-participation"].iloc[0]
    at_round = df[df["claim"] == "fedgkd-beats-fedavg-at-each-round"].iloc[0]
    assert final["shared_with"] == "fedgkd-beats-fedavg-at-each-round"
    assert at_round["shared_with"] == "fedgkd-final-beats-fedavg-per-participation"
    assert final["effect"] == pytest.approx(at_round["effect"])
    # the best round is another value: no sharing with the best-round claim of the same runs
    best = df[df["claim"] == "fedgkd-beats-fedavg-per-participation"].iloc[0]
    assert best["shared_with"] == ""
    assert (
        "comparison is a row of more than one claim" in (tmp_path / "out" / "claims.md").read_text()
    )


def test_round_one_is_left_out_where_fedgkd_does_not_distil(tmp_path):
    runs = []
    for seed in range(3):
        for label, accs in (
            ("fedavg", [0.3, 0.5, 0.6]),
            ("fedgkd", [0.3, 0.55 + seed / 200, 0.66 + seed / 100]),
            (BYSTANDER, [0.3, 0.5 + seed / 300, 0.6 - seed / 400]),
        ):
            d = make_run(tmp_path / "runs", f"{label}{seed}", accs, strategy=label, seed=seed)
            runs.append((f"table6/{label}", d))
    src = {"table6": {"paper": "fedgkd_table6", "layout": "at_rounds",
                      "options": {"rounds": [1, 2, 3]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    rows = df[df["claim"] == "fedgkd-beats-fedavg-at-each-round"]
    assert [s.rsplit(", ", 1)[1] for s in rows["setting"]] == ["round 2", "round 3"]
    assert (rows["verdict"] == "holds").all() and rows["claim_verdict"].iloc[0] == "holds"


def test_a_nan_at_a_round_never_compared_fails_no_round(tmp_path):
    """FedGKD's round 1 is left out (it does not distil yet): a NaN accuracy there (written into
    the aggregate by hand, as aggregation refuses it) fails neither round 2 nor round 3."""
    runs = []
    for seed in range(3):
        for label, accs in (
            ("fedavg", [0.3, 0.5, 0.6]),
            ("fedgkd", [0.3, 0.55 + seed / 200, 0.66 + seed / 100]),
        ):
            d = make_run(tmp_path / "runs", f"{label}{seed}", accs, strategy=label, seed=seed)
            runs.append((f"table6/{label}", d))
    agg = tmp_path / "claims.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    df = pd.read_parquet(agg)
    first = df["run"].str.endswith("fedgkd0") & (df["round"] == 1)
    assert first.sum() == 1
    df.loc[first, "test_acc"] = math.nan
    df.to_parquet(agg, index=False)
    src = {"table6": {"paper": "fedgkd_table6", "layout": "at_rounds",
                      "options": {"rounds": [1, 2, 3]}, "best_of": {}}}  # fmt: skip
    out = tmp_path / "out" / "claims"
    render("claims", out, aggregate=agg, options={"sources": src, "stand_ins": {}})
    table = pd.read_csv(out.with_name("claims.csv"))
    rows = table[table["claim"] == "fedgkd-beats-fedavg-at-each-round"]
    assert [s.rsplit(", ", 1)[1] for s in rows["setting"]] == ["round 2", "round 3"]
    assert (rows["n"] == 3).all() and (rows["failed"] == 0).all()
    assert (rows["verdict"] == "holds").all()


def test_an_at_round_setting_whose_runs_all_collapsed_keeps_one_row(tmp_path):
    runs = []
    for seed in range(3):
        for label in ("fedavg", "fedgkd"):
            d = make_run(tmp_path / "runs", f"{label}{seed}", [0.1, 0.1, 0.1], strategy=label,
                         seed=seed, collapsed=True)  # fmt: skip
            runs.append((f"table6/{label}", d))
    src = {"table6": {"paper": "fedgkd_table6", "layout": "at_rounds",
                      "options": {"rounds": [1, 3]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    rows = df[df["claim"] == "fedgkd-beats-fedavg-at-each-round"]
    # counted as they are: one row (round 3; round 1 is left out), a tie at chance
    assert len(rows) == 1 and rows["n"].iloc[0] == 3 and rows["failed"].iloc[0] == 0
    assert rows["effect"].iloc[0] == 0 and "collapsed to chance" in rows["note"].iloc[0]


def test_a_trend_claim_compares_the_gap_between_the_extreme_settings(tmp_path):
    gaps = {1.0: [0.01, 0.012, 0.011], 0.5: [0.02, 0.02, 0.02], 0.1: [0.04, 0.045, 0.043]}
    df = render_claims(tmp_path, pair_runs(tmp_path / "runs", "table3", gaps), TABLE3)
    row = df[df["claim"] == "fedgkd-gap-grows-with-heterogeneity"].iloc[0]
    assert row["effect"] == pytest.approx(100 * (0.128 - 0.033) / 3)
    assert (
        row["verdict"] == "holds" and row["claim_summary"] == "the gap grows in 1 of 1 comparison"
    )


def test_a_stated_gap_is_shown_beside_ours_and_shares_its_row_once(tmp_path):
    """Runs that reproduce the paper's stated gaps (KL − MSE 1.6 on CIFAR-10, Table 9; FedGKD −
    FedAvg 3.0 at α 0.1, Table 3) hold; each row shows the stated gap beside the paper's; the α 0.1
    row is one comparison of two claims, counted once in the summary."""
    runs = pair_runs(tmp_path / "runs", "table9", {0.1: [0.015, 0.016, 0.017]}, treatment="KL",
                     baseline="MSE")  # fmt: skip
    runs += pair_runs(tmp_path / "runs", "table3", {0.1: [0.029, 0.030, 0.031]})
    src = {**TABLE3, "table9": {"paper": "fedgkd_table9", "layout": "grid", "options": {},
                                "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    kl = df[df["claim"] == "fedgkd-kl-beats-mse-cifar10"].iloc[0]
    assert kl["test"] == "stated-gap" and kl["effect"] == pytest.approx(1.6)
    assert kl["verdict"] == "holds" and kl["claim_verdict"] == "holds"
    assert kl["stated_gap"] == 1.6 and kl["paper_gap"] == pytest.approx(71.73 - 70.12)
    assert kl["claim_summary"] == "at or above the stated gap in 1 of 1 setting"
    gaps = df[df["claim"] == "fedgkd-beats-fedavg-alpha0.1-by-stated-gaps"]
    assert len(gaps) == 1 and gaps["verdict"].iloc[0] == "holds"
    assert gaps["stated_gap"].iloc[0] == 3.0
    assert gaps["shared_with"].iloc[0] == "fedgkd-beats-fedavg"
    plain = df[(df["claim"] == "fedgkd-beats-fedavg") & (df["row"] == "setting")]
    assert list(plain["shared_with"]) == ["fedgkd-beats-fedavg-alpha0.1-by-stated-gaps"]
    md = (tmp_path / "out" / "claims.md").read_text()
    assert "+1.61 (stated 1.6; tested: above 0.5 × 1.6)" in md
    assert "+3.05 (stated 3.0; tested: above 0.5 × 3.0)" in md
    assert kl["gap_fraction"] == 0.5
    assert "stated gap: 1.6 pp" in md
    assert "; 1 comparison is a row of more than one claim" in md
    assert df[df["row"] != "average"].duplicated(["claim", "setting", "table"]).sum() == 0


def test_a_pair_noisier_than_its_setting_is_judged_on_its_own_differences(tmp_path):
    """KL 1.2, 1.6 and 2.0 points ahead of MSE beside a bystander that keeps to the seeds'
    pattern: the pair's paired t-test (2 df) does not show KL above half the stated 1.6, whatever
    its quiet neighbour: inconclusive, on the pair's own standard error."""
    runs = pair_runs(tmp_path / "runs", "table9", {0.1: [0.012, 0.016, 0.020]}, treatment="KL",
                     baseline="MSE")  # fmt: skip
    src = {"table9": {"paper": "fedgkd_table9", "layout": "grid", "options": {}, "best_of": {}}}
    kl = render_claims(tmp_path, runs, src).query("claim == 'fedgkd-kl-beats-mse-cifar10'")
    row = kl.iloc[0]
    assert row["effect"] == pytest.approx(1.6) and row["verdict"] == "inconclusive"
    assert row["df"] == 2 and row["sd"] == pytest.approx(0.4, rel=1e-6)
    assert row["se"] == pytest.approx(0.4 / math.sqrt(3), rel=1e-6)
    t2 = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))  # Student's t 0.975 on 2 df, closed form
    assert row["ci_low"] == pytest.approx(1.6 - t2 * 0.4 / math.sqrt(3), rel=1e-6)


def test_a_pairs_verdict_does_not_depend_on_the_other_methods_of_its_setting(tmp_path):
    """FedGKD − FedAvg of 2.1, 2.0 and 1.9 points holds; a MOON that collapsed to chance on all
    three seeds (counted, as it is) joins the setting and changes neither the verdict nor a
    number of the row: the setting's variance, which it inflates, is a diagnostic that names it."""
    base = {0: 0.70, 1: 0.60, 2: 0.65}
    runs = pair_runs(tmp_path / "runs", "table3", {1.0: [0.021, 0.020, 0.019]}, base=base,
                     bystander=False)  # fmt: skip
    moon = [("table3/moon", make_run(tmp_path / "moon", f"moon{s}", [0.1, 0.1], strategy="moon",
                                     seed=s, collapsed=True)) for s in range(3)]  # fmt: skip
    cols = ["verdict", "effect", "se", "df", "ci_low", "ci_high", "p_holds", "p_contradicted"]
    rows = []
    for name, these in (("pair", runs), ("with-moon", runs + moon)):
        df = render_claims(tmp_path / name, these, TABLE3)
        rows.append(df[(df["claim"] == "fedgkd-beats-fedavg") & (df["row"] == "setting")].iloc[0])
    alone, beside = rows
    assert alone["verdict"] == "holds"
    assert alone[cols].tolist() == beside[cols].tolist()
    assert "moon holds" in beside["variance_from"] and "diagnostic" in beside["variance_from"]


def test_a_settings_variance_pools_every_tables_methods_in_it(tmp_path):
    """Table 7 compares two buffer lengths (2 methods, 3 seeds: the paired t-test on 2 degrees
    of freedom decides); Table 3 runs three methods in the same setting, one of them the same
    runs as M=5. The setting's variance, a diagnostic, pools Table 3's two other columns (the
    shared runs count once): 4 methods × 3 seeds, 6 degrees of freedom. The verdict and its
    numbers are the same with Table 3 or without it."""
    root = tmp_path / "runs"
    runs = pair_runs(root, "table7", {1.0: [0.012, 0.011, 0.013]}, treatment="M=5",
                     baseline="M=1", bystander=False)  # fmt: skip
    m5 = [(lab, d) for lab, d in runs if lab == "table7/M=5"]
    runs += [("table3/fedgkd", d) for _, d in m5]  # Table 3's FedGKD is Table 7's M=5
    runs += [(lab, d) for lab, d in pair_runs(root / "t3", "table3", {1.0: [0.02, 0.021, 0.019]})
             if not lab.endswith("/fedgkd")]  # fmt: skip
    src = {**TABLE3, "table7": {"paper": "fedgkd_table7", "layout": "grid", "options": {},
                                "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    row = df[df["claim"] == "fedgkd-buffer-5-beats-1"].iloc[0]
    assert "from 4 methods × 3 seeds (6 df;" in row["variance_from"]
    assert row["df"] == 2 and row["verdict"] == "holds"
    alone = render_claims(tmp_path / "alone", [r for r in runs if r[0].startswith("table7/")],
                          {"table7": src["table7"]})  # fmt: skip
    lone = alone[alone["claim"] == "fedgkd-buffer-5-beats-1"].iloc[0]
    cols = ["verdict", "effect", "se", "df", "ci_low", "ci_high", "p_holds"]
    assert lone[cols].tolist() == row[cols].tolist()
    assert "from 2 methods × 3 seeds (2 df;" in lone["variance_from"]


def test_runs_that_stop_at_a_target_do_not_join_a_settings_variance(tmp_path):
    root = tmp_path / "runs"
    runs = pair_runs(root, "table3", {1.0: [0.02, 0.021, 0.019]})
    stopped = pair_runs(root / "rtt", "rounds_to_target", {1.0: [0.0, 0.0, 0.0]})
    src = {**TABLE3, "rounds_to_target": {"paper": "feddf_table1", "layout": "rounds_to_target",
           "options": {"targets": [{"alpha": 1.0, "accuracy": 0.8}]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs + stopped, src)
    row = df[df["claim"] == "fedgkd-beats-fedavg"].iloc[0]
    assert "from 3 methods × 3 seeds" in row["variance_from"]
