"""FedProx (Li et al., 2020): a proximal term keeps local weights near the global ones."""

from dataclasses import dataclass

import torch

from fedkd.strategies._paper_setting import paper_setting
from fedkd.strategies.base import ClientContext, LocalBatch, Strategy

# fedgkd Sec. 5.1: mu 0.01 on CIFAR-10, 0.001 on CIFAR-100, Tiny-ImageNet and the text sets
MU = {"cifar10": 0.01}


@dataclass
class FedProxParams:
    mu: float = 0.01


def proximal_term(model: torch.nn.Module, anchor: torch.nn.Module) -> torch.Tensor:
    """||w - w_t||^2 over the trainable parameters."""
    return sum(
        (p - q).pow(2).sum() for p, q in zip(model.parameters(), anchor.parameters(), strict=True)
    )


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

    def local_loss(self, batch: LocalBatch, client: ClientContext) -> torch.Tensor:
        prox = proximal_term(client.model, client.global_model)
        return batch.ce() + 0.5 * self.params.mu * prox
