"""bench/paper_gpu_hours.py and its rates (bench/gpu_rates.py): a run's images counted by hand,
the rate a run takes (its strategy's on its model over its model's), runs without a rate listed as
unmeasured, and a bad --rate refused with the value and the fix. Offline and fast: it reads a
config, not data."""

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "paper_gpu_hours.py"

# cifar10 (45,000 training images after the loader's 10% validation hold-out), 10 clients of
# 4,500 each (dirichlet-equal), C = 0.25: the engine draws round_half_up(2.5) = 3 clients a round
# (Python's round(2.5) would be 2), 2 local epochs, 5 rounds, 2 seeds
CONFIG = """
name: gpu-hours-test
seeds: [0, 1]
defaults:
  partition: dirichlet-equal
  alpha: 1.0
  clients: 10
  participation: 0.25
  local_epochs: 2
  rounds: 5
  batch_size: 64
  model: auto
  device: cpu
variants:
  fedavg: {strategy: fedavg}
  fedgkd-M1: {strategy: fedgkd, params: {buffer: 1}}
  fedavg-cnn: {strategy: fedavg, spec: {model: cnn}}
tables:
  table3:
    layout: grid
    caption: Top-1 test accuracy (%).
    grid: {dataset: [cifar10]}
    columns: {fedavg: fedavg, fedgkd: fedgkd-M1, cnn: fedavg-cnn}
    options: {rows: [dataset]}
"""
# by hand: 5 rounds x 3 clients x 2 epochs x 4,500 images
RUN_IMAGES = 5 * 3 * 2 * 4_500  # 135,000


def _load():
    sys.path.insert(0, str(SCRIPT.parent))  # its gpu_rates.py, as running the script finds it
    spec = importlib.util.spec_from_file_location("paper_gpu_hours", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gh = _load()
import gpu_rates  # noqa: E402 - bench/, on the path since the script was loaded


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpu_hours") / "config.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def runs(config_file):
    return gh.plan_runs(gh.load_plan([config_file]))


def test_one_run_images_by_hand(runs):
    assert len(runs) == 6  # 3 variants x 2 seeds
    run = next(r for r in runs if r.variant == "fedavg" and r.seed == 0)
    assert (run.dataset, run.model, run.strategy) == ("cifar10", "resnet8", "fedavg")
    assert run.train_examples == 45_000  # CIFAR-10's 50,000 less the 5,000 held out
    assert run.per_client == 4_500
    assert run.clients_per_round == 3  # rounded half up, as the engine draws them
    assert run.images == RUN_IMAGES
    cnn = next(r for r in runs if r.variant == "fedavg-cnn")
    assert cnn.model == "cnn" and cnn.images == RUN_IMAGES


def test_partition_sizes():
    class Spec:
        clients, shards = 10, 2

    for scheme, per_client in [
        ("dirichlet-equal", 4_500), ("iid", 4_500), ("shards", 4_500), ("dirichlet", 4_500)
    ]:  # fmt: skip
        Spec.partition = scheme
        assert gh.examples_per_client(Spec, 45_000) == per_client
        assert gh.examples_per_client(Spec, 45_001) == (
            45_001 / 10 if scheme == "dirichlet" else per_client
        )
    assert gh.examples_per_client(Spec, None) is None


@pytest.mark.parametrize(
    "texts",
    [
        ["fedavg:resnet8=75", "resnet8=37.5"],
        ["resnet8=37.5", "fedavg:resnet8=75"],  # the order given does not matter
    ],
)
def test_specific_rate_beats_general(texts):
    rates = gpu_rates.parse_rates(texts)
    assert rates == {("fedavg", "resnet8"): 75.0, (None, "resnet8"): 37.5}
    assert gpu_rates.match_rate(rates, "fedavg", "resnet8") == ("fedavg", "resnet8")
    assert gpu_rates.match_rate(rates, "fedgkd", "resnet8") == (None, "resnet8")
    assert gpu_rates.match_rate(rates, "fedavg", "cnn") is None  # never another model's rate


def test_rows_and_report(runs, capsys, config_file):
    rates = gpu_rates.parse_rates(["fedavg:resnet8=75", "resnet8=37.5"])
    rows = {(r.model, r.strategies): r for r in gh.build_rows(runs, rates)}
    assert set(rows) == {("resnet8", "fedavg"), ("resnet8", "others (1)"), ("cnn", "all")}
    fedavg, others, cnn = (
        rows["resnet8", "fedavg"],
        rows["resnet8", "others (1)"],
        rows["cnn", "all"],
    )
    assert (fedavg.runs, fedavg.images, fedavg.hours(rates)) == (2, 2 * RUN_IMAGES, 1.0)
    assert (others.runs, others.images, others.hours(rates)) == (2, 2 * RUN_IMAGES, 2.0)
    assert (cnn.runs, cnn.images, cnn.key, cnn.hours(rates)) == (2, 2 * RUN_IMAGES, None, None)

    assert gh.main(["--configfile", str(config_file), "--rate", "fedavg:resnet8=75",
                    "--rate", "resnet8=37.5"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "--rate fedavg:resnet8=75 --rate resnet8=37.5" in out  # the command it ran
    assert str(config_file) in out and "6 runs" in out
    lines = out.splitlines()
    cnn_line = next(line for line in lines if line.startswith("cifar10") and " cnn " in line)
    assert cnn_line.split()[-2:] == ["unmeasured", "-"]
    assert "measured:   4 runs, 0.5 M images, 3.0 GPU-hours" in out
    assert "unmeasured: 2 runs, 0.3 M images" in out and "cnn on cifar10: 2 runs" in out


def test_a_model_with_options_of_its_own_takes_only_a_rate_given_for_them(config_file, capsys):
    """A BatchNorm ResNet-8 trains on the sequential trainer (the batched one folds no
    BatchNorm): costed at the rate measured on the default model, its GPU-hours came out ~7 times
    too low. It is another model, unmeasured until a rate names its options."""
    text = config_file.read_text().replace(
        "  fedavg-cnn: {strategy: fedavg, spec: {model: cnn}}",
        "  fedavg-cnn: {strategy: fedavg, spec: {model_options: {norm: batch}}}",
    )
    bn_config = config_file.with_name("bn.yaml")
    bn_config.write_text(text)
    runs = gh.plan_runs(gh.load_plan([bn_config]))
    assert sorted({r.rate_model for r in runs}) == ["resnet8", "resnet8[norm=batch]"]
    rates = gpu_rates.parse_rates(["resnet8=37.5"])
    report = gh.report(runs, rates, "cmd", "cfg")
    assert "measured:   4 runs" in report
    assert (
        "unmeasured: 2 runs, 0.3 M images" in report and "resnet8[norm=batch] on cifar10" in report
    )
    rates = gpu_rates.parse_rates(["resnet8=37.5", "resnet8[norm=batch]=75"])
    assert gh.gpu_hours(gh.measured_runs(runs, rates), rates) == pytest.approx(4.0 + 1.0)
    assert gh.main(["--configfile", str(bn_config), "--rate", "resnet8[norm=batch]=75"]) == 0
    assert "measured:   2 runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "rate, says",
    [
        ("resnet8[norm=bacth]=5", "model_options.norm='bacth' is unknown; choose one of"),
        ("resnet8[nrom=batch]=5", "model_options.nrom is not an option of model 'resnet8'"),
        ("resnet8[]=5", "no option between its brackets"),
    ],
)
def test_a_rates_model_options_are_checked_as_a_run_specs(rate, says):
    """A misspelt option matched no run and only earned "matched no run"."""
    with pytest.raises(gpu_rates.RateError, match="key=value joined by commas") as err:
        gpu_rates.parse_rates([rate])
    assert says in str(err.value)
    # written in any order, the options key the rate as a run's are keyed: by name
    rates = gpu_rates.parse_rates(["resnet8[norm=batch, head_init=he]=5"])
    assert list(rates) == [(None, "resnet8[head_init=he,norm=batch]")]


def test_a_rate_without_runs_is_named(runs):
    text = gh.report(runs, gpu_rates.parse_rates(["resnet50=10"]), "cmd", "cfg")
    assert "rate resnet50 matched no run" in text
    assert "unmeasured: 6 runs, 0.8 M images" in text


@pytest.mark.parametrize(
    "rate, says",
    [
        ("resnet8=fast", "'fast' is not a positive number of images per second"),
        ("resnet8=0", "'0' is not a positive number"),
        ("resnet8", "is not NAME=IMG_PER_S"),
        (":resnet8=5", "is not MODEL or STRATEGY:MODEL"),
    ],
)
def test_malformed_rate(rate, says):
    with pytest.raises(gpu_rates.RateError, match="e.g. --rate resnet8=70019") as err:
        gpu_rates.parse_rates([rate])
    assert says in str(err.value) and rate in str(err.value)


def test_unknown_names_and_twice():
    with pytest.raises(gpu_rates.RateError, match="'resnet9' is not a model.*resnet8, resnet50"):
        gpu_rates.parse_rates(["resnet9=5"])
    with pytest.raises(gpu_rates.RateError, match="'fedgkd-M1' is a variant of strategy 'fedgkd'"):
        gpu_rates.parse_rates(["fedgkd-M1:resnet8=5"], {"fedgkd-M1": {"strategy": "fedgkd"}})
    with pytest.raises(gpu_rates.RateError, match="'nope' is not a strategy; strategies: .*fedavg"):
        gpu_rates.parse_rates(["nope:resnet8=5"])
    with pytest.raises(gpu_rates.RateError, match="given twice"):
        gpu_rates.parse_rates(["resnet8=5", "resnet8=6"])


def test_bad_rate_exits_2_without_traceback():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rate", "resnet8=fast"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'fast' is not a positive number" in done.stderr
    assert "--rate resnet8=70019" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_server_side_training_is_named_as_not_counted(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        CONFIG.replace("fedavg-cnn: {strategy: fedavg,", "fedavg-cnn: {strategy: feddf,")
    )
    runs = gh.plan_runs(gh.load_plan([path]))
    said = "\n".join(gh.notes(runs, {(None, "resnet8"): 1000.0}))
    assert "not counted: what the server trains each round, feddf (distillation: 2 runs)" in said
    assert "fedgen" not in said


def test_every_function_the_report_names_exists(runs):
    """The report says where each of its numbers comes from (fedkd.x.y.name): each such name
    is one a reader finds there."""
    text = gh.report(runs, gpu_rates.parse_rates(["resnet8=10"]), "cmd", "cfg")
    named = re.findall(r"\b(fedkd(?:\.\w+)+)", text)
    assert len(set(named)) >= 4, named
    for dotted in set(named):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                target = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                assert hasattr(target, attribute), f"the report names {dotted}, which is not there"
                target = getattr(target, attribute)
            break


def test_stopping_runs_are_estimated_at_the_rounds_their_paper_reports(runs):
    """A run that stops at its target is counted at the mean rounds FedDF's Table 1 reports for
    its cell (column, alpha, C, local epochs), at most its own rounds; a cell the paper lacks
    (FedProx has no 1-epoch row) or a variant no column names gets no estimate."""
    from dataclasses import replace
    from types import SimpleNamespace

    table = {
        "paper": "feddf_table1",
        "columns": {
            "fedavg": {"best_of": ["t1-fedavg-lr0.1", "t1-fedavg-lr1"]},
            "fedprox": {"best_of": ["t1-fedprox-mu0.01"]},
        },
    }
    plan = SimpleNamespace(config={"tables": {"rounds_to_target": table}})
    resnet8 = next(r for r in runs if r.model == "resnet8")
    base = replace(
        resnet8, stop_at_acc=0.75, alpha=0.1, participation=0.2, local_epochs=20, rounds=1000
    )
    tuned = replace(base, variant="t1-fedavg-lr1")
    short = replace(base, variant="t1-fedavg-lr0.1", rounds=300)
    absent_cell = replace(base, variant="t1-fedprox-mu0.01", local_epochs=1)
    no_column = replace(base, variant="t1-fedgkd")
    got = gh.paper_rounds(plan, [tuned, short, absent_cell, no_column])
    assert {r.variant: rounds for r, (rounds, _) in got.items()} == {
        "t1-fedavg-lr1": 423,  # FEDAVG, 20 local epochs, C=0.2, alpha=0.1: 423 ± 105
        "t1-fedavg-lr0.1": 300,  # its own budget is shorter
    }
    rates = gpu_rates.parse_rates(["resnet8=1000"])
    note = gh.stopping_estimate([tuned, no_column], [], got, rates)
    hours = (tuned.images * 423 / 1000 + no_column.images) / 1000 / 3600
    assert f"take {hours:,.1f} GPU-hours" in note
    assert "1 runs at the paper's rounds, 1 whose cell the paper does not report" in note
    assert "(t1-fedgkd)" in note
