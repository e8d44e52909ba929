"""Benchmarks (not tests): ``python -m fedkd.bench`` or ``fedkd bench``.

1. Local training throughput: the sequential trainer against a bare PyTorch loop doing the same
   work (same model and initial weights, batches and augmentation, optimizer, clipping), measured
   side by side in one process, interleaved, median of the repeats; the final weights are compared.
0. ``--ops``: the kernels and host syncs one K-client local step dispatches per strategy
   (``fedkd.bench_ops``).
2. One round's client training with each local-training engine: sequential (one client after
   another), batched (the round's clients side by side as one folded network,
   ``fedkd.engine.kclient``) and, on CUDA, batched with CUDA graphs; in images per second, median of the repeats, interleaved. Shapes:
   ``default`` (config/config.yaml: mnist5k, cnn, 10 clients, C 0.2, batch 64, 1 local epoch)
   and ``table3`` (CIFAR-10-shaped synthetic data, resnet8, 20 clients, C 0.2, fedgkd M 5).
   The engines' client weights are compared too (max abs difference).
3. A table-3-shaped run: CIFAR-10-shaped synthetic data (45,000 training images), 20 clients,
   C 0.2, 20 local epochs, fedgkd with M 5, through the full engine; measures the first rounds and
   projects to 100 rounds (rounds cost the same: 4 clients × 20 epochs × 2,250 samples each).
   ``--deterministic`` runs it with the spec's ``deterministic: true`` (deterministic kernels,
   fixed cuBLAS workspace, no cuDNN autotuning): against the same run without, the cost of
   bit-identical repeats on a GPU.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from fedkd.config import RunSpec
from fedkd.data.synthetic import synthetic_cifar
from fedkd.engine.client import TrainEnv, train_clients
from fedkd.engine.cuda_graphs import GRAPHS_ENV
from fedkd.engine.run import Run, resolve_device
from fedkd.models import build_model
from fedkd.runtime.preprocess import Preprocessor, TrainInputs
from fedkd.runtime.schedule import ClientSchedule
from fedkd.runtime.seeding import sample_clients
from fedkd.strategies.fedavg import FedAvg


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


def bench_table3_run(args, device: torch.device) -> dict:
    ds = synthetic_cifar()
    spec = RunSpec(
        dataset="cifar10", model="resnet8", strategy="fedgkd", params={"buffer": 5},
        clients=20, participation=0.2, alpha=0.1, local_epochs=args.run_epochs, rounds=100,
        device=device.type, precision=args.precision, compile=args.compile, engine=args.engine,
        deterministic=args.deterministic,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        run = Run(spec, out, dataset=ds, log=lambda msg: None)
        t0 = time.perf_counter()
        run.run(stop_after_round=args.run_rounds)
        seconds = time.perf_counter() - t0
    scale = (100 / args.run_rounds) * (20 / args.run_epochs)
    return {"measured_s": seconds, "rounds": args.run_rounds, "epochs": args.run_epochs,
            "projected_s": seconds * scale}  # fmt: skip


ROUND_SHAPES = {
    # config/config.yaml's defaults for mnist5k
    "default": dict(
        dataset="mnist5k", model="cnn", clients=10, participation=0.2, partition="dirichlet-equal",
        alpha=1.0, local_epochs=1, batch_size=64,
    ),
    # fedgkd's table 3 on CIFAR-10 (4 clients a round), on CIFAR-10-shaped synthetic data
    "table3": dict(
        dataset="cifar10", model="resnet8", strategy="fedgkd", params={"buffer": 5}, clients=20,
        participation=0.2, alpha=0.1, batch_size=64,
    ),
}  # fmt: skip


_SCRATCH: list[tempfile.TemporaryDirectory] = []


def _scratch_dir() -> str:
    """A fresh directory for a benchmark run, inside one removed when the process exits."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="fedkd-bench-"))
    return tempfile.mkdtemp(dir=_SCRATCH[0].name)


def _round_setup(shape: str, engine: str, args, device: torch.device, dataset) -> Run:
    options = dict(ROUND_SHAPES[shape])
    if shape == "table3":
        options["local_epochs"] = args.round_epochs
    spec = RunSpec(
        engine=engine, device=device.type, precision=args.precision, rounds=1, **options
    )  # fmt: skip
    run = Run(spec, _scratch_dir(), dataset=dataset, log=lambda m: None)
    run.prepare()
    if args.client_samples:  # a shorter round (CPU): each client's first samples only
        run.env.client_index = [ix[: args.client_samples] for ix in run.env.client_index]
    return run


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def bench_round_engines(args, device: torch.device, shape: str) -> dict:
    """img/s of one round's client training per engine, median of ``args.repeats``, interleaved."""
    dataset = synthetic_cifar() if shape == "table3" else None
    engines = ["sequential", "batched"] + (["graphs"] if device.type == "cuda" else [])
    runs = {
        e: _round_setup(shape, "sequential" if e == "sequential" else "batched", args, device,
                        copy.deepcopy(dataset) if dataset is not None else None)
        for e in engines
    }  # fmt: skip
    first = runs["sequential"]
    selected = sample_clients(first.spec.seed, 0, first.spec.clients, first.spec.participation)
    images = first.spec.local_epochs * sum(len(first.env.client_index[c]) for c in selected)
    times: dict[str, list[float]] = {e: [] for e in engines}
    states = {}
    before = os.environ.get(GRAPHS_ENV)
    try:
        for rep in range(args.repeats + 1):  # the first repetition warms up and is discarded
            for e in engines:
                run = runs[e]
                os.environ[GRAPHS_ENV] = "1" if e == "graphs" else "0"
                payload = run.strategy.payload(0, run.global_model)
                _sync(device)
                t0 = time.perf_counter()
                updates, _ = train_clients(
                    0, selected, run.global_model, payload, run.strategy, run.env
                )
                _sync(device)
                if rep > 0:
                    times[e].append(time.perf_counter() - t0)
                states[e] = [u.state for u in updates]
                assert run.env.engine(run.strategy)["used"] == (
                    "sequential" if e == "sequential" else "batched"
                )
    finally:
        if before is None:
            os.environ.pop(GRAPHS_ENV, None)
        else:
            os.environ[GRAPHS_ENV] = before
    diff = {
        e: max(_max_abs_diff(a, b) for a, b in zip(states["sequential"], states[e], strict=True))
        for e in engines[1:]
    }
    return {
        "shape": shape, "clients": len(selected), "images": images,
        "img_s": {e: images / statistics.median(times[e]) for e in engines},
        "max_abs_diff": diff, "epochs": first.spec.local_epochs,
    }  # fmt: skip


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fedkd bench", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run_bench(p.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument(
        "--ops", action="store_true",
        help="count the kernels and host syncs of one 4-client local step of ResNet-8-GN per "
        "strategy (one line each) and exit",
    )  # fmt: skip
    p.add_argument("--ops-strategies", default="", help="with --ops: comma-separated strategies")
    p.add_argument("--ops-detail", action="store_true", help="with --ops: the count per operator")
    p.add_argument("--model", default="resnet8")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=100, help="SGD steps per measured repetition")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--compile", default="none", choices=("none", "default", "reduce-overhead"))
    p.add_argument("--run-rounds", type=int, default=1, help="rounds of the table-3 run to measure")
    p.add_argument("--run-epochs", type=int, default=20, help="local epochs of the measured run")
    p.add_argument(
        "--engine", default="batched", choices=("sequential", "batched"),
        help="local-training engine of the table-3-shaped run",
    )  # fmt: skip
    p.add_argument(
        "--deterministic", action="store_true",
        help="run the table-3-shaped run with deterministic: true (deterministic GPU kernels)",
    )  # fmt: skip
    p.add_argument(
        "--rounds-bench", default="default,table3",
        help="shapes of the per-engine round benchmark (comma-separated: default, table3), or none",
    )  # fmt: skip
    p.add_argument("--round-epochs", type=int, default=1, help="local epochs of the table3 round")
    p.add_argument(
        "--client-samples", type=int, default=0,
        help="train each client on its first N samples only in the round benchmark (0: all)",
    )  # fmt: skip
    p.add_argument("--skip-run", action="store_true", help="only the throughput comparison")
    p.add_argument(
        "--skip-throughput", action="store_true", help="only the table-3-shaped run (and checks)"
    )
    p.add_argument(
        "--precision-check", action="store_true",
        help="also compare best accuracy of fp32 and bf16 runs on mnist5k over seeds",
    )  # fmt: skip
    p.add_argument("--check-seeds", type=int, default=3)
    p.add_argument("--check-rounds", type=int, default=10)


def run_bench(args) -> int:
    device = resolve_device(args.device)
    if args.ops:
        from fedkd.bench_ops import print_ops

        strategies = [s for s in args.ops_strategies.split(",") if s] or None
        print_ops(strategies, device, detail=args.ops_detail)
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads")
    if not args.skip_throughput:
        r = bench_local_training(args, device)
        print(
            f"local training ({args.model}, batch {args.batch_size}, {args.steps} steps, "
            f"median of {args.repeats}, {args.precision}):\n"
            f"  engine {r['engine_img_s']:9.1f} images/s\n"
            f"  bare   {r['bare_img_s']:9.1f} images/s\n"
            f"  ratio  {r['ratio']:9.3f}   (final weights, max abs difference: "
            f"{r['max_abs_diff']:.1e})"
        )
    for shape in [s for s in args.rounds_bench.split(",") if s and s != "none"]:
        r = bench_round_engines(args, device, shape)
        figures = ", ".join(f"{e} {v:,.0f}" for e, v in r["img_s"].items())
        diffs = ", ".join(f"{e} {v:.1e}" for e, v in r["max_abs_diff"].items())
        print(
            f"round of the {shape} shape ({r['clients']} clients, {r['images']} images, "
            f"{r['epochs']} local epoch(s), median of {args.repeats}, {args.precision}): img/s "
            f"{figures}; batched/sequential {r['img_s']['batched'] / r['img_s']['sequential']:.2f}"
            f"; client weights vs sequential, max abs: {diffs}"
        )
    if not args.skip_run:
        t = bench_table3_run(args, device)
        print(
            f"table-3-shaped run (synthetic CIFAR-10 shape, resnet8, 20 clients, C 0.2, fedgkd M 5, "
            f"compile {args.compile}, engine {args.engine}, cuda graphs "
            f"{os.environ.get(GRAPHS_ENV, '0')}, deterministic {args.deterministic}): {t['rounds']} round(s) × {t['epochs']} local epoch(s) took "
            f"{t['measured_s']:.1f} s → projected 100 rounds × 20 epochs: {t['projected_s']:.0f} s "
            f"({t['projected_s'] / 60:.1f} min)"
        )
    if args.precision_check:
        results = precision_check(args, device)
        for precision in ("fp32", "bf16"):
            accs = [a for p, _, a in results if p == precision]
            mean = statistics.mean(accs)
            spread = statistics.pstdev(accs)
            per_seed = ", ".join(f"{a:.4f}" for a in accs)
            print(
                f"mnist5k best accuracy {precision}: {mean:.4f} ± {spread:.4f} (seeds: {per_seed})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
