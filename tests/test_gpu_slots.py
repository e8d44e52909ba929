"""GPU slots: parallel training processes on a machine with several GPUs spread over them."""

import argparse
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

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
    got, procs = holders(tmp_path, 1, num_gpus=2, per_gpu=1)
    try:
        assert got == [0]
        assert gpu.claim_gpu(2, per_gpu=1, directory=tmp_path) == 1  # GPU 0 is held
    finally:
        end(procs)
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


def test_packed_runs_train_on_the_gpu_of_the_process_that_started_them(tmp_path, monkeypatch):
    """fedkd bench's packed runs (one process each) took a free slot of their own, so on a
    machine with several GPUs the K "packed" runs spread over them: the parent now hands each
    its device, which the child makes its own without a slot."""
    import multiprocessing

    from fedkd.tools.bench import packed as bench

    monkeypatch.setenv("FEDKD_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    args = argparse.Namespace(warmup_rounds=2, run_rounds=2, pack_timeout=5)

    # the parent: what each child process is given
    started = []

    class Context:
        def Barrier(self, k):  # noqa: N802 - multiprocessing's names
            return None

        def Queue(self):  # noqa: N802
            return SimpleNamespace(get=lambda timeout: {"error": "stopped"}, empty=lambda: True)

        def Process(self, target, args):  # noqa: N802
            started.append(args)
            return SimpleNamespace(start=lambda: None, join=lambda: None, is_alive=lambda: False)

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    with pytest.raises(RuntimeError, match="packed runs failed"):
        bench.bench_packed(args, torch.device("cuda", 1), 2, "fedgkd", "batched")
    assert [a[4] for a in started] == ["cuda:1", "cuda:1"]

    # a child: the device its runs are timed on
    seen = []

    class Stop(Exception):
        pass

    class Clock:
        def __init__(self, device, at_round_end):
            seen.append(device)

        def run_rounds(self, *rest):
            raise Stop

    monkeypatch.setattr(bench, "RoundClock", Clock)
    monkeypatch.setattr(bench, "table3_spec", lambda *rest: None)
    monkeypatch.setattr(bench, "synthetic_table3_data", lambda *rest: None)
    queue = SimpleNamespace(put=lambda item: None)
    with pytest.raises(Stop):
        bench._packed_child(
            0, "fedgkd", "batched", args, "cuda:1", SimpleNamespace(abort=lambda: None), queue
        )
    assert seen == [torch.device("cuda", 1)]
    assert not list(tmp_path.iterdir())  # no slot taken: the parent holds its GPU's
