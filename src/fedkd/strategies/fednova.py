"""FedNova (Wang et al., NeurIPS 2020): normalised averaging, as in NIID-Bench.

Client i runs tau_i local steps of SGD with momentum rho and reports

    a_i = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho)

(the sum over steps of each gradient's total coefficient in momentum SGD; a_i = tau_i when
rho = 0). Its normalised update is d_i = (x - y_i) / a_i (NIID-Bench's ``norm_grad``); the server
steps x := x - tau_eff * sum_i p_i d_i with tau_eff = sum_i p_i a_i.

Choices where the sources differ or are silent:
- p_i are the engine's client weights: n_i / n (the paper) for size-varying partitions, uniform
  for equal-size ones (where n_i / n is uniform too). NIID-Bench weights by the number of
  batches, n_i / B rounded up, which is n_i / n up to rounding.
- rho is the local optimizer's momentum (spec.momentum); with Adam there is no heavy-ball
  momentum to correct for and a_i = tau_i.
- Only trainable parameters are normalised; buffers (BatchNorm running statistics) take the plain
  weighted average, because the normalised combination extrapolates and could make a running
  variance negative. NIID-Bench normalises every state entry.
- Weight decay is left out of a_i, as in NIID-Bench.
"""

from __future__ import annotations

import torch

from fedkd.strategies._local_steps import effective_steps, local_momentum
from fedkd.strategies.base import (
    ClientContext,
    ClientUpdate,
    NoParams,
    Strategy,
    Traits,
    weighted_average,
)


def nova_coefficients(p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Write x - tau_eff * sum_i p_i (x - y_i) / a_i as sum_i k_i y_i + k_x x.

    Returns (k_i, k_x, tau_eff). A client with a_i = 0 (no local step) contributes nothing."""
    p, a = p.double(), a.double()
    tau_eff = float((p * a).sum())
    safe = torch.where(a > 0, a, torch.ones_like(a))
    k = torch.where(a > 0, p * tau_eff / safe, torch.zeros_like(a))
    return k, 1.0 - float(k.sum()), tau_eff


class FedNova(Strategy):
    name = "fednova"
    paper = "Wang et al., NeurIPS 2020 (as in NIID-Bench)"
    summary = (
        "Local CE; the server averages updates normalised by each client's momentum-corrected "
        "number of local steps a_i and rescales by tau_eff = sum p_i a_i."
    )
    Params = NoParams  # rho comes from the local optimizer; nothing else to choose
    traits = Traits(
        extra_information="local step count (a_i)", proxy_data=False, modifies_model=False
    )

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.last_tau_eff = float("nan")

    def client_end(self, client: ClientContext) -> dict:
        # a scalar upload (8 bytes, counted), computed where tau_i is known
        a = effective_steps(client.steps, local_momentum(self.ctx.spec))
        return {"a": torch.tensor(a, dtype=torch.float64)}

    def aggregate(
        self, round: int, global_model, updates: list[ClientUpdate]
    ) -> dict[str, torch.Tensor]:
        p = self.client_weights(updates)
        a = torch.stack([u.extras["a"].double().cpu() for u in updates])
        k, k_x, self.last_tau_eff = nova_coefficients(p, a)
        out = weighted_average([u.state for u in updates], p)  # buffers: plain average
        x = global_model.state_dict()
        names = [n for n, _ in global_model.named_parameters()]
        states = [{n: u.state[n] for n in names} for u in updates] + [{n: x[n] for n in names}]
        out.update(
            weighted_average(states, torch.cat([k, torch.tensor([k_x], dtype=torch.float64)]))
        )
        return out

    def server_update(self, round, global_model, updates) -> dict:
        return {"tau_eff": self.last_tau_eff}
