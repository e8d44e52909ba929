"""Clipping and optimizers of the batched trainer on flat (K, P) buffers: each client's row is all
its parameters, so clipping, SGD and Adam are a handful of kernels for all clients together.

The arithmetic is torch's per client (``clip_grad_norm_``, ``torch.optim.SGD`` without dampening
or Nesterov, ``torch.optim.Adam`` with L2 weight decay; the parameters the run's
``weight_decay_exempt`` spares take none, as in a torch parameter group of decay 0); clients that have finished their local
steps (``active`` 0) keep their parameters and optimizer state unchanged. Whatever varies per step
(the active mask, Adam's bias corrections) comes in as per-step coefficients, computed on the host
once per round (``coefficients``), so a step reads only device tensors (one CUDA graph).

A finished client's gradient row is overwritten with zeros (``masked_fill``, a ``torch.where``
with a constant; not a product: whatever it held, inf or NaN included, stays out), and its
coefficients make the update an exact no-op on finite state: momentum times 1 plus 0, weights
plus 0 times a step.
"""

from __future__ import annotations

import torch

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


def clip_rows_(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` per row of (K, P) gradients, in place; returns the scale per row."""
    norm = torch.linalg.vector_norm(g, 2, dim=1, keepdim=True)
    coef = torch.clamp(max_norm / (norm + CLIP_EPS), max=1.0)
    g.mul_(coef)
    return coef


def zero_finished_(g: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
    """(K, P) gradients with the finished clients' rows set to exactly zero, whatever they held;
    in place."""
    return g.masked_fill_(finished.unsqueeze(1), 0.0)


def decay_factors(wd: float, columns: torch.Tensor | None, params: torch.Tensor):
    """The factor of ``g += factor * p``, made once for the run: (1, P), ``wd`` where a column's
    parameter is decayed and 0 where it is exempt (``columns``: a (P,) bool, True where decayed),
    (1, 1) when every column is decayed, None without decay. An exempt column gets exactly
    g + p * 0 = g, a decayed one the same g + p * wd as without exemptions. Every client takes
    the same factor: a finished client's row is overwritten with zeros after it (a step's only
    per-client decay would be its being active), so no per-step product of the two is made."""
    if not wd:
        return None
    if columns is None or bool(columns.all()):
        return torch.full((1, 1), wd, device=params.device, dtype=params.dtype)
    mask = columns.to(device=params.device, dtype=params.dtype).unsqueeze(0)
    return mask * torch.tensor(wd, device=params.device, dtype=params.dtype)


class FlatSGD:
    """Per client: g += wd p (not on the exempt columns); buf = momentum buf + g (torch creates
    buf as g: the same, from 0); p -= lr buf, lr the round's."""

    names = ("momentum_keep", "neg_lr")

    def __init__(self, params: torch.Tensor, spec, decayed: torch.Tensor | None = None):
        self.momentum = float(spec.momentum)
        self.decay = decay_factors(float(spec.weight_decay), decayed, params)
        self.buf = torch.zeros_like(params) if self.momentum else None

    def reset(self) -> None:
        if self.buf is not None:
            self.buf.zero_()

    def coefficients(self, active: torch.Tensor, lr: float) -> torch.Tensor:
        """(S, 2, K) per-step coefficients from the (S, K) 0/1 active mask, at learning rate
        ``lr``."""
        keep = active * (self.momentum - 1.0) + 1.0  # momentum where active, 1 where finished
        return torch.stack([keep, active * -lr], dim=1)

    @torch.no_grad()
    def step(self, p: torch.Tensor, g: torch.Tensor, coef: torch.Tensor, finished) -> None:
        """``g`` (K, P), overwritten; ``coef`` (2, K): this step's rows; ``finished`` (K,) bool:
        the clients done with their local steps."""
        if self.decay is not None:
            g.addcmul_(p, self.decay)
        zero_finished_(g, finished)
        keep, neg_lr = (c.unsqueeze(1) for c in coef)
        if self.buf is not None:
            self.buf.mul_(keep).add_(g)
            g = self.buf
        p.addcmul_(g, neg_lr)


class FlatAdam:
    """torch.optim.Adam per client (betas 0.9/0.999, eps 1e-8, L2 weight decay, no amsgrad);
    every active client is at the same step t, so the bias corrections are per-step numbers."""

    names = ("lerp", "keep_sq", "add_sq", "bias2_sqrt", "step_size")

    def __init__(
        self, params: torch.Tensor, spec, decayed: torch.Tensor | None = None,
        betas=(0.9, 0.999), eps=1e-8,
    ):  # fmt: skip
        self.decay = decay_factors(float(spec.weight_decay), decayed, params)
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        self.exp_avg = torch.zeros_like(params)
        self.exp_avg_sq = torch.zeros_like(params)

    def reset(self) -> None:
        self.exp_avg.zero_()
        self.exp_avg_sq.zero_()

    def coefficients(self, active: torch.Tensor, lr: float) -> torch.Tensor:
        s = active.shape[0]
        t = torch.arange(1, s + 1, dtype=torch.float64).unsqueeze(1)
        bias1 = 1 - self.beta1**t
        bias2_sqrt = (1 - self.beta2**t).sqrt()
        a = active.double()
        return torch.stack(
            [
                a * (1 - self.beta1),  # lerp weight: m unchanged where finished
                a * (self.beta2 - 1.0) + 1.0,
                a * (1 - self.beta2),
                bias2_sqrt.expand_as(a),
                a * -(lr / bias1),
            ],
            dim=1,
        ).to(active.dtype)

    @torch.no_grad()
    def step(self, p: torch.Tensor, g: torch.Tensor, coef: torch.Tensor, finished) -> None:
        if self.decay is not None:
            g.addcmul_(p, self.decay)
        zero_finished_(g, finished)
        lerp, keep_sq, add_sq, bias2_sqrt, step_size = (c.unsqueeze(1) for c in coef)
        self.exp_avg.lerp_(g, lerp)
        self.exp_avg_sq.mul_(keep_sq).addcmul_(g * g, add_sq)
        denom = (self.exp_avg_sq.sqrt() / bias2_sqrt).add_(self.eps)
        p.addcmul_(self.exp_avg / denom, step_size)
