"""The fork server on a GPU machine (where it starts only with FEDKD_FORKSERVER=on): a CUDA run
forked from it trains on the GPU and repeats a run in its own process bit for bit (on the CPU
with ``FEDKD_TEST_DEVICE=cpu``, ``conftest.py``)."""

import json
import os
import subprocess
import sys

import pytest

from fedkd.engine.run_outputs import read_metrics
from fedkd.forkserver import ENV, ForkServer

pytestmark = pytest.mark.gpu

# the server's log names a command by its first three words: "fedkd train --out DIR"
TRAIN = ["--dataset", "mnist5k", "--clients", "10", "--alpha", "0.5", "--participation",
         "0.2", "--local-epochs", "1", "--rounds", "3", "--deterministic", "true"]  # fmt: skip


def test_a_cuda_run_from_the_fork_server_equals_one_in_its_own_process(
    tmp_path, monkeypatch, device
):
    monkeypatch.setenv(ENV, "on")
    server = ForkServer(log=tmp_path / "forkserver.log")
    assert server.start(), (tmp_path / "forkserver.log").read_text()
    try:
        served_env = dict(os.environ)
        alone_env = {k: v for k, v in os.environ.items() if k != ENV}
        for name, env in (("served", served_env), ("alone", alone_env)):
            proc = subprocess.run(
                [sys.executable, "-m", "fedkd", "train", "--out", name, *TRAIN, "--device", device],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
    finally:
        server.stop()
    assert "fedkd train --out served" in (tmp_path / "forkserver.log").read_text()
    record = json.loads((tmp_path / "served" / "run.json").read_text())
    assert record["device"]["type"] == device
    served = read_metrics(tmp_path / "served" / "metrics.parquet")
    alone = read_metrics(tmp_path / "alone" / "metrics.parquet")
    assert served["test_acc"].tolist() == alone["test_acc"].tolist()
    assert served["train_loss"].tolist() == alone["train_loss"].tolist()
