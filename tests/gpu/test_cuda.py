"""The GPU suite: training, kill-and-resume, repeatability, bf16 and a bench smoke run on CUDA.

Run on a GPU machine with ``bash scripts/gpu-tests.sh``. Elsewhere every test here is skipped
with the reason, or runs on the CPU with ``FEDKD_TEST_DEVICE=cpu`` (``conftest.py``;
``bash scripts/gpu-tests.sh --device cpu``)."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from fedkd.engine.run_outputs import read_metrics

pytestmark = pytest.mark.gpu

# one strategy of each family: plain, teacher-based, stateful per client, server-side distillation
FAMILIES = {
    "fedavg": [],
    "fedgkd": [],
    "scaffold": [],
    "feddf": ["--param", "max_steps=20", "--param", "eval_every=10", "--param", "patience=20"],
}
ROUNDS = 4
COMMON = ["--dataset", "mnist5k", "--clients", "20", "--alpha", "0.1", "--participation", "0.2",
          "--local-epochs", "1", "--rounds", str(ROUNDS)]  # fmt: skip
COLUMNS = ["round", "test_acc", "test_loss", "train_loss"]


def _train_cmd(strategy: str, out, device: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fedkd", "train", "--strategy", strategy, *COMMON,
            "--device", device, *FAMILIES.get(strategy, []), *extra, "--out", str(out)]  # fmt: skip


def _metrics(out) -> pd.DataFrame:
    return pd.read_parquet(out / "metrics.parquet")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _kill_after(cmd: list[str], out, rounds: int) -> None:
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            mf = out / "metrics.parquet"
            if mf.exists() and len(read_metrics(mf)) >= rounds:
                break
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("strategy", sorted(FAMILIES))
def test_killed_cuda_run_resumes_bit_identical_with_deterministic(tmp_path, strategy, device):
    det = ["--deterministic", "true"]
    _run(_train_cmd(strategy, tmp_path / "full", device, *det))
    killed = tmp_path / "killed"
    _kill_after(_train_cmd(strategy, killed, device, *det), killed, 2)
    before = len(_metrics(killed))
    assert before < ROUNDS, "the run ended before it could be killed"
    done = _run(_train_cmd(strategy, killed, device, *det))
    assert "resuming" in done.stderr
    full, resumed = _metrics(tmp_path / "full"), _metrics(killed)
    pd.testing.assert_frame_equal(full[COLUMNS], resumed[COLUMNS], check_exact=True)
    rec = json.loads((killed / "run.json").read_text())
    assert rec["status"] == "complete" and rec["device"]["type"] == device
    assert rec["determinism"]["deterministic"] is True


@pytest.mark.parametrize("strategy", ["fedgkd", "moon"])
def test_killed_graphed_cuda_run_resumes_bit_identical(tmp_path, strategy, device):
    """With CUDA graphs (the default on CUDA: no flag) a killed run resumes bit for bit, its
    graphs captured again in the new process. fedgkd's teacher and moon's global model are shared
    models (run unfolded), moon's previous models per-client ones (folded). Graphed against
    sequential: tests/test_batched_gpu.py."""
    if device != "cuda":
        pytest.skip("CUDA graphs need a CUDA device")
    det = ["--deterministic", "true"]
    full = tmp_path / "full"
    _run(_train_cmd(strategy, full, device, *det))
    assert json.loads((full / "run.json").read_text())["engine"]["cuda_graphs"] is True
    killed = tmp_path / "killed"
    _kill_after(_train_cmd(strategy, killed, device, *det), killed, 2)
    assert len(_metrics(killed)) < ROUNDS, "the run ended before it could be killed"
    assert "resuming" in _run(_train_cmd(strategy, killed, device, *det)).stderr
    pd.testing.assert_frame_equal(
        _metrics(full)[COLUMNS], _metrics(killed)[COLUMNS], check_exact=True
    )


def test_two_deterministic_cuda_runs_are_bit_identical(tmp_path, device):
    for name in ("a", "b"):
        _run(_train_cmd("fedgkd", tmp_path / name, device, "--deterministic", "true"))
    a, b = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    pd.testing.assert_frame_equal(a[COLUMNS], b[COLUMNS], check_exact=True)
    assert a["class_acc"].map(list).tolist() == b["class_acc"].map(list).tolist()


def test_bf16_cuda_run_learns(tmp_path, device):
    """bf16 learns as fp32 does: the same run in both precisions. (Its 4 rounds reach a best
    accuracy of about 0.42 in fp32 on a CPU, seed 0, so the bound is relative to fp32, not an
    absolute accuracy.)"""
    best = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        _run(_train_cmd("fedavg", out, device, "--precision", precision, "--alpha", "1"))
        best[precision] = _metrics(out)["test_acc"].max()
    assert best["fp32"] > 0.3, f"the fp32 run stayed near chance (0.1): {best}"
    assert best["bf16"] >= best["fp32"] - 0.05, f"bf16 learns less than fp32: {best}"


def test_checkpoint_from_cuda_resumes_on_cpu(tmp_path, device):
    """A job retried on another device type continues from the same checkpoint (on a CPU-only
    test device: a killed CPU job resumed by a new process)."""
    out = tmp_path / "moved"
    _kill_after(_train_cmd("scaffold", out, device), out, 2)
    assert len(_metrics(out)) < ROUNDS, "the run ended before it could be killed"
    done = _run(_train_cmd("scaffold", out, "cpu"))
    assert "resuming" in done.stderr
    assert len(_metrics(out)) == ROUNDS
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


def test_bench_smoke_on_cuda(tmp_path, device):
    """Every section of ``fedkd bench`` on small shapes: the bare-loop comparison, a table-3
    round per engine, and fedgkd table-3 runs timed after their warm-up."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    engines = "batched-eager,batched" if device == "cuda" else "batched"
    done = subprocess.run(
        [sys.executable, "-m", "fedkd.tools.bench", "--device", device, "--steps", "4", "--repeats",
         "1", "--rounds-bench", "table3", "--client-samples", "128", "--train-images", "1280",
         "--eval-images", "200", "--strategies", "fedgkd", "--engine", engines,
         "--run-epochs", "1", "--warmup-rounds", "2", "--run-rounds", "1", "--out", "out"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "bench-results.jsonl").open()]
    runs = [r for r in rows if r["what"].startswith("table-3 run fedgkd")]
    assert len(rows) == 2 + len(engines.split(",")) and len(runs) == len(engines.split(","))
    assert all(r["details"]["timed_rounds"] == [3] and r["img_s"] > 0 for r in runs)
    assert all(set(r) >= {"date", "device", "commit", "command"} for r in rows)
    if device == "cuda":
        assert "CUDA graphs" in runs[-1]["details"]["engine"]
        assert "CUDA graphs" not in runs[0]["details"]["engine"]
