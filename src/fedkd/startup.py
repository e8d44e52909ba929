"""A command's long-lived imports made out of the cyclic garbage collector's sight.

torch, pyarrow and pandas leave some 170,000 objects that live as long as the process, yet every
full collection walked them all again: during the imports, the rounds and at the interpreter's
exit, about a tenth of the CPU of a training job of the default configuration
(docs/results.md#cpu-imports-frozen). So the commands that need them import them first with the
collector paused, then freeze what the imports made (``gc.freeze``)."""

from __future__ import annotations

import gc
import importlib
import signal

# the modules each command imports that pull in torch, pyarrow or pandas
LONG_LIVED_IMPORTS = {
    "train": ("fedkd.engine.run", "fedkd.pipeline.data_check"),
    "features": ("fedkd.engine.features",),
    "partition": ("fedkd.data.partition", "torch"),  # the loaders import torch as they load
    "aggregate": ("fedkd.report",),
    "render": ("fedkd.report.render",),
}


def import_frozen(command: str | None, argv: list[str]) -> None:
    """Import ``command``'s LONG_LIVED_IMPORTS with the collector paused, then freeze what they
    made; not for a command's --help, which needs none of them. Garbage already there is
    collected first, so that none is frozen; the collector is left on or off as it was found.
    A module that fails to import is left to the command, which imports it again and reports
    the failure as it always does; Ctrl-C while they import exits as the command would then."""
    modules = LONG_LIVED_IMPORTS.get(command or "", ())
    if not modules or {"-h", "--help"} & set(argv):
        return
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for module in modules:
            importlib.import_module(module)
    except KeyboardInterrupt:  # before the command's own handling: its exit code, no traceback
        raise SystemExit(128 + signal.SIGINT) from None
    except Exception:  # noqa: BLE001 (the command imports it again and reports the error)
        pass
    finally:
        if enabled:
            gc.enable()
        gc.freeze()
