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

import yaml

from fedkd.data import DATASETS as _DATASET_REGISTRY

DATASETS = tuple(_DATASET_REGISTRY)  # the dataset registry, fedkd.data
PARTITIONS = ("dirichlet-equal", "dirichlet", "shards", "iid")
MODELS = ("auto", "resnet8", "resnet50", "cnn", "distilbert")
OPTIMIZERS = ("sgd", "adam")
DEVICES = ("auto", "cpu", "cuda", "mps")

# the model each dataset uses in the papers (fedgkd Section 5.1); "auto" resolves through this
DEFAULT_MODEL = {name: entry.model for name, entry in _DATASET_REGISTRY.items()}


# keys that decide where or how exactly a run executes, not its numbers' configuration: a run
# moved to another device or data root, or switched to deterministic kernels, still resumes
# engine: the K-client trainer (fedkd.engine.kclient) trains the same model on the same batches as
# the sequential one, equal up to summation order (tested) like a change of device: a how, not a what
# memory_format: the layout of image tensors; it changes only the order of floating-point sums
NOT_IN_IDENTITY = (
    "device", "data_root", "partition_file", "deterministic", "engine", "memory_format"
)  # fmt: skip
# keys left out of identity() while they hold their default, so adding them kept every existing
# spec's hash (and with it every finished run and checkpoint)
IDENTITY_UNLESS_DEFAULT = {"stop_at_acc": None}
ENGINES = ("auto", "sequential", "batched")
MEMORY_FORMATS = ("auto", "contiguous", "channels_last")


class SpecError(ValueError):
    """A run spec value is invalid; the message names the key, the value and the fix."""


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
    alpha: float | None = 1.0  # Dirichlet concentration (dirichlet schemes)
    shards: int | None = None  # shards per client (shards scheme)
    participation: float = 0.4  # C: fraction of clients sampled each round
    rounds: int = 10
    local_epochs: int = 2
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-5
    grad_clip: float | None = 10.0  # max gradient norm; None disables clipping
    # auto: crop (pad 4) + flip on colour images, none otherwise; or "none", "crop-flip"
    augment: str = "auto"
    seed: int = 0
    device: str = "auto"
    data_root: str | None = None  # None: $FEDKD_DATA or ./data
    partition_file: str | None = None  # a precomputed partition Parquet; None: compute it here
    # also evaluate the clients' local models before aggregation (costs an evaluation per client)
    eval_local: bool = False
    precision: str = "fp32"  # fp32, or bf16 autocast in local training
    # torch.compile the training model: none, default, reduce-overhead (CUDA graphs)
    compile: str = "none"
    # bit-identical repeats on GPUs: deterministic kernels, cuBLAS workspace, no cuDNN autotuning
    # (CPU runs repeat exactly without it); a how-exactly switch like device, so not in identity()
    deterministic: bool = False
    # local training: "batched" trains a round's clients side by side where the strategy and model
    # support it (else sequentially, with the reason in run.json); "sequential" one after another;
    # "auto" batched on CUDA, sequential on CPU, where batched measured slower (performance.md)
    engine: str = "auto"
    # layout of image batches and conv weights: "channels_last" (NHWC) trains the CNN 1.6x and
    # ResNet-8 1.3x faster on a CPU (performance.md); "auto" uses it on a CPU with the sequential
    # engine, and "contiguous" (NCHW) elsewhere
    memory_format: str = "auto"
    # end the run once the global test accuracy reaches this (rounds-to-target tables); None: never
    stop_at_acc: float | None = None
    model_options: dict[str, Any] = field(default_factory=dict)  # e.g. {"norm": "batch"}
    dataset_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ----------------------------------------------------------------------------- validation
    def validate(self) -> None:
        errors = spec_errors(self)
        if errors:
            raise SpecError("invalid run spec:\n  " + "\n  ".join(errors))

    @property
    def resolved_model(self) -> str:
        return DEFAULT_MODEL[self.dataset] if self.model == "auto" else self.model

    @property
    def clients_per_round(self) -> int:
        return max(1, int(round(self.participation * self.clients)))

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
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(
                f"unknown run spec key(s) {unknown}; valid keys are: {', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> RunSpec:
        path = Path(path)
        if not path.exists():
            raise SpecError(f"run spec file {path} does not exist")
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict):
            raise SpecError(f"run spec file {path} must hold a mapping of keys to values")
        data.update(overrides or {})
        return cls.from_dict(data)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def spec_errors(s: RunSpec) -> list[str]:
    """Every problem of a spec at once, each naming the key, the value and what to do."""
    from fedkd.strategies import strategy_names

    e: list[str] = []

    def choice(key: str, options: tuple[str, ...] | list[str]) -> None:
        value = getattr(s, key)
        if value not in options:
            e.append(f"{key}={value!r} is unknown; choose one of: {', '.join(options)}")

    choice("dataset", DATASETS)
    choice("model", MODELS)
    choice("partition", PARTITIONS)
    choice("optimizer", OPTIMIZERS)
    choice("device", DEVICES)
    choice("augment", ("auto", "none", "crop-flip"))
    choice("precision", ("fp32", "bf16"))
    choice("compile", ("none", "default", "reduce-overhead"))
    choice("engine", ENGINES)
    choice("memory_format", MEMORY_FORMATS)
    if s.stop_at_acc is not None and (not _is_number(s.stop_at_acc) or not 0 < s.stop_at_acc <= 1):
        e.append(f"stop_at_acc={s.stop_at_acc!r} must lie in (0, 1] (an accuracy), or null")
    names = strategy_names()
    if s.strategy not in names:
        e.append(f"strategy={s.strategy!r} is unknown; choose one of: {', '.join(names)}")
    if not isinstance(s.clients, int) or s.clients < 1:
        e.append(f"clients={s.clients!r} must be a positive integer")
    if s.partition in ("dirichlet-equal", "dirichlet"):
        if not _is_number(s.alpha) or s.alpha <= 0:
            e.append(
                f"alpha={s.alpha!r} must be a number > 0 for partition {s.partition!r} (e.g. 0.1, 0.5, 1)"
            )
    if s.partition == "shards" and (not isinstance(s.shards, int) or s.shards < 1):
        e.append(
            f"shards={s.shards!r} must be a positive integer (shards per client) for partition 'shards'"
        )
    if not _is_number(s.participation) or not 0 < s.participation <= 1:
        e.append(f"participation={s.participation!r} (C) must lie in (0, 1], e.g. 0.2")
    for key in ("rounds", "local_epochs", "batch_size"):
        v = getattr(s, key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            e.append(f"{key}={v!r} must be a positive integer")
    if not _is_number(s.lr) or s.lr <= 0:
        e.append(f"lr={s.lr!r} must be a number > 0")
    if not _is_number(s.momentum) or not 0 <= s.momentum < 1:
        e.append(f"momentum={s.momentum!r} must lie in [0, 1)")
    if not _is_number(s.weight_decay) or s.weight_decay < 0:
        e.append(f"weight_decay={s.weight_decay!r} must be >= 0")
    if s.grad_clip is not None and (not _is_number(s.grad_clip) or s.grad_clip <= 0):
        e.append(f"grad_clip={s.grad_clip!r} must be > 0, or null to disable clipping")
    if not isinstance(s.seed, int) or isinstance(s.seed, bool) or s.seed < 0:
        e.append(f"seed={s.seed!r} must be a non-negative integer")
    if not isinstance(s.deterministic, bool):
        e.append(f"deterministic={s.deterministic!r} must be true or false")
    for key in ("params", "model_options", "dataset_options"):
        if not isinstance(getattr(s, key), dict):
            e.append(f"{key}={getattr(s, key)!r} must be a mapping")
    if not e and s.strategy in names:
        from fedkd.strategies import get_strategy_class

        e.extend(get_strategy_class(s.strategy).param_errors(s.params))
    return e


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` with the value read as YAML (numbers, booleans, null, lists, mappings)."""
    if "=" not in text:
        raise SpecError(f"override {text!r} must look like key=value, e.g. rounds=20")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)
