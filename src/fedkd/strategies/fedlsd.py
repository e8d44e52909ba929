"""FedLSD (Lee et al., 2021; the constant-weight baseline of FedCAD): local self-distillation.

    L = (1 - a) CE(y, p) + a * CE(softmax(z_g / T), softmax(z / T)),   teacher = frozen global model

Neither FedCAD nor its description of FedLSD gives a or T. Choices (both are parameters):
- a = 0.5: FedCAD obtains FedLSD by setting its bounds equal (gamma = beta = C); taking C = FedCAD's
  upper bound gamma = 0.5 makes fedlsd "fedcad trusting the teacher on every class", so the two
  differ only by FedCAD's class-wise down-weighting.
- T = 1: the temperature of the shipped FedNTD config by the same authors (and of FedGKD's code).
"""

from dataclasses import dataclass

from fedkd.strategies._params import CheckedParams, above, ranged, within
from fedkd.strategies._selfdistill import SelfDistillStrategy


@dataclass
class FedLSDParams(CheckedParams):
    # a: weight of the distillation term, CE gets 1 - a
    distill_weight: float = ranged(0.5, within(0, 1))
    temperature: float = ranged(1.0, above(0))


class FedLSD(SelfDistillStrategy):
    name = "fedlsd"
    paper = "Lee et al., arXiv 2106.03097v1 (2021), as the constant-weight baseline of FedCAD"
    summary = "(1 - a) CE + a CE(softened global probs, local probs), constant a = 0.5, T = 1."
    Params = FedLSDParams

    def sample_weights(self, batch, client):
        return self.params.distill_weight
