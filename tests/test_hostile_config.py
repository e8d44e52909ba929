"""Hostile and mistaken configuration values end at planning in one message naming the value,
never in a traceback of the workflow or of a job after the runs trained."""

from __future__ import annotations

import math

import pytest

from fedkd.pipeline import validate_config
from planning_checks import SCHEMA, errors_of, small_config


# ----------------------------------------------------------------------------- NaN and infinity
def rounds_to_target(accuracy: float) -> dict:
    cfg = small_config()
    cfg["tables"]["rtt"] = {
        "layout": "rounds_to_target", "caption": "x",
        "grid": {"dataset": ["mnist5k"], "alpha": [0.5]}, "columns": {"FedAvg": "fedavg"},
        "options": {"targets": [{"alpha": 0.5, "accuracy": accuracy}]},
    }  # fmt: skip
    return cfg


def with_claim(**fields) -> dict:
    cfg = small_config()
    claim = {"statement": "x", "tables": "table3", "treatment": "FedProx", "baseline": "FedAvg"}
    cfg["claims"] = [{**claim, **fields}]
    cfg["tables"]["claims"] = {"layout": "claims", "caption": "x"}
    return cfg


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_nan_and_infinity_are_refused_by_the_keys_no_run_spec_holds(bad):
    """JSON schema comparisons are false for NaN, so `exclusiveMinimum: 0` let .nan through:
    client_epoch_seconds then failed Snakemake's planning of every train job with "cannot
    convert float NaN to integer", a NaN target accuracy with a ReportError traceback, and an
    infinite margin made a non-inferiority claim hold whatever the runs."""
    cfg = small_config()
    cfg["resources"]["train"]["client_epoch_seconds"] = bad
    where = "resources.train.client_epoch_seconds"
    assert f"{where}: {bad} must be a finite number" in errors_of(cfg)
    message = errors_of(rounds_to_target(bad))
    assert f"tables.rtt.options.targets[0].accuracy: {bad} must be a finite number" in message
    message = errors_of(with_claim(test="non-inferiority", margin=bad))
    assert f"claims[0].margin: {bad} must be a finite number" in message
    message = errors_of(with_claim(where={"alpha": [bad]}))
    assert f"claims[0].where.alpha[0]: {bad} must be a finite number" in message


def test_finite_values_of_those_keys_pass():
    cfg = rounds_to_target(0.5)
    cfg["resources"]["train"]["client_epoch_seconds"] = 2.5
    validate_config(cfg, SCHEMA)
    validate_config(with_claim(test="non-inferiority", margin=1.0, where={"alpha": [0.1]}), SCHEMA)


# ----------------------------------------------------------------------------- dataset_options
def on_dataset(dataset: str, options: dict) -> dict:
    cfg = small_config()
    cfg["tables"]["table3"]["grid"]["dataset"] = ["mnist5k", dataset]
    cfg["datasets"] = {dataset: {"dataset_options": options}}
    return cfg


@pytest.mark.parametrize(
    ("dataset", "options", "says"),
    [
        ("synthtext", {"num_docs": None}, "num_docs=None must be an integer"),
        ("synthtext", {"num_classes": "abc"}, "num_classes='abc' must be an integer"),
        ("synthtext", {"num_classes": [4]}, "num_classes=[4] must be an integer"),
        ("synthtext", {"num_classes": 2.5}, "num_classes=2.5 must be an integer"),
        ("synthtext", {"num_docs": True}, "num_docs=True must be an integer"),
        ("synthtext", {"topic_rate": "high"}, "topic_rate='high' must be a number"),
        ("agnews", {"train_size": "all"}, "train_size='all' must be an integer, or null"),
        ("agnews", {"max_len": [64]}, "max_len=[64] must be an integer"),
        ("agnews", {"tokenizer": 5}, "tokenizer=5 must be text"),
        ("cifar10", {"check_md5": "no"}, "check_md5='no' must be true or false"),
    ],
)
def test_a_dataset_option_of_the_wrong_type_is_named_at_planning(dataset, options, says):
    """Values were checked by the loader only, in the train job: text or null for a count
    crashed the planning itself (int() in the training-set size) or the job with a TypeError or
    IndexError traceback."""
    message = errors_of(on_dataset(dataset, options))
    assert f"datasets.{dataset}.dataset_options.{says} (dataset {dataset!r}" in message
    assert "Traceback" not in message


def test_dataset_options_of_their_types_pass():
    validate_config(
        on_dataset("synthtext", {"num_docs": 400, "topic_rate": 1, "seq_len": 16}), SCHEMA
    )
    validate_config(on_dataset("agnews", {"train_size": None, "tokenizer": "word"}), SCHEMA)


# each out of its loader's range (tests/test_data_check.py holds the ranges to the loaders)
OUT_OF_RANGE = [
    ("synthtext", {"num_classes": 1}, "num_classes=1 must be at least 2"),
    ("synthtext", {"seq_len": 7}, "seq_len=7 must be at least 8"),
    ("synthtext", {"num_docs": 39}, "num_docs=39 must be at least 40: 10 per class of 4"),
    ("synthtext", {"topic_words": 0}, "topic_words=0 must be at least 1"),
    ("synthtext", {"vocab": 159}, "vocab=159 is too small for 4 topics of 40 words; use vocab >= 160"),
    ("synthtext", {"topic_rate": 1.5}, "topic_rate=1.5 must lie in [0, 1]"),
    ("synthtext", {"corpus_seed": -1}, "corpus_seed=-1 must be at least 0"),
    ("agnews", {"max_len": 1}, "max_len=1 must be at least 2"),
    ("agnews", {"train_size": 0}, "train_size=0 must be at least 1, or null"),
    ("sst5", {"tokenizer": "word", "max_vocab": 3}, "max_vocab=3 must be at least 4"),
    ("sst5", {"max_vocab": 5000}, "max_vocab=5000 is read by tokenizer 'word' only"),
]  # fmt: skip


@pytest.mark.parametrize(("dataset", "options", "says"), OUT_OF_RANGE)
def test_a_dataset_option_out_of_its_range_is_named_at_planning(dataset, options, says):
    """Ranges were the loader's alone, checked once the train job ran (or, for topic_words and
    corpus_seed, not at all: numpy's "a must be a positive integer" then ended the job; a
    topic_rate of 1.5 and a max_vocab the tokenizer never reads trained silently)."""
    message = errors_of(on_dataset(dataset, options))
    assert f"datasets.{dataset}.dataset_options.{says}" in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    ("options", "says"),
    [("{corpus_seed: -1}", "dataset_options.corpus_seed=-1 must be at least 0"),
     ("{num_classes: abc}", "dataset_options.num_classes='abc' must be an integer")],
    ids=["out-of-range", "wrong-type"],
)  # fmt: skip
def test_fedkd_train_names_a_bad_dataset_option_before_any_output(options, says, tmp_path, capsys):
    from fedkd.cli import main

    out = tmp_path / "run"
    argv = ["train", "--dataset", "synthtext", "--dataset-options", options]
    assert main([*argv, "--rounds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{says} (dataset 'synthtext'" in err
    assert "Traceback" not in err
    assert not out.exists()


# ----------------------------------------------------------------------------- grids
@pytest.mark.parametrize(
    ("partition", "grid", "same"),
    [
        (
            "iid",
            {"alpha": [0.5, 0.1]},
            "{dataset: mnist5k, alpha: 0.5} and {dataset: mnist5k, alpha: 0.1}",
        ),
        (
            "shards",
            {"shards": [2], "alpha": [0.5, 0.1]},
            "{dataset: mnist5k, shards: 2, alpha: 0.5} and {dataset: mnist5k, shards: 2, alpha: 0.1}",
        ),
        (
            "dirichlet",
            {"alpha": [0.5], "shards": [2, 5]},
            "{dataset: mnist5k, alpha: 0.5, shards: 2} and {dataset: mnist5k, alpha: 0.5, shards: 5}",
        ),
    ],
)
def test_grid_points_that_are_the_same_runs_are_refused_at_planning(partition, grid, same):
    """A key the partition does not use (alpha for iid) spells no run of its own, so such a
    grid listed each run twice: the aggregate job refused "run ... is given twice under label"
    once every run had trained."""
    cfg = small_config()
    cfg["defaults"]["partition"] = partition
    cfg["tables"]["table3"]["grid"] = {"dataset": ["mnist5k"], **grid}
    message = errors_of(cfg)
    assert f"tables.table3.grid: the points {same} are the same runs" in message
    assert "a list of grids" in message


def test_a_point_spelling_the_default_is_the_same_run_as_one_leaving_it_out():
    cfg = small_config()
    cfg["tables"]["table3"]["grid"] = [
        {"dataset": ["mnist5k"]},
        {"dataset": ["mnist5k"], "alpha": [0.5, 0.1]},
    ]
    assert (
        "tables.table3.grid: the points {dataset: mnist5k} and {dataset: mnist5k, alpha: 0.5} are the same runs"
        in errors_of(cfg)
    )


def test_a_list_of_grids_one_per_partition_passes():
    cfg = small_config()
    cfg["tables"]["table3"]["grid"] = [
        {"dataset": ["mnist5k"], "partition": ["iid"]},
        {"dataset": ["mnist5k"], "partition": ["dirichlet"], "alpha": [0.5, 0.1]},
        {"dataset": ["mnist5k"], "partition": ["shards"], "shards": [5, 10]},
    ]
    validate_config(cfg, SCHEMA)


# ----------------------------------------------------------------------------- render options
def with_options(group: str, layout: str, options: dict) -> dict:
    cfg = small_config()
    entry = {"layout": layout, "caption": "x", "grid": {"dataset": ["mnist5k"], "alpha": [0.5]},
             "columns": {"FedAvg": "fedavg"}, "options": options}  # fmt: skip
    cfg.setdefault(group, {})["out"] = entry
    return cfg


@pytest.mark.parametrize(
    ("group", "layout", "option", "value"),
    [
        ("tables", "grid", "decimals", "two"),
        ("tables", "grid", "decimals", 7),
        ("tables", "grid", "ddof", 2),
        ("tables", "grid", "highlight", "no"),
        ("tables", "grid", "order", ["alpha"]),
        ("tables", "grid", "column_names", {"FedAvg": 3}),
        ("tables", "grid", "rows", []),
        ("tables", "grid", "rows", ["alpha", "alpha"]),
        ("figures", "curves", "ncols", 0),
        ("figures", "curves", "panels", []),
        ("figures", "tsne", "perplexity", "x"),
        ("figures", "tsne", "samples", 5),
        ("figures", "tsne", "client", -1),
        ("figures", "tsne", "device", "gpu"),
        ("figures", "tsne", "local_objective", "mse"),
    ],
)
def test_a_render_or_features_option_of_the_wrong_value_is_refused_at_planning(
    group, layout, option, value
):
    """The render and features jobs read these values only after every run had trained:
    `decimals: two` failed `fedkd render` at the end of the build."""
    message = errors_of(with_options(group, layout, {option: value}))
    assert f"{group}.out.options.{option}" in message


def test_render_and_features_options_of_their_types_pass():
    grid = {"decimals": 1, "ddof": 1, "highlight": False, "order": {"alpha": [0.5]},
            "column_names": {"FedAvg": "A"}, "rows": ["alpha"]}  # fmt: skip
    validate_config(with_options("tables", "grid", grid), SCHEMA)
    validate_config(with_options("figures", "curves", {"ncols": 2, "panels": ["alpha"]}), SCHEMA)
    tsne = {"perplexity": 5, "samples": 100, "client": 1, "device": "cpu",
            "local_objective": "fedavg"}  # fmt: skip
    validate_config(with_options("figures", "tsne", tsne), SCHEMA)
