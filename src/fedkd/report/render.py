"""``fedkd render TARGET --out PREFIX``: one table or figure from an aggregate (or partition files,
or one run directory). Tables write PREFIX.tex/.md/.csv, figures PREFIX.pdf/.png."""

from __future__ import annotations

from pathlib import Path

from fedkd.report.aggregate import ReportError, read_aggregate
from fedkd.report.common import Options, load_options

TABLES = (
    "table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8", "table9",
    "rounds_to_target",
)  # fmt: skip
FIGURES = ("fig_partition", "fig_curves", "fig_tsne", "fig_forgetting", "fig_fedcad")
TARGETS = TABLES + FIGURES

FIGURE_OPTIONS = {
    "fig_partition": ("titles", "ncols"),
    "fig_curves": ("panels", "columns", "row_names", "column_names", "order", "ddof", "ncols"),
    "fig_tsne": ("samples", "client", "perplexity", "device", "local_objective"),
    "fig_forgetting": ("panels", "columns", "row_names", "column_names", "order", "ddof", "stat"),
    "fig_fedcad": ("panels", "columns", "row_names", "column_names", "order", "ddof"),
}

DEFAULT_FIGURE_CAPTIONS = {
    "fig_partition": "Samples per class on each client (bubble area proportional to the count).",
    "fig_curves": "Top-1 test accuracy per communication round: mean over seeds, band = ± std.",
    "fig_tsne": "t-SNE of penultimate features on test samples: final global model and a local model.",
    "fig_forgetting": "Accuracy and forgetting (fedntd eq. 5) of the global model, mean ± std over seeds.",
    "fig_fedcad": "Global test accuracy and clients' local-average test accuracy per round.",
}


def render(
    target: str,
    out: str | Path,
    aggregate: str | Path | None = None,
    partitions: list[str] | None = None,
    run: str | Path | None = None,
    options: dict | str | None = None,
) -> list[Path]:
    """Render ``target``; returns the files written."""
    if target not in TARGETS:
        raise ReportError(f"unknown target {target!r}; targets are: {', '.join(TARGETS)}")
    if isinstance(options, str) or options is None:
        options = load_options(options)
    if target in TABLES:
        from fedkd.report import tables

        opts = Options(target, options, tables.table_options(target))
        if target == "table1":
            doc = tables.table1(opts)
        else:
            doc = tables.TABLE_BUILDERS[target](read_aggregate(aggregate), opts)
        return tables.write_table(doc, out, target)

    from fedkd.report import figures

    opts = Options(target, options, FIGURE_OPTIONS[target])
    caption = opts.text("caption", DEFAULT_FIGURE_CAPTIONS[target])
    label = opts.text("label", f"fig:{target}")
    if target == "fig_partition":
        fig = figures.fig_partition(list(partitions or []), opts)
    elif target == "fig_tsne":
        fig, _ = figures.fig_tsne(run, opts)
    else:
        df = read_aggregate(aggregate)
        build = {
            "fig_curves": figures.fig_curves,
            "fig_forgetting": figures.fig_forgetting,
            "fig_fedcad": figures.fig_fedcad,
        }[target]
        fig = build(df, opts)
    return figures.save_figure(fig, out, caption, label)
