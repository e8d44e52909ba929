"""Local self-distillation from the received global model, shared by fedlsd and fedcad.

FedCAD (eq. 1-2) trains each client on

    L = (1 - a_y) CE(y, p) + a_y * CE(p^g_T, p_T),    p^g_T = softmax(z_g / T), p_T = softmax(z / T)

where the teacher is the frozen global model received this round. FedLSD is the special case of a
constant a (FedCAD: "gamma = beta = C ... degrades to FedLSD"); FedCAD makes a depend on the class y.
Both papers apply the temperature to teacher and student alike and, as written in FedCAD, the soft
term has no T^2 factor (with the default T = 1 the question does not arise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedkd.losses import soft_cross_entropy
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Strategy, Traits


def self_distill_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    y: torch.Tensor,
    weight: torch.Tensor | float,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Batch mean (per sample with ``reduction="none"``) of
    (1 - a_i) CE(y_i, p_i) + a_i CE(softmax(t_i/T), softmax(s_i/T)).

    ``weight`` is a scalar a (FedLSD) or one a_i per sample (FedCAD's a_{y_i})."""
    ce = F.cross_entropy(student_logits, y, reduction="none")
    t = temperature
    soft = soft_cross_entropy(student_logits / t, F.softmax(teacher_logits.detach() / t, dim=1))
    per_sample = (1.0 - weight) * ce + weight * soft
    return per_sample if reduction == "none" else per_sample.mean()


class SelfDistillStrategy(Strategy):
    """Clients distil the frozen global model on their own data; the server is FedAvg's.

    Subclasses say how heavily each sample is distilled (``sample_weights``). Distillation starts
    in the first round, as in the authors' code (the teacher is then the initial model)."""

    # no shared extras, no proxy data, no change to the network (FedCAD / FedLSD papers)
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=False)

    def sample_weights(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor | float:
        raise NotImplementedError

    def client_begin(self, client: ClientContext) -> None:
        client.share_model("global", client.global_model)

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        per_sample = self_distill_loss(
            batch.logits,
            ctx.outputs["global"].logits,
            batch.y,
            self.sample_weights(batch, ctx),
            self.params.temperature,
            reduction="none",
        )
        return batch.mean(per_sample)
