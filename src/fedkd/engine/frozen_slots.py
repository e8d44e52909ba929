"""The batched trainer's declared frozen models (``fedkd.engine.batched``): a per-client model
folded over the K clients' own weights, or one model shared by all clients, run unfolded."""

from __future__ import annotations

import copy

import torch

from fedkd.engine.flat_params import FlatParams
from fedkd.engine.folding import bind, fill_norm_buffers


class FrozenSlot:
    """A declared per-client frozen model, folded, over the K clients' own weights (and their
    BatchNorm statistics)."""

    def __init__(self, student_folded, named, k, kinds, dtype, device):
        self.params = FlatParams(named, k, kinds, dtype, device)
        self.model = copy.deepcopy(student_folded).eval()
        bind(self.model, self.params.folded, requires_grad=False)

    def fill(self, states: list[dict[str, torch.Tensor]]) -> None:
        """Client c's model := ``states[c]`` (a state dict), in place."""
        self.params.fill_rows(states)
        fill_norm_buffers(self.model, states)

    def outputs(self, x_folded: torch.Tensor, k: int):
        """(features, logits) per client, (K, B, ...), of the folded images (B, K*C, H, W)."""
        return per_client(*self.model.features_and_logits(x_folded), k)


class SharedSlot:
    """A declared frozen model shared by all clients, unfolded: one copy of its weights run once
    on the K clients' batches stacked along the batch. Folded, its weights would be repeated K
    times in grouped layers, and cuDNN ran each grouped convolution of the folded network as K
    kernels, one per client, several times slower per image than the unfolded convolution
    (docs/results.md, h200-conv-kernels-612a5e0)."""

    def __init__(self, worker: torch.nn.Module):
        self.model = copy.deepcopy(worker).eval().requires_grad_(False)
        self.params = dict(self.model.named_parameters())

    def fill(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s weights and buffers in place (a captured graph reads these tensors)."""
        with torch.no_grad():
            for n, p in model.named_parameters():
                self.params[n].copy_(p)
            for n, b in model.named_buffers():
                self.model.get_buffer(n).copy_(b)

    def outputs(self, stacked: torch.Tensor, k: int):
        """(features, logits) per client, (K, B, ...), of the stacked images (K*B, C, H, W)."""
        features, logits = self.model.features_and_logits(stacked)
        return features.view(k, -1, *features.shape[1:]), logits.view(k, -1, *logits.shape[1:])


def per_client(features: torch.Tensor, logits: torch.Tensor, k: int):
    """The folded network's outputs as (K, B, ...): linear outputs already are; pooled features
    (B, K*F) become a transposed view."""
    if features.dim() == 2:
        features = features.view(features.shape[0], k, -1).transpose(0, 1)
    return features, logits
