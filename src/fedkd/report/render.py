"""``fedkd render LAYOUT --out PREFIX``: one table or figure from an aggregate (or partition files,
or a run's features file). Tables write PREFIX.tex/.md/.csv/.html, figures PREFIX.pdf/.png. The layouts
and what each needs are in fedkd.report.targets."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fedkd.report.aggregate import ReportError, read_aggregate
from fedkd.report.options import Options, load_options
from fedkd.report.setting import with_setting
from fedkd.report.targets import ALIASES, LAYOUTS, get_layout

TARGETS = tuple(LAYOUTS) + tuple(ALIASES)  # every name `fedkd render` accepts


def render(
    target: str,
    out: str | Path,
    aggregate: str | Path | None = None,
    partitions: list[str] | None = None,
    run: str | Path | None = None,
    options: dict | str | None = None,
    features: str | Path | None = None,
    name: str | None = None,
) -> list[Path]:
    """Render layout ``target`` (or its earlier name); returns the files written.

    ``name`` names the output in messages, the LaTeX comment and the default label (default: the
    target as given). ``run``: a completed run directory, for the t-SNE figure without a features
    file; its features are computed first (this trains a local model)."""
    try:
        layout = get_layout(target)
    except KeyError:
        raise ReportError(f"unknown target {target!r}; targets are: {', '.join(TARGETS)}") from None
    name = name or target
    values = load_options(options) if isinstance(options, str) or options is None else options
    allowed = layout.options + (layout.run_options if features is None else ())
    opts = Options(name, values, allowed)
    opts.values.setdefault("caption", layout.default_caption(opts.values))
    opts.values.setdefault("label", f"{layout.label_prefix}:{name}")

    if layout.input == "none":
        source = None
    elif layout.input == "partitions":
        source = list(partitions or [])
    elif layout.input == "run":
        source = features if features is not None else _features_of(run, out, opts, layout)
    else:
        source = read_aggregate(aggregate)
        check_against_runs_list(source, aggregate)
        # what was run, from the runs themselves: clients, C, E, rounds, model, sizes, seeds, ±
        # (the claims page shows effects and intervals, no ± of a cell)
        opts.values["caption"] = with_setting(
            opts.values["caption"], source, opts.ddof(), spread=layout.name != "claims"
        )
    if "column_names" in layout.options:
        from fedkd.report.keys import check_naming_options

        check_naming_options(source, opts)
    doc = layout.build()(source, opts)
    if layout.output == "table":
        from fedkd.report.cells import with_collapse_note
        from fedkd.report.writers import write_table

        doc.caption = with_collapse_note(doc.caption, doc.body)
        return write_table(doc, out, name)
    from fedkd.report.writers import save_figure

    if layout.input == "aggregate" and layout.label_order:
        # the variant behind each line or bar, as a table's caption names it (FedGKD's M per α)
        from fedkd.report.keys import selected_labels
        from fedkd.report.tables.common import with_variant_note

        keys = [k for k in _FIGURE_KEYS if k in source.columns]
        labels = selected_labels(source, opts)
        opts.values["caption"] = with_variant_note(
            opts.text("caption", ""), source, keys, labels, opts.mapping("column_names")
        )
    return save_figure(doc, out, opts.text("caption", ""), opts.text("label", ""))


def check_against_runs_list(df, aggregate) -> None:
    """An aggregate beside its runs list (``results/aggregate/NAME.runs``, as the workflow
    writes them) holds exactly the runs the list names: another output's aggregate copied or
    swapped into its place is refused, not rendered as this one, whether it holds a run the list
    does not name or lacks one it does (every run read has a row: one that completed no round
    its round-0 row). Without a list beside it, as for an aggregate made by hand, there is
    nothing to compare."""
    from fedkd.report.run_list import read_runs_file

    runs_list = Path(aggregate).with_suffix(".runs")
    if not runs_list.is_file() or not {"label", "run"} <= set(df.columns):
        return
    listed = set(read_runs_file(runs_list))
    held = set(zip(df["label"], df["run"], strict=True))
    for runs, how in ((held - listed, "holds"), (listed - held, "lacks")):
        if runs:
            label, run = sorted(runs)[0]
            verb = "does not list" if how == "holds" else "lists"
            raise ReportError(
                f"aggregate file {aggregate} {how} {len(runs)} run(s) that {runs_list} {verb} "
                f"(e.g. {label} {run}): it is another output's aggregate, or its list changed "
                f"since; delete it and run the workflow again"
            )


# the run keys a figure's variant note names, where a label's variant differs along one
_FIGURE_KEYS = ("dataset", "partition", "alpha", "shards", "participation", "local_epochs")


# --------------------------------------------------------------------------- `fedkd render --help`
RENDER_INTRO = """\
Render one of the papers' tables or figures. Tables write PREFIX.tex (booktabs), PREFIX.md,
PREFIX.html and PREFIX.csv (one line per cell: the row keys, label, what it shows, variant, mean,
std, n_seeds, seeds, missing_seeds, status, collapsed runs); figures write PREFIX.pdf and
PREFIX.png. Output bytes depend only on the inputs.

Accuracies are percent, mean ± std over the seeds of a cell (population std, ddof=0, unless
option ddof is 1). Best in bold, second underlined, among the labels compared for one setting
(ranked on the printed value; fewest rounds wins in rounds_to_target). A cell shows "diverged"
when one of its runs diverged ("incomplete" when one never finished, "stopped at target" when one
ended at its stop_at_acc before its last round), "–" when it has no runs, nothing where option
absent says the column has no cell there; at_rounds and rounds_to_target only need the rounds up
to the one asked for, so a run that diverged later still counts there. A value marked † averages
a collapsed run (one whose global model never got meaningfully above chance, fedkd.collapse), a
value marked ‡ lacks a seed other cells of the table have (no run of it: its mean is over fewer
seeds; the CSV's missing_seeds names them); the caption then says so. Runs averaged into one cell
must differ only in their seed; otherwise rendering stops and names the run key to add to option
rows.

"""

# what each layout option means; which layout takes which comes from fedkd.report.targets
RENDER_OPTION_HELP = {
    "strategies": "the strategies, one a row (default all registered)",
    "names": "{strategy: shown name}",
    "datasets": "row order of the datasets (others follow)",
    "rows": "run keys forming a row",
    "columns": "the labels, in order",
    "stat": '"best" | "final" | "val_selected" (default best; forgetting: final)',
    "val_selected": "also rows of the test accuracy at the round best on validation (true)",
    "stats": 'default ["best", "final", "val_selected"]',
    "across": '["label"] or run keys among rows that become the columns (grid: ["label"], '
    "grid_by_stat: its rows, the paper's Table 5)",
    "best_of": "{label: [variant, ...]}: per setting the best of a sweep, marked a, b, ...",
    "absent": '{label: [{"local_epochs": 1}, ...]}: settings where the column has no cell '
    "(left empty; its CSV status: absent)",
    "rounds": "rounds whose accuracy is shown (default [10, 20, 50, 100])",
    "targets": '[{"alpha": 1.0, "accuracy": 0.8}, ...] or {"1.0": 0.8}: target accuracy (0-1)',
    "paper": "the paper table's key in fedkd/report/paper_values.yaml, e.g. fedgkd_table3",
    "sources": "{table: {paper, layout, options, best_of, absent, labels}} of the tables whose "
    "runs it compares (the workflow fills it in)",
    "stand_ins": '{dataset: "the paper dataset it stands in for"}, e.g. {"mnist5k": "CIFAR-10"}',
    "claims": "the configuration's own claims: its claims: entries (config/README.md), tested "
    "before the papers'",
    "titles": "one panel title per partition file",
    "panels": "run keys forming a panel",
    "ncols": "panels per row",
    "perplexity": "t-SNE perplexity (30)",
    "samples": "test samples (1000)",
    "client": "the client whose local model (0)",
    "device": '"cpu" (default), "cuda" or "auto"',
    "local_objective": '"strategy" (the run\'s own local loss, default) or "fedavg" (CE)',
}
RENDER_INPUTS = {
    "none": "",
    "aggregate": "--aggregate FILE",
    "partitions": "--partitions FILE...",
    "run": "--features FILE (or --run DIR)",
}
RENDER_SHARED = ("row_names", "column_names", "order", "ddof", "decimals", "highlight")


HELP_WIDTH = 100  # the help's own lines are wrapped to it


def render_description() -> str:
    """`fedkd render --help`: the layouts, their inputs and options, from the registry."""
    lines = [
        RENDER_INTRO,
        "",
        'layouts, their input and options (all accept "caption" and "label"):',
    ]
    for lay in LAYOUTS.values():
        earlier = f" (earlier names: {' '.join(lay.aliases)})" if lay.aliases else ""
        lines.append(f"  {lay.name} [{lay.output}]{earlier}")
        if RENDER_INPUTS[lay.input]:
            lines.append(f"      input: {RENDER_INPUTS[lay.input]}")
        for opt in lay.options + lay.run_options:
            if opt not in RENDER_SHARED:
                lines += textwrap.wrap(
                    f"{opt}: {RENDER_OPTION_HELP[opt]}", HELP_WIDTH, initial_indent=" " * 6,
                    subsequent_indent=" " * 8, break_on_hyphens=False,
                )  # fmt: skip
    return "\n".join(lines) + "\n\n" + RENDER_SHARED_HELP


RENDER_SHARED_HELP = """\
options shared by the accuracy tables and figures:
  row_names         {value: shown text} or {run key: {value: shown text}},
                    e.g. {"mnist5k": "mnist5k (for CIFAR-10)"}
  column_names      {label: shown text}; a shown text may be {"tex": LaTeX, "md": text}
  order             {run key: [values in order]}; default: datasets as in `fedkd train --help`,
                    alpha descending, other numbers ascending
  ddof (0 | 1), decimals (2; 1 for rounds), highlight (true)

example:
  fedkd render grid --aggregate results/aggregate/table3.parquet --out results/table3 \\
      --options '{"columns": ["fedavg", "fedprox", "fedgkd"], "rows": ["dataset", "alpha"]}'"""


def _features_of(run, out, opts: Options, layout) -> Path:
    """A run's features, computed next to the output (PREFIX.features.npz)."""
    from fedkd.engine.features import FeaturesError, tsne_features

    if run is None:
        raise ReportError(
            f"target {opts.target!r} needs --features FILE (from `fedkd features`) or --run DIR"
        )
    kwargs = {k: opts.values[k] for k in layout.run_options if k in opts.values}
    if "device" not in kwargs:
        kwargs["device"] = "cpu"
    out = Path(out)
    try:
        return tsne_features(run, out.with_name(out.name + ".features.npz"), **kwargs)
    except FeaturesError as exc:
        raise ReportError(str(exc)) from exc
