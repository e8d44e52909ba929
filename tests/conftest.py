"""The device of the GPU tests (tests/gpu and the files marked gpu): CUDA, or the CPU where
``FEDKD_TEST_DEVICE=cpu`` (set by ``bash scripts/gpu-tests.sh --device cpu``), so that a machine
without a GPU runs the same tests and proves the kit. Without a GPU and without that variable,
each test that asks for ``device`` is skipped with the reason."""

import os

import pytest
import torch

TEST_DEVICE_ENV = "FEDKD_TEST_DEVICE"


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
