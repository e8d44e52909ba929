"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning.

Local loss = CE + mu * l_con, with

    l_con = -log( e^{sim(z, z_glob)/tau} / (e^{sim(z, z_glob)/tau} + e^{sim(z, z_prev)/tau}) )

on the projection-head features: z of the model being trained, z_glob of the received global
model (positive), z_prev of the client's own previous local model (negative); sim is the cosine.

Each client's previous local model is per-client state kept by the strategy (on the CPU) and saved
in every checkpoint; it never crosses the network, so MOON costs no bytes beyond FedAvg's.

First participation: a client that has not trained before has no previous local model, and the
paper does not say what the negative is then. ``first_negative`` selects each published answer:

- ``none`` (default): no negative, so no contrastive term. The code behind the FedGKD paper's MOON
  numbers (CGCL-codes/FedGKD at 72e7bac, pcode/workers/worker_moon.py): the term is skipped in
  round 1, and a client whose buffer of previous models is empty contrasts against no negative,
  a cross-entropy over the positive logit alone, which is 0. MOON's own code does the same in
  round 1.
- ``global``: the received global model is the negative, so positive and negative coincide and
  the term is the constant log 2 with exactly zero gradient (``model_contrastive_loss``): the
  updates of ``none``, with ``mu * log 2`` more in the recorded training loss (what fedkd did
  before this parameter existed).
- ``initial``: the initial global model (before round 1) is the negative. The FedNTD authors'
  code (Lee-Gihun/FedNTD at fd7e20c, algorithms/moon/Server.py ``_init_prev_locals``: every
  client's previous weights start as the initial server weights; ClientTrainer.py at b7af303
  loads them as ``prev_model``). In round 1 it equals the received model: log 2, no gradient.
- ``own-init``: MOON's own code (QinbinLi/MOON at 2f7199e, main.py): no negative in round 1 (the
  pool of previous models is still empty), and from round 2 on a client that has not trained yet
  contrasts against its own random initialisation (``init_nets`` draws each client's network
  separately and only sampled clients receive the global weights), an artefact of that code's
  full-participation default. Here each client's initialisation is drawn from a seed derived from
  the run seed and the client id, so it is the same in every round and after a resume.

The FedGKD paper reports MOON from its own code and says nothing of this case, hence the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedkd.runtime.seeding import derive_seed
from fedkd.strategies._paper_setting import paper_setting
from fedkd.strategies._params import CheckedParams, above, at_least, chosen, ranged
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Strategy, Traits

# fedgkd Sec. 5.1: mu 5 on CIFAR-10 and CIFAR-100, 1 on Tiny-ImageNet, 0.1 on the text sets
MU = {"tinyimagenet": 1.0, "text": 0.1}
COSINE_EPS = 1e-8  # F.cosine_similarity's default


@dataclass
class MoonParams(CheckedParams):
    mu: float = ranged(5.0, at_least(0))  # weight of the contrastive term
    # temperature of the cosine similarities (MOON's default, fedgkd Sec. 5.1)
    tau: float = ranged(0.5, above(0))
    # the negative of a client's first participation (the module's docstring)
    first_negative: str = chosen(
        "none",
        {
            "none": "no negative, the FedGKD code",
            "global": "the received global model",
            "initial": "the initial global model, FedNTD's code",
            "own-init": "the client's own initialisation, MOON's code",
        },
    )


def model_contrastive_loss(
    z: torch.Tensor,
    z_pos: torch.Tensor,
    z_neg: torch.Tensor,
    tau: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """MOON's l_con: a two-way softmax cross-entropy whose target is the positive pair, MOON's
    CE([pos, neg] / tau, label 0) with pos and neg the cosines of z to z_pos and to z_neg.

    Written as softplus((neg - pos) / tau), the same function, with neg - pos computed as
    unit(z) . (unit(z_neg) - unit(z_pos)) (``F.cosine_similarity``'s normalisation): where the
    negative equals the positive (a client's first round under ``global`` and ``initial``) the
    difference vector is exactly zero, and so is the gradient with respect to z. Computed as two
    cosines (as logsumexp or as the cross-entropy alike), each sends z a gradient and their sum
    keeps a rounding residue (up to 1e-9 in float32), which training then amplifies."""
    unit_z = _unit(z)
    gap = (unit_z * (_unit(z_neg.detach()) - _unit(z_pos.detach()))).sum(dim=1)  # neg - pos
    per_sample = F.softplus(gap / tau)
    if reduction == "none":
        return per_sample
    if reduction == "mean":
        return per_sample.mean()
    raise ValueError(f"reduction={reduction!r}; use 'mean' or 'none'")


def _unit(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| per row, the norm clamped at F.cosine_similarity's eps."""
    return x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(COSINE_EPS)


class Moon(Strategy):
    name = "moon"
    paper = "Li, He and Song, CVPR 2021"
    summary = (
        "CE + mu * model-contrastive loss on projection-head features (positive: global model, "
        "negative: the client's previous local model); tau 0.5; mu 5 / 5 / 1 / 0.1 on "
        "CIFAR-10 / CIFAR-100 / Tiny-ImageNet / NLP."
    )
    Params = MoonParams
    # the FedGKD paper's MOON numbers came from its own code (CGCL-codes/FedGKD), which has no
    # negative on a client's first participation
    code_choices = {"first_negative": "none"}
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=True)
    uses_projection_head = True

    @classmethod
    def dataset_defaults(cls, dataset, model):
        return {"mu": MU.get(paper_setting(dataset), 5.0)}

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.previous: dict[int, dict[str, torch.Tensor]] = {}  # client id -> CPU state dict
        self.initial: dict[str, torch.Tensor] | None = None  # first_negative="initial"

    def client_begin(self, client: ClientContext) -> None:
        rule = self.params.first_negative
        if rule == "initial" and self.initial is None and client.round == 0:
            self.initial = _cpu_state(client.global_model)  # round 1 receives the initial model
        state = self.previous.get(client.client_id)
        contrast = 1.0
        if state is None:
            state = self._first_negative(client, rule)
            if state is None:  # the received global model stands in, or there is no negative
                contrast = 1.0 if rule == "global" else 0.0
                state = client.global_model.state_dict()
        client.share_model("global", client.global_model)
        client.own_model("previous", state)
        # 0: no negative, so no contrastive term; every client of a round declares the same
        # names, and mu * 0 * l_con adds exactly nothing to the loss or its gradient
        client.own("contrast", contrast)

    def _first_negative(self, client: ClientContext, rule: str) -> dict | None:
        """The negative's weights for a client without a previous model; None: the received
        global model (``global``) or no negative (``none``, and ``own-init`` in round 1)."""
        if rule == "initial":
            if self.initial is None:
                raise RuntimeError(
                    "moon: first_negative='initial' needs the initial global model, which this "
                    "run's checkpoint does not hold; restart the run from round 0"
                )
            return self.initial
        if rule == "own-init" and client.round > 0:
            seed = derive_seed(self.ctx.spec.seed, "moon-own-init", client.client_id)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return _cpu_state(client.build_model())
        return None

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        z_glob = ctx.outputs["global"].features
        z_prev = ctx.outputs["previous"].features
        con = model_contrastive_loss(batch.features, z_glob, z_prev, self.params.tau, "none")
        return batch.ce() + self.params.mu * ctx.own["contrast"] * batch.mean(con)

    def client_end(self, client: ClientContext) -> dict:
        # stays on the client: stored, not uploaded
        self.previous[client.client_id] = _cpu_state(client.model)
        return {}

    def state_dict(self) -> dict:
        state = {"previous": self.previous}
        if self.initial is not None:
            state["initial"] = self.initial
        return state

    def load_state_dict(self, state: dict) -> None:
        self.previous = {
            int(cid): {k: v.to("cpu") for k, v in s.items()}
            for cid, s in state.get("previous", {}).items()
        }
        initial = state.get("initial")
        self.initial = None if initial is None else {k: v.to("cpu") for k, v in initial.items()}


def _cpu_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
