"""Commands added by later stages (aggregate, render, bench); each registers its subparser here."""

from __future__ import annotations

import argparse
import sys

AGGREGATE_DESCRIPTION = """\
Collect run directories into one long Parquet table, one row per (run, round), with the run's
keys repeated on each row (label, strategy, variant, dataset, model, partition, alpha, shards,
clients, participation, local_epochs, rounds_planned, seed, status, eval_local, params, dataset
sizes) and its per-round metrics (round, test_acc, test_loss, class_acc, train_loss, local_acc,
bytes_sent, bytes_received, seconds, then val_size, dataset_kind and the strategies' server_*
columns). alpha is NaN unless the partition is Dirichlet, shards NaN unless it is sharding.
A run that completed no round appears as one row with round 0 and NaN metrics, so a run that
diverged in round 1 still shows as diverged.
Rows are sorted by (label, dataset, alpha, participation, local_epochs, seed, round)."""

RENDER_DESCRIPTION = """\
Render one of the papers' tables or figures. Tables write PREFIX.tex (booktabs), PREFIX.md and
PREFIX.csv (one line per cell: the row keys, label, mean, std, n_seeds, seeds, status);
figures write PREFIX.pdf and PREFIX.png. Output bytes depend only on the inputs.

Accuracies are percent, mean ± std over the seeds of a cell (population std, ddof=0, unless
option ddof is 1). Best in bold, second underlined, among the labels compared for one setting
(ranked on the printed value; fewest rounds wins in rounds_to_target). A cell shows "diverged"
when one of its runs diverged ("incomplete" when one never finished), "–" when it has no runs;
table6 and rounds_to_target only need the rounds up to the one asked for, so a run that
diverged later still counts there. Runs averaged into one cell must differ only in their seed;
otherwise rendering stops and names the run key to add to option rows.

targets and their options (all accept "caption": plain-text caption, and "label"):
  table1            strategies (list; default all registered), names
  table2            datasets (row order; others follow), row_names
  table3 table4 table7 table8 table9
                    rows (run keys forming a row; default ["dataset", "alpha"]), columns (labels,
                    in order), stat ("best" [default] | "final"), across (["label"] [default], or
                    run keys among rows that become the columns, e.g. ["alpha"] for the paper's
                    table-7 layout, ["dataset"] for table 9's)
  table5            rows (default ["participation"]), columns, stats (default ["best", "final"])
  table6            columns (labels, shown as rows), rounds (default [10, 20, 50, 100]), rows
  rounds_to_target  columns, rows (default ["alpha", "participation", "local_epochs"]),
                    targets ({"1.0": 0.8, "0.1": 0.75}: alpha -> target accuracy in 0-1);
                    "not reached" when some seed never reaches it
  fig_partition     --partitions FILE...; titles (one per file), ncols
  fig_curves        panels (run keys; default ["dataset", "alpha"]), columns, ncols
  fig_tsne          --run DIR; samples (1000), client (0), perplexity (30), device ("cpu"),
                    local_objective ("strategy": the run's own local loss [default], "fedavg": CE)
  fig_forgetting    panels (default ["partition", "alpha", "shards"]), columns, stat ("final")
  fig_fedcad        columns, panels (default none; runs need eval_local=true)

options shared by the accuracy tables and figures:
  row_names         {value: shown text} or {run key: {value: shown text}},
                    e.g. {"mnist5k": "mnist5k (for CIFAR-10)"}
  column_names      {label: shown text}; a shown text may be {"tex": LaTeX, "md": text}
  order             {run key: [values in order]}; default: datasets as in `fedkd train --help`,
                    alpha descending, other numbers ascending
  ddof (0 | 1), decimals (2; 0 for rounds), highlight (true)

example:
  fedkd render table3 --aggregate results/aggregate/table3.parquet --out results/table3 \\
      --options '{"columns": ["fedavg", "fedprox", "fedgkd"], "rows": ["dataset", "alpha"]}'"""


def cmd_aggregate(args) -> int:
    from fedkd.report import aggregate_runs, parse_run_arg, read_runs_file, write_aggregate

    runs = [parse_run_arg(text) for text in args.run or []]
    for path in args.runs_file or []:
        runs += read_runs_file(path)
    df = aggregate_runs(runs)
    write_aggregate(df, args.out)
    n_runs = df[["label", "run"]].drop_duplicates().shape[0]
    bad = (
        df.drop_duplicates(["label", "run"])["status"]
        .value_counts()
        .drop("complete", errors="ignore")
    )
    extra = "".join(f", {n} {s}" for s, n in bad.items())
    print(f"{args.out}: {n_runs} runs, {len(df)} rows{extra}", file=sys.stderr)
    return 0


def cmd_render(args) -> int:
    from fedkd.report import render

    paths = render(
        args.target,
        args.out,
        aggregate=args.aggregate,
        partitions=args.partitions,
        run=args.run,
        options=args.options,
    )
    print(" ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def register(sub) -> None:
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
        help="a file with one LABEL=RUN_DIR per line (# comments and blank lines skipped), for "
        "long lists; may be repeated and combined with --run",
    )  # fmt: skip
    p.set_defaults(func=cmd_aggregate)

    from fedkd.report.render import TARGETS

    p = sub.add_parser(
        "render",
        help="render a table (.tex/.md/.csv) or figure (.pdf/.png) of the papers",
        description=RENDER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="one of: " + ", ".join(TARGETS))
    p.add_argument(
        "--out", "-o", required=True, metavar="PREFIX",
        help="output path without suffix (PREFIX.tex/.md/.csv or PREFIX.pdf/.png)",
    )  # fmt: skip
    p.add_argument("--aggregate", metavar="FILE", help="aggregate Parquet from `fedkd aggregate`")
    p.add_argument(
        "--partitions", nargs="+", metavar="FILE",
        help="partition Parquet files from `fedkd partition` (fig_partition), one panel each",
    )  # fmt: skip
    p.add_argument("--run", metavar="DIR", help="a completed run directory (fig_tsne)")
    p.add_argument(
        "--options", metavar="JSON",
        help="target options as a JSON object, or @FILE holding one (see the list above)",
    )  # fmt: skip
    p.set_defaults(func=cmd_render)
