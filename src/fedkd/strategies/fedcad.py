"""FedCAD (class-wise adaptive self distillation): fedlsd with a distillation weight per class.

    L = (1 - a_y) CE(y, p) + a_y * CE(softmax(z_g / T), softmax(z / T))
    a_y = (gamma - beta)/2 * E_{x|y}[ p^g_y(x) - sum_{k != y} p^g_k(x) ] + (gamma + beta)/2

so a_y runs from beta (the global model never predicts y on class-y data) to gamma (it always
does); beta = 0.25, gamma = 0.5 (FedCAD, "Hyper-parameters"). The expectation is estimated on the
client's own data with the global model received this round, once before local training
(inputs without augmentation, p^g at the same temperature T as the loss).

Choices where the paper is silent:
- classes the client does not hold get the midpoint (gamma + beta)/2, i.e. E[phi] = 0, "no evidence";
  they never occur in the client's loss, so the value only keeps the weight vector finite;
- T = 1 (as fedlsd), distillation from the first round on.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedkd.losses import frozen_outputs
from fedkd.strategies._params import CheckedParams, above, ranged, within
from fedkd.strategies._selfdistill import SelfDistillStrategy
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext


@dataclass
class FedCADParams(CheckedParams):
    beta: float = ranged(0.25, within(0, 1))  # lower bound of the distillation weight
    gamma: float = ranged(0.5, within(0, 1))  # upper bound
    temperature: float = ranged(1.0, above(0))

    def check(self) -> None:
        if self.beta > self.gamma:
            raise ValueError(
                f"params.beta={self.beta!r} must be <= params.gamma={self.gamma!r}: beta is the "
                f"lower bound of the distillation weight, gamma the upper (equal: fedlsd)"
            )


def class_adaptive_weights(
    teacher_probs: torch.Tensor, y: torch.Tensor, num_classes: int, beta: float, gamma: float
) -> torch.Tensor:
    """a_c for every class c (FedCAD eq. 3) from the teacher's probabilities on labelled samples.

    phi(y, p) = p_y - sum_{k != y} p_k = 2 p_y - 1 (probabilities sum to one); its mean over the
    samples of class c gives a_c; classes without samples get (gamma + beta) / 2."""
    p_true = teacher_probs.gather(1, y[:, None]).squeeze(1).double()
    phi = 2.0 * p_true - 1.0
    total = torch.zeros(num_classes, dtype=torch.float64, device=y.device).index_add_(0, y, phi)
    count = torch.bincount(y, minlength=num_classes).double()
    mean_phi = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))
    return ((gamma - beta) / 2 * mean_phi + (gamma + beta) / 2).float()


class FedCAD(SelfDistillStrategy):
    name = "fedcad"
    paper = "FedCAD: class-wise adaptive self distillation for federated learning on non-IID data"
    summary = (
        "(1 - a_y) CE + a_y CE(softened global probs, local probs); a_y in [0.25, 0.5] from the "
        "global model's accuracy margin on the client's class-y data."
    )
    Params = FedCADParams

    @torch.no_grad()
    def client_begin(self, client: ClientContext) -> None:
        super().client_begin(client)
        data, chunk = client.data, 1000
        probs = [torch.empty(0, client.num_classes, device=data.y.device)]
        for start in range(0, len(data), chunk):
            x = client.preprocess(data.x[start : start + chunk], train=False)
            _, logits = frozen_outputs(client.global_model, x)
            probs.append(F.softmax(logits.float() / self.params.temperature, dim=1))
        weights = class_adaptive_weights(
            torch.cat(probs), data.y, client.num_classes, self.params.beta, self.params.gamma
        )
        client.own("class_weights", weights)

    def sample_weights(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        return ctx.own["class_weights"][batch.y]
