"""fedkd.pipeline without Snakemake: run paths, the plan of a configuration, its validation, and the
registries the workflow's schema must agree with."""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedkd.pipeline import Plan, validate_config
from fedkd.pipeline.validation import semantic_errors
from fedkd.provenance import PACKAGE_DIR
from fedkd.report.targets import ALIASES, LAYOUTS, get_layout
from fedkd.run_paths import (
    cli_value,
    normalise_path_keys,
    parse_setting,
    run_dir,
    setting_id,
)
from planning_checks import REPO, SCHEMA, errors_of

CONFIGS = [REPO / "config" / f"{n}.yaml" for n in ("config", "paper", "tiny")]
TINY = REPO / "config" / "tiny.yaml"


def read(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def schema() -> dict:
    return yaml.safe_load(SCHEMA.read_text())


# ----------------------------------------------------------------------------- run paths


def test_setting_names_round_trip():
    for spec in [
        dict(partition="dirichlet-equal", alpha=0.1, clients=20, participation=0.2,
             local_epochs=20, rounds=100, eval_local=False),
        dict(partition="dirichlet", alpha=1.0, clients=10, participation=1.0,
             local_epochs=5, rounds=100, eval_local=True),
        dict(partition="shards", shards=2, clients=100, participation=0.1,
             local_epochs=5, rounds=200),
        dict(partition="iid", clients=4, participation=0.5, local_epochs=1, rounds=2),
        dict(partition="iid", clients=4, participation=0.5, local_epochs=1, rounds=2,
             stop_at_acc=0.75),
        dict(partition="dirichlet-equal", alpha=0.005, clients=3, participation=0.35,
             local_epochs=2, rounds=7),
    ]:  # fmt: skip
        spec = normalise_path_keys({"alpha": None, "shards": None, **spec})
        text = setting_id(spec)
        assert "/" not in text and " " not in text
        assert parse_setting(text) == spec
    one = dict(partition="dirichlet-equal", alpha=1, shards=3, clients=10, participation=0.4,
               local_epochs=1, rounds=5)  # fmt: skip
    assert setting_id(normalise_path_keys(one)) == "dirichlet-equal-a1-K10-C0.4-E1-R5", (
        "alpha 1 and 1.0 are one run; shards unused"
    )
    for bad, says in [
        ("dirichlet-equal-a1.0-K10-C0.4-E1-R5", "is not canonical; the run's path is "
         "'dirichlet-equal-a1-K10-C0.4-E1-R5'"),
        ("shards-a0.1-K10-C0.4-E1-R5", "partition 'shards' needs its shards in the name"),
        ("x-K1", "is not a run setting like 'dirichlet-equal-a0.1-K10-C0.2-E1-R10'"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(f"'{bad}'") + ".*" + re.escape(says)):
            parse_setting(bad)


def test_flag_values_read_back_unchanged():
    values = [1e-05, 0.05, 1.0, 3, None, True, "sgd", "yes", "1.0", "dirichlet-equal",
              {"buffer": 5, "lr": 1e-5, "norm": "batch"}, [1, 2e-7], "distilbert-base-uncased"]  # fmt: skip
    for value in values:
        back = yaml.safe_load(cli_value(value))
        assert back == value and type(back) is type(value), (value, cli_value(value))


@pytest.mark.parametrize("configfile", CONFIGS, ids=lambda p: p.stem)
def test_a_run_path_names_exactly_one_run_spec(configfile):
    """Every key that changes a run is in its path: the full spec rebuilt from a path is the spec
    the tables asked for, and two different paths are two different runs."""
    from fedkd.config import RunSpec

    plan = Plan(read(configfile))
    by_hash = {}
    for name, entry in plan.outputs.items():
        for point in plan.grid_points(name):
            for column in (entry.get("columns") or {}).values():
                for variant in plan.column_variants(column, point):
                    wanted = plan.output_point_spec(name, point, variant)
                    for seed in plan.seeds(name):
                        run = run_dir(wanted, variant, seed)
                        _, _, dataset, v, setting, seed_dir = run.split("/")
                        rebuilt = dict(plan.run_spec(dataset, v, setting, seed_dir[len("seed") :]))
                        rebuilt.pop("partition_file", None)
                        assert rebuilt == {**wanted, "seed": seed}, run
                        spec_hash = RunSpec.from_dict(rebuilt).hash()
                        assert by_hash.setdefault(spec_hash, run) == run, (run, by_hash[spec_hash])


def test_default_table3_shares_its_fedgkd_runs_with_table7():
    plan = Plan(read(CONFIGS[0]))
    table3 = dict.fromkeys(run for label, run in plan.target_runs("table3") if label == "fedgkd")
    table7 = {run for _, run in plan.target_runs("table7")}
    assert len(table3) == 3 * 3  # one per alpha and seed
    assert set(table3) <= table7
    assert any("/fedgkd-M1/dirichlet-equal-a0.5-" in r for r in table3), "the best M per alpha"
    assert any("/fedgkd-M5/dirichlet-equal-a0.1-" in r for r in table3)


# ----------------------------------------------------------------------------- the plan


def test_each_input_kind_gets_its_files_and_arguments():
    plan = Plan(read(TINY))
    assert plan.render_inputs("table1") == []
    assert shlex.split(plan.render_args("table1")) == ["traits", "--name", "table1"]
    assert plan.render_inputs("table3") == ["results/aggregate/table3.parquet"]
    assert shlex.split(plan.render_args("table3"))[:3] == ["grid", "--name", "table3"]
    assert plan.render_inputs("partition") == [
        "results/partitions/mnist5k/dirichlet-equal-a1-K10/seed0.parquet",
        "results/partitions/mnist5k/dirichlet-equal-a0.1-K10/seed0.parquet",
    ]
    # the t-SNE figure draws a features file; its run options go to the features step
    assert plan.render_inputs("tsne") == ["results/features/tsne.npz"]
    run = "results/runs/mnist5k/fedavg/dirichlet-equal-a0.1-K10-C0.2-E1-R3/seed0"
    assert shlex.split(plan.features_args("tsne")) == ["--run", run, "--samples", "300"]
    assert "samples" not in plan.render_options("tsne")
    assert set(plan.names(input="aggregate")) == {
        "claims", "table2", "table3", "table5", "table6", "table7", "table9",
        "rounds_to_target", "curves", "forgetting", "fedcad",
    }  # fmt: skip


def test_a_data_root_under_home_reaches_the_jobs_expanded(monkeypatch, tmp_path):
    """`~` is read as a shell reads it (as in $FEDKD_DATA): a job would take it literally, as a
    folder named ~ under its working directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = read(TINY)
    cfg["defaults"]["data_root"] = "~/datasets"
    plan = Plan(cfg)
    args = shlex.split(plan.partition_args("mnist5k", "iid", "10", "0"))
    assert args[args.index("--data-root") + 1] == str(tmp_path / "datasets")
    run = sorted(plan.all_runs())[0]
    dataset, variant, setting, seed = Path(run).relative_to("results/runs").parts
    train = shlex.split(plan.train_args(dataset, variant, setting, seed.removeprefix("seed")))
    assert train[train.index("--data-root") + 1] == cli_value(str(tmp_path / "datasets"))


def test_fedkd_data_moves_the_data_without_changing_a_jobs_flags(monkeypatch, tmp_path):
    """docs/datasets.md: data named by $FEDKD_DATA moves without a re-run, since no job's flags
    (Snakemake's params, which trigger re-runs) hold it; a data_root is a flag of each job."""

    def flags(cfg):
        plan = Plan(cfg)
        dataset, variant, setting, seed = Path(sorted(plan.all_runs())[0]).parts[2:]
        seed = seed.removeprefix("seed")
        return plan.partition_args(dataset, "iid", "10", "0"), plan.train_args(
            dataset, variant, setting, seed
        )

    monkeypatch.delenv("FEDKD_DATA", raising=False)
    before = flags(read(TINY))
    monkeypatch.setenv("FEDKD_DATA", str(tmp_path / "moved"))
    assert flags(read(TINY)) == before and "--data-root" not in " ".join(before)
    cfg = read(TINY)
    cfg["defaults"]["data_root"] = str(tmp_path / "moved")
    assert all("--data-root" in args for args in flags(cfg))


def test_render_options_pass_the_config_through_unchanged():
    cfg = read(TINY)
    plan = Plan(cfg)
    opts = plan.render_options("rounds_to_target")
    # the targets as the config writes them, no round trip through strings
    assert opts["targets"] == cfg["tables"]["rounds_to_target"]["options"]["targets"]
    assert opts["columns"] == ["fedavg", "fedgkd"]
    assert opts["label"] == "tab:rounds_to_target"
    assert opts["caption"] == (
        "Rounds to a target accuracy. Produced by configuration tiny; datasets mnist5k (for "
        "CIFAR-10)."
    )
    stats = plan.render_options("table2")
    assert "columns" not in stats and stats["datasets"] == ["mnist5k"]
    assert stats["row_names"] == {"mnist5k": "mnist5k (for CIFAR-10)"}
    assert plan.caption("table1").endswith("configuration tiny.")  # no runs, no seeds
    assert plan.render_options("partition")["label"] == "fig:partition"


def test_seeds_default_per_layout():
    cfg = read(TINY)
    cfg["seeds"] = [0, 1]
    plan = Plan(cfg)
    assert plan.seeds("table3") == [0, 1]
    assert plan.seeds("table2") == [0] and plan.seeds("tsne") == [0]  # one run suffices
    cfg["tables"]["table3"]["seeds"] = [5]
    assert Plan(cfg).seeds("table3") == [5]


def test_a_code_edit_reaches_exactly_the_outputs_that_depend_on_it():
    plan = Plan(read(TINY))
    # the traits table reads the strategies; the others only the report code
    assert plan.render_code_hash("table1") != plan.render_code_hash("table3")
    assert plan.render_code_hash("table3") == plan.render_code_hash("tsne")
    assert plan.train_code_hash("mnist5k", "fedgkd-M1") == plan.train_code_hash(
        "mnist5k", "fedgkd-M2"
    )
    assert plan.train_code_hash("mnist5k", "fedgkd-M1") != plan.train_code_hash("mnist5k", "fedavg")
    # the loader is the dataset's: each family's reader is a module of its own
    assert plan.train_code_hash("mnist5k", "fedavg") != plan.train_code_hash("synthtext", "fedavg")
    assert plan.partition_code_hash("mnist5k") != plan.partition_code_hash("synthtext")
    assert plan.partition_code_hash("mnist5k") != plan.partition_code_hash("cifar10")
    assert plan.partition_code_hash("mnist5k") == plan.partition_code_hash("mnist")


def render_hashes(package: Path, *names: str) -> list[str]:
    """The render code hashes of tiny.yaml's outputs ``names``, planned from the package at
    ``package`` in a process of its own."""
    code = (
        "import sys, yaml; from fedkd.pipeline import Plan; "
        "plan = Plan(yaml.safe_load(open(sys.argv[1]))); "
        "print(*(plan.render_code_hash(n) for n in sys.argv[2:]))"
    )
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    cmd = [sys.executable, "-c", code, str(TINY), *names]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()


def test_an_edit_of_the_papers_numbers_renders_the_comparisons_again(tmp_path):
    """The comparison with the paper and the claims read the paper's numbers from the package's
    paper_values.yaml: a corrected number must make them again, as a code edit does."""
    package = tmp_path / "fedkd"
    shutil.copytree(PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    names = ("table3", "claims")  # table3's hash is its _vs_paper companion's too
    before = render_hashes(package, *names)
    values = package / "report" / "paper_values.yaml"
    text = values.read_text()
    edited = text.replace("mean: 77.30, std: 0.72", "mean: 80.30, std: 0.72", 1)
    assert edited != text
    values.write_text(edited)
    after = render_hashes(package, *names)
    assert len(before) == len(after) == len(names)
    assert all(a != b for a, b in zip(before, after, strict=True)), (before, after)


def test_a_loader_edit_reaches_the_runs_and_partitions_of_its_datasets_only():
    """The dataset registry imports a loader's module by name, which no static import shows: the
    run's and the partition's code take its dataset's loader module by the registry."""
    from fedkd.provenance import (
        PACKAGE_DIR,
        partition_code_hash,
        run_code_files,
        run_code_hash,
    )

    # each dataset's run takes its own family's reader, no other
    readers = {name: PACKAGE_DIR / "data" / f"{name}.py"
               for name in ("cifar", "mnist", "tinyimagenet", "text")}  # fmt: skip
    for dataset, family in (("agnews", "text"), ("cifar10", "cifar"), ("cifar100", "cifar"),
                            ("mnist5k", "mnist"), ("tinyimagenet", "tinyimagenet")):  # fmt: skip
        files = run_code_files("fedgkd", dataset)
        assert [n for n, f in readers.items() if f in files] == [family], dataset
    assert PACKAGE_DIR / "data" / "partition.py" in run_code_files("fedavg", "mnist5k")
    with pytest.raises(ValueError, match="unknown dataset 'cifar11'"):
        run_code_hash("fedavg", "cifar11")
    assert partition_code_hash("agnews") == partition_code_hash("sst5")


def test_what_fedkd_partition_writes_is_decided_by_code_its_hash_covers(tmp_path):
    """The command draws nothing itself: the file holds draw_partition's result, and that
    function's module is among the files the partition's code hash reads."""
    import inspect

    from fedkd.cli import main
    from fedkd.data.partition import draw_partition, read_partition
    from fedkd.provenance import partition_code_files

    out = tmp_path / "p.parquet"
    flags = ["--dataset", "synthtext", "--scheme", "dirichlet", "--alpha", "0.3"]
    assert main(["partition", *flags, "--clients", "7", "--seed", "4", "--out", str(out)]) == 0
    assignment, _, meta = draw_partition("synthtext", "dirichlet", 7, 4, alpha=0.3)
    written, written_meta = read_partition(out)
    assert np.array_equal(written, assignment)
    assert {k: written_meta[k] for k in meta} == meta
    module = Path(inspect.getsourcefile(draw_partition)).resolve()
    assert module in partition_code_files("synthtext")


def test_the_tsne_features_hash_their_runs_code_and_the_feature_extractor():
    from fedkd.provenance import (
        FEATURES_ENTRY,
        PACKAGE_DIR,
        features_code_hash,
        run_code_files,
        run_code_hash,
    )

    plan = Plan(read(TINY))  # its tsne figure draws a fedavg run on mnist5k
    assert plan.features_code_hash("tsne") == features_code_hash("fedavg", "mnist5k")
    assert plan.features_code_hash("tsne") != features_code_hash("fedgkd", "mnist5k")
    assert plan.features_code_hash("tsne") != run_code_hash("fedavg", "mnist5k")
    files = run_code_files("fedavg", "mnist5k", FEATURES_ENTRY)
    assert FEATURES_ENTRY in files and PACKAGE_DIR / "data" / "text.py" not in files


def test_provenance_finds_every_registered_strategy():
    from fedkd.provenance import strategy_module_files
    from fedkd.strategies import (
        STRATEGIES_DIR,
        external_module_files,
        get_strategy_class,
        strategy_names,
    )

    files = strategy_module_files()
    assert list(files) == strategy_names()
    for name, path in files.items():
        module = get_strategy_class(name).__module__
        if module.startswith("fedkd.strategies."):
            assert path == STRATEGIES_DIR / (module.rsplit(".", 1)[1] + ".py"), name
        else:  # a module of one's own: the file FEDKD_STRATEGY_MODULES names
            assert path in external_module_files(), (name, path)


# ----------------------------------------------------------------------------- validation


def test_the_shipped_configs_are_valid():
    for path in CONFIGS:
        validate_config(read(path), SCHEMA)


def test_a_dirichlet_grid_point_without_alpha_is_reported_once_per_run_by_run_spec_validation():
    cfg = read(TINY)
    cfg["defaults"]["alpha"] = None
    cfg["tables"] = {"table3": cfg["tables"]["table3"]}
    cfg["tables"]["table3"]["grid"] = {"dataset": ["mnist5k"]}
    cfg["figures"] = {}
    text = errors_of(cfg)
    assert text.startswith("the configuration has 2 error(s)")  # one per run, no other check
    problem = "alpha=None must be a number > 0 for partition 'dirichlet-equal'"
    assert f"variant fedavg on mnist5k: {problem}" in text
    assert f"variant fedgkd-M1 on mnist5k: {problem}" in text
    assert "(needed by tables.table3.columns.fedgkd)" in text


def test_layout_errors_name_the_entry_and_the_fix():
    cfg = read(TINY)
    cfg["tables"]["table4"] = copy.deepcopy(cfg["tables"]["table3"])
    del cfg["tables"]["table4"]["layout"]
    cfg["figures"]["curves"]["layout"] = "grid"
    cfg["tables"]["rounds_to_target"]["options"]["targets"] = [{"alpha": 1.0, "accuracy": 0.5}]
    cfg["figures"]["tsne"]["grid"]["alpha"] = [1.0, 0.1]
    cfg["tables"]["table1"]["options"]["strategies"] = ["fedavg", "fedsgd"]
    errors = semantic_errors(cfg)
    assert any("tables.table4.layout: missing" in e and "(layout 'grid'?)" in e for e in errors)
    assert "figures.curves.layout: 'grid' belongs under tables" in errors
    assert (
        "tables.rounds_to_target.options.targets: no target accuracy for alpha 0.1 of the grid"
        in errors
    )
    assert any(e.startswith("figures.tsne: layout tsne draws exactly one run") for e in errors)
    assert "tables.table1.options.strategies: 'fedsgd' is not a registered strategy" in errors


# ----------------------------------------------------------------------------- registries


def test_the_schema_layouts_are_the_registry():
    enum = schema()["$defs"]["target"]["properties"]["layout"]["enum"]
    assert enum == list(LAYOUTS)


def test_every_layout_resolves_and_earlier_names_map_to_it():
    for layout in LAYOUTS.values():
        assert callable(layout.build())
        assert layout.input in ("none", "aggregate", "partitions", "run")
        assert layout.output in ("table", "figure")
    assert get_layout("table7").name == "grid" and get_layout("fig_tsne").name == "tsne"
    assert set(ALIASES) >= {f"table{i}" for i in range(1, 10)}
    with pytest.raises(KeyError, match="unknown layout 'table10'"):
        get_layout("table10")


def test_the_schema_datasets_and_models_are_the_registries():
    from fedkd.config import MODELS
    from fedkd.data import dataset_names
    from fedkd.models import MODELS as BUILT_MODELS

    defs = schema()["$defs"]
    assert defs["dataset"]["enum"] == list(dataset_names())
    assert defs["trainingKeys"]["model"]["enum"] == list(MODELS) == ["auto", *BUILT_MODELS]


def test_render_help_lists_every_layout_and_its_options(capsys):
    from fedkd.cli import main

    with pytest.raises(SystemExit):
        main(["render", "--help"])
    text = capsys.readouterr().out
    for layout in LAYOUTS.values():
        assert f"  {layout.name} [{layout.output}]" in text
