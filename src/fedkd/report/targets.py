"""The registry of table layouts and figure kinds: one entry each, read by `fedkd render`, its help,
the workflow's plan and validation (fedkd.pipeline), and the schema test.

A config entry (``tables.table3``) names its layout (``layout: grid``); the paper's table numbers
are entry names only. Adding a layout: its module under report/tables/ or report/figures/ with
``build(source, options)``, an entry here, a config entry, and its test.

Kept free of heavy imports (builders are named, and imported when rendering): the Snakefile reads
this registry when it parses the workflow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    name: str
    output: str  # "table" (.tex/.md/.csv/.html) or "figure" (.pdf/.png)
    # what it is drawn from: nothing, the aggregate of its runs, its partition files, or one run
    # (through that run's features file, `fedkd features`)
    input: str
    builder: str  # "module:function", build(source, options) -> TableDoc or Figure
    options: tuple[str, ...]  # render options, besides caption and label
    # default caption; "{stat}" is filled from option stat (best or final)
    caption: str
    seeds: str = "all"  # the runs' seeds by default: "all" configured seeds, or the "first"
    # package parts (besides report/ and metrics.py) whose code the output depends on
    code: tuple[str, ...] = ()
    label_order: bool = True  # takes option columns: the config's column labels, in order
    lists_datasets: bool = False  # one row per dataset of the grid (option datasets)
    run_options: tuple[str, ...] = ()  # options of the features step (input "run")
    check: str | None = None  # "module:function", check(where, entry, points) -> config errors
    # "module:function", checked_options(source, opts): its options as build reads them, refused
    # (ReportError) where they do not fit the source; planning calls it on the source as planned
    # (an aggregate's columns without rows, the partition files), before any run trains
    options_check: str | None = None
    aliases: tuple[str, ...] = ()  # earlier `fedkd render` names (paper numbers), still accepted
    # "module:function", draws_from(outputs, declared) -> {entry: [labels]} (``declared``: the
    # configuration's own claims: entries): a layout drawn from the runs of
    # other entries (their labels prefixed "entry/") instead of a grid of its own
    draws_from: str | None = None
    # the report section of its outputs, instead of the paper its caption cites
    section: str | None = None

    def build(self) -> Callable:
        return _resolve(self.builder)

    def sources(self) -> Callable | None:
        return _resolve(self.draws_from) if self.draws_from else None

    def config_check(self) -> Callable | None:
        return _resolve(self.check) if self.check else None

    def checked_options(self) -> Callable | None:
        return _resolve(self.options_check) if self.options_check else None

    def default_caption(self, options: dict) -> str:
        return self.caption.format(stat=options.get("stat", "best"))

    @property
    def label_prefix(self) -> str:
        return "tab" if self.output == "table" else "fig"


def _resolve(ref: str) -> Callable:
    module, func = ref.split(":")
    return getattr(importlib.import_module(f"fedkd.report.{module}"), func)


# the claims table's section of `snakemake --report`: the report's menu sorts sections by name,
# and this one sorts before the papers' own and "Beside the paper"
CLAIMS_SECTION = "Are the papers' claims supported?"

# options of the accuracy tables and of the figures that compare labels
_NAMES = ("row_names", "column_names", "order", "ddof")
_CELLS = ("decimals", "highlight")

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "traits", "table", "none", "tables.traits:build",
            ("strategies", "names"),
            "Comparison of federated learning approaches.",
            code=("strategies",), label_order=False, check="tables.traits:check_entry",
            aliases=("table1",),
        ),
        Layout(
            "dataset_stats", "table", "aggregate", "tables.dataset_stats:build",
            ("datasets", "row_names"),
            "Statistics of the datasets.",
            seeds="first", label_order=False, lists_datasets=True, aliases=("table2",),
        ),
        Layout(
            "grid", "table", "aggregate", "tables.grid:build",
            ("rows", "columns", "stat", "val_selected", "across", "best_of", "absent", *_NAMES, *_CELLS),
            "Top-1 test accuracy (%, {stat} round), mean ± std over seeds; best in bold, second "
            "underlined.",
            options_check="tables.grid:checked_options",
            aliases=("table3", "table4", "table7", "table8", "table9"),
        ),
        Layout(
            "grid_by_stat", "table", "aggregate", "tables.grid_by_stat:build",
            ("rows", "columns", "stats", "across", "best_of", "absent", *_NAMES, *_CELLS),
            "Best and final top-1 test accuracy (%), mean ± std over seeds.",
            options_check="tables.grid_by_stat:checked_options", aliases=("table5",),
        ),
        Layout(
            "at_rounds", "table", "aggregate", "tables.at_rounds:build",
            ("columns", "rounds", "rows", "best_of", "absent", *_NAMES, *_CELLS),
            "Top-1 test accuracy (%) at given communication rounds, mean ± std over seeds.",
            check="tables.at_rounds:check_entry", options_check="tables.at_rounds:checked_options",
            aliases=("table6",),
        ),
        Layout(
            "rounds_to_target", "table", "aggregate", "tables.rounds_to_target:build",
            ("columns", "rows", "targets", "best_of", "absent", *_NAMES, *_CELLS),
            "Communication rounds to reach the target top-1 test accuracy T, mean ± std over "
            "seeds.",
            check="tables.rounds_to_target:check_entry",
            options_check="tables.rounds_to_target:checked_options",
        ),
        Layout(
            "vs_paper", "table", "aggregate", "tables.vs_paper:build",
            ("paper", "stand_ins", "stat", "best_of", "ddof", "decimals", "rounds", "targets"),
            "The paper's values beside the reproduced mean ± std over seeds, like against like: "
            "on the paper's dataset their difference, whether it is within two of the paper's "
            "standard deviations and the seed range, on a stand-in the methods' "
            "ranks and gaps to FedAvg.",
            label_order=False, check="tables.vs_paper:check_entry",
        ),
        Layout(
            "claims", "table", "aggregate", "claims.table:build",
            ("sources", "stand_ins", "claims"),
            "The papers' claims, each compared on the runs of the configuration's tables.",
            label_order=False, draws_from="claims:sources", section=CLAIMS_SECTION,
        ),
        Layout(
            "partition", "figure", "partitions", "figures.partition:build",
            ("titles", "ncols"),
            "Samples per class on each client (bubble area proportional to the count).",
            seeds="first", label_order=False, options_check="figures.partition:checked_options",
            aliases=("fig_partition",),
        ),
        Layout(
            "curves", "figure", "aggregate", "figures.curves:build",
            ("panels", "columns", *_NAMES, "ncols"),
            "Top-1 test accuracy per communication round: mean over seeds, band = ± std.",
            options_check="figures.curves:checked_options", aliases=("fig_curves",),
        ),
        Layout(
            "tsne", "figure", "run", "figures.tsne:build",
            ("perplexity",),
            "t-SNE of penultimate features on test samples: final global model and a local model.",
            seeds="first", label_order=False,
            run_options=("samples", "client", "device", "local_objective"),
            check="figures.tsne:check_entry", aliases=("fig_tsne",),
        ),
        Layout(
            "forgetting", "figure", "aggregate", "figures.forgetting:build",
            ("panels", "columns", *_NAMES, "stat"),
            "Accuracy and forgetting (fedntd eq. 5) of the global model, mean ± std over seeds.",
            check="figures.forgetting:check_entry",
            options_check="figures.forgetting:checked_options", aliases=("fig_forgetting",),
        ),
        Layout(
            "fedcad", "figure", "aggregate", "figures.fedcad:build",
            ("panels", "columns", *_NAMES),
            "Global test accuracy and clients' local-average test accuracy per round.",
            check="figures.fedcad:check_entry", options_check="figures.fedcad:checked_options",
            aliases=("fig_fedcad",),
        ),
    )
}  # fmt: skip

ALIASES: dict[str, str] = {alias: lay.name for lay in LAYOUTS.values() for alias in lay.aliases}


def layout_names(output: str | None = None) -> list[str]:
    return [n for n, lay in LAYOUTS.items() if output in (None, lay.output)]


def get_layout(name: str) -> Layout:
    """The layout called ``name``, or whose earlier name (a paper number such as table3) it is."""
    name = ALIASES.get(name, name)
    if name not in LAYOUTS:
        raise KeyError(
            f"unknown layout {name!r}; layouts are: {', '.join(LAYOUTS)} (earlier names: "
            f"{', '.join(ALIASES)})"
        )
    return LAYOUTS[name]
