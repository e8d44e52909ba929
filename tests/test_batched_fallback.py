"""CUDA graphs and the compiled step never fail a run: a CUDA-graph capture that fails (or its first replay), or a
compiled step that fails at its first use, leaves the run on the eager step with the reason and
the seconds lost in run.json, and numbers equal to an eager run's, bit for bit; a failure of the
eager step itself fails the run, and run.json says so. run.json is written again whenever the
engine's record changes, and after every round, so that it says what is true during the run.

On a CPU: the graph path is forced on (``graphs_choice``) and torch.cuda's stream calls are
replaced, ``GraphedStep.capture`` recording the step (running nothing, as a capture does) and a
replay running it; the compile path as tests/test_batched_default.py forces it."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine import batched, choice, compiled_step, cuda_graphs
from fedkd.engine.run import Run
from test_batched_default import BATCHED, force_compile

CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"


def train(spec: RunSpec, out: Path) -> tuple[dict, list]:
    record = Run(spec, out, log=lambda msg: None).run()
    metrics = pd.read_parquet(out / "metrics.parquet")
    return record, metrics[["test_acc", "test_loss", "train_loss"]].values.tolist()


def on_disk(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


class Stream:
    def wait_stream(self, other) -> None:
        pass


class RecordedGraph:
    """A CUDA graph on a CPU: the capture records the step function, a replay runs it."""

    fail_replay = False

    def __init__(self):
        self.step_fn, self.replays = None, 0

    def replay(self) -> None:
        self.replays += 1
        if RecordedGraph.fail_replay and self.replays == 1:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        self.step_fn()


class Graphs:
    """What the test saw of the graph path: captures tried, streams set back."""

    def __init__(self):
        self.captures, self.streams_set = 0, 0


@pytest.fixture
def graphs(monkeypatch) -> Graphs:
    """The batched trainer takes the graph path on the CPU; a capture records the step."""
    seen = Graphs()
    monkeypatch.setattr(choice, "graphs_choice", lambda engine, device: (True, None))
    monkeypatch.setattr(batched, "graph_pool", lambda: "pool")
    monkeypatch.setattr(batched, "capture_stream", lambda device: Stream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: _Nothing())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)

    def set_stream(stream) -> None:
        seen.streams_set += 1

    def capture(self, graph, step_fn) -> None:
        seen.captures += 1
        graph.step_fn = step_fn

    monkeypatch.setattr(torch.cuda, "set_stream", set_stream)
    monkeypatch.setattr(cuda_graphs.GraphedStep, "capture", capture)
    monkeypatch.setattr(RecordedGraph, "fail_replay", False)
    return seen


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def failing_capture(monkeypatch, graphs: Graphs) -> None:
    """A capture that fails as torch.cuda.graph does when its body fails: the body's error, then
    the capture's end failing on it (the first error is the reason recorded)."""

    def capture(self, graph, step_fn) -> None:
        graphs.captures += 1
        try:
            raise RuntimeError(f"{CAPTURE_ERROR}\nCUDA kernel errors might be reported later")
        finally:
            raise RuntimeError(
                "CUDA error: operation failed due to a previous error during capture"
            )

    monkeypatch.setattr(cuda_graphs.GraphedStep, "capture", capture)


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> list:
    """The metrics of the eager batched run every test compares with (seed 1), trained before
    any test's fixture forces CUDA graphs or the compiled step on."""
    return train(RunSpec(**BATCHED, seed=1), tmp_path_factory.mktemp("eager") / "run")[1]


def test_the_stand_in_graph_path_equals_the_eager_run(graphs, eager, tmp_path):
    """The graph path as the tests below force it: warm-up steps, one capture, replays; the
    run equals the eager one bit for bit (the stand-in is faithful), with graphs recorded on."""
    record, graphed = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    assert record["engine"]["cuda_graphs"] is True and graphs.captures == 1
    assert graphed == eager


@pytest.mark.parametrize("where", ["capture", "first replay"])
def test_a_failed_capture_falls_back_to_the_eager_step(where, graphs, eager, monkeypatch, tmp_path):
    if where == "capture":
        failing_capture(monkeypatch, graphs)
    else:
        monkeypatch.setattr(RecordedGraph, "fail_replay", True)
    record, fallen_back = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    assert record["status"] == "complete"
    engine = on_disk(tmp_path / "run")["engine"]
    message = (
        f"RuntimeError: {CAPTURE_ERROR}"
        if where == "capture"
        else "RuntimeError: CUDA error: an illegal instruction was encountered"
    )
    assert engine["cuda_graphs"] is False
    assert engine["cuda_graphs_reason"] == (
        f"capturing the step as a CUDA graph failed ({message}); the batched step runs eagerly"
    )
    assert engine["cuda_graphs_seconds_lost"] >= 0
    assert graphs.captures == 1, "one capture tried, none again in the same run"
    assert graphs.streams_set == 1, "the current stream was put back after the failure"
    assert fallen_back == eager


def test_a_failed_capture_drops_the_compiled_step_with_the_graphs(
    graphs, eager, monkeypatch, tmp_path
):
    failing_capture(monkeypatch, graphs)
    force_compile(monkeypatch, lambda fn: lambda *args, **kwargs: fn(*args, **kwargs))
    record, fallen_back = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    engine = record["engine"]
    assert (engine["cuda_graphs"], engine["compile_step"]) == (False, False)
    assert engine["compile_step_reason"] == (
        "dropped with the CUDA graphs, whose capture failed: the batched step runs eagerly"
    )
    assert fallen_back == eager


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_compiled_step_failing_at_its_first_use_falls_back(where, eager, monkeypatch, tmp_path):
    """The trial (forward and backward of the first batch) passes; the first real step fails,
    in the compiled forward or in its backward (where a lazily compiled backward would fail)."""
    calls = {"n": 0}

    class FailingBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("the backward's kernels failed to build")

    def compiled(fn):
        def call(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2 and where == "forward":  # 1: the trial; 2: the first step
                raise AssertionError("a guard failed")
            features, logits = fn(*args, **kwargs)
            if calls["n"] == 2:
                logits = FailingBackward.apply(logits)
            return features, logits

        return call

    force_compile(monkeypatch, compiled)
    changes = []
    real = Run._engine_changed

    def engine_changed(self):
        real(self)
        changes.append(on_disk(self.out))

    monkeypatch.setattr(Run, "_engine_changed", engine_changed)
    record, fallen_back = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    assert record["status"] == "complete"
    engine = on_disk(tmp_path / "run")["engine"]
    message = (
        "AssertionError: a guard failed"
        if where == "forward"
        else "RuntimeError: the backward's kernels failed to build"
    )
    assert engine["compile_step"] is False
    assert engine["compile_step_reason"] == (
        f"the compiled step failed in its first use ({message}); the batched step runs eagerly"
    )
    assert engine["compile_step_seconds_lost"] >= engine["compile_step_seconds"] >= 0
    assert fallen_back == eager
    # written at once, three times within round 1: the trial running, its outcome, the fallback
    assert [(c["status"], c["rounds_done"]) for c in changes] == [("running", 0)] * 3
    assert [c["engine"]["compile_step"] for c in changes] == [False, True, False]
    assert changes[0]["engine"]["compile_step_reason"] == compiled_step.TRIAL_RUNNING
    assert calls["n"] == 2, "the compiled forward is not called again after it failed"


def test_a_failing_eager_step_fails_the_run_and_run_json_says_so(graphs, monkeypatch, tmp_path):
    """A capture that fails, then the eager step too (in round 2): the run fails, and run.json
    says failed, why, and the rounds the checkpoint holds, not running."""
    failing_capture(monkeypatch, graphs)
    step, train_round = batched.BatchedTrainer._step, batched.BatchedTrainer.train
    rounds = []

    def counted(self, *args):
        rounds.append(len(rounds) + 1)
        return train_round(self, *args)

    def step_failing_in_round_2(self):
        if rounds[-1] == 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        step(self)

    monkeypatch.setattr(batched.BatchedTrainer, "train", counted)
    monkeypatch.setattr(batched.BatchedTrainer, "_step", step_failing_in_round_2)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="out of memory"):
        Run(RunSpec(**dict(BATCHED, rounds=3)), out, log=lambda msg: None).run()
    record = on_disk(out)
    assert record["status"] == "failed" and record["rounds_done"] == 1
    assert record["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert record["engine"]["cuda_graphs"] is False  # the fallback it took is on record too
    # the checkpoint holds the round: the same command resumes from it
    monkeypatch.setattr(batched.BatchedTrainer, "_step", step)
    done = Run(RunSpec(**dict(BATCHED, rounds=3)), out, log=lambda msg: None).run()
    assert done["status"] == "complete" and done["error"] is None


def test_run_json_says_the_rounds_done_during_the_run(tmp_path, fake_rounds):
    out = tmp_path / "run"
    seen = []
    run = Run(RunSpec(**dict(BATCHED, rounds=3)), out, log=lambda msg: None)
    run.on_rounds_done = lambda done, row: seen.append(
        (done, on_disk(out)["status"], on_disk(out)["rounds_done"])
    )
    run.run()
    assert seen == [(0, "running", 0), (1, "running", 1), (2, "running", 2), (3, "running", 3)]
    assert on_disk(out)["status"] == "complete"


def test_a_resumed_run_counts_the_steps_it_has_left(monkeypatch, tmp_path):
    """Compiled where the whole run's steps reach the bound; resumed after round 1 of 3, the
    steps left (2 rounds) do not, and the run stays eager saying so."""
    force_compile(monkeypatch, lambda fn: fn)
    spec = RunSpec(**dict(BATCHED, rounds=3))
    out = tmp_path / "run"
    first = Run(spec, out, log=lambda msg: None)
    first.prepare()
    per_round = batched.steps_per_round  # the trainer's tables: its longest client's steps
    steps = max(
        per_round(len(ix), spec.local_epochs, spec.batch_size) for ix in first.env.client_index
    )
    monkeypatch.setattr(compiled_step, "COMPILE_MIN_STEPS", 3 * steps)
    first.run(stop_after_round=1)
    assert on_disk(out)["engine"]["compile_step"] is True
    resumed = Run(spec, out, log=lambda msg: None).run()
    assert resumed["engine"]["compile_step"] is False
    assert resumed["engine"]["compile_step_reason"].startswith(
        f"the run has {2 * steps} batched steps left to take, fewer than {3 * steps}:"
    )
    # the record's engine is this attempt's; round 1's, compiled, is kept beside it
    (earlier,) = resumed["earlier_attempts"]
    assert earlier["rounds_through"] == 1 and earlier["engine"]["compile_step"] is True
    assert earlier["device"] == resumed["device"] and earlier["command"] == resumed["command"]


def test_a_crash_mid_run_leaves_run_json_saying_failed_with_the_rounds_done(
    tmp_path, fake_rounds, monkeypatch
):
    out = tmp_path / "run"
    fake = Run._round

    def crash_in_round_3(self, r):
        if r == 2:
            raise ValueError("a strategy's state went wrong\nmore lines")
        return fake(self, r)

    monkeypatch.setattr(Run, "_round", crash_in_round_3)
    with pytest.raises(ValueError, match="went wrong"):
        Run(RunSpec(**dict(BATCHED, rounds=4)), out, log=lambda msg: None).run()
    record = on_disk(out)
    assert (record["status"], record["rounds_done"]) == ("failed", 2)
    assert record["error"] == "ValueError: a strategy's state went wrong"


def test_a_retry_after_a_sticky_replay_failure_runs_eagerly(graphs, eager, monkeypatch, tmp_path):
    """On a GPU, "an illegal instruction was encountered" is sticky: every later CUDA call of the
    process fails, the eager step included, so the attempt fails (run.json: failed, and
    cuda_graphs false with the reason). The job's retry is a new process with a working
    context; it must not capture again (and fail again, as every retry would) but take the eager
    step that the earlier attempt recorded it fell back to."""
    step, dead = batched.BatchedTrainer._step, {"context": False}

    def replay(self) -> None:
        dead["context"] = True
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    def sticky_step(self) -> None:
        if dead["context"]:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        step(self)

    monkeypatch.setattr(RecordedGraph, "replay", replay)
    monkeypatch.setattr(batched.BatchedTrainer, "_step", sticky_step)
    spec, out = RunSpec(**BATCHED, seed=1), tmp_path / "run"
    with pytest.raises(RuntimeError, match="illegal instruction"):
        Run(spec, out, log=lambda msg: None).run()
    assert on_disk(out)["engine"]["cuda_graphs"] is False
    dead["context"], captures = False, graphs.captures  # the retry: a new process
    record, metrics = train(spec, out)
    assert "earlier_attempts" not in record, "the failed attempt trained no round"
    assert graphs.captures == captures, "the retry captured again"
    assert record["status"] == "complete" and metrics == eager
    assert record["engine"]["cuda_graphs"] is False
    assert record["engine"]["cuda_graphs_reason"] == (
        "off since an earlier attempt of this run: capturing the step as a CUDA graph failed "
        "(RuntimeError: CUDA error: an illegal instruction was encountered); the batched step "
        "runs eagerly"
    )


def test_a_capture_stream_cuda_cannot_make_falls_back_to_the_eager_step(
    graphs, eager, monkeypatch, tmp_path
):
    def no_stream(device):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(batched, "capture_stream", no_stream)
    record, fallen_back = train(RunSpec(**BATCHED, seed=1), tmp_path / "run")
    assert record["status"] == "complete" and fallen_back == eager
    assert record["engine"]["cuda_graphs"] is False
    assert "(RuntimeError: CUDA error: out of memory)" in record["engine"]["cuda_graphs_reason"]
    assert graphs.captures == 0


def test_only_graphs_or_a_compiled_step_that_failed_earlier_stay_off():
    """What an earlier attempt's engine record carries into the next: a failed capture or
    compile (with the seconds it lost) and a compiled step dropped with failed graphs; not a
    choice made for its device (a run resumed on a GPU after a start on the CPU)."""
    on = {"used": "batched", "cuda_graphs": True, "cuda_graphs_reason": None,
          "compile_step": True, "compile_step_reason": None}  # fmt: skip
    failed = {"cuda_graphs": False, "cuda_graphs_reason": "capturing ... failed",
              "cuda_graphs_seconds_lost": 0.5, "compile_step": False,
              "compile_step_reason": choice.DROPPED_WITH_GRAPHS}  # fmt: skip
    after = choice.after_earlier_attempt(dict(on), failed)
    assert (after["cuda_graphs"], after["compile_step"]) == (False, False)
    assert after["cuda_graphs_reason"] == choice.EARLIER + "capturing ... failed"
    assert choice.after_earlier_attempt(dict(on), after) == after, "said once, however many retries"
    compile_failed = {"cuda_graphs": True, "compile_step": False, "compile_step_reason": "boom",
                      "compile_step_seconds_lost": 3.0}  # fmt: skip
    assert choice.after_earlier_attempt(dict(on), compile_failed)["cuda_graphs"] is True
    assert choice.after_earlier_attempt(dict(on), compile_failed)["compile_step"] is False
    on_cpu = {"cuda_graphs": False, "cuda_graphs_reason": cuda_graphs.GRAPHS_OFF_CUDA,
              "compile_step": False, "compile_step_reason": "off CUDA"}  # fmt: skip
    for earlier in (on_cpu, None, "damaged", {}):
        assert choice.after_earlier_attempt(dict(on), earlier) == on


def test_a_failing_first_step_is_the_steps_failure_not_the_captures(graphs, monkeypatch, tmp_path):
    """The run's first step is a warm-up step, an eager step: where it fails (CUDA out of memory)
    nothing was captured, so the graphs are not blamed, the step is not taken twice, and the
    retry, with the memory it needed, captures as the run asked."""
    step, calls = batched.BatchedTrainer._step, {"n": 0}

    def out_of_memory(self) -> None:
        calls["n"] += 1
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(batched.BatchedTrainer, "_step", out_of_memory)
    spec, out = RunSpec(**BATCHED, seed=1), tmp_path / "run"
    with pytest.raises(RuntimeError, match="out of memory"):
        Run(spec, out, log=lambda msg: None).run()
    record = on_disk(out)
    assert record["status"] == "failed" and calls["n"] == 1, "the failed step was run again"
    assert graphs.captures == 0
    assert (record["engine"]["cuda_graphs"], record["engine"]["cuda_graphs_reason"]) == (True, None)
    monkeypatch.setattr(batched.BatchedTrainer, "_step", step)
    retried, _ = train(spec, out)
    assert retried["status"] == "complete" and retried["engine"]["cuda_graphs"] is True
    assert graphs.captures == 1


class ProcessDied(BaseException):
    """What a process killed in the compiler leaves (SIGKILL at a job's time limit, a crash):
    nothing after it runs, no handler, no record."""


def test_an_attempt_that_died_compiling_leaves_the_compiled_step_off_in_its_retry(
    eager, monkeypatch, tmp_path
):
    def dies(fn):
        raise ProcessDied

    force_compile(monkeypatch, dies)
    spec, out = RunSpec(**BATCHED, seed=1), tmp_path / "run"
    with pytest.raises(ProcessDied):
        Run(spec, out, log=lambda msg: None).run()
    record, metrics = train(spec, out)  # the retry, where the compiler would die again
    assert record["status"] == "complete" and metrics == eager
    assert record["engine"]["compile_step"] is False
    assert record["engine"]["compile_step_reason"] == (
        choice.EARLIER + compiled_step.TRIAL_UNFINISHED
    )


def test_a_stop_asked_for_during_the_compile_trial_compiles_again_in_the_retry(
    monkeypatch, tmp_path
):
    stop = {"once": True}

    def interrupted(fn):
        if stop.pop("once", False):
            raise KeyboardInterrupt
        return fn

    force_compile(monkeypatch, interrupted)
    spec, out = RunSpec(**BATCHED, seed=1), tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Run(spec, out, log=lambda msg: None).run()
    assert on_disk(out)["status"] == "stopped"
    record, _ = train(spec, out)
    assert (record["engine"]["compile_step"], record["engine"]["compile_step_reason"]) == (
        True,
        None,
    )
