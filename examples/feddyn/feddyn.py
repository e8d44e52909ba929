"""FedDyn (Acar et al., ICLR 2021): dynamic regularization, a strategy with per-client and server
state, kept outside the package (docs/adding-a-strategy.md walks through it).

Client k, sampled in round t, minimises

    L_k(w) - <g_k, w> + alpha/2 ||w - w^{t-1}||^2

from the global weights w^{t-1}; g_k (zero until the client first trains) is its estimate of
the gradient of L_k at its last local optimum. After training to w_k it keeps

    g_k <- g_k - alpha (w_k - w^{t-1})

The server keeps h (zero at the start) and, over the sampled clients P of the N,

    h   <- h - alpha/N * sum_{k in P} (w_k - w^{t-1})
    w^t  = mean_{k in P} w_k - h / alpha

Choices where the paper is silent: the mean over P uses the engine's client weights (uniform
for equal-size partitions, as FedAvg here); g_k and h cover the trainable parameters only, and
buffers (BatchNorm statistics) are aggregated as the run's bn_running_stats says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedkd.strategies._params import CheckedParams, above, ranged
from fedkd.strategies.base import (
    ClientContext,
    ClientUpdate,
    LocalBatch,
    LocalContext,
    Strategy,
    Traits,
    weighted_average,
)


@dataclass
class FedDynParams(CheckedParams):
    # the paper searches {0.1, 0.01, 0.001} and reports 0.01 for most of its CIFAR settings
    alpha: float = ranged(0.01, above(0), "the regularizer's weight")


def trainable(model) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def dynamic_term(
    params: dict[str, torch.Tensor],
    anchor: dict[str, torch.Tensor],
    grad: dict[str, torch.Tensor],
    alpha: float,
) -> torch.Tensor:
    """- <g_k, w> + alpha/2 ||w - w^{t-1}||^2 over the names of ``grad``."""
    linear = sum((params[n] * grad[n]).sum() for n in grad)
    quadratic = sum((params[n] - anchor[n]).pow(2).sum() for n in grad)
    return -linear + 0.5 * alpha * quadratic


class FedDyn(Strategy):
    name = "feddyn"
    paper = "Acar et al., ICLR 2021"
    summary = "CE - <g_k, w> + alpha/2 ||w - w_t||^2 per client; the server corrects the mean by -h/alpha."
    Params = FedDynParams
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=False)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        # on the CPU, by trainable-parameter name: the server's h and each client's g_k, which
        # must survive the rounds a client is not sampled (and a resumed run: state_dict)
        self.h: dict[str, torch.Tensor] = {}
        self.grads: dict[int, dict[str, torch.Tensor]] = {}

    # ------------------------------------------------------------------ client side
    def client_begin(self, client: ClientContext) -> None:
        # client.model holds the global weights here; every client declares the same names
        # and shapes (a client not seen before: zeros)
        own = self.grads.get(client.client_id)
        client.own(
            "grad",
            {
                n: torch.zeros_like(p) if own is None else own[n].to(client.device)
                for n, p in trainable(client.model).items()
            },
        )

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        term = dynamic_term(ctx.params, ctx.global_params, ctx.own["grad"], self.params.alpha)
        return batch.ce() + term

    @torch.no_grad()
    def client_end(self, client: ClientContext) -> dict:
        # client.model: the trained weights; client.global_model: a frozen copy of the weights it
        # received (frozen: its parameters are read by name, not by requires_grad)
        trained, sent = trainable(client.model), dict(client.global_model.named_parameters())
        old = self.grads.get(client.client_id)
        self.grads[client.client_id] = {
            n: (torch.zeros_like(p, device="cpu") if old is None else old[n])
            - self.params.alpha * (p - sent[n]).cpu()
            for n, p in trained.items()
        }
        return {}  # nothing uploaded besides the weights

    # ------------------------------------------------------------------ server side
    @torch.no_grad()
    def aggregate(
        self, round: int, global_model, updates: list[ClientUpdate]
    ) -> dict[str, torch.Tensor]:
        # global_model is still w^{t-1}, the weights the clients received: the engine loads the
        # returned state only after this call
        alpha, sent = self.params.alpha, trainable(global_model)
        mean = weighted_average([u.state for u in updates], self.client_weights(updates))
        for n, w in sent.items():
            drift = sum(u.state[n].double().cpu() - w.double().cpu() for u in updates)
            h = self.h.get(n, torch.zeros_like(w, dtype=torch.float64, device="cpu"))
            self.h[n] = h - alpha / self.ctx.num_clients * drift
            mean[n] = (mean[n].double() - self.h[n].to(mean[n].device) / alpha).to(mean[n].dtype)
        return mean

    @torch.no_grad()
    def server_update(self, round, global_model, updates) -> dict:
        # runs after the new global weights are loaded: here only h's size, as a round metric
        norm = torch.sqrt(sum(h.pow(2).sum() for h in self.h.values()))
        return {"h_norm": float(norm)}

    def state_dict(self) -> dict:
        return {
            "h": {n: t.clone() for n, t in self.h.items()},
            "grads": {int(k): {n: t.clone() for n, t in g.items()} for k, g in self.grads.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.h = {n: t.cpu().clone() for n, t in state["h"].items()}
        self.grads = {
            int(k): {n: t.cpu().clone() for n, t in g.items()} for k, g in state["grads"].items()
        }
