"""The claims table's rows on constructed runs: a setting a method has no runs in, the paper's
gap beside ours, rounds to a target, a tuned column, the HTML page and the front page."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from claim_runs import BYSTANDER, CLAIMS, TABLE3, make_run, pair_runs, render_claims
from fedkd.report.claims.claim import Claim
from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.evaluate import _row_paper_gap, estimate, sign_count
from fedkd.report.claims.paper_check import PaperGap, check_on_paper
from fedkd.report.claims.runs import measurement_step, metric_values
from fedkd.report.claims.verdict import Hypothesis, verdicts

ONE_SIDED = "mnist5k (stand-in for CIFAR-10), α={}, C=0.2, E=2, R=2"


def fedgkd_only(root: Path, table: str, alpha: float, seeds: int = 4, **kw) -> list:
    """FedGKD's runs of one setting without FedAvg's."""
    runs = pair_runs(root, table, {alpha: [0.02] * seeds}, **kw)
    return [(label, d) for label, d in runs if label.endswith("/fedgkd")]


def test_a_setting_where_one_method_has_no_runs_is_not_run_and_blocks_holds(tmp_path):
    """FedGKD and FedAvg at α 1 and 0.5 (four seeds, FedGKD clearly ahead), FedGKD alone at α 0.1:
    the α 0.1 row says FedAvg has no runs, and neither the average nor the trend holds on the
    settings that happen to be there."""
    root = tmp_path / "runs"
    runs = pair_runs(root, "table3", {1.0: [0.02, 0.021, 0.019, 0.02],
                                      0.5: [0.03, 0.031, 0.029, 0.03]})  # fmt: skip
    runs += fedgkd_only(root, "table3", 0.1)
    df = render_claims(tmp_path, runs, TABLE3)
    beats = df[df["claim"] == "fedgkd-beats-fedavg"].set_index("setting")
    missing = beats.loc[ONE_SIDED.format(0.1)]
    assert missing["verdict"] == "not run" and missing["n"] == 0
    assert "no FedAvg runs in this setting (FedGKD has seed(s) 0, 1, 2, 3)" in missing["note"]
    assert beats.loc[ONE_SIDED.format(1), "verdict"] == "holds"
    average = beats.loc["average over 2 settings"]
    assert average["verdict"] == "holds" and "left out of the average" in average["note"]
    assert (beats["claim_verdict"] == "not run").all()
    trend = df[df["claim"] == "fedgkd-gap-grows-with-heterogeneity"].iloc[0]
    assert "α=0.1 against α=1" in trend["setting"] and trend["verdict"] == "not run"
    assert f"{ONE_SIDED.format(0.1)}: no FedAvg runs in this setting" in trend["note"]
    assert trend["claim_verdict"] == "not run"
    # a claim whose other method this table has no runs of at all reads no row from it
    moon = df[df["claim"] == "fedgkd-beats-moon"]
    assert list(moon["row"]) == ["none"] and list(moon["verdict"]) == ["not run"]


def test_a_trend_names_a_setting_between_its_extremes_that_lacks_a_method(tmp_path):
    root = tmp_path / "runs"
    runs = pair_runs(root, "table3", {1.0: [0.01, 0.012, 0.011], 0.1: [0.04, 0.045, 0.043]})
    runs += fedgkd_only(root, "table3", 0.5, seeds=3)
    trend = render_claims(tmp_path, runs, TABLE3).query(
        "claim == 'fedgkd-gap-grows-with-heterogeneity'"
    )
    assert len(trend) == 1 and trend["verdict"].iloc[0] == "holds"
    assert f"{ONE_SIDED.format(0.5)}: no FedAvg runs in this setting" in trend["note"].iloc[0]


def test_a_table_listing_both_methods_shows_one_without_runs_as_missing(tmp_path):
    """A source that lists its labels (the workflow's drawn columns) holds FedAvg even where no
    FedAvg run came back: each FedGKD setting is a "not run" row. Without the list a table with
    one method's runs is one the configuration did not give the other."""
    root = tmp_path / "runs"
    runs = fedgkd_only(root, "table3", 1.0, seeds=3) + fedgkd_only(root, "table3", 0.1, seeds=3)
    listed = {"table3": {**TABLE3["table3"], "labels": ["fedavg", "fedgkd"]}}
    df = render_claims(tmp_path, runs, listed)
    beats = df[df["claim"] == "fedgkd-beats-fedavg"]
    assert sorted(beats.loc[beats["row"] == "setting", "setting"]) == sorted(
        [ONE_SIDED.format(1), ONE_SIDED.format(0.1)]
    )
    assert (beats["verdict"] == "not run").all() and (beats["claim_verdict"] == "not run").all()
    moon = df[df["claim"] == "fedgkd-beats-moon"]
    assert list(moon["row"]) == ["none"]
    unlisted = render_claims(tmp_path / "unlisted", runs, TABLE3)
    assert list(unlisted.loc[unlisted["claim"] == "fedgkd-beats-fedavg", "row"]) == ["none"]


def test_a_rows_paper_gap_is_the_most_specific_cell_and_each_cell_counts_once(tmp_path):
    """Table 3's CIFAR-10 α 0.5 cell names no C, so it matches every Table 5 row too: Table 5's
    own cell (C 0.1: 75.16 − 73.47; C 0.4: 78.28 − 78.20) is the row's gap. Table 3's cell is
    Table 5's C 0.2: one cell of the paper's 12, not two."""
    runs = []
    for c in (0.1, 0.4):
        runs += pair_runs(tmp_path / "runs" / str(c), "table5", {0.5: [0.02, 0.03, 0.025]},
                          treatment="fedgkd+", baseline="moon", participation=c)  # fmt: skip
    src = {"table5": {"paper": "fedgkd_table5", "layout": "grid_by_stat", "options": {},
                      "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    moon = df[df["claim"] == "fedgkd+-beats-moon"].set_index("setting")
    row = "mnist5k (stand-in for CIFAR-10), α=0.5, C={}, E=2, R=2"
    assert moon.loc[row.format(0.1), "paper_gap"] == pytest.approx(75.16 - 73.47)
    assert moon.loc[row.format(0.4), "paper_gap"] == pytest.approx(78.28 - 78.20)
    md = (tmp_path / "out" / "claims.md").read_text().splitlines()
    (head,) = [line for line in md if "[fedgkd+-beats-moon]" in line]
    assert "(12 settings)" in head  # Tables 3 (9 cells) and 5 (4), C 0.2 shared
    cells = check_on_paper(next(c for c in CLAIMS if c.id == "fedgkd+-beats-moon")).gaps
    settings = [dict(g.setting) for g in cells]
    assert {"dataset": "cifar10", "alpha": 0.5} not in settings
    assert {"dataset": "cifar10", "alpha": 0.5, "participation": 0.2} in settings


def test_paper_cells_that_disagree_on_a_row_are_named_not_picked():
    claim = next(c for c in CLAIMS if c.id == "fedgkd-beats-fedavg")
    stand_ins = {"synthtext": "AG News and SST-5"}
    row = Comparison("table4", {"dataset": "synthtext", "alpha": 0.1, "sub": ""}, "t", {}, 0, [],
                     ("k",))  # fmt: skip
    agnews = PaperGap((("dataset", "agnews"), ("alpha", 0.1)), 90.0, 89.0)
    sst5 = PaperGap((("dataset", "sst5"), ("alpha", 0.1)), 45.0, 42.0)
    gap, note = _row_paper_gap(claim, row, stand_ins, [agnews, sst5])
    assert gap is None and "AG News, α=0.1: +1.00" in note and "SST-5, α=0.1: +3.00" in note
    same = PaperGap((("dataset", "sst5"), ("alpha", 0.1)), 46.0, 45.0)
    assert _row_paper_gap(claim, row, stand_ins, [agnews, same]) == (pytest.approx(1.0), "")
    # the more specific cell wins over one that names fewer keys
    wider = PaperGap((("dataset", "agnews"),), 80.0, 70.0)
    assert _row_paper_gap(claim, row, {"synthtext": "AG News"}, [wider, agnews])[0] == 1.0


def test_rounds_to_target_counts_a_miss_as_one_round_more(tmp_path):
    r, runs = tmp_path / "runs", []
    for seed in range(3):
        runs.append(
            ("rounds_to_target/fedavg", make_run(r, f"a{seed}", [0.5, 0.6, 0.7], seed=seed))
        )  # never reaches 0.8
        runs.append(("rounds_to_target/feddf",
                     make_run(r, f"d{seed}", [0.5, 0.8 + seed / 100], strategy="feddf", seed=seed,
                              rounds=3)))  # fmt: skip
    src = {"rounds_to_target": {"paper": "feddf_table1", "layout": "rounds_to_target",
           "options": {"targets": [{"alpha": 1.0, "accuracy": 0.8}]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    row = df[df["claim"] == "feddf-fewer-rounds-than-fedavg"].iloc[0]
    # FedDF: round 2; FedAvg never (3 planned rounds: counted as 4)
    assert row["effect"] == pytest.approx(-2.0) and row["unit"] == "rounds"
    assert row["setting"].endswith("T = 80%") and "counted as R+1" in row["note"]
    # two methods, three seeds decide by the paired t-test; the three equal differences of −2
    # rounds spread by less than a round, the measurement's step, which is taken as their sd:
    # −2 ± 4.30·1/√3 holds 0, inconclusive (and no power figure from 3 seeds)
    assert row["df"] == 2 and row["step"] == 1.0 and row["sd"] == 0
    assert row["verdict"] == "inconclusive" and row["more_seeds"]
    assert pd.isna(row["seeds_needed"]) and "sign test" not in row["note"]


def test_settings_where_neither_method_reached_the_target_are_shown_once(tmp_path):
    """FedAvg and FedDF never reach 80% at α 1 (both counted R+1 on every seed): one line
    "neither reached T" naming the setting, no "+0.0 [+0.0, +0.0]" row; the CSV flags it."""
    r, runs = tmp_path / "runs", []
    for seed in range(3):
        for label, accs in (("fedavg", [0.5, 0.6, 0.7]), ("feddf", [0.5, 0.6, 0.75]),
                            (BYSTANDER, [0.5, 0.6 + seed / 100, 0.7])):  # fmt: skip
            runs.append((f"rounds_to_target/{label}",
                         make_run(r, f"{label}{seed}", accs, strategy=label, seed=seed)))  # fmt: skip
    src = {"rounds_to_target": {"paper": "feddf_table1", "layout": "rounds_to_target",
           "options": {"targets": [{"alpha": 1.0, "accuracy": 0.8}]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    row = df.query("claim == 'feddf-fewer-rounds-than-fedavg'").iloc[0]
    assert row["neither_reached"] and row["effect"] == 0
    # more seeds would not decide it (longer runs might): no "more seeds needed"
    assert not row["more_seeds"] and pd.isna(row["seeds_needed"])
    page = (tmp_path / "out" / "claims.html").read_text()
    block = page[page.index('<section class="claim" id="feddf-fewer-rounds-than-fedavg"') :]
    block = block[: block.index("</section>")]
    assert block.count("Neither reached T") == 1 and "+0.0" not in block
    index = page[page.index('<table class="index">') :]
    line = index[index.index('href="#feddf-fewer-rounds-than-fedavg"') :]
    assert re.search(r"neither (method )?reached T", line[: line.index("</tr>")])
    assert block.count("FedAvg seeds 0, 1, 2: T not reached, counted as R+1") == 1


def test_a_tuned_column_compares_the_variant_its_table_shows(tmp_path):
    """FedGen as the best of a coefficient sweep (best_of): the claim takes, per setting, the
    variant with the higher accuracy at the round best on validation, as table 3 does."""
    r, runs = tmp_path / "runs", []
    for seed in range(3):
        runs.append(("table3/fedgkd", make_run(r, f"g{seed}", [0.6, 0.7], strategy="fedgkd",
                                               seed=seed)))  # fmt: skip
        runs.append(("table3/fedgen", make_run(r, f"c1-{seed}", [0.6, 0.5], strategy="fedgen",
                                               seed=seed, variant="fedgen-coef1")))  # fmt: skip
        runs.append(("table3/fedgen", make_run(r, f"c10-{seed}", [0.6, 0.69 - seed / 100],
                                               strategy="fedgen", seed=seed,
                                               variant="fedgen-coef10")))  # fmt: skip
    sweep = {"fedgen": ["fedgen-coef1", "fedgen-coef10"]}
    src = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": sweep}}
    row = render_claims(tmp_path, runs, src).query("claim == 'fedgkd-beats-fedgen'").iloc[0]
    # against coef10 (69, 68, 67): +1, +2, +3 points; against coef1 it would be +20
    assert row["n"] == 3 and row["effect"] == pytest.approx(2.0)


def test_the_html_has_a_coloured_block_per_claim_with_the_numbers_first(tmp_path):
    gaps = {1.0: [0.020, 0.022, 0.018]}
    render_claims(tmp_path, pair_runs(tmp_path / "runs", "table3", gaps), TABLE3)
    page = (tmp_path / "out" / "claims.html").read_text()
    # the first line gives the counts, then an index of every claim, each linked to its block
    first = re.search(r'<p class="caption">([^<]*)', page)[1]
    assert first.startswith(f"{len(CLAIMS)} claims: 1 holds, 0 contradicted, ")
    index = page[page.index('<table class="index">') : page.index("</table>")]
    assert page.index('<table class="index">') < page.index('<section class="claim"')
    assert index.count("<tr><td>") == len(CLAIMS)
    assert index.count('<a href="#') == len(CLAIMS) and 'href="#fedgkd-beats-fedavg"' in index
    # the claim that ran shows the effect that decides it, with its interval
    line = index[index.index('href="#fedgkd-beats-fedavg"') :]
    line = line[: line.index("</tr>")]
    assert re.search(r"\+2\.00 pp \[\+\d\.\d\d, \+\d\.\d\d\] \(average over settings\)", line)
    ran = {"fedgkd-beats-fedavg"}  # the only claim with runs at alpha 1
    assert page.count('<section class="claim"') == len(ran)
    # the claims without runs: one line each, after those with runs
    idle = page[page.index("Not run on this configuration") :]
    assert idle.count("<li id=") == len(CLAIMS) - len(ran) and "<section" not in idle
    assert "table3 runs one value of alpha only" in idle  # the trend's reason
    block = page[page.index('id="fedgkd-vote-beats-fedavg"') - 30 :]
    block = page[page.index('id="fedgkd-beats-fedavg"') :]
    block = block[: block.index("</section>")]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", block)
    assert heads[:4] == ["Verdict", "n", "Effect", "95% CI"] and heads[-1] == "Setting"
    assert "background:#dcfce7" in block  # holds, in green
    assert "<b>Paper:</b> +2.62 pp (mean of 11 settings)" in block and "<b>Ours:</b>" in block
    assert "“We compare the top-1 test accuracy" in block  # the quote, a note below the table
    assert "white-space:normal" in page  # the setting wraps instead of scrolling


def test_front_page_counts_claims_not_rows_and_is_written_atomically(tmp_path, monkeypatch):
    from fedkd.report import agreement

    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame({
        "claim": ["a", "a", "a", "b", "c"],
        "verdict": ["holds", "holds", "inconclusive", "failed", "not run"],
        "claim_verdict": ["inconclusive", "inconclusive", "inconclusive", "failed", "not run"],
    }).to_csv(tables / "claims.csv", index=False)  # fmt: skip
    template = tmp_path / "workflow.rst"
    template.write_text("Fixed text.\n")
    written = []

    def spy(path, write):
        written.append(path)
        return real(path, write)

    real = agreement.atomic_write
    monkeypatch.setattr(agreement, "atomic_write", spy)
    out = agreement.write_front_page(template, tables, tmp_path / "front.rst", stand_in=True)
    text = out.read_text()
    assert "Each of the papers' 3 claims" in text
    assert "0 holds, 0 contradicted, 1 inconclusive, 1 failed, 1 not run" in text
    assert written == [out] and not list(tmp_path.glob("*.tmp"))
    # an unchanged page is not rewritten
    agreement.write_front_page(template, tables, out, stand_in=True)
    assert written == [out]


def test_the_summary_counts_a_stated_gap_reached_only_at_the_whole_gap():
    """A stated gap g is tested above half of it, but the summary counts the settings whose
    effect is at or above g itself: 1.2 pp on a stated 1.6 is tested-above, not at the gap."""
    claim = Claim(id="x-by-gap", paper="fedgkd", source="Table 9", quote="q", treatment="x",
                  baseline="y", tables=("table9",), test="stated-gap", margin=1.6)  # fmt: skip
    hyp = Hypothesis(claim.test, claim.direction, 1.6, claim.gap_fraction)
    rows = [Comparison("t", {}, f"s{i}", {0: e, 1: e, 2: e}, 0, [], ("k", i), step=0.1)
            for i, e in enumerate((1.2, 1.7))]  # fmt: skip
    for r in rows:
        (r.verdict,) = verdicts([estimate(r)], hyp)
    assert [r.verdict.verdict for r in rows] == ["holds", "holds"]
    assert sign_count(claim, rows, [hyp, hyp]) == "at or above the stated gap in 1 of 2 settings"


def test_a_runs_values_by_metric_and_their_measurement_step():
    """One run's value of each metric, by hand: the drop from its best round to its last, an
    accuracy at a round a run that reached its target early never played (its last accuracy
    stands for it, up to the planned R), and the step of a forgetting F (a fraction, so one
    test example of 1,000 is 0.001) beside that of an accuracy in pp."""
    rows = pd.DataFrame({"round": [1, 2, 3], "test_acc": [0.5, 0.8, 0.7], "test_size": 1000})
    setting = {"rounds_planned": 5}
    assert metric_values("drop", rows, "complete", {}, setting) == ({"": pytest.approx(10.0)}, "")
    at, _ = metric_values("at_round", rows, "complete", {"rounds": [2, 4, 6]}, setting)
    assert at == {"round 2": pytest.approx(80.0), "round 4": pytest.approx(70.0)}
    assert measurement_step("best", rows) == pytest.approx(0.1)
    assert measurement_step("forgetting", rows) == pytest.approx(0.001)


def test_a_trend_counts_each_failed_seed_once_across_its_two_settings(tmp_path):
    """FedGKD's seed 1 diverges before its first round at α 1, and its seed 2 at α 0.1: the trend
    compares seeds 0 and 3 and has lost two seeds to failed runs, not the larger of the two
    settings' counts (1)."""
    root = tmp_path / "runs"
    runs = pair_runs(root, "table3", {1.0: [0.01, 0.012, 0.011, 0.01],
                                      0.1: [0.04, 0.045, 0.043, 0.044]})  # fmt: skip
    for alpha, seed in ((1.0, 1), (0.1, 2)):
        (run,) = [d for label, d in runs if label.endswith("/fedgkd")
                  and Path(d).name.startswith(f"table3-fedgkd-{alpha}-{seed}-")]  # fmt: skip
        shutil.rmtree(run)
        make_run(Path(run).parent, Path(run).name, [], strategy="fedgkd", alpha=alpha, seed=seed,
                 status="diverged", rounds=2)  # fmt: skip
    df = render_claims(tmp_path, runs, TABLE3)
    trend = df[df["claim"] == "fedgkd-gap-grows-with-heterogeneity"].iloc[0]
    assert trend["seeds"] == "0;3" and trend["n"] == 2
    assert trend["failed"] == 2


def test_an_at_round_claim_whose_runs_end_before_its_rounds_is_not_run_and_says_why(tmp_path):
    """FedGKD distils from round 2 on, so its at-round claims compare rounds from 2; on 1-round
    runs (one diverged) there is nothing to compare, ever: the row is "not run" with the reason,
    not "too few seeds" with every seed "without a pair" as though runs were still to come."""
    runs = [
        (f"table6/{label}", make_run(tmp_path / "runs", f"{label}-{seed}",
                                     [0.5 + 0.01 * seed + gap], strategy=label, seed=seed,
                                     status="diverged" if (seed, label) == (2, "fedavg")
                                     else "complete"))
        for seed in range(3) for label, gap in (("fedgkd", 0.02), ("fedavg", 0.0))
    ]  # fmt: skip
    table6 = {"table6": {"paper": "fedgkd_table6", "layout": "at_rounds",
                         "options": {"rounds": [1]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, table6)
    (row,) = df[df["claim"] == "fedgkd-beats-fedavg-at-each-round"].itertuples()
    assert (row.verdict, row.n, row.failed) == ("not run", 0, 0)
    assert "without a pair" not in row.note, row.note
    assert (
        "FedGKD seeds 0, 1, 2: no value: the claim compares the table's rounds 1 from round 2 "
        "on, and the runs end at round 1" in row.note
    ), row.note
