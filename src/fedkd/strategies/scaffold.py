"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates, as in NIID-Bench.

Server control variate c and one c_i per client (zero until the client first trains). Locally
every step follows g + c - c_i; afterwards (option II, K local steps at local lr eta_l)

    c_i+ = c_i - c + (x - y_i) / (K eta_l),     upload Δy_i = y_i - x and Δc_i = c_i+ - c_i.

Server: x += server_lr * (weighted mean of Δy_i);  c += |S|/N * mean(Δc_i).

Choices where the sources differ or are silent:
- The correction enters as a loss term whose gradient is c - c_i, so it goes through the
  engine's optimizer like the gradient it corrects: weight decay still acts on the weights alone,
  momentum and clipping see the corrected gradient. NIID-Bench instead subtracts
  lr * (c - c_i) after each plain step; with momentum 0 and no clipping the two coincide.
- K in option II is the number of steps only for plain SGD: (x - y_i) / (K eta_l) is the mean
  corrected gradient because plain SGD moves lr * g per step. With momentum rho the weights move
  eta_l * a per unit gradient, a = (K - rho (1 - rho^K) / (1 - rho)) / (1 - rho) (FedNova's a_i),
  so K is replaced by a; a = K at rho = 0 (NIID-Bench's default). The FedNTD authors' SCAFFOLD
  divides by the same a (their config/scaffold.json sets adaptive_divison). Dividing by K under the
  engine's momentum 0.9 overstates c_i up to 1/(1 - rho)-fold (a/K -> 1/(1 - rho) as K grows);
  on mnist5k that sent the model to chance accuracy by round 3.
  With Adam (the NLP setting) the corrected gradient goes through Adam's scaling and K is used
  as is; SCAFFOLD's analysis does not cover that case.
- The mean of Δy_i uses the engine's client weights (uniform for equal-size partitions, n_k
  otherwise, which is NIID-Bench's weighting) with server_lr 1 as in NIID-Bench.
- c moves by |S|/N times the mean Δc_i, as in the paper (keeps c = mean of all c_i); NIID-Bench
  adds the plain mean, which is the same under full participation.
- Control variates cover the trainable parameters only (NIID-Bench also applies them to buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedkd.strategies._local_steps import effective_steps, local_momentum
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
class ScaffoldParams(CheckedParams):
    server_lr: float = ranged(1.0, above(0))  # eta_g; NIID-Bench and the paper's experiments use 1


def control_variate_term(
    params: list[torch.Tensor], corrections: list[torch.Tensor]
) -> torch.Tensor:
    """sum_p <p - stopgrad(p), corr_p>: the value is exactly 0 (the reported loss stays the
    task loss) and the gradient with respect to each p is exactly corr_p (= c - c_i)."""
    total = torch.zeros((), device=params[0].device)
    for p, corr in zip(params, corrections, strict=True):
        total = total + ((p - p.detach()) * corr).sum()
    return total


def option2_delta(
    x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, steps: float, lr: float
) -> torch.Tensor:
    """Δc_i = c_i+ - c_i = (x - y_i) / (K lr) - c  (option II, c_i cancels); ``steps`` is K,
    or its momentum-corrected count a for SGD with momentum."""
    return (x - y) / (steps * lr) - c


class Scaffold(Strategy):
    name = "scaffold"
    paper = "Karimireddy et al., ICML 2020 (option II, as in NIID-Bench)"
    summary = (
        "Local steps corrected by c - c_i; option II control variates; the server adds the mean "
        "update and moves c by |S|/N of the mean control-variate change."
    )
    Params = ScaffoldParams
    traits = Traits(extra_information="control variates", proxy_data=False, modifies_model=False)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        # all on CPU, keyed by trainable-parameter name: the server variate (created from the
        # first global model it sees) and the per-client ones, which must survive rounds
        self.c: dict[str, torch.Tensor] = {}
        self.c_local: dict[int, dict[str, torch.Tensor]] = {}

    @property
    def names(self) -> list[str]:
        return list(self.c)

    # ------------------------------------------------------------------ client side
    def payload(self, round, global_model) -> dict:
        if not self.c:
            self.c = {
                n: torch.zeros_like(p, device="cpu")
                for n, p in global_model.named_parameters()
                if p.requires_grad
            }
        return {"c": {n: t.to(self.ctx.device) for n, t in self.c.items()}}

    def client_begin(self, client: ClientContext) -> None:
        c = client.payload["c"]
        ci = self.c_local.get(client.client_id)
        correction = {n: c[n] if ci is None else c[n] - ci[n].to(client.device) for n in self.names}
        client.own("correction", correction)

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        corr = ctx.own["correction"]
        params = [ctx.params[n] for n in self.names]
        return batch.ce() + control_variate_term(params, [corr[n] for n in self.names])

    @torch.no_grad()
    def client_end(self, client: ClientContext) -> dict:
        c = client.payload["c"]
        if client.steps == 0:
            return {"delta_c": {n: torch.zeros_like(c[n]) for n in self.names}}
        x = dict(client.global_model.named_parameters())
        y = dict(client.model.named_parameters())
        spec = self.ctx.spec
        k = effective_steps(client.steps, local_momentum(spec))
        lr = spec.lr_of_round(client.round)  # the rate the client trained at
        delta = {n: option2_delta(x[n], y[n], c[n], k, lr) for n in self.names}
        old = self.c_local.get(client.client_id)
        # the client keeps c_i+ for the next time it is sampled
        self.c_local[client.client_id] = {
            n: (delta[n].cpu() if old is None else old[n] + delta[n].cpu()) for n in self.names
        }
        return {"delta_c": delta}

    # ------------------------------------------------------------------ server side
    def aggregate(
        self, round: int, global_model, updates: list[ClientUpdate]
    ) -> dict[str, torch.Tensor]:
        # x + lr * sum_i w_i (y_i - x) = sum_i lr w_i y_i + (1 - lr) x; with lr = 1 this is
        # bit-for-bit FedAvg's average (the x term adds an exact zero)
        lr = self.params.server_lr
        w = self.client_weights(updates) * lr
        states = [u.state for u in updates] + [global_model.state_dict()]
        coef = torch.cat([w, torch.tensor([1.0 - lr], dtype=torch.float64)])
        return weighted_average(states, coef)

    @torch.no_grad()
    def server_update(self, round, global_model, updates) -> dict:
        scale = 1.0 / self.ctx.num_clients  # |S|/N * (1/|S|) sum_i
        for n in self.names:
            total = sum(u.extras["delta_c"][n].double().cpu() for u in updates)
            self.c[n] = (self.c[n].double() + scale * total).to(self.c[n].dtype)
        norm = torch.sqrt(sum(self.c[n].double().pow(2).sum() for n in self.names))
        return {"c_norm": float(norm)}

    def state_dict(self) -> dict:
        return {
            "c": {n: t.clone() for n, t in self.c.items()},
            "c_local": {
                int(cid): {n: t.clone() for n, t in ci.items()} for cid, ci in self.c_local.items()
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.c = {n: t.cpu().clone() for n, t in state["c"].items()}
        self.c_local = {
            int(cid): {n: t.cpu().clone() for n, t in ci.items()}
            for cid, ci in state["c_local"].items()
        }
