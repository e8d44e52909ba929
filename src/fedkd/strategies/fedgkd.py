"""FedGKD (Yao et al.): distil the parameter average of the last M global models into local training.

Local objective (paper Eq. 3): CE + gamma/2 * KL(h(w̄_t, x) ‖ h(w, x)), batch mean, T = 1, where
w̄_t is the uniform parameter average of the buffered global models. No distillation in the first
round: the teacher would be the random initial model (as in the authors' code).

Communication: with M = 1 the teacher is the received global model itself, so nothing extra is
sent; with M > 1 the server sends w̄_t beside w_t (2x FedAvg's traffic). In the first round, and
when gamma = 0, nothing is distilled, so nothing extra is sent.

M = 1 in the released code (``m1_teacher="initial"``): the paper's teacher with M = 1 is the current
global model w_t, which the project follows (``m1_teacher="current"``). The authors' worker
(worker_fedgkd.py) sets its teacher once, to the first model it received (``self.init_model`` at
its first ``prepare_train``), and replaces it only when M > 1 sends an average; with M = 1 every
client from round 2 on distils toward the random initial model w_0. The opt-in reproduces that: the
strategy keeps w_0 (as the worker keeps it locally, nothing is sent) and checkpoints it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedkd.losses import kd_kl
from fedkd.models.base import FedModel
from fedkd.strategies._buffer import BufferedStrategy
from fedkd.strategies._paper_setting import is_text
from fedkd.strategies._params import CheckedParams, above, at_least, chosen, ranged
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Traits

REGULARIZERS = {"kl": "the paper", "mse": "over the logits, Table 9"}


@dataclass
class FedGKDParams(CheckedParams):
    # M; 5 on CV (authors' README, best in Table 7), 1 on NLP (Sec. 4 advice)
    buffer: int = ranged(5, at_least(1))
    # 0.2 for ResNet-8 and DistilBERT, 0.1 for ResNet-50; coef = gamma / 2
    gamma: float = ranged(0.2, at_least(0))
    regularizer: str = chosen("kl", REGULARIZERS)
    temperature: float = ranged(1.0, above(0))  # KL only; the authors' MSE works on raw logits
    # the teacher at M = 1: the global model received, or the round's initial model
    m1_teacher: str = chosen(
        "current",
        {"current": "the paper", "initial": "the released code"},
    )

    def check(self) -> None:
        if self.m1_teacher == "initial" and self.buffer != 1:
            raise ValueError(
                f"params.m1_teacher='initial' applies to buffer 1 only (got buffer={self.buffer}): "
                f"with M > 1 the released code distils the received average; set buffer: 1"
            )


def logit_mse(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Mean squared error between logits, averaged over classes (and the batch, unless
    ``reduction="none"``).

    The paper (Table 9) only says "MSE defined over the logit"; this is the authors' code,
    ``F.mse_loss(student_logits, teacher_logits)`` with the same coefficient gamma/2 as the KL."""
    per_sample = (student_logits - teacher_logits.detach()).pow(2).mean(dim=-1)
    return per_sample if reduction == "none" else per_sample.mean()


def gkd_regularizer(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    regularizer: str = "kl",
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """The distillation term without its coefficient: T^2 KL(teacher ‖ student) or logit MSE,
    batch mean (per sample with ``reduction="none"``)."""
    if regularizer == "kl":
        return kd_kl(
            student_logits,
            teacher_logits,
            temperature,
            "none" if reduction == "none" else "batchmean",
        )
    if regularizer == "mse":
        return logit_mse(student_logits, teacher_logits, reduction)
    raise ValueError(f"regularizer={regularizer!r}; use one of {', '.join(REGULARIZERS)}")


class FedGKD(BufferedStrategy):
    name = "fedgkd"
    paper = "Yao et al., Local-Global Knowledge Distillation in Heterogeneous FL with Non-IID Data"
    summary = (
        "CE + gamma/2 KL(teacher ‖ local), teacher = parameter average of the last M global "
        "models; gamma 0.2 (ResNet-8, DistilBERT) or 0.1 (ResNet-50); M 5 (CV) or 1 (NLP). "
        "With M = 1 the teacher is the current global model (the paper); m1_teacher=initial "
        "keeps the initial model, as the released worker code does."
    )
    Params = FedGKDParams
    # the teacher at M = 1: the paper's received global model; the released worker code keeps
    # the initial one
    code_choices = {"m1_teacher": "current"}
    # fedgkd Table 1: no extra information, no proxy data, no model modification
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=False)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        # m1_teacher="initial": w_0 as received in the first round (CPU), kept for the whole run
        self.initial_state: dict[str, torch.Tensor] | None = None

    @classmethod
    def dataset_defaults(cls, dataset, model):
        return {
            "gamma": 0.1 if model == "resnet50" else 0.2,
            "buffer": 1 if is_text(dataset) else 5,
        }

    @property
    def coef(self) -> float:
        return 0.5 * self.params.gamma

    def distils(self, round: int) -> bool:
        # round is 0-based: the first round has only the random initial model as teacher
        return round > 0 and self.coef > 0

    def payload(self, round: int, global_model: FedModel) -> dict:
        if self.params.m1_teacher == "initial" and self.initial_state is None:
            self.initial_state = {
                k: v.detach().to("cpu", copy=True) for k, v in global_model.state_dict().items()
            }
        # with one buffered model, w̄_t is the global model being sent anyway
        if not self.distils(round) or len(self.buffer) == 1:
            return {}
        return {"teacher": self.buffer.mean()}

    def client_begin(self, client: ClientContext) -> None:
        if not self.distils(client.round):
            return  # exactly FedAvg's loss: not even a zero-weighted term is added
        if self.params.m1_teacher == "initial":  # the released code: w_0 stays the teacher
            teacher = self.teachers_from(client, [self.initial_state])[0]
        elif "teacher" in client.payload:
            teacher = self.teachers_from(client, [client.payload["teacher"]])[0]
        else:
            teacher = client.global_model  # M = 1: w̄_t = w_t
        client.share_model("teacher", teacher)

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        ce = batch.ce()
        if "teacher" not in ctx.outputs:
            return ce
        reg = gkd_regularizer(
            batch.logits,
            ctx.outputs["teacher"].logits,
            self.params.regularizer,
            self.params.temperature,
            reduction="none",
        )
        return ce + self.coef * batch.mean(reg)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.initial_state is not None:
            state["initial_state"] = self.initial_state
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        initial = state.get("initial_state")
        self.initial_state = None if initial is None else {k: v.cpu() for k, v in initial.items()}
