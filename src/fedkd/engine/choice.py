"""Which trainer a run uses (recorded in run.json): the spec's ``engine``, the strategy and the
model decide; for the batched trainer, whether its step is captured as CUDA graphs and its folded
model compiled (graphs on CUDA unless ``engine: batched-eager``; the compiled step with
``engine: auto`` and ``batched-compiled``, for runs long enough to repay it), each with the
reason where off."""

from __future__ import annotations

import torch
from torch import nn

from fedkd.engine.compiled_step import (
    TRIAL_RUNNING,
    TRIAL_UNFINISHED,
    compile_choice,
    first_line,
)
from fedkd.engine.cuda_graphs import DROPPED_WITH_GRAPHS, graphs_choice
from fedkd.engine.folding import fold_error
from fedkd.strategies.base import Strategy

# engine "auto" off CUDA: a CPU has no kernel-launch overhead for the batched trainer to save
AUTO_ON_CPU = (
    "engine auto: sequential off CUDA, where the batched trainer saves no launch overhead "
    "(docs/performance.md); engine: batched forces it"
)
# the engine values that ask for the batched trainer
BATCHED = ("batched", "batched-eager", "batched-compiled")


# the batched trainer folds the clients into the channel dimension of contiguous (NCHW) buffers
CHANNELS_LAST = (
    "memory_format='channels_last': the batched trainer trains contiguous (NCHW) tensors, its "
    "clients folded into the channels; memory_format: contiguous (or auto) keeps it"
)


def engine_choice(
    spec, strategy: Strategy, model: nn.Module, device: torch.device, channels_last: bool = False
) -> dict:
    """``{"requested", "used", "reason"}``: ``used`` is "batched" (the batched trainer) or
    "sequential", ``reason`` why not the one asked for. When batched, also ``cuda_graphs`` and
    ``compile_step`` (booleans) with ``cuda_graphs_reason`` and ``compile_step_reason`` (None
    where on); the trainer records a compile that failed (``fedkd.engine.compiled_step``).
    ``channels_last``: the run's image tensors are channels_last
    (``fedkd.runtime.preprocess.use_channels_last``), which only the sequential trainer
    honours."""
    requested = getattr(spec, "engine", "sequential")
    reason = None
    wanted = requested
    if requested == "auto":
        wanted = "batched" if device.type == "cuda" else "sequential"
        if wanted == "sequential":
            reason = AUTO_ON_CPU
    if wanted in BATCHED:
        if not type(strategy).batched:
            reason = f"strategy {type(strategy).name!r} declares batched = False" + (
                f": {type(strategy).batched_reason}" if type(strategy).batched_reason else ""
            )
        elif getattr(spec, "compile", "none") != "none":
            reason = (
                f"compile={spec.compile!r} compiles the sequential trainer's worker model (the "
                "batched trainer compiles its own folded step on CUDA with engine: "
                "batched-compiled, compile: none)"
            )
        elif channels_last:
            reason = CHANNELS_LAST
        else:
            reason = fold_error(model)
    used = "batched" if wanted in BATCHED and reason is None else "sequential"
    choice = {"requested": requested, "used": used, "reason": reason}
    if used == "batched":
        choice["cuda_graphs"], choice["cuda_graphs_reason"] = graphs_choice(wanted, device)
        choice["compile_step"], choice["compile_step_reason"] = compile_choice(requested, device)
    return choice


EARLIER = "off since an earlier attempt of this run: "


def after_earlier_attempt(choice: dict, earlier: dict | None) -> dict:
    """``choice`` with what an earlier attempt of the same run found failing (CUDA graphs, the
    compiled step) left off, saying so. A failure that leaves the CUDA context unusable (an
    illegal instruction in the first replay) fails that attempt's eager fallback too: every
    retry, a new process, would capture again and fail the same way."""
    if not isinstance(earlier, dict) or choice.get("used") != "batched":
        return choice
    for key in ("cuda_graphs", "compile_step"):
        reason = str(earlier.get(f"{key}_reason"))
        failed = earlier.get(f"{key}_seconds_lost") is not None or reason == DROPPED_WITH_GRAPHS
        if reason == TRIAL_RUNNING:  # that attempt's process died in the compiler
            reason, failed = TRIAL_UNFINISHED, True
        if choice.get(key) and earlier.get(key) is False and (failed or reason.startswith(EARLIER)):
            choice[key] = False
            choice[f"{key}_reason"] = reason if reason.startswith(EARLIER) else EARLIER + reason
    return choice


def unbatchable_loss(strategy: str, clients: int, exc: RuntimeError) -> RuntimeError:
    """The error of a strategy whose local_loss torch.func.vmap cannot batch: torch names the
    operation, the fix is the strategy's."""
    return RuntimeError(
        f"strategy {strategy!r}: its local_loss cannot run in the batched trainer, which runs "
        f"it for {clients} clients at once under torch.func.vmap ({first_line(exc)}); keep it "
        "to the contract in fedkd/strategies/base.py's docstring, or declare batched = False "
        "with a batched_reason in its class (docs/adding-a-strategy.md); engine: sequential "
        "trains it meanwhile"
    )
