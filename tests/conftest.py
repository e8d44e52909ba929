"""What every test shares: the threads of a test worker, the order of the test files, the
device of the GPU tests, rounds that train nothing (``fake_rounds``, for tests of the round
loop's records and checkpoints), and a file outside the results for links to point at
(``victim``, with tests/planted_links.py).

The ``device`` fixture of the GPU tests (tests/gpu and the files marked gpu) is CUDA, or the CPU
where ``FEDKD_TEST_DEVICE=cpu`` (set by ``bash scripts/gpu-tests.sh --device cpu``), so that a
machine without a GPU runs the same tests and proves the kit. Without a GPU and without that
variable, each test that asks for ``device`` is skipped with the reason."""

import os
from pathlib import Path

import pytest
import torch

from planted_links import VICTIM_TEXT

TEST_DEVICE_ENV = "FEDKD_TEST_DEVICE"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pytest_configure(config):
    """A test worker (pytest-xdist, ``-n``) computes on one thread, and so do the processes its
    tests start: the workers already run side by side on the cores, and torch's default of a
    thread per core in each made them wait on each other's spinning threads (bench row
    suite-two-workers-two-threads)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in THREAD_VARIABLES:
            os.environ[name] = "1"
        torch.set_num_threads(1)


# The files that take longest (minutes on 2 cores, mostly waiting on subprocesses), run first:
# the workers (--dist loadfile --no-loadscope-reorder) then end on short files, not on one of
# these while the other workers are done.
LONGEST_FIRST = ("test_gpu_kit.py", "test_workflow.py", "test_slurm.py", "test_workflow_console.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order and the other files' order are kept


@pytest.fixture
def device() -> str:
    name = os.environ.get(TEST_DEVICE_ENV, "cuda")
    if name not in ("cuda", "cpu"):
        raise pytest.UsageError(f"{TEST_DEVICE_ENV}={name!r} must be cuda or cpu")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip(
            f"needs a CUDA GPU (bash scripts/gpu-tests.sh); {TEST_DEVICE_ENV}=cpu runs it on the CPU"
        )
    return name


@pytest.fixture
def fake_rounds(monkeypatch):
    """Rounds that take no training: the round loop, checkpoints and records are what is tested."""

    def fake_round(self, r: int) -> dict:
        acc = 0.5 + 0.1 * r
        return {
            "round": r + 1, "test_acc": acc, "test_loss": 1.0 - acc, "val_acc": acc,
            "val_loss": 1.0 - acc, "class_acc": [acc] * 10, "train_loss": 0.5,
            "local_acc": float("nan"), "bytes_sent": 1, "bytes_received": 1, "clients": [r],
        }  # fmt: skip

    from fedkd.engine.run import Run

    monkeypatch.setattr(Run, "_round", fake_round)


@pytest.fixture
def tf32_flags():
    """The process's TF32 flags, put back after a test that sets them."""
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside the results that a planted link points to; no write may change it."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(VICTIM_TEXT)
    return path


@pytest.fixture
def connections(monkeypatch) -> list:
    """Every network connection the test's code attempts, refused and recorded."""
    import socket

    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts
