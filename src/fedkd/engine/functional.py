"""``FunctionalModel``: a module called with given tensors in place of its parameters; inside the
batched trainer's vmapped loss, ``ctx.model`` (one client's slice of the stacked parameters)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module


class FunctionalModel:
    """A module called with given tensors in place of its parameters and buffers.

    ``client.model`` inside the vmapped loss: ``features_and_logits``, ``features``, ``forward``
    and any other method run the real module's code with these tensors (``functional_call``'s
    mechanism); ``parameters()`` / ``named_parameters()`` yield them in the module's order, and
    submodules (``.classifier``) are views over the matching subset."""

    def __init__(self, module: nn.Module, tensors: dict[str, torch.Tensor]):
        self.__dict__["_module"] = module
        self.__dict__["_tensors"] = tensors

    @contextmanager
    def _bound(self):
        with _reparametrize_module(self._module, self._tensors):
            yield

    def __call__(self, *args, **kwargs):
        with self._bound():
            return self._module(*args, **kwargs)

    def __getattr__(self, name: str):
        if name in self._tensors:
            return self._tensors[name]
        attr = getattr(self._module, name)
        if isinstance(attr, nn.Module):
            prefix = name + "."
            sub = {k[len(prefix) :]: v for k, v in self._tensors.items() if k.startswith(prefix)}
            return FunctionalModel(attr, sub)
        if callable(attr) and hasattr(attr, "__self__"):  # a bound method: run it reparametrized

            def method(*args, **kwargs):
                with self._bound():
                    return attr(*args, **kwargs)

            return method
        return attr

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        for name, _ in self._module.named_parameters(recurse=recurse):
            yield prefix + name, self._tensors[name]

    def parameters(self, recurse: bool = True):
        for _, t in self.named_parameters(recurse=recurse):
            yield t

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: self._tensors[k] for k in self._module.state_dict()}
