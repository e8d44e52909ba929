"""Local SGD with momentum and weight decay as a handful of foreach kernels per step.

It performs exactly the arithmetic of ``torch.optim.SGD(foreach=True)`` (no dampening, no
Nesterov), in the same order, so weights are bit-identical (tested). It exists because any
``torch.optim`` optimizer imports ``torch._dynamo`` on construction, about 1.5 s per process:
a noticeable share of a short training job, of which a paper grid runs hundreds.
"""

from __future__ import annotations

import torch


def decay_exempt(model: torch.nn.Module, spec) -> set[str]:
    """The names of the parameters the run's ``weight_decay_exempt`` spares from weight decay
    (fedkd.run_choices): one rule for both trainers."""
    if spec.weight_decay_exempt != "block-norms":
        return set()
    return model.block_norm_parameters()


class ForeachSGD:
    """``params``: tensors, or torch's parameter groups (dicts with ``params`` and an optional
    ``weight_decay``, ``weight_decay`` otherwise): each group decays by its own factor, as in
    ``torch.optim.SGD``."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.params, decay = [], []
        for group in groups:
            kept = [p for p in group["params"] if p.requires_grad]
            self.params += kept
            decay += [float(group.get("weight_decay", weight_decay))] * len(kept)
        self.lr, self.momentum = float(lr), float(momentum)
        # the parameters of each nonzero decay factor, by their index in self.params
        self.decay_groups = {
            wd: [i for i, d in enumerate(decay) if d == wd] for wd in set(decay) if wd != 0
        }
        # one momentum buffer per parameter, created at its first gradient (as torch does)
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        # as torch: a parameter without a gradient this step is left alone
        idx = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not idx:
            return
        params = [self.params[i] for i in idx]
        grads = [p.grad for p in params]
        # parameter index → its position this step (every parameter, in order, when all have
        # a gradient: the common case)
        at = None if len(idx) == len(self.params) else {i: j for j, i in enumerate(idx)}
        for wd, members in self.decay_groups.items():
            pos = members if at is None else [at[i] for i in members if i in at]
            if pos:
                decayed = torch._foreach_add(
                    [grads[j] for j in pos], [params[j] for j in pos], alpha=wd
                )
                for j, g in zip(pos, decayed, strict=True):
                    grads[j] = g
        if self.momentum != 0:
            bufs = [self.buffers[i] for i in idx]
            if all(b is not None for b in bufs):
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, grads, alpha=1.0)
            else:
                for j, i in enumerate(idx):
                    if bufs[j] is None:
                        bufs[j] = self.buffers[i] = grads[j].detach().clone()
                    else:
                        bufs[j].mul_(self.momentum).add_(grads[j], alpha=1.0)
            grads = bufs
        torch._foreach_add_(params, grads, alpha=-self.lr)
