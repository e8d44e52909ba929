"""Figure ``curves``: test accuracy per communication round, mean ± std over seeds, one panel per
setting."""

from __future__ import annotations

import pandas as pd

from fedkd.report.figures.draw import (
    curve,
    figure_seeds,
    hide_unused,
    integer_rounds,
    line_styles,
    mean_band,
    new_figure,
    noted_legend,
    panel_grid,
    panel_title,
    runs_note,
    style,
)
from fedkd.report.keys import (
    check_keys,
    check_same_setting,
    group_runs,
    order_rows,
    selected_labels,
)
from fedkd.report.options import Options


def build(df: pd.DataFrame, opts: Options, column: str = "test_acc"):
    panels = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    sub = df[df["label"].isin(labels)]
    seeds = figure_seeds(sub)
    groups = group_runs(sub, panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    nrows, ncols = panel_grid(len(pids), opts.integer("ncols", 3, 1))
    styles = line_styles(labels)
    with style():
        fig, axes = new_figure(nrows, ncols)
        handles, notes = {}, {label: {} for label in labels}
        for ax, pid in zip(axes.flat, pids, strict=False):
            for label in labels:
                runs = groups[pid].get(label)
                if not runs:
                    continue
                check_same_setting(runs, f"{opts.target} panel {pid} label {label!r}", "panels")
                # runs that diverged before their first round draw no line, but are noted
                x, mean, std = curve(runs, column, ddof)
                notes[label][panel_title(panels, pid, names)] = runs_note(runs, seeds)
                handles.setdefault(label, mean_band(ax, x, mean, std, styles[label]))
            ax.set_title(panel_title(panels, pid, names))
            ax.set_xlabel("Communication round")
            ax.set_ylabel("Test accuracy (%)")
            integer_rounds(ax)
        hide_unused(axes, len(pids))
        noted_legend(fig, labels, handles, notes, col_names, len(pids))
    return fig


def checked_options(df: pd.DataFrame, opts: Options) -> list[str]:
    """Option ``panels``: run keys of the aggregate."""
    panels = opts.str_list("panels", ["dataset", "alpha"])
    check_keys(df, panels, "panels", opts.target)
    return panels
