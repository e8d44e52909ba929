"""The report's comparison with the papers: validation-selected accuracy, best-of-sweep columns,
the FedDF-recipe runs that stop at the target and Table 5's orientation (the tables beside the
papers: test_vs_paper)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.pipeline import ConfigError, Plan, validate_config
from fedkd.report import render
from fedkd.report.aggregate import ReportError
from fedkd.run_paths import parse_run_dir, parse_setting, setting_id
from report_runs import agg_file, make_run

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def add_val(run: Path, val: list[float]) -> Path:
    """Give a fake run per-round validation accuracy."""
    m = pd.read_parquet(run / "metrics.parquet")
    m["val_acc"] = val
    m["val_loss"] = [1 - v for v in val]
    m.to_parquet(run / "metrics.parquet", index=False)
    return run


def csv_of(out: Path) -> pd.DataFrame:
    return pd.read_csv(out.with_suffix(".csv"))


# ------------------------------------------------------------------ model selection on validation
def test_grid_adds_the_test_accuracy_at_the_round_best_on_validation(tmp_path):
    r = tmp_path / "runs"
    # test accuracy peaks in round 2 (0.8); validation peaks in round 3, where test is 0.6
    run = add_val(make_run(r, "a", [0.5, 0.8, 0.6], alpha=0.1), [0.5, 0.6, 0.7])
    agg = agg_file(tmp_path, [("fedavg", run)])
    assert "val_acc" in pd.read_parquet(agg).columns
    out = tmp_path / "t3"
    render("grid", out, aggregate=agg, options={"columns": ["fedavg"]})
    csv = csv_of(out).set_index("stat")
    assert csv.loc["best", "mean"] == pytest.approx(80.0)
    assert csv.loc["val_selected", "mean"] == pytest.approx(60.0)
    md = out.with_name("t3.md").read_text()
    assert "best on validation" in md and "model selection without the test set" in md
    render("grid", out, aggregate=agg, options={"columns": ["fedavg"], "val_selected": False})
    assert set(csv_of(out)["stat"]) == {"best"}


def test_table5_follows_the_paper_a_row_per_method_a_column_group_per_c(tmp_path):
    r = tmp_path / "runs"
    runs = []
    for c in (0.1, 0.2):
        runs.append(("fedavg", make_run(r, f"a{c}", [0.5, 0.6], participation=c)))
        runs.append(("fedgkd", make_run(r, f"g{c}", [0.6, 0.7], participation=c)))
    out = tmp_path / "t5"
    render("grid_by_stat", out, aggregate=agg_file(tmp_path, runs), options={"stats": ["best"]})
    md = out.with_name("t5.md").read_text().splitlines()
    header = next(line for line in md if line.startswith("| Method"))
    assert header.count("Best") == 2  # one column per C
    body = [line for line in md if line.startswith("| ") and "Method" not in line]
    assert len(body) == 2  # one row per method, as the paper's Table 5
    tex = out.with_name("t5.tex").read_text()
    assert "$C$=0.1" in tex and "$C$=0.2" in tex


# ------------------------------------------------------------------ best of a sweep
@pytest.fixture
def sweep(tmp_path):
    """fedgen at two settings, three coefficients. Every run peaks on the test set in round 2 and
    on validation in round 3. coef0.1 is best on the test set everywhere (its peak, and its test
    accuracy at the round best on validation), so a choice that read the test set would take it;
    on validation, coef1 and coef10 tie at alpha 1 (list order: coef1) and coef10 wins at 0.1."""
    r = tmp_path / "runs"
    runs = []
    best_val = {
        (1.0, "c0.1"): 0.5, (1.0, "c1"): 0.8, (1.0, "c10"): 0.8,
        (0.1, "c0.1"): 0.2, (0.1, "c1"): 0.3, (0.1, "c10"): 0.6,
    }  # fmt: skip
    test_then = {"c0.1": 0.7, "c1": 0.6, "c10": 0.5}  # test accuracy in round 3
    for alpha in (1.0, 0.1):
        for v, peak in (("c0.1", 0.95), ("c1", 0.9), ("c10", 0.85)):
            for seed in (0, 1):
                d = make_run(r, f"{v}-{alpha}-{seed}", [0.1, peak, test_then[v]],
                             alpha=alpha, seed=seed, strategy="fedgen", variant=f"fedgen-{v}",
                             params={"coef": v})  # fmt: skip
                runs.append(("fedgen", add_val(d, [0.0, 0.1, best_val[(alpha, v)]])))
    return agg_file(tmp_path, runs)


BEST_OF = {"fedgen": ["fedgen-c0.1", "fedgen-c1", "fedgen-c10"]}


def test_best_of_picks_the_variant_best_on_validation_and_marks_it(tmp_path, sweep):
    out = tmp_path / "t"
    render("grid", out, aggregate=sweep, options={"columns": ["fedgen"], "best_of": BEST_OF,
                                                   "rows": ["alpha"]})  # fmt: skip
    csv = csv_of(out)
    chosen = csv[csv["stat"] == "best"].set_index("alpha")["variant"].to_dict()
    assert chosen == {1.0: "fedgen-c1", 0.1: "fedgen-c10"}
    by = csv.set_index(["alpha", "stat"])["mean"]
    assert by[(0.1, "best")] == pytest.approx(85.0) and by[(0.1, "val_selected")] == 50.0
    md = out.with_name("t.md").read_text()
    assert "<sup>b</sup>" in md and "<sup>c</sup>" in md and "c: fedgen-c10" in md
    assert "$^{b}$" in out.with_name("t.tex").read_text()


def test_best_of_chooses_on_validation_when_a_candidate_diverged(tmp_path):
    """A variant that diverged lacks no validation accuracy: it is passed over, and the others
    are still ranked on validation, not on the test set (g2 is best on test, g1 on validation)."""
    r = tmp_path / "runs"
    runs = []
    for seed in (0, 1):
        for v, test, val, status in (
            ("g1", [0.5, 0.6], [0.8, 0.9], "complete"),
            ("g2", [0.5, 0.8], [0.5, 0.6], "complete"),
            ("g3", [0.4, 0.5], [0.4, 0.5], "diverged" if seed == 1 else "complete"),
        ):
            d = make_run(r, f"{v}-{seed}", test, seed=seed, strategy="fedgen", variant=v,
                         params={"c": v}, status=status)  # fmt: skip
            runs.append(("fedgen", add_val(d, val)))
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": ["fedgen"], "best_of": {"fedgen": ["g1", "g2", "g3"]}})  # fmt: skip
    best = csv_of(out).set_index("stat").loc["best"]
    assert (best["variant"], best["mean"]) == ("g1", pytest.approx(60.0))


def test_best_of_falls_back_to_the_table_statistic_without_validation(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedgen", make_run(r, v, [acc], strategy="fedgen", variant=v, params={"c": v}))
        for v, acc in (("g1", 0.4), ("g2", 0.7))
    ]
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": ["fedgen"], "best_of": {"fedgen": ["g1", "g2"]}})  # fmt: skip
    assert set(csv_of(out)["variant"]) == {"g2"}


def test_rounds_to_target_tunes_by_fewest_rounds(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", add_val(make_run(r, "lr1", [0.5, 0.9], alpha=1.0, variant="lr1"), [0.9, 0.1])),
        ("fedavg", add_val(make_run(r, "lr2", [0.85, 0.9], alpha=1.0, variant="lr2"), [0.1, 0.1])),
    ]
    out = tmp_path / "t"
    opts = {"targets": {"1.0": 0.8}, "best_of": {"fedavg": ["lr1", "lr2"]}}
    render("rounds_to_target", out, aggregate=agg_file(tmp_path, runs), options=opts)
    row = csv_of(out).iloc[0]
    assert (row["variant"], row["mean"]) == ("lr2", 1.0)


def test_vs_paper_tunes_rounds_to_target_as_its_table_does(tmp_path):
    """Beside FedDF's Table 1, a tuned column shows the variant its own table shows: the one
    needing the fewest rounds (lr0.1: round 3), not the one best on validation (lr0.01, which
    needs 8), and the values are headed as rounds."""
    r = tmp_path / "runs"
    fast = [0.5, 0.7, 0.81, 0.82, 0.82, 0.82, 0.82, 0.82]
    slow = [0.5, 0.6, 0.65, 0.7, 0.74, 0.77, 0.79, 0.85]
    runs = []
    for seed in range(3):
        for name, curve in (("t1-fedavg-lr0.1", fast), ("t1-fedavg-lr0.01", slow)):
            d = make_run(r, f"{name}-{seed}", curve, seed=seed, alpha=1.0, variant=name)
            runs.append(("fedavg", add_val(d, curve)))
    opts = {"paper": "feddf_table1", "best_of": {"fedavg": ["t1-fedavg-lr0.1", "t1-fedavg-lr0.01"]}}
    out = tmp_path / "t1_vs_paper"
    render("vs_paper", out, aggregate=agg_file(tmp_path, runs), options=opts)
    rounds = csv_of(out).query("unit == 'rounds'")
    assert len(rounds) == 1 and rounds.iloc[0]["mean"] == 3.0
    md = out.with_name(out.name + ".md").read_text()
    assert "Rounds to target" in md and "Accuracy (%)" not in md


def test_vs_paper_counts_a_stand_ins_rounds_to_its_tables_target(tmp_path):
    """On a stand-in, FedDF Table 1's 80% at alpha 1 is answered by the table's own target there
    (90%, scaled to the stand-in), which the row names; without the table's targets, by 80%."""
    r = tmp_path / "runs"
    curves = {"fedavg": [0.5, 0.7, 0.8, 0.85, 0.88, 0.9], "feddf": [0.6, 0.8, 0.85, 0.9, 0.9, 0.9]}
    runs = [(label, make_run(r, f"{label}{s}", curve, dataset="mnist5k", alpha=1.0, seed=s,
                             strategy=label))
            for s in range(2) for label, curve in curves.items()]  # fmt: skip
    aggregate = agg_file(tmp_path, runs)
    opts = {"paper": "feddf_table1", "stand_ins": {"mnist5k": "CIFAR-10"}, "caption": "T."}
    scaled = tmp_path / "scaled"
    targets = [{"alpha": 1.0, "accuracy": 0.9}, {"alpha": 0.1, "accuracy": 0.8}]
    render("vs_paper", scaled, aggregate=aggregate, options={**opts, "targets": targets})
    by = csv_of(scaled).set_index("method")
    assert list(by.loc[["fedavg", "feddf"], "mean"]) == [6.0, 4.0]
    assert set(by["target_accuracy"]) == {0.8} and set(by["target_here"]) == {0.9}
    md = scaled.with_name(scaled.name + ".md").read_text()
    assert "rounds to 80% (run on mnist5k, to its 90%) | FedAvg |" in md
    literal = tmp_path / "literal"
    render("vs_paper", literal, aggregate=aggregate, options=opts)
    assert list(csv_of(literal).set_index("method").loc[["fedavg", "feddf"], "mean"]) == [3.0, 2.0]
    # the default configuration's table hands its targets to its companion
    plan = Plan(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    assert plan.vs_paper_options("rounds_to_target")["targets"][0] == {
        "alpha": 1.0,
        "accuracy": 0.9,
    }


def test_best_of_option_and_config_errors(tmp_path, sweep):
    with pytest.raises(ReportError, match="two or more distinct"):
        render("grid", tmp_path / "t", aggregate=sweep,
               options={"best_of": {"fedgen": ["only-one"]}})  # fmt: skip
    with pytest.raises(ReportError, match="does not list"):
        render("grid", tmp_path / "t", aggregate=sweep,
               options={"best_of": {"fedgen": ["fedgen-c0.1", "fedgen-c1"]}})  # fmt: skip
    # a JSON round trip: YAML aliases would share one columns mapping between entries
    cfg = json.loads(json.dumps(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())))
    cfg["tables"]["table3"]["columns"]["fedavg"] = {"best_of": ["fedavg", "nope"]}
    cfg["figures"]["curves"]["columns"]["fedavg"] = {"best_of": ["fedavg", "fedgkd-M1"]}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, check_specs=False)
    assert "tables.table3.columns.fedavg: variant 'nope' is not defined" in str(err.value)
    assert "figures.curves.columns.fedavg: layout curves cannot show the best of" in str(err.value)


def test_best_of_column_needs_every_listed_variants_runs():
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    plan = Plan(cfg)
    variants = {r.split("/")[3] for label, r in plan.target_runs("table3") if label == "fedgen"}
    assert variants == {"fedgen-coef0.1", "fedgen-coef1", "fedgen-coef10"}
    assert plan.render_options("table3")["best_of"]["fedgen"] == sorted(variants)


# ------------------------------------------------------------------ FedDF's recipe, stop at target
def test_rounds_to_target_runs_stop_at_their_alphas_target_and_use_feddf_recipe():
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    plan = Plan(cfg)
    runs = [r for _, r in plan.target_runs("rounds_to_target")]
    # the table asks 80% of alpha 1 and 75% of alpha 0.1: a run past its own target trains
    # rounds that cannot change its row
    settings = [parse_setting(parse_run_dir(r)["setting"]) for r in runs]
    stops = {(s["alpha"], s["stop_at_acc"]) for s in settings}
    assert stops == {(1.0, 0.8), (0.1, 0.75)}
    # FedDF's grids (6 learning rates at 1, 20 and 40 local epochs; 4 mu, 4 beta, FedDF at 20
    # and 40, FedDF's Table 1 having no 1-epoch cell of theirs) and FedGKD on the same recipe
    assert len(runs) == 2 * 3 * (3 * 6 + 2 * (4 + 4 + 1 + 1)) * 3
    one_epoch = {r.split("/")[3] for r in runs if "-E1-" in r}
    assert one_epoch == {f"t1-fedavg-lr{lr}" for lr in ("1.5", "1", "0.5", "0.1", "0.05", "0.01")}
    dataset, variant, setting, seed = next(r for r in runs if "-a1-" in r).split("/")[2:]
    spec = plan.run_spec(dataset, variant, setting, seed.removeprefix("seed"))
    assert spec["stop_at_acc"] == 0.8 and spec["momentum"] == 0.0 and spec["weight_decay"] == 0.0
    assert "--stop-at-acc 0.8" in plan.train_args(dataset, variant, setting, seed[4:])
    # other tables' runs carry no stop (their flags, and so their finished runs, are unchanged)
    table3 = plan.target_runs("table3")[0][1].split("/")
    assert "stop" not in table3[4]
    assert "stop-at-acc" not in plan.train_args(table3[2], table3[3], table3[4], "0")


def test_stop_at_acc_is_part_of_the_run_path():
    spec = {"partition": "iid", "clients": 10, "participation": 0.2, "local_epochs": 1,
            "rounds": 8, "stop_at_acc": 0.9}  # fmt: skip
    text = setting_id(spec)
    assert text == "iid-K10-C0.2-E1-R8-stop0.9"
    assert parse_setting(text)["stop_at_acc"] == 0.9
    assert "stop_at_acc" not in parse_setting("iid-K10-C0.2-E1-R8")


# ------------------------------------------------------------------ captions
def test_feddistill_captions_say_which_target():
    plan = Plan(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    assert "effectively distilled toward uniform outputs" in plan.caption("table3")
    assert "target: uniform" in plan.caption("table4")
    assert "uniform" not in plan.caption("table7")  # no FedDistill+ column
