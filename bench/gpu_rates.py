"""The training rates ``bench/paper_gpu_hours.py`` costs runs at: ``--rate MODEL=IMG_PER_S`` or
``--rate STRATEGY:MODEL=IMG_PER_S``, parsed, checked against the models and strategies fedkd
knows, and matched to a run (its strategy's rate on its model, else its model's)."""

from __future__ import annotations

import math
from collections import defaultdict

RATE_HELP = (
    "--rate MODEL=IMG_PER_S or --rate STRATEGY:MODEL=IMG_PER_S, e.g. --rate resnet8=70019 (a "
    "model with options: resnet8[norm=batch])"
)


class RateError(ValueError):
    """A bad --rate: the message names the value and the fix."""


RateKey = tuple[str | None, str]  # (strategy or None for every strategy, model)


def key_text(key: RateKey) -> str:
    strategy, model = key
    return f"{strategy}:{model}" if strategy else model


def parse_rate_syntax(text: str) -> tuple[RateKey, float]:
    """``[STRATEGY:]MODEL=IMG_PER_S`` → ((strategy or None, model), rate); names unchecked."""
    name, sep, value = text.rpartition("=")  # the last: a model's options hold "=" too
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise RateError(f"--rate {text!r} is not NAME=IMG_PER_S; give {RATE_HELP}")
    strategy, colon, model = name.rpartition(":")
    if colon and (not strategy or not model):
        raise RateError(
            f"--rate {text!r}: {name!r} is not MODEL or STRATEGY:MODEL; give {RATE_HELP}"
        )
    try:
        rate = float(value)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise RateError(
            f"--rate {text!r}: {value!r} is not a positive number of images per second; "
            f"give {RATE_HELP}"
        )
    base, pairs = _option_pairs(model)
    if pairs is not None:  # its options by name, as a run's are keyed (RunCost.rate_model)
        model = f"{base}[{','.join(sorted(pairs))}]"
    return (strategy or None, model), rate


def check_rate_names(rates: dict[RateKey, float], variants: dict | None = None) -> None:
    """Every model a known model (as a run spec resolves ``model: auto``), every strategy a
    registered one; a variant's name given for a strategy is answered with its strategy."""
    from fedkd.config import DEFAULT_MODEL, MODELS
    from fedkd.model_options import model_option_errors
    from fedkd.strategies import strategy_names

    models = [m for m in MODELS if m != "auto"]
    strategies = strategy_names()
    for key in rates:
        strategy, model = key
        model, options = _model_and_options(key)
        if model not in models:
            on = defaultdict(list)
            for dataset, default in DEFAULT_MODEL.items():
                on[default].append(dataset)
            auto = "; ".join(f"{m} on {', '.join(ds)}" for m, ds in on.items())
            hint = f" (model auto resolves per dataset: {auto})" if model == "auto" else ""
            raise RateError(
                f"--rate {key_text(key)}=...: {model!r} is not a model; key rates on the model a "
                f"run resolves to, one of: {', '.join(models)}{hint}"
            )
        problems = model_option_errors(model, options) if options is not None else []
        if options is not None and (not options or problems):
            said = "; ".join(problems) or "no option between its brackets"
            raise RateError(
                f"--rate {key_text(key)}=...: {said}; give the options as a run spec's "
                "model_options, key=value joined by commas (resnet8[norm=batch])"
            )
        if strategy is not None and strategy not in strategies:
            variant = (variants or {}).get(strategy)
            hint = (
                f"; {strategy!r} is a variant of strategy {variant['strategy']!r}: give "
                f"--rate {variant['strategy']}:{model}=..."
                if isinstance(variant, dict) and "strategy" in variant
                else f"; strategies: {', '.join(strategies)}"
            )
            raise RateError(f"--rate {key_text(key)}=...: {strategy!r} is not a strategy{hint}")


def _option_pairs(model: str) -> tuple[str, list[str] | None]:
    """``resnet8[norm=batch]`` → ("resnet8", ["norm=batch"]); None where it names no options."""
    base, bracket, rest = model.partition("[")
    if not bracket:
        return base, None
    return base, [p.strip() for p in rest.removesuffix("]").split(",") if p.strip()]


def _model_and_options(key: RateKey) -> tuple[str, dict | None]:
    """A rate's model and its options: ``resnet8[norm=batch]`` → ("resnet8", {"norm": "batch"});
    None where it names none. Values are read as the configuration reads them (YAML)."""
    import yaml

    model, pairs = _option_pairs(key[1])
    if pairs is None:
        return model, None
    options = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        options[name.strip()] = yaml.safe_load(value) if value.strip() else None
    return model, options


def parse_rates(texts: list[str], variants: dict | None = None) -> dict[RateKey, float]:
    """The --rate values, checked: their form and numbers, then their names."""
    rates = parse_rate_texts(texts)
    check_rate_names(rates, variants)
    return rates


def parse_rate_texts(texts: list[str]) -> dict[RateKey, float]:
    """The --rate values' form and numbers, each key once; names unchecked."""
    rates: dict[RateKey, float] = {}
    given: dict[RateKey, str] = {}
    for text in texts:
        key, rate = parse_rate_syntax(text)
        if key in rates:
            raise RateError(
                f"--rate {key_text(key)} is given twice ({given[key]!r} and {text!r}); give it once"
            )
        rates[key], given[key] = rate, text
    return rates


def match_rate(rates: dict[RateKey, float], strategy: str, model: str) -> RateKey | None:
    """The most specific rate of a run: its strategy's on its model, else its model's."""
    for key in ((strategy, model), (None, model)):
        if key in rates:
            return key
    return None
