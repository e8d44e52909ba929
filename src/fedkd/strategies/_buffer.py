"""The server-side FIFO of recent global models that fedgkd and fedgkd-vote distil from.

The buffer holds the last M global models, oldest first: the model after each round's
aggregation is pushed, so in round t+1 it holds w_t, ..., w_{t-M+1} (fewer while t < M), as the
authors' code does. The random initial model w_0 is never a teacher: there is no distillation in
the first round, and averaging w_0 into w̄_t in rounds 2..M would mix random weights into it.
"""

from __future__ import annotations

from typing import Any

import torch

from fedkd.models.base import FedModel
from fedkd.strategies.base import ClientContext, ClientUpdate, Strategy, state_mean


class ModelBuffer:
    """FIFO of at most ``size`` state dicts (oldest first), each with a small ``info`` dict."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"buffer size must be at least 1, got {size}")
        self.size = size
        self.states: list[dict[str, torch.Tensor]] = []
        self.infos: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.states)

    def push(self, state: dict[str, torch.Tensor], info: dict[str, Any] | None = None) -> None:
        # clone: the engine loads the next round's weights into the same global model in place
        self.states.append({k: v.detach().clone() for k, v in state.items()})
        self.infos.append(dict(info or {}))
        if len(self.states) > self.size:
            self.states.pop(0)
            self.infos.pop(0)

    def mean(self) -> dict[str, torch.Tensor]:
        """Uniform parameter average of the buffered models (w̄_t of the paper)."""
        if not self.states:
            raise RuntimeError("the model buffer is empty")
        return state_mean(self.states)

    def state_dict(self) -> dict[str, Any]:
        return {
            "states": [{k: v.cpu() for k, v in s.items()} for s in self.states],
            "infos": [dict(i) for i in self.infos],
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.states = [{k: v.to(device) for k, v in s.items()} for s in state["states"]]
        self.infos = [dict(i) for i in state["infos"]]


class BufferedStrategy(Strategy):
    """Keeps a ``ModelBuffer`` of the last ``params.buffer`` global models across rounds and
    builds teacher models from received state dicts once per round (shared by all clients)."""

    def __init__(self, params: Any, ctx: Any):
        super().__init__(params, ctx)
        self.buffer = ModelBuffer(params.buffer)
        self._teacher_cache: tuple[int, list[FedModel]] | None = None

    # ------------------------------------------------------------------ buffer bookkeeping
    def buffer_info(self, global_model: FedModel) -> dict[str, Any]:
        """What to remember with a model when it enters the buffer (e.g. its validation loss)."""
        return {}

    def server_update(
        self, round: int, global_model: FedModel, updates: list[ClientUpdate]
    ) -> dict[str, Any]:
        self.buffer.push(global_model.state_dict(), self.buffer_info(global_model))
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"], self.ctx.device)

    # ------------------------------------------------------------------ client side
    def teachers_from(
        self, client: ClientContext, states: list[dict[str, torch.Tensor]]
    ) -> list[FedModel]:
        """Frozen models built from the received state dicts, once per round for all clients."""
        if self._teacher_cache is None or self._teacher_cache[0] != client.round:
            models = []
            for s in states:
                m = client.build_model()
                m.load_state_dict(s)
                m.eval()  # a teacher: no dropout, running norm statistics, no gradients
                m.requires_grad_(False)
                models.append(m)
            self._teacher_cache = (client.round, models)
        return self._teacher_cache[1]
