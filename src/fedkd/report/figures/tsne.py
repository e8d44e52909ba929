"""Figure ``tsne``: the t-SNE embedding of a global and a local model's features. It only draws:
the features come from ``fedkd features`` (fedkd.engine.features), a rule of their own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedkd.report.aggregate import ReportError
from fedkd.report.figures.draw import new_figure, palette, style
from fedkd.report.names import display_name
from fedkd.report.options import Options


def _tsne(feats: np.ndarray, perplexity: float) -> np.ndarray:
    from sklearn.manifold import TSNE

    return TSNE(
        n_components=2, perplexity=min(perplexity, (len(feats) - 1) / 3.0), init="pca",
        learning_rate="auto", random_state=0,
    ).fit_transform(feats.astype(np.float64))  # fmt: skip


def build(features: str | Path, opts: Options):
    """Draw the t-SNE embedding of a features file from ``fedkd features``."""
    from threadpoolctl import threadpool_limits

    from fedkd.engine.features import FeaturesError, read_features

    if features is None:
        raise ReportError(f"target {opts.target!r} needs --features FILE (from `fedkd features`)")
    if not Path(features).exists():
        raise ReportError(
            f"features file {features} does not exist; write it with `fedkd features`"
        )
    perplexity = opts.number("perplexity", 30.0)
    try:
        data = read_features(features)
    except FeaturesError as exc:  # names the file and what it lacks
        raise ReportError(str(exc)) from None
    labels = data["labels"]
    k = data["num_classes"]
    with style():
        fig, axes = new_figure(1, 2, width=3.4, height=3.2)
        for ax, (title, feats, acc) in zip(axes.flat, data["models"], strict=True):
            # one thread: OpenMP workers spin badly on a busy machine (10x slower), and a fixed
            # thread count keeps the embedding reproducible
            with threadpool_limits(1):
                emb = _tsne(feats, perplexity)
            if k <= 20:
                colors = palette(k)
                for c in range(k):
                    m = labels == c
                    name = data["class_names"][c] if c < len(data["class_names"]) else str(c)
                    ax.scatter(emb[m, 0], emb[m, 1], s=3, color=colors[c], label=name, lw=0)
            else:
                ax.scatter(emb[:, 0], emb[:, 1], s=3, c=labels, cmap="viridis", lw=0)
            # a model at chance says nothing about its features: the title says so
            chance = " (chance level)" if acc <= 1.5 / k else ""
            # two lines: on one, the longer names ran into the other panel's title
            ax.set_title(
                f"{display_name(data['strategy'])}, {title.lower()}\ntest acc "
                f"{acc * 100:.2f}%{chance}"
            )
            ax.set_xticks([])
            ax.set_yticks([])
        if k <= 20:
            handles, names = axes[0, 0].get_legend_handles_labels()
            fig.legend(handles, names, loc="outside right center", markerscale=3, frameon=False)
    return fig


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: the figure draws exactly one run."""
    columns, seeds = entry.get("columns") or {}, entry.get("seeds", [None])
    if len(points) != 1 or len(columns) != 1 or len(seeds) != 1:
        return [
            f"{where}: layout tsne draws exactly one run: give one grid point, one column and one "
            f"seed (it has {len(points)} points, {len(columns)} columns, {len(seeds)} seeds)"
        ]
    return []
