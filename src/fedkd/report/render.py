"""``fedkd render LAYOUT --out PREFIX``: one table or figure from an aggregate (or partition files,
or a run's features file). Tables write PREFIX.tex/.md/.csv, figures PREFIX.pdf/.png. The layouts
and what each needs are in fedkd.report.targets."""

from __future__ import annotations

from pathlib import Path

from fedkd.report.aggregate import ReportError, read_aggregate
from fedkd.report.options import Options, load_options
from fedkd.report.targets import ALIASES, LAYOUTS, get_layout

TARGETS = tuple(LAYOUTS) + tuple(ALIASES)  # every name `fedkd render` accepts


def render(
    target: str,
    out: str | Path,
    aggregate: str | Path | None = None,
    partitions: list[str] | None = None,
    run: str | Path | None = None,
    options: dict | str | None = None,
    features: str | Path | None = None,
    name: str | None = None,
) -> list[Path]:
    """Render layout ``target`` (or its earlier name); returns the files written.

    ``name`` names the output in messages, the LaTeX comment and the default label (default: the
    target as given). ``run``: a completed run directory, for the t-SNE figure without a features
    file; its features are computed first (this trains a local model)."""
    try:
        layout = get_layout(target)
    except KeyError:
        raise ReportError(f"unknown target {target!r}; targets are: {', '.join(TARGETS)}") from None
    name = name or target
    values = load_options(options) if isinstance(options, str) or options is None else options
    allowed = layout.options + (layout.run_options if features is None else ())
    opts = Options(name, values, allowed)
    opts.values.setdefault("caption", layout.default_caption(opts.values))
    opts.values.setdefault("label", f"{layout.label_prefix}:{name}")

    if layout.input == "none":
        source = None
    elif layout.input == "partitions":
        source = list(partitions or [])
    elif layout.input == "run":
        source = features if features is not None else _features_of(run, out, opts, layout)
    else:
        source = read_aggregate(aggregate)
    doc = layout.build()(source, opts)
    if layout.output == "table":
        from fedkd.report.writers import write_table

        return write_table(doc, out, name)
    from fedkd.report.writers import save_figure

    return save_figure(doc, out, opts.text("caption", ""), opts.text("label", ""))


def _features_of(run, out, opts: Options, layout) -> Path:
    """A run's features, computed next to the output (PREFIX.features.npz)."""
    from fedkd.engine.features import FeaturesError, tsne_features

    if run is None:
        raise ReportError(
            f"target {opts.target!r} needs --features FILE (from `fedkd features`) or --run DIR"
        )
    kwargs = {k: opts.values[k] for k in layout.run_options if k in opts.values}
    if "device" not in kwargs:
        kwargs["device"] = "cpu"
    out = Path(out)
    try:
        return tsne_features(run, out.with_name(out.name + ".features.npz"), **kwargs)
    except FeaturesError as exc:
        raise ReportError(str(exc)) from exc
