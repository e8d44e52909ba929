"""``fedkd bench``'s command line: its arguments, their checks, and the benchmarks it runs in
turn (each in its own module of ``fedkd.tools.bench``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from fedkd.config import DEVICES, PRECISIONS, UPPER
from fedkd.engine.run_setup import resolve_device
from fedkd.tools.bench.common import (
    BENCH_ENGINES,
    TABLE3,
    TABLE3_CLIENTS_A_ROUND,
    TABLE3_TRAIN_IMAGES,
    Results,
)
from fedkd.tools.bench.local_training import (
    IMAGE_MODELS,
    bench_local_training,
    describe_local_training,
)
from fedkd.tools.bench.packed import bench_packed, describe_packed
from fedkd.tools.bench.precision import CHECK_SETTINGS, describe_precision, precision_check
from fedkd.tools.bench.profile import profile_round
from fedkd.tools.bench.round_engines import (
    ROUND_SHAPES,
    bench_round_engines,
    describe_round_engines,
)
from fedkd.tools.bench.table3 import bench_table3_run, describe_table3_run
from fedkd.values import integer_from, positive_number


def main(argv: list[str] | None = None) -> int:
    import fedkd.tools.bench as package

    p = argparse.ArgumentParser(prog="fedkd bench", description=package.__doc__.split("\n\n")[0])
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.command = "fedkd bench " + " ".join(argv)
    try:  # before any benchmark, as argparse's own checks: usage, the message, exit code 2
        check_arguments(args)
    except ValueError as exc:
        p.error(str(exc))
    return run_bench(args)


def names(text: str) -> list[str]:
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
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--compile", default="none", choices=("none", "default", "reduce-overhead"))
    p.add_argument(
        "--strategies", default="fedavg,fedgkd",
        help="strategies of the table-3 runs (comma-separated) [fedavg,fedgkd]",
    )  # fmt: skip
    p.add_argument(
        "--engine", default="auto",
        help="engines of the table-3 runs, comma-separated, as a run spec names them: auto (a "
        "run's default), sequential, batched (on CUDA: CUDA graphs), batched-eager (without), "
        "batched-compiled (CUDA graphs and the compiled step) [auto]",
    )  # fmt: skip
    p.add_argument(
        "--warmup-rounds", type=count_or_zero, default=2, help="untimed rounds before timing [2]"
    )
    p.add_argument("--run-rounds", type=count, default=2, help="timed rounds of a table-3 run [2]")
    p.add_argument(
        "--norm", default="group", choices=("group", "batch"),
        help="ResNet-8's norm in the table-3 runs and --ops: group (FedGKD's) or batch (FedDF "
        "Table 1's) [group]",
    )  # fmt: skip
    p.add_argument(
        "--clients-per-round", type=integer_from(1, TABLE3["clients"]),
        default=TABLE3_CLIENTS_A_ROUND,
        help="clients a round of the table-3 runs, of 20, all folded into one batched step "
        f"(table 3's C 0.2) [{TABLE3_CLIENTS_A_ROUND}]",
    )  # fmt: skip
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
        help="also compare the test accuracy of the same runs under each precision, seed by "
        "seed (paired against the first of --check-precisions)",
    )  # fmt: skip
    p.add_argument(
        "--check-setting", default="mnist5k", choices=tuple(CHECK_SETTINGS),
        help="runs of --precision-check: mnist5k (the default configuration's CNN) or table3 "
        "(table 3's FedGKD run on mnist5k) [mnist5k]",
    )  # fmt: skip
    p.add_argument(
        "--check-precisions", type=precisions, default=list(PRECISIONS),
        help="precisions of --precision-check, comma-separated [fp32,tf32,bf16]",
    )  # fmt: skip
    p.add_argument("--check-seeds", type=count, default=3, help="seeds per precision [3]")
    p.add_argument("--check-rounds", type=count, default=10, help="rounds of each run [10]")


def precisions(text: str) -> list[str]:
    chosen = names(text)
    unknown = [p for p in chosen if p not in PRECISIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give precisions from {', '.join(PRECISIONS)}, comma-separated"
        )
    return chosen


def check_arguments(args) -> None:
    """Refuse (ValueError) a value the parser's types cannot judge alone."""
    from fedkd.strategies import choose_a_strategy, strategy_names

    known = strategy_names()
    for flag, given in (
        ("--strategies", args.strategies),
        ("--ops-strategies", args.ops_strategies),
    ):
        for name in names(given):
            if name not in known:
                raise ValueError(f"{flag}: {name!r} is unknown; {choose_a_strategy()}")
    for name in names(args.engine):
        if name not in BENCH_ENGINES:
            raise ValueError(f"--engine {name!r} is not one of {', '.join(BENCH_ENGINES)}")
    for name in names(args.rounds_bench):
        if name not in ROUND_SHAPES:
            raise ValueError(
                f"--rounds-bench {name!r} is not one of {', '.join(ROUND_SHAPES)} (or none)"
            )
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(
            f"--out {args.out} is a file, and the benchmarks write a folder there "
            "(bench-results.jsonl, profiles); give a folder's path"
        )
    if args.profile and not args.out:
        raise ValueError("--profile writes a trace: give --out DIR")
    if args.pack:
        if not all(k.isdigit() and int(k) >= 1 for k in names(args.pack)):
            raise ValueError(f"--pack {args.pack!r} must be counts >= 1, e.g. 4,8")
        if args.warmup_rounds < 1:
            raise ValueError("--pack needs --warmup-rounds >= 1 (the runs meet after it)")


def run_bench(args) -> int:
    """The benchmarks ``args`` (checked by ``check_arguments``) ask for, in turn."""
    device = resolve_device(args.device)
    if args.ops:
        from fedkd.tools.bench.ops import print_ops

        print_ops(names(args.ops_strategies) or None, device, args.ops_detail, args.norm)
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads")
    results = Results(args, name)
    engines = names(args.engine)
    if not args.skip_throughput:
        r = bench_local_training(args, device)
        results.add(describe_local_training(r, args), r["engine_img_s"], r)
    for shape in names(args.rounds_bench):
        r = bench_round_engines(args, device, shape)
        results.add(describe_round_engines(r, args), max(r["img_s"].values()), r)
    if not args.skip_run:
        for strategy in names(args.strategies):
            for engine in engines:
                r = bench_table3_run(args, device, strategy, engine)
                results.add(describe_table3_run(r, args), r["round_img_s"], r)
    if args.pack:
        strategy, engine = names(args.strategies)[0], (engines or ["auto"])[0]
        for k in [int(x) for x in names(args.pack)]:
            r = bench_packed(args, device, k, strategy, engine)
            results.add(describe_packed(r, args), r["img_s"], r)
    if args.profile:
        for strategy in names(args.strategies):
            for engine in engines:
                path = profile_round(args, device, strategy, engine, Path(args.out))
                print(
                    f"profile of round {args.warmup_rounds + 1} of a table-3 run ({strategy}, "
                    f"engine {engine}, {args.profile_epochs} local epoch(s)): {path}",
                    flush=True,
                )
    if args.precision_check:
        checked = precision_check(args, device)
        for precision in args.check_precisions:
            line, details = describe_precision(checked, precision, args)
            results.add(line, None, details)
    return 0
