"""``torch.compile`` of the batched trainer's folded student: its forward pass and, through
AOTAutograd, its backward, the bulk of a step's kernels (the strategy's vmapped loss and the flat
optimizer stay eager). On CUDA with ``engine: auto`` (the default) for runs long enough to repay it
(``COMPILE_MIN_STEPS``), and with ``engine: batched-compiled``; the step is also captured as a
CUDA graph, the compiled kernels with the rest. Off a CUDA device.

The compiled function is tried once before the run's first step, on the first batch of the
first round, forward and backward, with the model's buffers put back afterwards (``try_compiled``):
compilation (tens of seconds) happens there, outside every step and before any capture, and a
failure is caught there. The trainer then keeps the eager forward, and run.json's ``engine``
says why (``compile_step_reason``), with the time the attempt took (``compile_step_seconds``,
and ``compile_step_seconds_lost`` where it failed). Past the trial, the compiled forward's first
step is guarded too (what it writes is restored if it fails), and a failed capture of the step
as a CUDA graph drops the compiled forward with the graphs: either way the run goes on with the
eager step (``fedkd.engine.batched``), run.json saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from fedkd.engine.cuda_graphs import EAGER

# a run with fewer steps left (its rounds left x its longest client's steps a round: a resumed run
# counts only the rounds it has still to train) stays eager: the break-even of a table-3 fedgkd
# run on an H200 with empty compiler caches, rounded up (docs/results.md,
# h200-compile-payoff-7f51694; less once a run has filled them). A table-3 run takes about
# 72,000 steps, a run of the default configuration 120.
COMPILE_MIN_STEPS = 45_000
COMPILE_OFF_CUDA = (
    "off CUDA: the batched step runs eagerly on a CPU, where torch.compile's build (a C++ "
    "compiler, tens of seconds a run) has no measured gain to repay it"
)
GRAPHS_ONLY = (
    "engine: batched is CUDA graphs without the compiled step; engine auto (the default) adds it "
    "to runs long enough to repay it, engine: batched-compiled asks for it"
)


def compile_choice(engine: str, device: torch.device) -> tuple[bool, str | None]:
    """Whether the batched trainer compiles its folded student (``engine`` as the run spec
    names it: auto, batched, batched-eager or batched-compiled), and why not where it does not.
    A run too short to repay the compile stays eager all the same (``too_short``)."""
    if device.type != "cuda":
        return False, COMPILE_OFF_CUDA
    if engine == "batched-eager":
        return False, EAGER
    if engine == "batched":
        return False, GRAPHS_ONLY
    return True, None


# run.json's compile_step_reason while the trial runs: a process that dies in the compiler (a
# crash, a kill at the job's time limit) writes nothing after it, and its retry would compile and
# die again; seeing this, the retry keeps the step eager (``fedkd.engine.choice``)
TRIAL_RUNNING = (
    "the torch.compile trial is running; an attempt that ends during it leaves the compiled "
    "step off in the next"
)
TRIAL_UNFINISHED = (
    "the attempt ended during the torch.compile trial (killed, or crashed in the compiler)"
)


def too_short(steps_left: int) -> str | None:
    """Why a run with ``steps_left`` batched steps still to take stays eager, or None when it
    compiles."""
    if steps_left >= COMPILE_MIN_STEPS:
        return None
    return (
        f"the run has {steps_left:,} batched steps left to take, fewer than "
        f"{COMPILE_MIN_STEPS:,}: compiling (tens of seconds) would cost more than it saves"
    )


def first_line(exc: BaseException) -> str:
    """``Type: the message's first line`` (at most 300 characters), for a reason in run.json."""
    line = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {line}"


def compile_function(fn: Callable) -> Callable:
    """The one call to ``torch.compile`` (static shapes: every step of a run has the same)."""
    return torch.compile(fn, dynamic=False)


def try_compiled(
    model: torch.nn.Module,
    x: torch.Tensor,
    leaves: list[torch.Tensor],
    autocast: Callable[[], object],
) -> tuple[Callable, float, str | None]:
    """``(forward, seconds, error)``: ``model.features_and_logits`` compiled and run once on
    ``x``, forward and backward to ``leaves`` (under ``autocast()``, as the step runs it), or the
    eager forward and why compiling failed. The model's buffers are as before either way."""
    eager = model.features_and_logits
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    started = time.perf_counter()
    error = None
    compiled = eager
    try:
        compiled = compile_function(eager)
        with autocast():
            features, logits = compiled(x)
        total = features.float().sum() + logits.float().sum()
        torch.autograd.grad(total, leaves, allow_unused=True)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)  # an asynchronous kernel error surfaces here
    except Exception as exc:  # any failure of the compiler stack: the eager step still works
        error = f"torch.compile failed ({first_line(exc)}); the batched step runs eagerly"
        compiled = eager
    finally:
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
    return compiled, time.perf_counter() - started, error
