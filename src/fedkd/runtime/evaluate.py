"""Top-1 accuracy, mean loss and per-class accuracy of a model on a split."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Evaluation batch size. On a CPU small batches keep the activations in cache and evaluate
# faster (docs/results.md#cpu-eval-batches); on accelerators, large batches (unmeasured).
CPU_EVAL_BATCH, DEVICE_EVAL_BATCH = 64, 1000


@torch.no_grad()
def evaluate(model, split, preprocess, num_classes: int, batch_size: int | None = None) -> dict:
    if batch_size is None:
        batch_size = CPU_EVAL_BATCH if split.y.device.type == "cpu" else DEVICE_EVAL_BATCH
    was_training = model.training
    model.eval()
    n = len(split)
    loss_sum = torch.zeros((), dtype=torch.float64, device=split.y.device)
    correct = torch.zeros(num_classes, dtype=torch.float64, device=split.y.device)
    for start in range(0, n, batch_size):
        x = preprocess(split.x[start : start + batch_size], train=False)
        y = split.y[start : start + batch_size]
        logits = model(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").double()
        hits = (logits.argmax(1) == y).double()
        correct.index_add_(0, y, hits)
    total = torch.bincount(split.y, minlength=num_classes).double()
    model.train(was_training)
    class_acc = torch.where(total > 0, correct / total.clamp(min=1), torch.nan)
    return {
        "acc": float(correct.sum() / n),
        "loss": float(loss_sum / n),
        "class_acc": class_acc.cpu().tolist(),
    }
