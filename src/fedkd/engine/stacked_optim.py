"""Per-client optimizers and clipping of the batched engine: torch's SGD and Adam arithmetic
and ``clip_grad_norm_`` applied row by row to K clients' stacked parameters."""

from __future__ import annotations

import torch

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


def _scatter(store: dict[str, torch.Tensor], rows, names: list[str], values: list[torch.Tensor]):
    """Write a gathered group's rows back (a slice of rows was updated in place already)."""
    if not isinstance(rows, slice):
        for n, v in zip(names, values, strict=True):
            store[n][rows] = v


class StackedSGD:
    """``ForeachSGD`` (torch.optim.SGD without dampening or Nesterov) for K stacked clients: the
    same element-wise arithmetic in the same order, applied to the rows of the stepping group.
    ``params`` are that group's rows (views for a slice of rows, copies for gathered rows)."""

    def __init__(self, stacked: dict[str, torch.Tensor], spec):
        self.stacked = stacked
        self.lr, self.momentum = float(spec.lr), float(spec.momentum)
        self.wd = float(spec.weight_decay)
        self.buffers = {n: torch.zeros_like(p) for n, p in stacked.items()} if self.momentum else {}

    @torch.no_grad()
    def step(self, rows, names: list[str], params: list, grads: list, first: bool) -> None:
        if self.wd != 0:
            grads = torch._foreach_add(grads, params, alpha=self.wd)
        if self.momentum != 0:
            if first:  # torch creates the buffer as a copy of the first gradient
                bufs = [g.clone() for g in grads]
                if isinstance(rows, slice):
                    for n, b in zip(names, bufs, strict=True):
                        self.buffers[n][rows].copy_(b)
            else:
                bufs = [self.buffers[n][rows] for n in names]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, grads, alpha=1.0)
            _scatter(self.buffers, rows, names, bufs)
            grads = bufs
        torch._foreach_add_(params, grads, alpha=-self.lr)
        _scatter(self.stacked, rows, names, params)


class StackedAdam:
    """``torch.optim.Adam`` (foreach, L2 weight decay, no amsgrad) for K stacked clients."""

    def __init__(self, stacked: dict[str, torch.Tensor], spec, betas=(0.9, 0.999), eps=1e-8):
        self.stacked = stacked
        self.lr, self.wd = float(spec.lr), float(spec.weight_decay)
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        self.exp_avg = {n: torch.zeros_like(p) for n, p in stacked.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in stacked.items()}

    @torch.no_grad()
    def step(self, rows, names: list[str], params: list, grads: list, step: int) -> None:
        m = [self.exp_avg[n][rows] for n in names]
        v = [self.exp_avg_sq[n][rows] for n in names]
        if self.wd != 0:
            grads = torch._foreach_add(grads, params, alpha=self.wd)
        torch._foreach_lerp_(m, grads, 1 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, grads, grads, 1 - self.beta2)
        bias1 = 1 - self.beta1**step
        bias2_sqrt = (1 - self.beta2**step) ** 0.5
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, m, denom, value=-(self.lr / bias1))
        _scatter(self.exp_avg, rows, names, m)
        _scatter(self.exp_avg_sq, rows, names, v)
        _scatter(self.stacked, rows, names, params)


def clip_per_client(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` applied to each client (row) separately, by its own total norm."""
    g = grads[0].shape[0]
    # a norm over the trailing dims, not over a reshape: vmapped gradients can be transposed
    # views, which a reshape would copy
    norms = torch.stack(
        [torch.linalg.vector_norm(x, 2, dim=tuple(range(1, x.dim()))) for x in grads], 1
    )
    total = torch.linalg.vector_norm(norms, 2, dim=1)
    coef = torch.clamp(max_norm / (total + CLIP_EPS), max=1.0)
    for x in grads:
        x.mul_(coef.view(g, *([1] * (x.dim() - 1))))
