"""Everything a job would refuse is refused at planning: column labels and data_root that a
job's argument parser takes for flags, empty ones, control characters, names longer than a file
name, a caption too long for a command line, dataset_options a loader does not take; and a label
is matched as written (" fedavg " is refused, not stripped into an empty column)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedkd.echo import shown
from fedkd.pipeline import ConfigError, validate_config
from planning_checks import REPO, SCHEMA, errors_of, small_config, snakemake_dry_run


def with_label(label: str) -> dict:
    cfg = small_config()
    cfg["tables"]["table3"]["columns"] = {label: "fedavg", "FedProx": "fedprox"}
    return cfg


@pytest.mark.parametrize(
    ("label", "says"),
    [
        (" fedavg ", "has spaces around it; labels are matched as written"),
        ("", "is empty"),
        ("-fedavg", "starts with '-', which a job reads as a flag"),
        ("#fedavg", "starts with '#'"),
        ("fed\navg", "holds a control character"),
        ("fedavg\n", "has spaces around it"),
        ("x" * 101, "is 101 characters long; keep a label to 100"),
    ],
)
def test_a_column_label_a_job_would_refuse_is_refused_at_planning(label, says):
    message = errors_of(with_label(label))
    # quoted as repr quotes it, a label over 80 characters cut with its length said
    assert f"tables.table3.columns: the label {shown(label)} {says}" in message


def test_a_misspelt_variant_is_refused_with_the_closest_defined_one():
    cfg = small_config()
    cfg["variants"]["fedgkd-M1"] = {"strategy": "fedgkd", "params": {"buffer": 1}}
    cfg["tables"]["table3"]["columns"] = {"fedgkd": "fedgkd-M11", "other": "no-such-thing"}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, check_specs=False)
    assert (
        "tables.table3.columns.fedgkd: variant 'fedgkd-M11' is not defined under variants; "
        "did you mean 'fedgkd-M1'?" in str(err.value)
    )
    assert "variant 'no-such-thing' is not defined under variants\n" in f"{err.value}\n"


def test_the_shipped_labels_pass():
    validate_config(with_label("FedGKD (M=3, KL)"), SCHEMA)
    validate_config(with_label("alpha_0=0.1"), SCHEMA)


@pytest.mark.parametrize(
    "name",
    ["fedavg\n", "-fedavg", "", "fed avg", "x" * 201],
    ids=["trailing-newline", "dash", "empty", "space", "long"],
)
def test_a_variant_name_is_refused_whole(name):
    """The name pattern ends at the end of the text (\\Z): Python's $ let "fedavg\\n" through."""
    cfg = small_config()
    cfg["variants"][name] = {"strategy": "fedavg"}
    cfg["tables"]["table3"]["columns"]["Other"] = name
    assert f"{name!r}" in errors_of(cfg)


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("-data", "starts with '-', which a job reads as a flag; write it as ./-data"),
        ("", "is empty"),
        ("data\n", "holds a control character"),
        ("/data/" + "d" * 256, "has a folder name over 255 bytes"),
    ],
)
def test_a_data_root_a_job_would_refuse_is_refused_at_planning(root, says):
    cfg = small_config()
    cfg["defaults"]["data_root"] = root
    assert f"defaults.data_root: {root[:80]!r} {says}" in errors_of(cfg)
    cfg = small_config()
    cfg["datasets"] = {"mnist5k": {"data_root": root}}
    assert f"datasets.mnist5k.data_root: {root[:80]!r} {says}" in errors_of(cfg)


def test_nul_in_a_label_or_a_data_root_is_refused_and_elsewhere_escaped():
    """A label or data_root reaches a job as it is, and no argument holds NUL; other text reaches
    jobs JSON- or YAML-escaped (captions, options) or only the report (the description)."""
    assert "holds a control character" in errors_of(with_label("fed\0avg"))
    cfg = small_config()
    cfg["defaults"]["data_root"] = "da\0ta"
    assert "defaults.data_root: 'da\\x00ta' holds a control character" in errors_of(cfg)
    cfg = small_config()
    cfg["description"] = "before\0after"
    cfg["tables"]["table3"]["caption"] = "a\0b"
    validate_config(cfg, SCHEMA)


def test_a_caption_too_long_for_a_command_line_is_refused():
    cfg = small_config()
    cfg["tables"]["table3"]["caption"] = "word " * 30_000
    assert "tables.table3.caption" in errors_of(cfg)


def test_render_options_too_large_for_one_argument_are_refused():
    cfg = small_config()
    cfg["tables"]["table3"]["options"] = {"row_names": {f"r{i}": "n" * 100 for i in range(1000)}}
    message = errors_of(cfg)
    assert "tables.table3: its render options (caption, names, titles) come to" in message
    assert "more than the 65,536 a job's command line takes" in message


def test_an_option_its_layout_does_not_take_is_refused_at_planning():
    """A misspelt option, or one a layout does not take (grid's decimals on a traits table),
    was found by the render job, after every run of the table had trained."""
    from fedkd.report.aggregate import ReportError
    from fedkd.report.options import Options
    from fedkd.report.targets import LAYOUTS

    cfg = small_config()
    cfg["tables"]["table3"]["options"] = {"rowz": ["dataset"], "decimals": 1}
    assert (
        "tables.table3.options: layout grid has no option(s) rowz; its options are: across, "
        "caption, column_names, columns, ddof, decimals, highlight, label, order, row_names, "
        "rows, stat, val_selected" in errors_of(cfg)
    )
    # best_of and absent are written under columns (refused under options), so not offered here
    cfg["tables"]["table3"]["options"] = {"best_of": {"FedProx": ["fedavg", "fedprox"]}}
    assert "tables.table3.options: best_of come(s) from the columns; write it under" in (
        errors_of(cfg)
    )
    cfg = small_config()
    cfg["tables"]["table1"] = {"layout": "traits", "caption": "x",
                               "options": {"strategies": ["fedavg"], "decimals": 2}}  # fmt: skip
    message = errors_of(cfg)
    assert (
        "tables.table1.options: layout traits has no option(s) decimals; its options are: "
        "caption, label, names, strategies" in message
    )
    # the job's own refusal, which planning now spares the runs
    with pytest.raises(ReportError, match=r"unknown option\(s\) \['decimals'\] for target"):
        Options("table1", {"strategies": ["fedavg"], "decimals": 2}, LAYOUTS["traits"].options)


def test_an_unknown_dataset_option_is_refused_at_planning():
    cfg = small_config()
    cfg["datasets"] = {"mnist5k": {"dataset_options": {"max_len": 10}}}
    assert (
        "datasets.mnist5k.dataset_options: dataset 'mnist5k' has no option(s) max_len; its "
        "options are: none" in errors_of(cfg)
    )
    cfg = small_config()
    cfg["tables"]["table3"]["grid"]["dataset"] = ["synthtext"]
    cfg["defaults"]["dataset_options"] = {"num_docs": 400, "seq_lenn": 8}
    assert "dataset 'synthtext' has no option(s) seq_lenn; its options are: num_classes" in (
        errors_of(cfg)
    )


@pytest.mark.parametrize(
    ("layout", "key", "value", "drawn_from"),
    [
        ("traits", "grid", {"dataset": ["mnist5k"], "alpha": [0.1]}, "the strategy registry"),
        ("traits", "columns", {"FedAvg": "fedavg"}, "the strategy registry"),
        ("traits", "seeds", [0], "the strategy registry"),
        ("partition", "columns", {"FedProx": "fedprox"}, "its grid's partition files"),
    ],
)
def test_a_key_a_layout_does_not_read_is_refused_at_planning(layout, key, value, drawn_from):
    """A traits table's grid and columns, or a partition figure's columns, planned runs that
    trained and that no output showed."""
    cfg = small_config()
    entry = {"layout": layout, "caption": "x", key: value}
    if layout == "traits":
        entry["options"] = {"strategies": ["fedavg"]}
    else:
        entry["grid"] = {"dataset": ["mnist5k"]}
    group = "tables" if layout == "traits" else "figures"
    cfg.setdefault(group, {})["out"] = entry
    where = f"{group}.out"
    assert (
        f"{where}.{key}: layout {layout} takes no {key}; it is drawn from {drawn_from}"
    ) in errors_of(cfg)


def with_stop_and_target(stop: float, target: float) -> dict:
    cfg = small_config()
    cfg["defaults"]["stop_at_acc"] = stop
    cfg["tables"]["rounds_to_target"] = {
        "caption": "x", "grid": {"dataset": ["mnist5k"]}, "columns": {"FedAvg": "fedavg"},
        "options": {"targets": [{"alpha": 0.5, "accuracy": target}]},
    }  # fmt: skip
    return cfg


def test_two_targets_for_one_alpha_are_refused_by_their_table_with_the_other_errors():
    """They ended the check in the render job's own ReportError, naming no table and hiding
    every other error of the configuration."""
    cfg = with_stop_and_target(0.9, 0.8)
    cfg["tables"]["rounds_to_target"]["options"]["targets"].append({"alpha": 0.5, "accuracy": 0.6})
    cfg["variants"]["fedprox"]["params"] = {"muu": 0.1}
    message = errors_of(cfg)
    assert (
        "tables.rounds_to_target.options.targets: alpha 0.5 is given two targets (0.8 and 0.6); "
        "keep one"
    ) in message
    assert "params.muu is not a parameter of strategy 'fedprox'" in message


def test_a_column_case_that_matches_no_grid_point_is_refused_at_planning():
    """A case picks a column's variant where its keys match a grid point: one that matches none
    of the configuration's (alpha 0.05 for 0.5) left every cell on the default variant without
    a word."""
    cfg = small_config()
    fedprox = {"variant": "fedprox", "cases": [{"alpha": 0.1, "variant": "fedavg"},
                                              {"alpha": 0.05, "variant": "fedavg"}]}  # fmt: skip
    cfg["tables"]["table3"]["columns"]["FedProx"] = fedprox
    message = errors_of(cfg)
    assert (
        "tables.table3.columns.FedProx.cases[1]: {alpha: 0.05} matches no grid point of any "
        "table or figure (this one's: alpha 0.5, 0.1); give the values of a point it should "
        "pick its variant at"
    ) in message, message
    assert "cases[0]" not in message
    del fedprox["cases"][1]
    validate_config(cfg, SCHEMA)
    # a column shared with a table over other points may hold a case for those
    cfg["tables"]["table5"] = {**cfg["tables"]["table3"], "grid": {"dataset": ["mnist5k"]}}
    validate_config(cfg, SCHEMA)


def test_a_stop_below_a_rounds_to_target_tables_target_is_refused_at_planning():
    """Its runs took the configuration's stop_at_acc over the table's target: they stopped at
    0.3, and the table could never show a run reaching 0.8."""
    message = errors_of(with_stop_and_target(0.3, 0.8))
    assert (
        "tables.rounds_to_target: its runs on mnist5k stop at stop_at_acc=0.3 (defaults or "
        "datasets.mnist5k), below the target accuracy 0.8 for alpha 0.5; remove stop_at_acc or "
        "raise it to at least 0.8"
    ) in message


def test_a_stop_at_or_above_the_target_passes():
    validate_config(with_stop_and_target(0.8, 0.8), SCHEMA)
    validate_config(with_stop_and_target(0.9, 0.8), SCHEMA)


def test_snakemake_dry_run_refuses_them_before_any_job(tmp_path):
    """`snakemake -n` lists every such value at once, and plans no job."""
    cfg = small_config()
    cfg["tables"]["table3"]["columns"] = {" fedavg ": "fedavg", "-x": "fedprox"}
    cfg["defaults"]["data_root"] = "-data"
    cfg["datasets"] = {"mnist5k": {"dataset_options": {"tokenizer": "word"}}}
    proc = snakemake_dry_run(tmp_path, cfg)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "the label ' fedavg ' has spaces around it" in out
    assert "the label '-x' starts with '-'" in out
    assert "defaults.data_root: '-data' starts with '-'" in out
    assert "dataset 'mnist5k' has no option(s) tokenizer" in out
    assert "Building DAG" not in out


def test_the_precheck_refuses_a_huge_configuration_before_snakemake_reads_it(tmp_path):
    """Snakemake parses --configfile before the workflow's own check: a 50 MB file kept it busy
    for minutes. `python -m fedkd.pipeline.precheck` refuses it first, naming it, and starts no
    Snakemake; a good command line is handed on to Snakemake unchanged."""
    big = tmp_path / "big.yaml"
    big.write_text('name: "' + "x" * 2_000_000 + '"\n')
    workdir = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "fedkd.pipeline.precheck", "-n", "--cores", "1"]
    cmd += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    proc = subprocess.run(
        [*cmd, "--configfile", str(big)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"fedkd: configuration file {big} is larger than 1,048,576 bytes, far more than a "
        "configuration holds; give the workflow's YAML configuration\n"
    )
    assert not workdir.exists(), "Snakemake never started"
    version = subprocess.run(
        [sys.executable, "-m", "fedkd.pipeline.precheck", "--version"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    import snakemake

    assert version.returncode == 0 and version.stdout.strip() == snakemake.__version__


def test_the_precheck_guards_the_default_configuration_too(tmp_path):
    """Without --configfile the Snakefile reads config/config.yaml under Snakemake's working
    directory: a 50 MB one there is refused as --configfile's would be, before Snakemake reads
    it; a command line that names its own configuration leaves the default unread."""
    from fedkd.pipeline.precheck import config_files

    workdir = tmp_path / "work"
    (workdir / "config").mkdir(parents=True)
    default = workdir / "config" / "config.yaml"
    default.write_text('name: "' + "x" * 2_000_000 + '"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "fedkd.pipeline.precheck", "-n", "--cores", "1"]
    cmd += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"fedkd: configuration file {default} is larger than 1,048,576 bytes, far more than a "
        "configuration holds; give the workflow's YAML configuration\n"
    )
    assert not (workdir / ".snakemake").exists(), "Snakemake never started"
    assert config_files(["-n", "--directory", str(workdir)]) == [str(default)]
    assert config_files(["-n", "-d", str(workdir), "--configfile", "mine.yaml"]) == ["mine.yaml"]
    assert config_files(["-n", "--directory", str(tmp_path / "none")]) == []


def test_an_unregistered_strategy_is_named_once_with_its_fix():
    """The run specs of a variant whose strategy is not registered repeated the variant's own
    error once more, as a second problem to fix."""
    cfg = small_config()
    cfg["variants"]["fedavg"]["strategy"] = "fedavgg"
    message = errors_of(cfg)
    assert "variants.fedavg.strategy: 'fedavgg' is not a registered strategy" in message
    assert message.count("fedavgg") == 1, message
