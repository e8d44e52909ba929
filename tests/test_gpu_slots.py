"""GPU slots: parallel training processes on a machine with several GPUs spread over them."""

import subprocess
import sys

import pytest

from fedkd.engine import gpu


@pytest.fixture(autouse=True)
def _release():
    yield
    gpu.release_all()


def holders(tmp_path, count: int, num_gpus: int, per_gpu: int) -> tuple[list[int], list]:
    """``count`` processes started one after another, each holding the slot it claimed until
    it is told to end (a line on its stdin): their GPUs, and the processes."""
    code = (
        "import sys; from pathlib import Path; from fedkd.engine import gpu; "
        f"print(gpu.claim_gpu({num_gpus}, per_gpu={per_gpu}, "
        f"directory=Path({str(tmp_path)!r})), flush=True); sys.stdin.readline()"
    )
    got, procs = [], []
    for _ in range(count):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        got.append(int(proc.stdout.readline()))
    return got, procs


def end(procs) -> None:
    for proc in procs:
        proc.communicate("\n", timeout=30)


def test_slots_fill_every_gpu_before_packing_a_second_run(tmp_path):
    # 2 GPUs, 2 runs each: the first two processes get GPUs 0 and 1, the next two 0 and 1 again
    got, procs = holders(tmp_path, 4, num_gpus=2, per_gpu=2)
    try:
        assert got == [0, 1, 0, 1]
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"slot{i}.lock" for i in range(4)]
    finally:
        end(procs)


def test_a_process_claims_once_however_many_runs_it_starts(tmp_path):
    """fedkd bench starts several runs in one process: each took another slot, so its engines
    could land on different GPUs while the clock synchronised the first."""
    assert [gpu.claim_gpu(3, per_gpu=1, directory=tmp_path) for _ in range(3)] == [0, 0, 0]
    held = [p for p in tmp_path.iterdir()]
    assert [p.name for p in held] == ["slot0.lock"]


def test_a_released_slot_is_taken_again(tmp_path):
    got, procs = holders(tmp_path, 2, num_gpus=3, per_gpu=1)
    end(procs)  # their exits free GPUs 0 and 1
    assert got == [0, 1]
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
    got, procs = holders(tmp_path, 2, num_gpus=2, per_gpu=1)
    try:
        assert got == [0, 1]
        assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) in (0, 1)  # every slot taken
    finally:
        end(procs)


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_bad_runs_per_gpu_is_refused(monkeypatch, value):
    monkeypatch.setenv("FEDKD_RUNS_PER_GPU", value)
    with pytest.raises(ValueError, match=f"FEDKD_RUNS_PER_GPU='{value}'"):
        gpu.runs_per_gpu()


def test_a_process_told_to_share_its_parents_gpu_takes_no_slot(tmp_path):
    """fedkd bench's packed runs share the GPU of the process that started them, which holds
    its slot: each took a free slot of its own, so K packed runs spread over the GPUs."""
    gpu.use_gpu(1)
    assert gpu.claim_gpu(3, per_gpu=1, directory=tmp_path) == 1
    assert not tmp_path.exists() or not list(tmp_path.iterdir())
