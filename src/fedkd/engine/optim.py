"""Local SGD with momentum and weight decay as a handful of foreach kernels per step.

It performs exactly the arithmetic of ``torch.optim.SGD(foreach=True)`` (no dampening, no
Nesterov), in the same order, so weights are bit-identical (tested). It exists because any
``torch.optim`` optimizer imports ``torch._dynamo`` on construction, about 1.5 s per process:
a noticeable share of a short training job, of which a paper grid runs hundreds.
"""

from __future__ import annotations

import torch


class ForeachSGD:
    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), float(weight_decay)
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
        if self.weight_decay != 0:
            grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
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
