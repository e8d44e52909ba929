"""A column ``absent`` from some settings of its table, as FedDF's Table 1 runs FedProx, FedAvgM
and FedDF at 20 and 40 local epochs only: no run is planned there, the cell reads "absent", and
a claim compares the column only where it has cells; a setting that acts nowhere or everywhere
is refused at planning."""

from __future__ import annotations

import pandas as pd
import pytest

from claim_runs import config, make_run, render_claims
from fedkd.pipeline import validate_config
from fedkd.pipeline.config_file import ConfigError
from fedkd.pipeline.plan import Plan
from fedkd.report import aggregate_runs, render, write_aggregate
from fedkd.report.aggregate import ReportError
from fedkd.report.text import DASH
from planning_checks import SCHEMA, errors_of, small_config

TARGETS = [{"alpha": 1.0, "accuracy": 0.8}, {"alpha": 0.1, "accuracy": 0.8}]


def with_absent(absent: list[dict]) -> dict:
    cfg = small_config()
    cfg["tables"]["table3"]["columns"]["FedProx"] = {"variant": "fedprox", "absent": absent}
    return cfg


def test_no_run_is_planned_where_a_column_is_absent():
    cfg = with_absent([{"alpha": 0.1}])
    validate_config(cfg, SCHEMA)
    plan = Plan(cfg)
    runs = plan.target_runs("table3")
    where = {(label, "-a0.1-" in run) for label, run in runs}
    assert where == {("FedAvg", False), ("FedAvg", True), ("FedProx", False)}
    assert plan.render_options("table3")["absent"] == {"FedProx": [{"alpha": 0.1}]}
    # the caption says what an empty cell is; a comparison drawn from the table has none
    note = "An empty cell is one the configuration does not run (FedProx at α = 0.1)."
    assert note in plan.render_options("table3")["caption"]
    assert "empty cell" not in plan.caption("table3", "another output's caption")
    # a best_of column takes it too: none of its variants runs there
    cfg["tables"]["table3"]["columns"]["FedProx"] = {
        "best_of": ["fedavg", "fedprox"], "absent": [{"alpha": 0.5}],
    }  # fmt: skip
    validate_config(cfg, SCHEMA)
    runs = Plan(cfg).target_runs("table3")
    assert sorted(r for lab, r in runs if lab == "FedProx" and "-a0.5-" in r) == []
    assert len([r for lab, r in runs if lab == "FedProx" and "-a0.1-" in r]) == 2


def test_an_absent_setting_that_acts_nowhere_or_everywhere_is_refused():
    errors = errors_of(with_absent([{"alpha": 0.2}]))
    assert "tables.table3.columns.FedProx.absent[0]: {alpha: 0.2} matches no grid point" in errors
    assert "(this one's: alpha 0.5, 0.1)" in errors and "should have no cell at" in errors
    # covering the whole grid leaves the column without a cell
    errors = errors_of(with_absent([{"alpha": 0.5}, {"dataset": "mnist5k", "alpha": 0.1}]))
    assert "tables.table3.columns.FedProx.absent: the column is absent from every grid" in errors


def test_absent_is_refused_where_the_layout_shows_every_column_and_in_options():
    cfg = small_config()
    cfg["figures"] = {"curves": {"layout": "curves", "caption": "x", "grid": {
        "dataset": ["mnist5k"], "alpha": [0.5, 0.1]}, "columns": {
        "FedProx": {"variant": "fedprox", "absent": [{"alpha": 0.1}]}}}}  # fmt: skip
    errors = errors_of(cfg)
    assert "figures.curves.columns.FedProx.absent: layout curves shows every column" in errors
    assert "goes in layouts grid, grid_by_stat, at_rounds, rounds_to_target" in errors
    # written as an option it would plan the runs and call their cells absent
    cfg = small_config()
    cfg["tables"]["table3"]["options"] = {"absent": {"FedProx": [{"alpha": 0.1}]}, "rowz": []}
    errors = errors_of(cfg)
    assert "tables.table3.options: absent come(s) from the columns" in errors
    # and, in the same listing, the entry's other unknown option
    assert "tables.table3.options: layout grid has no option(s) rowz;" in errors


def _rounds_runs(root) -> list[tuple[str, str]]:
    """FedAvg at alpha 1 and 0.1, FedDF at alpha 1 only (six seeds); FedDF reaches 80% at round
    2, FedAvg at round 3 or 4."""
    runs = []
    for seed in range(6):
        for alpha in (1.0, 0.1):
            accs = [0.5, 0.7, 0.75, 0.8] if seed % 2 else [0.5, 0.7, 0.8, 0.81]
            d = make_run(root, f"avg-{alpha}-{seed}", accs, alpha=alpha, seed=seed)
            runs.append(("rounds_to_target/fedavg", d))
        accs = [0.5, 0.8 + seed / 100, 0.85, 0.86]
        d = make_run(root, f"df-{seed}", accs, strategy="feddf", alpha=1.0, seed=seed)
        runs.append(("rounds_to_target/feddf", d))
    return runs


def test_an_absent_cell_is_named_so_and_a_missing_one_stays_missing(tmp_path):
    runs = [(label.split("/")[1], d) for label, d in _rounds_runs(tmp_path / "runs")]
    agg = tmp_path / "agg.parquet"
    write_aggregate(aggregate_runs(runs), agg)

    out = tmp_path / "out" / "rounds_to_target"

    def statuses(options):
        render("rounds_to_target", out, aggregate=agg, options={"targets": TARGETS, **options})
        df = pd.read_csv(out.with_name("rounds_to_target.csv"))
        return {(r.alpha, r.label): r.status for r in df.itertuples()}

    def alpha_01_line():
        text = out.with_name("rounds_to_target.md").read_text()
        return next(line for line in text.splitlines() if line.startswith("| 0.1 |"))

    assert statuses({})[(0.1, "feddf")] == "missing"
    assert alpha_01_line().rstrip().endswith(f"| {DASH} |")
    absent = {"absent": {"feddf": [{"alpha": 0.1}]}}
    assert statuses(absent)[(0.1, "feddf")] == "absent"
    assert statuses(absent)[(1.0, "feddf")] == "ok" == statuses(absent)[(0.1, "fedavg")]
    # left empty, as the paper's table leaves it
    assert alpha_01_line().rstrip().endswith("|  |")


def test_a_claim_compares_a_column_only_where_it_has_cells(tmp_path):
    """FedDF's "fewer rounds than FedAvg" at alpha 1 only: with FedDF absent at alpha 0.1 there
    is no row of that setting; without it, the setting is "not run" (FedDF's runs to come)."""
    runs = _rounds_runs(tmp_path / "runs")
    source = {"paper": "feddf_table1", "layout": "rounds_to_target",
              "options": {"targets": TARGETS}, "best_of": {}}  # fmt: skip

    def rows(absent, where):
        src = {"rounds_to_target": {**source, "absent": absent}}
        df = render_claims(where, runs, src)
        return df[df["claim"] == "feddf-fewer-rounds-than-fedavg"]

    # FedDF needs 1 or 2 rounds fewer on each of six seeds at alpha 1: that setting holds, and
    # the claim ("in all scenarios") waits for the alpha 0.1 setting unless it has no FedDF cell
    without = rows({}, tmp_path / "a")
    assert sorted(without["verdict"]) == ["holds", "not run"]
    assert set(without["claim_verdict"]) == {"not run"}
    kept = rows({"feddf": [{"alpha": 0.1}]}, tmp_path / "b")
    assert len(kept) == 1 and "α=1," in kept["setting"].iloc[0]
    assert kept["verdict"].iloc[0] == "holds" == kept["claim_verdict"].iloc[0]


def _tiny_claim(change: dict) -> dict:
    """tiny's table3 with FedGKD absent at alpha 0.1, and a claim of FedGKD against FedAvg."""
    cfg = config("tiny")
    cfg["claims"] = [{"statement": "FedGKD beats FedAvg.", "tables": "table3",
                      "treatment": "fedgkd", "baseline": "fedavg", **change}]  # fmt: skip
    cfg["tables"]["table3"]["columns"] = {
        "fedavg": "fedavg", "fedgkd": {"variant": "fedgkd-M1", "absent": [{"alpha": 0.1}]},
    }  # fmt: skip
    return cfg


def test_a_claim_only_where_a_column_of_its_pair_is_absent_is_refused():
    """The claims compare no setting where either column is absent: a where or a trend that only
    such settings meet could only say "not run", after every run is trained."""
    validate_config(_tiny_claim({"where": {"alpha": [1.0]}}), SCHEMA, check_specs=False)
    with pytest.raises(ConfigError) as refused:
        validate_config(_tiny_claim({"where": {"alpha": [0.1]}}), SCHEMA, check_specs=False)
    assert (
        "where {alpha: [0.1]} selects no setting of 'table3', whose runs of both fedgkd and "
        "fedavg (absent from some) have alpha 1.0; give values they have" in str(refused.value)
    )
    with pytest.raises(ConfigError) as refused:
        trend = {"trend": {"key": "alpha", "toward": "low"}}
        validate_config(_tiny_claim(trend), SCHEMA, check_specs=False)
    assert (
        "trend along alpha compares two of its values, and the runs of both fedgkd and fedavg "
        "(absent from some) of 'table3' have alpha 1.0 only" in str(refused.value)
    )
    # each claim of an each_of entry is checked: here the second column's
    cfg = _tiny_claim({"where": {"alpha": [0.1]}, "treatment": {"each_of": ["fedavg", "fedgkd"]},
                       "baseline": "fedprox"})  # fmt: skip
    cfg["tables"]["table3"]["columns"]["fedprox"] = "fedprox"
    cfg["variants"].setdefault("fedprox", {"strategy": "fedprox"})
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    assert "runs of both fedgkd and fedprox (absent from some) have alpha 1.0" in str(refused.value)
    # each column absent where the other has its cells: no setting to compare at all
    cfg = _tiny_claim({})
    cfg["tables"]["table3"]["columns"]["fedavg"] = {"variant": "fedavg", "absent": [{"alpha": 1.0}]}
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    assert "the runs of both fedgkd and fedavg (absent from some) of 'table3' share no setting" in (
        str(refused.value)
    )


def test_a_column_absent_by_a_key_the_rows_do_not_show_has_absent_cells(tmp_path):
    """Grid points told apart by alpha also differ in C (a list of grids): FedProx absent at
    C = 0.25 has no run at alpha 0.1, and its cell there is absent, though C is no row key."""
    cfg = small_config()
    cfg["tables"]["table3"]["grid"] = [
        {"dataset": ["mnist5k"], "alpha": [0.5]},
        {"dataset": ["mnist5k"], "alpha": [0.1], "participation": [0.25]},
    ]
    cfg["tables"]["table3"]["columns"]["FedProx"] = {
        "variant": "fedprox", "absent": [{"participation": 0.25}],
    }  # fmt: skip
    validate_config(cfg, SCHEMA)
    planned = {(lab, "-a0.1-" in run) for lab, run in Plan(cfg).target_runs("table3")}
    assert planned == {("FedAvg", False), ("FedAvg", True), ("FedProx", False)}
    root, runs = tmp_path / "runs", []
    for seed in range(2):
        for alpha, c in ((0.5, 0.5), (0.1, 0.25)):
            d = make_run(root, f"avg-{alpha}-{seed}", [0.5, 0.6], alpha=alpha, seed=seed,
                         participation=c)  # fmt: skip
            runs.append(("FedAvg", d))
        d = make_run(root, f"prox-{seed}", [0.5, 0.7], strategy="fedprox", alpha=0.5, seed=seed,
                     participation=0.5)  # fmt: skip
        runs.append(("FedProx", d))
    agg = tmp_path / "agg.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    out = tmp_path / "out" / "table3"
    options = Plan(cfg).render_options("table3")
    render("grid", out, aggregate=agg, options={**options, "rows": ["dataset", "alpha"]})
    df = pd.read_csv(out.with_name("table3.csv"))
    status = {(r.alpha, r.label): r.status for r in df[df["stat"] == "best"].itertuples()}
    assert status == {(0.5, "FedAvg"): "ok", (0.5, "FedProx"): "ok", (0.1, "FedAvg"): "ok",
                      (0.1, "FedProx"): "absent"}  # fmt: skip


def test_a_column_absent_by_its_rounds_has_no_claim_row_there(tmp_path):
    """``rounds`` (the grid's name) is the aggregate's rounds_planned: FedDF absent at alpha 0.1
    and 4 rounds leaves the claims no such setting to wait for."""
    runs = _rounds_runs(tmp_path / "runs")
    source = {"paper": "feddf_table1", "layout": "rounds_to_target",
              "options": {"targets": TARGETS}, "best_of": {}}  # fmt: skip
    # FedAvg's runs at alpha 0.1 are those of 4 rounds; FedDF has none there
    src = {"rounds_to_target": {**source, "absent": {"feddf": [{"alpha": 0.1, "rounds": 4}]}}}
    df = render_claims(tmp_path / "a", runs, src)
    kept = df[df["claim"] == "feddf-fewer-rounds-than-fedavg"]
    assert len(kept) == 1 and "α=1," in kept["setting"].iloc[0]
    assert kept["verdict"].iloc[0] == "holds" == kept["claim_verdict"].iloc[0]


@pytest.mark.parametrize(
    ("absent", "message"),
    [
        ({"feddf": [{"alpah": 0.1}]},
         "option 'absent' of target 'rounds_to_target': feddf's setting {'alpah': 0.1} names "
         "'alpah', not a run key; the keys are: dataset, partition, alpha"),
        ({"feddf": [{"alpha": [0.1]}]},
         "feddf's setting {'alpha': [0.1]} gives 'alpha' the value [0.1]; give one value (a "
         "number, text or true/false)"),
        ({"fedddf": [{"alpha": 0.1}]},
         "option 'absent' of target 'rounds_to_target' names label(s) ['fedddf'] that are not "
         "among its columns: fedavg, feddf"),
    ],
)  # fmt: skip
def test_an_absent_option_that_could_name_no_cell_is_refused(tmp_path, absent, message):
    """By hand (fedkd render --options), a misspelt key or label, or a list for a value, matched
    no cell: the cells read missing without a word."""
    runs = [(label.split("/")[1], d) for label, d in _rounds_runs(tmp_path / "runs")]
    agg = tmp_path / "agg.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    out = tmp_path / "out" / "rounds_to_target"
    with pytest.raises(ReportError) as refused:
        render("rounds_to_target", out, aggregate=agg,
               options={"targets": TARGETS, "absent": absent})  # fmt: skip
    assert message in str(refused.value)


def test_a_case_only_where_its_column_is_absent_is_refused():
    cfg = with_absent([{"alpha": 0.1}])
    cfg["variants"]["fedprox-mu1"] = {"strategy": "fedprox"}
    column = cfg["tables"]["table3"]["columns"]["FedProx"]
    column["cases"] = [{"alpha": 0.1, "variant": "fedprox-mu1"}]
    assert (
        "tables.table3.columns.FedProx.cases[0] matches only grid points where the column is "
        "absent, so it picks no variant" in errors_of(cfg)
    )
    column["cases"] = [{"alpha": 0.5, "variant": "fedprox-mu1"}]
    validate_config(cfg, SCHEMA)
