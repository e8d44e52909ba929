"""What the figures share: the Agg canvas, the style, colours, panel layout and titles, and the
mean ± std curve over seeds."""

from __future__ import annotations

import math

import pandas as pd

from fedkd.report.text import key_value, label_text, setting_text

STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "svg.hashsalt": "fedkd",
    # every text is drawn as written: a label with two `$` ("50$ and 60$", "$x^$") is not
    # mathtext, which would render it otherwise or fail the figure; a text meant as mathtext
    # asks for it (parse_math=True)
    "text.parse_math": False,
}


def new_figure(nrows: int, ncols: int, width: float = 3.4, height: float = 2.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def style():
    import matplotlib

    return matplotlib.rc_context(STYLE)


def palette(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# every line also differs in marker and dash, so lines that coincide (two methods with the same
# accuracy in a round) stay visible and the figure reads in grey
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")


def line_styles(labels: list[str]) -> dict[str, dict]:
    """Per label: colour, marker and line style for ``ax.plot`` (the legend shows all three)."""
    colors = palette(len(labels))
    return {
        label: {
            "color": colors[i],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": DASHES[i % len(DASHES)],
            "markersize": 4,
            "markerfacecolor": "none" if i % 2 else colors[i],
            "lw": 1.2,
        }
        for i, label in enumerate(labels)
    }


def panel_grid(n: int, ncols: int) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def hide_unused(axes, used: int) -> None:
    for ax in axes.flat[used:]:
        ax.set_visible(False)


def panel_title(keys: list[str], pid: tuple, names: dict) -> str:
    parts = [
        setting_text(k, v, names).shown
        for k, v in zip(keys, pid, strict=True)
        if key_value(v) is not None
    ]
    return ", ".join(parts) or "all runs"


def curve(runs: dict[str, pd.DataFrame], column: str, ddof: int):
    """Rounds, mean and std over seeds of one per-round column (runs that stopped early simply
    contribute fewer rounds)."""
    series = []
    for rows in runs.values():
        played = rows[rows["round"] >= 1]
        series.append(pd.Series(played[column].to_numpy(float), index=played["round"].to_numpy()))
    mat = pd.concat(series, axis=1)
    mat = mat.loc[mat.notna().any(axis=1)]
    count = mat.notna().sum(axis=1)
    std = mat.std(axis=1, ddof=ddof).where(count > ddof, 0.0)
    return mat.index.to_numpy(), mat.mean(axis=1).to_numpy(), std.fillna(0.0).to_numpy()


def figure_seeds(df: pd.DataFrame) -> set[int]:
    """Every seed the figure's runs have: a label's runs in a panel are compared with it."""
    return {int(s) for s in df["seed"].dropna().unique()} if "seed" in df.columns else set()


def runs_note(runs: dict[str, pd.DataFrame], seeds: set[int]) -> str:
    """What one label's runs in one panel lack, so that its mean is over fewer seeds than the
    figure's ``seeds`` in some rounds or all: runs that diverged or never finished, seeds with no
    run, runs that stopped before the others' last round (``stop_at_acc``); and runs that
    collapsed to chance (``fedkd.collapse``, a table's †), which pull the mean down as much.
    '' when none."""
    statuses = [str(rows["status"].iloc[0]) for rows in runs.values()]
    n, parts = len(statuses), []
    diverged = statuses.count("diverged")
    unfinished = n - diverged - statuses.count("complete")
    parts += [
        f"{k}/{n} {what}" for k, what in ((diverged, "diverged"), (unfinished, "incomplete")) if k
    ]
    collapsed = sum(
        s == "complete" and "collapsed" in rows.columns and bool(rows["collapsed"].iloc[0])
        for s, rows in zip(statuses, runs.values(), strict=True)
    )
    if collapsed:
        parts.append(f"{collapsed}/{n} collapsed")
    have = {int(rows["seed"].iloc[0]) for rows in runs.values() if "seed" in rows.columns}
    missing = sorted(seeds - have) if have else []
    if missing:
        parts.append(f"no run of seed {', '.join(str(s) for s in missing)}")
    last = [int(rows["round"].max()) for rows in runs.values()]
    short = sum(s == "complete" and r < max(last) for s, r in zip(statuses, last, strict=True))
    if short:
        parts.append(f"{short}/{n} stopped before round {max(last)}")
    return "; ".join(parts)


def legend_note(notes: dict[str, str], panels: int) -> str:
    """A label's legend note from its per-panel notes ({panel title: note}), each panel named
    when the figure has several: a run that diverged in any panel shows, not only the first."""
    shown = [(title, note) for title, note in notes.items() if note]
    if not shown:
        return ""
    if panels == 1:
        return f" ({shown[0][1]})"
    return " (" + "; ".join(f"{title}: {note}" for title, note in shown) + ")"


def integer_rounds(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def legend(fig, items) -> None:
    if items:
        fig.legend(
            [h for h, _ in items], [t for _, t in items], loc="outside lower center",
            ncols=min(len(items), 4), frameon=False,
        )  # fmt: skip


def mean_band(ax, x, mean, std, style: dict):
    """A label's curve in percent: its mean as a line, ± its spread as a band of the line's
    colour; returns the line (the legend's handle)."""
    (line,) = ax.plot(x, mean * 100, **style)
    ax.fill_between(
        x, (mean - std) * 100, (mean + std) * 100, color=style["color"], alpha=0.2, lw=0
    )
    return line


def noted_legend(fig, labels, handles: dict, notes: dict, col_names: dict, panels: int) -> None:
    """The figure's legend: each drawn label's name with its runs' note (``legend_note``)."""
    legend(
        fig,
        [
            (handles[lab], label_text(lab, col_names).shown + legend_note(notes[lab], panels))
            for lab in labels
            if lab in handles
        ],
    )
