"""Counting what a piece of code dispatches: kernels and host syncs (``fedkd bench --ops``).

An operation counts as a kernel when it is an ATen operator that computes or copies data: views
(``view``, ``transpose``, ``select``, ...), ``detach`` and bare allocations (``empty``) are not
counted, since they launch nothing on a GPU. A host sync is anything that reads a tensor's value
on the host: ``item``/``bool``/``float`` of a tensor (ATen's ``_local_scalar_dense``), operators
whose output size depends on values (``nonzero``, ``masked_select``, ``unique``, ...), and
``tolist``/``numpy`` (which read memory without dispatching, so they are intercepted in Python).
On a CPU the counts are those a GPU would see for the same code, minus what a CUDA build
dispatches differently (e.g. fused kernels chosen per device).
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
NO_KERNEL = {
    aten.detach, aten.empty, aten.empty_strided, aten.empty_like, aten.lift_fresh, aten.alias,
    aten._unsafe_view, aten.set_,
}  # fmt: skip
SYNCS = {
    aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten._unique, aten._unique2,
    aten.unique_dim, aten.unique_consecutive, aten.equal, aten.is_nonzero, aten.allclose,
    aten.repeat_interleave,
}  # fmt: skip


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.kernels = 0
        self.syncs = 0
        self.by_op: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in SYNCS:
            self.syncs += 1
        if not func.is_view and packet not in NO_KERNEL:
            self.kernels += 1
            self.by_op[packet.__name__] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def count_ops():
    """``with count_ops() as c: ...``; then ``c.kernels``, ``c.syncs``, ``c.by_op``."""
    counter = OpCounter()
    patched = {}

    def reading(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            counter.syncs += 1
            return original(self, *args, **kwargs)

        return original, read

    for name in ("tolist", "numpy", "__array__"):
        patched[name], wrapper = reading(name)
        setattr(torch.Tensor, name, wrapper)
    try:
        with counter:
            yield counter
    finally:
        for name, original in patched.items():
            setattr(torch.Tensor, name, original)
