"""A strategy of one's own, added as docs/adding-a-strategy.md says: one module in a folder outside
the package, named in FEDKD_STRATEGY_MODULES, and no other edit. It registers, its parameters are
checked, it trains through both trainers to the same numbers, its runs are hashed with its file,
and it appears in a table under its class's name (or the name it declares); through the workflow
too (slow). A strategy's name never imports anything."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fedkd.config import RunSpec, SpecError
from fedkd.strategies import (
    MODULES_VARIABLE,
    StrategyModuleError,
    get_strategy_class,
    strategy_names,
)

# the whole of the user's module: a FedAvg whose local loss also pulls the weights toward zero,
# and a variant that declares the name tables show
TOY_MODULE = '''
"""Shrink: CE + decay/2 ||w||^2 on each client (a toy)."""

from dataclasses import dataclass

import torch

from fedkd.strategies._params import CheckedParams, at_least, ranged
from fedkd.strategies.base import LocalBatch, LocalContext, Strategy


@dataclass
class ShrinkParams(CheckedParams):
    decay: float = ranged(0.5, at_least(0), "0: FedAvg")


class ToyShrink(Strategy):
    name = "toy-shrink"
    paper = "a test's toy"
    summary = "CE + decay/2 ||w||^2"
    Params = ShrinkParams

    @classmethod
    def dataset_defaults(cls, dataset, model):
        return {"decay": 1.0} if dataset == "mnist5k" else {}

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        norm = sum(p.pow(2).sum() for p in ctx.params.values())
        return batch.ce() + 0.5 * self.params.decay * norm


class ToyShrinkPlus(ToyShrink):
    name = "toy-shrink+"
    display_name = "ToyShrink+"
'''


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("my_strategies") / "shrink.py"
    path.write_text(TOY_MODULE)
    return path


@pytest.fixture
def toy(toy_file, monkeypatch) -> Path:
    """The documented way: FEDKD_STRATEGY_MODULES names the module's file."""
    monkeypatch.setenv(MODULES_VARIABLE, str(toy_file))
    return toy_file


def test_the_module_registers_only_where_it_is_named(toy_file, monkeypatch):
    monkeypatch.delenv(MODULES_VARIABLE, raising=False)
    assert "toy-shrink" not in strategy_names()
    with pytest.raises(SpecError, match="strategy='toy-shrink' is unknown") as refused:
        RunSpec(strategy="toy-shrink")
    assert MODULES_VARIABLE in str(refused.value)  # the spec's refusal says how to add one
    monkeypatch.setenv(MODULES_VARIABLE, str(toy_file))
    assert {"toy-shrink", "toy-shrink+", "fedavg", "fedprox"} <= set(strategy_names())
    cls = get_strategy_class("toy-shrink")
    assert cls.__module__.startswith("fedkd_strategy_module_shrink_")  # a module of its own
    # its parameters are checked as the package's are, every bad one at once
    assert RunSpec(strategy="toy-shrink", dataset="mnist5k").params == {}
    with pytest.raises(SpecError, match=r"params.decay=-1.0 must be >= 0 \(0: FedAvg\)"):
        RunSpec(strategy="toy-shrink", params={"decay": -1})
    assert get_strategy_class("toy-shrink").make_params({}, "mnist5k", "cnn").decay == 1.0


def test_fedkd_strategies_lists_it_with_its_parameters(toy, capsys):
    from fedkd.cli import main

    assert main(["strategies", "--details"]) == 0
    out = capsys.readouterr().out
    assert "toy-shrink\ta test's toy\tCE + decay/2 ||w||^2" in out, out
    assert "parameters: decay=0.5 (>= 0)" in out and "mnist5k (cnn): decay=1.0" in out, out


def test_a_missing_module_file_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv(MODULES_VARIABLE, str(tmp_path / "nosuch.py"))
    with pytest.raises(ValueError, match=rf"{MODULES_VARIABLE} names .*nosuch.py.*does not exist"):
        strategy_names()
    monkeypatch.setenv(MODULES_VARIABLE, str(tmp_path))
    with pytest.raises(ValueError, match=r"which is not a Python file \(\.py\)"):
        strategy_names()


def test_a_strategy_name_never_imports_anything(tmp_path, monkeypatch):
    """Configuration text stays text: a strategy named like a module or a file is refused, and
    that file is never run; only the files FEDKD_STRATEGY_MODULES names are imported."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.delenv(MODULES_VARIABLE, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (str(evil), "evil", "evil.py", "os"):
        with pytest.raises(SpecError, match="is unknown"):
            RunSpec(strategy=name)
        with pytest.raises(ValueError, match="unknown strategy"):
            get_strategy_class(name)
    assert not marker.exists()


def test_what_the_report_reads_without_importing_is_what_importing_gives(toy):
    from fedkd.report.declared import declared_strategies
    from fedkd.report.names import display_name

    declared = declared_strategies()
    assert set(declared) == set(strategy_names())
    for name in strategy_names():
        cls = get_strategy_class(name)
        assert declared[name].class_name == cls.__name__, name
        assert declared[name].display_name == cls.display_name, name
        assert declared[name].code_choices == cls.code_choices, name
    assert display_name("toy-shrink") == "ToyShrink"  # its class's name
    assert display_name("toy-shrink+") == "ToyShrink+"  # the name it declares
    assert display_name("toy-shrink-decay2") == "ToyShrink (decay=2)"  # a variant of it


def test_the_report_reads_bases_however_they_are_imported(toy_file, tmp_path, monkeypatch):
    """A second module (the variable names two files): a base reached through a module alias, and
    a subclass of a package strategy that inherits its published-code choices."""
    import os

    from fedkd.report.declared import declared_strategies

    other = tmp_path / "other.py"
    other.write_text(
        "import fedkd.strategies.base as b\n"
        "from fedkd.strategies.fedgkd import FedGKD as Teacher\n\n\n"
        "class Plain(b.Strategy):\n"
        '    name = "plain"\n\n\n'
        "class MyGKD(Teacher):\n"
        '    name = "my-gkd"\n'
        '    display_name = "MyGKD!"\n\n\n'
        "class NotAStrategy:  # its name need not be a literal\n"
        '    name = "not" + "-a-strategy"\n'
    )
    monkeypatch.setenv(MODULES_VARIABLE, os.pathsep.join([str(toy_file), str(other)]))
    declared = declared_strategies()
    assert {"plain", "my-gkd", "toy-shrink"} <= set(strategy_names())
    assert set(declared) == set(strategy_names())
    for name in ("plain", "my-gkd"):
        cls = get_strategy_class(name)
        assert (declared[name].class_name, declared[name].display_name) == (
            cls.__name__,
            cls.display_name,
        )
        assert declared[name].code_choices == cls.code_choices
    assert declared["my-gkd"].code_choices == {"m1_teacher": "current"}


def test_a_declaration_the_report_cannot_read_is_refused_by_name(tmp_path, monkeypatch):
    from fedkd.report.declared import declared_strategies

    module = tmp_path / "computed.py"
    module.write_text(
        "from fedkd.strategies.base import Strategy\n\n\n"
        "class Computed(Strategy):\n"
        '    name = "computed"\n'
        '    display_name = "Com" + "puted"\n'
    )
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    with pytest.raises(ValueError, match=r"computed.py: Computed.display_name must be a literal"):
        declared_strategies()


def test_a_code_choice_unlike_its_params_default_is_refused(tmp_path, monkeypatch):
    module = tmp_path / "choosy.py"
    module.write_text(
        TOY_MODULE.replace(
            'name = "toy-shrink"', 'name = "choosy"\n    code_choices = {"decay": 2.0}'
        ).replace('"toy-shrink+"', '"choosy+"')
    )
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    with pytest.raises(
        StrategyModuleError, match=r"code_choices\['decay'\] = 2.0, but its Params default"
    ):
        strategy_names()


def test_a_run_of_the_toy_is_hashed_with_its_file(toy):
    from fedkd.provenance import run_code_files, run_code_hash

    assert toy in run_code_files("toy-shrink", "mnist5k")
    assert toy not in run_code_files("fedavg", "mnist5k")
    before, fedavg = run_code_hash("toy-shrink", "mnist5k"), run_code_hash("fedavg", "mnist5k")
    # a note and a reworded docstring are no code: nothing re-runs
    toy.write_text("# my notes\n" + TOY_MODULE.replace("(a toy)", "(a toy of a test)"))
    try:
        assert run_code_hash("toy-shrink", "mnist5k") == before
        toy.write_text(TOY_MODULE.replace("0.5 * self.params.decay", "0.25 * self.params.decay"))
        assert run_code_hash("toy-shrink", "mnist5k") != before
        assert run_code_hash("fedavg", "mnist5k") == fedavg
    finally:
        toy.write_text(TOY_MODULE)
    assert run_code_hash("toy-shrink", "mnist5k") == before


def test_a_module_of_ones_own_that_the_strategy_imports_is_hashed_with_it(tmp_path, monkeypatch):
    """A strategy whose code is split over files of one's own: editing the file it imports
    re-runs its runs as editing the strategy's own file does; a library it imports (numpy) is
    versioned, not hashed."""
    from fedkd.provenance import run_code_files, run_code_hash

    helper = tmp_path / "toy_scales.py"
    helper.write_text("def half(x):\n    return 0.5 * x\n")
    module = tmp_path / "split.py"
    module.write_text(
        TOY_MODULE.replace("import torch\n", "import numpy\nimport torch\nfrom toy_scales import half\n")
        .replace("0.5 * self.params.decay * norm", "half(self.params.decay * norm)")
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    files = run_code_files("toy-shrink", "mnist5k")
    assert module in files and helper in files
    assert not [f for f in files if "numpy" in f.parts]
    before = run_code_hash("toy-shrink", "mnist5k")
    helper.write_text("# notes\ndef half(x):\n    return 0.5 * x\n")
    assert run_code_hash("toy-shrink", "mnist5k") == before
    helper.write_text("def half(x):\n    return x / 2\n")
    assert run_code_hash("toy-shrink", "mnist5k") != before


def test_a_traits_table_listing_the_toy_is_hashed_with_its_file(toy):
    """The traits table is drawn from the strategies it lists, a module of one's own included:
    an edit of the toy's traits rebuilds it, as an edit of a package strategy's does."""
    import yaml

    from fedkd.pipeline import Plan

    config = yaml.safe_load((Path(__file__).parents[1] / "config/tiny.yaml").read_text())
    config["tables"]["table1"]["options"]["strategies"] = ["fedavg", "toy-shrink"]
    plan = Plan(config)
    before, table3 = plan.render_code_hash("table1"), plan.render_code_hash("table3")
    with_traits = TOY_MODULE.replace("LocalContext, Strategy", "LocalContext, Strategy, Traits")
    toy.write_text(with_traits.replace("    Params = ShrinkParams\n", TRAITS_LINES))
    try:
        assert plan.render_code_hash("table1") != before
        assert plan.render_code_hash("table3") == table3
    finally:
        toy.write_text(TOY_MODULE)
    assert plan.render_code_hash("table1") == before


TRAITS_LINES = "    Params = ShrinkParams\n    traits = Traits(proxy_data=True)\n"


# ------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def trained(toy_file, tmp_path_factory) -> dict[str, Path]:
    """Two rounds of the toy with each trainer, and FedAvg's, on the stand-in CNN and 96 mnist5k
    images (tests/test_trainers.py's small setting)."""
    from fedkd.engine.run import Run
    from test_trainers import SHAPES, SMALL, data_for, train

    out = tmp_path_factory.mktemp("toy_runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MODULES_VARIABLE, str(toy_file))
        data = data_for("cnn-mnist5k")
        base = dict(SMALL, **SHAPES["cnn-mnist5k"][0])
        runs = {
            "sequential": train(
                RunSpec(**base, strategy="toy-shrink", engine="sequential"),
                out / "seq",
                data,
            ),
            "batched": train(
                RunSpec(**base, strategy="toy-shrink", engine="batched"), out / "kc", data
            ),
            "fedavg": train(RunSpec(**base, strategy="fedavg", engine="sequential"), out / "fa", data),
            "init": Run(RunSpec(**base, strategy="toy-shrink"), out / "init", log=lambda m: None,
                        dataset=data),
        }  # fmt: skip
        runs["init"].prepare()
    return {"dirs": {"sequential": out / "seq", "batched": out / "kc", "fedavg": out / "fa"},
            "runs": runs, "data": data}  # fmt: skip


def test_the_toy_trains_through_both_trainers_alike(trained):
    from test_trainers import engine_used, metrics, rel_diff, update_diff

    dirs, runs = trained["dirs"], trained["runs"]
    assert engine_used(dirs["sequential"])["used"] == "sequential"
    assert engine_used(dirs["batched"])["used"] == "batched"
    seq, kc = metrics(dirs["sequential"]), metrics(dirs["batched"])
    assert len(seq) == len(kc) == 2
    one_sample = 1 / len(trained["data"].test) + 1e-9
    assert seq["test_acc"].tolist() == pytest.approx(kc["test_acc"].tolist(), abs=one_sample)
    assert seq["train_loss"].tolist() == pytest.approx(kc["train_loss"].tolist(), rel=1e-4)
    seq_model, kc_model = runs["sequential"].global_model, runs["batched"].global_model
    init = runs["init"].global_model
    # its own local loss trained it (FedAvg's weights from the same start end elsewhere) ...
    assert rel_diff(init, kc_model) > 1e-3
    assert update_diff(seq_model, runs["fedavg"].global_model, init) > 1e-2
    # ... and both trainers trained it the same way (tests/test_trainers.py's bound)
    assert update_diff(seq_model, kc_model, init) <= 1e-3
    record = json.loads((dirs["batched"] / "run.json").read_text())
    assert record["spec"]["strategy"] == "toy-shrink"
    assert record["strategy_params"] == {"decay": 1.0}  # its dataset default


def test_the_toy_appears_in_a_table(trained, toy, tmp_path):
    from fedkd.report import aggregate_runs, render, write_aggregate

    dirs = trained["dirs"]
    aggregate = tmp_path / "agg.parquet"
    write_aggregate(
        aggregate_runs([("fedavg", str(dirs["fedavg"])), ("toy-shrink", str(dirs["batched"]))]),
        aggregate,
    )
    render("table3", tmp_path / "t3", aggregate=aggregate)
    md = (tmp_path / "t3.md").read_text()
    header = next(line for line in md.splitlines() if "FedAvg" in line)
    assert "| ToyShrink |" in header, md
    cells = pd.read_csv(tmp_path / "t3.csv")
    toy_cell = cells[(cells["label"] == "toy-shrink") & (cells["stat"] == "best")]
    best = pd.read_parquet(dirs["batched"] / "metrics.parquet")["test_acc"].max() * 100
    assert toy_cell["mean"].tolist() == pytest.approx([best]) and toy_cell["n_seeds"].tolist() == [
        1
    ]


# ------------------------------------------------------------------------------ the workflow
TOY_CONFIG = """
name: toy
seeds: [0]
defaults:
  {partition: dirichlet-equal, alpha: 1.0, clients: 10, participation: 0.2, local_epochs: 1,
   rounds: 2, device: cpu, model: cnn, model_options: {channels: [4, 8], hidden: 16}}
variants:
  fedavg: {strategy: fedavg}
  toy-shrink: {strategy: toy-shrink, params: {decay: 0.5}}
tables:
  table3:
    layout: grid
    caption: Top-1 test accuracy (%).
    grid: {dataset: [mnist5k]}
    columns: {fedavg: fedavg, toy-shrink: toy-shrink}
    options: {rows: [dataset], stat: best}
"""


def test_a_configuration_naming_the_toy_says_where_to_name_its_module(toy_file, monkeypatch):
    import yaml

    from fedkd.pipeline.validation import semantic_errors

    config = yaml.safe_load(TOY_CONFIG)
    monkeypatch.delenv(MODULES_VARIABLE, raising=False)
    errors = semantic_errors(config, check_specs=False)
    assert len(errors) == 1, errors
    assert "variants.toy-shrink.strategy: 'toy-shrink' is not a registered strategy" in errors[0]
    assert f"name its module's file in {MODULES_VARIABLE}" in errors[0]
    monkeypatch.setenv(MODULES_VARIABLE, str(toy_file))
    assert semantic_errors(config) == []


@pytest.mark.slow
def test_the_workflow_builds_a_table_of_the_toy(toy, tmp_path):
    """The configuration names the strategy like any other; every process of the workflow (its
    validation, the training jobs, the render job) finds it through the environment."""
    from test_workflow import freeze_sources, snakemake

    src = freeze_sources(tmp_path / "src")
    config = tmp_path / "toy.yaml"
    config.write_text(TOY_CONFIG)
    work = tmp_path / "work"
    snakemake(work, config, "results/tables/table3.md", "--cores", "2", src=src, timeout=900)
    md = (work / "results" / "tables" / "table3.md").read_text()
    assert "| FedAvg | ToyShrink |" in md, md
    record = json.loads(
        next((work / "results" / "runs" / "mnist5k" / "toy-shrink").rglob("run.json")).read_text()
    )
    assert record["status"] == "complete" and record["strategy_params"] == {"decay": 0.5}


# the suite's tests that read every registered strategy, besides the shared ones above
EVERY_STRATEGY_TESTS = (
    "tests/test_pipeline.py::test_provenance_finds_every_registered_strategy",
    "tests/test_report_figures.py::test_every_registered_strategy_has_its_papers_name",
    "tests/test_doc_statements.py::test_docs_strategies_names_every_parameter_of_every_strategy",
)


@pytest.mark.slow
def test_the_suite_passes_with_the_module_exported_for_pytest(toy_file):
    """docs/adding-a-strategy.md has the variable exported for pytest too: the tests over every
    registered strategy hold the module to what it must do, and to nothing only the package's own
    strategies do (an entry in docs/strategies.md, a name the tables have always shown)."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, MODULES_VARIABLE: str(toy_file)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
         *EVERY_STRATEGY_TESTS],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout, proc.stdout[-3000:]
