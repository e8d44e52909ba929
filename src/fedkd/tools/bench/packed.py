"""``--pack K[,K...]``: K table-3 runs sharing the device, one process each. Every process sets
up and trains its warm-up rounds, then all wait on one barrier; from that shared start to the
last process's end, the timed rounds of all K runs give img/s together."""

from __future__ import annotations

import queue
import time

import torch

from fedkd.engine.gpu import use_gpu
from fedkd.engine.run_setup import resolve_device
from fedkd.tools.bench.common import RoundClock, engine_label, synthetic_table3_data, table3_spec


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
        clock.run_rounds(
            table3_spec(strategy, engine, args, device), synthetic_table3_data(args), last
        )
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


def describe_packed(r: dict, args) -> str:
    each = ", ".join(f"{v:,.0f}" for v in r["local_img_s_each"])
    return (
        f"{r['k']} table-3 runs packed on one device ({r['strategy']}, {r['engine']}, "
        f"{args.precision}), one process each, timed together from a shared start after "
        f"their set-up and {args.warmup_rounds} warm-up round(s) (started within "
        f"{r['start_spread_s']:.2f} s of each other): {args.run_rounds} round(s) each, "
        f"{r['images']:,} images in {r['seconds']:.1f} s, together {r['img_s']:,.0f} "
        f"img/s (whole rounds); local training per run: {each} img/s"
    )
