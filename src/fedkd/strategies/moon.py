"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning.

Local loss = CE + mu * l_con, with

    l_con = -log( e^{sim(z, z_glob)/tau} / (e^{sim(z, z_glob)/tau} + e^{sim(z, z_prev)/tau}) )

on the projection-head features: z of the model being trained, z_glob of the received global
model (positive), z_prev of the client's own previous local model (negative); sim is the cosine.

Each client's previous local model is per-client state kept by the strategy (on the CPU) and saved
in every checkpoint; it never crosses the network, so MOON costs no bytes beyond FedAvg's.

First participation: MOON's code has no previous model in round 1 (its pool is empty, so the term is
a cross-entropy over one logit: zero, no gradient), and with partial participation a client that
joins later contrasts against its own, separately drawn, random initialisation, an artefact of that
code's full-participation default. Here the negative is then the received global model: the term is
the constant log 2 and adds no gradient, which is MOON's round-1 behaviour for every first joiner.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedkd.strategies._paper_setting import paper_setting
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Strategy, Traits

# fedgkd Sec. 5.1: mu 5 on CIFAR-10 and CIFAR-100, 1 on Tiny-ImageNet, 0.1 on the text sets
MU = {"tinyimagenet": 1.0, "text": 0.1}


@dataclass
class MoonParams:
    mu: float = 5.0  # weight of the contrastive term
    tau: float = 0.5  # temperature of the cosine similarities (MOON's default, fedgkd Sec. 5.1)


def model_contrastive_loss(
    z: torch.Tensor,
    z_pos: torch.Tensor,
    z_neg: torch.Tensor,
    tau: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """MOON's l_con: a two-way softmax cross-entropy whose target is the positive pair.

    Written as logsumexp(pos, neg) - pos, i.e. MOON's CE([pos, neg] / tau, label 0)."""
    pos = F.cosine_similarity(z, z_pos.detach(), dim=1) / tau
    neg = F.cosine_similarity(z, z_neg.detach(), dim=1) / tau
    per_sample = torch.logsumexp(torch.stack([pos, neg], dim=1), dim=1) - pos
    if reduction == "none":
        return per_sample
    if reduction == "mean":
        return per_sample.mean()
    raise ValueError(f"reduction={reduction!r}; use 'mean' or 'none'")


class Moon(Strategy):
    name = "moon"
    paper = "Li, He and Song, CVPR 2021"
    summary = (
        "CE + mu * model-contrastive loss on projection-head features (positive: global model, "
        "negative: the client's previous local model); tau 0.5; mu 5 / 5 / 1 / 0.1 on "
        "CIFAR-10 / CIFAR-100 / Tiny-ImageNet / NLP."
    )
    Params = MoonParams
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=True)
    uses_projection_head = True

    @classmethod
    def dataset_defaults(cls, dataset, model):
        return {"mu": MU.get(paper_setting(dataset), 5.0)}

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.previous: dict[int, dict[str, torch.Tensor]] = {}  # client id -> CPU state dict

    def client_begin(self, client: ClientContext) -> None:
        client.share_model("global", client.global_model)
        # first participation: the global model stands in for the previous one
        state = self.previous.get(client.client_id) or client.global_model.state_dict()
        client.own_model("previous", state)

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        z_glob = ctx.outputs["global"].features
        z_prev = ctx.outputs["previous"].features
        con = model_contrastive_loss(batch.features, z_glob, z_prev, self.params.tau, "none")
        return batch.ce() + self.params.mu * batch.mean(con)

    def client_end(self, client: ClientContext) -> dict:
        # stays on the client: stored, not uploaded
        self.previous[client.client_id] = {
            k: v.detach().to("cpu", copy=True) for k, v in client.model.state_dict().items()
        }
        return {}

    def state_dict(self) -> dict:
        return {"previous": self.previous}

    def load_state_dict(self, state: dict) -> None:
        self.previous = {
            int(cid): {k: v.to("cpu") for k, v in s.items()}
            for cid, s in state.get("previous", {}).items()
        }
