"""Figure ``forgetting`` (FedNTD Table 1 as bars): accuracy and forgetting per partition setting."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedkd.report.figures.draw import (
    figure_seeds,
    new_figure,
    palette,
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
    """Per panel (partition setting): accuracy (top) and forgetting (bottom) of each label as
    bars with the seed spread; fedntd Table 1 reports both side by side."""
    from fedkd import metrics

    panels, stat = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    sub = df[df["label"].isin(labels)]
    seeds = figure_seeds(sub)
    groups = group_runs(sub, panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    colors = palette(len(labels))
    acc_fn = metrics.best_accuracy if stat == "best" else metrics.final_accuracy
    with style():
        fig, axes = new_figure(2, len(pids), width=max(2.6, 0.45 * len(labels) + 1.2))
        for j, pid in enumerate(pids):
            values = {"acc": [], "fgt": []}
            notes = {"acc": [], "fgt": []}
            for label in labels:
                runs = groups[pid].get(label) or {}
                if runs:
                    check_same_setting(runs, f"{opts.target} panel {pid} label {label!r}", "panels")
                statuses = {str(r["status"].iloc[0]) for r in runs.values()}
                if not runs or statuses != {"complete"}:
                    note = (
                        "–"
                        if not runs
                        else ("diverged" if "diverged" in statuses else "incomplete")
                    )
                    for key in values:
                        notes[key].append(note)
                        values[key].append((np.nan, 0.0))
                    continue
                # a seed with no run, a run stopped early: the bar's mean is over fewer seeds
                note = runs_note(runs, seeds)
                played = [r[r["round"] >= 1] for r in runs.values()]
                acc = [acc_fn(p) * 100 for p in played]
                # a run of one round has no earlier round to forget from: left out, and said
                fgt = [f for f in map(metrics.forgetting_from_rows, played) if np.isfinite(f)]
                undefined = len(played) - len(fgt)
                said = (
                    f"{undefined}/{len(played)} forgetting undefined (1 round)" if undefined else ""
                )
                notes["acc"].append(note)
                notes["fgt"].append("; ".join(t for t in (note, said) if t))
                values["acc"].append((float(np.mean(acc)), _std(acc, ddof)))
                values["fgt"].append(
                    (float(np.mean(fgt)), _std(fgt, ddof)) if fgt else (np.nan, 0.0)
                )
            x = np.arange(len(labels))
            for i, (key, ylabel) in enumerate(
                (("acc", f"Accuracy (%, {stat} round)"), ("fgt", "Forgetting $\\mathcal{F}$"))
            ):
                ax = axes[i, j]
                means = np.array([m for m, _ in values[key]])
                stds = np.array([s for _, s in values[key]])
                ax.bar(x, np.nan_to_num(means), yerr=stds, color=colors, capsize=2)
                for xi, (m, sd, note) in enumerate(zip(means, stds, notes[key], strict=True)):
                    value = "" if np.isnan(m) else (f"{m:.1f}" if key == "acc" else f"{m:.2f}")
                    text = "\n".join(t for t in (value, note) if t)
                    top = 0 if np.isnan(m) else m + sd
                    ax.annotate(text, (xi, top), ha="center", va="bottom", fontsize=6,
                                xytext=(0, 2), textcoords="offset points")  # fmt: skip
                # room above the bars for their values and notes, inside the axes
                lines = 1 + max(t.get_text().count("\n") for t in ax.texts)
                lo, hi = ax.get_ylim()
                ax.set_ylim(lo, hi + (hi - lo) * 0.07 * lines)
                ax.set_xticks(
                    x, [label_text(lab, col_names).shown for lab in labels], rotation=45, ha="right"
                )
                ax.set_ylabel(ylabel, parse_math=key == "fgt")  # its $\mathcal{F}$
                if i == 0:
                    ax.set_title(panel_title(panels, pid, names))
    return fig


def _std(values: list[float], ddof: int) -> float:
    return float(np.std(values, ddof=ddof)) if len(values) > ddof else 0.0


def checked_options(df: pd.DataFrame, opts: Options) -> tuple[list[str], str]:
    """Options ``panels`` (run keys of the aggregate) and ``stat`` (best or final)."""
    panels = opts.str_list("panels", ["partition", "alpha", "shards"])
    check_keys(df, panels, "panels", opts.target)
    return panels, opts.choice("stat", ("best", "final"), "final")


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: its runs have an earlier round to forget from (``points`` hold each point's
    resolved run keys)."""
    short = sorted({int(p["rounds"]) for p in points if int(p["rounds"]) < 2})
    if not short:
        return []
    return [
        f"{where}.grid: layout forgetting compares a run's last round with its earlier ones, "
        f"which runs of {short[0]} round do not have; give its grid rounds of at least 2"
    ]
