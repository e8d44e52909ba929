"""The resolved description of one federated run (``RunSpec``): load, override, validate, hash.

A run spec is everything that decides a run's numbers. It is written whole into ``run.json`` and
its hash guards checkpoints, so a restarted run never resumes from a different configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedkd.cutout_option import cutout_errors
from fedkd.data import DATASETS as _DATASET_REGISTRY
from fedkd.echo import shown
from fedkd.model_options import model_option_errors
from fedkd.run_choices import CHOICES as RUN_CHOICES
from fedkd.run_paths import DIRICHLET
from fedkd.runtime.seeding import clients_a_round
from fedkd.values import (
    ValueTooLarge,
    as_float,
    as_int,
    as_number,
    check_size,
    is_finite_number,
    is_int,
    load_json,
    load_value,
    load_yaml,
    positive_zero,
    yaml11_note,
)

DATASETS = tuple(_DATASET_REGISTRY)  # the dataset registry, fedkd.data
PARTITIONS = ("dirichlet-equal", "dirichlet", "shards", "iid")
MODELS = ("auto", "resnet8", "resnet50", "cnn", "distilbert")
OPTIMIZERS = ("sgd", "adam")
DEVICES = ("auto", "cpu", "cuda", "mps")

# the model each dataset uses in the papers (fedgkd Section 5.1); "auto" resolves through this
DEFAULT_MODEL = {name: entry.model for name, entry in _DATASET_REGISTRY.items()}


# keys that decide where or how exactly a run executes, not its numbers' configuration: a run
# moved to another device or data root, or switched to deterministic kernels, still resumes
# engine: the batched trainer (fedkd.engine.batched) trains the same model on the same batches as
# the sequential one, equal up to summation order (tested) like a change of device: a how, not a what
# memory_format: the layout of image tensors; it changes only the order of floating-point sums
NOT_IN_IDENTITY = (
    "device", "data_root", "partition_file", "deterministic", "engine", "memory_format"
)  # fmt: skip
# keys left out of identity() while they hold their default, so adding them kept every existing
# spec's hash (and with it every finished run and checkpoint)
IDENTITY_UNLESS_DEFAULT = {"stop_at_acc": None, "lr_decay": 1.0, "cutout": 0}
# "batched-eager": the batched trainer without CUDA graphs or torch.compile (fedkd.engine.choice)
ENGINES = ("auto", "sequential", "batched", "batched-eager", "batched-compiled")
PRECISIONS = ("fp32", "tf32", "bf16")
MEMORY_FORMATS = ("auto", "contiguous", "channels_last")

# the numeric keys, by kind: a float key holds a float whatever the spelling (1, 1.0, 1e0), so
# one run has one spec and one hash; an int key takes an integral float (rounds: 1e3)
FLOAT_KEYS = (
    "alpha", "participation", "lr", "lr_decay", "momentum", "weight_decay", "grad_clip",
    "stop_at_acc",
)  # fmt: skip
INT_KEYS = ("clients", "shards", "rounds", "local_epochs", "batch_size", "cutout", "seed")
# the keys that may be null, and what null means
NULLABLE = {
    "alpha": "no Dirichlet concentration (partitions shards, iid)",
    "shards": "no shards (partitions other than shards)",
    "grad_clip": "no gradient clipping",
    "stop_at_acc": "never stop early",
    "data_root": "$FEDKD_DATA or ./data",
    "partition_file": "partition inside the run",
}
# upper bounds of the counts: far above any paper's setting, low enough that a slip of the
# exponent (rounds: 1e12) is refused before a job starts
UPPER = {
    "clients": 1_000_000, "rounds": 100_000, "local_epochs": 10_000, "batch_size": 1_000_000,
    "shards": 1_000_000, "cutout": 1_000,
}  # fmt: skip
DIFF_CHARS = 1000  # a value in a spec's difference from its record: room to show where
SEED_LIMIT = 2**63  # seeds are stored as signed 64-bit integers (run.json → Parquet aggregate)
MAX_OPTION_VALUES = 1_000  # values in one params, model_options or dataset_options mapping


class _AlphaDefault:
    """alpha left unsaid: 1.0 for the Dirichlet schemes, none for shards and iid, which draw no
    proportions (a number there would be recorded as though the run had read it)."""

    def __repr__(self) -> str:
        return "1.0 for the dirichlet schemes, null for shards and iid"


ALPHA_DEFAULT: Any = _AlphaDefault()


class SpecError(ValueError):
    """A run spec value is invalid; the message names the key, the value and the fix."""


OPTION_KEYS = ("model_options", "dataset_options")


def numbers_as_held(fields: dict) -> dict:
    """A run spec's ``fields``, numbers as meant, as a RunSpec holds them (the plan writes a
    run's flags from it too): text spelling a number (``1e-5`` from YAML 1.1) becomes one, float
    keys hold floats (``--alpha 1`` and ``1.0`` are one spec), int keys take integral floats,
    strategy parameters their declared types; anything else is left for validate() to name."""
    held = dict(fields)
    numbers = {**dict.fromkeys(FLOAT_KEYS, as_float), **dict.fromkeys(INT_KEYS, as_int)}
    for key in numbers.keys() & held.keys():
        held[key] = numbers[key](held[key])
    for key in (k for k in OPTION_KEYS if isinstance(held.get(k), dict)):
        held[key] = {k: as_number(x) for k, x in held[key].items()}
    if isinstance(held.get("params"), dict):
        from fedkd.strategies import get_strategy_class, strategy_names
        from fedkd.strategies.param_types import normalise_params

        if held.get("strategy") in strategy_names():
            held["params"] = normalise_params(get_strategy_class(held["strategy"]), held["params"])
    return held


@dataclass
class RunSpec:
    dataset: str = "mnist5k"
    model: str = "auto"
    strategy: str = "fedavg"
    params: dict[str, Any] = field(
        default_factory=dict
    )  # strategy hyperparameters (override defaults)
    clients: int = 10
    partition: str = "dirichlet-equal"
    alpha: float | None = ALPHA_DEFAULT  # Dirichlet concentration (dirichlet schemes)
    shards: int | None = None  # shards per client (shards scheme)
    participation: float = 0.4  # C: fraction of clients sampled each round
    rounds: int = 10
    local_epochs: int = 2
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float = 0.05
    lr_decay: float = 1.0  # the learning rate's factor per round (FedNTD: 0.99)
    momentum: float = 0.9
    weight_decay: float = 1e-5
    grad_clip: float | None = 10.0  # max gradient norm; None disables clipping
    # auto: crop (pad 4) + flip on colour images, none otherwise; or "none", "crop-flip"
    augment: str = "auto"
    # Cutout: the side in pixels of a square blanked in each local training image (FedNTD: 16)
    cutout: int = 0
    seed: int = 0
    device: str = "auto"
    data_root: str | None = None  # None: $FEDKD_DATA or ./data
    partition_file: str | None = None  # a precomputed partition Parquet; None: compute it here
    # also evaluate the clients' local models before aggregation (costs an evaluation per client)
    eval_local: bool = False
    # fp32 (IEEE float32), tf32 (TF32 for GPU convolutions and matmuls, float32 elsewhere; on a
    # CPU the same arithmetic as fp32), or bf16 autocast in local training (reproducibility.py)
    precision: str = "fp32"
    # torch.compile the sequential trainer's model (a run with it trains sequentially): none,
    # default, reduce-overhead (CUDA graphs)
    compile: str = "none"
    # bit-identical repeats on GPUs: deterministic kernels, cuBLAS workspace, no cuDNN autotuning
    # (CPU runs repeat exactly without it); a how-exactly switch like device, so not in identity()
    deterministic: bool = False
    # local training: "batched" trains a round's clients side by side where the strategy and model
    # support it (else sequentially, with the reason in run.json), on CUDA as one CUDA graph a
    # step; "batched-eager" the same without graphs; "batched-compiled" graphs and the folded
    # model compiled (fedkd.engine.compiled_step); "sequential" one after another; "auto"
    # batched on CUDA, sequential on CPU, where batched measured slower (performance.md)
    engine: str = "auto"
    # layout of image batches and conv weights: "channels_last" (NHWC) trains the CNN 1.6x and
    # ResNet-8 1.3x faster on a CPU (performance.md); "auto" uses it on a CPU with the sequential
    # engine, and "contiguous" (NCHW) elsewhere
    memory_format: str = "auto"
    # end the run once the global test accuracy reaches this (rounds-to-target tables); None: never
    stop_at_acc: float | None = None
    # where the papers are silent, the authors' released code decides (fedkd.run_choices)
    classifier_init: str = "pytorch"
    weight_decay_exempt: str = "block-norms"
    bn_running_stats: str = "average"
    model_options: dict[str, Any] = field(default_factory=dict)  # e.g. {"norm": "batch"}
    dataset_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.alpha is ALPHA_DEFAULT:
            self.alpha = 1.0 if self.partition in DIRICHLET else None
        keys = (*FLOAT_KEYS, *INT_KEYS, *OPTION_KEYS, "params", "strategy")
        for key, value in numbers_as_held({k: getattr(self, k) for k in keys}).items():
            setattr(self, key, value)
        self.validate()

    # ----------------------------------------------------------------------------- validation
    def validate(self) -> None:
        errors = spec_errors(self)
        if errors:
            raise SpecError("invalid run spec:\n  " + "\n  ".join(errors))

    def lr_of_round(self, round: int) -> float:
        """The learning rate of 0-based ``round``: lr decayed once per round before it, as
        FedNTD's code steps its scheduler after each round."""
        return self.lr * self.lr_decay**round

    @property
    def resolved_model(self) -> str:
        return DEFAULT_MODEL[self.dataset] if self.model == "auto" else self.model

    @property
    def clients_per_round(self) -> int:
        return clients_a_round(self.clients, self.participation)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def identity(self) -> dict[str, Any]:
        """The fields that decide the numbers (device and paths excluded: a moved run still resumes)."""
        d = self.to_dict()
        for key in NOT_IN_IDENTITY:
            d.pop(key)
        for key, default in IDENTITY_UNLESS_DEFAULT.items():
            if d[key] == default:
                d.pop(key)
        return d

    def hash(self) -> str:
        return identity_hash(self.identity())

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known, key=str)
        if unknown:
            import difflib

            hints = [
                f"{shown(k)} (did you mean {shown(close[0])}?)"
                if (close := difflib.get_close_matches(str(k), known, n=1, cutoff=0.6))
                else repr(k)
                for k in unknown
            ]
            raise SpecError(
                f"unknown run spec key(s) {', '.join(hints)}; valid keys are: "
                f"{', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        overrides: dict[str, Any] | None = None,
        param_updates: dict[str, Any] | None = None,
    ) -> RunSpec:
        """The spec in ``path`` with ``overrides`` (whole keys) and ``param_updates`` (single
        strategy parameters, merged into the file's or the overrides' ``params``) applied."""
        path = Path(path)
        if not path.exists():
            raise SpecError(f"run spec file {path} does not exist")
        where = f"run spec file {path}"
        try:
            text = path.read_text(encoding="utf-8")
            data = load_json(text, where) if path.suffix == ".json" else load_yaml(text, where)
        except UnicodeDecodeError as exc:
            raise SpecError(f"{where} is not UTF-8 text ({exc}); save it as UTF-8") from None
        except OSError as exc:
            raise SpecError(f"{where} cannot be read: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise SpecError(f"{where} is not valid JSON: {exc}") from None
        except ValueError as exc:  # too large or deep, or not YAML: the message names the file
            raise SpecError(str(exc)) from None
        if not isinstance(data, dict):
            raise SpecError(f"{where} must hold a mapping of keys to values")
        data.update(overrides or {})
        where = "--params" if "params" in (overrides or {}) else f"params of {where}"
        return cls.from_dict(with_params(data, param_updates, where))


def identity_hash(identity: dict[str, Any]) -> str:
    """The hash of a spec's identity (RunSpec.hash; `fedkd aggregate` checks a recorded spec
    against its recorded hash with it)."""
    # -0.0 anywhere (an option's value) hashes as 0.0: the same number, the same run
    blob = json.dumps(positive_zero(identity), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def with_params(
    data: dict[str, Any], param_updates: dict[str, Any] | None, where: str
) -> dict[str, Any]:
    """``data`` with single strategy parameters merged into its ``params`` (``where`` names
    where those came from, for the error when they are not a mapping)."""
    if not param_updates:
        return data
    params = data.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise SpecError(
            f"{where} is {params!r}, not a mapping of parameters, so --param cannot add to it; "
            "give params as a mapping, e.g. {gamma: 0.2}"
        )
    return {**data, "params": {**params, **param_updates}}


def spec_errors(s: RunSpec) -> list[str]:
    """Every problem of a spec at once, each naming the key, the value and what to do."""
    from fedkd.strategies import choose_a_strategy, strategy_names

    e: list[str] = []

    def choice(key: str, options: tuple[str, ...] | list[str]) -> None:
        value = getattr(s, key)
        if value not in options:
            e.append(f"{key}={shown(value)} is unknown; choose one of: {', '.join(options)}")

    choice("dataset", DATASETS)
    choice("model", MODELS)
    choice("partition", PARTITIONS)
    choice("optimizer", OPTIMIZERS)
    choice("device", DEVICES)
    choice("augment", ("auto", "none", "crop-flip"))
    choice("precision", PRECISIONS)
    choice("compile", ("none", "default", "reduce-overhead"))
    choice("engine", ENGINES)
    choice("memory_format", MEMORY_FORMATS)
    for key, options in RUN_CHOICES.items():
        choice(key, options)
    if s.stop_at_acc is not None and (
        not is_finite_number(s.stop_at_acc) or not 0 < s.stop_at_acc <= 1
    ):
        e.append(f"stop_at_acc={shown(s.stop_at_acc)} must lie in (0, 1] (an accuracy), or null")
    names = strategy_names()
    if s.strategy not in names:
        e.append(f"strategy={shown(s.strategy)} is unknown; {choose_a_strategy()}")
    for key in ("clients", "rounds", "local_epochs", "batch_size"):
        v = getattr(s, key)
        if not is_int(v) or v < 1:
            e.append(
                f"{key}={shown(v)} must be a positive integer (true/false are not integers)"
                f"{yaml11_note(v)}"
            )
        elif v > UPPER[key]:
            e.append(f"{key}={shown(v)} is more than {UPPER[key]:,}; set a smaller value")
    if s.partition in DIRICHLET:
        if not is_finite_number(s.alpha) or s.alpha <= 0:
            e.append(
                f"alpha={s.alpha!r} must be a number > 0 for partition {s.partition!r} (e.g. 0.1, 0.5, 1)"
            )
    elif s.alpha is not None and s.partition in PARTITIONS:
        e.append(
            f"alpha={shown(s.alpha)}: partition {s.partition!r} draws no Dirichlet proportions, "
            "so it would be a number the run never reads; leave alpha out (or null), or choose "
            "partition dirichlet-equal or dirichlet"
        )
    if s.partition == "shards" and (not is_int(s.shards) or s.shards < 1):
        e.append(
            f"shards={s.shards!r} must be a positive integer (shards per client) for partition 'shards'"
        )
    elif s.partition == "shards" and s.shards > UPPER["shards"]:
        e.append(f"shards={shown(s.shards)} is more than {UPPER['shards']:,}; set a smaller value")
    elif s.shards is not None and s.partition in PARTITIONS and s.partition != "shards":
        e.append(
            f"shards={shown(s.shards)}: partition {s.partition!r} deals no shards, so it would "
            "be a number the run never reads; leave shards out (or null), or choose partition "
            "shards"
        )
    if not is_finite_number(s.participation) or not 0 < s.participation <= 1:
        e.append(f"participation={shown(s.participation)} (C) must lie in (0, 1], e.g. 0.2")
    if not is_finite_number(s.lr) or s.lr <= 0:
        e.append(f"lr={shown(s.lr)} must be a finite number > 0, e.g. 0.05 or 1e-3")
    if not is_finite_number(s.lr_decay) or not 0 < s.lr_decay <= 1:
        e.append(f"lr_decay={shown(s.lr_decay)} must lie in (0, 1]: 1 keeps lr, 0.99 is FedNTD's")
    if not is_int(s.cutout) or not 0 <= s.cutout <= UPPER["cutout"]:
        e.append(
            f"cutout={shown(s.cutout)} must be an integer from 0 (no Cutout) to "
            f"{UPPER['cutout']:,}: the side in pixels of the square Cutout blanks (FedNTD: 16)"
            f"{yaml11_note(s.cutout)}"
        )
    elif s.cutout:
        e += cutout_errors(s.cutout, s.dataset)
    if not is_finite_number(s.momentum) or not 0 <= s.momentum < 1:
        e.append(f"momentum={shown(s.momentum)} must lie in [0, 1)")
    if not is_finite_number(s.weight_decay) or s.weight_decay < 0:
        e.append(f"weight_decay={shown(s.weight_decay)} must be a finite number >= 0, e.g. 1e-5")
    if s.grad_clip is not None and (not is_finite_number(s.grad_clip) or s.grad_clip <= 0):
        e.append(
            f"grad_clip={s.grad_clip!r} must be a finite number > 0, or null to disable clipping"
        )
    if not is_int(s.seed) or not 0 <= s.seed < SEED_LIMIT:
        e.append(f"seed={shown(s.seed)} must be an integer from 0 to 2^63 - 1{yaml11_note(s.seed)}")
    for key in ("deterministic", "eval_local"):
        if not isinstance(getattr(s, key), bool):
            value = getattr(s, key)
            e.append(f"{key}={shown(value)} must be true or false{yaml11_note(value)}")
    for key in ("data_root", "partition_file"):
        if getattr(s, key) is not None and not isinstance(getattr(s, key), str):
            e.append(f"{key}={shown(getattr(s, key))} must be a path, or null ({NULLABLE[key]})")
    for key in ("params", "model_options", "dataset_options"):
        value = getattr(s, key)
        if not isinstance(value, dict):
            e.append(f"{key}={shown(value)} must be a mapping")
            continue
        try:
            check_size(value, key, MAX_OPTION_VALUES)
        except ValueTooLarge as exc:
            e.append(str(exc))
    if (
        isinstance(s.model_options, dict)
        and s.model in MODELS
        and s.dataset in DATASETS
        and not any(m.startswith("model_options") for m in e)
    ):
        e.extend(model_option_errors(s.resolved_model, s.model_options))
    if not e and s.strategy in names:
        from fedkd.strategies import get_strategy_class

        cls = get_strategy_class(s.strategy)
        e.extend(cls.param_errors(s.params))
        from fedkd.strategies.param_types import param_type_errors

        e.extend(type_errors := param_type_errors(cls, s.params))
        if not type_errors:  # the ranges, before any job starts; beside a misspelt name too
            e.extend(
                f"{problem} (strategy {shown(cls.name)})"
                for problem in cls.param_value_errors(s.params, s.dataset, s.resolved_model)
            )
    return e


# ---------------------------------------------------------------------------- overrides, diffs
def parse_override(text: str, flag: str = "--set") -> tuple[str, Any]:
    """``key=value`` given to ``flag``, the value read as YAML (numbers, true/false, null, lists,
    mappings; fedkd.values); a malformed or over-deep value is a SpecError naming the flag."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SpecError(f"{flag} {shown(text)} must look like key=value, e.g. {flag} rounds=20")
    try:
        return key, load_value(value, f"the value of {flag} {key}")
    except ValueError as exc:  # not YAML, or too large or deep: the message names the flag
        raise SpecError(str(exc)) from None


def spec_differences(recorded: dict[str, Any], spec: RunSpec) -> list[str]:
    """Why a recorded spec (run.json's ``spec``, whose recorded hash is not ``spec``'s) is not
    ``spec``'s run, one line per identity key: ``"key: <recorded> there, <given> now"`` where the
    values differ. The recorded spec is read through RunSpec, so one recorded before numbers were
    normalised (``alpha: 1``, ``-0.0``) does not differ in value from ``alpha: 1.0``, ``0.0``; its
    hash, taken from the value as written then, does, and where no value differs the keys written
    otherwise are named instead (never an empty list: the hashes differ for a reason)."""
    try:
        known = {f.name for f in dataclasses.fields(RunSpec)}
        old = RunSpec.from_dict({k: v for k, v in recorded.items() if k in known}).identity()
    except (SpecError, TypeError):
        old = dict(recorded)
    new = spec.identity()
    lines = []
    for key in sorted(set(old) | set(new)):
        if key in NOT_IN_IDENTITY:
            continue
        a, b = old.get(key, IDENTITY_UNLESS_DEFAULT.get(key)), new.get(key)
        if a != b:
            lines.append(f"{key}: {shown(a, DIFF_CHARS)} there, {shown(b, DIFF_CHARS)} now")
    if lines:
        return lines
    for key in sorted(set(new) | (set(recorded) & set(old))):
        if key in NOT_IN_IDENTITY:
            continue
        b = new.get(key, IDENTITY_UNLESS_DEFAULT.get(key))
        if key not in recorded:
            lines.append(
                f"{key}: absent there (recorded before the key existed), {shown(b, DIFF_CHARS)} now"
            )
        elif _as_written(recorded[key]) != _as_written(b):
            lines.append(
                f"{key}: {shown(recorded[key], DIFF_CHARS)} there, {shown(b, DIFF_CHARS)} now (the "
                "same value, but the recorded hash was taken from it as written then)"
            )
    return lines or [
        "no key: the recorded spec_hash was not taken from the recorded spec (run.json edited?)"
    ]


def _as_written(value: Any) -> str:
    """A value as its JSON spells it: 1 and 1.0, -0.0 and 0.0 apart."""
    return json.dumps(value, sort_keys=True, default=str)
