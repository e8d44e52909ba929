"""Reports: `fedkd aggregate` (runs -> one long Parquet) and `fedkd render`'s tables."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedkd.cli import main
from fedkd.report import (
    AGGREGATE_COLUMNS,
    ReportError,
    aggregate_runs,
    parse_run_arg,
    render,
)
from fedkd.report.names import display_name
from report_runs import COLUMNS, agg_file, grid_runs, make_run, read


# --------------------------------------------------------------------------- aggregate
def test_aggregate_columns_types_and_row_order(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedprox", make_run(r, "p1", [0.5, 0.6], strategy="fedprox", seed=1, params={"mu": 0.01})),
        ("fedavg", make_run(r, "a1", [0.4, 0.5], seed=1, alpha=0.1, server={"loss": [1.0, 2.0]})),
        ("fedavg", make_run(r, "a0", [0.4, 0.5], seed=0, alpha=0.1)),
        ("fedavg", make_run(r, "s0", [0.3, 0.4], partition="shards", shards=2, alpha=1.0)),
        ("fedavg", make_run(r, "b0", [0.4, 0.5], seed=0, alpha=1.0, variant="M5")),
    ]
    df = aggregate_runs([(label, str(d)) for label, d in runs])
    assert list(df.columns) == AGGREGATE_COLUMNS + ["server_loss"]
    # sorted by (label, dataset, alpha, participation, local_epochs, seed, round); NaN alpha last
    got = [(row.label, Path(row.run).name, row.round) for row in df.itertuples()]
    assert got == [
        ("fedavg", "a0", 1), ("fedavg", "a0", 2), ("fedavg", "a1", 1), ("fedavg", "a1", 2),
        ("fedavg", "b0", 1), ("fedavg", "b0", 2), ("fedavg", "s0", 1), ("fedavg", "s0", 2),
        ("fedprox", "p1", 1), ("fedprox", "p1", 2),
    ]  # fmt: skip
    one = df[df["run"].str.endswith("s0")].iloc[0]
    # alpha means nothing for sharding (and shards nothing for Dirichlet): NaN, not the default
    assert math.isnan(one["alpha"]) and one["shards"] == 2.0
    b0 = df[df["run"].str.endswith("b0")].iloc[0]
    assert b0["variant"] == "M5" and math.isnan(b0["shards"]) and b0["alpha"] == 1.0
    p1 = df[df["label"] == "fedprox"].iloc[0]
    assert json.loads(p1["params"]) == {"mu": 0.01}
    assert (p1["rounds_planned"], p1["clients"], p1["train_size"], p1["num_classes"]) == (
        2,
        20,
        45000,
        10,
    )
    assert list(p1["class_acc"]) == [0.5] * 10
    assert df["server_loss"].isna().sum() == 8  # only run a1 reports it
    assert df["run"].tolist()[0] == str(r / "a0")  # the run dir as given


def test_aggregate_keeps_run_without_rounds_and_names_missing_dirs(tmp_path):
    d = make_run(tmp_path, "div", [], status="diverged", rounds=5)
    df = aggregate_runs([("fedavg", str(d))])
    assert len(df) == 1
    row = df.iloc[0]
    assert (row["round"], row["status"]) == (0, "diverged")
    assert math.isnan(row["test_acc"])
    with pytest.raises(ReportError, match="nowhere"):
        aggregate_runs([("fedavg", str(tmp_path / "nowhere"))])
    with pytest.raises(ReportError, match="twice"):
        aggregate_runs([("fedavg", str(d)), ("fedavg", str(d))])


def test_a_long_aggregate_says_how_far_it_has_read(tmp_path):
    """``fedkd aggregate``'s progress: at most a line every 10 seconds, none at the end (the
    summary line follows), and none for an aggregate read in less."""
    from fedkd.report.run_list import reading_progress

    runs = [("fedavg", str(make_run(tmp_path, f"r{i}", [0.5], seed=i))) for i in range(5)]
    clock, lines = [0.0], []

    def read_slowly(done: int, total: int) -> None:
        clock[0] += 6.0  # each run took 6 seconds to read
        progress(done, total)

    progress = reading_progress(lines.append, clock=lambda: clock[0])
    aggregate_runs(runs, read_slowly)
    assert lines == ["read 2 of 5 runs (40 %)", "read 4 of 5 runs (80 %)"]
    progress, lines[:] = reading_progress(lines.append, clock=lambda: 0.0), []
    aggregate_runs(runs, progress)
    assert lines == []


@pytest.mark.parametrize(
    "column,value", [("test_acc", 55.0), ("val_acc", -0.1), ("local_acc", 1.5)]
)
def test_render_refuses_an_aggregate_whose_accuracies_are_not_fractions(tmp_path, column, value):
    """`fedkd aggregate` checks every accuracy; an aggregate written or edited otherwise (percent
    instead of a fraction) would render 5500.00, so render checks it too (a non-finite value is
    named and left out by the layouts)."""
    r = tmp_path / "runs"
    agg = agg_file(tmp_path, [("fedavg", make_run(r, "a", [0.5, 0.6]))])
    df = pd.read_parquet(agg)
    df.loc[df["round"] == 1, column] = value
    df.to_parquet(agg)
    with pytest.raises(
        ReportError, match=f"{column} .* of run .* \\(round 1\\) is not an accuracy in \\[0, 1\\]"
    ):
        render("grid", tmp_path / "t", aggregate=agg, options={"columns": ["fedavg"]})


def test_run_argument_labels_may_contain_equals(tmp_path):
    d = tmp_path / "runs" / "alpha=0.1"
    d.mkdir(parents=True)
    assert parse_run_arg(f"M=3={d}") == ("M=3", str(d))
    assert parse_run_arg(f"fedgkd={d}") == ("fedgkd", str(d))
    with pytest.raises(ReportError, match="no '='"):
        parse_run_arg("just-a-dir")


def test_a_runs_file_skips_indented_comments_and_names_its_bad_line(tmp_path):
    from fedkd.report.run_list import read_runs_file

    run = make_run(tmp_path / "runs", "a", [0.5])
    path = tmp_path / "runs.txt"
    path.write_text(f"  # an indented comment\n\nfedavg={run}\nno-equals-sign\n")
    with pytest.raises(ReportError, match=f"runs file {re.escape(str(path))}, line 4: "
                                          "'no-equals-sign' is not LABEL=RUN_DIR"):  # fmt: skip
        read_runs_file(path)
    path.write_text(f"  # an indented comment\nfedavg={run}\n")
    assert read_runs_file(path) == [("fedavg", str(run))]


def test_cli_aggregate_with_runs_file(tmp_path, capsys):
    a = make_run(tmp_path, "a", [0.1, 0.2])
    b = make_run(tmp_path, "b", [0.3, 0.4], seed=1)
    runs_file = tmp_path / "runs.txt"
    runs_file.write_text(f"# one per line\nM=1={b}\n\n")
    out = tmp_path / "agg" / "t.parquet"
    assert (
        main(["aggregate", "--out", str(out), "--run", f"M=1={a}", "--runs-file", str(runs_file)])
        == 0
    )
    df = pd.read_parquet(out)
    again = tmp_path / "agg" / "again.parquet"
    assert (
        main(["aggregate", "-o", str(again), "--run", f"M=1={a}", "--runs-file", str(runs_file)])
        == 0
    )
    assert again.read_bytes() == out.read_bytes()  # the aggregate itself is deterministic
    assert f"{again}: 2 runs, 4 rows\n" in capsys.readouterr().err
    # a run.json still saying running (in progress, or killed): unfinished, as status may not tell
    c = make_run(tmp_path, "c", [0.3], seed=2, status="running")
    assert main(["aggregate", "-o", str(again), "--run", f"M=1={c}"]) == 0
    assert f"{again}: 1 run, 1 row, 1 unfinished\n" in capsys.readouterr().err
    assert df["label"].unique().tolist() == ["M=1"]
    assert df["seed"].tolist() == [0, 0, 1, 1]
    assert main(["aggregate", "--out", str(out), "--run", f"x={tmp_path / 'gone'}"]) == 2
    assert str(tmp_path / "gone") in capsys.readouterr().err


# --------------------------------------------------------------------------- tables
@pytest.fixture
def grid(tmp_path):
    """Three labels on two settings, two seeds each; 'moon' diverged in one cell."""
    return grid_runs(tmp_path)


def test_table3_mean_std_highlight_and_diverged(tmp_path, grid):
    out = tmp_path / "t3"
    opts = {"columns": COLUMNS, "caption": "CIFAR_10 50%", "val_selected": False}
    render("table3", out, aggregate=grid, options=opts)
    tex = read(out, ".tex")
    lines = [ln for ln in tex.splitlines() if ln.startswith("cifar10") or ln.startswith(" &")]
    assert len(lines) == 2
    alpha1, alpha01 = lines
    # alpha 1 first (papers' order); fedavg best accs 80 and 70 -> 75.00 ± 5.00 (ddof 0);
    # fedprox 70 and 74 -> 72.00 ± 2.00; fedgkd 60 and 62 -> 61.00 ± 1.00; moon
    # 90 ± 0 is best, fedavg second; fedgen has no runs
    cells = [c.strip() for c in alpha1.rstrip(" \\").split("&")]
    assert cells == [
        "cifar10", "1", r"\underline{75.00$\pm$5.00}", r"72.00$\pm$2.00", r"61.00$\pm$1.00",
        r"\textbf{90.00$\pm$0.00}", "--",
    ]  # fmt: skip
    cells = [c.strip() for c in alpha01.rstrip(" \\").split("&")]
    # the repeated dataset is printed once per group; moon has a diverged seed here
    assert cells == [
        "", "0.1", r"\textbf{55.00$\pm$5.00}", r"\underline{52.00$\pm$2.00}", r"41.00$\pm$1.00",
        "diverged", "--",
    ]  # fmt: skip
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\label{tab:table3}" in tex
    # the caption given, then the setting of its runs, the seeds and what ± means
    assert (
        r"\caption{CIFAR\_10 50\% Runs: 20 clients, partition dirichlet-equal ($\alpha$ = 0.1, 1), "
        r"C = 0.2, E = 20, 3 rounds, model" in tex
    )
    assert r"seeds 0, 1 ($\pm$ = population std (ddof 0) over the seeds).}" in tex
    md = read(out, ".md")
    assert (
        "| cifar10 | 0.1 | **55.00 ± 5.00** | <u>52.00 ± 2.00</u> | 41.00 ± 1.00 | diverged | – |"
        in md
    )
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert pd.api.types.is_float_dtype(csv["mean"]) and pd.api.types.is_float_dtype(csv["std"])
    assert pd.api.types.is_integer_dtype(csv["n_seeds"])
    row = csv[(csv["label"] == "fedavg") & (csv["alpha"] == 1.0)].iloc[0]
    assert (row["mean"], row["std"], row["n_seeds"], row["seeds"], row["status"]) == (
        75.0,
        5.0,
        2,
        "0;1",
        "ok",
    )
    moon = csv[(csv["label"] == "moon") & (csv["alpha"] == 0.1)].iloc[0]
    assert moon["status"] == "diverged" and math.isnan(moon["mean"]) and moon["n_seeds"] == 0
    assert csv[csv["label"] == "fedgen"]["status"].tolist() == ["missing", "missing"]


def test_a_cell_short_of_the_tables_seeds_is_marked(tmp_path):
    """FedGKD has seeds 0, 1 and 2, FedAvg only 0 and 1 (seed 2 never ran): FedAvg's mean is over
    two seeds, so its cell carries the mark the caption explains, and the CSV names the seed."""
    r = tmp_path / "runs"
    runs = [
        ("fedgkd", make_run(r, f"g{s}", [0.1, acc], seed=s))
        for s, acc in enumerate((0.7, 0.72, 0.74))
    ]
    runs += [
        ("fedavg", make_run(r, f"a{s}", [0.1, acc], seed=s)) for s, acc in enumerate((0.69, 0.71))
    ]
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": ["fedavg", "fedgkd"], "val_selected": False})  # fmt: skip
    md = read(out, ".md")
    assert "<u>70.00 ± 1.00‡</u> | **72.00 ± 1.63** |" in md
    assert "‡: the cell lacks a seed other cells of the table have" in md
    assert r"70.00$\pm$1.00$^\ddagger$" in read(out, ".tex")
    csv = pd.read_csv(out.with_suffix(".csv"), dtype={"missing_seeds": str}).set_index("label")
    assert csv.loc["fedavg", "missing_seeds"] == "2" and pd.isna(csv.loc["fedgkd", "missing_seeds"])


def test_a_seed_whose_only_run_diverged_still_counts_for_the_mark(tmp_path):
    """FedAvg ran seeds 0, 1 and 2 and seed 2 diverged; FedGKD never ran seed 2: FedGKD's mean is
    over two of the table's three seeds, whether or not FedAvg's cell shows a value."""
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, f"a{s}", [0.5, acc], seed=s, rounds=2,
                            status="diverged" if s == 2 else "complete"))
        for s, acc in enumerate((0.77, 0.775, 0.78))
    ]  # fmt: skip
    runs += [
        ("fedgkd", make_run(r, f"g{s}", [0.5, acc], seed=s)) for s, acc in enumerate((0.79, 0.792))
    ]
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": ["fedavg", "fedgkd"], "val_selected": False})  # fmt: skip
    assert "| diverged | 79.10 ± 0.10‡ |" in read(out, ".md")
    csv = pd.read_csv(out.with_suffix(".csv"), dtype={"missing_seeds": str}).set_index("label")
    assert csv.loc["fedgkd", "missing_seeds"] == "2"


def test_a_run_stopped_at_its_target_has_no_best_or_final_accuracy(tmp_path):
    """A run that stopped once it reached its stop_at_acc (round 2 of 10) has no final round and
    no best over its rounds: its cells say so rather than show round 2 as its final accuracy."""
    r = tmp_path / "runs"
    runs = []
    for seed in (0, 1):
        d = make_run(r, f"a{seed}", [0.5, 0.62], seed=seed, rounds=10)
        rec = json.loads((d / "run.json").read_text())
        rec["spec"]["stop_at_acc"] = 0.6
        (d / "run.json").write_text(json.dumps(rec))
        runs.append(("fedavg", d))
    agg = agg_file(tmp_path, runs)
    out = tmp_path / "t"
    render("grid_by_stat", out, aggregate=agg, options={"stats": ["best", "final"]})
    assert set(pd.read_csv(out.with_suffix(".csv"))["status"]) == {"stopped at target"}
    assert "| FedAvg | stopped at target | stopped at target |" in read(out, ".md")
    # the rounds it did play still answer the accuracy at round 2
    render("at_rounds", out, aggregate=agg, options={"rounds": [2]})
    assert pd.read_csv(out.with_suffix(".csv"))["mean"].iloc[0] == pytest.approx(62.0)


def test_grid_final_stat_sample_std_and_across_layout(tmp_path, grid):
    out = tmp_path / "t"
    opts = {"columns": ["fedavg", "fedprox"], "stat": "final", "ddof": 1, "rows": ["alpha"]}
    render("table9", out, aggregate=grid, options=opts)
    csv = pd.read_csv(out.with_suffix(".csv"))
    fedavg = csv[(csv["label"] == "fedavg") & (csv["alpha"] == 1.0)].iloc[0]
    # final accuracy of both seeds is 0.5 -> 50.00 ± 0.00; fedprox finals 0.1, 0.1
    assert (fedavg["mean"], fedavg["std"]) == (50.0, 0.0)
    render(
        "table3", out, aggregate=grid, options={"columns": ["fedavg"], "ddof": 1, "rows": ["alpha"]}
    )
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert csv.loc[csv["alpha"] == 1.0, "std"].iloc[0] == pytest.approx(
        np.std([80, 70], ddof=1), abs=1e-6
    )
    # labels as rows, alpha values as columns (the papers' table-7 layout); marks still compare labels
    render(
        "table7",
        out,
        aggregate=grid,
        options={
            "columns": ["fedavg", "fedprox"],
            "rows": ["alpha"],
            "across": ["alpha"],
            "val_selected": False,
        },  # fmt: skip
    )
    md = read(out, ".md")
    assert "| Method | α=1 | α=0.1 |" in md
    assert "| FedAvg | **75.00 ± 5.00** | **55.00 ± 5.00** |" in md
    assert "| FedProx | <u>72.00 ± 2.00</u> | <u>52.00 ± 2.00</u> |" in md


def test_table5_best_and_final_subcolumns(tmp_path, grid):
    out = tmp_path / "t5"
    render(
        "table5",
        out,
        aggregate=grid,
        options={
            "columns": ["fedavg", "fedprox"],
            "rows": ["alpha"],
            "stats": ["best", "final"],
            "across": ["label"],
        },  # fmt: skip
    )
    tex = read(out, ".tex")
    assert r"\multicolumn{2}{c}{FedAvg} & \multicolumn{2}{c}{FedProx}" in tex
    # best: fedavg 75 > fedprox 72; final: fedavg 50 > fedprox 10 (each stat compared on its own)
    assert (
        r"1 & \textbf{75.00$\pm$5.00} & \textbf{50.00$\pm$0.00} & \underline{72.00$\pm$2.00} & \underline{10.00$\pm$0.00} \\"
        in tex
    )
    assert "| α | FedAvg Best | FedAvg Final | FedProx Best | FedProx Final |" in read(out, ".md")


def test_table6_accuracy_at_rounds(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, "a0", [0.1, 0.2, 0.3, 0.4, 0.5], seed=0)),
        ("fedavg", make_run(r, "a1", [0.3, 0.4, 0.5, 0.6, 0.7], seed=1)),
        # diverged in round 4: round 2 exists, round 5 does not
        ("fedgkd", make_run(r, "g0", [0.5, 0.6, 0.7], seed=0, status="diverged", rounds=5)),
    ]
    out = tmp_path / "t6"
    render(
        "table6",
        out,
        aggregate=agg_file(tmp_path, runs),
        options={"columns": ["fedavg", "fedgkd"], "rounds": [2, 5, 10]},
    )
    md = read(out, ".md")
    assert (
        "| Method | Test accuracy at round 2 | Test accuracy at round 5 | Test accuracy at round 10 |"
        in md
    )
    assert "| FedAvg | <u>30.00 ± 10.00</u> | 60.00 ± 10.00 | – |" in md
    # one seed: its value alone, no "± 0.00"; FedAvg's seed 1 has no FedGKD run (‡)
    assert "| FedGKD | **60.00‡** | diverged | – |" in md
    tex = read(out, ".tex")
    assert r"\multicolumn{3}{c}{Test accuracy at round}" in tex
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert csv[csv["label"] == "fedavg"]["round"].tolist() == [2, 5, 10]
    # sample std (ddof 1) is undefined for a single seed: the cell shows the mean alone
    opts = {"columns": ["fedavg", "fedgkd"], "rounds": [2], "ddof": 1}
    render("table6", out, aggregate=tmp_path / "agg.parquet", options=opts)
    assert "| FedGKD | **60.00‡** |" in read(out, ".md")
    assert "| FedAvg | <u>30.00 ± 14.14</u> |" in read(out, ".md")


def test_rounds_to_target_reached_and_not_reached(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, "a0", [0.5, 0.7, 0.81, 0.7, 0.7], alpha=1.0, seed=0)),
        ("fedavg", make_run(r, "a1", [0.5, 0.6, 0.7, 0.7, 0.85], alpha=1.0, seed=1)),
        ("feddf", make_run(r, "d0", [0.85, 0.9], alpha=1.0, seed=0)),
        ("feddf", make_run(r, "d1", [0.5, 0.9], alpha=1.0, seed=1)),
        ("fedprox", make_run(r, "p0", [0.5, 0.79], alpha=1.0, seed=0)),  # never reaches 80%
        ("fedprox", make_run(r, "p1", [0.9, 0.9], alpha=1.0, seed=1)),
        ("fedavg", make_run(r, "b0", [0.74, 0.76], alpha=0.1, seed=0)),  # 75% target at alpha 0.1
    ]
    out = tmp_path / "rt"
    opts = {"columns": ["fedavg", "fedprox", "feddf"], "targets": {"1.0": 0.8, "0.1": 0.75}}
    render("rounds_to_target", out, aggregate=agg_file(tmp_path, runs), options=opts)
    md = read(out, ".md")
    assert "| α | C | E | T | FedAvg | FedProx | FedDF |" in md
    # fedavg: rounds 3 and 5 -> 4 ± 1; feddf: rounds 1 and 2 -> 1.5 ± 0.5, one decimal by default
    # (without it, 1.5 ± 0.5 would print as "2 ± 0"); fedprox: seed 1 reaches 80% in round 1,
    # seed 0 never does
    assert "| 1 | 0.2 | 20 | 80% | <u>4.0 ± 1.0</u> | not reached (1 of 2) | **1.5 ± 0.5** |" in md
    assert "Not reached: a seed never reached T in its rounds; (k of n)" in md
    # one seed: no ±; seed 1 has no run there (‡)
    assert "| 0.1 | 0.2 | 20 | 75% | 2.0‡ | – | – |" in md
    csv = pd.read_csv(out.with_suffix(".csv"), dtype={"rounds_reached": str})
    feddf = csv[csv["label"] == "feddf"].iloc[0]
    assert (feddf["mean"], feddf["std"], feddf["target"]) == (1.5, 0.5, 0.8)
    fedprox = csv[(csv["label"] == "fedprox") & (csv["alpha"] == 1.0)].iloc[0]
    assert fedprox["status"] == "not reached" and fedprox["rounds_reached"] == "1"
    with pytest.raises(ReportError, match="alpha 0.1"):
        render(
            "rounds_to_target",
            out,
            aggregate=agg_file(tmp_path, runs, "b.parquet"),
            options={"targets": {"1": 0.8}},
        )
    with pytest.raises(ReportError, match="alpha 1 two targets \\(0.5 and 0.99\\)"):
        render("rounds_to_target", out, aggregate=tmp_path / "b.parquet",
               options={"targets": {"1.0": 0.5, "1": 0.99}})  # fmt: skip
    with pytest.raises(ReportError, match="80"):
        render(
            "rounds_to_target",
            out,
            aggregate=tmp_path / "b.parquet",
            options={"targets": {"1": 80}},
        )


def test_rounds_to_target_csv_has_the_same_columns_whichever_cells_are_reached(tmp_path):
    """A script reads the CSV by its header: rounds_reached is a column of every table of the
    layout, at one place, whether no cell, the first or a later one is not reached."""
    r = tmp_path / "runs"
    reached = ("fedavg", make_run(r, "a", [0.5, 0.85], alpha=1.0))
    missed = ("fedprox", make_run(r, "p", [0.5, 0.79], alpha=1.0))
    headers = []
    for i, (runs, columns) in enumerate([
        ([reached], ["fedavg"]),
        ([reached, missed], ["fedavg", "fedprox"]),
        ([reached, missed], ["fedprox", "fedavg"]),
    ]):  # fmt: skip
        out = tmp_path / f"rt{i}"
        render("rounds_to_target", out, aggregate=agg_file(tmp_path, runs, f"{i}.parquet"),
               options={"columns": columns, "targets": {"1.0": 0.8}})  # fmt: skip
        headers.append(read(out, ".csv").splitlines()[0])
    assert "rounds_reached" in headers[0] and len(set(headers)) == 1, headers


def test_cell_mixing_settings_is_an_error(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, "a0", [0.5], seed=0, local_epochs=1)),
        ("fedavg", make_run(r, "a1", [0.5], seed=1, local_epochs=20)),
    ]
    with pytest.raises(ReportError, match="local_epochs"):
        render("table3", tmp_path / "t", aggregate=agg_file(tmp_path, runs))


def test_table1_traits_come_from_strategy_classes(tmp_path):
    from fedkd.strategies import get_strategy_class, strategy_names

    names = strategy_names()
    assert {"fedavg", "fedprox"} <= set(names)
    out = tmp_path / "t1"
    shown_as = {"fedavg": "FedAvg", "fedprox": {"tex": "FedProx$^{*}$", "md": "FedProx*"}}
    render("table1", out, options={"strategies": names, "names": shown_as})
    md = read(out, ".md").splitlines()
    for name in names:
        tr = get_strategy_class(name).traits
        marks = [
            "✓" if f else "✗"
            for f in (tr.extra_information != "none", tr.proxy_data, tr.modifies_model)
        ]
        # a name given in the options, else the papers' name (fedkd.report.names)
        # (its "*" escaped in the Markdown source, so that it shows as written, not as markup)
        shown = {"fedprox": "FedProx\\*"}.get(name, display_name(name))
        assert f"| {shown} | {' | '.join(marks)} |" in md
    assert "| FedAvg | ✗ | ✗ | ✗ |" in md
    tex = read(out, ".tex")
    assert r"FedAvg & $\times$ & $\times$ & $\times$ \\" in tex and "amssymb" in tex
    assert r"FedProx$^{*}$ & $\times$" in tex  # LaTeX given as such is kept verbatim
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert csv["strategy"].tolist() == names
    with pytest.raises(ValueError, match="nosuch"):
        render("table1", out, options={"strategies": ["fedavg", "nosuch"]})


def test_table2_dataset_statistics(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, "a", [0.5], dataset="cifar100")),
        ("fedavg", make_run(r, "b", [0.5], dataset="cifar10")),
    ]
    out = tmp_path / "t2"
    render(
        "table2",
        out,
        aggregate=agg_file(tmp_path, runs),
        options={"datasets": ["cifar100", "cifar10"]},
    )
    md = read(out, ".md")
    assert md.index("| cifar100 |") < md.index("| cifar10 |")
    assert "| cifar10 | image | 45,000 | 5,000 | 10,000 | 10 | 20 |" in md
