"""What a trainer returns, and the interface both trainers implement (``fedkd.engine.client``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from fedkd.runtime.schedule import ClientSchedule
from fedkd.strategies.base import ClientContext


class DivergedError(FloatingPointError):
    """Training produced a non-finite loss; the run stops and is recorded as diverged. Any
    FloatingPointError raised in a round (e.g. by a strategy's server step) counts the same."""


@dataclass
class Trained:
    """One client's result from a trainer: its trained parameters (by name, trainable only), its
    buffers as training left them (BatchNorm's running statistics: part of what a client uploads,
    as FedAvg averages the whole model) and its mean training loss (a device tensor: read once
    per round, not per client)."""

    params: dict[str, torch.Tensor]
    steps: int
    loss: torch.Tensor
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


class Trainer(Protocol):
    """Trains the round's clients, each from the global weights, after every ``client_begin``."""

    def train(
        self, clients: list[ClientContext], schedules: list[ClientSchedule], global_model
    ) -> list[Trained]: ...
