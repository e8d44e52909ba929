"""Figure ``partition``: samples per class on each client, one panel per partition file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedkd.data.partition import checked_meta
from fedkd.files import MAX_PARTITION_BYTES, read_parquet_file
from fedkd.report.aggregate import ReportError
from fedkd.report.figures.draw import (
    hide_unused,
    new_figure,
    panel_grid,
    style,
)
from fedkd.report.options import Options
from fedkd.values import load_json


def read_partition_counts(path: str | Path) -> tuple[np.ndarray, dict]:
    """(clients x classes sample counts, meta) of a partition Parquet from `fedkd partition`."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"partition file {path} does not exist; write it with `fedkd partition`")
    try:
        table = read_parquet_file(path, "a partition file", MAX_PARTITION_BYTES)
    except Exception as exc:
        raise ReportError(f"partition file {path} cannot be read: {exc}") from exc
    raw = (table.schema.metadata or {}).get(b"fedkd")
    if raw is None or not {"client", "label"} <= set(table.column_names):
        raise ReportError(
            f"partition file {path} is not a `fedkd partition` file (columns or metadata missing)"
        )
    try:
        meta = checked_meta(load_json(raw, f"partition file {path}'s metadata"), path)
    except ValueError as exc:
        raise ReportError(str(exc)) from exc
    client = table.column("client").to_numpy()
    label = table.column("label").to_numpy()
    keep = client >= 0  # -1: the remainder no client trains on
    n_clients = int(meta.get("clients") or (client.max() + 1))
    n_classes = int(meta.get("num_classes") or (label.max() + 1))
    counts = np.zeros((n_clients, n_classes), dtype=np.int64)
    np.add.at(counts, (client[keep], label[keep]), 1)
    return counts, meta


def _partition_title(meta: dict) -> str:
    scheme = meta.get("scheme")
    ds = meta.get("dataset", "")
    if scheme in ("dirichlet", "dirichlet-equal"):
        return f"{ds}, α = {float(meta.get('alpha')):g}"
    if scheme == "shards":
        return f"{ds}, {meta.get('shards')} shards per client"
    return f"{ds}, {scheme}"


def build(files: list[str], opts: Options):
    titles = checked_options(files, opts)
    data = [read_partition_counts(f) for f in files]
    nrows, ncols = panel_grid(len(files), opts.integer("ncols", 3, 1))
    # one scale for all panels, so the size legend holds for each of them
    largest = max(int(counts.max()) for counts, _ in data) or 1
    n_classes_max = max(counts.shape[1] for counts, _ in data)
    area = 120.0 * (10 / max(n_classes_max, 10)) / largest  # points² per sample
    with style():
        fig, axes = new_figure(nrows, ncols, width=3.2, height=3.0)
        for k, (ax, (counts, meta)) in enumerate(zip(axes.flat, data, strict=False)):
            n_clients, n_classes = counts.shape
            cc, yy = np.meshgrid(np.arange(n_clients), np.arange(n_classes), indexing="ij")
            nz = counts > 0
            # bubble area proportional to the count, on the same scale in every panel
            ax.scatter(cc[nz], yy[nz], s=area * counts[nz], color="tab:red", alpha=0.7, lw=0)
            ax.set_title(titles[k] if titles else _partition_title(meta))
            ax.set_xlabel("Client")
            ax.set_ylabel("Class")
            ax.set_xlim(-0.8, n_clients - 0.2)
            ax.set_ylim(-0.8, n_classes - 0.2)
            step = max(1, n_classes // 10)
            ax.set_yticks(np.arange(0, n_classes, step))
            ax.set_xticks(np.arange(0, n_clients, max(1, n_clients // 10)))
            ax.grid(alpha=0.2)
        hide_unused(axes, len(files))
        _size_legend(fig, largest, area)
    return fig


def _size_legend(fig, largest: int, area: float) -> None:
    """What a bubble's size means: reference bubbles for a few sample counts."""
    counts = sorted({c for c in (largest, _round_count(largest / 2), _round_count(largest / 8))
                     if c > 0}, reverse=True)  # fmt: skip
    handles = [
        fig.axes[0].scatter([], [], s=area * c, color="tab:red", alpha=0.7, lw=0) for c in counts
    ]
    fig.legend(
        handles, [f"{c:,} samples" for c in counts], loc="outside lower center",
        ncols=len(counts), frameon=False, title="Samples of a class on a client (bubble area)",
    )  # fmt: skip


def _round_count(x: float) -> int:
    """A count rounded to one or two significant digits (1, 2, 5 × 10^k), for legend bubbles."""
    if x < 1:
        return 0
    magnitude = 10 ** int(np.floor(np.log10(x)))
    return int(min((1, 2, 5, 10), key=lambda m: abs(m * magnitude - x)) * magnitude)


def checked_options(files: list[str], opts: Options) -> list[str] | None:
    """Option ``titles``: one per partition file."""
    if not files:
        raise ReportError(f"target {opts.target!r} needs --partitions FILE [FILE ...]")
    titles = opts.str_list("titles")
    if titles is not None and len(titles) != len(files):
        raise ReportError(
            f"option 'titles' has {len(titles)} entries for {len(files)} partition files"
        )
    return titles
