"""The interface every federated model shares: a backbone, an optional projection head, a classifier.

Distillation and contrastive methods need the penultimate representation as well as the logits, so
every model exposes ``features`` (what the classifier sees) next to ``forward``.
"""

from __future__ import annotations

import torch
from torch import nn

from fedkd.models.heads import ProjectionHead


class FedModel(nn.Module):
    """Base class: subclasses build their layers, implement ``backbone_features`` and call
    ``_attach_head`` last, which adds the optional projection head and the classifier."""

    # whether the batched trainer may fold K copies into one network (fedkd.engine.folding): the
    # model's forward code uses only its layers, element-wise ops, pooling and means
    foldable: bool = False
    feature_dim: int  # size of the vector the classifier sees
    num_classes: int
    classifier: nn.Linear  # the last layer ("head")
    projection: ProjectionHead | None

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's output vector, before any projection head."""
        raise NotImplementedError

    def _attach_head(self, backbone_dim: int, num_classes: int, projection_head: bool) -> None:
        if projection_head:
            self.projection = ProjectionHead(backbone_dim)
            self.feature_dim = self.projection.out_dim
        else:
            self.projection = None
            self.feature_dim = backbone_dim
        self.backbone_dim = backbone_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(self.feature_dim, num_classes)

    def block_norm_parameters(self) -> set[str]:
        """The parameters ``weight_decay_exempt: block-norms`` spares (fedkd.run_choices): the
        ResNets' stem and block norms; the other models have none."""
        return set()

    def reset_classifier_normal(self) -> None:
        """The classifier's weights from N(0, 0.01), its bias zero (``classifier_init:
        normal``, fedkd.run_choices)."""
        nn.init.normal_(self.classifier.weight, std=0.01)
        nn.init.zeros_(self.classifier.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The penultimate representation (after the projection head when there is one)."""
        h = self.backbone_features(x)
        return self.projection(h) if self.projection is not None else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def features_and_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both outputs from one pass, so methods that need both do not run the backbone twice."""
        f = self.features(x)
        return f, self.classifier(f)


def image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    """Check that an image model got (C, H, W) and return it as ints."""
    if len(input_shape) != 3:
        raise ValueError(f"model {model!r} needs input_shape=(C, H, W), got {tuple(input_shape)}")
    return tuple(int(s) for s in input_shape)
