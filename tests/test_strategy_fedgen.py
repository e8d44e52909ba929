"""FedGen's choices between its method and the FedGKD authors' release: the label counts the
clients upload (label_counts), the round index of the client coefficient (round_index), the
generator's noise dimension per dataset, and the server step in the model's dtype."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import yaml

import fedkd.strategies.fedgen as fedgen_mod
from fedkd.config import RunSpec, SpecError
from fedkd.strategies import get_strategy_class
from fedkd.strategies.fedgen import FedGen, FedGenParams, teacher_label_weights
from test_strategy_baselines import tiny_client, tiny_ctx
from test_strategy_fedgen_method import _declared_steps, _fedgen_round

ROOT = Path(__file__).resolve().parents[1]
# a generator small enough that a few server rounds take well under a second
GEN_TINY = FedGenParams(gen_lr=1e-2, gen_steps=5, gen_batch_size=16, hidden_dim=16)


def _heads(k: int, c: int = 3):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(c, 512, generator=g), torch.zeros(c)) for _ in range(k)]


# ------------------------------------------------------------------ label_counts
def test_the_release_uploads_all_ones_whatever_the_client_holds():
    ctx = tiny_ctx(num_classes=3)
    model = ctx.build_model()
    labels = [0, 2, 2, 2]  # label 1 missing, label 2 three times
    real = FedGen(FedGenParams(), ctx)
    ones = FedGen(FedGenParams(label_counts="ones"), ctx)
    got_real = real.client_end(tiny_client(ctx, 0, 0, model, model, {}, labels))["label_counts"]
    got_ones = ones.client_end(tiny_client(ctx, 0, 0, model, model, {}, labels))["label_counts"]
    assert got_real.tolist() == [1, 0, 3]
    assert got_ones.tolist() == [1, 1, 1]
    # the same tensor size and type: the release's bytes are fedkd's
    assert got_ones.dtype == got_real.dtype and got_ones.shape == got_real.shape


def test_all_ones_counts_weight_every_clients_head_1_over_k_for_every_label():
    for k in (1, 2, 5):
        w = teacher_label_weights(torch.ones(k, 4, dtype=torch.long))
        assert w.shape == (4, k)
        assert torch.equal(w, torch.full((4, k), 1.0 / k))
    # the clients' real counts: each client's share of each label, zero rows where nobody holds it
    w = teacher_label_weights(torch.tensor([[3, 0, 0, 1], [1, 0, 2, 1]]), torch.float64)
    expected = [[0.75, 0.25], [0.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert w.dtype == torch.float64 and w.tolist() == expected


def _recorded_server_step(monkeypatch, label_counts: str, counts):
    """Every teacher-loss call's labels and label weights in one server round of FedGen whose
    clients uploaded ``counts`` from their client_end under ``label_counts``."""
    seen = []
    real = fedgen_mod.generator_teacher_loss

    def recording(feats, y, head_w, head_b, label_w, *rest):
        seen.append((y.clone(), label_w.clone()))
        return real(feats, y, head_w, head_b, label_w, *rest)

    monkeypatch.setattr(fedgen_mod, "generator_teacher_loss", recording)
    ctx = tiny_ctx(num_classes=3)
    params = FedGenParams(gen_steps=8, gen_batch_size=64, hidden_dim=16, label_counts=label_counts)
    s = FedGen(params, ctx)
    model = ctx.build_model()
    uploads = []
    for cid, labels in enumerate(counts):
        client = tiny_client(ctx, cid, 0, model, model, {}, labels)
        uploads.append(s.client_end(client)["label_counts"].tolist())
    _fedgen_round(s, 0, _heads(len(counts)), uploads)
    return seen


def test_with_all_ones_the_server_draws_every_label_and_weights_each_head_equally(monkeypatch):
    # client 0 holds only label 0, client 1 labels 0 and 1; nobody holds label 2
    counts = [[0] * 9, [0, 1]]
    seen = _recorded_server_step(monkeypatch, "ones", counts)
    drawn = torch.cat([y for y, _ in seen])
    assert set(drawn.tolist()) == {0, 1, 2}  # label 2 too: drawn over all classes
    freq = torch.bincount(drawn, minlength=3).double() / len(drawn)
    # 512 draws: 0.08 is about 4 standard deviations of a share of 1/3
    assert torch.allclose(freq, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.08)
    for _, label_w in seen:
        assert torch.equal(label_w, torch.full((3, 2), 0.5))
    # FedGen's method: the held labels only, each head by its share of the label
    seen = _recorded_server_step(monkeypatch, "real", counts)
    assert set(torch.cat([y for y, _ in seen]).tolist()) == {0, 1}
    expected = torch.tensor([[0.9, 0.1], [0.0, 1.0], [0.0, 0.0]])
    assert torch.allclose(seen[0][1], expected, rtol=1e-6, atol=0)


# ------------------------------------------------------------------ round_index
@pytest.mark.parametrize("round", [1, 2, 5])
def test_the_round_index_sets_the_clients_coefficient(round):
    ctx = tiny_ctx(num_classes=3)
    shared = {}
    for index in ("one-based", "zero-based"):
        s = FedGen(FedGenParams(coef=10.0, gen_steps=1, hidden_dim=16, round_index=index), ctx)
        _fedgen_round(s, 0, _heads(1), [[4, 0, 4]])
        model = ctx.build_model()
        client = tiny_client(ctx, 0, round, model, model, s.payload(round, None), [0, 2, 2, 0])
        client.num_steps, client.batch_size, client.seed = 2, 4, 7
        s.client_begin(client)
        shared[index] = float(client.declared.shared["coef"])
    # the release's 1-based round counter: t = r + 1, so 0.98 times FedGen's code in every round
    assert shared["one-based"] == pytest.approx(10 * 0.98 ** (round + 1), rel=1e-6)
    assert shared["zero-based"] == pytest.approx(10 * 0.98**round, rel=1e-6)


def test_neither_round_index_regularises_in_round_1():
    ctx = tiny_ctx(num_classes=3)
    model = ctx.build_model()
    for index in ("one-based", "zero-based"):
        s = FedGen(FedGenParams(round_index=index), ctx)
        first = tiny_client(ctx, 0, 0, model, model, {}, [0, 2, 2, 0])
        s.client_begin(first)
        assert not first.declared.shared and not first.declared.per_step


# ------------------------------------------------------------------ noise dimension
def test_the_noise_dimension_per_dataset_is_the_releases():
    cls = get_strategy_class("fedgen")
    noise = {
        (d, m): cls.make_params({}, d, m).noise_dim
        for d, m in (
            ("cifar10", "resnet8"), ("cifar100", "resnet8"), ("mnist5k", "cnn"),
            ("mnist", "cnn"), ("tinyimagenet", "resnet50"), ("agnews", "distilbert"),
            ("sst5", "distilbert"), ("synthtext", "distilbert"),
        )
    }  # fmt: skip
    assert noise == {
        ("cifar10", "resnet8"): 64, ("cifar100", "resnet8"): 64, ("mnist5k", "cnn"): 64,
        ("mnist", "cnn"): 64, ("tinyimagenet", "resnet50"): 2048,
        ("agnews", "distilbert"): 768, ("sst5", "distilbert"): 768,
        ("synthtext", "distilbert"): 768,
    }  # fmt: skip
    # given, it wins over the dataset's default
    assert cls.make_params({"noise_dim": 32}, "tinyimagenet", "resnet50").noise_dim == 32


def test_the_generator_and_the_clients_noise_take_the_noise_dimension():
    ctx = tiny_ctx(num_classes=3)
    s = FedGen(FedGenParams(gen_steps=2, hidden_dim=16, noise_dim=768), ctx)
    _fedgen_round(s, 0, _heads(1), [[4, 0, 4]])
    assert s.generator.hidden[0].in_features == 768 + 3
    model = ctx.build_model()
    client = _declared_steps(s, 0, ctx, model, s.payload(1, None), [0, 2, 2, 0], steps=3)
    assert client.declared.per_step["generated"].shape == (3, 4, 512)
    assert s._client_generator.noise_dim == 768


# ------------------------------------------------------------------ dtype
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_server_and_client_steps_run_in_the_models_dtype(dtype):
    """Under float64 the model, the uploaded heads and the generator are float64 (a server step
    that cast the heads to float32 would fail there); the generator trains as in float32."""
    counts = [[5, 1, 0], [0, 2, 9]]
    heads = [(w.to(dtype), b.to(dtype)) for w, b in _heads(2)]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        ctx = tiny_ctx(num_classes=3)
        runs = []
        for _ in range(2):
            s = FedGen(GEN_TINY, ctx)
            runs.append([_fedgen_round(s, r, heads, counts) for r in range(3)])
        assert runs[0] == runs[1]  # deterministic
        m = runs[0]
        assert all(math.isfinite(v) for row in m for v in row.values())
        assert m[2]["gen_teacher_loss"] < m[0]["gen_teacher_loss"]
        assert {v.dtype for v in s.generator.parameters()} == {dtype}
        model = ctx.build_model()
        assert model.classifier.weight.dtype == dtype
        client = _declared_steps(s, 0, ctx, model, s.payload(3, None), [0, 2, 2, 0])
        assert client.declared.per_step["generated"].dtype == dtype
        restored = FedGen(GEN_TINY, ctx)
        restored.load_state_dict(s.state_dict())
        assert {v.dtype for v in restored.generator.parameters()} == {dtype}
        assert _fedgen_round(restored, 3, heads, counts) == _fedgen_round(s, 3, heads, counts)
    finally:
        torch.set_default_dtype(previous)


# ------------------------------------------------------------------ spec, plan, caption
def test_the_choices_are_checked_and_recorded_in_the_spec():
    spec = RunSpec(strategy="fedgen", params={"label_counts": "ones", "round_index": "zero-based"})
    assert spec.params == {"label_counts": "ones", "round_index": "zero-based"}
    assert spec.hash() != RunSpec(strategy="fedgen").hash()
    for key, bad in (("label_counts", "counts"), ("round_index", "1")):
        with pytest.raises(SpecError, match=f"params.{key}='{bad}'; use one of"):
            RunSpec(strategy="fedgen", params={key: bad})
    assert FedGen.code_choices == {
        "label_counts": "real",
        "round_index": "one-based",
        "teacher_weighting": "batch",
    }
    with pytest.raises(SpecError, match="params.teacher_weighting='sample'; use one of"):
        RunSpec(strategy="fedgen", params={"teacher_weighting": "sample"})


def _train_args(cfg: dict) -> dict[str, str]:
    from fedkd.pipeline import Plan

    plan = Plan(cfg)
    runs = {run for name in plan.outputs for _, run in plan.target_runs(name)}
    out = {}
    for run in runs:
        dataset, variant, setting, seed = run.split("/")[2:6]
        out[run] = plan.train_args(dataset, variant, setting, seed.removeprefix("seed"))
    return out


@pytest.mark.parametrize(
    ("key", "value"),
    [("label_counts", "ones"), ("round_index", "zero-based"), ("teacher_weighting", "per-sample")],
)
def test_changing_a_choice_reruns_exactly_the_runs_of_that_variant(key, value):
    """A run's flags are its spec: the workflow re-runs a job whose flags change. Switching one
    FedGen variant of the default configuration changes exactly that variant's runs."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert cfg["variants"]["fedgen"]["params"] == {
        "label_counts": "real",
        "round_index": "one-based",
        "teacher_weighting": "batch",
    }
    before = _train_args(cfg)
    changed_cfg = copy.deepcopy(cfg)
    changed_cfg["variants"]["fedgen"]["params"][key] = value
    after = _train_args(changed_cfg)
    assert before.keys() == after.keys()
    changed = {run for run in before if before[run] != after[run]}
    fedgen_runs = {run for run in before if run.split("/")[3] == "fedgen"}
    assert fedgen_runs and changed == fedgen_runs
    assert all(f"{key}: {value}" in after[run] for run in changed)


def test_the_paper_configurations_fedgen_variants_state_their_choices():
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    fedgen = {n: v for n, v in cfg["variants"].items() if v["strategy"] == "fedgen"}
    assert set(fedgen) == {"fedgen-coef0.1", "fedgen-coef1", "fedgen-coef10"}
    for variant in fedgen.values():
        assert variant["params"]["label_counts"] == "real"
        assert variant["params"]["round_index"] == "one-based"
        assert variant["params"]["teacher_weighting"] == "batch"


def test_every_caption_of_a_table_with_a_fedgen_column_says_what_it_ran():
    for name in ("config", "paper"):
        cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
        fedgen = {n for n, v in cfg["variants"].items() if v["strategy"] == "fedgen"}
        tables = {
            t: entry
            for t, entry in cfg["tables"].items()
            if _column_variants(entry.get("columns") or {}) & fedgen
        }
        assert tables, name
        for t, entry in tables.items():
            caption = " ".join(entry["caption"].split())
            assert "FedGen" in caption and "label counts" in caption, (name, t)
            assert "label_counts ones" in caption, (name, t)


def _column_variants(columns: dict) -> set[str]:
    out = set()
    for column in columns.values():
        if isinstance(column, str):
            out.add(column)
        elif isinstance(column, dict):
            out |= set(column.get("best_of") or []) | {column.get("variant")}
            out |= {case.get("variant") for case in column.get("cases") or []}
    return out - {None}


def test_a_caption_names_a_fedgen_run_that_departs_from_a_default():
    import json

    import pandas as pd

    from fedkd.report.setting import setting_sentence

    def runs(**params):
        p = {"coef": 0.1, "label_counts": "real", "round_index": "one-based", **params}
        return pd.DataFrame(
            [{"run": "a", "strategy": "fedgen", "params": json.dumps(p), "clients": 10}]
        )

    default = setting_sentence(runs())
    assert "label_counts" not in default and "round_index" not in default
    text = setting_sentence(runs(label_counts="ones", round_index="zero-based"))
    assert "fedgen with label_counts ones, round_index zero-based" in text
