"""One round's client training per engine (``--rounds-bench``): sequential (one client after
another), the batched trainer eager (``batched-eager``: the round's clients side by side as one
folded network, ``fedkd.engine.batched``) and, on CUDA, as a run gets it by default
(``batched``: CUDA graphs and, where the run is long enough, the compiled step); images per
second, median of the repeats, interleaved. The timed round is the second (``TIMED_ROUND``): the
first is trained and aggregated once beforehand, so strategies that distil from the second
round on (fedgkd's teacher) do so in the timed one; the first repetition (autotuning, graph
capture, compilation) is discarded. Shapes: ``default`` (config/config.yaml: mnist5k, cnn, 10
clients, C 0.2, batch 64, 10 rounds) and ``table3`` (CIFAR-10-shaped synthetic data, resnet8,
20 clients, C 0.2, fedgkd M 5, 100 rounds; the rounds decide whether the step is compiled). The
engines' client weights are compared too (max abs difference)."""

from __future__ import annotations

import copy
import statistics
import time

import torch

from fedkd.config import RunSpec
from fedkd.engine.client import train_clients
from fedkd.engine.run import Run
from fedkd.runtime.seeding import sample_clients
from fedkd.tools.bench.common import (
    STRATEGY_PARAMS,
    max_abs_diff,
    scratch_dir,
    sync,
    synthetic_table3_data,
)

# the round the round benchmark times (0-based): the second, the first in which fedgkd distils
TIMED_ROUND = 1
ROUND_SHAPES = {
    # config/config.yaml's defaults for mnist5k
    "default": dict(
        dataset="mnist5k", model="cnn", clients=10, participation=0.2, partition="dirichlet-equal",
        alpha=1.0, local_epochs=1, batch_size=64, rounds=10,
    ),
    # fedgkd's table 3 on CIFAR-10 (4 clients a round), on CIFAR-10-shaped synthetic data
    "table3": dict(
        dataset="cifar10", model="resnet8", strategy="fedgkd", params=STRATEGY_PARAMS["fedgkd"],
        clients=20, participation=0.2, alpha=0.1, batch_size=64, rounds=100,
    ),
}  # fmt: skip


def round_engines(device: torch.device) -> list[str]:
    """Sequential and the batched trainer eager; on CUDA also as a run gets it by default."""
    return ["sequential", "batched-eager"] + (["batched"] if device.type == "cuda" else [])


def round_setup(shape: str, engine: str, args, device: torch.device, dataset=None) -> Run:
    """A prepared run of ``shape`` for the round benchmark (nothing trained yet)."""
    options = dict(ROUND_SHAPES[shape])
    if shape == "table3":
        options["local_epochs"] = args.round_epochs
    spec = RunSpec(engine=engine, device=device.type, precision=args.precision, **options)
    run = Run(spec, scratch_dir(), dataset=dataset, log=lambda m: None)
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


def bench_round_engines(args, device: torch.device, shape: str) -> dict:
    """img/s of one round's client training per engine, median of ``args.repeats``, interleaved."""
    dataset = synthetic_table3_data(args) if shape == "table3" else None
    engines = round_engines(device)
    runs = {e: round_setup(shape, e, args, device, copy.deepcopy(dataset)) for e in engines}
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
            payload = run.strategy.payload(TIMED_ROUND, run.global_model)
            sync(device)
            t0 = time.perf_counter()
            updates, _ = train_clients(
                TIMED_ROUND, selected, run.global_model, payload, run.strategy, run.env
            )
            sync(device)
            if rep > 0:
                times[e].append(time.perf_counter() - t0)
            states[e] = [u.state for u in updates]
    used = {e: runs[e].env.engine(runs[e].strategy) for e in engines}
    for e, choice in used.items():
        assert choice["used"] == ("sequential" if e == "sequential" else "batched"), choice
    diff = {
        e: max(max_abs_diff(a, b) for a, b in zip(states["sequential"], states[e], strict=True))
        for e in engines[1:]
    }
    return {
        "shape": shape, "clients": len(selected), "images": images,
        "img_s": {e: images / statistics.median(times[e]) for e in engines},
        "max_abs_diff": diff, "epochs": first.spec.local_epochs,
        "strategy": first.spec.strategy, "engines": used,
    }  # fmt: skip


def describe_round_engines(r: dict, args) -> str:
    figures = ", ".join(f"{e} {v:,.0f}" for e, v in r["img_s"].items())
    diffs = ", ".join(f"{e} {v:.1e}" for e, v in r["max_abs_diff"].items())
    compiled = [e for e, c in r["engines"].items() if c.get("compile_step")]
    seconds = ", ".join(
        f"{e} compiled in {r['engines'][e]['compile_step_seconds']:.1f} s" for e in compiled
    )
    return (
        f"local training of round {TIMED_ROUND + 1} (after round {TIMED_ROUND} was trained "
        f"and aggregated; first repetition discarded: autotuning, graph capture, compilation) of "
        f"the {r['shape']} shape ({r['strategy']}, {r['clients']} clients, {r['images']} images, "
        f"{r['epochs']} local epoch(s), median of {args.repeats}, {args.precision}): img/s "
        f"{figures}; batched-eager/sequential "
        f"{r['img_s']['batched-eager'] / r['img_s']['sequential']:.2f}"
        f"{f'; {seconds}' if seconds else ''}; client weights vs sequential, max abs: {diffs}"
    )
