"""GPU slots: parallel training processes on a machine with several GPUs spread over them."""

import subprocess
import sys

import pytest

from fedkd.engine import gpu


@pytest.fixture(autouse=True)
def _release():
    yield
    gpu.release_all()


def test_slots_fill_every_gpu_before_packing_a_second_run(tmp_path):
    # 2 GPUs, 2 runs each: the first two claims get GPUs 0 and 1, the next two 0 and 1 again
    got = [gpu.claim_gpu(2, per_gpu=2, directory=tmp_path) for _ in range(4)]
    assert got == [0, 1, 0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"slot{i}.lock" for i in range(4)]


def test_a_released_slot_is_taken_again(tmp_path):
    assert [gpu.claim_gpu(3, per_gpu=1, directory=tmp_path) for _ in range(3)] == [0, 1, 2]
    gpu.release_all()
    assert gpu.claim_gpu(3, per_gpu=1, directory=tmp_path) == 0


def test_slots_exclude_other_processes_until_they_exit(tmp_path):
    code = (
        "import sys, time; from pathlib import Path; from fedkd.engine import gpu; "
        f"print(gpu.claim_gpu(2, per_gpu=1, directory=Path({str(tmp_path)!r})), flush=True); "
        "sys.stdin.readline()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "0"
        assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) == 1  # GPU 0 is held
    finally:
        holder.communicate("\n", timeout=30)
    gpu.release_all()
    assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) == 0  # its exit freed GPU 0


def test_more_jobs_than_slots_still_get_a_gpu(tmp_path):
    assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) == 0
    assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) == 1
    assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) in (0, 1)


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_bad_runs_per_gpu_is_refused(monkeypatch, value):
    monkeypatch.setenv("FEDKD_RUNS_PER_GPU", value)
    with pytest.raises(ValueError, match=f"FEDKD_RUNS_PER_GPU='{value}'"):
        gpu.runs_per_gpu()
