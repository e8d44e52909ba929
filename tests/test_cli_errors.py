"""Bad command-line input and bad workflow configurations end in one clear message naming the value
and its fix, with exit code 2 (argparse's own errors included), never a traceback, and write
nothing."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedkd.cli import build_parser, main
from fedkd.tools.bench import command as bench
from fedkd.user_errors import user_error_message
from planning_checks import REPO, snakemake_dry_run

TINY = REPO / "config" / "tiny.yaml"
SEED_BOUNDS = "must be an integer from 0 to 2^63 - 1"


def refused_by_argparse(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# ----------------------------------------------------------------------------- the workflow config
def dry_run(tmp_path: Path, config: dict) -> str:
    tmp_path.mkdir()
    proc = snakemake_dry_run(tmp_path, config)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_bad_table_and_figure_entries_are_named_by_the_validation(tmp_path):
    """The entries were read (for the tables' HTML) before the validation, which a misspelt
    layout ended in a KeyError and an entry of the wrong type in an AttributeError."""
    config = yaml.safe_load(TINY.read_text())
    config["tables"]["table3"]["layout"] = "gird"
    config["figures"] = ["curves"]
    out = dry_run(tmp_path / "a", config)
    assert "the configuration has 2 error(s)" in out, out[-3000:]
    assert "tables.table3.layout: 'gird' is not one of" in out
    assert "figures: ['curves'] is not of type 'object'" in out
    config = yaml.safe_load(TINY.read_text())
    config["tables"], config["figures"] = 5, {"curves": 5}
    out += dry_run(tmp_path / "b", config)
    assert "tables: 5 is not of type 'object'" in out, out[-3000:]
    assert "figures.curves: 5 is not of type 'object'" in out
    for crash in ("Traceback", "KeyError", "AttributeError"):
        assert crash not in out


# ----------------------------------------------------------------------------- devices
TRAIN = ["train", "--dataset", "mnist5k", "--rounds", "1"]


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_device_the_machine_lacks_is_named_with_the_fix_before_any_output(
    device, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    out = tmp_path / "run"
    err = refused([*TRAIN, "--out", str(out), "--device", device], capsys)
    assert f"fedkd train: error: device {device!r} was asked for but" in err
    assert "not available on this machine; use --device cpu, or --device auto" in err
    assert not out.exists()


def test_pretrained_weights_that_are_not_on_disk_are_named_before_any_output(tmp_path, capsys):
    """The model would fall back to a small DistilBERT trained from scratch, recorded under the
    pretrained model's name; `fedkd train` refuses instead, and says how to ask for that model."""
    out, missing = tmp_path / "run", str(tmp_path / "no-such-bert")
    argv = [
        "train", "--out", str(out), "--dataset", "synthtext", "--model", "distilbert",
        "--model-options", f"{{pretrained: {missing}}}", "--rounds", "1",
    ]  # fmt: skip
    err = refused(argv, capsys)
    assert f"fedkd train: error: pretrained DistilBERT {missing!r} is not in the local" in err
    assert "or set model_options {pretrained: null}" in err
    assert not out.exists()


def test_a_run_resuming_from_its_checkpoint_is_not_asked_for_the_weights(tmp_path, monkeypatch):
    """It rebuilds the model it saved: a model of another size would fail to load the checkpoint."""
    from fedkd.config import RunSpec
    from fedkd.pipeline import data_check

    asked = []
    monkeypatch.setattr(data_check, "missing_weights", lambda names: asked.append(names) or ["x"])
    spec = RunSpec(dataset="synthtext", model="auto", model_options={"pretrained": "bert"})
    with pytest.raises(ValueError, match="^x$"):
        data_check.refuse_missing_weights(spec, tmp_path)
    (tmp_path / "checkpoint.pt").touch()
    data_check.refuse_missing_weights(spec, tmp_path)
    data_check.refuse_missing_weights(RunSpec(dataset="mnist5k", model="cnn"), tmp_path / "new")
    assert asked == [["bert"]]


def test_features_on_a_device_the_machine_lacks_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    run.mkdir()
    spec = {"dataset": "mnist5k", "clients": 2, "device": "cpu"}
    (run / "run.json").write_text(json.dumps({"status": "complete", "spec": spec}))
    (run / "checkpoint.pt").write_bytes(b"")
    out = tmp_path / "features" / "f.npz"
    err = refused(["features", "--run", str(run), "-o", str(out), "--device", "cuda"], capsys)
    assert "fedkd features: error: device 'cuda' was asked for but CUDA is not available" in err
    assert "--device cpu" in err and not out.parent.exists()


# ----------------------------------------------------------------------------- output paths
@pytest.fixture
def paths(tmp_path):
    """A regular file and a directory, where commands are told to write."""
    a_file, a_dir = tmp_path / "a_file", tmp_path / "a_dir"
    a_file.write_text("kept")
    a_dir.mkdir()
    (a_dir / "inside").write_text("kept")
    yield a_file, a_dir
    assert a_file.read_text() == "kept" and (a_dir / "inside").read_text() == "kept"


PARTITION = ["partition", "--dataset", "mnist5k", "--clients", "2", "--alpha", "1"]


def test_train_refuses_an_output_that_is_a_file(paths, capsys):
    a_file, _ = paths
    err = refused([*TRAIN, "--device", "cpu", "--out", str(a_file)], capsys)
    assert f"fedkd train: error: --out {a_file} is a file, and a run writes a directory" in err
    err = refused([*TRAIN, "--device", "cpu", "--out", str(a_file / "run")], capsys)
    assert f"--out {a_file / 'run'}: {a_file} is a file, not a directory" in err


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_train_names_a_partition_file_it_cannot_read_before_any_work(kind, paths, capsys):
    """A missing --partition-file ended in a FileNotFoundError's traceback, after the dataset
    was loaded."""
    _, a_dir = paths
    given = a_dir.parent / "nowhere.parquet" if kind == "missing" else a_dir
    out = a_dir.parent / "run"
    err = refused([*TRAIN, "--device", "cpu", "--out", str(out), "--partition-file", str(given)],
                  capsys)  # fmt: skip
    assert f"fedkd train: error: partition file {given} (--partition-file) " in err, err
    assert "write it with `fedkd partition`" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, example",
    [
        ([*PARTITION, "--force", "--out"], "partition.parquet"),
        ([*PARTITION, "--out"], "partition.parquet"),  # was kept as if it were the partition
        (["aggregate", "--run", "x=nowhere", "-o"], "aggregate.parquet"),
        (["features", "--run", "nowhere", "-o"], "features.npz"),
    ],
)
def test_a_file_output_that_is_a_directory_is_refused(argv, example, paths, capsys):
    _, a_dir = paths
    err = refused([*argv, str(a_dir)], capsys)
    command = argv[0]
    assert (
        f"fedkd {command}: error: --out {a_dir} is a directory, and this command writes a " in err
    )
    assert f"e.g. {a_dir / example}" in err


@pytest.mark.parametrize(
    "argv",
    [[*PARTITION, "--out"], ["aggregate", "--run", "x=nowhere", "-o"], ["render", "grid", "-o"]],
)
def test_an_output_below_a_file_is_refused(argv, paths, capsys):
    a_file, _ = paths
    err = refused([*argv, str(a_file / "out")], capsys)
    assert f"error: --out {a_file / 'out'}: {a_file} is a file, not a directory" in err


@pytest.mark.parametrize("slash", ["", "/"])
def test_render_refuses_a_prefix_that_is_a_directory(slash, paths, capsys):
    _, a_dir = paths
    err = refused(["render", "grid", "-o", f"{a_dir}{slash}"], capsys)
    assert f"--out {a_dir}{slash} is a directory, and this command writes files named by" in err
    assert f"e.g. {a_dir / 'table3'}" in err


def test_an_output_in_a_place_that_cannot_be_written_is_named(tmp_path, monkeypatch, capsys):
    """A read-only mount (or a folder root may not write, which no check beforehand can see)
    met while writing: one line naming the path, no traceback."""
    import errno

    import fedkd.data.partition

    def read_only(path, *args):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(fedkd.data.partition, "write_partition", read_only)
    out = tmp_path / "p.parquet"
    err = refused([*PARTITION, "--out", str(out)], capsys)
    assert f"fedkd partition: error: {out}: Read-only file system; give a path this" in err
    exc = PermissionError(errno.EACCES, "Permission denied", "results/tables/t.md.tmp")
    message = user_error_message(exc, "render")
    assert message.startswith("fedkd render: error: results/tables/t.md.tmp: Permission denied;")


def test_a_path_of_the_wrong_kind_met_while_writing_is_named():
    exc = IsADirectoryError(21, "Is a directory", "t.parquet.tmp", None, "t.parquet")
    message = user_error_message(exc, "aggregate")
    assert message.startswith("fedkd aggregate: error: t.parquet: Is a directory; a file stands")
    exc = FileExistsError(17, "File exists", "results")
    assert "error: results: File exists;" in user_error_message(exc, "render")


# ----------------------------------------------------------------------------- bench
BENCH = ["bench", "--device", "cpu", "--skip-run", "--skip-throughput", "--rounds-bench", "none"]


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--steps", "0", "argument --steps: '0' must be an integer of at least 1"),
        ("--repeats", "0", "argument --repeats: '0' must be an integer of at least 1"),
        ("--batch-size", "-4", "argument --batch-size: '-4' must be an integer from 1 to"),
        ("--batch-size", "0", "argument --batch-size: '0' must be an integer from 1 to"),
        ("--model", "bogus", "argument --model: invalid choice: 'bogus'"),
        ("--pack-timeout", "nan", "argument --pack-timeout: 'nan' is not a finite number"),
        ("--pack-timeout", "0", "argument --pack-timeout: '0' must be a number above 0"),
        (
            "--check-precisions",
            "fp32,fp16",
            "argument --check-precisions: 'fp32,fp16': give precisions from fp32, tf32, bf16",
        ),
        (
            "--warmup-rounds",
            "-1",
            "argument --warmup-rounds: '-1' must be an integer of at least 0",
        ),
    ],
)
def test_bench_refuses_bad_flags_naming_flag_and_value(flag, value, fragment, capsys):
    err = refused_by_argparse([*BENCH, flag, value], capsys)
    assert f"fedkd bench: error: {fragment}" in err


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--strategies", "fedavg,fedavgg", "--strategies: 'fedavgg' is unknown; choose one"),
        ("--ops-strategies", "fedavg,fedavgg", "--ops-strategies: 'fedavgg' is unknown; choose"),
        ("--engine", "fast", "--engine 'fast' is not one of auto, sequential"),
        ("--pack", "x", "--pack 'x' must be counts >= 1, e.g. 4,8"),
        ("--rounds-bench", "table4", "--rounds-bench 'table4' is not one of default, table3"),
        ("--out", str(TINY), f"--out {TINY} is a file, and the benchmarks write a folder there"),
    ],
)
def test_bench_refuses_a_bad_value_as_a_usage_error_before_any_benchmark(
    flag, value, fragment, capsys, monkeypatch
):
    """Exit code 2 and argparse's form, as for its own flags; --rounds-bench's shape was a
    KeyError's traceback, and an --out file failed only once the first benchmark had run."""
    monkeypatch.setattr(bench, "run_bench", lambda args: pytest.fail("a benchmark ran"))
    err = refused_by_argparse(["bench", "--device", "cpu", flag, value], capsys)
    assert f"fedkd bench: error: {fragment}" in err
    assert "Traceback" not in err


def test_bench_reads_integers_as_train_does():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--steps", "1e3", "--batch-size", "010", "--pack-timeout", "1.5"])
    assert (args.steps, args.batch_size, args.pack_timeout) == (1000, 10, 1.5)


def test_bench_on_a_device_the_machine_lacks_is_named(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [a if a != "cpu" else "cuda" for a in BENCH]
    err = refused(argv, capsys)
    assert "fedkd bench: error: device 'cuda' was asked for but CUDA is not available" in err


# ----------------------------------------------------------------------------- render tsne
def test_a_features_file_without_its_arrays_is_named(tmp_path, capsys):
    features = tmp_path / "w.npz"
    np.savez(features, labels=np.zeros(3))
    err = refused(
        ["render", "tsne", "--features", str(features), "-o", str(tmp_path / "t")], capsys
    )
    assert f"fedkd render: error: features file {features} has no meta, global_features, " in err
    assert "written by `fedkd features" in err


@pytest.mark.parametrize("content", [b"not an archive", b"\x93NUMPY"])
def test_a_features_file_that_is_no_npz_is_named(content, tmp_path, capsys):
    features = tmp_path / "f.npz"
    features.write_bytes(content)
    err = refused(
        ["render", "tsne", "--features", str(features), "-o", str(tmp_path / "t")], capsys
    )
    assert f"fedkd render: error: features file {features} is not an .npz archive" in err
    assert "allow_pickle" not in err


def test_a_features_file_of_pickled_objects_is_named_without_numpys_advice(tmp_path, capsys):
    features = tmp_path / "f.npz"
    arrays = {k: np.zeros(3) for k in ("labels", "global_features", "local_features")}
    np.savez(features, meta=np.array({"models": []}, dtype=object), **arrays)
    err = refused(
        ["render", "tsne", "--features", str(features), "-o", str(tmp_path / "t")], capsys
    )
    assert f"features file {features} does not hold what `fedkd features` writes" in err
    assert "allow_pickle" not in err


# ----------------------------------------------------------------------------- partition --seed
@pytest.mark.parametrize("value", ["-1", str(2**63), str(2**64)])
def test_partition_seed_has_the_bounds_and_words_of_train(value, tmp_path, capsys):
    out = tmp_path / "p.parquet"
    err = refused_by_argparse([*PARTITION, "--seed", value, "--out", str(out)], capsys)
    assert f"fedkd partition: error: argument --seed: '{value}' {SEED_BOUNDS}" in err
    assert not out.exists()
    err = refused([*TRAIN, "--seed", value, "--out", str(tmp_path / "run")], capsys)
    assert SEED_BOUNDS in err


def test_an_unknown_flag_is_refused_with_its_commands_usage(capsys):
    err = refused_by_argparse(["strategies", "--detials"], capsys)
    assert err.startswith("usage: fedkd strategies [-h] [--details]\n")
    assert "fedkd strategies: error: unrecognized arguments: --detials" in err


def test_the_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fedkd {version('fedkd')}\n"


@pytest.mark.parametrize("after", [["strategies"], ["train"], ["render", "table3"]])
def test_the_version_flag_prints_the_version_and_exits_whatever_follows(after, capsys):
    """--version said "print fedkd's version and exit", but before a command it was ignored:
    the command ran (strategies listed, train refused for want of --out)."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version", *after])
    assert exc.value.code == 0
    assert capsys.readouterr() == (f"fedkd {version('fedkd')}\n", "")


def test_a_flag_before_the_command_is_the_top_level_commands(capsys):
    err = refused_by_argparse(["--detials", "strategies"], capsys)
    assert err.startswith("usage: fedkd [-h] [--version] COMMAND ...\n")
    assert "fedkd: error: unrecognized arguments: --detials" in err


def test_partition_names_its_flags_in_its_errors(tmp_path, capsys):
    out = str(tmp_path / "p.parquet")
    err = refused_by_argparse([*PARTITION[:3], "--clients", "-3", "--out", out], capsys)
    assert "argument --clients: '-3' must be an integer of at least 1" in err
    err = refused([*PARTITION, "--scheme", "shards", "--out", out], capsys)
    assert "fedkd partition: error: --scheme shards needs --shards N" in err
    assert not Path(out).exists()


@pytest.mark.parametrize(
    "flags, unused",
    [(["--scheme", "iid", "--alpha", "1"], "--scheme iid does not use --alpha"),
     (["--scheme", "shards", "--shards", "2", "--alpha", "1"], "--scheme shards does not use --alpha"),
     (["--scheme", "dirichlet", "--alpha", "1", "--shards", "2"], "--scheme dirichlet does not use --shards")],
)  # fmt: skip
def test_partition_refuses_a_flag_its_scheme_does_not_use(flags, unused, tmp_path, capsys):
    """A flag the scheme ignores would leave a file that looks drawn with it."""
    out = tmp_path / "p.parquet"
    err = refused([*PARTITION[:5], *flags, "--out", str(out)], capsys)
    assert f"fedkd partition: error: {unused}; leave it out" in err
    assert not out.exists()


def test_partition_takes_the_largest_seed_train_takes():
    args = build_parser("partition").parse_args([*PARTITION, "--seed", str(2**63 - 1), "-o", "p"])
    assert args.seed == 2**63 - 1


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback():
    """`fedkd strategies --details | head -1`: the reader has what it wanted and closed the pipe;
    fedkd stops quietly with 141 (128 + SIGPIPE, as a shell reports it), not a BrokenPipeError
    traceback. The pipe is closed before fedkd has started, so its first write finds it closed."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [sys.executable, "-m", "fedkd", "strategies", "--details"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err


def test_aggregate_names_a_file_given_as_a_run_directory_as_a_file(tmp_path, capsys):
    """A file as --run's directory was said not to exist."""
    run = tmp_path / "run.yaml"
    run.write_text("dataset: mnist5k\n")
    err = refused(["aggregate", "-o", str(tmp_path / "a.parquet"), "--run", f"a={run}"], capsys)
    assert f"fedkd aggregate: error: run directory {run} (label 'a') is a file, not" in err
    assert "does not exist" not in err


@pytest.mark.parametrize(
    "flags, unused",
    [(["--partition", "iid", "--shards", "2"], "shards=2: partition 'iid' deals no shards"),
     (["--partition", "iid", "--alpha", "0.3"], "alpha=0.3: partition 'iid' draws no Dirichlet"),
     (["--partition", "shards", "--shards", "2", "--alpha", "1"],
      "alpha=1.0: partition 'shards' draws no Dirichlet"),
     (["--partition", "dirichlet", "--shards", "2"], "shards=2: partition 'dirichlet' deals no")],
)  # fmt: skip
def test_train_refuses_a_key_its_partition_does_not_use(flags, unused, tmp_path, capsys):
    """`fedkd train --partition iid --shards 2` trained an iid run whose run.json said 2 shards
    a client: a number the run never read, recorded as though it had."""
    out = tmp_path / "run"
    err = refused(["train", "--dataset", "mnist5k", *flags, "--out", str(out)], capsys)
    assert unused in err and "leave" in err, err
    assert not out.exists()


def test_train_without_alpha_on_an_iid_partition_records_none():
    """The default alpha (1.0) is the Dirichlet schemes': an iid run given none holds none."""
    from fedkd.config import RunSpec

    assert RunSpec.from_dict({"partition": "iid"}).alpha is None
    assert RunSpec(partition="shards", shards=2).alpha is None
    assert RunSpec.from_dict({"partition": "dirichlet"}).alpha == RunSpec().alpha == 1.0
