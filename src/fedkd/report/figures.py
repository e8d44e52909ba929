"""The papers' figures, drawn with matplotlib's object API on the Agg canvas (no pyplot state) and
saved without timestamps, so rendering the same inputs twice gives byte-identical PDF and PNG."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.common import (
    Options,
    check_keys,
    check_same_setting,
    group_runs,
    key_value,
    order_rows,
    output_path,
    write_atomic,
)
from fedkd.report.tables import label_text, setting_text

PNG_DPI = 150
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
}


# --------------------------------------------------------------------------- canvas and files
def new_figure(nrows: int, ncols: int, width: float = 3.4, height: float = 2.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_figure(fig, prefix, caption: str, label: str) -> list[Path]:
    """PREFIX.pdf and PREFIX.png; the caption and label go into the files' metadata."""
    import matplotlib

    pdf_meta = {
        "CreationDate": None,
        "ModDate": None,
        "Producer": "fedkd",
        "Creator": "fedkd render",
        "Title": caption,
        "Subject": label,
    }
    png_meta = {"Software": None, "Title": caption, "Description": label}
    paths = []
    with matplotlib.rc_context({"svg.hashsalt": "fedkd"}):
        for suffix, kwargs in (
            (".pdf", {"format": "pdf", "metadata": pdf_meta}),
            (".png", {"format": "png", "metadata": png_meta, "dpi": PNG_DPI}),
        ):
            buf = io.BytesIO()
            fig.savefig(buf, **kwargs)
            path = output_path(prefix, suffix)
            write_atomic(path, buf.getvalue())
            paths.append(path)
    return paths


def _style():
    import matplotlib

    return matplotlib.rc_context(STYLE)


def _colors(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _grid(n: int, ncols: int) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def _hide_unused(axes, used: int) -> None:
    for ax in axes.flat[used:]:
        ax.set_visible(False)


def _panel_title(keys: list[str], pid: tuple, names: dict) -> str:
    parts = [
        setting_text(k, v, names).md
        for k, v in zip(keys, pid, strict=True)
        if key_value(v) is not None
    ]
    return ", ".join(parts) or "all runs"


def _labels(df: pd.DataFrame, opts: Options) -> list[str]:
    present = sorted(df["label"].unique())
    labels = opts.str_list("columns", present)
    if not set(labels) & set(present):
        raise ReportError(
            f"none of the labels {labels} (option 'columns' of target {opts.target!r}) is in the "
            f"aggregate; its labels are: {', '.join(present)}"
        )
    return labels


def _curve(runs: dict[str, pd.DataFrame], column: str, ddof: int):
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


def _status_note(runs: dict[str, pd.DataFrame]) -> str:
    statuses = [str(rows["status"].iloc[0]) for rows in runs.values()]
    bad = sum(s != "complete" for s in statuses)
    if not bad:
        return ""
    kind = "diverged" if "diverged" in statuses else "incomplete"
    return f" ({bad}/{len(statuses)} {kind})"


# --------------------------------------------------------------------------- learning curves
def fig_curves(df: pd.DataFrame, opts: Options, column: str = "test_acc"):
    panels = opts.str_list("panels", ["dataset", "alpha"])
    check_keys(df, panels, "panels", opts.target)
    labels = _labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    groups = group_runs(df[df["label"].isin(labels)], panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    nrows, ncols = _grid(len(pids), opts.integer("ncols", 3, 1))
    colors = dict(zip(labels, _colors(len(labels)), strict=True))
    with _style():
        fig, axes = new_figure(nrows, ncols)
        handles = {}
        for ax, pid in zip(axes.flat, pids, strict=False):
            for label in labels:
                runs = groups[pid].get(label)
                if not runs:
                    continue
                check_same_setting(runs, f"{opts.target} panel {pid} label {label!r}", "panels")
                x, mean, std = _curve(runs, column, ddof)
                if len(x) == 0:
                    continue
                name = label_text(label, col_names).md
                (line,) = ax.plot(x, mean * 100, color=colors[label], lw=1.2)
                ax.fill_between(
                    x, (mean - std) * 100, (mean + std) * 100, color=colors[label], alpha=0.2, lw=0
                )
                handles.setdefault(label, (line, name + _status_note(runs)))
            ax.set_title(_panel_title(panels, pid, names))
            ax.set_xlabel("Communication round")
            ax.set_ylabel("Test accuracy (%)")
            _integer_rounds(ax)
        _hide_unused(axes, len(pids))
        _legend(fig, [handles[lab] for lab in labels if lab in handles])
    return fig


def _integer_rounds(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend(fig, items) -> None:
    if items:
        fig.legend(
            [h for h, _ in items], [t for _, t in items], loc="outside lower center",
            ncols=min(len(items), 4), frameon=False,
        )  # fmt: skip


# --------------------------------------------------------------------------- fedcad fig. 1
def fig_fedcad(df: pd.DataFrame, opts: Options):
    panels = opts.str_list("panels", [])
    check_keys(df, panels, "panels", opts.target)
    labels = _labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof = opts.ddof()
    sub = df[df["label"].isin(labels)]
    no_local = sorted(
        sub.groupby("label")["local_acc"].apply(lambda s: s.isna().all()).loc[lambda s: s].index
    )
    if no_local:
        raise ReportError(
            f"fig_fedcad needs runs trained with eval_local=true; label(s) {no_local} have no "
            f"local_acc values"
        )
    groups = group_runs(sub, panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    colors = dict(zip(labels, _colors(len(labels)), strict=True))
    metrics = (("test_acc", "Global accuracy (%)"), ("local_acc", "Local average accuracy (%)"))
    with _style():
        fig, axes = new_figure(len(pids), 2)
        handles = {}
        for i, pid in enumerate(pids):
            for j, (column, title) in enumerate(metrics):
                ax = axes[i, j]
                for label in labels:
                    runs = groups[pid].get(label)
                    if not runs:
                        continue
                    check_same_setting(runs, f"fig_fedcad panel {pid} label {label!r}", "panels")
                    x, mean, std = _curve(runs, column, ddof)
                    (line,) = ax.plot(x, mean * 100, color=colors[label], lw=1.2)
                    ax.fill_between(
                        x,
                        (mean - std) * 100,
                        (mean + std) * 100,
                        color=colors[label],
                        alpha=0.2,
                        lw=0,
                    )
                    handles.setdefault(
                        label, (line, label_text(label, col_names).md + _status_note(runs))
                    )
                # the metric is on the y axis; a title names the panel when there are several
                head = f"({chr(ord('a') + j)}) {title.split(' (')[0]}"
                ax.set_title(_panel_title(panels, pid, names) if panels else head)
                ax.set_xlabel("Communication round")
                ax.set_ylabel(title)
                _integer_rounds(ax)
        _legend(fig, [handles[lab] for lab in labels if lab in handles])
    return fig


# --------------------------------------------------------------------------- fedntd forgetting
def fig_forgetting(df: pd.DataFrame, opts: Options):
    """Per panel (partition setting): accuracy (top) and forgetting (bottom) of each label as
    bars with the seed spread; fedntd Table 1 reports both side by side."""
    from fedkd import metrics

    panels = opts.str_list("panels", ["partition", "alpha", "shards"])
    check_keys(df, panels, "panels", opts.target)
    labels = _labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    stat = opts.choice("stat", ("best", "final"), "final")
    ddof = opts.ddof()
    groups = group_runs(df[df["label"].isin(labels)], panels)
    pids = order_rows(panels, groups, opts.mapping("order"))
    colors = _colors(len(labels))
    acc_fn = metrics.best_accuracy if stat == "best" else metrics.final_accuracy
    with _style():
        fig, axes = new_figure(2, len(pids), width=max(2.6, 0.45 * len(labels) + 1.2))
        for j, pid in enumerate(pids):
            values = {"acc": [], "fgt": []}
            notes = []
            for label in labels:
                runs = groups[pid].get(label) or {}
                if runs:
                    check_same_setting(
                        runs, f"fig_forgetting panel {pid} label {label!r}", "panels"
                    )
                statuses = {str(r["status"].iloc[0]) for r in runs.values()}
                if not runs or statuses != {"complete"}:
                    notes.append(
                        "–"
                        if not runs
                        else ("diverged" if "diverged" in statuses else "incomplete")
                    )
                    values["acc"].append((np.nan, 0.0))
                    values["fgt"].append((np.nan, 0.0))
                    continue
                notes.append("")
                played = [r[r["round"] >= 1] for r in runs.values()]
                acc = [acc_fn(p) * 100 for p in played]
                fgt = [metrics.forgetting_from_rows(p) for p in played]
                values["acc"].append((float(np.mean(acc)), _std(acc, ddof)))
                values["fgt"].append((float(np.mean(fgt)), _std(fgt, ddof)))
            x = np.arange(len(labels))
            for i, (key, ylabel) in enumerate(
                (("acc", f"Accuracy (%, {stat} round)"), ("fgt", "Forgetting $\\mathcal{F}$"))
            ):
                ax = axes[i, j]
                means = np.array([m for m, _ in values[key]])
                stds = np.array([s for _, s in values[key]])
                ax.bar(x, np.nan_to_num(means), yerr=stds, color=colors, capsize=2)
                for xi, (m, sd, note) in enumerate(zip(means, stds, notes, strict=True)):
                    text = note or (f"{m:.1f}" if key == "acc" else f"{m:.2f}")
                    top = 0 if np.isnan(m) else m + sd
                    ax.annotate(text, (xi, top), ha="center", va="bottom", fontsize=6,
                                xytext=(0, 2), textcoords="offset points")  # fmt: skip
                ax.set_xticks(
                    x, [label_text(lab, col_names).md for lab in labels], rotation=45, ha="right"
                )
                ax.set_ylabel(ylabel)
                if i == 0:
                    ax.set_title(_panel_title(panels, pid, names))
    return fig


def _std(values: list[float], ddof: int) -> float:
    return float(np.std(values, ddof=ddof)) if len(values) > ddof else 0.0


# --------------------------------------------------------------------------- partitions
def read_partition_counts(path: str | Path) -> tuple[np.ndarray, dict]:
    """(clients x classes sample counts, meta) of a partition Parquet from `fedkd partition`."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise ReportError(f"partition file {path} does not exist; write it with `fedkd partition`")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise ReportError(f"partition file {path} cannot be read: {exc}") from exc
    raw = (table.schema.metadata or {}).get(b"fedkd")
    if raw is None or not {"client", "label"} <= set(table.column_names):
        raise ReportError(
            f"partition file {path} is not a `fedkd partition` file (columns or metadata missing)"
        )
    meta = json.loads(raw)
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


def fig_partition(files: list[str], opts: Options):
    if not files:
        raise ReportError("target 'fig_partition' needs --partitions FILE [FILE ...]")
    titles = opts.str_list("titles")
    if titles is not None and len(titles) != len(files):
        raise ReportError(
            f"option 'titles' has {len(titles)} entries for {len(files)} partition files"
        )
    data = [read_partition_counts(f) for f in files]
    nrows, ncols = _grid(len(files), opts.integer("ncols", 3, 1))
    with _style():
        fig, axes = new_figure(nrows, ncols, width=3.2, height=3.0)
        for k, (ax, (counts, meta)) in enumerate(zip(axes.flat, data, strict=False)):
            n_clients, n_classes = counts.shape
            cc, yy = np.meshgrid(np.arange(n_clients), np.arange(n_classes), indexing="ij")
            nz = counts > 0
            # bubble area proportional to the count; the largest cell of a panel gets a fixed size
            size = 120.0 * counts[nz] / counts.max() * (10 / max(n_classes, 10))
            ax.scatter(cc[nz], yy[nz], s=size, color="tab:red", alpha=0.7, lw=0)
            ax.set_title(titles[k] if titles else _partition_title(meta))
            ax.set_xlabel("Client")
            ax.set_ylabel("Class")
            ax.set_xlim(-0.8, n_clients - 0.2)
            ax.set_ylim(-0.8, n_classes - 0.2)
            step = max(1, n_classes // 10)
            ax.set_yticks(np.arange(0, n_classes, step))
            ax.set_xticks(np.arange(0, n_clients, max(1, n_clients // 10)))
            ax.grid(alpha=0.2)
        _hide_unused(axes, len(files))
    return fig


# --------------------------------------------------------------------------- t-SNE
def tsne_features(run_dir: str | Path, opts: Options) -> dict:
    """Penultimate features of the final global model and of one client's local model trained
    from it with the run's own local objective (or plain CE: option local_objective "fedavg")."""
    import torch

    from fedkd.config import RunSpec
    from fedkd.engine.checkpoint import load_checkpoint
    from fedkd.engine.client import train_clients
    from fedkd.engine.evaluate import evaluate
    from fedkd.engine.run import Run
    from fedkd.strategies.base import Strategy

    if run_dir is None:
        raise ReportError("target 'fig_tsne' needs --run DIR (a completed run)")
    path = Path(run_dir)
    rec_path, ckpt_path = path / "run.json", path / "checkpoint.pt"
    if not rec_path.exists() or not ckpt_path.exists():
        raise ReportError(
            f"run directory {run_dir} has no run.json and checkpoint.pt; is it a fedkd run?"
        )
    rec = json.loads(rec_path.read_text())
    if rec.get("status") != "complete":
        raise ReportError(f"run {run_dir} is {rec.get('status')!r}; fig_tsne needs a complete run")
    samples = opts.integer("samples", 1000, 10, 5000)
    objective = opts.choice("local_objective", ("strategy", "fedavg"), "strategy")
    device = opts.choice("device", ("cpu", "cuda", "auto"), "cpu")
    spec_dict = dict(rec["spec"])
    spec_dict["device"] = device
    spec = RunSpec.from_dict(spec_dict)
    client = opts.integer("client", 0, 0, spec.clients - 1)

    run = Run(spec, path, log=lambda msg: None)
    run._setup()
    state = load_checkpoint(ckpt_path)
    run.global_model.load_state_dict(state["global"])
    run.strategy.load_state_dict(state["strategy"])
    r = int(state["round_done"])  # the next round (0-based): fresh, reproducible client seeds
    strategy = run.strategy if objective == "strategy" else Strategy(None, run.strategy.ctx)
    payload = strategy.payload(r, run.global_model)
    updates, _ = train_clients(r, [client], run.global_model, payload, strategy, run.env)
    local = run.build_model()
    local.load_state_dict(updates[0].state)

    test = run.dataset.test
    n = len(test)
    pick = np.sort(np.random.RandomState(0).choice(n, min(samples, n), replace=False))
    idx = torch.as_tensor(pick, device=run.device)
    sub = test.subset(idx)

    @torch.no_grad()
    def feats(model):
        model.eval()
        out = [
            model.features(run.preprocess(sub.x[i : i + 500], train=False)).float().cpu()
            for i in range(0, len(sub), 500)
        ]
        return torch.cat(out).numpy()

    ds = run.dataset
    return {
        "labels": sub.y.cpu().numpy(),
        "class_names": list(ds.class_names),
        "num_classes": ds.num_classes,
        "client": client,
        "strategy": spec.strategy,
        "objective": objective,
        "models": [
            ("Global model", feats(run.global_model),
             evaluate(run.global_model, test, run.preprocess, ds.num_classes)["acc"]),
            (f"Local model (client {client})", feats(local),
             evaluate(local, test, run.preprocess, ds.num_classes)["acc"]),
        ],
    }  # fmt: skip


def _tsne(feats: np.ndarray, perplexity: float) -> np.ndarray:
    from sklearn.manifold import TSNE

    return TSNE(
        n_components=2, perplexity=min(perplexity, (len(feats) - 1) / 3.0), init="pca",
        learning_rate="auto", random_state=0,
    ).fit_transform(feats.astype(np.float64))  # fmt: skip


def fig_tsne(run_dir, opts: Options):
    from threadpoolctl import threadpool_limits

    perplexity = opts.number("perplexity", 30.0)
    data = tsne_features(run_dir, opts)
    labels = data["labels"]
    k = data["num_classes"]
    with _style():
        fig, axes = new_figure(1, 2, width=3.4, height=3.2)
        for ax, (title, feats, acc) in zip(axes.flat, data["models"], strict=True):
            # one thread: OpenMP workers spin badly on a busy machine (10x slower), and a fixed
            # thread count keeps the embedding reproducible
            with threadpool_limits(1):
                emb = _tsne(feats, perplexity)
            if k <= 20:
                colors = _colors(k)
                for c in range(k):
                    m = labels == c
                    name = data["class_names"][c] if c < len(data["class_names"]) else str(c)
                    ax.scatter(emb[m, 0], emb[m, 1], s=3, color=colors[c], label=name, lw=0)
            else:
                ax.scatter(emb[:, 0], emb[:, 1], s=3, c=labels, cmap="viridis", lw=0)
            ax.set_title(f"{data['strategy']}, {title.lower()}: test acc {acc * 100:.2f}%")
            ax.set_xticks([])
            ax.set_yticks([])
        if k <= 20:
            handles, names = axes[0, 0].get_legend_handles_labels()
            fig.legend(handles, names, loc="outside right center", markerscale=3, frameon=False)
    return fig, data
