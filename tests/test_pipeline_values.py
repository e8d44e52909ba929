"""fedkd.pipeline without Snakemake: how a configuration's values are typed and checked, and planning at
scale (grids, run counts, the runs files)."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml

from fedkd.pipeline import Plan, validate_config
from fedkd.run_paths import num
from planning_checks import REPO, SCHEMA, errors_of, snakemake_dry_run

TINY = REPO / "config" / "tiny.yaml"


def read(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# ----------------------------------------------------------------------------- typed values
def small_config(**defaults) -> dict:
    """A researcher's small configuration: one table, one variant, Snakemake's YAML 1.1 reading."""
    text = """
name: mine
seeds: [0]
defaults: {partition: dirichlet-equal, alpha: 0.5, clients: 4, participation: 0.5,
           local_epochs: 1, rounds: 2, weight_decay: 1e-4, lr: 5E-3, grad_clip: null}
variants: {fedavg: {strategy: fedavg}, fedprox: {strategy: fedprox, params: {mu: 1e-2}}}
tables:
  table3:
    layout: grid
    caption: x
    grid: {dataset: [mnist5k], alpha: [1e0, .5]}
    columns: {fedavg: fedavg, fedprox: fedprox}
"""
    cfg = yaml.safe_load(text)  # as Snakemake reads it: 1e-4 and 5E-3 are text here
    assert cfg["defaults"]["weight_decay"] == "1e-4"
    cfg["defaults"].update(defaults)
    return cfg


@pytest.mark.parametrize("alpha", [0.1, 1e-5, 1.23456789012345e-05, 1e-16, 2.5e-7, 0.3])
def test_a_path_spells_a_number_that_reads_back_as_the_same_float(alpha):
    """The spec is read back from the run's path: a number cut to 15 decimals there (alpha
    1.23456789012345e-05 became 1.2345678901e-05) trained another run than the config's."""
    text = num(alpha)
    assert "e" not in text and float(text) == alpha


def test_a_config_reads_numbers_in_every_notation_and_passes_null_to_the_runs():
    from fedkd.cli import _spec_from_args, build_parser

    cfg = small_config()
    validate_config(cfg, SCHEMA)
    assert cfg["defaults"]["weight_decay"] == 1e-4 and cfg["defaults"]["lr"] == 0.005
    assert cfg["tables"]["table3"]["grid"]["alpha"] == [1.0, 0.5]
    # a count in exponent notation is the integer Snakemake's resources need
    cfg["resources"] = {"train": {"mem_mb": "4e3", "client_epoch_seconds": "1.5e1"}}
    cfg["tables"]["table3"]["caption"] = "1e5"  # text stays text
    validate_config(cfg, SCHEMA)
    assert cfg["resources"]["train"] == {"mem_mb": 4000, "client_epoch_seconds": 15.0}
    assert type(cfg["resources"]["train"]["mem_mb"]) is int
    assert cfg["tables"]["table3"]["caption"] == "1e5"
    plan = Plan(cfg)
    runs = sorted(plan.target_runs("table3"))
    assert len(runs) == 4
    for _, run in runs:
        dataset, variant, setting, seed = run.split("/")[2:]
        args = plan.train_args(dataset, variant, setting, seed.removeprefix("seed"))
        assert "--grad-clip null" in args
        parsed = build_parser("train").parse_args(["train", "--out", "x", *shlex.split(args)])
        spec = _spec_from_args(parsed)
        # not fedkd train's defaults (1e-5, 0.05): the job's flags carry them
        assert spec.grad_clip is None and spec.weight_decay == 1e-4 and spec.lr == 0.005
        if variant == "fedprox":
            assert spec.params == {"mu": 0.01}


def run_flags(cfg: dict) -> dict[str, tuple[str, str]]:
    """Every run of the configuration → its train flags and stamp (the train rule's parameters:
    a change of either trains the run again)."""
    validate_config(cfg, SCHEMA)
    plan = Plan(cfg)
    keys = [run.split("/")[2:] for run in sorted(plan.all_runs())]
    return {
        "/".join(k): (plan.train_args(*k[:3], k[3][4:]), plan.train_stamp(*k[:3], k[3][4:]))
        for k in keys
    }


def test_another_spelling_of_the_same_numbers_trains_no_run_again():
    """``grad_clip: 10`` and ``10.0``, ``momentum: 0`` and ``0.0``, a strategy's float parameter
    written as an integer, its integer one as an integral float: one run spec each (the same
    spec_hash), so the same flags, or Snakemake trains every finished run again."""
    from fedkd.config import RunSpec

    as_written = small_config(grad_clip=10, momentum=0, weight_decay=0)
    as_written["variants"]["fedprox"]["params"] = {"mu": 1}
    as_written["variants"]["fedgkd"] = {"strategy": "fedgkd", "params": {"buffer": 2.0}}
    as_written["tables"]["table3"]["columns"]["fedgkd"] = "fedgkd"
    respelt = copy.deepcopy(as_written)
    respelt["defaults"].update(grad_clip=10.0, momentum=0.0, weight_decay=0.0)
    respelt["variants"]["fedprox"]["params"] = {"mu": 1.0}
    respelt["variants"]["fedgkd"]["params"] = {"buffer": 2}
    before, after = run_flags(as_written), run_flags(respelt)
    assert len(before) == 6
    assert before == after
    plan = Plan(respelt)
    for run in before:
        dataset, variant, setting, seed = run.split("/")
        spec = plan.run_spec(dataset, variant, setting, seed[4:])
        # the flags hold the numbers as the run spec holds them, type and all
        held = RunSpec.from_dict(dict(spec)).to_dict()
        assert all(repr(spec[k]) == repr(held[k]) for k in spec), (spec, held)


def test_the_cluster_runtime_counts_the_clients_a_round_the_engine_draws():
    from fedkd.runtime.seeding import sample_clients

    cfg = small_config()
    cfg["resources"] = {"train": {"runtime": 1, "client_epoch_seconds": 40}}
    plan = Plan(cfg)
    # C x K = 2.5: the engine trains 3 clients a round (half up), not round()'s 2
    assert len(sample_clients(0, 0, 10, 0.25)) == 3
    setting = "iid-K10-C0.25-E2-R5"
    # 1.5 x 5 rounds x 3 clients x 2 epochs x 40 s = 1,800 s
    assert plan.train_runtime("mnist5k", setting) == 30


def test_the_cluster_runtime_stops_at_max_runtime():
    """A 1,000-round run sized by client_epoch_seconds asked SLURM for weeks, which clusters
    refuse; max_runtime caps the request (the run resumes from its checkpoint when resubmitted)."""
    cfg = small_config()
    cfg["resources"] = {"train": {"runtime": 1, "client_epoch_seconds": 40, "max_runtime": 20}}
    cfg["resources"]["train_datasets"] = {"cifar10": {"max_runtime": 45}}
    validate_config(cfg, SCHEMA)
    plan = Plan(cfg)
    assert plan.train_runtime("mnist5k", "iid-K10-C0.25-E2-R5") == 20  # 30 needed
    assert plan.train_runtime("mnist5k", "iid-K10-C0.25-E2-R1") == 6  # under the cap: as needed
    assert plan.train_runtime("cifar10", "iid-K10-C0.25-E2-R5") == 30  # its own cap is above
    cfg["resources"]["train"]["max_runtime"] = 0
    assert "resources.train.max_runtime: 0 is less than the minimum of 1" in errors_of(cfg)
    cfg["resources"] = {"render": {"max_runtime": 20}}  # a CPU job's runtime is its own
    assert "resources.render: 'max_runtime' was unexpected" in errors_of(cfg)


def test_a_resource_its_rule_would_ignore_is_refused():
    """Partition, aggregate and render jobs run one thread on a CPU: threads or a GPU for them
    were accepted and never asked for."""
    for rule, key in (("partition", "threads"), ("render", "gpu"),
                      ("aggregate", "client_epoch_seconds")):  # fmt: skip
        cfg = small_config()
        cfg["resources"] = {rule: {key: 2}}
        assert (
            f"resources.{rule}: '{key}' was unexpected; the keys here are: mem_mb, runtime"
            in errors_of(cfg)
        )
    cfg = small_config()
    cfg["resources"] = {"train_datasets": {"mnist5k": {"threads": 2, "gpu": 0}}}
    validate_config(cfg, SCHEMA)


def test_a_typo_in_a_small_config_is_one_error_with_the_key_it_resembles():
    cfg = small_config()
    cfg["defaults"]["clinets"] = cfg["defaults"].pop("clients")
    text = errors_of(cfg)
    assert text == (
        "the configuration has 1 error(s):\n"
        "  - defaults: 'clinets' was unexpected; did you mean 'clients'?"
    )
    # a misspelt required key: the misspelling, not also the missing key
    cfg = small_config()
    cfg["variant"] = cfg.pop("variants")
    text = errors_of(cfg)
    assert "(top level): 'variant' was unexpected; did you mean 'variants'?" in text
    assert "required" not in text
    # a key nothing resembles lists the keys there
    cfg = small_config()
    cfg["tables"]["table3"]["grid"]["zzz"] = [1]
    assert "tables.table3.grid: 'zzz' was unexpected; the keys here are: dataset, partition" in (
        errors_of(cfg)
    )


def test_defaults_may_leave_out_path_keys_which_then_take_fedkd_trains_defaults():
    from fedkd.config import RunSpec

    cfg = small_config()
    del cfg["defaults"]["rounds"], cfg["defaults"]["local_epochs"]
    validate_config(cfg, SCHEMA)
    assert cfg["defaults"]["rounds"] == RunSpec().rounds
    assert cfg["defaults"]["local_epochs"] == RunSpec().local_epochs


def test_a_client_count_the_data_cannot_serve_is_caught_with_the_training_limit():
    text = errors_of(small_config(clients=100000))
    assert "clients=100000" in text and "use at most 56 clients" in text  # 3,600 / 64
    assert "at most 3600" not in text


def test_the_known_training_set_sizes_are_the_loaders():
    from fedkd.data import load_dataset
    from fedkd.pipeline.capacity import train_size

    for name, options in (("mnist5k", {}), ("synthtext", {}), ("synthtext", {"num_docs": 1003})):
        assert train_size(name, options) == len(load_dataset(name, seed=0, **options).train)


def test_the_known_class_counts_are_the_loaders():
    from fedkd.data import load_dataset
    from fedkd.pipeline.capacity import class_count

    for name, options in (("mnist5k", {}), ("synthtext", {}), ("synthtext", {"num_classes": 7})):
        data = load_dataset(name, seed=0, **options)
        assert class_count(name, options) == data.num_classes == len(set(data.train.y.tolist()))


def test_shards_that_cannot_be_cut_from_the_classes_are_refused_at_planning():
    """Each class is cut into clients x shards / classes one-class shards
    (fedkd.data.partition), so the product must be a multiple of the classes: 4 clients x 3
    shards on mnist5k's 10 classes is refused before any job, naming the counts that fit."""

    def shards_config(shards: int) -> dict:
        cfg = small_config(partition="shards", alpha=None, shards=shards)
        cfg["tables"]["table3"]["grid"] = {"dataset": ["mnist5k"]}
        return cfg

    text = errors_of(shards_config(3))
    assert "mnist5k: scheme 'shards' cuts each of the 10 classes" in text
    assert "clients x shards = 4 x 3 = 12 must be a multiple of 10" in text
    assert "with 4 clients use a multiple of 5 shards per client" in text
    validate_config(shards_config(5), SCHEMA)  # 4 x 5 = 20 shards: two of each class


def test_true_is_not_a_client_count_and_seeds_fit_64_bits():
    assert "defaults.clients: True is not of type 'integer'" in errors_of(
        small_config(clients=True)
    )
    cfg = small_config()
    cfg["seeds"] = [2**63]
    assert "seeds[0]: 9223372036854775808 is greater than the maximum" in errors_of(cfg)
    text = errors_of(small_config(rounds=1e12))
    assert "rounds=1000000000000 is more than 100,000" in text


def test_an_alias_bomb_in_model_options_is_refused_before_it_is_walked():
    import time

    bomb = "\n".join(
        ["defaults:", "  model_options:", "    a: &a [x, x, x, x, x, x, x, x, x]"]
        + [
            f"    {c}: &{c} [{', '.join([f'*{p}'] * 9)}]"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ]
    )
    cfg = small_config()
    cfg["defaults"]["model_options"] = yaml.safe_load(bomb)["defaults"]["model_options"]
    t0 = time.perf_counter()
    text = errors_of(cfg)
    assert "the configuration is refused: the configuration expands to more than 100,000" in text
    assert time.perf_counter() - t0 < 5
    # a smaller one, within the whole configuration's bound, still over model_options' own
    cfg = small_config()
    cfg["defaults"]["model_options"] = yaml.safe_load("\n".join(bomb.split("\n")[:6]))["defaults"][
        "model_options"
    ]
    assert "defaults.model_options expands to more than 1,000 values" in errors_of(cfg)


def test_a_wrong_target_lists_the_valid_ones_as_snakemake_resolves_it(tmp_path):
    """Snakemake's own target resolution refuses a table the configuration does not define: the
    render rules admit only its names, and rule unknown_output, matching the rest, names the
    closest and every valid one before any job is planned."""
    proc = snakemake_dry_run(tmp_path, TINY, "results/tables/table33.tex")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (
        "no rule makes 'results/tables/table33.tex'; did you mean results/tables/table3.tex?" in out
    )
    assert "for NAME in: " in out and "table3" in out and "results/figures/NAME.pdf" in out
    assert "Job stats" not in out, "refused before any job is planned"


def test_the_refusing_rule_matches_exactly_what_no_render_rule_makes():
    """unknown_output's wildcard: every file the render rules make is left to them (Snakemake
    asks each matching rule for its inputs, so a match would raise for a valid target), any other
    name in results/tables/ or results/figures/ is refused."""
    import re

    from fedkd.pipeline.snakefile import made_files, unknown_output_regex

    plan = Plan(read(TINY))
    pattern = re.compile(unknown_output_regex(plan))
    made = made_files(plan)
    assert {"table3.tex", "table3.html", "table3_vs_paper.csv", "curves.png"} <= set(made)
    assert not [f for f in made if pattern.fullmatch(f)]
    for wrong in ("table33.tex", "table3.pdf", "curves.tex", "table3.tex.bak", "tsne.html"):
        assert pattern.fullmatch(wrong), wrong
    assert re.compile(unknown_output_regex(Plan({"tables": {}, "figures": {}}))).fullmatch("x")


def test_the_target_message_names_every_output():
    from fedkd.pipeline.validation import unknown_targets_message

    plan = Plan(read(TINY))
    text = unknown_targets_message(["results/figures/curvs.png", "table3"], plan)
    assert text.startswith("no rule makes 'results/figures/curvs.png'; did you mean")
    assert "no rule makes 'table3'; did you mean results/tables/table3.tex?" in text
    for name in plan.names(output="table"):
        assert name in text
    for name in plan.names(output="figure"):
        assert name in text


def test_a_number_where_text_is_expected_says_how_to_quote_it():
    """`snakemake --config name=2024` reaches the configuration as the number 2024: the error
    says how to write it as text, in YAML and on the command line."""
    cfg = small_config()
    cfg["name"] = 2024
    assert errors_of(cfg) == (
        "the configuration has 1 error(s):\n"
        "  - name: 2024 is not of type 'string' (to mean the text 2024, quote it: '2024' in YAML, "
        "--config KEY='\"2024\"' on the command line)"
    )


# ----------------------------------------------------------------------------- planning at scale
def test_grid_points_keep_order_and_join_grids_once_each():
    from fedkd.pipeline.grid import grid_points, grid_size

    entry = {
        "grid": [
            {"dataset": ["mnist5k"], "alpha": [0.1, 1], "clients": [10, 20]},
            {"dataset": ["mnist5k"], "alpha": [1.0, 0.5], "clients": [10]},  # 1.0 is 1
        ]
    }
    points = grid_points(entry)
    assert [(p["alpha"], p["clients"]) for p in points] == [
        (0.1, 10), (0.1, 20), (1, 10), (1, 20), (0.5, 10),
    ]  # fmt: skip
    assert grid_size(entry) == 6  # counted before duplicates are dropped


def test_a_grid_over_the_limit_is_refused_at_once_with_the_count():
    """Four keys of 1,000 values: 10^12 runs, refused from the grid's lengths alone (expanding
    it would never end), by validation and by any plan of it (`fedkd status`)."""
    from fedkd.pipeline.grid import MAX_PLANNED_RUNS, PlanTooLarge

    cfg = small_config()
    cfg["tables"]["table3"]["grid"] = {
        "dataset": ["mnist5k"],
        "alpha": [round(0.001 * (i + 1), 3) for i in range(1000)],
        "clients": list(range(1, 1001)),
        "participation": [round(0.001 * (i + 1), 3) for i in range(1000)],
        "rounds": list(range(1, 1001)),
    }
    message = errors_of(copy.deepcopy(cfg))
    assert (
        "the tables and figures ask for 2,000,000,000,000 runs (grid points x columns x seeds), "
        f"more than the {MAX_PLANNED_RUNS:,} fedkd plans in one configuration" in message
    )
    with pytest.raises(PlanTooLarge, match="2,000,000,000,000 runs"):
        Plan(cfg).target_runs("table3")


def test_fedkd_status_refuses_a_grid_over_the_limit_with_the_count(tmp_path):
    from fedkd.tools.status import StatusError, planned_runs

    cfg = small_config()
    cfg["tables"]["table3"]["grid"]["clients"] = list(range(1, 1001))
    cfg["tables"]["table3"]["grid"]["rounds"] = list(range(1, 1001))
    configfile = tmp_path / "sweep.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    with pytest.raises(StatusError, match="ask for 4,000,000 runs"):
        planned_runs(configfile, tmp_path / "results" / "runs")


def test_the_run_count_counts_columns_best_of_sweeps_and_seeds():
    from fedkd.pipeline.grid import planned_run_count

    cfg = small_config()
    cfg["seeds"] = [0, 1, 2]
    assert planned_run_count(cfg) == 2 * 2 * 3  # alphas x columns x seeds
    cfg["tables"]["table3"]["columns"]["best"] = {"best_of": ["fedavg", "fedprox"]}
    cfg["tables"]["table3"]["seeds"] = [0]
    assert planned_run_count(cfg) == 2 * 4 * 1


def test_the_aggregate_reads_its_runs_from_a_file_that_gives_back_the_plans_runs(tmp_path):
    """Labels with "=" (M=3) split where they should, though no run exists yet; no run reaches
    the job's command line."""
    from fedkd.report.run_list import read_runs_file

    plan = Plan(read(TINY))
    for name in plan.names(input="aggregate"):
        path = tmp_path / f"{name}.runs"
        path.write_text(plan.runs_list(name))
        assert read_runs_file(path) == list(plan.target_runs(name)), name
    assert any("=" in label for label, _ in plan.target_runs("table7"))
    assert plan.runs_list_digest("table3") != plan.runs_list_digest("table6")
    rule = (REPO / "workflow" / "rules" / "aggregate.smk").read_text()
    assert "--runs-file {input.runs:q}" in rule and "params.runs" not in rule


def test_a_runs_file_line_with_a_tab_and_no_label_is_named(tmp_path):
    from fedkd.report import ReportError
    from fedkd.report.run_list import read_runs_file

    path = tmp_path / "t.runs"
    path.write_text("M=1\tresults/runs/a/b/c/seed0\n\tresults/runs/a/b/c/seed1\n")
    with pytest.raises(
        ReportError, match=r"line 2: '\\tresults/runs/a/b/c/seed1' is not LABEL<TAB>"
    ):
        read_runs_file(path)
    path.write_text("M=1\tresults/runs/a/b/c/seed0\n")
    assert read_runs_file(path) == [("M=1", "results/runs/a/b/c/seed0")]
