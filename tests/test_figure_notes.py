"""A figure says when a line or bar averages fewer seeds than the figure's other runs: a run that
diverged in any panel (not only the first), a seed with no run, a run stopped early."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedkd.report.aggregate import read_aggregate
from fedkd.report.options import Options
from fedkd.report.targets import get_layout
from report_runs import agg_file, make_run

ALLOWED = ("panels", "columns", "row_names", "column_names", "order", "ddof", "ncols", "stat")


def _build(layout: str, aggregate, options: dict):
    return get_layout(layout).build()(read_aggregate(aggregate), Options(layout, options, ALLOWED))


def _legend(fig) -> dict[str, str]:
    texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    return {t.split(" (")[0]: t for t in texts}


def _two_panels(tmp_path, bad_alpha: float, status: str = "diverged", drop_seed: bool = False):
    """FedAvg and FedGKD at alpha 1 and 0.1, seeds 0-2; FedGKD's seed 2 at ``bad_alpha`` is
    ``status`` after 2 of 4 rounds, or has no run (``drop_seed``)."""
    r, runs = tmp_path / "runs", []
    cls = [[0.5] * 10, [0.6] * 10, [0.4] * 10, [0.7] * 10]
    for alpha in (1.0, 0.1):
        for seed in (0, 1, 2):
            accs = [0.2, 0.4, 0.5, 0.6]
            runs.append(("fedavg", make_run(r, f"a{alpha}-{seed}", accs, alpha=alpha, seed=seed,
                                            class_acc=cls, local_acc=accs)))  # fmt: skip
            bad = alpha == bad_alpha and seed == 2
            if bad and drop_seed:
                continue
            accs = [0.3, 0.5] if bad and status != "complete" else [0.3, 0.5, 0.6, 0.7]
            runs.append(("fedgkd", make_run(
                r, f"g{alpha}-{seed}", accs, alpha=alpha, seed=seed, rounds=4,
                status=status if bad else "complete", class_acc=cls[: len(accs)], local_acc=accs,
            )))  # fmt: skip
    return agg_file(tmp_path, runs)


@pytest.mark.parametrize("bad_alpha", [1.0, 0.1])
@pytest.mark.parametrize("layout", ["curves", "fedcad"])
def test_a_run_that_diverged_in_any_panel_is_named_in_the_legend(tmp_path, layout, bad_alpha):
    agg = _two_panels(tmp_path, bad_alpha)
    fig = _build(layout, agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
    legend = _legend(fig)
    assert legend["FedAvg"] == "FedAvg"
    assert "1/3 diverged" in legend["FedGKD"], legend
    assert f"α={bad_alpha:g}" in legend["FedGKD"], legend  # the panel it happened in


@pytest.mark.parametrize("layout", ["curves", "fedcad"])
def test_a_seed_with_no_run_is_named_in_the_legend(tmp_path, layout):
    agg = _two_panels(tmp_path, 0.1, drop_seed=True)
    fig = _build(layout, agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
    legend = _legend(fig)
    assert legend["FedAvg"] == "FedAvg"
    assert "no run of seed 2" in legend["FedGKD"] and "α=0.1" in legend["FedGKD"], legend


def test_runs_stopped_early_are_named_in_the_legend(tmp_path):
    r = tmp_path / "runs"
    runs = [
        ("fedavg", make_run(r, "a0", [0.5, 0.9], seed=0, rounds=4)),  # stopped at a target
        ("fedavg", make_run(r, "a1", [0.3, 0.5, 0.6, 0.7], seed=1)),
    ]
    fig = _build("curves", agg_file(tmp_path, runs), {"columns": ["fedavg"], "panels": ["alpha"]})
    assert _legend(fig)["FedAvg"] == "FedAvg (1/2 stopped before round 4)"
    # rounds 3 and 4 are seed 1's alone: the line there is that run, with no band
    (line,) = fig.axes[0].get_lines()
    assert np.allclose(line.get_ydata(), [40, 70, 60, 70])


@pytest.mark.parametrize("layout", ["curves", "fedcad", "forgetting"])
def test_a_collapsed_run_is_named_like_in_the_tables(tmp_path, layout):
    """A complete run at chance (fedkd.collapse) pulls a mean down as much as a missing seed: a
    table marks its cell †, a figure names it beside the label."""
    r, runs = tmp_path / "runs", []
    cls = [[0.5] * 10] * 3
    for seed in (0, 1, 2):
        accs = [0.1, 0.1, 0.12] if seed == 1 else [0.3, 0.5, 0.6]
        runs.append(("fedgkd", make_run(r, f"g{seed}", accs, seed=seed, class_acc=cls,
                                        local_acc=accs)))  # fmt: skip
        runs.append(("fedavg", make_run(r, f"a{seed}", [0.2, 0.4, 0.5], seed=seed,
                                        class_acc=cls, local_acc=[0.2, 0.4, 0.5])))  # fmt: skip
    fig = _build(
        layout, agg_file(tmp_path, runs), {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]}
    )
    if layout == "forgetting":
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert sum("1/3 collapsed" in t for t in texts) == 2, texts
        assert sum("collapsed" in t for t in texts) == 2, texts
    else:
        assert _legend(fig) == {"FedAvg": "FedAvg", "FedGKD": "FedGKD (1/3 collapsed)"}


def test_a_forgetting_bar_over_fewer_seeds_says_so(tmp_path):
    agg = _two_panels(tmp_path, 0.1, drop_seed=True)
    fig = _build("forgetting", agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert sum("no run of seed 2" in t for t in texts) == 2, texts  # accuracy and forgetting
    assert sum("seed" in t for t in texts) == 2


def test_a_figure_of_full_runs_has_no_notes(tmp_path):
    agg = _two_panels(tmp_path, 0.1, status="complete")
    for layout in ("curves", "fedcad"):
        fig = _build(layout, agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
        assert _legend(fig) == {"FedAvg": "FedAvg", "FedGKD": "FedGKD"}
    fig = _build("forgetting", agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
    assert all("\n" not in t.get_text() for ax in fig.axes for t in ax.texts)


def test_the_reports_text_says_what_each_figure_kind_draws():
    from fedkd.report.sections import figure_how, figure_metadata
    from fedkd.report.targets import LAYOUTS, layout_names

    for name in layout_names("figure"):
        how = figure_how(name)
        assert how, f"figure kind {name!r} has no text for the report"
        seeds = LAYOUTS[name].input == "aggregate"
        # a figure of one run or one partition file has no seeds to average, no band, no spread
        assert ("mean over the seeds" in how) == seeds, (name, how)
        assert ("run setting" in figure_metadata(LAYOUTS[name].input)) == seeds
    assert "Lines" in figure_how("curves") and "Bars" in figure_how("forgetting")
    assert "sample standard deviation" in figure_how("curves", ddof=1)
    assert "population standard deviation" in figure_how("fedcad", ddof=0)


@pytest.mark.parametrize("strategy", ["fedavg", "fedprox", "feddistill+", "fedgkd-vote"])
def test_the_tsne_titles_stay_apart_and_inside_the_figure(tmp_path, strategy):
    import json

    from fedkd.engine.features import _npz_bytes

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 6)
    meta = {"num_classes": 10, "class_names": [str(c) for c in range(10)], "strategy": strategy,
            "client": 0, "objective": "strategy",
            "models": [{"title": "Global model", "acc": 0.1},  # at chance: the longest title
                       {"title": "Local model (client 0)", "acc": 0.1}]}  # fmt: skip
    arrays = {"labels": labels, "global_features": rng.normal(size=(60, 8)),
              "local_features": rng.normal(size=(60, 8))}  # fmt: skip
    path = tmp_path / "f.npz"
    path.write_bytes(_npz_bytes(arrays, json.dumps(meta)))
    fig = get_layout("tsne").build()(path, Options("tsne", {}, ("perplexity",)))
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    left, right = (ax.title.get_window_extent(renderer) for ax in fig.axes[:2])
    assert "(chance level)" in fig.axes[0].get_title()
    assert left.x1 < right.x0, (left, right)
    assert left.x0 >= 0 and right.x1 <= fig.bbox.width


def test_a_figure_caption_names_the_variant_behind_each_line(tmp_path):
    from PIL import Image

    from fedkd.report import render

    r, runs = tmp_path / "runs", []
    for alpha, variant in ((1.0, "fedgkd-M5"), (0.1, "fedgkd-M1")):
        for seed in (0, 1):
            accs = [0.3, 0.5]
            runs.append(("fedavg", make_run(r, f"a{alpha}-{seed}", accs, alpha=alpha, seed=seed)))
            runs.append(("fedgkd", make_run(r, f"g{alpha}-{seed}", accs, alpha=alpha, seed=seed,
                                            strategy="fedgkd", variant=variant)))  # fmt: skip
    opts = {"caption": "Curves.", "columns": ["fedavg", "fedgkd"], "panels": ["alpha"]}
    png = render("curves", tmp_path / "c", aggregate=agg_file(tmp_path, runs), options=opts)[1]
    title = Image.open(png).info["Title"]
    assert title.startswith("Curves. Runs: ")
    assert "Variants run: FedGKD: FedGKD (M=1) at α=0.1 and FedGKD (M=5) at α=1." in title
    assert "FedAvg:" not in title  # a plain run needs no note


def test_a_figure_of_one_run_or_partition_names_the_seed_it_was_drawn_from():
    import yaml

    from fedkd.pipeline import Plan

    cfg = yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())
    cfg["seeds"] = [3, 4]  # the captions' own text still says seed 0
    plan = Plan(cfg)
    for name in ("partition", "tsne_fedavg"):
        assert plan.caption(name).endswith("datasets mnist5k (for CIFAR-10); seed 3."), name
        assert "seed3" in plan.render_args(name) or "seed3" in plan.features_args(name), name
    assert "seed" not in plan.caption("curves").split("Produced by")[1]  # its data says it


@pytest.mark.parametrize("drop_seed", [False, True])
def test_the_forgetting_bars_values_stay_inside_their_axes(tmp_path, drop_seed):
    agg = _two_panels(tmp_path, 0.1, status="complete", drop_seed=drop_seed)
    fig = _build("forgetting", agg, {"columns": ["fedavg", "fedgkd"], "panels": ["alpha"]})
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for text in ax.texts:
            assert text.get_window_extent(renderer).y1 <= box.y1, text.get_text()


def test_a_variant_note_lists_numbers_in_numeric_order():
    import pandas as pd

    from fedkd.report.tables.common import variant_note

    runs = pd.DataFrame({
        "run": ["a", "b", "c"], "label": ["fedgkd"] * 3,
        "variant": ["fedgkd-M1", "fedgkd-M1", "fedgkd-M5"], "local_epochs": [5, 10, 2],
    })  # fmt: skip
    note = variant_note(runs, ["local_epochs"], ["fedgkd"], {})
    assert note == "Variants run: FedGKD: FedGKD (M=1) at E=10, 5 and FedGKD (M=5) at E=2.", note


@pytest.mark.parametrize("layout", ["curves", "fedcad"])
def test_a_label_whose_runs_all_diverged_before_a_round_is_named_not_dropped(tmp_path, layout):
    """A run that diverged before finishing a round has only its round-0 row: a label with no
    other run in a panel has no line there, and the legend says why instead of leaving it out
    (fedcad: its runs did record local accuracy, eval_local is true; they had no round to)."""
    r, runs = tmp_path / "runs", []
    for alpha in (1.0, 0.1):
        for seed in (0, 1):
            accs = [0.2, 0.4, 0.5]
            runs.append(("fedavg", make_run(r, f"a{alpha}-{seed}", accs, alpha=alpha, seed=seed,
                                            local_acc=accs)))  # fmt: skip
            runs.append(("fedcad", make_run(r, f"c{alpha}-{seed}", [], alpha=alpha, seed=seed,
                                            rounds=3, status="diverged", local_acc=[])))  # fmt: skip
    fig = _build(layout, agg_file(tmp_path, runs), {"columns": ["fedavg", "fedcad"],
                                                     "panels": ["alpha"]})  # fmt: skip
    legend = _legend(fig)
    assert legend["FedAvg"] == "FedAvg"
    assert legend["FedCAD"] == "FedCAD (α=1: 2/2 diverged; α=0.1: 2/2 diverged)", legend


def test_a_forgetting_bar_without_a_value_says_why(tmp_path):
    """A run of one round has no earlier round to forget from: its forgetting is undefined, and
    its bar says so rather than standing empty at 0 like a run that forgot nothing; the mean is
    over the runs that have one."""
    r, runs = tmp_path / "runs", []
    for seed in (0, 1):
        runs.append(("fedavg", make_run(r, f"a{seed}", [0.5], seed=seed)))
        accs = [0.5] if seed == 0 else [0.5, 0.6]  # seed 0 stopped at its target in round 1
        runs.append(("fedntd", make_run(r, f"n{seed}", accs, seed=seed, rounds=2)))
    fig = _build("forgetting", agg_file(tmp_path, runs), {"columns": ["fedavg", "fedntd"]})
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert texts[0] == "2/2 forgetting undefined (1 round)", texts
    assert texts[1] == "-0.10\n1/2 stopped before round 2; 1/2 forgetting undefined (1 round)"
    assert [p.get_height() for p in fig.axes[1].patches] == pytest.approx([0.0, -0.1], rel=1e-9)


def test_a_legend_counts_diverged_and_unfinished_runs_apart(tmp_path):
    r, runs = tmp_path / "runs", []
    for seed, status in enumerate(("complete", "diverged", "running")):
        accs = [0.3, 0.5, 0.6] if status == "complete" else [0.3]
        runs.append(("fedavg", make_run(r, f"a{seed}", accs, seed=seed, rounds=3, status=status)))
    fig = _build("curves", agg_file(tmp_path, runs), {"columns": ["fedavg"]})
    assert _legend(fig)["FedAvg"] == "FedAvg (1/3 diverged; 1/3 incomplete)"
