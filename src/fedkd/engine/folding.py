"""K copies of a network as one network: the batched trainer's forward pass.

K clients' images side by side along the channels, (B, K*C, H, W), go through one network whose
layers are the originals widened K-fold: a convolution with K times the channels and K times the
groups (each client's channels see only its own filters), GroupNorm with K times the groups
(groups never straddle two clients), BatchNorm over K times the channels with each client's
statistics over its own samples (``FoldedBatchNorm2d``), and a grouped linear layer (one batched
matmul over the K clients). Element-wise layers, pooling, max-pooling and flattening act per
channel and need no change, so the model's own ``forward`` code runs as written. Linear layers
return (K, B, out): logits and projected features arrive per client, ready for the vmapped loss.

A client's parameters in the folded network are rows of (K, ...) tensors: a convolution's weight
(K*out, in/g, kh, kw) is the K clients' (out, in/g, kh, kw) weights one after another, i.e. a
view of a (K, out, in/g, kh, kw) tensor. Only models whose every module is one of the layers
below (and whose containers' forward code uses only element-wise ops, pooling and means) fold:
``FedModel.foldable`` says so per model class, ``fold_error`` checks the modules.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

# modules that act per channel or per feature and fold unchanged
_PASS_THROUGH = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.Flatten, nn.Identity)


class FoldedLinear(nn.Module):
    """K linear layers at once: (B, K*F) or (K, B, F) inputs → (K, B, out). The weight is kept
    as (K, in, out), each client's weight transposed, so the batched matmul and its gradient
    need no transposing copy."""

    def __init__(self, k: int, linear: nn.Linear):
        super().__init__()
        self.k = k
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        self.weight = nn.Parameter(w.new_empty(k, self.in_features, self.out_features))
        self.bias = (
            nn.Parameter(w.new_empty(k, self.out_features)) if linear.bias is not None else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # folded features: client k's are columns k*F .. (k+1)*F
            x = x.view(x.shape[0], self.k, self.in_features).transpose(0, 1)
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class FoldedBatchNorm2d(nn.Module):
    """K BatchNorm2d layers at once over (B, K*C, H, W). In training, client k's statistics are
    taken over the batch slots that hold one of its samples (``slot_valid``, (B, K), set by the
    trainer): the padding of a short last batch and a finished client's slots are left out, so
    each client normalises by what its own BatchNorm would see on its batch alone; its running
    statistics and batch count move only while it has samples. A step whose every slot holds a
    sample (``whole_batch``, set by the trainer, which knows it from the schedules) is PyTorch's
    own batch norm over the K*C channels, the same statistics in a few kernels. In eval mode the
    K clients' running statistics normalise their channels."""

    def __init__(self, k: int, bn: nn.BatchNorm2d):
        super().__init__()
        self.k, self.channels = k, bn.num_features
        self.eps, self.momentum = bn.eps, bn.momentum
        width = k * bn.num_features
        self.weight = nn.Parameter(torch.empty(width, device="meta")) if bn.affine else None
        self.bias = nn.Parameter(torch.empty(width, device="meta")) if bn.affine else None
        like = bn.running_mean
        self.register_buffer("running_mean", like.new_zeros(width))
        self.register_buffer("running_var", like.new_ones(width))
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked.new_zeros(k))
        # (B, K) 1 where a slot holds a sample: the trainer's one tensor for every layer; a
        # buffer (not saved), so compiled code reads it as one of the module's tensors
        self.register_buffer("slot_valid", None, persistent=False)
        self.whole_batch = False  # every slot of the step holds a sample: no mask needed

    def _whole_batch_norm(self, x: torch.Tensor) -> torch.Tensor:
        self.num_batches_tracked.add_(1)
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, True, self.momentum,
            self.eps,
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        if self.whole_batch:
            return self._whole_batch_norm(x)
        xs = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mask = self.slot_valid.to(xs.dtype).repeat_interleave(self.channels, 1)[..., None, None]
        count = mask.sum(0).flatten() * (x.shape[2] * x.shape[3])  # values per channel
        per = count.clamp(min=1)
        mean = (xs * mask).sum((0, 2, 3)) / per
        centred = xs - mean.view(1, -1, 1, 1)
        var = (centred.square() * mask).sum((0, 2, 3)) / per  # biased: what normalises
        y = centred * torch.rsqrt(var + self.eps).view(1, -1, 1, 1)
        if self.weight is not None:
            y = torch.addcmul(self.bias.view(1, -1, 1, 1), y, self.weight.view(1, -1, 1, 1))
        with torch.no_grad():  # as BatchNorm: the unbiased variance into the running one
            active = count > 0
            unbiased = var * count / (count - 1).clamp(min=1)
            for running, batch in ((self.running_mean, mean), (self.running_var, unbiased)):
                moved = running * (1 - self.momentum) + batch.to(running.dtype) * self.momentum
                running.copy_(torch.where(active, moved, running))
            self.num_batches_tracked.add_(active.view(self.k, -1)[:, 0].long())
        return y.to(x.dtype)

    def client_buffers(self, c: int) -> dict[str, torch.Tensor]:
        """Client ``c``'s buffers in BatchNorm2d's names and shapes."""
        own = slice(c * self.channels, (c + 1) * self.channels)
        return {
            "running_mean": self.running_mean[own].clone(),
            "running_var": self.running_var[own].clone(),
            "num_batches_tracked": self.num_batches_tracked[c].clone(),
        }

    def fill_buffers(self, states: list[dict[str, torch.Tensor]]) -> None:
        """Client c's buffers := ``states[c]`` (BatchNorm2d's buffers by name)."""
        with torch.no_grad():
            for name in ("running_mean", "running_var"):
                getattr(self, name).copy_(torch.cat([s[name] for s in states]))
            self.num_batches_tracked.copy_(torch.stack([s["num_batches_tracked"] for s in states]))


def folded_norms(folded: nn.Module) -> dict[str, FoldedBatchNorm2d]:
    """The folded network's BatchNorm layers by module name."""
    return {n: m for n, m in folded.named_modules() if isinstance(m, FoldedBatchNorm2d)}


def fill_norm_buffers(folded: nn.Module, states: list[dict[str, torch.Tensor]]) -> None:
    """Each folded BatchNorm's client c := the buffers of ``states[c]`` (full state dicts)."""
    for name, norm in folded_norms(folded).items():
        prefix = f"{name}." if name else ""
        norm.fill_buffers(
            [{b: s[prefix + b] for b in ("running_mean", "running_var", "num_batches_tracked")}
             for s in states]
        )  # fmt: skip


def fold_error(model: nn.Module) -> str | None:
    """Why ``model`` cannot be folded (None: it can)."""
    if not getattr(type(model), "foldable", False):
        return f"model {type(model).__name__} is not declared foldable (FedModel.foldable)"
    norm_buffers = set()
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if type(m) is not nn.BatchNorm2d or not m.track_running_stats or m.momentum is None:
                return (
                    f"the model's BatchNorm {name} is not a BatchNorm2d with running statistics "
                    "and a momentum, the one kind the batched trainer folds"
                )
            norm_buffers.update(f"{name}.{b}" for b, _ in m.named_buffers())
            continue
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            return f"the model has active dropout ({name}, p={m.p})"
        if isinstance(m, nn.Conv2d) and m.padding_mode != "zeros":
            return f"convolution {name} pads with {m.padding_mode!r}, not zeros"
        leaf = not any(True for _ in m.children())
        if leaf and not isinstance(m, (nn.Conv2d, nn.GroupNorm, nn.Linear, *_PASS_THROUGH)):
            return f"module {name} ({type(m).__name__}) has no folded form"
    if any(n not in norm_buffers for n, _ in model.named_buffers()):
        return (
            "the model has buffers besides BatchNorm's (per-client state the folded network does "
            "not keep)"
        )
    return None


def _folded_layer(m: nn.Module, k: int) -> nn.Module:
    if isinstance(m, nn.Conv2d):
        return nn.Conv2d(
            k * m.in_channels, k * m.out_channels, m.kernel_size, stride=m.stride,
            padding=m.padding, dilation=m.dilation, groups=k * m.groups, bias=m.bias is not None,
            device="meta",
        )  # fmt: skip
    if isinstance(m, nn.GroupNorm):
        return nn.GroupNorm(
            k * m.num_groups, k * m.num_channels, eps=m.eps, affine=m.affine, device="meta"
        )
    if isinstance(m, nn.Linear):
        return FoldedLinear(k, m)
    if isinstance(m, nn.BatchNorm2d):
        return FoldedBatchNorm2d(k, m)
    return m


def fold(model: nn.Module, k: int) -> nn.Module:
    """A K-fold copy of ``model`` (its parameters uninitialised: bind them with ``bind``)."""
    folded = copy.deepcopy(model)

    def widen(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            new = _folded_layer(child, k)
            if new is not child:
                setattr(parent, name, new)
            else:
                widen(child)

    widen(folded)
    return folded


def folded_shape(shape: torch.Size, k: int, kind: str) -> tuple[int, ...]:
    """The shape of a parameter of original ``shape`` in the folded network (``kind`` from
    ``param_kinds``)."""
    if kind == "linear_weight":
        return (k, shape[1], shape[0])
    if kind == "linear_bias":
        return (k, *shape)
    return (k * shape[0], *shape[1:])


def param_kinds(model: nn.Module) -> dict[str, str]:
    """Per parameter name: "linear_weight", "linear_bias" or "channel" (conv, GroupNorm,
    BatchNorm)."""
    kinds = {}
    for mod, m in model.named_modules():
        for p, _ in m.named_parameters(recurse=False):
            name = f"{mod}.{p}" if mod else p
            kinds[name] = f"linear_{p}" if isinstance(m, nn.Linear) else "channel"
    return kinds


def bind(folded: nn.Module, tensors: dict[str, torch.Tensor], requires_grad: bool) -> None:
    """Make the folded network's parameters the given tensors (views of the trainer's buffers)."""
    for name, t in tensors.items():
        mod_name, _, attr = name.rpartition(".")
        mod = folded.get_submodule(mod_name) if mod_name else folded
        mod._parameters[attr] = nn.Parameter(t, requires_grad=requires_grad)
