"""The scratch plan of the batched engine: how each client's ``client.scratch`` (filled by the
strategy's ``client_begin``) is rebuilt inside the vmapped loss.

Clients are grouped by the structure of their scratch; per group and leaf, a tensor or module
that is the same for every member is shared, one that differs is stacked along a leading
dimension and sliced per client, and a tensor that *is* a worker parameter becomes the client's
functional parameter (see ``fedkd.engine.batched``'s module doc).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from fedkd.engine.functional import FunctionalModel, fingerprint, module_signature, module_state


@dataclass
class _Snapshot:
    """One leaf of one client's scratch, taken right after its client_begin."""

    leaf: Any
    fingerprint: tuple | None = None
    state: dict[str, torch.Tensor] | None = None  # a module's weights at snapshot time


@dataclass
class ScratchClass:
    """Clients whose scratch has one structure; per leaf how the vmapped loss rebuilds it."""

    members: list[int]  # positions in the round's client list
    spec: Any  # the pytree structure
    plan: list[tuple]  # per leaf: ("param", name) | ("model",) | ("shared", obj)
    #                    | ("tensor", j) | ("module", j, template)
    stacked: list[Any] = field(default_factory=list)  # j -> (n_members, ...) tensor or dict


def _leaf_signature(leaf: Any, param_names: dict[int, str], worker: nn.Module) -> tuple:
    if isinstance(leaf, torch.Tensor):
        if id(leaf) in param_names:
            return ("param", param_names[id(leaf)])
        return ("tensor", tuple(leaf.shape), leaf.dtype, leaf.device)
    if isinstance(leaf, nn.Module):
        return ("model",) if leaf is worker else ("module", module_signature(leaf))
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return ("value", type(leaf), leaf)
    return ("object", id(leaf))


def snapshot_scratch(scratch: dict, worker: nn.Module, cache: dict) -> tuple[list, Any, tuple]:
    """Leaves, structure and signature of one client's scratch. Modules other than the worker get
    their weights copied (once per distinct state: ``cache`` maps id -> last snapshot), because a
    strategy may reload one module for the next client."""
    leaves, spec = tree_flatten(scratch)
    param_names = {id(p): n for n, p in worker.named_parameters()}
    snaps = []
    for leaf in leaves:
        if isinstance(leaf, nn.Module) and leaf is not worker:
            fp = fingerprint(leaf)
            last = cache.get(id(leaf))
            if last is None or last.fingerprint != fp:
                state = {k: v.detach().clone() for k, v in module_state(leaf).items()}
                last = cache[id(leaf)] = _Snapshot(leaf, fp, state)
            snaps.append(last)
        else:
            snaps.append(_Snapshot(leaf))
    signature = (spec, tuple(_leaf_signature(s.leaf, param_names, worker) for s in snaps))
    return snaps, spec, signature


def plan_scratch(snapshots: list, signatures: list, worker: nn.Module) -> tuple[list, list[int]]:
    """Group clients by scratch signature; per group and leaf decide shared or stacked."""
    by_sig: dict[Any, list[int]] = {}
    for k, sig in enumerate(signatures):
        by_sig.setdefault(sig, []).append(k)
    classes, class_of = [], [0] * len(signatures)
    for ci, (sig, members) in enumerate(by_sig.items()):
        spec, kinds = sig
        plan, stacked = [], []
        for li, kind in enumerate(kinds):
            snaps = [snapshots[k][li] for k in members]
            first = snaps[0]
            if kind[0] in ("param", "model", "value", "object"):
                plan.append(kind[:2] if kind[0] == "param" else (kind[0], first.leaf))
            elif kind[0] == "tensor":
                if all(s.leaf is first.leaf for s in snaps):
                    plan.append(("shared", first.leaf))
                else:
                    plan.append(("tensor", len(stacked)))
                    stacked.append(torch.stack([s.leaf.detach() for s in snaps]))
            else:  # a module other than the worker
                same = all(s is first for s in snaps)
                if same and fingerprint(first.leaf) == first.fingerprint:
                    plan.append(("shared", first.leaf))  # e.g. one teacher for all clients
                else:
                    plan.append(("module", len(stacked), first.leaf))
                    stacked.append(
                        {n: torch.stack([s.state[n] for s in snaps]) for n in first.state}
                    )
        for k in members:
            class_of[k] = ci
        classes.append(ScratchClass(members, spec, plan, stacked))
    return classes, class_of


def rebuild_scratch(cls: ScratchClass, per_client: list, model_view: FunctionalModel) -> dict:
    """One client's scratch inside the vmapped loss (``per_client``: its slices of ``stacked``)."""
    leaves = []
    for entry in cls.plan:
        kind = entry[0]
        if kind == "param":
            leaves.append(model_view._tensors[entry[1]])
        elif kind == "model":
            leaves.append(model_view)
        elif kind in ("shared", "value", "object"):
            leaves.append(entry[1])
        elif kind == "tensor":
            leaves.append(per_client[entry[1]])
        else:
            leaves.append(FunctionalModel(entry[2], per_client[entry[1]]))
    return tree_unflatten(leaves, cls.spec)
