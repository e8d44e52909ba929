"""Reports: `fedkd render`'s figures, its errors, a real run's report, and what a reader
sees: names, settings, captions, the screen's width."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedkd.cli import main
from fedkd.report import (
    ReportError,
    render,
)
from fedkd.report.names import display_name
from report_runs import COLUMNS, TABLE_FILES, agg_file, grid_runs, make_run, read


@pytest.fixture
def grid(tmp_path):
    """Three labels on two settings, two seeds each; 'moon' diverged in one cell."""
    return grid_runs(tmp_path)


# --------------------------------------------------------------------------- figures
def _partition_file(tmp_path: Path, alpha: float) -> Path:
    from fedkd.data.partition import partition_labels, write_partition

    labels = np.repeat(np.arange(10), 50)
    assignment = partition_labels(labels, "dirichlet-equal", 10, 0, alpha=alpha, num_classes=10)
    meta = {"dataset": "cifar10", "scheme": "dirichlet-equal", "alpha": alpha, "shards": None,
            "clients": 10, "seed": 0, "num_classes": 10}  # fmt: skip
    path = tmp_path / f"part-{alpha}.parquet"
    write_partition(path, assignment, labels, meta)
    return path


def test_renders_are_byte_identical(tmp_path, grid):
    r = tmp_path / "curves"
    cls = [[0.9, 0.1] * 5, [0.2, 0.8] * 5, [0.5, 0.5] * 5]
    runs = [
        ("fedavg", make_run(r, "a0", [0.2, 0.5, 0.4], seed=0, class_acc=cls, local_acc=[0.1, 0.2, 0.2])),
        ("fedavg", make_run(r, "a1", [0.3, 0.4, 0.5], seed=1, class_acc=cls, local_acc=[0.1, 0.3, 0.2])),
        ("fedcad", make_run(r, "c0", [0.3, 0.6, 0.7], seed=0, class_acc=cls, local_acc=[0.2, 0.4, 0.5])),
        ("fedcad", make_run(r, "s0", [0.3, 0.6, 0.7], seed=0, class_acc=cls, local_acc=[0.2, 0.4, 0.5],
                            partition="shards", shards=2)),
    ]  # fmt: skip
    curves = agg_file(tmp_path, runs, "curves.parquet")
    parts = [str(_partition_file(tmp_path, a)) for a in (0.1, 1.0)]
    jobs = [
        ("table3", dict(aggregate=grid, options={"columns": COLUMNS}), TABLE_FILES),
        ("table5", dict(aggregate=grid, options={"rows": ["alpha"]}), TABLE_FILES),
        ("fig_curves", dict(aggregate=curves, options={"panels": ["partition"]}), (".pdf", ".png")),
        ("fig_forgetting", dict(aggregate=curves), (".pdf", ".png")),
        ("fig_fedcad", dict(aggregate=curves, options={"panels": ["partition"]}), (".pdf", ".png")),
        (
            "fig_partition",
            dict(partitions=parts, options={"caption": "α ∈ {0.1, 1}"}),
            (".pdf", ".png"),
        ),
    ]
    for target, kwargs, suffixes in jobs:
        first = render(target, tmp_path / "one" / target, **kwargs)
        second = render(target, tmp_path / "two" / target, **kwargs)
        assert [p.suffix for p in first] == list(suffixes)
        for a, b in zip(first, second, strict=True):
            assert a.read_bytes() == b.read_bytes(), f"{target}: {a.name} differs between renders"
            assert a.stat().st_size > 200
    pdf = (tmp_path / "one" / "fig_curves.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf
    assert (tmp_path / "one" / "fig_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fig_fedcad_needs_local_accuracy(tmp_path, grid):
    with pytest.raises(ReportError, match="eval_local"):
        render("fig_fedcad", tmp_path / "f", aggregate=grid)


# --------------------------------------------------------------------------- errors
def test_errors_name_the_bad_value(tmp_path, grid, capsys):
    missing = tmp_path / "no-such.parquet"
    with pytest.raises(ReportError, match="no-such.parquet"):
        render("table3", tmp_path / "t", aggregate=missing)
    with pytest.raises(ReportError, match="table42"):
        render("table42", tmp_path / "t", aggregate=grid)
    with pytest.raises(ReportError, match="colums"):
        render("table3", tmp_path / "t", aggregate=grid, options={"colums": ["fedavg"]})
    with pytest.raises(ReportError, match="'maximum'"):
        render("table3", tmp_path / "t", aggregate=grid, options={"stat": "maximum"})
    with pytest.raises(ReportError, match="seed_count"):
        render("table3", tmp_path / "t", aggregate=grid, options={"rows": ["seed_count"]})
    with pytest.raises(ReportError, match="fedgkd-x"):
        render("table3", tmp_path / "t", aggregate=grid, options={"columns": ["fedgkd-x"]})
    with pytest.raises(ReportError, match="not valid JSON"):
        render("table3", tmp_path / "t", aggregate=grid, options="{columns: [fedavg]}")
    with pytest.raises(ReportError, match="opts.json"):
        render("table3", tmp_path / "t", aggregate=grid, options=f"@{tmp_path / 'opts.json'}")
    # the command line reports them as errors with exit status 2
    assert (
        main(["render", "table3", "--out", str(tmp_path / "t"), "--aggregate", str(missing)]) == 2
    )
    assert str(missing) in capsys.readouterr().err
    assert main(["render", "bogus", "--out", str(tmp_path / "t")]) == 2
    assert "'bogus'" in capsys.readouterr().err
    opts = json.dumps({"stat": "mean"})
    assert (
        main(
            [
                "render",
                "table4",
                "--out",
                str(tmp_path / "t"),
                "--aggregate",
                str(grid),
                "--options",
                opts,
            ]
        )
        == 2
    )
    assert "'mean'" in capsys.readouterr().err


def test_options_from_file(tmp_path, grid):
    path = tmp_path / "o.json"
    path.write_text(
        json.dumps(
            {
                "columns": ["fedprox", "fedavg"],
                "column_names": {"fedprox": "FedProx"},
                "val_selected": False,
            }  # fmt: skip
        )
    )
    out = tmp_path / "t"
    assert (
        main(
            [
                "render",
                "table3",
                "--out",
                str(out),
                "--aggregate",
                str(grid),
                "--options",
                f"@{path}",
            ]
        )
        == 0
    )
    assert "| Dataset | α | FedProx | FedAvg |" in read(out, ".md")


def test_help_lists_targets(capsys):
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    text = capsys.readouterr().out
    for target in (
        "table1",
        "table9",
        "rounds_to_target",
        "fig_tsne",
        "fig_fedcad",
        "--aggregate",
        "--options",
    ):
        assert target in text
    with pytest.raises(SystemExit):
        main(["aggregate", "--help"])
    assert "--runs-file" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command", ["train", "partition", "aggregate", "render", "features", "status", "bench"]
)
def test_help_lines_fit_a_terminal(command, capsys, monkeypatch):
    """Text written by hand (the layouts' options, the render and aggregate descriptions) ran
    past 130 characters; argparse wraps only its own, to the terminal's width."""
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    long = [line for line in capsys.readouterr().out.splitlines() if len(line) > 100]
    assert not long, long


# --------------------------------------------------------------------------- a real run
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run

    out = tmp_path_factory.mktemp("real") / "run"
    spec = RunSpec(
        dataset="mnist5k", clients=4, participation=0.5, local_epochs=1, rounds=2, device="cpu"
    )
    record = Run(spec, out).run()
    assert record["status"] == "complete"
    return out


@pytest.mark.slow
def test_real_run_aggregate_and_table(tmp_path, real_run):
    out = tmp_path / "agg.parquet"
    assert main(["aggregate", "--out", str(out), "--run", f"fedavg={real_run}"]) == 0
    df = pd.read_parquet(out)
    assert df["round"].tolist() == [1, 2]
    assert (df["dataset"].iloc[0], df["model"].iloc[0], df["num_classes"].iloc[0]) == (
        "mnist5k",
        "cnn",
        10,
    )
    metrics = pd.read_parquet(real_run / "metrics.parquet")
    assert df["test_acc"].tolist() == metrics["test_acc"].tolist()
    render("table3", tmp_path / "t3", aggregate=out)
    best = metrics["test_acc"].max() * 100
    # one seed: the mean alone, no "± 0.00"; the row of the paper's best-round selection
    assert f"| mnist5k | 1 | best round | {best:.2f} |" in read(tmp_path / "t3", ".md")


@pytest.mark.slow
def test_real_run_tsne(tmp_path, real_run):
    from fedkd.engine.features import FeaturesError, read_features, tsne_features

    opts = {"samples": 120, "client": 1}
    # the features step trains the local model; computed twice, it gives the same file
    a = tsne_features(real_run, tmp_path / "a.npz", **opts)
    b = tsne_features(real_run, tmp_path / "b.npz", **opts)
    assert a.read_bytes() == b.read_bytes()
    data = read_features(a)
    (_, g_feats, g_acc), (_, l_feats, l_acc) = data["models"]
    assert g_feats.shape == l_feats.shape and g_feats.shape[0] == 120
    assert g_feats.shape[1] == 512  # the CNN's penultimate layer
    # the global model is the checkpoint's: its accuracy is the run's last recorded one
    final = pd.read_parquet(real_run / "metrics.parquet")["test_acc"].iloc[-1]
    assert g_acc == pytest.approx(final)
    assert not np.allclose(g_feats, l_feats)  # local training moved the features
    assert data["client"] == 1 and data["strategy"] == "fedavg"
    # the figure only draws the file; `render --run` (features computed on the way) draws the same
    drawn = render("tsne", tmp_path / "f" / "tsne", features=a)
    assert [p.suffix for p in drawn] == [".pdf", ".png"]
    via_run = render("fig_tsne", tmp_path / "r" / "tsne", run=str(real_run), options=opts,
                     name="tsne")  # fmt: skip
    for x, y in zip(drawn, via_run, strict=True):
        assert x.read_bytes() == y.read_bytes()
    with pytest.raises(ReportError, match="unknown option"):
        render("tsne", tmp_path / "x", features=a, options={"samples": 10})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps({"status": "diverged"}))
    (bad / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ReportError, match="'diverged'"):
        render("fig_tsne", tmp_path / "x", run=str(bad))
    with pytest.raises(FeaturesError, match="client must be an integer in \\[0, 3\\]"):
        tsne_features(real_run, tmp_path / "c.npz", client=4)


# --------------------------------------------------------------------------- what a reader sees
def test_every_registered_strategy_has_its_papers_name():
    from fedkd.report.names import PAPER_NAMES, strategy_display_names
    from fedkd.strategies import get_strategy_class, strategy_names

    shown = strategy_display_names()
    assert set(shown) == set(strategy_names())
    # as the tables have always shown them: the class's name, else the exception kept in names.py
    always = {
        "fedavg": "FedAvg", "fedavgm": "FedAvgM", "fedcad": "FedCAD", "feddf": "FedDF",
        "feddistill+": "FedDistill+", "fedgen": "FedGen", "fedgkd": "FedGKD", "fedgkd+": "FedGKD+",
        "fedgkd-vote": "FedGKD-VOTE", "fedlsd": "FedLSD", "fednova": "FedNova", "fedntd": "FedNTD",
        "fedprox": "FedProx", "moon": "MOON", "scaffold": "SCAFFOLD",
    }  # fmt: skip
    assert {name: shown.get(name) for name in always} == always
    # a strategy added since (to the package, or of one's own): its class's name or display_name
    for name in set(shown) - set(always):
        cls = get_strategy_class(name)
        assert shown[name] == (cls.display_name or cls.__name__), name
    # names.py keeps only exceptions: a registered strategy its class would name otherwise
    for name, paper in PAPER_NAMES.items():
        cls = get_strategy_class(name)
        assert paper != (cls.display_name or cls.__name__), name
    assert display_name("fedgkd-vote") == "FedGKD-VOTE" and display_name("moon") == "MOON"
    assert display_name("fedgkd-M5") == "FedGKD (M=5)"
    assert display_name("fedgkd-vote-M3") == "FedGKD-VOTE (M=3)"
    assert display_name("fedgkd-mse-M1") == "FedGKD (MSE, M=1)"
    assert display_name("M=1") == "M=1" and display_name("none") == "none"


def test_tables_carry_the_setting_and_an_html_rendering(tmp_path, grid):
    out = tmp_path / "t3"
    render("table3", out, aggregate=grid, options={"columns": COLUMNS, "caption": "Top-1."})
    html = read(out, ".html")
    assert html.startswith("<!DOCTYPE html>") and "<table>" in html
    assert (
        "<caption>Top-1. Runs: 20 clients, partition dirichlet-equal (α = 0.1, 1), C = 0.2, "
        "E = 20, 3 rounds" in html
    )
    assert "<th>FedAvg</th>" in html and "<th>MOON</th>" in html
    assert "<b>90.00 ± 0.00</b>" in html and "<u>75.00 ± 5.00</u>" in html
    assert "cifar10 " in html and "train / " in html and "test samples" in html


def test_a_single_seed_output_says_it_has_no_spread(tmp_path):
    r = tmp_path / "runs"
    runs = [("fedavg", make_run(r, "a", [0.2, 0.5])), ("fedgkd", make_run(r, "g", [0.3, 0.6]))]
    out = tmp_path / "t"
    render(
        "table3",
        out,
        aggregate=agg_file(tmp_path, runs),
        options={"columns": ["fedavg", "fedgkd"], "val_selected": False},
    )
    md = read(out, ".md")
    assert "seed 0 (one seed: no ±)" in md
    assert "| cifar10 | 0.5 | <u>50.00</u> | **60.00** |" in md


def test_curves_differ_in_marker_and_line_style(tmp_path, grid):
    from fedkd.report.figures.draw import line_styles

    styles = line_styles(COLUMNS)
    assert len({(s["marker"], s["linestyle"]) for s in styles.values()}) == len(COLUMNS)
    fig = _figure(tmp_path, "figures.curves:build", grid, {"columns": COLUMNS})
    lines = [ln for ax in fig.axes for ln in ax.get_lines()]
    assert lines and all(ln.get_marker() not in (None, "None", "") for ln in lines)
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "FedAvg" in legend and "FedProx" in legend


def test_the_partition_figure_has_a_legend_for_bubble_size(tmp_path):
    from fedkd.report.figures.partition import build
    from fedkd.report.options import Options

    parts = [str(_partition_file(tmp_path, a)) for a in (0.1, 1.0)]
    fig = build(parts, Options("partition", {}, ("titles", "ncols")))
    (legend,) = fig.legends
    assert "bubble area" in legend.get_title().get_text()
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) >= 2 and all(t.endswith(" samples") for t in texts)


def _figure(tmp_path, builder: str, aggregate: Path, options: dict):
    from fedkd.report.aggregate import read_aggregate
    from fedkd.report.options import Options
    from fedkd.report.targets import _resolve

    allowed = ("panels", "columns", "row_names", "column_names", "order", "ddof", "ncols")
    return _resolve(builder)(read_aggregate(aggregate), Options("curves", options, allowed))


def test_report_sections_follow_the_papers_references():
    from fedkd.report.sections import report_section

    assert report_section("Accuracy (fedgkd Table 3); 10 clients.", "table", "table3") == (
        "FedGKD (Yao et al.)", "Table 3",
    )  # fmt: skip
    assert report_section("Curves (FedCAD Fig. 1).", "figure", "fedcad") == (
        "FedCAD (He et al.)", "Fig. 1",
    )  # fmt: skip
    assert report_section("Rounds to a target.", "table", "rtt") == ("Other tables", "rtt")


def test_the_caption_names_a_stand_in_models_options(tmp_path):
    from fedkd.report.setting import setting_sentence

    run = make_run(tmp_path / "runs", "a", [0.5, 0.6])
    rec = json.loads((run / "run.json").read_text())
    rec["spec"]["model_options"] = {"channels": [16, 32], "hidden": 128, "head_init": "he"}
    (run / "run.json").write_text(json.dumps(rec))
    df = pd.read_parquet(agg_file(tmp_path, [("fedavg", run)]))
    assert json.loads(df["model_options"].iloc[0])["hidden"] == 128
    sentence = setting_sentence(df)
    assert "model resnet8 (channels 16/32, head_init he, hidden 128);" in sentence
    # without options the model alone, as before
    plain = make_run(tmp_path / "runs", "b", [0.5, 0.6])
    assert "model resnet8;" in setting_sentence(pd.read_parquet(agg_file(tmp_path, [("x", plain)])))
    # a distilbert without pretrained weights is not the papers' DistilBERT
    df["model"] = "distilbert"
    df["model_options"] = "{}"
    assert "model distilbert (small, trained from scratch);" in setting_sentence(df)


def test_the_caption_names_the_partition_and_alpha_its_runs_share(tmp_path):
    """A table whose alpha is no row key (fedgkd Tables 5, 6, 9) still says what it was run at:
    the partition scheme with its alpha or shards, as the paper's captions do."""
    from fedkd.report.setting import setting_sentence

    root = tmp_path / "runs"
    one = [("a", make_run(root, "a", [0.5, 0.6], alpha=0.1))]
    sentence = setting_sentence(pd.read_parquet(agg_file(tmp_path, one, "one.parquet")))
    assert "20 clients, partition dirichlet-equal (α = 0.1), C = 0.2" in sentence
    # keys that vary list their values, each scheme with its own
    mixed = one + [
        ("b", make_run(root, "b", [0.5, 0.6], alpha=1.0)),
        ("c", make_run(root, "c", [0.5, 0.6], partition="shards", alpha=None, shards=2)),
        ("d", make_run(root, "d", [0.5, 0.6], partition="iid", alpha=None)),
    ]
    sentence = setting_sentence(pd.read_parquet(agg_file(tmp_path, mixed, "mixed.parquet")))
    assert (
        "partition dirichlet-equal (α = 0.1, 1), iid, shards (2 shards per client), C = 0.2"
        in sentence
    )


# --------------------------------------------------------------------------- screen and captions
WIDE = ["fedavg", "fedprox", "moon", "feddistill+", "fedgen", "fedgkd", "fedgkd-vote", "fedgkd+"]


def wide_grid(tmp_path: Path) -> Path:
    """Table 3's eight methods (FedGKD a buffer length per alpha) on three alphas, two seeds."""
    r = tmp_path / "wide"
    methods = WIDE
    runs = []
    for alpha in (1.0, 0.5, 0.1):
        for i, method in enumerate(methods):
            variant = {"fedgkd": "fedgkd-M1" if alpha == 0.5 else "fedgkd-M5",
                       "fedgkd-vote": "fedgkd-vote-M5"}.get(method, method)  # fmt: skip
            for seed in (0, 1):
                acc = 0.5 + 0.04 * i + 0.01 * seed - 0.1 * (alpha < 1)
                d = make_run(r, f"{method}-{alpha}-{seed}", [0.2, acc], alpha=alpha, seed=seed,
                             strategy=method, variant=variant)  # fmt: skip
                runs.append((method, d))
    return agg_file(tmp_path, runs, "wide.parquet")


def test_a_table_too_wide_for_a_laptop_shows_its_methods_as_rows_in_html(tmp_path):
    from fedkd.report.writers import HTML_WIDTH, estimated_width

    out = tmp_path / "t3"
    opts = {"rows": ["dataset", "alpha"], "columns": WIDE, "caption": "Wide."}
    render("table3", out, aggregate=wide_grid(tmp_path), options=opts)
    md, html = read(out, ".md"), read(out, ".html")
    # the paper's layout in .md and .tex: a column per method
    assert "| Dataset | α | Selection | FedAvg | FedProx | MOON |" in md
    head = re.search(r"<thead>.*?</thead>", html, re.S)[0]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", head) == [
        "Dataset", "Selection", "Method", "α=1", "α=0.5", "α=0.1"
    ]  # fmt: skip
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html.split("<tbody>")[1], re.S)
    assert len(rows) == 8 * 2  # a row per method and selection
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    # FedGKD+ best at every alpha (the largest offset), bold; the row names shown once
    assert cells[7][2] == "FedGKD+" and cells[7][3].startswith("<b>")
    assert cells[0][:2] == ["cifar10", "best round"] and cells[1][:2] == ["", ""]
    assert cells[8][:2] == ["", "best on validation"]

    from fedkd.report.aggregate import read_aggregate
    from fedkd.report.options import Options
    from fedkd.report.tables import grid as grid_layout
    from fedkd.report.targets import get_layout

    options = Options("t3", opts, get_layout("grid").options)
    doc = grid_layout.build(read_aggregate(tmp_path / "wide.parquet"), options)
    assert estimated_width(doc) > HTML_WIDTH > estimated_width(doc.screen)


def test_a_narrow_table_keeps_its_layout_in_html(tmp_path, grid):
    out = tmp_path / "t3"
    render("table3", out, aggregate=grid, options={"columns": ["fedavg", "fedprox"]})
    head = re.search(r"<thead>.*?</thead>", read(out, ".html"), re.S)[0]
    assert ">FedAvg</th>" in head and ">FedProx</th>" in head


def test_captions_name_each_columns_variant_and_the_csv_holds_it(tmp_path):
    out = tmp_path / "t3"
    opts = {"rows": ["dataset", "alpha"], "columns": WIDE}
    render("table3", out, aggregate=wide_grid(tmp_path), options=opts)
    md = read(out, ".md")
    assert ("Variants run: FedGKD: FedGKD (M=5) at α=1, 0.1 and FedGKD (M=1) at α=0.5; "
            "FedGKD-VOTE: FedGKD-VOTE (M=5).") in md  # fmt: skip
    csv = pd.read_csv(out.with_name("t3.csv"))
    fedgkd = csv[(csv["label"] == "fedgkd")].set_index(["alpha", "stat"])["variant"]
    assert fedgkd[(0.5, "best")] == "fedgkd-M1" and fedgkd[(1.0, "val_selected")] == "fedgkd-M5"
    assert (csv[csv["label"] == "moon"]["variant"] == "moon").all()


def test_code_in_a_caption_is_typewriter_in_latex_and_code_in_html(tmp_path, grid):
    out = tmp_path / "t3"
    opts = {"columns": ["fedavg"], "caption": "Distils toward `target: uniform` here."}
    render("table3", out, aggregate=grid, options=opts)
    assert r"toward \texttt{target: uniform} here" in read(out, ".tex")
    assert "`" not in read(out, ".tex")
    assert "toward <code>target: uniform</code> here" in read(out, ".html")
    assert "toward `target: uniform` here" in read(out, ".md")
