"""What a table or figure asks of its runs is refused at planning, not by its render job after
every run trained: a row, column or panel key that is not a run key, `across` outside `rows`, a
statistic the layout does not take, a round past every run's last, panel titles for another
number of partitions, a FedCAD figure of runs without local evaluation, a stand-in no paper
table knows."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from fedkd.pipeline import validate_config
from fedkd.report.aggregate import ReportError
from planning_checks import REPO, SCHEMA, errors_of, snakemake_dry_run


def small_config(group: str, layout: str, options: dict, **entry) -> dict:
    cfg = yaml.safe_load(
        """
name: mine
seeds: [0]
defaults: {partition: dirichlet-equal, alpha: 0.5, clients: 4, participation: 0.5,
           local_epochs: 1, rounds: 2}
variants: {fedavg: {strategy: fedavg}}
"""
    )
    base = {"layout": layout, "caption": "x", "grid": {"dataset": ["mnist5k"]},
            "columns": {"FedAvg": "fedavg"}, "options": options}  # fmt: skip
    cfg[group] = {"out": {**base, **entry}}
    return cfg


@pytest.mark.parametrize(
    ("group", "layout", "options", "says"),
    [
        ("tables", "grid", {"rows": ["bogus"]}, "option 'rows' of target 'out' names column(s) "
         "['bogus'] that the aggregate does not have; run keys are: label, run, strategy"),
        ("tables", "grid", {"rows": ["dataset"], "across": ["alpha"]}, "option 'across' of target "
         "'out' names ['alpha'], which are not in option 'rows' ['dataset'] (nor 'label')"),
        ("tables", "grid_by_stat", {"rows": ["participation"], "across": ["alpha"]},
         "option 'across' of target 'out' is ['alpha']; give ['label'] or keys of option 'rows'"),
        ("tables", "grid_by_stat", {"rows": ["bogus"]}, "option 'rows' of target 'out' names"),
        ("tables", "at_rounds", {"rows": ["bogus"], "rounds": [1]},
         "option 'rows' of target 'out' names"),
        ("tables", "rounds_to_target",
         {"rows": ["bogus"], "targets": [{"alpha": 0.5, "accuracy": 0.5}]},
         "option 'rows' of target 'out' names"),
        ("figures", "curves", {"panels": ["bogus"]}, "option 'panels' of target 'out' names"),
        ("figures", "forgetting", {"panels": ["bogus"]}, "option 'panels' of target 'out' names"),
        ("figures", "forgetting", {"stat": "val_selected"}, "option 'stat' of target 'out' must "
         "be one of 'best', 'final', got 'val_selected'"),
    ],
)  # fmt: skip
def test_an_option_its_render_job_refuses_is_refused_at_planning(group, layout, options, says):
    message = errors_of(small_config(group, layout, options))
    assert f"{group}.out.options: {says}" in message


def test_the_render_job_refuses_them_with_the_same_words():
    """The planning check is the layout's own: one rule, one message."""
    from fedkd.report.options import Options
    from fedkd.report.tables import grid

    df = pd.DataFrame({"label": ["FedAvg"], "dataset": ["mnist5k"], "alpha": [0.5]})
    with pytest.raises(ReportError, match=r"option 'rows' of target 'out' names column\(s\)"):
        grid.build(df, Options("out", {"rows": ["bogus"]}, ("rows",)))


@pytest.mark.parametrize(
    ("group", "layout", "options", "says"),
    [
        ("tables", "grid", {"column_names": {"FedAvgg": "FedAvg (ours)"}},
         "option 'column_names' of target 'out' names label(s) ['FedAvgg'] that are not among its "
         "columns: FedAvg"),
        ("figures", "curves", {"column_names": {"fedavg": "FedAvg (ours)"}},
         "option 'column_names' of target 'out' names label(s) ['fedavg']"),
        ("tables", "grid", {"order": {"alhpa": [0.5]}},
         "option 'order' of target 'out' names column(s) ['alhpa'] that the aggregate does not "
         "have"),
    ],
)  # fmt: skip
def test_a_misspelt_name_in_a_naming_option_is_refused_at_planning(group, layout, options, says):
    """A column_names label or order key that names nothing of the output was ignored: the
    column kept its own label, the rows their default order, and nothing said so."""
    message = errors_of(small_config(group, layout, options))
    assert f"{group}.out.options: {says}" in message
    options = {"column_names": {"FedAvg": "FedAvg (ours)"}, "order": {"label": ["FedAvg"]}}
    validate_config(small_config(group, layout, options), SCHEMA)


def test_render_refuses_a_misspelt_column_name_with_the_same_words(tmp_path):
    from fedkd.report import render
    from report_runs import agg_file, make_run

    aggregate = agg_file(tmp_path, [("FedAvg", make_run(tmp_path, "a", [0.5, 0.6]))])
    options = {"columns": ["FedAvg"], "column_names": {"FedAvgg": "FedAvg (ours)"}}
    with pytest.raises(ReportError, match=r"names label\(s\) \['FedAvgg'\] that are not among"):
        render("grid", aggregate=aggregate, out=tmp_path / "t", options=options)
    assert not list(tmp_path.glob("t.*"))


def test_a_round_past_every_runs_last_round_is_refused_at_planning():
    """Every cell of that column would show "–": the runs' rounds are known at planning."""
    cfg = small_config("tables", "at_rounds", {"rounds": [1, 100]})
    assert (
        "tables.out.options.rounds: round 100 is past the last round of every run of the table "
        "(2); give rounds up to 2, or runs of more rounds in its grid" in errors_of(cfg)
    )
    # a round some runs of the table reach is kept: the shorter runs show "–" there
    cfg = small_config("tables", "at_rounds", {"rounds": [1, 5]}, grid={
        "dataset": ["mnist5k"], "rounds": [2, 5]})  # fmt: skip
    validate_config(cfg, SCHEMA)


def test_partition_titles_for_another_number_of_partitions_are_refused_at_planning():
    cfg = small_config("figures", "partition", {"titles": ["a", "b"]})
    del cfg["figures"]["out"]["columns"]
    says = "figures.out.options: option 'titles' has 2 entries for 1 partition files"
    assert says in errors_of(cfg)
    cfg["figures"]["out"]["options"]["titles"] = ["a"]
    validate_config(cfg, SCHEMA)


def test_a_fedcad_figure_of_runs_without_local_evaluation_is_refused_at_planning():
    cfg = small_config("figures", "fedcad", {})
    assert (
        "figures.out.grid: layout fedcad draws the clients' local accuracy, which only runs "
        "with eval_local: true record; give its grid eval_local: [true]" in errors_of(cfg)
    )
    cfg["figures"]["out"]["grid"]["eval_local"] = [True]
    validate_config(cfg, SCHEMA)


def test_a_stand_in_no_paper_knows_is_refused_at_planning():
    """`paper:` tables and claims match a stand-in by the paper dataset it names: CIFAR-11
    matched nothing, and every comparison on it was quietly left out."""
    cfg = small_config("tables", "grid", {"rows": ["dataset"]}, paper="fedgkd_table3")
    cfg["stand_ins"] = {"mnist5k": "CIFAR-11"}
    assert (
        "stand_ins.mnist5k: 'CIFAR-11' is not a dataset of the papers; name the one it stands "
        "in for as the papers spell it (CIFAR-10, CIFAR-100, Tiny-ImageNet, AG News, SST-5, "
        "MNIST), several joined by ', ' or ' and '" in errors_of(cfg)
    )
    for text in ("CIFAR-10", "AG News and SST-5", "cifar-10, CIFAR-100"):
        cfg["stand_ins"] = {"mnist5k": text}
        validate_config(cfg, SCHEMA)


def test_a_stand_in_is_spelt_as_both_its_readers_match_it():
    """The companion beside the paper matched "cifar10" to CIFAR-10 and the claims did not: only
    the papers' own spelling (any case) is read alike by both, and only it passes."""
    from fedkd.report.claims.claim import stands_for
    from fedkd.report.tables.vs_paper import stand_in_map

    assert "cifar10" in stand_in_map({"mnist5k": "cifar10"})
    assert not stands_for("mnist5k", "cifar10", {"mnist5k": "cifar10"})
    cfg = small_config("tables", "grid", {"rows": ["dataset"]})
    cfg["stand_ins"] = {"mnist5k": "cifar10"}
    assert "stand_ins.mnist5k: 'cifar10' is not a dataset of the papers" in errors_of(cfg)
    cfg["stand_ins"] = {"mnist5k": "CIFAR-10 and Fashion"}
    assert "stand_ins.mnist5k: 'Fashion' is not a dataset of the papers" in errors_of(cfg)


def test_the_shipped_configurations_pass():
    for name in ("config.yaml", "tiny.yaml", "paper.yaml"):
        cfg = yaml.safe_load((REPO / "config" / name).read_text())
        validate_config(cfg, SCHEMA, check_specs=False)


def test_snakemake_dry_run_refuses_them_before_any_job(tmp_path):
    cfg = small_config("tables", "grid", {"rows": ["bogus"]})
    figure = small_config("figures", "forgetting", {"stat": "val_selected"})["figures"]["out"]
    cfg["figures"] = {"fig": figure}
    proc = snakemake_dry_run(tmp_path, cfg)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "tables.out.options: option 'rows' of target 'out' names column(s) ['bogus']" in out
    assert "figures.fig.options: option 'stat' of target 'fig' must be one of" in out
    assert "Building DAG" not in out


def test_a_forgetting_figure_of_one_round_runs_is_refused_at_planning():
    """Forgetting (fedntd eq. 5) compares the last round with the earlier ones: a run of one
    round has none, and every bar of the figure would be empty."""
    cfg = small_config("figures", "forgetting", {}, grid={"dataset": ["mnist5k"], "rounds": [1]})
    assert (
        "figures.out.grid: layout forgetting compares a run's last round with its earlier ones, "
        "which runs of 1 round do not have; give its grid rounds of at least 2" in errors_of(cfg)
    )
    cfg["figures"]["out"]["grid"]["rounds"] = [2]
    validate_config(cfg, SCHEMA)
