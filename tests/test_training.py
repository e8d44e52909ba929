"""Integration: real federated runs on the mnist5k sample (CPU), resumption and bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import CheckpointCorruptError
from fedkd.engine.run import Run
from fedkd.engine.run_outputs import RunConflictError, read_metrics

SMALL = dict(
    dataset="mnist5k", clients=10, participation=0.4, alpha=1.0, local_epochs=1, device="cpu"
)


def metrics(out):
    return pd.read_parquet(out / "metrics.parquet")


@pytest.mark.slow
def test_fedavg_three_rounds_beats_chance_fast(tmp_path):
    spec = RunSpec(strategy="fedavg", rounds=3, **SMALL)
    record = Run(spec, tmp_path / "run").run()
    assert record["status"] == "complete"
    df = metrics(tmp_path / "run")
    assert list(df["round"]) == [1, 2, 3]
    assert df["test_acc"].iloc[-1] > 0.5, "10 classes: chance is 0.1"
    # the per-round row carries what the papers' tables and figures need
    for col in (
        "test_loss",
        "class_acc",
        "train_loss",
        "bytes_sent",
        "bytes_received",
        "seconds",
        "clients",
    ):
        assert col in df.columns
    assert len(df["class_acc"].iloc[0]) == 10
    from fedkd.models import build_model

    n_params = sum(v.numel() for v in build_model("cnn", 10, (1, 28, 28)).state_dict().values())
    assert df["bytes_sent"].iloc[0] == 4 * n_params * 4  # 4 clients × float32 model
    assert df["bytes_received"].iloc[0] == 4 * n_params * 4
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    for key in ("spec", "seeds", "code_hash", "versions", "device", "status", "summary"):
        assert key in run
    assert run["versions"]["torch"] == torch.__version__
    assert run["versions"]["cuda"] == (torch.version.cuda or "none")
    assert run["versions"]["cudnn"] == str(torch.backends.cudnn.version() or "none")


@pytest.mark.slow
def test_same_seed_same_metrics_and_resume_is_bit_identical(tmp_path):
    spec = RunSpec(strategy="fedavg", rounds=4, **SMALL)
    Run(spec, tmp_path / "full").run()
    # interrupted after round 2, then restarted with the same command
    Run(spec, tmp_path / "cut").run(stop_after_round=2)
    assert len(metrics(tmp_path / "cut")) == 2
    Run(spec, tmp_path / "cut").run()
    full, cut = metrics(tmp_path / "full"), metrics(tmp_path / "cut")
    cols = ["round", "test_acc", "test_loss", "train_loss", "bytes_sent", "bytes_received"]
    pd.testing.assert_frame_equal(full[cols], cut[cols])
    assert full["class_acc"].map(list).tolist() == cut["class_acc"].map(list).tolist()


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_metrics(tmp_path):
    """A real SIGKILL mid-run, then the same command again: metrics equal an uninterrupted run."""
    args = ["--dataset", "mnist5k", "--clients", "10", "--participation", "0.4", "--alpha", "1",
            "--local-epochs", "1", "--rounds", "4", "--device", "cpu"]  # fmt: skip
    # each process its own string-hash seed: nothing a run draws may depend on it
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    cmd = [sys.executable, "-m", "fedkd", "train", *args]
    subprocess.run(
        [*cmd, "--out", str(tmp_path / "full")], check=True, env=env, capture_output=True
    )
    env["PYTHONHASHSEED"] = "2"
    killed_out = tmp_path / "killed"
    proc = subprocess.Popen(
        [*cmd, "--out", str(killed_out)], env=env, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        mf = killed_out / "metrics.parquet"
        if mf.exists() and len(read_metrics(mf)) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rounds_before = len(pd.read_parquet(killed_out / "metrics.parquet"))
    assert rounds_before < 4, "the run finished before it could be killed; make it longer"
    env["PYTHONHASHSEED"] = "3"
    done = subprocess.run([*cmd, "--out", str(killed_out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    full, resumed = metrics(tmp_path / "full"), metrics(killed_out)
    cols = ["round", "test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(full[cols], resumed[cols])


@pytest.mark.slow
def test_corrupt_checkpoint_is_refused_and_kept(tmp_path):
    spec = RunSpec(strategy="fedavg", rounds=2, **SMALL)
    Run(spec, tmp_path / "r").run(stop_after_round=1)
    ck = tmp_path / "r" / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:-100])
    before = ck.read_bytes()
    metrics_before = (tmp_path / "r" / "metrics.parquet").read_bytes()
    with pytest.raises(CheckpointCorruptError, match="checkpoint.pt"):
        Run(spec, tmp_path / "r").run()
    assert ck.read_bytes() == before
    assert (tmp_path / "r" / "metrics.parquet").read_bytes() == metrics_before


def test_other_spec_in_same_directory_is_refused(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"spec_hash": "something-else", "status": "complete"}))
    with pytest.raises(RunConflictError, match="different spec"):
        Run(RunSpec(**SMALL), out).run()
    assert json.loads((out / "run.json").read_text())["spec_hash"] == "something-else"


def test_more_clients_than_samples_is_a_clear_error(tmp_path):
    # the value and the fix named ("clients" alone matched any message about clients)
    with pytest.raises(ValueError, match=r"clients=100000 leaves .*use at most 56 clients"):
        Run(RunSpec(**{**SMALL, "clients": 100000, "participation": 0.1}), tmp_path / "r").run()
    assert not (tmp_path / "r").exists(), "a run that fails its checks leaves no folder"


def test_clients_with_less_than_a_batch_each_are_refused_before_training(tmp_path):
    # mnist5k trains on 3,600 images: 2,000 clients would hold 1.8 each
    spec = RunSpec(**{**SMALL, "clients": 2000, "participation": 0.01})
    with pytest.raises(ValueError, match=r"clients=2000 leaves 1\.8 training samples.*at most 56"):
        Run(spec, tmp_path / "r").run()
    assert not (tmp_path / "r").exists()


def test_missing_dataset_leaves_no_output_folder(tmp_path):
    from fedkd.data.base import DatasetNotFoundError

    spec = RunSpec(**{**SMALL, "dataset": "cifar10", "data_root": str(tmp_path / "nodata")})
    with pytest.raises(DatasetNotFoundError):
        Run(spec, tmp_path / "r").run()
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_the_recorded_command_run_where_recorded_trains_the_same_run_again(tmp_path):
    """run.json's ``command``, run by a shell in its ``cwd`` with its ``device.threads`` as
    OMP_NUM_THREADS, trains the run again to the same numbers: `python -m fedkd` (whose argv[0]
    is the package's __main__.py, which a shell cannot run) and a relative --out included."""
    first = tmp_path / "first"
    first.mkdir()
    args = ["train", "--out", "rel", "--strategy", "fedavg", "--rounds", "1", "--clients", "10",
            "--participation", "0.2", "--local-epochs", "1", "--device", "cpu"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "fedkd", *args], cwd=first, env=env, check=True)
    rec = json.loads((first / "rel" / "run.json").read_text())
    assert rec["cwd"] == str(first) and rec["device"]["threads"] == 1
    (first / "rel").rename(first / "kept")
    env["OMP_NUM_THREADS"] = str(rec["device"]["threads"])
    again = subprocess.run(rec["command"], shell=True, cwd=rec["cwd"], env=env)
    assert again.returncode == 0, rec["command"]
    cols = ["round", "test_acc", "test_loss", "train_loss", "class_acc"]
    assert metrics(first / "rel")[cols].equals(metrics(first / "kept")[cols])


@pytest.mark.slow
def test_a_resume_under_another_thread_count_warns_naming_both_and_records_both(tmp_path):
    """CPU kernels split their sums by thread, so a run resumed with another torch thread count
    is not the uninterrupted run: the resume says so, naming both counts and the
    OMP_NUM_THREADS that gives the uninterrupted numbers, and run.json keeps both counts. A
    resume with the same count says nothing."""
    spec = RunSpec(strategy="fedavg", rounds=2, **SMALL)
    before = torch.get_num_threads()
    logs: dict[str, list[str]] = {"same": [], "other": []}
    try:
        for name, threads in (("same", 1), ("other", 2)):
            torch.set_num_threads(1)
            Run(spec, tmp_path / name, log=lambda m: None).run(stop_after_round=1)
            torch.set_num_threads(threads)
            Run(spec, tmp_path / name, log=logs[name].append).run()
    finally:
        torch.set_num_threads(before)
    assert not [m for m in logs["same"] if "warning" in m], logs["same"]
    (warning,) = [m for m in logs["other"] if "warning" in m]
    assert "(torch threads 2 now, 1 for round 1)" in warning, warning
    assert "run the same command with OMP_NUM_THREADS=1;" in warning, warning
    rec = json.loads((tmp_path / "other" / "run.json").read_text())
    assert rec["device"]["threads"] == 2
    assert [a["device"]["threads"] for a in rec["earlier_attempts"]] == [1]
