"""Loss terms shared by several strategies, as pure functions of tensors (testable alone)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 1.0,
    reduction: str = "batchmean",
) -> torch.Tensor:
    """T^2 * KL(softmax(t/T) || softmax(s/T)); ``reduction="none"`` gives one value per sample.

    This is the distillation term of the FedGKD authors' code (batch mean, T = 1 there)."""
    t = temperature
    log_p_student = F.log_softmax(student_logits / t, dim=1)
    log_p_teacher = F.log_softmax(teacher_logits.detach() / t, dim=1)
    per_sample = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=1) * t * t
    if reduction == "none":
        return per_sample
    if reduction == "batchmean":
        return per_sample.mean()
    raise ValueError(f"reduction={reduction!r}; use 'batchmean' or 'none'")


def soft_cross_entropy(student_logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample CE(target distribution, student): -sum_k q_k log p_k."""
    return -(target_probs.detach() * F.log_softmax(student_logits, dim=1)).sum(dim=1)


@torch.no_grad()
def frozen_outputs(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, logits) of a frozen teacher, without building a graph."""
    return model.features_and_logits(x)
