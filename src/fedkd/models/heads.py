"""The projection head of MOON (also used by FedGKD+): Linear(d, d) -> ReLU -> Linear(d, 256)."""

from __future__ import annotations

import torch
from torch import nn

PROJECTION_DIM = 256


class ProjectionHead(nn.Module):
    def __init__(self, in_dim: int, out_dim: int = PROJECTION_DIM):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.l1 = nn.Linear(in_dim, in_dim)
        self.l2 = nn.Linear(in_dim, out_dim)

    def reset_he(self) -> None:
        """He-normal weights (fan-in; ReLU gain for l1, linear for l2), zero biases."""
        nn.init.kaiming_normal_(self.l1.weight, nonlinearity="relu")
        nn.init.kaiming_normal_(self.l2.weight, nonlinearity="linear")
        nn.init.zeros_(self.l1.bias)
        nn.init.zeros_(self.l2.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(h)))
