"""Figure ``tsne``: the t-SNE embedding of a global and a local model's features. It only draws:
the features come from ``fedkd features`` (fedkd.engine.features), a rule of their own."""

from __future__ import annotations

import json
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


# what `fedkd features` writes: the arrays of an .npz, and the keys of its JSON metadata
FEATURES_ARRAYS = ("meta", "labels", "global_features", "local_features")
FEATURES_META = ("num_classes", "class_names", "strategy", "models")


def _read(path: Path) -> dict:
    """``read_features(path)``, or a ReportError naming the file and what it lacks."""
    import zipfile

    from fedkd.engine.features import read_features

    rewrite = "it is written by `fedkd features --run DIR -o FILE`; write it again"
    try:
        with zipfile.ZipFile(path) as z:
            arrays = {name.removesuffix(".npy") for name in z.namelist()}
    except zipfile.BadZipFile:
        raise ReportError(f"features file {path} is not an .npz archive; {rewrite}") from None
    except OSError as exc:
        raise ReportError(
            f"cannot read features file {path}: {exc.strerror}; give the .npz file that "
            "`fedkd features` wrote"
        ) from None
    missing = [a for a in FEATURES_ARRAYS if a not in arrays]
    if missing:
        raise ReportError(
            f"features file {path} has no {', '.join(missing)} (a features file holds "
            f"{', '.join(FEATURES_ARRAYS)}); {rewrite}"
        )
    try:
        data = read_features(path)
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"features file {path}'s metadata is not JSON ({exc}); {rewrite}"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ValueError) and str(path) in str(exc):  # named by read_features
            raise ReportError(str(exc)) from None
        # numpy's advice for an array of objects (allow_pickle=True) is not the user's to take
        raise ReportError(
            f"features file {path} does not hold what `fedkd features` writes (an array of "
            f"pickled objects, metadata of another shape, or damage); {rewrite}"
        ) from None
    missing = [k for k in FEATURES_META if k not in data]
    if missing:
        raise ReportError(f"features file {path}'s metadata has no {', '.join(missing)}; {rewrite}")
    return data


def build(features: str | Path, opts: Options):
    """Draw the t-SNE embedding of a features file from ``fedkd features``."""
    from threadpoolctl import threadpool_limits

    if features is None:
        raise ReportError(f"target {opts.target!r} needs --features FILE (from `fedkd features`)")
    if not Path(features).exists():
        raise ReportError(
            f"features file {features} does not exist; write it with `fedkd features`"
        )
    perplexity = opts.number("perplexity", 30.0)
    data = _read(Path(features))
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
            ax.set_title(
                f"{display_name(data['strategy'])}, {title.lower()}: test acc "
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
