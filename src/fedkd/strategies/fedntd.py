"""FedNTD (Lee et al., NeurIPS 2022): not-true distillation from the received global model.

    L = CE(y, p) + beta * KL( softmax(g_nt / tau) || softmax(s_nt / tau) )

where g_nt and s_nt are the global (teacher) and local (student) logits with the true-class logit
removed, so the client keeps the global model's view of the classes it is *not* looking at and
learns its own classes freely. As in the authors' code (NTD_Loss): KL with batch mean, teacher
without gradient, distillation from the first round on; tau = 1, beta = 1 (their shipped
config/fedntd.json).

The tau^2 factor (``tau_squared``): the authors' code multiplies the KL by tau^2 in its current
version (Lee-Gihun/FedNTD at 57789c8, algorithms/fedntd/criterion.py: ``(self.tau ** 2) *
self.KLDiv(...)``) and did not in an earlier one (at 043269e: ``self.KLDiv(pred_probs,
dg_probs)``). The paper's equation (11) defines the not-true distillation loss as the KL of the
tau-softened distributions, without the factor, and its experiments use tau = 1, where both
agree; the default follows the paper (``tau_squared: false``). Elsewhere the two differ
tau^2-fold in the weight of the term.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedkd.strategies._params import CheckedParams, above, at_least, ranged
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Strategy, Traits


@dataclass
class FedNTDParams(CheckedParams):
    beta: float = ranged(1.0, at_least(0), "0: FedAvg")  # weight of the not-true distillation term
    tau: float = ranged(1.0, above(0))  # softmax temperature of both not-true distributions
    # multiply the KL by tau^2 (the authors' current code; above)
    tau_squared: bool = False


def not_true_logits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, K) logits -> (B, K-1): each row without its true-class entry, other classes in order."""
    j = torch.arange(logits.shape[1] - 1, device=logits.device)
    # column j of the result is class j below y and class j + 1 from y on (a gather: no host sync)
    return logits.gather(1, j + (j >= y[:, None]).long())


def not_true_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    y: torch.Tensor,
    tau: float = 1.0,
    tau_squared: bool = False,
    reduction: str = "mean",
) -> torch.Tensor:
    """Batch mean (per sample with ``reduction="none"``) of KL(softmax(t_nt / tau) ||
    softmax(s_nt / tau)) over the not-true classes, times tau^2 with ``tau_squared``."""
    s = not_true_logits(student_logits, y)
    t = not_true_logits(teacher_logits.detach(), y)
    log_p_t = F.log_softmax(t / tau, dim=1)
    log_p_s = F.log_softmax(s / tau, dim=1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum(dim=1)
    if tau_squared:
        kl = kl * (tau * tau)
    return kl if reduction == "none" else kl.mean()


class FedNTD(Strategy):
    name = "fedntd"
    paper = "Lee et al., NeurIPS 2022"
    summary = (
        "CE + beta KL over the not-true logits of the frozen global model; tau 1, beta 1; "
        "tau_squared: the authors' current code's tau^2 factor (off, as the paper)."
    )
    Params = FedNTDParams
    # the paper's equation has no tau^2 factor; the authors' current code has
    code_choices = {"tau_squared": False}
    # nothing shared beyond the weights, no proxy data, same network (FedNTD Appendix C)
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=False)

    def client_begin(self, client: ClientContext) -> None:
        client.share_model("global", client.global_model)

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        p = self.params
        ntd = not_true_kl(
            batch.logits, ctx.outputs["global"].logits, batch.y, p.tau, p.tau_squared, "none"
        )
        return batch.ce() + p.beta * batch.mean(ntd)
