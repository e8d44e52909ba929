"""Benchmarks (not tests): ``python -m fedkd.tools.bench`` or ``fedkd bench``. Every printed line says
what it timed; with ``--out DIR`` each figure is also appended to ``DIR/bench-results.jsonl``
(date, device, what, img/s, command) and profiles are written there.

0. ``--ops``: the kernels and host syncs one batched local step dispatches per strategy
   (``fedkd.tools.bench_ops``), and exit.
1. Local training throughput: the sequential trainer against a bare PyTorch loop doing the same
   work (same model and initial weights, batches and augmentation, optimizer, clipping; FedAvg's
   step), side by side in one process, interleaved, median of the repeats; the final weights are
   compared.
2. One round's client training per engine (``--rounds-bench``): sequential (one client after
   another), batched (the round's clients side by side as one folded network,
   ``fedkd.engine.batched``) and, on CUDA, batched with CUDA graphs; images per second, median
   of the repeats, interleaved. The timed round is the second (``TIMED_ROUND``): the first is
   trained and aggregated once beforehand, so strategies that distil from the second round on
   (fedgkd's teacher) do so in the timed one; the first repetition (autotuning, graph capture) is
   discarded. Shapes: ``default`` (config/config.yaml: mnist5k, cnn, 10 clients, C 0.2, batch 64)
   and ``table3`` (CIFAR-10-shaped synthetic data, resnet8, 20 clients, C 0.2, fedgkd M 5).
   The engines' client weights are compared too (max abs difference).
3. Table-3 runs (``--strategies``, ``--engine``): CIFAR-10-shaped synthetic data, ResNet-8-GN,
   20 clients, C 0.2, 20 local epochs, batch 64, through the full round loop (``Run.run``). The
   first ``--warmup-rounds`` rounds (cuDNN autotuning, CUDA-graph capture, fedgkd's first round
   without a teacher) are not timed; each of the next ``--run-rounds`` rounds is timed whole
   (from the end of the previous round's writes to the end of its own) and split into local
   training (``train_clients``) and the fixed cost of a round (payload, aggregation, server
   update, evaluation, metrics and checkpoint writes). Reported: img/s of local training and of
   whole rounds, the fixed cost per round, and the projected minutes per 100 rounds.
4. ``--pack K[,K...]``: K table-3 runs sharing the device, one process each. Every process sets
   up and trains its warm-up rounds, then all wait on one barrier; from that shared start to the
   last process's end, the timed rounds of all K runs give img/s together.
5. ``--profile``: a torch.profiler trace of one round after the warm-up (with
   ``--profile-epochs`` local epochs, so the trace stays small) per strategy and engine,
   written to ``--out`` as ``profile-<strategy>-<engine>.json.gz`` (chrome://tracing, Perfetto),
   with the top operators printed.
6. ``--precision-check``: best accuracy of fp32 and bf16 runs on mnist5k over seeds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import queue
import re
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

import fedkd.engine.run as run_module
from fedkd.config import DEVICES, UPPER, RunSpec
from fedkd.data.synthetic import synthetic_cifar
from fedkd.engine.client import TrainEnv, train_clients
from fedkd.engine.cuda_graphs import GRAPHS_ENV
from fedkd.engine.gpu import use_gpu
from fedkd.engine.run import Run, resolve_device
from fedkd.models import MODELS, build_model
from fedkd.runtime.preprocess import Preprocessor, TrainInputs
from fedkd.runtime.schedule import ClientSchedule
from fedkd.runtime.seeding import clients_a_round, sample_clients
from fedkd.strategies.fedavg import FedAvg
from fedkd.values import integer_from, positive_number

# the local-training engines a benchmark can ask for: "graphs" is the batched trainer with CUDA
# graphs (FEDKD_CUDA_GRAPHS=1); "auto" is what a run gets by default (engine: auto, the caller's
# FEDKD_CUDA_GRAPHS)
ENGINES = ("auto", "sequential", "batched", "graphs")
# the round the round benchmark times (0-based): the second, the first in which fedgkd distils
TIMED_ROUND = 1
# the table-3 CIFAR-10 run (FedGKD's table 3): 4 of 20 clients a round, 20 local epochs
TABLE3 = dict(
    dataset="cifar10", model="resnet8", clients=20, participation=0.2, alpha=0.1,
    batch_size=64, local_epochs=20, rounds=100,
)  # fmt: skip
TABLE3_TRAIN_IMAGES = 45_000  # CIFAR-10's training split less its 5,000 validation images
# the models of the local-training comparison, which trains on CIFAR-10-shaped images
IMAGE_MODELS = tuple(m for m in MODELS if m != "distilbert")
STRATEGY_PARAMS = {"fedgkd": {"buffer": 5}}  # table 3's M
# the log line Run writes once a round's metrics and checkpoint are on disk
ROUND_LINE = re.compile(r"\[fedkd\] round (\d+)/")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spec_engine(engine: str) -> str:
    """The RunSpec ``engine`` of a benchmark engine name."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    return "batched" if engine == "graphs" else engine


@contextmanager
def engine_environment(engine: str):
    """FEDKD_CUDA_GRAPHS as the engine needs it (on for graphs, off for batched and sequential,
    untouched for auto), restored afterwards."""
    before = os.environ.get(GRAPHS_ENV)
    if engine != "auto":
        os.environ[GRAPHS_ENV] = "1" if engine == "graphs" else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GRAPHS_ENV, None)
        else:
            os.environ[GRAPHS_ENV] = before


def engine_label(choice: dict) -> str:
    """What ran, from run.json's ``engine`` record."""
    if choice["used"] == "batched":
        return "batched + CUDA graphs" if choice.get("cuda_graphs") else "batched"
    return "sequential"


# ---------------------------------------------------------------- 1. engine vs bare loop
def bare_loop(model, inputs: TrainInputs, schedule: ClientSchedule, spec: RunSpec, device) -> None:
    """The reference: a plain PyTorch training loop (torch.optim.SGD) over the same batches."""
    opt = torch.optim.SGD(
        model.parameters(), lr=spec.lr, momentum=spec.momentum,
        weight_decay=spec.weight_decay, foreach=True,
    )  # fmt: skip
    params = list(model.parameters())
    start = inputs.start(schedule.rows, schedule.off_y, schedule.off_x).to(device)
    flip, rows = schedule.flip.to(device), schedule.rows.to(device)
    model.train()
    for s, n in enumerate(schedule.count):
        x = inputs(start[s, :n], flip[s, :n])
        loss = F.cross_entropy(model(x), inputs.labels[rows[s, :n]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.grad_clip, foreach=True)
        opt.step()


def bench_local_training(args, device: torch.device) -> dict:
    ds = synthetic_cifar(n_train=args.batch_size * args.steps, n_val=10, n_test=10)
    spec = RunSpec(
        dataset="cifar10", model=args.model, clients=1, participation=1.0, local_epochs=1,
        batch_size=args.batch_size, device=device.type, precision=args.precision,
        engine="sequential", memory_format="contiguous",
    )  # fmt: skip
    ds.train, ds.val, ds.test = (s.to(device) for s in (ds.train, ds.val, ds.test))
    pre = Preprocessor(ds, "auto", device)
    torch.manual_seed(0)
    init = build_model(args.model, 10, (3, 32, 32)).to(device)
    env = TrainEnv(
        spec=spec, dataset=ds, client_index=[torch.arange(len(ds.train), device=device)],
        preprocess=pre, device=device, build_model=lambda: copy.deepcopy(init), num_classes=10,
    )  # fmt: skip
    inputs = env.inputs()
    schedule = env.schedule(0, 0)  # the batches the engine draws for client 0 in round 0
    strategy = FedAvg(None, None)
    images = len(ds.train) * spec.local_epochs
    times = {"engine": [], "bare": []}
    final = {}
    for rep in range(args.repeats + 1):  # the first repetition warms up and is discarded
        for which in ("engine", "bare"):
            _sync(device)
            t0 = time.perf_counter()
            if which == "engine":
                updates, _ = train_clients(0, [0], init, {}, strategy, env)
                final[which] = updates[0].state
            else:
                model = copy.deepcopy(init)
                bare_loop(model, inputs, schedule, spec, device)
                final[which] = model.state_dict()
            _sync(device)
            if rep > 0:
                times[which].append(time.perf_counter() - t0)
    diff = _max_abs_diff(final["engine"], final["bare"])
    eng = images / statistics.median(times["engine"])
    bare = images / statistics.median(times["bare"])
    return {"engine_img_s": eng, "bare_img_s": bare, "ratio": eng / bare, "max_abs_diff": diff}


# ---------------------------------------------------------------- 2. one round per engine
ROUND_SHAPES = {
    # config/config.yaml's defaults for mnist5k
    "default": dict(
        dataset="mnist5k", model="cnn", clients=10, participation=0.2, partition="dirichlet-equal",
        alpha=1.0, local_epochs=1, batch_size=64,
    ),
    # fedgkd's table 3 on CIFAR-10 (4 clients a round), on CIFAR-10-shaped synthetic data
    "table3": dict(
        dataset="cifar10", model="resnet8", strategy="fedgkd", params=STRATEGY_PARAMS["fedgkd"],
        clients=20, participation=0.2, alpha=0.1, batch_size=64,
    ),
}  # fmt: skip


_SCRATCH: list[tempfile.TemporaryDirectory] = []


def _scratch_dir() -> str:
    """A fresh directory for a benchmark run, inside one removed when the process exits."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="fedkd-bench-"))
    return tempfile.mkdtemp(dir=_SCRATCH[0].name)


def synthetic_table3_data(args):
    """CIFAR-10-shaped synthetic data, sized by ``--train-images`` and ``--eval-images``."""
    return synthetic_cifar(
        n_train=args.train_images, n_val=args.eval_images // 2, n_test=args.eval_images
    )


def round_setup(shape: str, engine: str, args, device: torch.device, dataset=None) -> Run:
    """A prepared run of ``shape`` for the round benchmark (nothing trained yet)."""
    options = dict(ROUND_SHAPES[shape])
    if shape == "table3":
        options["local_epochs"] = args.round_epochs
    spec = RunSpec(
        engine=spec_engine(engine), device=device.type, precision=args.precision, rounds=2,
        **options,
    )  # fmt: skip
    run = Run(spec, _scratch_dir(), dataset=dataset, log=lambda m: None)
    run.prepare()
    if args.client_samples:  # a shorter round (CPU): each client's first samples only
        run.env.client_index = [ix[: args.client_samples] for ix in run.env.client_index]
    return run


def warm_up_rounds(runs: list[Run]) -> None:
    """Train and aggregate the rounds before ``TIMED_ROUND`` on the first run and give every
    run its resulting state, so that all engines time the same round from the same weights."""
    first = runs[0]
    for r in range(TIMED_ROUND):
        first._round(r)
    for run in runs[1:]:
        run.global_model.load_state_dict(first.global_model.state_dict())
        run.strategy.load_state_dict(copy.deepcopy(first.strategy.state_dict()))


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def bench_round_engines(args, device: torch.device, shape: str) -> dict:
    """img/s of one round's client training per engine, median of ``args.repeats``, interleaved."""
    dataset = synthetic_table3_data(args) if shape == "table3" else None
    engines = ["sequential", "batched"] + (["graphs"] if device.type == "cuda" else [])
    runs = {}
    for e in engines:
        with engine_environment(e):
            runs[e] = round_setup(shape, e, args, device, copy.deepcopy(dataset))
    warm_up_rounds([runs[e] for e in engines])
    first = runs["sequential"]
    selected = sample_clients(
        first.spec.seed, TIMED_ROUND, first.spec.clients, first.spec.participation
    )
    images = first.spec.local_epochs * sum(len(first.env.client_index[c]) for c in selected)
    times: dict[str, list[float]] = {e: [] for e in engines}
    states = {}
    for rep in range(args.repeats + 1):  # the first repetition warms up and is discarded
        for e in engines:
            run = runs[e]
            with engine_environment(e):
                payload = run.strategy.payload(TIMED_ROUND, run.global_model)
                _sync(device)
                t0 = time.perf_counter()
                updates, _ = train_clients(
                    TIMED_ROUND, selected, run.global_model, payload, run.strategy, run.env
                )
                _sync(device)
            if rep > 0:
                times[e].append(time.perf_counter() - t0)
            states[e] = [u.state for u in updates]
            used = run.env.engine(run.strategy)
            assert used["used"] == ("sequential" if e == "sequential" else "batched"), used
            assert used.get("cuda_graphs", False) == (e == "graphs"), used
    diff = {
        e: max(_max_abs_diff(a, b) for a, b in zip(states["sequential"], states[e], strict=True))
        for e in engines[1:]
    }
    return {
        "shape": shape, "clients": len(selected), "images": images,
        "img_s": {e: images / statistics.median(times[e]) for e in engines},
        "max_abs_diff": diff, "epochs": first.spec.local_epochs,
        "strategy": first.spec.strategy,
    }  # fmt: skip


# ---------------------------------------------------------------- 3. table-3 runs
class RoundClock:
    """Times a run's rounds from inside ``Run.run``: each round ends at its log line (written
    after its metrics and checkpoint), and its local training is ``train_clients``' time."""

    def __init__(self, device: torch.device, on_round_end=None):
        self.device = device
        self.on_round_end = on_round_end
        self.ends: dict[int, float] = {}  # round (1-based) -> time its writes were done
        self.local: dict[int, float] = {}  # round -> seconds in train_clients
        self.images: dict[int, int] = {}  # round -> images trained
        self.run: Run | None = None

    def log(self, message: str) -> None:
        match = ROUND_LINE.match(message)
        if match:
            done = int(match.group(1))
            _sync(self.device)
            if self.on_round_end is not None:
                self.on_round_end(done)  # (a barrier or the profiler: before the clock reads)
            self.ends[done] = time.perf_counter()
        elif not self.ends or list(self.ends) == [0]:
            self.ends[0] = time.perf_counter()  # the last line before round 1: the loop starts

    def train_clients(self, round, selected, global_model, payload, strategy, env, *rest):
        _sync(env.device)
        t0 = time.perf_counter()
        result = train_clients(round, selected, global_model, payload, strategy, env, *rest)
        _sync(env.device)
        self.local[round + 1] = time.perf_counter() - t0
        self.images[round + 1] = env.spec.local_epochs * sum(
            len(env.client_index[c]) for c in selected
        )
        return result

    def run_rounds(self, spec: RunSpec, dataset, rounds: int) -> None:
        with (
            tempfile.TemporaryDirectory(prefix="fedkd-bench-") as out,
            mock.patch.object(run_module, "train_clients", self.train_clients),
        ):
            self.run = Run(spec, out, dataset=dataset, log=self.log)
            self.run.run(stop_after_round=rounds)

    def summary(self, timed: list[int]) -> dict:
        missing = [r for r in timed if r not in self.ends or r - 1 not in self.ends]
        if missing:
            raise RuntimeError(
                f"round(s) {missing} of the benchmark run did not finish: the run stopped early "
                "(diverged, or reached stop_at_acc)"
            )
        total = [self.ends[r] - self.ends[r - 1] for r in timed]
        local = [self.local[r] for r in timed]
        images = sum(self.images[r] for r in timed)
        return {
            "timed_rounds": timed,
            "images_per_round": images / len(timed),
            "local_img_s": images / sum(local),
            "round_img_s": images / sum(total),
            "round_s": statistics.mean(total),
            "local_s": statistics.mean(local),
            "fixed_s": statistics.mean(t - loc for t, loc in zip(total, local, strict=True)),
            "projected_min_100": 100 * statistics.mean(total) / 60,
        }


def table3_spec(strategy: str, engine: str, args, device: torch.device, **changes) -> RunSpec:
    options = dict(
        TABLE3, strategy=strategy, params=STRATEGY_PARAMS.get(strategy, {}),
        local_epochs=args.run_epochs, engine=spec_engine(engine), device=device.type,
        precision=args.precision, compile=args.compile, deterministic=args.deterministic,
    )  # fmt: skip
    options.update(changes)
    return RunSpec(**options)


def bench_table3_run(args, device: torch.device, strategy: str, engine: str) -> dict:
    """One table-3 run: ``args.warmup_rounds`` untimed rounds, then ``args.run_rounds`` timed."""
    clock = RoundClock(device)
    with engine_environment(engine):
        clock.run_rounds(
            table3_spec(strategy, engine, args, device), synthetic_table3_data(args),
            args.warmup_rounds + args.run_rounds,
        )  # fmt: skip
    first = args.warmup_rounds + 1
    result = clock.summary(list(range(first, first + args.run_rounds)))
    result.update(strategy=strategy, engine=engine_label(clock.run.env.engine(clock.run.strategy)))
    per_round = clients_a_round(TABLE3["clients"], TABLE3["participation"])
    full_images = TABLE3["local_epochs"] * per_round * TABLE3_TRAIN_IMAGES / TABLE3["clients"]
    if result["images_per_round"] < full_images:  # a reduced shape: scale its local training
        local_full = full_images / result["local_img_s"]
        result["projected_min_100_full"] = 100 * (local_full + result["fixed_s"]) / 60
    return result


def describe_table3_run(r: dict, args) -> str:
    timed = r["timed_rounds"]
    graphs, teacher = "CUDA graphs" in r["engine"], r["strategy"] == "fedgkd"
    warm = ["autotuning", *(["graph capture"] if graphs else [])]
    if args.warmup_rounds == 0:
        excluded = f"none: the timed rounds include {' and '.join(warm)}"
        if teacher:
            excluded += "; round 1, timed, has no teacher"
    else:
        excluded = ", ".join(warm + (["a first round without a teacher"] if teacher else []))
        if teacher and args.warmup_rounds == 1 and r["engine"] != "sequential":
            # the teacher first runs in round 2: a new step (its graph) and new shapes
            new = (
                "its step's graph capture and its convolutions' autotuning are"
                if graphs
                else "its convolutions' autotuning is"
            )
            excluded += f"; round 2, timed, is the teacher's first: {new} in it"
    line = (
        f"table-3 run {r['strategy']}, {r['engine']}, {args.precision}"
        f"{', deterministic' if args.deterministic else ''}"
        f"{f', compile {args.compile}' if args.compile != 'none' else ''}: "
        f"round{f's {timed[0]}-{timed[-1]}' if len(timed) > 1 else f' {timed[0]}'} timed after {args.warmup_rounds} warm-up round(s) "
        f"({excluded}), "
        f"{r['images_per_round']:,.0f} images a round; local training {r['local_img_s']:,.0f} "
        f"img/s ({r['local_s']:.2f} s a round); whole rounds {r['round_img_s']:,.0f} img/s "
        f"({r['round_s']:.2f} s a round); fixed cost {r['fixed_s']:.2f} s a round (payload, "
        f"aggregation, server update, evaluation of {args.eval_images + args.eval_images // 2:,} "
        f"images, metrics and checkpoint writes); projected 100 rounds: {r['projected_min_100']:.1f} min"
    )
    if "projected_min_100_full" in r:
        line += (
            f" (a reduced shape; at the full table-3 work, 180,000 images a round, by this local "
            f"img/s and fixed cost: {r['projected_min_100_full']:.1f} min)"
        )
    return line


# ---------------------------------------------------------------- 4. packed runs
def _packed_child(index, strategy, engine, args, device_name, barrier, results) -> None:
    """One of K packed runs: set up and warm up, wait for the others, then time its rounds."""
    try:
        parent = torch.device(device_name)
        if parent.type == "cuda":
            # the parent's GPU, which the K runs share by design (on a machine with several,
            # a process would otherwise claim a free one of its own)
            use_gpu(parent.index or 0)
        device = resolve_device(parent.type)
        started, ended = {}, {}
        last = args.warmup_rounds + args.run_rounds

        def at_round_end(done: int) -> None:
            if done == args.warmup_rounds:
                barrier.wait(timeout=args.pack_timeout)
                started["t"] = time.time()  # the shared start: all processes leave together
            if done == last:  # its timed rounds end here, before the end-of-run writes
                ended["t"] = time.time()

        clock = RoundClock(device, at_round_end)
        with engine_environment(engine):
            clock.run_rounds(
                table3_spec(strategy, engine, args, device), synthetic_table3_data(args),
                last,
            )  # fmt: skip
        timed = range(args.warmup_rounds + 1, last + 1)
        results.put(
            {
                "index": index, "start": started["t"], "end": ended["t"],
                "images": sum(clock.images[r] for r in timed),
                "local_s": sum(clock.local[r] for r in timed),
                "engine": engine_label(clock.run.env.engine(clock.run.strategy)),
            }
        )  # fmt: skip
    except BaseException as exc:  # the others must not wait for this one at the barrier
        barrier.abort()
        results.put({"index": index, "error": f"{type(exc).__name__}: {exc}"})
        raise


def bench_packed(args, device: torch.device, k: int, strategy: str, engine: str) -> dict:
    """K table-3 runs in K processes on one device, timed together from a shared start."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
    barrier, results = ctx.Barrier(k), ctx.Queue()
    procs = [
        ctx.Process(
            target=_packed_child,
            args=(i, strategy, engine, args, str(device), barrier, results),
        )
        for i in range(k)
    ]
    for p in procs:
        p.start()
    got = []
    while len(got) < k:
        try:
            got.append(results.get(timeout=5))
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                got.append({"error": "a packed run's process ended without a result"})
    for p in procs:
        p.join()
    errors = [g["error"] for g in got if "error" in g]
    if errors:
        raise RuntimeError(f"{len(errors)} of {k} packed runs failed: {errors[0]}")
    start, end = min(g["start"] for g in got), max(g["end"] for g in got)
    images = sum(g["images"] for g in got)
    return {
        "k": k, "strategy": strategy, "engine": got[0]["engine"], "images": images,
        "seconds": end - start, "img_s": images / (end - start),
        "start_spread_s": max(g["start"] for g in got) - start,
        "local_img_s_each": [g["images"] / g["local_s"] for g in got],
    }  # fmt: skip


# ---------------------------------------------------------------- 5. profile
def profile_round(args, device: torch.device, strategy: str, engine: str, out: Path) -> Path:
    """A torch.profiler trace of the round after the warm-up, with ``--profile-epochs``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)

    def at_round_end(done: int) -> None:
        if done == args.warmup_rounds:
            prof.start()
        elif done == args.warmup_rounds + 1:
            prof.stop()

    clock = RoundClock(device, at_round_end)
    spec = table3_spec(strategy, engine, args, device, local_epochs=args.profile_epochs)
    with engine_environment(engine):
        clock.run_rounds(spec, synthetic_table3_data(args), args.warmup_rounds + 1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"profile-{strategy}-{engine}.json.gz"
    prof.export_chrome_trace(str(path))
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.profile_rows), flush=True)
    return path


# ---------------------------------------------------------------- 6. precision
def precision_check(args, device: torch.device) -> list[tuple[str, int, float]]:
    """Best-round accuracy of the same mnist5k runs in fp32 and bf16, per seed: bf16 should land
    within the seed-to-seed spread of fp32."""
    results = []
    for precision in ("fp32", "bf16"):
        for seed in range(args.check_seeds):
            spec = RunSpec(
                dataset="mnist5k", clients=10, participation=0.4, alpha=0.5, local_epochs=1,
                rounds=args.check_rounds, seed=seed, device=device.type, precision=precision,
            )  # fmt: skip
            with tempfile.TemporaryDirectory() as out:
                record = Run(spec, out, log=lambda msg: None).run()
            results.append((precision, seed, record["summary"]["best_acc"]))
    return results


# ---------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fedkd bench", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.command = "fedkd bench " + " ".join(argv)
    return run_bench(args)


def _names(text: str) -> list[str]:
    return [s for s in text.split(",") if s and s != "none"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    count, count_or_zero = integer_from(1), integer_from(0)
    p.add_argument("--device", default="auto", choices=DEVICES, help="auto, cpu, cuda or mps")
    p.add_argument("--out", help="folder for bench-results.jsonl and profiles (none: print only)")
    p.add_argument(
        "--ops", action="store_true",
        help="count the kernels and host syncs of one 4-client local step of ResNet-8-GN per "
        "strategy (one line each) and exit",
    )  # fmt: skip
    p.add_argument("--ops-strategies", default="", help="with --ops: comma-separated strategies")
    p.add_argument("--ops-detail", action="store_true", help="with --ops: the count per operator")
    p.add_argument(
        "--model", default="resnet8", choices=IMAGE_MODELS,
        help="model of the local-training comparison [resnet8]",
    )  # fmt: skip
    p.add_argument(
        "--batch-size", type=integer_from(1, UPPER["batch_size"]), default=64,
        help="batch size of the local-training comparison [64]",
    )  # fmt: skip
    p.add_argument("--steps", type=count, default=100, help="SGD steps per measured repetition")
    p.add_argument("--repeats", type=count, default=3, help="measured repetitions (median) [3]")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--compile", default="none", choices=("none", "default", "reduce-overhead"))
    p.add_argument(
        "--strategies", default="fedavg,fedgkd",
        help="strategies of the table-3 runs (comma-separated) [fedavg,fedgkd]",
    )  # fmt: skip
    p.add_argument(
        "--engine", default="auto",
        help="engines of the table-3 runs, comma-separated: auto (the run's default), "
        "sequential, batched (batched), graphs (batched + CUDA graphs) [auto]",
    )  # fmt: skip
    p.add_argument(
        "--warmup-rounds", type=count_or_zero, default=2, help="untimed rounds before timing [2]"
    )
    p.add_argument("--run-rounds", type=count, default=2, help="timed rounds of a table-3 run [2]")
    p.add_argument("--run-epochs", type=count, default=20, help="local epochs of a table-3 run")
    p.add_argument(
        "--train-images", type=count, default=TABLE3_TRAIN_IMAGES,
        help="training images of the synthetic CIFAR-10-shaped data (fewer: a smaller round)",
    )  # fmt: skip
    p.add_argument(
        "--eval-images", type=count, default=10_000,
        help="test images of the synthetic data (the validation split gets half as many)",
    )  # fmt: skip
    p.add_argument(
        "--deterministic", action="store_true",
        help="run the table-3 runs with deterministic: true (deterministic GPU kernels)",
    )  # fmt: skip
    p.add_argument(
        "--rounds-bench", default="default,table3",
        help="shapes of the per-engine round benchmark (comma-separated: default, table3), or none",
    )  # fmt: skip
    p.add_argument("--round-epochs", type=count, default=1, help="local epochs of the table3 round")
    p.add_argument(
        "--client-samples", type=count_or_zero, default=0,
        help="train each client on its first N samples only in the round benchmark (0: all)",
    )  # fmt: skip
    p.add_argument("--skip-run", action="store_true", help="no table-3 runs")
    p.add_argument(
        "--skip-throughput", action="store_true", help="no engine-versus-bare-loop comparison"
    )
    p.add_argument(
        "--pack", default="",
        help="K[,K...]: K table-3 runs sharing the device, one process each, timed together "
        "(the first of --strategies and of --engine)",
    )  # fmt: skip
    p.add_argument(
        "--pack-timeout", type=positive_number, default=600.0,
        help="seconds a packed run waits for the others at the barrier [600]",
    )  # fmt: skip
    p.add_argument(
        "--profile", action="store_true",
        help="write a torch.profiler trace of one round per strategy and engine to --out",
    )  # fmt: skip
    p.add_argument(
        "--profile-epochs", type=count, default=1, help="local epochs of the profiled run"
    )
    p.add_argument("--profile-rows", type=count, default=25, help="operators printed per profile")
    p.add_argument(
        "--precision-check", action="store_true",
        help="also compare best accuracy of fp32 and bf16 runs on mnist5k over seeds",
    )  # fmt: skip
    p.add_argument("--check-seeds", type=count, default=3, help="seeds per precision [3]")
    p.add_argument("--check-rounds", type=count, default=10, help="rounds of each run [10]")


class Results:
    """Prints each figure with what it timed and, with ``--out``, appends it to
    bench-results.jsonl (one JSON object a line: the columns of performance.md's GPU table)."""

    def __init__(self, args, device_name: str):
        self.path = Path(args.out) / "bench-results.jsonl" if args.out else None
        self.device, self.command = device_name, getattr(args, "command", "fedkd bench")

    def add(self, line: str, img_s: float, details: dict | None = None) -> None:
        print(line, flush=True)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {
            "date": datetime.now(timezone.utc).date().isoformat(), "device": self.device,
            "what": line, "img_s": img_s, "command": self.command, "details": details or {},
        }  # fmt: skip
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


def check_arguments(args) -> None:
    for name in _names(args.engine):
        if name not in ENGINES:
            raise SystemExit(f"fedkd bench: --engine {name!r} is not one of {', '.join(ENGINES)}")
    if args.profile and not args.out:
        raise SystemExit("fedkd bench: --profile writes a trace: give --out DIR")
    if args.pack:
        if not all(k.isdigit() and int(k) >= 1 for k in _names(args.pack)):
            raise SystemExit(f"fedkd bench: --pack {args.pack!r} must be counts >= 1, e.g. 4,8")
        if args.warmup_rounds < 1:
            raise SystemExit(
                "fedkd bench: --pack needs --warmup-rounds >= 1 (the runs meet after it)"
            )


def run_bench(args) -> int:
    check_arguments(args)
    device = resolve_device(args.device)
    if args.ops:
        from fedkd.tools.bench_ops import print_ops

        print_ops(_names(args.ops_strategies) or None, device, detail=args.ops_detail)
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads")
    results = Results(args, name)
    engines = _names(args.engine)
    if device.type != "cuda" and "graphs" in engines:
        print("skipped: engine graphs (CUDA graphs need a CUDA device)", flush=True)
        engines = [e for e in engines if e != "graphs"]
    if not args.skip_throughput:
        r = bench_local_training(args, device)
        results.add(
            f"local training, sequential trainer vs a bare PyTorch loop on the same batches "
            f"(FedAvg's step, {args.model}, batch {args.batch_size}, {args.steps} steps, median "
            f"of {args.repeats}, {args.precision}): engine {r['engine_img_s']:,.1f} img/s, bare "
            f"{r['bare_img_s']:,.1f} img/s, ratio {r['ratio']:.3f} (final weights, max abs "
            f"difference: {r['max_abs_diff']:.1e})",
            r["engine_img_s"], r,
        )  # fmt: skip
    for shape in _names(args.rounds_bench):
        r = bench_round_engines(args, device, shape)
        figures = ", ".join(f"{e} {v:,.0f}" for e, v in r["img_s"].items())
        diffs = ", ".join(f"{e} {v:.1e}" for e, v in r["max_abs_diff"].items())
        results.add(
            f"local training of round {TIMED_ROUND + 1} (after round {TIMED_ROUND} was trained "
            f"and aggregated; first repetition discarded: autotuning, graph capture) of the "
            f"{shape} shape ({r['strategy']}, {r['clients']} clients, {r['images']} images, "
            f"{r['epochs']} local epoch(s), median of {args.repeats}, {args.precision}): img/s "
            f"{figures}; batched/sequential "
            f"{r['img_s']['batched'] / r['img_s']['sequential']:.2f}; client weights vs "
            f"sequential, max abs: {diffs}",
            max(r["img_s"].values()), r,
        )  # fmt: skip
    if not args.skip_run:
        for strategy in _names(args.strategies):
            for engine in engines:
                r = bench_table3_run(args, device, strategy, engine)
                results.add(describe_table3_run(r, args), r["round_img_s"], r)
    if args.pack:
        strategy, engine = _names(args.strategies)[0], (engines or ["auto"])[0]
        for k in [int(x) for x in _names(args.pack)]:
            r = bench_packed(args, device, k, strategy, engine)
            each = ", ".join(f"{v:,.0f}" for v in r["local_img_s_each"])
            results.add(
                f"{k} table-3 runs packed on one device ({strategy}, {r['engine']}, "
                f"{args.precision}), one process each, timed together from a shared start after "
                f"their set-up and {args.warmup_rounds} warm-up round(s) (started within "
                f"{r['start_spread_s']:.2f} s of each other): {args.run_rounds} round(s) each, "
                f"{r['images']:,} images in {r['seconds']:.1f} s, together {r['img_s']:,.0f} "
                f"img/s (whole rounds); local training per run: {each} img/s",
                r["img_s"], r,
            )  # fmt: skip
    if args.profile:
        for strategy in _names(args.strategies):
            for engine in engines:
                path = profile_round(args, device, strategy, engine, Path(args.out))
                print(
                    f"profile of round {args.warmup_rounds + 1} of a table-3 run ({strategy}, "
                    f"engine {engine}, {args.profile_epochs} local epoch(s)): {path}",
                    flush=True,
                )
    if args.precision_check:
        checked = precision_check(args, device)
        for precision in ("fp32", "bf16"):
            accs = [a for p, _, a in checked if p == precision]
            per_seed = ", ".join(f"{a:.4f}" for a in accs)
            print(
                f"mnist5k best accuracy ({args.check_rounds} round(s)) {precision}: "
                f"{statistics.mean(accs):.4f} ± {statistics.pstdev(accs):.4f} (seeds: {per_seed})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
