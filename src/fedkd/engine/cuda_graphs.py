"""CUDA graphs for the batched trainer: on by default on a CUDA device (``engine: batched`` or
``auto``), off with ``engine: batched-eager`` (``graphs_choice``; the choice and its reason are
recorded in run.json's ``engine``).

The trainer's step reads and writes only buffers that live for the whole run (the flat
parameters and optimizer state, the step tables, the declared values, a device step counter), so
its kernels are captured once and replayed for every step of every round. Capture follows
torch's recipe: warm-up iterations on a side stream (they are real steps), then the capture (which
runs nothing), then replays. The capture happens on the run's device (``torch.cuda.set_device`` is
called when the run starts).

A capture that fails, or its first replay, fails no run: the trainer runs that step and every
later one eagerly, run.json saying why (``fedkd.engine.batched``).

All of a run's graphs (one per set of declared names: fedgkd-vote has up to M + 1) allocate from
one memory pool (``graph_pool``), captured on one stream (``capture_stream``): they never replay
at once, and a step leaves nothing allocated in the pool past its end (it writes only into the
trainer's own buffers), so one pool's memory serves every graph where private pools would each
hold a step's activations. The allocator reuses a freed block only on the stream that freed it,
so the captures must share a stream for the pool to be shared (``torch.cuda.graph``'s own note),
not only the pool handle.
"""

from __future__ import annotations

import torch

WARMUP_STEPS = 2  # eager steps on a side stream before the capture (torch's recipe uses a few)

GRAPHS_OFF_CUDA = "off CUDA: CUDA graphs need a CUDA device"
EAGER = "engine: batched-eager asks for the batched trainer without CUDA graphs or torch.compile"
DROPPED_WITH_GRAPHS = (
    "dropped with the CUDA graphs, whose capture failed: the batched step runs eagerly"
)


def graphs_choice(engine: str, device: torch.device) -> tuple[bool, str | None]:
    """Whether the batched trainer captures its step as CUDA graphs, and why not where it does
    not. On by default on CUDA: every strategy's graphed run equals its sequential one on a GPU
    (tests/test_batched_gpu.py), and graphs are most of the batched trainer's speed there
    (docs/performance.md)."""
    if device.type != "cuda":
        return False, GRAPHS_OFF_CUDA
    if engine == "batched-eager":
        return False, EAGER
    return True, None


def graph_pool():
    """A memory pool for every graph of one run (``torch.cuda.graph_pool_handle``)."""
    return torch.cuda.graph_pool_handle()


def capture_stream(device: torch.device):
    """The side stream every graph of one run is warmed up and captured on."""
    return torch.cuda.Stream(device=device)


class GraphedStep:
    """A step function run eagerly for its first ``WARMUP_STEPS`` calls, then captured and
    replayed. The step must advance its own device step counter (the capture does not run). The
    function is passed at each call, not kept: the graph holds no reference to its trainer.
    ``pool`` and ``stream``: the run's shared memory pool and capture stream (``graph_pool``,
    ``capture_stream``).

    The call that captures (``captures_next``) runs nothing but the first replay, so when it
    raises (the capture, or that replay, failed) the step has not happened and the caller can
    run it eagerly instead (``fedkd.engine.batched``); the current stream is put back first."""

    def __init__(self, device: torch.device, pool, stream):
        self.device, self.pool, self.stream = device, pool, stream
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None

    @property
    def captures_next(self) -> bool:
        """Whether the next ``step`` captures the graph (and replays it for the first time)."""
        return self.graph is None and self.calls >= WARMUP_STEPS

    def step(self, step_fn) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        if self.calls < WARMUP_STEPS:
            with torch.cuda.stream(self.stream):
                step_fn()
            current.wait_stream(self.stream)
            self.calls += 1
            return
        graph = torch.cuda.CUDAGraph()
        try:
            self.capture(graph, step_fn)
            current.wait_stream(self.stream)
            graph.replay()  # the capture ran nothing: this is the step
            # an asynchronous fault of the first replay surfaces here, not in a later step
            torch.cuda.synchronize(self.device)
        except BaseException:
            # a capture that fails in its end leaves the capture stream current
            torch.cuda.set_stream(current)
            raise
        self.graph = graph

    def capture(self, graph, step_fn) -> None:
        """Record ``step_fn``'s kernels into ``graph`` (they do not run)."""
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            step_fn()
