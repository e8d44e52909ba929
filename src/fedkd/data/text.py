"""Text-classification datasets as int64 token ids (N, max_len), ``[CLS]`` first, padding 0.

- AG News and SST-5 from files placed under the data root (``ag_news/`` and ``sst5/``:
  ``{train,test}.{parquet,csv}`` with columns ``text,label``, and SST-5's dev set as
  ``validation`` (or ``dev``); AG News also in its original headerless CSV
  ``class,title,description`` with classes 1-4), or from the Hugging Face hub via ``datasets``
  (read from ``<folder>/hf_cache`` offline; fetched only when downloads are allowed).
- ``synthtext``: a generated topic corpus for offline runs (below).

Splits, as in the FedGKD paper (Table 2) and the authors' code:
- AG News trains on 60,000 texts (``train_size``): 10% of the official 120,000 are held out for
  validation by ``seed`` as for every dataset (12,000), then 60,000 of the remaining 108,000 are
  drawn without replacement from an independent stream of the same seed and kept in file order.
  ``train_size=None`` keeps all 108,000.
- SST-5 trains on all 8,544 training texts and validates on its 1,101-text dev set (the authors'
  loader reads SST's ``dev`` split for validation); nothing is cut from the training set.

Tokenizers: ``word`` (lower-cased words of the training texts, ids 0 pad / 1 unknown / 2 [CLS])
or a Hugging Face tokenizer name, loaded from the local cache (default ``distilbert-base-uncased``,
the tokenizer of the papers' pretrained DistilBERT).
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from fedkd.data.base import (
    ArraySplit,
    DatasetCorruptError,
    DatasetNotFoundError,
    FedDataset,
    as_labels,
    split_train_val,
)
from fedkd.files import read_parquet_file

PAD, UNK, CLS = 0, 1, 2
MAX_DATASET_BYTES = 1 << 34  # a split file of text; AG News' training split is 30 MB
RESERVED = 3
DEFAULT_TOKENIZER = "distilbert-base-uncased"
DEFAULT_MAX_LEN = 128

AGNEWS_TRAIN_SIZE = 60_000  # fedgkd Table 2
SUBSET_STREAM = (
    1  # numpy SeedSequence (seed, 1): the training-subset draw, apart from the 90/10 split
)

TEXT_SETS = {
    "agnews": {
        "folder": "ag_news",
        "hub": "fancyzhx/ag_news",
        "class_names": ["World", "Sports", "Business", "Sci/Tech"],
    },
    "sst5": {
        "folder": "sst5",
        "hub": "SetFit/sst5",
        "class_names": ["very negative", "negative", "neutral", "positive", "very positive"],
        # the validation split is the dataset's own dev set: file names, and the hub's split
        "dev_files": ("validation", "dev"),
        "dev_hub": "validation",
    },
}


# ----------------------------------------------------------------------------- tokenizers


class WordTokenizer:
    """Words (``\\w+`` of the lower-cased text) of the training texts, most frequent first."""

    _word = re.compile(r"\w+")

    def __init__(self, texts: list[str], max_vocab: int | None = None):
        counts = Counter(w for t in texts for w in self.words(t))
        ordered = sorted(counts, key=lambda w: (-counts[w], w))
        if max_vocab is not None:
            ordered = ordered[: max(0, max_vocab - RESERVED)]
        self.index = {w: i + RESERVED for i, w in enumerate(ordered)}
        self.vocab_size = RESERVED + len(ordered)
        self.pad_id = PAD

    @classmethod
    def words(cls, text: str) -> list[str]:
        return cls._word.findall(text.lower())

    def encode(self, texts: list[str], max_len: int) -> np.ndarray:
        out = np.full((len(texts), max_len), PAD, dtype=np.int64)
        for i, t in enumerate(texts):
            ids = [CLS] + [self.index.get(w, UNK) for w in self.words(t)][: max_len - 1]
            out[i, : len(ids)] = ids
        return out


class HFTokenizer:
    """A pretrained Hugging Face tokenizer from the local cache (or the hub when allowed)."""

    def __init__(self, name: str, download: bool):
        try:
            from transformers import AutoTokenizer

            # a tokenizer that ships its own Python (an auto_map in a local folder or a hub
            # repository) is refused, never run and never asked about at a prompt a job waits on
            self.tok = AutoTokenizer.from_pretrained(
                name, local_files_only=not download, trust_remote_code=False
            )
        except ValueError as exc:
            if "trust_remote_code" not in str(exc) and "custom code" not in str(exc):
                raise DatasetNotFoundError(_tokenizer_missing(name, exc)) from exc
            raise DatasetNotFoundError(
                f"tokenizer {name!r} ships its own code, which fedkd does not run; use a "
                "tokenizer made of data files only (e.g. distilbert-base-uncased) or "
                "dataset_options {tokenizer: word}"
            ) from None
        except Exception as exc:
            raise DatasetNotFoundError(_tokenizer_missing(name, exc)) from exc
        self.vocab_size = len(self.tok)
        self.pad_id = int(self.tok.pad_token_id or 0)

    def encode(self, texts: list[str], max_len: int) -> np.ndarray:
        enc = self.tok(
            list(texts), padding="max_length", truncation=True, max_length=max_len,
            return_tensors="np",
        )  # fmt: skip
        return enc["input_ids"].astype(np.int64)


def _tokenizer_missing(name: str, exc: Exception) -> str:
    return (
        f"tokenizer {name!r} is not available ({type(exc).__name__}); place it in the "
        "Hugging Face cache (HF_HOME), allow downloads with FEDKD_DOWNLOAD=1, or use "
        "dataset_options {tokenizer: word}"
    )


# ----------------------------------------------------------------------------- files and hub


def _read_table(path: Path, name: str):
    """A split file as a DataFrame with lower-case column names; the original AG News CSV
    (no header; class 1-4, title, description) becomes columns text and label."""
    import pandas as pd

    try:
        if path.suffix == ".parquet":
            # from bytes on this thread, as fedkd reads its own files (fedkd.files.parquet_table)
            df = read_parquet_file(path, "a dataset split", MAX_DATASET_BYTES).to_pandas(
                use_threads=False
            )
        else:
            df = pd.read_csv(path, header=None, dtype=str, keep_default_na=False)
            first = [str(v).strip() for v in df.iloc[0]]
            if name == "agnews" and df.shape[1] == 3 and first[0].isdigit():
                return pd.DataFrame({"text": df[1] + " " + df[2], "label": df[0].astype(int) - 1})
            df = df.iloc[1:].reset_index(drop=True)
            df.columns = first  # the header row
    except Exception as exc:
        raise DatasetCorruptError(f"{path} cannot be read ({exc}); replace it") from exc
    df.columns = [str(c).strip().lower() for c in df.columns]
    return df


def _split_from_files(
    folder: Path, split: str, name: str, aliases: tuple[str, ...] = ()
) -> tuple[list[str], np.ndarray]:
    """``split`` read from ``<split>.parquet`` or ``.csv`` (or an alias's file); FileNotFoundError
    names the first file looked for."""
    for path in (
        folder / f"{n}{suffix}" for n in (split, *aliases) for suffix in (".parquet", ".csv")
    ):
        if path.is_file():
            df = _read_table(path, name)
            if not {"text", "label"} <= set(df.columns):
                raise DatasetCorruptError(
                    f"{path} has columns {list(df.columns)}; it needs columns text and label"
                )
            if df.empty:  # an empty test or dev split would score every round NaN (0 of 0)
                raise DatasetCorruptError(
                    f"{path} holds no text, only its columns; place the full {split} split there"
                )
            try:
                labels = df["label"].astype(np.int64).to_numpy()
            except (TypeError, ValueError) as exc:
                raise DatasetCorruptError(f"{path}: labels must be integers ({exc})") from exc
            return df["text"].astype(str).tolist(), labels
    raise FileNotFoundError(folder / f"{split}.parquet")


@contextmanager
def _hf_offline():
    """Hugging Face libraries in offline mode (cache only, no network retries), restored after:
    they read the switch from the environment at import and keep it in module constants, so they
    are imported first (imported inside, they would keep offline constants as the process's own)."""
    import datasets

    saved_env = {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    os.environ.update(dict.fromkeys(saved_env, "1"))
    switches = [
        (module, attr)
        for module in (datasets.config, sys.modules.get("huggingface_hub.constants"))
        for attr in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
        if module is not None and hasattr(module, attr)
    ]
    saved = [getattr(m, a) for m, a in switches]
    for m, a in switches:
        setattr(m, a, True)
    try:
        yield datasets
    finally:
        for (m, a), value in zip(switches, saved, strict=True):
            setattr(m, a, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _from_hub(info: dict, cache: Path, download: bool):
    """The HF dataset's train and test splits (and SST-5's dev split, as ``"dev"``); offline
    (cache only) unless downloads are allowed."""
    if download:
        import datasets

        loaded = datasets.load_dataset(info["hub"], cache_dir=str(cache))
    else:
        with _hf_offline() as datasets:
            loaded = datasets.load_dataset(info["hub"], cache_dir=str(cache))
    out = {}
    wanted = {"train": "train", "test": "test"}
    if "dev_hub" in info:
        wanted["dev"] = info["dev_hub"]
    for split, hub_split in wanted.items():
        part = loaded[hub_split]
        out[split] = (list(part["text"]), np.asarray(part["label"], dtype=np.int64))
    return out


def _load_texts(name: str, root: Path, download: bool):
    info = TEXT_SETS[name]
    folder = root / info["folder"]
    cache = folder / "hf_cache"
    dev_files = info.get("dev_files", ())
    try:
        splits = {s: _split_from_files(folder, s, name) for s in ("train", "test")}
        if dev_files:
            splits["dev"] = _split_from_files(folder, dev_files[0], name, dev_files[1:])
        return splits, str(folder)
    except FileNotFoundError as missing:
        needed = ", ".join(f"{n}.parquet" for n in ("train", "test", *dev_files[:1]))
        place = f"place {needed} (or .csv) with columns text,label in {folder}"
        if not (download or cache.is_dir()):
            raise DatasetNotFoundError(
                f"{name}: {missing.args[0]} not found; {place}, or set FEDKD_DOWNLOAD=1 to fetch "
                f"{info['hub']} from the Hugging Face hub into {cache}"
            ) from None
    try:
        return _from_hub(info, cache, download), f"huggingface:{info['hub']} ({cache})"
    except Exception as exc:
        mode = "download" if download else f"offline read of the cache {cache}"
        raise DatasetNotFoundError(
            f"{name}: no files under {folder} and the {mode} of {info['hub']} failed "
            f"({type(exc).__name__}: {exc}); {place}"
        ) from exc


def draw_subset(split: ArraySplit, size: int | None, seed: int) -> ArraySplit:
    """``size`` samples of ``split`` drawn without replacement by ``seed`` (its own stream, so the
    draw does not repeat the 90/10 split's permutation), kept in their original order; the whole
    split when ``size`` is None or not smaller."""
    if size is None or size >= len(split):
        return split
    rng = np.random.default_rng((int(seed), SUBSET_STREAM))
    index = np.sort(rng.choice(len(split), size=int(size), replace=False))
    return split.subset(torch.from_numpy(index))


def _load_text_set(
    name: str, root: Path, seed: int, download: bool, tokenizer: str, max_len: int,
    max_vocab: int | None, train_size: int | None = None,
) -> FedDataset:  # fmt: skip
    if int(max_len) < 2:
        raise ValueError(f"max_len={max_len} must be at least 2 ([CLS] and one token)")
    if train_size is not None and (int(train_size) != train_size or train_size < 1):
        raise ValueError(f"train_size={train_size!r} must be a positive integer, or null for all")
    splits, where = _load_texts(name, root, download)
    (train_texts, train_y), (test_texts, test_y) = splits["train"], splits["test"]
    k = len(TEXT_SETS[name]["class_names"])
    for split, (_, y) in splits.items():
        if len(y) and (y.min() < 0 or y.max() >= k):
            raise DatasetCorruptError(
                f"{name} {split} labels span {y.min()}..{y.max()}, expected 0..{k - 1}"
            )
    tok = (
        WordTokenizer(train_texts, max_vocab)
        if tokenizer == "word"
        else HFTokenizer(tokenizer, download)
    )

    def encode(texts, y):
        return ArraySplit(torch.from_numpy(tok.encode(texts, max_len)), as_labels(y))

    full, test = encode(train_texts, train_y), encode(test_texts, test_y)
    if "dev" in splits:  # the dataset's own dev set validates; all training texts train
        train, val = full, encode(*splits["dev"])
    else:
        train, val = split_train_val(full, seed)
    train = draw_subset(train, train_size, seed)
    drawn = "" if train_size is None else f", train_size={train_size}"
    return FedDataset(
        name, "text", k, train, val, test, class_names=list(TEXT_SETS[name]["class_names"]),
        source=f"{where} (tokenizer={tokenizer}, max_len={max_len}{drawn})",
        vocab_size=tok.vocab_size, pad_id=tok.pad_id,
    )  # fmt: skip


def load_agnews(
    root: Path, seed: int, download: bool, *, tokenizer: str = DEFAULT_TOKENIZER,
    max_len: int = DEFAULT_MAX_LEN, max_vocab: int | None = None,
    train_size: int | None = AGNEWS_TRAIN_SIZE,
) -> FedDataset:  # fmt: skip
    return _load_text_set("agnews", root, seed, download, tokenizer, max_len, max_vocab, train_size)


def load_sst5(
    root: Path, seed: int, download: bool, *, tokenizer: str = DEFAULT_TOKENIZER,
    max_len: int = DEFAULT_MAX_LEN, max_vocab: int | None = None,
) -> FedDataset:  # fmt: skip
    return _load_text_set("sst5", root, seed, download, tokenizer, max_len, max_vocab)


# ----------------------------------------------------------------------------- synthetic corpus


def load_synthtext(
    root: Path, seed: int, download: bool, *, num_classes: int = 4, num_docs: int = 4000,
    seq_len: int = 32, vocab: int = 1000, topic_words: int = 40, topic_rate: float = 0.2,
    corpus_seed: int = 0,
) -> FedDataset:  # fmt: skip
    """A topic corpus: every document mixes words of its class's topic (``topic_rate`` of its
    tokens) with background words drawn Zipf-like from the whole vocabulary. Neighbouring topics
    share a quarter of their words, so classes overlap in vocabulary as real topics do. The corpus
    and its 20% test split are fixed by ``corpus_seed``; the run ``seed`` only draws the 90/10
    train/validation split of the rest, as for the real datasets."""
    if num_classes < 2 or num_docs < 10 * num_classes or seq_len < 8:
        raise ValueError(
            f"synthtext needs num_classes >= 2 (got {num_classes}), num_docs >= 10 per class "
            f"(got {num_docs}) and seq_len >= 8 (got {seq_len})"
        )
    step = topic_words - topic_words // 4  # consecutive topics overlap by a quarter
    if vocab < step * num_classes + topic_words:
        raise ValueError(
            f"synthtext vocab={vocab} is too small for {num_classes} topics of {topic_words} "
            f"words; use vocab >= {step * num_classes + topic_words}"
        )
    rng = np.random.default_rng(corpus_seed)
    words = rng.permutation(vocab)  # topic k owns words[k*step : k*step + topic_words]
    zipf = 1.0 / np.arange(1, vocab + 1)
    background = zipf / zipf.sum()
    topic_p = zipf[:topic_words] / zipf[:topic_words].sum()

    y = rng.permutation(np.arange(num_docs) % num_classes)
    lengths = rng.integers(6, 2 * seq_len, size=num_docs).clip(max=seq_len - 1)
    from_topic = rng.random((num_docs, seq_len - 1)) < topic_rate
    topic_tok = words[
        y[:, None] * step + rng.choice(topic_words, (num_docs, seq_len - 1), p=topic_p)
    ]
    back_tok = rng.choice(vocab, (num_docs, seq_len - 1), p=background)
    tokens = np.where(from_topic, topic_tok, back_tok) + RESERVED
    tokens[np.arange(seq_len - 1)[None, :] >= lengths[:, None]] = PAD
    x = np.concatenate([np.full((num_docs, 1), CLS), tokens], axis=1).astype(np.int64)

    test_mask = np.zeros(num_docs, dtype=bool)
    for c in range(num_classes):  # a fixed, balanced 20% test split
        members = np.flatnonzero(y == c)
        test_mask[rng.permutation(members)[: len(members) // 5]] = True
    xs, ys = torch.from_numpy(x), as_labels(y)
    keep, test = torch.from_numpy(~test_mask), torch.from_numpy(test_mask)
    train, val = split_train_val(ArraySplit(xs[keep], ys[keep]), seed)
    return FedDataset(
        "synthtext", "text", num_classes, train, val, ArraySplit(xs[test], ys[test]),
        class_names=[f"topic {c}" for c in range(num_classes)],
        source=f"generated (corpus_seed={corpus_seed}, {num_docs} documents, vocab {vocab})",
        vocab_size=vocab + RESERVED, pad_id=PAD,
    )  # fmt: skip
