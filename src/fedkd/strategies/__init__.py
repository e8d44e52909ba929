"""Strategy registry: every module in this package (not starting with ``_``) that defines a
``Strategy`` subclass with a ``name`` registers it. Adding a strategy = adding one module."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from fedkd.strategies.base import Strategy


@cache
def _registry() -> dict[str, type[Strategy]]:
    found: dict[str, type[Strategy]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Strategy)
                and obj.name
                and obj.__module__ == module.__name__
            ):
                if obj.name in found:
                    raise RuntimeError(f"strategy name {obj.name!r} is registered twice")
                found[obj.name] = obj
    return dict(sorted(found.items()))


def strategy_names() -> list[str]:
    return list(_registry())


def get_strategy_class(name: str) -> type[Strategy]:
    reg = _registry()
    if name not in reg:
        raise ValueError(f"unknown strategy {name!r}; choose one of: {', '.join(reg)}")
    return reg[name]
