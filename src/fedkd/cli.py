"""Command line: ``fedkd <command>`` (also ``python -m fedkd <command>``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import yaml

RUN_KEY_HELP = {
    "dataset": "dataset name (cifar10, cifar100, tinyimagenet, mnist, mnist5k, agnews, sst5, synthtext)",
    "model": "auto (the paper's model for the dataset), resnet8, resnet50, cnn or distilbert",
    "strategy": "strategy name (see `fedkd strategies`)",
    "params": "strategy hyperparameters as a YAML mapping, e.g. '{gamma: 0.2, buffer: 5}'",
    "clients": "number of clients",
    "partition": "dirichlet-equal (FedDF/FedGKD, equal sizes), dirichlet (min size 10), shards, iid",
    "alpha": "Dirichlet concentration (smaller = more heterogeneous)",
    "shards": "shards per client (partition=shards)",
    "participation": "C: fraction of clients sampled each round, in (0, 1]",
    "rounds": "communication rounds",
    "local_epochs": "local epochs per round",
    "batch_size": "local batch size",
    "optimizer": "sgd or adam",
    "lr": "local learning rate",
    "momentum": "SGD momentum",
    "weight_decay": "weight decay",
    "grad_clip": "max gradient norm (null disables)",
    "augment": "auto (crop+flip on colour images), none, crop-flip",
    "seed": "run seed: data split, partition, initialisation, client sampling, shuffling",
    "device": "auto (CUDA when present, else CPU), cpu, cuda",
    "data_root": "directory holding real datasets (default $FEDKD_DATA or ./data)",
    "partition_file": "a partition Parquet written by `fedkd partition` (default: compute it)",
    "eval_local": "also evaluate each client's local model before aggregation",
    "precision": "fp32, or bf16 (autocast in local training)",
    "compile": "torch.compile the training model: none, default, reduce-overhead (CUDA graphs)",
    "deterministic": "true: deterministic GPU kernels, so repeated GPU runs end bit-identical "
    "(CPU runs are bit-identical either way)",
    "model_options": "model options as a YAML mapping, e.g. '{norm: batch}'",
    "dataset_options": "dataset loader options as a YAML mapping, e.g. '{tokenizer: word, max_len: 64}'",
}


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    from fedkd.config import RunSpec

    group = p.add_argument_group("run spec keys (override the spec file)")
    for f in dataclasses.fields(RunSpec):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f"spec_{f.name}",
            type=yaml.safe_load,
            metavar="V",
            help=f"{RUN_KEY_HELP.get(f.name, f.name)} [default: {default!r}]",
        )


def _spec_from_args(args) -> object:
    from fedkd.config import RunSpec, parse_override

    overrides = {
        k[len("spec_") :]: v
        for k, v in vars(args).items()
        if k.startswith("spec_") and v is not None
    }
    for text in args.set or []:
        key, value = parse_override(text)
        overrides[key] = value
    for text in args.param or []:
        key, value = parse_override(text)
        overrides.setdefault("params", {})
        overrides["params"] = {**overrides["params"], key: value}
    if args.spec:
        return RunSpec.from_file(args.spec, overrides)
    return RunSpec.from_dict(overrides)


def cmd_train(args) -> int:
    from fedkd.config import parse_override
    from fedkd.engine.run import Run

    spec = _spec_from_args(args)
    labels = dict(parse_override(t) for t in args.label or [])
    record = Run(spec, args.out, labels={k: str(v) for k, v in labels.items()}).run()
    summary = record.get("summary", {})
    if summary.get("rounds"):
        print(
            f"{record['status']}: best acc {summary['best_acc']:.4f} (round {summary['best_round']}), "
            f"final {summary['final_acc']:.4f}, {args.out}"
        )
    return 0 if record["status"] in ("complete", "diverged") else 1


def cmd_partition(args) -> int:
    import numpy as np

    from fedkd.data import load_dataset
    from fedkd.data.partition import partition_labels, write_partition

    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"{out} exists; keeping it (use --force to overwrite)", file=sys.stderr)
        return 0
    ds = load_dataset(args.dataset, args.data_root, seed=args.seed)
    labels = ds.train.y.numpy()
    assignment = partition_labels(
        labels, args.scheme, args.clients, args.seed, alpha=args.alpha,
        shards_per_client=args.shards, num_classes=ds.num_classes,
    )  # fmt: skip
    meta = {
        "dataset": args.dataset, "scheme": args.scheme, "alpha": args.alpha, "shards": args.shards,
        "clients": args.clients, "seed": args.seed, "num_classes": ds.num_classes,
        "num_samples": int(len(labels)),
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    write_partition(out, assignment, labels, meta)
    sizes = np.bincount(assignment[assignment >= 0], minlength=args.clients)
    print(
        f"{out}: {args.clients} clients, sizes {sizes.min()}..{sizes.max()} (total {sizes.sum()})"
    )
    return 0


def cmd_strategies(args) -> int:
    from fedkd.strategies import get_strategy_class, strategy_names

    for name in strategy_names():
        if args.details:
            cls = get_strategy_class(name)
            print(f"{name}\t{cls.paper}\t{cls.summary}")
        else:
            print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedkd",
        description="Federated knowledge-distillation reproduction: partition data, train runs, "
        "aggregate and render the papers' tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train one federated run (resumes from its checkpoint)")
    p.add_argument("spec", nargs="?", help="run spec file (YAML or JSON); flags override its keys")
    p.add_argument("--out", "-o", required=True, help="output directory of the run")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any spec key")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="set a strategy parameter")
    p.add_argument(
        "--label", action="append", metavar="KEY=VALUE",
        help="a tag recorded in run.json (e.g. variant=M5); not part of the run's identity",
    )  # fmt: skip
    _add_run_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("partition", help="split a dataset's training set over clients (Parquet)")
    p.add_argument("--dataset", required=True)
    p.add_argument(
        "--scheme", default="dirichlet-equal", help="dirichlet-equal, dirichlet, shards, iid"
    )
    p.add_argument("--alpha", type=float, help="Dirichlet concentration (dirichlet schemes)")
    p.add_argument("--shards", type=int, help="shards per client (shards scheme)")
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", help="directory of real datasets (default $FEDKD_DATA or ./data)")
    p.add_argument("--out", "-o", required=True, help="output Parquet file")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("strategies", help="list the registered strategies, one a line")
    p.add_argument("--details", action="store_true", help="also print each one's paper and summary")
    p.set_defaults(func=cmd_strategies)

    # listed for --help only: main() hands everything after "bench" to fedkd.bench
    sub.add_parser("bench", help="benchmarks: engine vs bare PyTorch loop; a table-3-shaped run")

    from fedkd import cli_extra

    cli_extra.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from fedkd.bench import main as bench_main

        return bench_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    from fedkd.config import SpecError
    from fedkd.data.base import DatasetCorruptError, DatasetNotFoundError
    from fedkd.engine.checkpoint import CheckpointCorruptError
    from fedkd.engine.run import RunConflictError

    try:
        return args.func(args)
    except (
        SpecError, DatasetNotFoundError, DatasetCorruptError, CheckpointCorruptError,
        RunConflictError, ValueError,
    ) as exc:  # fmt: skip
        print(f"fedkd {args.command}: error: {exc}", file=sys.stderr)
        return 2
