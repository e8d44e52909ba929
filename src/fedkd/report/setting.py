"""The sentence every table and figure caption ends with: the run setting its runs share (clients,
partition with its alpha or shards, C, local epochs E, rounds, model), the (stand-in) data sizes,
the seeds and what ± means. Read from the aggregate, so it states what was run, whatever the
configuration's caption says."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from fedkd.report.declared import declared_strategies
from fedkd.report.text import key_value
from fedkd.run_choices import choice_departures
from fedkd.values import load_json


def _values(df: pd.DataFrame, column: str) -> list:
    if column not in df.columns:
        return []
    values = {key_value(v) for v in df[column].unique()}
    return sorted(v for v in values if v is not None)


def _joined(values: list, fmt=lambda v: f"{v:g}" if isinstance(v, float) else str(v)) -> str:
    return ", ".join(fmt(v) for v in values)


def model_notes(name: str, options: dict) -> list[str]:
    """What a caption must say about a model beyond its name and options: distilbert without
    pretrained weights is a small encoder trained from scratch (fedkd.models.text), not the
    papers' pretrained DistilBERT."""
    if name == "distilbert" and not options.get("pretrained"):
        return ["small, trained from scratch"]
    return []


def _partition_texts(runs: pd.DataFrame) -> list[str]:
    """Each partition scheme with the alphas or shards its runs used, e.g. "dirichlet-equal
    (α = 0.1, 1)": a table whose alpha is no row key says so nowhere else."""
    texts = []
    for partition in _values(runs, "partition"):
        rows = runs[runs["partition"] == partition]
        alphas, shards = _values(rows, "alpha"), _values(rows, "shards")
        detail = f"α = {_joined(alphas)}" if alphas else ""
        if shards:
            detail = f"{_joined([int(s) for s in shards])} shards per client"
        texts.append(f"{partition} ({detail})" if detail else str(partition))
    return texts


def _model_texts(runs: pd.DataFrame) -> list[str]:
    """Each model with its options, e.g. "cnn (channels 16/32, head_init he, hidden 128)"."""
    if "model_options" not in runs.columns:
        return [str(m) for m in _values(runs, "model")]
    texts = set()
    for model, options in runs[["model", "model_options"]].drop_duplicates().itertuples(False):
        if key_value(model) is None:
            continue
        opts = (
            load_json(options, f"{model}'s model options")
            if isinstance(options, str) and options
            else {}
        )
        shown = model_notes(str(model), opts) + [
            f"{k} {'/'.join(str(x) for x in v) if isinstance(v, list) else v}"
            for k, v in sorted(opts.items())
        ]
        texts.add(f"{model} ({', '.join(shown)})" if shown else str(model))
    return sorted(texts)


def departures(strategy: str, params: dict[str, Any] | str | None) -> list[str]:
    """``"key value"`` for each published-code choice of ``strategy`` (its ``code_choices``)
    that ``params`` (the resolved parameters, or their JSON) sets to other than the default, e.g.
    ``["first_negative own-init"]``."""
    if isinstance(params, str):
        try:
            params = load_json(params, "the parameters") if params else {}
        except ValueError:  # not JSON, or nested too deep to be parameters
            return []
    if not isinstance(params, dict):
        return []
    declared = declared_strategies().get(strategy)
    out = []
    for key, default in (declared.code_choices if declared else {}).items():
        if key in params and params[key] != default:
            value = params[key]
            out.append(f"{key} {json.dumps(value) if isinstance(value, bool) else value}")
    return out


def _choice_texts(runs: pd.DataFrame) -> list[str]:
    """Each strategy whose runs depart from a published-code choice's default, e.g. "moon with
    first_negative own-init"."""
    if not {"strategy", "params"} <= set(runs.columns):
        return []
    texts = set()
    for strategy, params in runs[["strategy", "params"]].drop_duplicates().itertuples(False):
        shown = departures(str(strategy), params)
        if shown:
            texts.add(f"{strategy} with {', '.join(shown)}")
    return sorted(texts)


def _run_choice_texts(runs: pd.DataFrame) -> list[str]:
    """The run-level choices (fedkd.run_choices) any run departs from, where they can change
    its model, e.g. "classifier initialised N(0, 0.01)"."""
    if not {"model", "run_choices"} <= set(runs.columns):
        return []
    columns = ["model", "run_choices"] + (["model_options"] if "model_options" in runs else [])
    texts = set()
    for row in runs[columns].drop_duplicates().itertuples(False):
        options = getattr(row, "model_options", None)
        try:
            options = load_json(options, "model options") if isinstance(options, str) else {}
        except ValueError:
            options = {}
        texts.update(choice_departures(row.run_choices, str(row.model), options))
    return sorted(texts)


def setting_sentence(df: pd.DataFrame, ddof: int = 0, spread: bool = True) -> str:
    """E.g. "Runs: 10 clients, partition dirichlet-equal (α = 0.1), C = 0.2, E = 1, 5 rounds,
    model cnn (hidden 128); mnist5k 3,600 train / 1,000 test samples; seeds 0, 1 (± = population
    std over the seeds)." Keys that vary in the output list their values. ``spread`` False: the
    output shows no ± (the claims page), so the sentence says nothing of one."""
    runs = df.drop_duplicates("run") if "run" in df.columns else df
    parts = []
    clients = _values(runs, "clients")
    if clients:
        parts.append(f"{_joined(clients)} clients")
    partitions = _partition_texts(runs)
    if partitions:
        parts.append(f"partition {', '.join(partitions)}")
    for column, name in (("participation", "C"), ("local_epochs", "E")):
        values = _values(runs, column)
        if values:
            parts.append(f"{name} = {_joined(values)}")
    rounds = _values(runs, "rounds_planned")
    if rounds:
        parts.append(f"{_joined(rounds)} rounds")
    models = _model_texts(runs)
    if models:
        parts.append(f"model {', '.join(models)}")
    parts += _choice_texts(runs)
    parts += _run_choice_texts(runs)
    sentence = "Runs: " + ", ".join(parts) if parts else ""
    sizes = []
    if {"dataset", "train_size", "test_size"} <= set(runs.columns):
        for dataset, rows in runs.groupby("dataset", sort=True):
            train, test = _values(rows, "train_size"), _values(rows, "test_size")
            if train and test:
                sizes.append(
                    f"{dataset} {_joined(train, lambda v: f'{int(v):,}')} train / "
                    f"{_joined(test, lambda v: f'{int(v):,}')} test samples"
                )
    if sizes:
        sentence += ("; " if sentence else "Data: ") + ", ".join(sizes)
    seeds = _values(runs, "seed")
    if seeds:
        sentence += ("; " if sentence else "") + f"seed{'s' if len(seeds) > 1 else ''} "
        sentence += _joined(seeds)
        if spread and len(seeds) > 1:
            kind = "population std (ddof 0)" if ddof == 0 else "sample std (ddof 1)"
            sentence += f" (± = {kind} over the seeds)"
        elif spread:
            sentence += " (one seed: no ±)"
    return sentence + "." if sentence else ""


def with_setting(caption: str, df: pd.DataFrame, ddof: int = 0, spread: bool = True) -> str:
    sentence = setting_sentence(df, ddof, spread)
    caption = caption.strip()
    if not sentence or sentence in caption:
        return caption
    return f"{caption} {sentence}" if caption else sentence
