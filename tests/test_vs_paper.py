"""The tables beside the papers (`<table>_vs_paper`): a stand-in compared through ranks and gaps,
a paper's own dataset by value, the paper's rounds answered by the table's own, and the front
page."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.pipeline import ConfigError, Plan, validate_config
from fedkd.report import render
from fedkd.report.tables.vs_paper import stand_in_map
from report_runs import agg_file, make_run
from test_paper_comparison import csv_of

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


# ------------------------------------------------------------------ beside the paper
def test_stand_in_map_reads_the_config_names():
    got = stand_in_map({"mnist5k": "CIFAR-10", "synthtext": "AG News and SST-5"})
    assert {k: v[0] for k, v in got.items()} == {
        "cifar10": "mnist5k", "agnews": "synthtext", "sst5": "synthtext"
    }  # fmt: skip


def three_methods_on_mnist5k(r):
    """fedavg 77 ± 1, moon 51 ± 1, fedgkd 80.5 ± 0.5 on the stand-in at alpha 1, two seeds each."""
    runs = []
    for method, accs in (
        ("fedavg", (0.76, 0.78)),
        ("moon", (0.50, 0.52)),
        ("fedgkd", (0.80, 0.81)),
    ):
        runs += [(method, make_run(r, f"{method}{s}", [0.1, acc], dataset="mnist5k", alpha=1.0,
                                   seed=s)) for s, acc in enumerate(accs)]  # fmt: skip
    return runs


def test_vs_paper_compares_a_stand_in_through_ranks_and_gaps(tmp_path):
    r = tmp_path / "runs"
    # on the stand-in at alpha 1: fedavg 77 ± 1, moon 51 ± 1, fedgkd 80.5 ± 0.5; the paper has
    # fedgkd 79.14 > moon 78.17 > fedavg 77.30
    runs = three_methods_on_mnist5k(r)
    out = tmp_path / "table3_vs_paper"
    opts = {"paper": "fedgkd_table3", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "Beside."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    csv = csv_of(out)
    # only the cells with runs, named the paper's way
    assert list(csv["method_name"]) == ["FedAvg", "MOON", "FedGKD"]
    assert set(csv["comparison"]) == {"relative"} and set(csv["paper_dataset"]) == {"cifar10"}
    row = csv.set_index("method").loc["fedavg"]
    assert (row["paper_mean"], row["mean"], row["std"]) == (77.30, pytest.approx(77.0), 1.0)
    # a stand-in's absolute numbers are not compared with the paper's
    assert csv["difference"].isna().all() and csv["within_2sd"].isna().all()
    by = csv.set_index("method")
    assert list(by.loc[["fedavg", "moon", "fedgkd"], "paper_rank"]) == [3, 2, 1]
    assert list(by.loc[["fedavg", "moon", "fedgkd"], "rank"]) == [2, 3, 1]
    assert by.loc["moon", "paper_gap"] == pytest.approx(0.87)
    assert by.loc["moon", "gap"] == pytest.approx(-26.0)
    assert by.loc["fedgkd", "gap"] == pytest.approx(3.5)
    assert not by.loc["moon", "same_side"] and by.loc["fedgkd", "same_side"]
    md = out.with_name(out.name + ".md").read_text()
    head = (
        "| Setting | Method | Rank paper | Rank here | Gap to FedAvg paper | Gap to FedAvg here "
        "| Accuracy (%) Paper | Accuracy (%) Reproduced |"
    )  # fmt: skip
    assert head in md and "Difference" not in md and "Within" not in md
    assert ("| CIFAR-10, α=1 (run on mnist5k) | MOON | 2 | 3 | +0.87 | -26.00 | 78.17 ± 0.81 "
            "| 51.00 ± 1.00 |") in md  # fmt: skip
    assert "| reference | reference |" in md
    assert "fedgkd" not in md.split("\n", 2)[2], "rows name methods the paper's way"
    assert "3 of the paper's 72 cells have runs here" in md
    assert "Left out: the 69 cells with no run (CIFAR-10, CIFAR-100, Tiny-ImageNet)" in md
    # fedgkd > moon agrees, fedgkd > fedavg agrees, moon > fedavg does not
    assert "2 of 3 method pairs are ordered as in the paper" in md
    assert "1 of 2 methods lie on the same side of the reference" in md
    assert "contradicts itself" in md and "72.41" in md  # the Table 3 / Table 8 contradiction


def test_vs_paper_compares_the_papers_own_dataset_by_value(tmp_path):
    """On CIFAR-10 itself, a mean is judged by its distance to the paper's value in the paper's
    standard deviations (two is the bar), not by whether the seeds' range holds the paper value:
    FedAvg's seeds (76.0..76.4) miss the paper's 77.30 but their mean is 1.10 off, within
    2 × 0.72; FedProx's range (64.89..84.89) holds the paper's 76.39 but its mean is 1.50 off,
    beyond 2 × 0.59 (though within 3 × 0.59)."""
    r = tmp_path / "runs"
    runs = [("fedavg", make_run(r, f"a{s}", [0.1, acc], dataset="cifar10", alpha=1.0, seed=s))
            for s, acc in ((0, 0.760), (1, 0.762), (2, 0.764))]  # fmt: skip
    runs += [("fedprox", make_run(r, f"p{s}", [0.1, acc], dataset="cifar10", alpha=1.0, seed=s,
                                  strategy="fedprox"))
             for s, acc in ((0, 0.6489), (1, 0.7489), (2, 0.8489))]  # fmt: skip
    out = tmp_path / "table3_vs_paper"
    opts = {"paper": "fedgkd_table3", "caption": "Beside."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    by = csv_of(out).set_index("method")
    assert set(by["comparison"]) == {"absolute"}
    assert by.loc["fedavg", "difference"] == pytest.approx(-1.1)
    assert by.loc["fedavg", "within_2sd"] and not by.loc["fedprox", "within_2sd"]
    assert by.loc["fedprox", "difference"] == pytest.approx(-1.5)
    assert (by.loc["fedprox", "min"], by.loc["fedprox", "max"]) == pytest.approx((64.89, 84.89))
    md = out.with_name(out.name + ".md").read_text()
    assert "| -1.10 | 76.00..76.40 | yes |" in md and "| -1.50 | 64.89..84.89 | no |" in md
    assert "Within 2σ" in md
    assert "1 of 2 reproduced means lie within two of the paper's standard deviations" in md
    # one method of a setting: nothing to rank
    alone = tmp_path / "fedavg_vs_paper"
    render("vs_paper", alone, aggregate=agg_file(tmp_path, runs[:3], "alone.parquet"), options=opts)
    assert "Rank" not in alone.with_name(alone.name + ".md").read_text()


def test_vs_paper_marks_a_reproduced_cell_short_of_a_seed(tmp_path):
    """FedGKD has no run of seed 2, which FedAvg has: its reproduced mean is over two seeds, and
    the comparison says so as the table itself does (‡, the caption's note, missing_seeds),
    rather than show a bare mean ± std beside the paper's three-trial one."""
    r = tmp_path / "runs"
    runs = [("fedavg", make_run(r, f"a{s}", [0.5, acc], alpha=1.0, seed=s))
            for s, acc in ((0, 0.770), (1, 0.775), (2, 0.780))]  # fmt: skip
    runs += [("fedgkd", make_run(r, f"g{s}", [0.5, acc], alpha=1.0, seed=s, strategy="fedgkd"))
             for s, acc in ((0, 0.790), (1, 0.792))]  # fmt: skip
    out = tmp_path / "table3_vs_paper"
    opts = {"paper": "fedgkd_table3", "caption": "Beside."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    by = pd.read_csv(out.with_suffix(".csv"), dtype={"missing_seeds": str}).set_index("method")
    assert by.loc["fedgkd", "n_seeds"] == 2 and by.loc["fedgkd", "missing_seeds"] == "2"
    assert pd.isna(by.loc["fedavg", "missing_seeds"])
    md = out.with_name(out.name + ".md").read_text()
    assert "| 79.10 ± 0.10‡ |" in md and "| 77.50 ± 0.41 |" in md
    assert "its mean is over fewer seeds" in md


def test_vs_paper_names_a_variant_other_than_the_papers_cell(tmp_path):
    """The paper's FedGKD cell at CIFAR-10 alpha=1 is M=5 (paper_values' variant): runs of M=1
    set beside it are not like against like, and the caption and CSV say so."""
    r = tmp_path / "runs"
    runs = []
    for method, variant, acc in (("fedavg", "fedavg", 0.76), ("fedgkd", "fedgkd-M1", 0.80)):
        runs.append((method, make_run(r, method, [0.1, acc], dataset="mnist5k", alpha=1.0,
                                      strategy=method, variant=variant)))  # fmt: skip
    out = tmp_path / "table3_vs_paper"
    opts = {"paper": "fedgkd_table3", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "Beside."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    by = csv_of(out).set_index("method")
    assert (by.loc["fedgkd", "variant"], by.loc["fedgkd", "paper_variant"]) == (
        "fedgkd-M1", "fedgkd-M5"
    )  # fmt: skip
    assert by.loc["fedavg", "variant"] == by.loc["fedavg", "paper_variant"] == "fedavg"
    md = out.with_name(out.name + ".md").read_text()
    assert (
        "Set up otherwise than the paper's cell: FedGKD at CIFAR-10, α=1 (run on mnist5k): "
        "FedGKD (M=1) here, FedGKD (M=5) in the paper."
    ) in md
    assert "FedAvg at" not in md


def test_vs_paper_answers_the_papers_rounds_with_the_tables_own(tmp_path):
    """Table 6's rounds 10/20/50/100 of 100, on runs of 10 rounds whose table shows rounds
    1/2/5/10: each paper round is set beside the table's round in its place, and the row says
    which. Without the table's rounds each paper round answers itself, and a round the runs never
    had says so rather than "not reached"."""
    r = tmp_path / "runs"
    runs = []
    for s in (0, 1):  # accuracy 10 + r (fedavg) and 20 + r (fedgkd) percent at round r
        for label, base in (("fedavg", 0.10), ("fedgkd", 0.20)):
            accs = [base + 0.01 * rnd + 0.001 * s for rnd in range(1, 11)]
            runs.append((label, make_run(r, f"{label}{s}", accs, dataset="mnist5k", alpha=0.1,
                                         seed=s, strategy=label)))  # fmt: skip
    aggregate = agg_file(tmp_path, runs)
    opts = {"paper": "fedgkd_table6", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "At."}
    scaled = tmp_path / "scaled"
    render("vs_paper", scaled, aggregate=aggregate, options={**opts, "rounds": [1, 2, 5, 10]})
    by = csv_of(scaled).set_index(["method", "round"])
    for paper_round, here in ((10, 1), (20, 2), (50, 5), (100, 10)):
        row = by.loc[("fedavg", paper_round)]
        assert row["round_here"] == here and row["status"] == "ok"
        assert row["mean"] == pytest.approx(10 + here + 0.05)
        assert by.loc[("fedgkd", paper_round), "gap"] == pytest.approx(10.0)
    md = scaled.with_name(scaled.name + ".md").read_text()
    assert "| CIFAR-10, α=0.1, round 10 (run on mnist5k, at its round 1) | FedAvg |" in md
    literal = tmp_path / "literal"
    render("vs_paper", literal, aggregate=aggregate, options=opts)
    by = csv_of(literal).set_index(["method", "round"])
    assert by.loc[("fedavg", 10), "mean"] == pytest.approx(20.05)
    assert by.loc[("fedavg", 20), "status"] == "no round 20"
    md = literal.with_name(literal.name + ".md").read_text()
    assert (
        "| CIFAR-10, α=0.1, round 10 (run on mnist5k) | FedAvg |" in md and "not reached" not in md
    )
    # as many rounds as the paper's, or none of the table's is taken
    render("vs_paper", tmp_path / "other", aggregate=aggregate, options={**opts, "rounds": [1, 2]})
    assert csv_of(tmp_path / "other").set_index(["method", "round"]).loc[("fedavg", 10), "mean"] \
        == pytest.approx(20.05)  # fmt: skip
    # rounds not the paper's scaled by one factor, or the paper's own dataset: each its own round
    render("vs_paper", tmp_path / "uneven", aggregate=aggregate,
           options={**opts, "rounds": [1, 2, 4, 10]})  # fmt: skip
    by = csv_of(tmp_path / "uneven").set_index(["method", "round"])
    assert by.loc[("fedavg", 10), "round_here"] == 10 and by.loc[("fedavg", 20), "status"] != "ok"
    own = [(label, make_run(r / "own", f"{label}{s}", [0.2 + 0.01 * k for k in range(1, 11)],
                            dataset="cifar10", alpha=0.1, seed=s, strategy=label))
           for s in (0, 1) for label in ("fedavg",)]  # fmt: skip
    mine = {"paper": "fedgkd_table6", "caption": "At.", "rounds": [1, 2, 5, 10]}  # no stand-in
    render("vs_paper", tmp_path / "own", aggregate=agg_file(tmp_path, own, "own.parquet"),
           options=mine)  # fmt: skip
    row = csv_of(tmp_path / "own").set_index("round").loc[10]
    assert row["comparison"] == "absolute" and row["round_here"] == 10
    assert row["mean"] == pytest.approx(30.0)  # round 10's accuracy, beside the paper's round 10
    # the default configuration's table 6 hands its rounds to its companion
    plan = Plan(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    assert plan.vs_paper_options("table6")["rounds"] == [1, 2, 5, 10]


def test_vs_paper_ranks_the_buffer_lengths_of_a_setting_as_methods(tmp_path):
    """Table 7's rows are buffer lengths M of one setting: on the stand-in they are ranked against
    each other (the paper: M=5 79.14 > M=1 78.58 at alpha 1), with M=1 the reference."""
    r = tmp_path / "runs"
    runs = [(label, make_run(r, f"{label}{s}", [0.1, acc], dataset="mnist5k", alpha=1.0, seed=s,
                             strategy="fedgkd", params={"buffer": int(label[2:])}))
            for s in range(2) for label, acc in (("M=1", 0.90), ("M=5", 0.93))]  # fmt: skip
    out = tmp_path / "table7_vs_paper"
    opts = {"paper": "fedgkd_table7", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "M."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    by = csv_of(out).set_index("method")
    assert set(by["setting"]) == {"CIFAR-10, α=1 (run on mnist5k)"}
    assert list(by.loc[["M=1", "M=5"], "rank"]) == [2, 1]
    assert list(by.loc[["M=1", "M=5"], "paper_rank"]) == [2, 1]
    assert by.loc["M=5", "gap"] == pytest.approx(3.0) and by.loc["M=5", "reference"] == "M=1"
    assert "1 of 1 method pairs are ordered as in the paper" in out.with_suffix(".md").read_text()


def test_a_stand_in_for_two_paper_datasets_says_its_pairs_count_for_each(tmp_path):
    r = tmp_path / "runs"
    runs = [(label, make_run(r, f"{label}{s}", [0.1, acc + 0.01 * s], dataset="synthtext",
                             alpha=0.1, seed=s, strategy=label))
            for s in range(2) for label, acc in (("fedavg", 0.5), ("fedprox", 0.6))]  # fmt: skip
    out = tmp_path / "table4_vs_paper"
    opts = {"paper": "fedgkd_table4", "stand_ins": {"synthtext": "AG News and SST-5"},
            "caption": "Text."}  # fmt: skip
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    assert set(csv_of(out)["paper_dataset"]) == {"agnews", "sst5"}
    md = out.with_suffix(".md").read_text()
    assert "synthtext stands in for AG News and SST-5: its runs are set beside each" in md


def test_a_stand_ins_dataset_counts_are_not_compared(tmp_path):
    r = tmp_path / "runs"
    runs = [("fedavg", make_run(r, "a0", [0.1, 0.5], dataset="mnist5k", alpha=1.0, seed=0))]
    out = tmp_path / "table2_vs_paper"
    opts = {"paper": "fedgkd_table2", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "Counts."}
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    assert csv_of(out).empty
    assert "The stand-ins' 3 dataset counts are not compared" in out.with_suffix(".md").read_text()


def test_every_paper_table_of_the_configs_gets_a_companion_target():
    for name in ("config.yaml", "paper.yaml"):
        plan = Plan(yaml.safe_load((ROOT / "config" / name).read_text()))
        outputs = plan.all_outputs()
        assert "results/tables/table3_vs_paper.md" in outputs
        assert "results/tables/rounds_to_target_vs_paper.csv" in outputs
        opts = plan.vs_paper_options("table3")
        assert (
            opts["paper"] == "fedgkd_table3"
            and "FedGKD paper's Table 3 beside the reproduced table3" in opts["caption"]
        )
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["tables"]["table3"]["paper"] = "fedgkd_table99"
    with pytest.raises(ConfigError, match="'fedgkd_table99' is not a paper table"):
        validate_config(cfg, SCHEMA, check_specs=False)


def test_front_page_leads_with_what_is_comparable(tmp_path):
    from fedkd.report.agreement import write_front_page

    r = tmp_path / "runs"
    runs = three_methods_on_mnist5k(r)
    tables = tmp_path / "tables"
    opts = {"paper": "fedgkd_table3", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "Beside."}
    render("vs_paper", tables / "table3_vs_paper", aggregate=agg_file(tmp_path, runs), options=opts)
    template = tmp_path / "workflow.rst"
    template.write_text("Fixed text.\n")
    out = write_front_page(template, tables, tmp_path / "front.rst", stand_in=True)
    text = out.read_text()
    assert text.startswith("Fixed text.\n")
    assert (
        "of 3 pairs of methods run in the same setting, 2 of 3 (67%) are ordered as in the paper"
        in text
    )
    assert "No run of this configuration is on a dataset of the paper" in text
    # no absolute difference where nothing is comparable by value
    assert "   * - ``table3``\n     - 3\n     - 2 of 3 (67%)\n     - –\n     - –" in text
    # the paper's own dataset: by value
    own = [("fedavg", make_run(r, f"c{s}", [0.1, acc], dataset="cifar10", alpha=1.0, seed=s))
           for s, acc in ((0, 0.76), (1, 0.78))]  # fmt: skip
    render("vs_paper", tables / "table4_vs_paper", aggregate=agg_file(tmp_path / "own", own),
           options={"paper": "fedgkd_table3", "caption": "Own."})  # fmt: skip
    text = write_front_page(template, tables, tmp_path / "front.rst", stand_in=False).read_text()
    assert "for 1 of 1 (100%) cells" in text and "     - 0.30 points" in text
    # nothing built yet: the page says so instead of an empty table
    empty = write_front_page(template, tmp_path / "none", tmp_path / "empty.rst", stand_in=False)
    assert "No comparison table is built yet" in empty.read_text()


def test_front_page_opens_with_the_claims_verdicts(tmp_path):
    from fedkd.report.agreement import write_front_page

    template = tmp_path / "workflow.rst"
    template.write_text("Fixed text.\n")
    tables = tmp_path / "tables"
    tables.mkdir()
    before = write_front_page(template, tables, tmp_path / "a.rst", stand_in=True).read_text()
    assert "The claims table (``results/tables/claims.md``) is not built yet" in before
    pd.DataFrame(
        {"claim": list("abcde"), "verdict": ["holds", "holds", "inconclusive", "not run", "holds"]}
    ).to_csv(tables / "claims.csv", index=False)
    text = write_front_page(template, tables, tmp_path / "b.rst", stand_in=True).read_text()
    claims = text.index("**The papers' claims.**")
    assert text.startswith("Fixed text.\n") and claims < text.index("**Agreement with the paper.**")
    assert "3 holds, 0 contradicted, 1 inconclusive, 1 not run" in text
