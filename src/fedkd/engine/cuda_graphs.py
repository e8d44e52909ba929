"""CUDA graphs for the batched engine (``FEDKD_CUDA_GRAPHS=1`` on a CUDA device).

Each group shape's whole step (forward, backward, clipping, optimizer, loss accumulation) is
captured once per round over static buffers and replayed; batch gathering and augmentation fill
the static inputs outside the graph. This path has not been run on a GPU by its author (no GPU
was available); see tests/test_batched_gpu.py.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fedkd.engine.batched_trainer import BatchedTrainer, Group

GRAPHS_ENV = "FEDKD_CUDA_GRAPHS"


def graphs_requested(device: torch.device) -> bool:
    return device.type == "cuda" and os.environ.get(GRAPHS_ENV, "0") not in ("", "0")


def on_side_stream(fn) -> None:
    """CUDA graph capture wants the warm-up iterations on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)


class GraphedStep:
    """One group shape's whole step captured as a CUDA graph over static input buffers.

    The stacked parameters, optimizer buffers and loss sums live at fixed addresses for the round,
    so the graph updates them in place; each replay only needs the batch copied into ``x``/``y``.
    Unverified on a GPU by its author (see the module doc)."""

    def __init__(self, trainer: BatchedTrainer, g: Group, x: torch.Tensor, y: torch.Tensor, t):
        self.x, self.y = x.clone(), y.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            trainer.step(g, self.x, self.y, t)  # t > 0: the momentum update, not its creation

    def replay(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()
