"""Command line: ``fedkd <command>`` (also ``python -m fedkd <command>``), by topic:

- runs: ``partition`` (split a dataset over clients), ``train`` (one federated run),
  ``strategies`` (the registered strategies), ``features`` (a run's t-SNE features);
- reports: ``aggregate`` (runs → one Parquet), ``render`` (a table or figure);
- ``status``: progress of the training runs and an ETA (fedkd.tools.status);
- ``bench``: benchmarks (fedkd.tools.bench)."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import sys
from pathlib import Path

from fedkd.run_key_help import RUN_KEY_HELP
from fedkd.startup import run_command
from fedkd.user_errors import check_output_path, check_writable_out, reporting_user_errors
from fedkd.values import integer, integer_from, number


# ------------------------------------------- typed flags: integer, number, ... (fedkd.values)
def seed(text: str) -> int:
    """A seed flag, within RunSpec's bounds (those of `fedkd train --seed`)."""
    from fedkd.config import SEED_LIMIT

    return integer_from(0, SEED_LIMIT - 1, "2^63 - 1")(text)


# --------------------------------------------------------------------------- runs
def _add_run_flags(p: argparse.ArgumentParser) -> None:
    from fedkd.config import RunSpec
    from fedkd.data import dataset_names
    from fedkd.values import parse_value

    helps = {**RUN_KEY_HELP, "dataset": f"dataset name ({', '.join(dataset_names())})"}
    group = p.add_argument_group(
        "run spec keys",
        "They override the spec file. Values are YAML 1.2: numbers in any notation such as 1e-5 "
        "(010 is ten), true/false (not yes/no), null, [lists], {mappings}.",
    )
    for f in dataclasses.fields(RunSpec):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        # SUPPRESS: a flag not given leaves no attribute, so a given `null` is told apart from
        # an absent flag and reaches the spec (--grad-clip null disables clipping)
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f"spec_{f.name}",
            type=parse_value,
            default=argparse.SUPPRESS,
            metavar="V",
            help=f"{helps.get(f.name, f.name)} [default: {default!r}]",
        )


def _spec_from_args(args) -> object:
    from fedkd.config import RunSpec, parse_override, with_params

    # every spec flag given, null included (absent flags leave no attribute)
    overrides = {k[len("spec_") :]: v for k, v in vars(args).items() if k.startswith("spec_")}
    for text in args.set or []:
        key, value = parse_override(text, "--set")
        overrides[key] = value
    # --param sets one parameter: the others keep what the spec file or --params gave them
    param_updates = {}
    for text in args.param or []:
        key, value = parse_override(text, "--param")
        param_updates[key] = value
    if args.spec:
        return RunSpec.from_file(args.spec, overrides, param_updates)
    return RunSpec.from_dict(with_params(overrides, param_updates, "--params"))


def say(text: object, stream=None) -> None:
    """Print a message that may hold the user's text (an --out path, a label, a user module's
    summary) as text: no escape sequence or bidi override of it reaches the terminal."""
    from fedkd.echo import safe_message

    print(safe_message(text, line_limit=100_000), file=stream or sys.stdout)


def parse_label(text: str) -> tuple[str, str]:
    """``key=text`` of ``--label``: a tag, kept as written (``variant=010`` is the variant named
    010, not the number 10), so any text is a label and none needs YAML quoting."""
    from fedkd.config import SpecError
    from fedkd.echo import label_character_problem, shown

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--label {shown(text)} must look like key=text, e.g. --label variant=M5")
    problem = label_character_problem(text)
    if problem:
        raise SpecError(f"--label {shown(text)} {problem}")
    return key.strip(), value


def cmd_train(args) -> int:
    from fedkd.engine.run import Run
    from fedkd.pipeline import data_check
    from fedkd.user_errors import read_only_out, stop_on_sigterm

    stop_on_sigterm()  # a SLURM time limit or `kill` stops a run as Ctrl-C does, recorded
    check_output_path(args.out, "directory")
    check_writable_out(args.out)
    spec = _spec_from_args(args)
    data_check.refuse_before_training(spec, Path(args.out))
    labels = dict(parse_label(t) for t in args.label or [])
    try:
        record = Run(spec, args.out, labels=labels).run()
    except OSError as exc:  # made read-only since the check, or one access() cannot foresee
        out, failed = Path(args.out).resolve(), Path(exc.filename or "/").resolve()
        ours = out in (failed, *failed.parents) or failed in out.parents
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and exc.filename and ours:
            # the folder the file or folder that failed was to be made in
            raise read_only_out(Path(args.out), Path(exc.filename).parent) from None
        raise
    summary = record.get("summary", {})
    if summary.get("rounds"):
        say(
            f"{record['status']}: best acc {summary['best_acc']:.4f} (round {summary['best_round']}), "
            f"final {summary['final_acc']:.4f}, {args.out}"
        )
    return 0 if record["status"] in ("complete", "diverged") else 1


def cmd_partition(args) -> int:
    import numpy as np

    from fedkd.data.partition import draw_partition, write_partition

    out = Path(args.out)
    if args.scheme == "shards" and args.shards is None:
        raise ValueError("--scheme shards needs --shards N, the shards each client gets (e.g. 2)")
    used = {"alpha": args.scheme.startswith("dirichlet"), "shards": args.scheme == "shards"}
    for flag in (f for f in used if getattr(args, f) is not None and not used[f]):
        raise ValueError(f"--scheme {args.scheme} does not use --{flag}; leave it out")
    # before the check below, which would keep a directory there as if it were the partition
    check_output_path(out, "file", "partition.parquet")
    if out.exists() and not args.force:
        say(f"{out} exists; keeping it (use --force to overwrite)", sys.stderr)
        return 0
    assignment, labels, meta = draw_partition(
        args.dataset, args.scheme, args.clients, args.seed,
        alpha=args.alpha, shards=args.shards, data_root=args.data_root,
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    write_partition(out, assignment, labels, meta)
    sizes = np.bincount(assignment[assignment >= 0], minlength=args.clients)
    say(f"{out}: {args.clients} clients, sizes {sizes.min()}..{sizes.max()} (total {sizes.sum()})")
    return 0


def cmd_strategies(args) -> int:
    from fedkd.config import DEFAULT_MODEL
    from fedkd.echo import safe_text
    from fedkd.strategies import get_strategy_class, strategy_names
    from fedkd.strategies._params import describe

    for name in strategy_names():
        if args.details:
            cls = get_strategy_class(name)
            # a strategy module of one's own writes these: its text, tab-separated
            print("\t".join(safe_text(t, None) for t in (name, cls.paper, cls.summary)))
            say(f"  parameters: {describe(cls.Params)}")
            # the parameters each dataset (with its paper model) gets unless a run sets them
            for dataset, model in DEFAULT_MODEL.items():
                defaults = cls.dataset_defaults(dataset, model)
                if defaults:
                    shown = ", ".join(f"{k}={v}" for k, v in defaults.items())
                    say(f"  {dataset} ({model}): {shown}")
        else:
            say(name)
    return 0


def cmd_features(args) -> int:
    from fedkd.engine.features import tsne_features

    check_output_path(args.out, "file", "features.npz")
    path = tsne_features(
        args.run, args.out, samples=args.samples, client=args.client, device=args.device,
        local_objective=args.local_objective,
    )  # fmt: skip
    say(path, sys.stderr)
    return 0


# --------------------------------------------------------------------------- reports
AGGREGATE_DESCRIPTION = """\
Collect run directories into one long Parquet table, one row per (run, round), with the run's
keys repeated on each row (label, run, strategy, variant, dataset, model, partition, alpha,
shards, clients, participation, local_epochs, rounds_planned, seed, status, eval_local, params,
dataset sizes) and its per-round metrics (round, test_acc, test_loss, val_acc, val_loss,
class_acc, train_loss, local_acc, bytes_sent, bytes_received, seconds), then val_size,
dataset_kind, model_options, run_choices, collapsed and the strategies' server_* columns. alpha
is NaN unless the partition is Dirichlet, shards NaN unless it is sharding.
A run that completed no round appears as one row with round 0 and NaN metrics, so a run that
diverged in round 1 still shows as diverged.
Rows are sorted by (label, dataset, alpha, participation, local_epochs, seed, round). A long read
says how many runs it has read, every 10 seconds, on standard error."""


def cmd_aggregate(args) -> int:
    from fedkd.report import aggregate_runs, parse_run_arg, read_runs_file, write_aggregate
    from fedkd.report.run_list import reading_progress

    check_output_path(args.out, "file", "aggregate.parquet")
    runs = [parse_run_arg(text) for text in args.run or []]
    for path in args.runs_file or []:
        runs += read_runs_file(path, args.runs_sha256)
    df = aggregate_runs(runs, reading_progress(lambda line: say(f"{args.out}: {line}", sys.stderr)))
    write_aggregate(df, args.out)
    statuses = df.drop_duplicates(["label", "run"])["status"]  # one a run
    n_runs, bad = len(statuses), statuses.value_counts().drop("complete", errors="ignore")
    # run.json says "running" until the run ends: a killed one too (fedkd status tells them apart)
    extra = "".join(f", {n} {'unfinished' if s == 'running' else s}" for s, n in bad.items())
    rows = f"{len(df)} row{'s' * (len(df) != 1)}"
    say(f"{args.out}: {n_runs} run{'s' * (n_runs != 1)}, {rows}{extra}", sys.stderr)
    return 0


def cmd_render(args) -> int:
    from fedkd.report import render

    check_output_path(args.out, "prefix")
    paths = render(
        args.target,
        args.out,
        aggregate=args.aggregate,
        partitions=args.partitions,
        run=args.run,
        options=args.options,
        features=args.features,
        name=args.name,
    )
    say(" ".join(str(p) for p in paths), sys.stderr)
    return 0


def cmd_status(args) -> int:
    from fedkd.tools.status import status_main, targets_and_runs

    targets, runs = targets_and_runs(args.targets, args.runs, args.configfile)
    print(status_main(runs, args.configfile, args.stale_after, targets))
    return 0


# --------------------------------------------------------------------------- parser
def print_version() -> None:
    """fedkd's version, looked up only when asked (30 ms a call otherwise)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        say(f"fedkd {version('fedkd')}")
    except PackageNotFoundError:  # its sources on PYTHONPATH, not installed
        say("fedkd (not installed)")


class PrintVersion(argparse.Action):
    """``--version`` exits before a command that follows it is parsed."""

    def __call__(self, parser, *args):
        print_version()
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser; given the ``command`` about to run, other commands' help texts
    that are costly to build (render's) are left short."""
    parser = argparse.ArgumentParser(
        prog="fedkd",
        description="Federated knowledge-distillation reproduction: partition data, train runs, "
        "aggregate and render the papers' tables.",
    )
    parser.add_argument(
        "--version", action=PrintVersion, nargs=0, help="print fedkd's version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.set_defaults(commands=sub.choices)  # a command's own usage for its unknown flags

    p = sub.add_parser("train", help="train one federated run (resumes from its checkpoint)")
    p.add_argument("spec", nargs="?", help="run spec file (YAML or JSON); flags override its keys")
    p.add_argument("--out", "-o", required=True, help="output directory of the run")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any spec key")
    p.add_argument(
        "--param", action="append", metavar="KEY=VALUE",
        help="set one strategy parameter (the others keep their values from SPEC or --params)",
    )  # fmt: skip
    p.add_argument(
        "--label", action="append", metavar="KEY=VALUE",
        help="a tag recorded in run.json as written (e.g. variant=M5); not part of the run's "
        "identity",
    )  # fmt: skip
    _add_run_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("partition", help="split a dataset's training set over clients (Parquet)")
    p.add_argument("--dataset", required=True, help="dataset name, as train's --dataset")
    p.add_argument(
        "--scheme",
        default="dirichlet-equal",
        help="dirichlet-equal (the default), dirichlet, shards, iid",
    )
    p.add_argument("--alpha", type=number, help="Dirichlet concentration (dirichlet schemes)")
    p.add_argument("--shards", type=integer_from(1), help="shards per client (shards scheme)")
    p.add_argument("--clients", type=integer_from(1), required=True, help="number of clients")
    p.add_argument("--seed", type=seed, default=0, help="0 to 2^63 - 1, as a run's seed [0]")
    p.add_argument("--data-root", help="directory of real datasets (default $FEDKD_DATA or ./data)")
    p.add_argument("--out", "-o", required=True, help="output Parquet file")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("strategies", help="list the registered strategies, one a line")
    p.add_argument(
        "--details", action="store_true",
        help="also print each one's paper, summary and parameters (default, range or choices) "
        "and the defaults each dataset gets",
    )  # fmt: skip
    p.set_defaults(func=cmd_strategies)

    p = sub.add_parser(
        "features",
        help="t-SNE features of a completed run: its global model and a local model (.npz)",
        description="Penultimate features of a completed run's final global model and of one "
        "client's local model trained from it, on a fixed sample of the test set, for the t-SNE "
        "figure (`fedkd render tsne --features FILE`). Same run and options, same file.",
    )
    p.add_argument("--run", required=True, metavar="DIR", help="a completed run directory")
    p.add_argument("--out", "-o", required=True, help="output .npz file")
    p.add_argument("--samples", type=integer, default=1000, help="test samples (10-5000) [1000]")
    p.add_argument("--client", type=integer, default=0, help="the client whose local model [0]")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto [cpu]")
    p.add_argument(
        "--local-objective", default="strategy", choices=("strategy", "fedavg"),
        help="strategy: the run's own local loss [default]; fedavg: plain cross-entropy",
    )  # fmt: skip
    p.set_defaults(func=cmd_features)

    p = sub.add_parser(
        "aggregate",
        help="collect run directories into one Parquet table (one row per run and round)",
        description=AGGREGATE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", "-o", required=True, help="output Parquet file")
    p.add_argument(
        "--run", action="append", metavar="LABEL=RUN_DIR",
        help="a run and the table column (label) it belongs to, e.g. fedgkd=results/runs/x or "
        "M=3=results/runs/y; repeat for every run",
    )  # fmt: skip
    p.add_argument(
        "--runs-file", action="append", metavar="FILE",
        help="a file with one LABEL=RUN_DIR (or LABEL<TAB>RUN_DIR) per line (# comments and "
        "blank lines skipped), for long lists; may be repeated and combined with --run",
    )  # fmt: skip
    p.add_argument(
        "--runs-sha256", metavar="HEX",
        help="the SHA-256 the --runs-file must have (the workflow passes the hash of the list "
        "its configuration names, so an edited list is refused)",
    )  # fmt: skip
    p.set_defaults(func=cmd_aggregate)

    # the layouts' list imports the report package (pandas): only when render is what runs
    if command in (None, "render"):
        from fedkd.report.render import TARGETS, render_description

        description, layouts = render_description(), "one of: " + ", ".join(TARGETS)
    else:
        description, layouts = None, "a layout (`fedkd render --help` lists them)"
    p = sub.add_parser(
        "render",
        help="render a table (.tex/.md/.csv/.html) or figure (.pdf/.png) of the papers",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="LAYOUT", help=layouts)
    p.add_argument(
        "--out", "-o", required=True, metavar="PREFIX",
        help="output path without suffix (PREFIX.tex/.md/.csv/.html or PREFIX.pdf/.png)",
    )  # fmt: skip
    p.add_argument("--aggregate", metavar="FILE", help="aggregate Parquet from `fedkd aggregate`")
    p.add_argument(
        "--partitions", nargs="+", metavar="FILE",
        help="partition Parquet files from `fedkd partition` (partition), one panel each",
    )  # fmt: skip
    p.add_argument(
        "--features", metavar="FILE", help="a features file from `fedkd features` (tsne)"
    )
    p.add_argument(
        "--run", metavar="DIR",
        help="a completed run directory (tsne without --features: its features are computed first)",
    )  # fmt: skip
    p.add_argument(
        "--name", metavar="NAME",
        help="the output's name in messages, the LaTeX comment and the default label "
        "[default: LAYOUT as given]",
    )  # fmt: skip
    p.add_argument(
        "--options", metavar="JSON",
        help="target options as a JSON object, or @FILE holding one (see the list above)",
    )  # fmt: skip
    p.set_defaults(func=cmd_render)

    p = sub.add_parser(
        "status",
        help="progress of the training runs: done / running / stopped / failed / damaged; an ETA",
        description="Read run.json and metrics.parquet of the runs that TARGETs need (the same "
        "targets and --configfile as snakemake; --configfile alone: every run of that configuration;"
        " neither: every run under --runs) and print how many are done, running, stopped (their "
        "process is gone: a re-run resumes them), failed (diverged, or an error it recorded, shown),"
        " damaged (a file that cannot be read, named with its fix) or not started; each running "
        "run's round and speed; and an ETA from the measured seconds per round.",
    )
    p.add_argument(
        "targets", nargs="*", metavar="TARGET",
        help="workflow targets, e.g. results/tables/table3.tex (planned from --configfile, "
        "default config/config.yaml); a folder alone: every run found in it (as --runs)",
    )  # fmt: skip
    p.add_argument("--runs", help="runs folder [results/runs]")
    p.add_argument(
        "--configfile", metavar="FILE",
        help="the workflow's configuration (as snakemake's --configfile) [config/config.yaml]",
    )  # fmt: skip
    p.add_argument(
        "--stale-after", type=number, default=600.0, metavar="SECONDS",
        help="a running run whose process cannot be seen from here (another host) and that has "
        "had no round for this long (and for 5 of its rounds) is stopped [600]",
    )  # fmt: skip
    p.set_defaults(func=cmd_status)

    # listed for --help only: main() hands everything after "bench" to fedkd.tools.bench
    sub.add_parser(
        "bench",
        help="benchmarks: engine vs bare PyTorch loop; table-3 runs per engine (--pack: runs sharing "
        "a device, --profile: a torch.profiler trace); fedkd bench --help",
    )

    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from fedkd.tools.bench.command import main as bench_main

        return reporting_user_errors("bench", lambda: bench_main(argv[1:]))
    if argv == ["--version"]:  # without building the parser
        return print_version() or 0
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage, unless the flag came before the command
        before = unknown[0] in argv[: argv.index(args.command)]
        message = f"unrecognized arguments: {' '.join(unknown)}"
        (parser if before else args.commands[args.command]).error(message)
    # its torch, pyarrow and pandas imported out of the garbage collector's walks first
    return reporting_user_errors(args.command, lambda: run_command(args))
