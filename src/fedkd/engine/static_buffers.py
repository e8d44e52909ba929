"""The batched trainer's static buffers for the values strategies declare: a value is copied
into the buffer it had when shapes match, so a captured CUDA graph, which reads that buffer,
stays valid (``fedkd.engine.batched``)."""

from __future__ import annotations

import torch


def leaves(v) -> list[torch.Tensor]:
    return [t for x in v.values() for t in leaves(x)] if isinstance(v, dict) else [v]


def same_buffers(old, new) -> bool:
    """Whether ``new`` is held in ``old``'s tensors (copied into them, not replacing them)."""
    old_leaves, new_leaves = leaves(old), leaves(new)
    return len(old_leaves) == len(new_leaves) and all(
        a is b for a, b in zip(old_leaves, new_leaves, strict=True)
    )


def shape_of(v) -> tuple:
    if isinstance(v, dict):
        return tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(v.items()))
    return (tuple(v.shape), v.dtype)


def static(buffer, value: torch.Tensor) -> torch.Tensor:
    """``value`` copied into ``buffer`` when shapes match (a captured graph reads it there)."""
    if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
        return value.detach().clone()
    buffer.copy_(value)
    return buffer


def stack_into(buffer, values: list):
    if isinstance(values[0], dict):
        buffer = buffer if isinstance(buffer, dict) else {}
        return {n: stack_into(buffer.get(n), [v[n] for v in values]) for n in values[0]}
    stacked = torch.stack([v.detach() for v in values])
    return static(buffer, stacked)


def steps_into(buffer, values: list[torch.Tensor], max_steps: int) -> torch.Tensor:
    """(S_c, ...) per client → (max_steps, K, ...), zero after a client's last step."""
    k = len(values)
    out = values[0].new_zeros(max_steps, k, *values[0].shape[1:])
    for c, v in enumerate(values):
        out[: v.shape[0], c] = v.detach()
    return static(buffer, out)


def same_shapes(strategy: str, client_ids: list[int], decls: list) -> None:
    """The per-client values of a round's clients (``own``, ``own_per_step``'s rows) are stacked
    over them: each needs the first client's shape, or the run stops naming it and the fix."""
    for declared_by, attr, shape in (
        ("own", "own", shape_of),
        ("own_per_step", "per_step", lambda rows: (tuple(rows.shape[1:]), rows.dtype)),
    ):
        for name in getattr(decls[0], attr):
            shapes = [shape(getattr(d, attr)[name]) for d in decls]
            for client, got in zip(client_ids, shapes, strict=True):
                if got != shapes[0]:
                    raise ValueError(
                        f"strategy {strategy!r}: {declared_by}({name!r}) has shape and dtype "
                        f"{got} for client {client} but {shapes[0]} for client {client_ids[0]}; "
                        "the batched trainer stacks it over the round's clients, so declare the "
                        "same shape and dtype for every client (pad it), or set batched = False "
                        "with a batched_reason to train the strategy sequentially"
                    )
