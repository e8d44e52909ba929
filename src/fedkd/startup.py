"""A command's long-lived imports made out of the cyclic garbage collector's sight.

torch, pyarrow and pandas leave some 170,000 objects that live as long as the process, yet every
full collection walked them all again: during the imports, the rounds and at the interpreter's
exit, about a tenth of the CPU of a training job of the default configuration
(docs/results.md#cpu-imports-frozen). So the commands that need them import them first with the
collector paused, then freeze what the imports made (``gc.freeze``)."""

from __future__ import annotations

import gc
import importlib

# the modules each command imports that pull in torch, pyarrow or pandas
LONG_LIVED_IMPORTS = {
    "train": ("fedkd.engine.run", "fedkd.pipeline.data_check"),
    "features": ("fedkd.engine.features",),
    "partition": ("fedkd.data.partition", "torch"),  # the loaders import torch as they load
    "aggregate": ("fedkd.report",),
    "render": ("fedkd.report.render",),
}


def import_frozen(command: str | None) -> None:
    """Import ``command``'s LONG_LIVED_IMPORTS with the collector paused, then freeze what they
    made. Garbage already there is collected first, so that none is frozen; the collector is
    left on or off as it was found, also when an import fails (the failure is the command's,
    reported as the command's own import of the module would be)."""
    modules = LONG_LIVED_IMPORTS.get(command or "", ())
    if not modules:
        return
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def run_command(args) -> int:
    """The parsed command's exit code, its long-lived imports made first (``import_frozen``)."""
    import_frozen(args.command)
    return args.func(args)
