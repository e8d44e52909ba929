"""Figure ``fedcad`` (FedCAD Fig. 1): global test accuracy and the clients' local-average accuracy
per round."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.figures.draw import (
    curve,
    figure_seeds,
    integer_rounds,
    line_styles,
    mean_band,
    new_figure,
    noted_legend,
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


def build(df: pd.DataFrame, opts: Options):
    panels = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    sub = df[df["label"].isin(labels)]
    # the run's setting, not its values: a run that diverged before its first round recorded
    # no local accuracy either, and is drawn as such (noted), not refused
    no_local = sorted(sub.loc[~sub["eval_local"].astype(bool), "label"].unique())
    if no_local:
        raise ReportError(
            f"{opts.target} needs runs trained with eval_local=true; label(s) {no_local} have "
            f"runs trained without it, which record no local_acc"
        )
    seeds = figure_seeds(sub)
    groups = group_runs(sub, panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    styles = line_styles(labels)
    metrics = (("test_acc", "Global accuracy (%)"), ("local_acc", "Local average accuracy (%)"))
    with style():
        fig, axes = new_figure(len(pids), 2)
        handles, notes = {}, {label: {} for label in labels}
        for i, pid in enumerate(pids):
            for j, (column, title) in enumerate(metrics):
                ax = axes[i, j]
                for label in labels:
                    runs = groups[pid].get(label)
                    if not runs:
                        continue
                    check_same_setting(runs, f"{opts.target} panel {pid} label {label!r}", "panels")
                    x, mean, std = curve(runs, column, ddof)
                    notes[label][panel_title(panels, pid, names)] = runs_note(runs, seeds)
                    handles.setdefault(label, mean_band(ax, x, mean, std, styles[label]))
                # the metric is on the y axis; a title names the panel when there are several
                head = f"({chr(ord('a') + j)}) {title.split(' (')[0]}"
                ax.set_title(panel_title(panels, pid, names) if panels else head)
                ax.set_xlabel("Communication round")
                ax.set_ylabel(title)
                integer_rounds(ax)
        noted_legend(fig, labels, handles, notes, col_names, len(pids))
    return fig


def checked_options(df: pd.DataFrame, opts: Options) -> list[str]:
    """Option ``panels``: run keys of the aggregate."""
    panels = opts.str_list("panels", [])
    check_keys(df, panels, "panels", opts.target)
    return panels


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: its runs record the clients' local accuracy (``points`` hold each point's
    resolved run keys)."""
    if all(p.get("eval_local") is True for p in points):
        return []
    return [
        f"{where}.grid: layout fedcad draws the clients' local accuracy, which only runs with "
        "eval_local: true record; give its grid eval_local: [true]"
    ]
