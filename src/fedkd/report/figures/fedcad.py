"""Figure ``fedcad`` (FedCAD Fig. 1): global test accuracy and the clients' local-average accuracy
per round."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.figures.draw import (
    curve,
    figure_seeds,
    integer_rounds,
    legend,
    legend_note,
    line_styles,
    new_figure,
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
from fedkd.report.text import label_text


def build(df: pd.DataFrame, opts: Options):
    panels = opts.str_list("panels", [])
    check_keys(df, panels, "panels", opts.target)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    sub = df[df["label"].isin(labels)]
    no_local = sorted(
        sub.groupby("label")["local_acc"].apply(lambda s: s.isna().all()).loc[lambda s: s].index
    )
    if no_local:
        raise ReportError(
            f"{opts.target} needs runs trained with eval_local=true; label(s) {no_local} have no "
            f"local_acc values"
        )
    seeds = figure_seeds(sub)
    groups = group_runs(sub, panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    styles = line_styles(labels)
    colors = {label: s["color"] for label, s in styles.items()}
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
                    (line,) = ax.plot(x, mean * 100, **styles[label])
                    ax.fill_between(
                        x,
                        (mean - std) * 100,
                        (mean + std) * 100,
                        color=colors[label],
                        alpha=0.2,
                        lw=0,
                    )
                    handles.setdefault(label, line)
                # the metric is on the y axis; a title names the panel when there are several
                head = f"({chr(ord('a') + j)}) {title.split(' (')[0]}"
                ax.set_title(panel_title(panels, pid, names) if panels else head)
                ax.set_xlabel("Communication round")
                ax.set_ylabel(title)
                integer_rounds(ax)
        legend(
            fig,
            [
                (
                    handles[lab],
                    label_text(lab, col_names).shown + legend_note(notes[lab], len(pids)),
                )
                for lab in labels
                if lab in handles
            ],
        )
    return fig
