"""FedProx (Li et al., 2020): a proximal term keeps local weights near the global ones."""

from dataclasses import dataclass

import torch

from fedkd.strategies._paper_setting import paper_setting
from fedkd.strategies._params import CheckedParams, at_least, ranged
from fedkd.strategies.base import LocalBatch, LocalContext, Strategy

# fedgkd Sec. 5.1: mu 0.01 on CIFAR-10, 0.001 on CIFAR-100, Tiny-ImageNet and the text sets
MU = {"cifar10": 0.01}


@dataclass
class FedProxParams(CheckedParams):
    mu: float = ranged(0.01, at_least(0), "0: FedAvg")


def proximal_term(params: dict[str, torch.Tensor], anchor: dict[str, torch.Tensor]) -> torch.Tensor:
    """||w - w_t||^2 over the trainable parameters (both by name)."""
    return sum((p - anchor[n]).pow(2).sum() for n, p in params.items())


class FedProx(Strategy):
    name = "fedprox"
    paper = "Li et al., MLSys 2020"
    summary = (
        "CE + mu/2 ||w - w_t||^2; mu 0.01 on CIFAR-10, 0.001 on CIFAR-100, Tiny-ImageNet and text."
    )
    Params = FedProxParams

    @classmethod
    def dataset_defaults(cls, dataset, model):
        return {"mu": MU.get(paper_setting(dataset), 0.001)}

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        prox = proximal_term(ctx.params, ctx.global_params)
        return batch.ce() + 0.5 * self.params.mu * prox
