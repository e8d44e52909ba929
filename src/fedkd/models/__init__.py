"""Model zoo: every model is a FedModel exposing ``features``, ``classifier`` and ``feature_dim``."""

from __future__ import annotations

from fedkd.models.base import FedModel
from fedkd.models.heads import PROJECTION_DIM, ProjectionHead

MODELS = ("resnet8", "resnet50", "cnn", "distilbert")

__all__ = ["MODELS", "PROJECTION_DIM", "FedModel", "ProjectionHead", "build_model"]


def build_model(
    name: str,
    num_classes: int,
    input_shape: tuple[int, ...],
    *,
    projection_head: bool = False,
    norm: str = "group",
    vocab_size: int | None = None,
    pad_id: int = 0,
    pretrained: str | None = None,
    text_config: dict | None = None,
) -> FedModel:
    """Build a model by name. ``norm`` applies to the ResNets; the text options to distilbert.

    Image models take input_shape=(C, H, W); distilbert takes (L,) int64 token ids.
    Initialisation draws from torch's global RNG, so it is fixed by ``torch.manual_seed``.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}")
    if int(num_classes) < 1:
        raise ValueError(f"num_classes={num_classes} must be at least 1")
    input_shape = tuple(int(s) for s in input_shape)

    if name in ("resnet8", "resnet50"):
        from fedkd.models import resnet

        build = resnet.resnet8 if name == "resnet8" else resnet.resnet50
        return build(num_classes, input_shape, norm=norm, projection_head=projection_head)
    if name == "cnn":
        from fedkd.models.cnn import FedAvgCNN

        return FedAvgCNN(num_classes, input_shape, projection_head=projection_head)
    # Imported lazily: transformers takes seconds to import and only text runs need it.
    from fedkd.models.text import DistilBertClassifier

    return DistilBertClassifier(
        num_classes,
        input_shape,
        vocab_size=vocab_size,
        pad_id=pad_id,
        pretrained=pretrained,
        text_config=text_config,
        projection_head=projection_head,
    )
