"""A DistilBERT sequence classifier behind the FedModel interface.

Pretrained weights are used only when they are already on disk (``local_files_only``), so runs
never depend on the network; otherwise a small randomly initialised DistilBERT is built. The head
follows DistilBertForSequenceClassification: [CLS] state -> Linear(dim, dim) -> ReLU -> dropout
-> classifier.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from fedkd.models.base import FedModel

# A small encoder that trains from scratch on a CPU in reasonable time.
SMALL_CONFIG = {
    "n_layers": 2,
    "dim": 64,
    "hidden_dim": 128,
    "n_heads": 2,
    "max_position_embeddings": 128,
}


def small_config(vocab_size: int, pad_id: int, seq_len: int | None, overrides: dict | None):
    """The DistilBertConfig used when no pretrained weights are loaded."""
    from transformers import DistilBertConfig

    settings = dict(SMALL_CONFIG)
    if seq_len is not None:  # make room for the dataset's sequence length
        settings["max_position_embeddings"] = max(settings["max_position_embeddings"], seq_len)
    settings.update(vocab_size=vocab_size, pad_token_id=pad_id)
    if overrides:
        known = set(DistilBertConfig().to_dict())
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"unknown text_config keys {unknown}; valid keys include {sorted(SMALL_CONFIG)}"
            )
        settings.update(overrides)
    return DistilBertConfig(**settings)


def load_pretrained(pretrained: str):
    """The pretrained encoder if its files are available locally, else None (with a warning)."""
    from transformers import DistilBertModel

    try:
        return DistilBertModel.from_pretrained(pretrained, local_files_only=True)
    except Exception as exc:  # missing files, wrong format, no cache: all mean "build from config"
        warnings.warn(
            f"pretrained DistilBERT {pretrained!r} is not available locally ({type(exc).__name__}); "
            "using a randomly initialised small DistilBERT instead",
            stacklevel=3,
        )
        return None


class DistilBertClassifier(FedModel):
    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        *,
        vocab_size: int | None = None,
        pad_id: int = 0,
        pretrained: str | None = None,
        text_config: dict | None = None,
        projection_head: bool = False,
    ):
        super().__init__()
        from transformers import DistilBertModel

        if len(input_shape) != 1:
            raise ValueError(f"model 'distilbert' needs input_shape=(L,), got {tuple(input_shape)}")
        seq_len = int(input_shape[0])
        encoder = load_pretrained(pretrained) if pretrained else None
        if encoder is None:
            if vocab_size is None:
                raise ValueError("model 'distilbert' without pretrained weights needs vocab_size")
            encoder = DistilBertModel(small_config(vocab_size, pad_id, seq_len, text_config))
        config = encoder.config
        if vocab_size is not None and vocab_size > config.vocab_size:
            raise ValueError(
                f"vocab_size={vocab_size} exceeds the pretrained model's vocabulary of "
                f"{config.vocab_size}; tokenise with the model's own tokenizer"
            )
        if seq_len > config.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_position_embeddings="
                f"{config.max_position_embeddings}; truncate the token ids"
            )
        self.pad_id = pad_id
        self.encoder = encoder
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self._attach_head(config.dim, num_classes, projection_head)

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        mask = x != self.pad_id
        mask[:, 0] = True  # an all-padding row would otherwise attend to nothing and give NaN
        hidden = self.encoder(input_ids=x, attention_mask=mask.long()).last_hidden_state
        return self.dropout(torch.relu(self.pre_classifier(hidden[:, 0])))
