"""Where the global model's buffers (BatchNorm's running statistics) come from after a round:
the strategy's average (``bn_running_stats: average``), or the round's last client
(``last-client``, as the FedGKD release's FedAvg: it averages the parameters into a copy of the
last received model, whose buffers stay; its clients are received in ascending id, as here).
"""

from __future__ import annotations

import torch

from fedkd.strategies.base import ClientUpdate


def global_buffers(
    state: dict[str, torch.Tensor], updates: list[ClientUpdate], model: torch.nn.Module, rule: str
) -> dict[str, torch.Tensor]:
    """``state`` (the aggregated global state) with its buffers as ``rule`` says. The buffers
    are the model's persistent ones (those in its state dict): running means and variances and
    the batch counters; a model without any is returned unchanged."""
    if rule == "average":
        return state
    if rule != "last-client":
        raise ValueError(f"bn_running_stats={rule!r} is unknown; use 'average' or 'last-client'")
    params = {n for n, _ in model.named_parameters()}
    last = max(updates, key=lambda u: u.client_id)
    return {
        k: (v if k in params or k not in last.state else last.state[k].clone())
        for k, v in state.items()
    }
