"""Reports: `fedkd aggregate` (runs -> one long Parquet) and `fedkd render` (tables and figures)."""

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
    write_aggregate,
)
from fedkd.report.names import display_name
from fedkd.run_choices import DEFAULTS as RUN_CHOICES


# --------------------------------------------------------------------------- fake runs
def make_run(
    root: Path,
    name: str,
    accs: list[float],
    *,
    strategy: str = "fedavg",
    dataset: str = "cifar10",
    alpha: float | None = 0.5,
    seed: int = 0,
    status: str = "complete",
    participation: float = 0.2,
    local_epochs: int = 20,
    partition: str = "dirichlet-equal",
    shards: int | None = None,
    rounds: int | None = None,
    variant: str | None = None,
    class_acc: list[list[float]] | None = None,
    local_acc: list[float] | None = None,
    server: dict[str, list] | None = None,
    params: dict | None = None,
) -> Path:
    """A run directory as the engine writes it (run.json + metrics.parquet), with made-up numbers."""
    d = root / name
    d.mkdir(parents=True)
    spec = {
        "dataset": dataset, "model": "auto", "strategy": strategy, "params": params or {},
        "clients": 20, "partition": partition, "alpha": alpha, "shards": shards,
        "participation": participation, "rounds": rounds or len(accs), "local_epochs": local_epochs,
        "batch_size": 64, "seed": seed, "eval_local": local_acc is not None, **RUN_CHOICES,
    }  # fmt: skip
    rec = {
        "status": status,
        "labels": {"variant": variant} if variant else {},
        "spec": spec,
        "strategy_params": params or {},
        "model": "resnet8",
        "dataset": {
            "name": dataset,
            "kind": "image",
            "num_classes": 10,
            "train": 45000,
            "val": 5000,
            "test": 10000,
            "input_shape": [3, 32, 32],
            "source": "test",
        },  # fmt: skip
        "summary": {"rounds": len(accs)},
    }
    (d / "run.json").write_text(json.dumps(rec))
    rows = []
    for i, acc in enumerate(accs):
        row = {
            "round": i + 1,
            "test_acc": acc,
            "test_loss": 1.0 - acc,
            "class_acc": class_acc[i] if class_acc else [acc] * 10,
            "train_loss": 0.5,
            "local_acc": local_acc[i] if local_acc else float("nan"),
            "bytes_sent": 1000,
            "bytes_received": 1000,
            "seconds": 1.0,
            "clients": [0, 1, 2, 3],
        }
        for key, values in (server or {}).items():
            row[f"server_{key}"] = values[i]
        rows.append(row)
    if rows or status == "complete":
        pd.DataFrame(rows).to_parquet(d / "metrics.parquet", index=False)
    return d


def agg_file(tmp_path: Path, runs: list[tuple[str, Path]], name: str = "agg.parquet") -> Path:
    out = tmp_path / name
    write_aggregate(aggregate_runs([(label, str(d)) for label, d in runs]), out)
    return out


def read(prefix: Path, suffix: str) -> str:
    return prefix.with_name(prefix.name + suffix).read_text()


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
    assert f"{again}: 1 run, 1 rows, 1 unfinished\n" in capsys.readouterr().err
    assert df["label"].unique().tolist() == ["M=1"]
    assert df["seed"].tolist() == [0, 0, 1, 1]
    assert main(["aggregate", "--out", str(out), "--run", f"x={tmp_path / 'gone'}"]) == 2
    assert str(tmp_path / "gone") in capsys.readouterr().err


# --------------------------------------------------------------------------- tables
@pytest.fixture
def grid(tmp_path):
    """Three labels on two settings, two seeds each; 'moon' diverged in one cell."""
    r = tmp_path / "runs"
    runs = []
    for alpha in (1.0, 0.1):
        for seed, (best_a, best_b, best_c) in enumerate([(0.80, 0.70, 0.60), (0.70, 0.74, 0.62)]):
            shift = 0.0 if alpha == 1.0 else -0.2
            runs += [
                ("fedavg", make_run(r, f"a{alpha}-{seed}", [0.3, best_a + shift, 0.5 + shift], alpha=alpha, seed=seed)),
                ("fedprox", make_run(r, f"p{alpha}-{seed}", [best_b + shift, 0.2, 0.1], alpha=alpha, seed=seed, strategy="fedprox")),
                ("fedgkd", make_run(r, f"g{alpha}-{seed}", [0.1, best_c + shift, 0.3], alpha=alpha, seed=seed)),
            ]  # fmt: skip
        status = "diverged" if alpha == 0.1 else "complete"
        for seed in (0, 1):
            runs.append(
                ("moon", make_run(r, f"m{alpha}-{seed}", [0.9, 0.9], alpha=alpha, seed=seed,
                                  status=status if seed == 1 else "complete", rounds=3)),
            )  # fmt: skip
    return agg_file(tmp_path, runs)


COLUMNS = ["fedavg", "fedprox", "fedgkd", "moon", "fedgen"]
TABLE_FILES = (".tex", ".md", ".csv", ".html")


def test_table3_mean_std_highlight_and_diverged(tmp_path, grid):
    out = tmp_path / "t3"
    opts = {"columns": COLUMNS, "caption": "CIFAR_10 50%", "val_selected": False}
    render("table3", out, aggregate=grid, options=opts)
    tex = read(out, ".tex")
    lines = [ln for ln in tex.splitlines() if ln.startswith("cifar10") or ln.startswith(" &")]
    assert len(lines) == 2
    alpha1, alpha01 = lines
    # alpha 1 first (papers' order); fedavg best accs 80 and 70 -> 75.00 ± 5.00 (ddof 0);
    # fedprox 70 and 74 -> 72.00 ± 2.00; fedgkd 60 and 62 -> 61.00 ± 1.00; moon (2 short runs)
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
    assert r"\caption{CIFAR\_10 50\% Runs: 20 clients, C = 0.2, E = 20, 3 rounds, model" in tex
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
    # fedavg: rounds 3 and 5 -> 4 ± 1; feddf: rounds 1 and 2 -> 2 ± 0 (1.5 shown without decimals)
    # fedprox: seed 1 reaches 80% in round 1, seed 0 never does
    assert "| 1 | 0.2 | 20 | 80% | <u>4 ± 1</u> | not reached (1 of 2) | **2 ± 0** |" in md
    assert "Not reached: a seed never reached T in its rounds; (k of n)" in md
    # one seed: no ±; seed 1 has no run there (‡)
    assert "| 0.1 | 0.2 | 20 | 75% | 2‡ | – | – |" in md
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
        shown = {"fedprox": "FedProx*"}.get(name, display_name(name))
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


# --------------------------------------------------------------------------- figures
def _partition_file(tmp_path: Path, alpha: float) -> Path:
    from fedkd.data.partition import partition_labels, write_partition

    labels = np.repeat(np.arange(10), 50)
    assignment = partition_labels(labels, "dirichlet-equal", 10, 0, alpha=alpha, num_classes=10)
    meta = {"dataset": "cifar10", "scheme": "dirichlet-equal", "alpha": alpha, "shards": None,
            "clients": 10, "seed": 0, "num_classes": 10}  # fmt: skip
    path = tmp_path / f"part-{alpha}.parquet"
    write_partition(path, assignment, labels, meta)
    return path


def test_renders_are_byte_identical(tmp_path, grid):
    r = tmp_path / "curves"
    cls = [[0.9, 0.1] * 5, [0.2, 0.8] * 5, [0.5, 0.5] * 5]
    runs = [
        ("fedavg", make_run(r, "a0", [0.2, 0.5, 0.4], seed=0, class_acc=cls, local_acc=[0.1, 0.2, 0.2])),
        ("fedavg", make_run(r, "a1", [0.3, 0.4, 0.5], seed=1, class_acc=cls, local_acc=[0.1, 0.3, 0.2])),
        ("fedcad", make_run(r, "c0", [0.3, 0.6, 0.7], seed=0, class_acc=cls, local_acc=[0.2, 0.4, 0.5])),
        ("fedcad", make_run(r, "s0", [0.3, 0.6, 0.7], seed=0, class_acc=cls, local_acc=[0.2, 0.4, 0.5],
                            partition="shards", shards=2)),
    ]  # fmt: skip
    curves = agg_file(tmp_path, runs, "curves.parquet")
    parts = [str(_partition_file(tmp_path, a)) for a in (0.1, 1.0)]
    jobs = [
        ("table3", dict(aggregate=grid, options={"columns": COLUMNS}), TABLE_FILES),
        ("table5", dict(aggregate=grid, options={"rows": ["alpha"]}), TABLE_FILES),
        ("fig_curves", dict(aggregate=curves, options={"panels": ["partition"]}), (".pdf", ".png")),
        ("fig_forgetting", dict(aggregate=curves), (".pdf", ".png")),
        ("fig_fedcad", dict(aggregate=curves, options={"panels": ["partition"]}), (".pdf", ".png")),
        (
            "fig_partition",
            dict(partitions=parts, options={"caption": "α ∈ {0.1, 1}"}),
            (".pdf", ".png"),
        ),
    ]
    for target, kwargs, suffixes in jobs:
        first = render(target, tmp_path / "one" / target, **kwargs)
        second = render(target, tmp_path / "two" / target, **kwargs)
        assert [p.suffix for p in first] == list(suffixes)
        for a, b in zip(first, second, strict=True):
            assert a.read_bytes() == b.read_bytes(), f"{target}: {a.name} differs between renders"
            assert a.stat().st_size > 200
    pdf = (tmp_path / "one" / "fig_curves.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf
    assert (tmp_path / "one" / "fig_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fig_fedcad_needs_local_accuracy(tmp_path, grid):
    with pytest.raises(ReportError, match="eval_local"):
        render("fig_fedcad", tmp_path / "f", aggregate=grid)


# --------------------------------------------------------------------------- errors
def test_errors_name_the_bad_value(tmp_path, grid, capsys):
    missing = tmp_path / "no-such.parquet"
    with pytest.raises(ReportError, match="no-such.parquet"):
        render("table3", tmp_path / "t", aggregate=missing)
    with pytest.raises(ReportError, match="table42"):
        render("table42", tmp_path / "t", aggregate=grid)
    with pytest.raises(ReportError, match="colums"):
        render("table3", tmp_path / "t", aggregate=grid, options={"colums": ["fedavg"]})
    with pytest.raises(ReportError, match="'maximum'"):
        render("table3", tmp_path / "t", aggregate=grid, options={"stat": "maximum"})
    with pytest.raises(ReportError, match="seed_count"):
        render("table3", tmp_path / "t", aggregate=grid, options={"rows": ["seed_count"]})
    with pytest.raises(ReportError, match="fedgkd-x"):
        render("table3", tmp_path / "t", aggregate=grid, options={"columns": ["fedgkd-x"]})
    with pytest.raises(ReportError, match="not valid JSON"):
        render("table3", tmp_path / "t", aggregate=grid, options="{columns: [fedavg]}")
    with pytest.raises(ReportError, match="opts.json"):
        render("table3", tmp_path / "t", aggregate=grid, options=f"@{tmp_path / 'opts.json'}")
    # the command line reports them as errors with exit status 2
    assert (
        main(["render", "table3", "--out", str(tmp_path / "t"), "--aggregate", str(missing)]) == 2
    )
    assert str(missing) in capsys.readouterr().err
    assert main(["render", "bogus", "--out", str(tmp_path / "t")]) == 2
    assert "'bogus'" in capsys.readouterr().err
    opts = json.dumps({"stat": "mean"})
    assert (
        main(
            [
                "render",
                "table4",
                "--out",
                str(tmp_path / "t"),
                "--aggregate",
                str(grid),
                "--options",
                opts,
            ]
        )
        == 2
    )
    assert "'mean'" in capsys.readouterr().err


def test_options_from_file(tmp_path, grid):
    path = tmp_path / "o.json"
    path.write_text(
        json.dumps(
            {
                "columns": ["fedprox", "fedavg"],
                "column_names": {"fedprox": "FedProx"},
                "val_selected": False,
            }  # fmt: skip
        )
    )
    out = tmp_path / "t"
    assert (
        main(
            [
                "render",
                "table3",
                "--out",
                str(out),
                "--aggregate",
                str(grid),
                "--options",
                f"@{path}",
            ]
        )
        == 0
    )
    assert "| Dataset | α | FedProx | FedAvg |" in read(out, ".md")


def test_help_lists_targets(capsys):
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    text = capsys.readouterr().out
    for target in (
        "table1",
        "table9",
        "rounds_to_target",
        "fig_tsne",
        "fig_fedcad",
        "--aggregate",
        "--options",
    ):
        assert target in text
    with pytest.raises(SystemExit):
        main(["aggregate", "--help"])
    assert "--runs-file" in capsys.readouterr().out


# --------------------------------------------------------------------------- a real run
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run

    out = tmp_path_factory.mktemp("real") / "run"
    spec = RunSpec(
        dataset="mnist5k", clients=4, participation=0.5, local_epochs=1, rounds=2, device="cpu"
    )
    record = Run(spec, out).run()
    assert record["status"] == "complete"
    return out


@pytest.mark.slow
def test_real_run_aggregate_and_table(tmp_path, real_run):
    out = tmp_path / "agg.parquet"
    assert main(["aggregate", "--out", str(out), "--run", f"fedavg={real_run}"]) == 0
    df = pd.read_parquet(out)
    assert df["round"].tolist() == [1, 2]
    assert (df["dataset"].iloc[0], df["model"].iloc[0], df["num_classes"].iloc[0]) == (
        "mnist5k",
        "cnn",
        10,
    )
    metrics = pd.read_parquet(real_run / "metrics.parquet")
    assert df["test_acc"].tolist() == metrics["test_acc"].tolist()
    render("table3", tmp_path / "t3", aggregate=out)
    best = metrics["test_acc"].max() * 100
    # one seed: the mean alone, no "± 0.00"; the row of the paper's best-round selection
    assert f"| mnist5k | 1 | best round | {best:.2f} |" in read(tmp_path / "t3", ".md")


@pytest.mark.slow
def test_real_run_tsne(tmp_path, real_run):
    from fedkd.engine.features import FeaturesError, read_features, tsne_features

    opts = {"samples": 120, "client": 1}
    # the features step trains the local model; computed twice, it gives the same file
    a = tsne_features(real_run, tmp_path / "a.npz", **opts)
    b = tsne_features(real_run, tmp_path / "b.npz", **opts)
    assert a.read_bytes() == b.read_bytes()
    data = read_features(a)
    (_, g_feats, g_acc), (_, l_feats, l_acc) = data["models"]
    assert g_feats.shape == l_feats.shape and g_feats.shape[0] == 120
    assert g_feats.shape[1] == 512  # the CNN's penultimate layer
    # the global model is the checkpoint's: its accuracy is the run's last recorded one
    final = pd.read_parquet(real_run / "metrics.parquet")["test_acc"].iloc[-1]
    assert g_acc == pytest.approx(final)
    assert not np.allclose(g_feats, l_feats)  # local training moved the features
    assert data["client"] == 1 and data["strategy"] == "fedavg"
    # the figure only draws the file; `render --run` (features computed on the way) draws the same
    drawn = render("tsne", tmp_path / "f" / "tsne", features=a)
    assert [p.suffix for p in drawn] == [".pdf", ".png"]
    via_run = render("fig_tsne", tmp_path / "r" / "tsne", run=str(real_run), options=opts,
                     name="tsne")  # fmt: skip
    for x, y in zip(drawn, via_run, strict=True):
        assert x.read_bytes() == y.read_bytes()
    with pytest.raises(ReportError, match="unknown option"):
        render("tsne", tmp_path / "x", features=a, options={"samples": 10})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps({"status": "diverged"}))
    (bad / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ReportError, match="'diverged'"):
        render("fig_tsne", tmp_path / "x", run=str(bad))
    with pytest.raises(FeaturesError, match="client must be an integer in \\[0, 3\\]"):
        tsne_features(real_run, tmp_path / "c.npz", client=4)


# --------------------------------------------------------------------------- what a reader sees
def test_every_registered_strategy_has_its_papers_name():
    from fedkd.report.names import PAPER_NAMES, strategy_display_names
    from fedkd.strategies import get_strategy_class, strategy_names

    shown = strategy_display_names()
    assert set(shown) == set(strategy_names())
    # as the tables have always shown them: the class's name, else the exception kept in names.py
    assert shown == {
        "fedavg": "FedAvg", "fedavgm": "FedAvgM", "fedcad": "FedCAD", "feddf": "FedDF",
        "feddistill+": "FedDistill+", "fedgen": "FedGen", "fedgkd": "FedGKD", "fedgkd+": "FedGKD+",
        "fedgkd-vote": "FedGKD-VOTE", "fedlsd": "FedLSD", "fednova": "FedNova", "fedntd": "FedNTD",
        "fedprox": "FedProx", "moon": "MOON", "scaffold": "SCAFFOLD",
    }  # fmt: skip
    # names.py keeps only exceptions: a registered strategy its class would name otherwise
    for name, paper in PAPER_NAMES.items():
        cls = get_strategy_class(name)
        assert paper != (cls.display_name or cls.__name__), name
    assert display_name("fedgkd-vote") == "FedGKD-VOTE" and display_name("moon") == "MOON"
    assert display_name("fedgkd-M5") == "FedGKD (M=5)"
    assert display_name("fedgkd-vote-M3") == "FedGKD-VOTE (M=3)"
    assert display_name("fedgkd-mse-M1") == "FedGKD (MSE, M=1)"
    assert display_name("M=1") == "M=1" and display_name("none") == "none"


def test_tables_carry_the_setting_and_an_html_rendering(tmp_path, grid):
    out = tmp_path / "t3"
    render("table3", out, aggregate=grid, options={"columns": COLUMNS, "caption": "Top-1."})
    html = read(out, ".html")
    assert html.startswith("<!DOCTYPE html>") and "<table>" in html
    assert "<caption>Top-1. Runs: 20 clients, C = 0.2, E = 20, 3 rounds" in html
    assert "<th>FedAvg</th>" in html and "<th>MOON</th>" in html
    assert "<b>90.00 ± 0.00</b>" in html and "<u>75.00 ± 5.00</u>" in html
    assert "cifar10 " in html and "train / " in html and "test samples" in html


def test_a_single_seed_output_says_it_has_no_spread(tmp_path):
    r = tmp_path / "runs"
    runs = [("fedavg", make_run(r, "a", [0.2, 0.5])), ("fedgkd", make_run(r, "g", [0.3, 0.6]))]
    out = tmp_path / "t"
    render(
        "table3",
        out,
        aggregate=agg_file(tmp_path, runs),
        options={"columns": ["fedavg", "fedgkd"], "val_selected": False},
    )
    md = read(out, ".md")
    assert "seed 0 (one seed: no ±)" in md
    assert "| cifar10 | 0.5 | <u>50.00</u> | **60.00** |" in md


def test_curves_differ_in_marker_and_line_style(tmp_path, grid):
    from fedkd.report.figures.draw import line_styles

    styles = line_styles(COLUMNS)
    assert len({(s["marker"], s["linestyle"]) for s in styles.values()}) == len(COLUMNS)
    fig = _figure(tmp_path, "figures.curves:build", grid, {"columns": COLUMNS})
    lines = [ln for ax in fig.axes for ln in ax.get_lines()]
    assert lines and all(ln.get_marker() not in (None, "None", "") for ln in lines)
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "FedAvg" in legend and "FedProx" in legend


def test_the_partition_figure_has_a_legend_for_bubble_size(tmp_path):
    from fedkd.report.figures.partition import build
    from fedkd.report.options import Options

    parts = [str(_partition_file(tmp_path, a)) for a in (0.1, 1.0)]
    fig = build(parts, Options("partition", {}, ("titles", "ncols")))
    (legend,) = fig.legends
    assert "bubble area" in legend.get_title().get_text()
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) >= 2 and all(t.endswith(" samples") for t in texts)


def _figure(tmp_path, builder: str, aggregate: Path, options: dict):
    from fedkd.report.aggregate import read_aggregate
    from fedkd.report.options import Options
    from fedkd.report.targets import _resolve

    allowed = ("panels", "columns", "row_names", "column_names", "order", "ddof", "ncols")
    return _resolve(builder)(read_aggregate(aggregate), Options("curves", options, allowed))


def test_report_sections_follow_the_papers_references():
    from fedkd.report.sections import report_section

    assert report_section("Accuracy (fedgkd Table 3); 10 clients.", "table", "table3") == (
        "FedGKD (Yao et al.)", "Table 3",
    )  # fmt: skip
    assert report_section("Curves (FedCAD Fig. 1).", "figure", "fedcad") == (
        "FedCAD (He et al.)", "Fig. 1",
    )  # fmt: skip
    assert report_section("Rounds to a target.", "table", "rtt") == ("Other tables", "rtt")


def test_the_caption_names_a_stand_in_models_options(tmp_path):
    from fedkd.report.setting import setting_sentence

    run = make_run(tmp_path / "runs", "a", [0.5, 0.6])
    rec = json.loads((run / "run.json").read_text())
    rec["spec"]["model_options"] = {"channels": [16, 32], "hidden": 128, "head_init": "he"}
    (run / "run.json").write_text(json.dumps(rec))
    df = pd.read_parquet(agg_file(tmp_path, [("fedavg", run)]))
    assert json.loads(df["model_options"].iloc[0])["hidden"] == 128
    sentence = setting_sentence(df)
    assert "model resnet8 (channels 16/32, head_init he, hidden 128);" in sentence
    # without options the model alone, as before
    plain = make_run(tmp_path / "runs", "b", [0.5, 0.6])
    assert "model resnet8;" in setting_sentence(pd.read_parquet(agg_file(tmp_path, [("x", plain)])))
    # a distilbert without pretrained weights is not the papers' DistilBERT
    df["model"] = "distilbert"
    df["model_options"] = "{}"
    assert "model distilbert (small, trained from scratch);" in setting_sentence(df)


# --------------------------------------------------------------------------- screen and captions
WIDE = ["fedavg", "fedprox", "moon", "feddistill+", "fedgen", "fedgkd", "fedgkd-vote", "fedgkd+"]


def wide_grid(tmp_path: Path) -> Path:
    """Table 3's eight methods (FedGKD a buffer length per alpha) on three alphas, two seeds."""
    r = tmp_path / "wide"
    methods = WIDE
    runs = []
    for alpha in (1.0, 0.5, 0.1):
        for i, method in enumerate(methods):
            variant = {"fedgkd": "fedgkd-M1" if alpha == 0.5 else "fedgkd-M5",
                       "fedgkd-vote": "fedgkd-vote-M5"}.get(method, method)  # fmt: skip
            for seed in (0, 1):
                acc = 0.5 + 0.04 * i + 0.01 * seed - 0.1 * (alpha < 1)
                d = make_run(r, f"{method}-{alpha}-{seed}", [0.2, acc], alpha=alpha, seed=seed,
                             strategy=method, variant=variant)  # fmt: skip
                runs.append((method, d))
    return agg_file(tmp_path, runs, "wide.parquet")


def test_a_table_too_wide_for_a_laptop_shows_its_methods_as_rows_in_html(tmp_path):
    from fedkd.report.writers import HTML_WIDTH, estimated_width

    out = tmp_path / "t3"
    opts = {"rows": ["dataset", "alpha"], "columns": WIDE, "caption": "Wide."}
    render("table3", out, aggregate=wide_grid(tmp_path), options=opts)
    md, html = read(out, ".md"), read(out, ".html")
    # the paper's layout in .md and .tex: a column per method
    assert "| Dataset | α | Selection | FedAvg | FedProx | MOON |" in md
    head = re.search(r"<thead>.*?</thead>", html, re.S)[0]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", head) == [
        "Dataset", "Selection", "Method", "α=1", "α=0.5", "α=0.1"
    ]  # fmt: skip
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html.split("<tbody>")[1], re.S)
    assert len(rows) == 8 * 2  # a row per method and selection
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    # FedGKD+ best at every alpha (the largest offset), bold; the row names shown once
    assert cells[7][2] == "FedGKD+" and cells[7][3].startswith("<b>")
    assert cells[0][:2] == ["cifar10", "best round"] and cells[1][:2] == ["", ""]
    assert cells[8][:2] == ["", "best on validation"]

    from fedkd.report.aggregate import read_aggregate
    from fedkd.report.options import Options
    from fedkd.report.tables import grid as grid_layout
    from fedkd.report.targets import get_layout

    options = Options("t3", opts, get_layout("grid").options)
    doc = grid_layout.build(read_aggregate(tmp_path / "wide.parquet"), options)
    assert estimated_width(doc) > HTML_WIDTH > estimated_width(doc.screen)


def test_a_narrow_table_keeps_its_layout_in_html(tmp_path, grid):
    out = tmp_path / "t3"
    render("table3", out, aggregate=grid, options={"columns": ["fedavg", "fedprox"]})
    head = re.search(r"<thead>.*?</thead>", read(out, ".html"), re.S)[0]
    assert ">FedAvg</th>" in head and ">FedProx</th>" in head


def test_captions_name_each_columns_variant_and_the_csv_holds_it(tmp_path):
    out = tmp_path / "t3"
    opts = {"rows": ["dataset", "alpha"], "columns": WIDE}
    render("table3", out, aggregate=wide_grid(tmp_path), options=opts)
    md = read(out, ".md")
    assert ("Variants run: FedGKD: FedGKD (M=5) at α=1, 0.1 and FedGKD (M=1) at α=0.5; "
            "FedGKD-VOTE: FedGKD-VOTE (M=5).") in md  # fmt: skip
    csv = pd.read_csv(out.with_name("t3.csv"))
    fedgkd = csv[(csv["label"] == "fedgkd")].set_index(["alpha", "stat"])["variant"]
    assert fedgkd[(0.5, "best")] == "fedgkd-M1" and fedgkd[(1.0, "val_selected")] == "fedgkd-M5"
    assert (csv[csv["label"] == "moon"]["variant"] == "moon").all()


def test_code_in_a_caption_is_typewriter_in_latex_and_code_in_html(tmp_path, grid):
    out = tmp_path / "t3"
    opts = {"columns": ["fedavg"], "caption": "Distils toward `target: uniform` here."}
    render("table3", out, aggregate=grid, options=opts)
    assert r"toward \texttt{target: uniform} here" in read(out, ".tex")
    assert "`" not in read(out, ".tex")
    assert "toward <code>target: uniform</code> here" in read(out, ".html")
    assert "toward `target: uniform` here" in read(out, ".md")
