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
    channels: tuple[int, int] | list[int] | None = None,
    hidden: int | None = None,
    head_init: str = "default",
    classifier_init: str = "pytorch",
) -> FedModel:
    """Build a model by name. ``norm`` applies to the ResNets; the text options to distilbert.

    Image models take input_shape=(C, H, W); distilbert takes (L,) int64 token ids.
    Initialisation draws from torch's global RNG, so it is fixed by ``torch.manual_seed``.
    ``channels``/``hidden`` narrow the cnn. ``head_init="he"`` re-initialises the projection
    head He-normal (zero biases) instead of PyTorch's default uniform init: two extra linear
    layers at default init shrink the signal enough that, on one- or two-class clients at
    lr 0.05, the model can stay at chance for many rounds (a stand-in-scale setting; the
    papers' runs use the default). ``classifier_init="normal"`` draws the classifier from
    N(0, 0.01) with zero bias instead of nn.Linear's own init (fedkd.run_choices).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}")
    if int(num_classes) < 1:
        raise ValueError(f"num_classes={num_classes} must be at least 1")
    input_shape = tuple(int(s) for s in input_shape)
    if head_init not in ("default", "he"):
        raise ValueError(f"head_init={head_init!r} is unknown; use 'default' or 'he'")
    if classifier_init not in ("pytorch", "normal"):
        raise ValueError(
            f"classifier_init={classifier_init!r} is unknown; use 'pytorch' or 'normal'"
        )
    if name != "cnn" and (channels is not None or hidden is not None):
        raise ValueError(
            f"model options channels/hidden apply to the cnn only, not to {name!r}; drop them"
        )
    model = _build(
        name, num_classes, input_shape, projection_head, norm, vocab_size, pad_id, pretrained,
        text_config, channels, hidden,
    )  # fmt: skip
    # drawn before the head's re-initialisation: the order the ResNets drew them in before
    # classifier_init existed, so "normal" gives their former initial weights again
    if classifier_init == "normal":
        model.reset_classifier_normal()
    if head_init == "he" and model.projection is not None:
        model.projection.reset_he()
    return model


def _build(
    name, num_classes, input_shape, projection_head, norm, vocab_size, pad_id, pretrained,
    text_config, channels, hidden,
) -> FedModel:  # fmt: skip

    if name in ("resnet8", "resnet50"):
        from fedkd.models import resnet

        build = resnet.resnet8 if name == "resnet8" else resnet.resnet50
        return build(num_classes, input_shape, norm=norm, projection_head=projection_head)
    if name == "cnn":
        from fedkd.models.cnn import FedAvgCNN

        narrow = {"channels": tuple(channels)} if channels is not None else {}
        if hidden is not None:
            narrow["hidden"] = int(hidden)
        return FedAvgCNN(num_classes, input_shape, projection_head=projection_head, **narrow)
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
