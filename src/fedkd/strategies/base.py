"""What a strategy is: a name, hyperparameters with the paper's defaults, table-1 traits, and hooks.

The engine owns every loop (rounds, clients, batches), devices, seeding, checkpoints and metrics;
a strategy only answers the engine's questions:

    payload(round, global_model)          what the server sends besides the global weights
    client_begin(client)                  per-client set-up before local training (teachers, ...)
    local_loss(batch, client)             the local objective for one batch (default: CE)
    client_end(client)                    what the client uploads besides its weights
    aggregate(round, global_model, ups)   the new global weights (default: weighted mean)
    server_update(round, global_model, ups)  a server step after aggregation; returns metrics
    state_dict() / load_state_dict()      server and per-client state that survives rounds

Everything sent or uploaded is counted in bytes by walking the tensors, so the accounting cannot
drift from what the strategy actually exchanges.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from fedkd.models.base import FedModel


@dataclass(frozen=True)
class Traits:
    """The qualitative comparison of fedgkd's Table 1."""

    extra_information: str = "none"  # what clients and server share besides model parameters
    proxy_data: bool = False  # needs data beyond the clients' own (a public or unlabeled set)
    modifies_model: bool = False  # changes the network (e.g. adds a projection head)


@dataclass
class NoParams:
    pass


@dataclass
class ServerContext:
    """What a strategy may know about the run when it is built."""

    spec: Any  # RunSpec
    num_classes: int
    num_clients: int
    device: torch.device
    build_model: Any  # () -> FedModel, same architecture as the global model
    dataset: (
        Any  # FedDataset with splits on `device` (val for vote/feddf, train for unlabeled slices)
    )
    client_sizes: list[int]
    client_label_counts: torch.Tensor  # (num_clients, num_classes), int64
    # the run's batch preprocessing (fedkd.engine.preprocess.Preprocessor); None: built from spec
    preprocess: Any = None

    def preprocessor(self):
        """The run's preprocessing: augmentation policy, normalisation and memory format."""
        if self.preprocess is None:
            from fedkd.engine.preprocess import Preprocessor

            self.preprocess = Preprocessor(self.dataset, self.spec.augment, self.device)
        return self.preprocess


@dataclass
class ClientContext:
    """One client's view of one round; ``scratch`` holds a strategy's per-round locals."""

    client_id: int
    round: int  # 0-based
    model: FedModel  # the model being trained (starts from the global weights)
    global_model: FedModel  # a frozen copy of the received global model (eval mode)
    payload: dict[str, Any]
    data: Any  # ArraySplit of this client's training data, on the device
    num_classes: int
    device: torch.device
    build_model: Any
    preprocess: Any  # (x, train: bool) -> model input; augmentation when train
    scratch: dict[str, Any] = field(default_factory=dict)
    steps: int = 0  # local SGD steps taken so far


@dataclass
class LocalBatch:
    x: torch.Tensor  # model input (augmented, normalised)
    y: torch.Tensor
    features: torch.Tensor
    logits: torch.Tensor

    def ce(self, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(self.logits, self.y, reduction=reduction)


@dataclass
class ClientUpdate:
    client_id: int
    state: dict[str, torch.Tensor]  # the trained local model's state dict
    num_samples: int
    num_steps: int
    train_loss: float
    extras: dict[str, Any] = field(default_factory=dict)  # strategy uploads besides the weights


class Strategy:
    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    traits: ClassVar[Traits] = Traits()
    uses_projection_head: ClassVar[bool] = False
    # whether the batched client engine (fedkd.engine.batched) may train this strategy's clients
    # side by side; tests/test_batched.py holds every strategy that says so to the sequential
    # path's numbers. False, with a reason, where local_loss does what vmap cannot reproduce.
    batched: ClassVar[bool] = True
    batched_reason: ClassVar[str] = ""

    def __init__(self, params: Any, ctx: ServerContext):
        self.params = params
        self.ctx = ctx

    # ---------------------------------------------------------------- hyperparameters
    @classmethod
    def dataset_defaults(cls, dataset: str, model: str) -> dict[str, Any]:
        """Per-dataset/model defaults from the papers, applied before the user's overrides."""
        return {}

    @classmethod
    def param_errors(cls, given: dict[str, Any]) -> list[str]:
        names = {f.name for f in dataclasses.fields(cls.Params)}
        return [
            f"params.{k} is not a parameter of strategy {cls.name!r}; "
            f"its parameters are: {', '.join(sorted(names)) or '(none)'}"
            for k in sorted(set(given) - names)
        ]

    @classmethod
    def make_params(cls, given: dict[str, Any], dataset: str, model: str) -> Any:
        values = {**cls.dataset_defaults(dataset, model), **given}
        return cls.Params(**values)

    # ---------------------------------------------------------------- hooks (defaults = FedAvg)
    def payload(self, round: int, global_model: FedModel) -> dict[str, Any]:
        return {}

    def client_begin(self, client: ClientContext) -> None:
        pass

    def local_loss(self, batch: LocalBatch, client: ClientContext) -> torch.Tensor:
        return batch.ce()

    def client_end(self, client: ClientContext) -> dict[str, Any]:
        return {}

    def aggregate(
        self, round: int, global_model: FedModel, updates: list[ClientUpdate]
    ) -> dict[str, torch.Tensor]:
        return weighted_average([u.state for u in updates], self.client_weights(updates))

    def server_update(
        self, round: int, global_model: FedModel, updates: list[ClientUpdate]
    ) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # ---------------------------------------------------------------- helpers for subclasses
    def client_weights(self, updates: list[ClientUpdate]) -> torch.Tensor:
        """Uniform for equal-size partitions (FedDF/FedGKD), n_k-weighted otherwise."""
        from fedkd.data.partition import uses_uniform_weights

        if uses_uniform_weights(self.ctx.spec.partition):
            w = torch.ones(len(updates), dtype=torch.float64)
        else:
            w = torch.tensor([float(u.num_samples) for u in updates], dtype=torch.float64)
        return w / w.sum()


def weighted_average(
    states: list[dict[str, torch.Tensor]], weights: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Parameter-wise weighted mean; integer buffers (e.g. BN counters) take the first client's."""
    out = {}
    for key, first in states[0].items():
        if first.is_floating_point():
            acc = torch.zeros_like(first, dtype=torch.float64)
            for w, s in zip(weights.tolist(), states, strict=True):
                acc.add_(s[key].to(torch.float64), alpha=w)
            out[key] = acc.to(first.dtype)
        else:
            out[key] = first.clone()
    return out


def state_mean(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return weighted_average(
        states, torch.full((len(states),), 1.0 / len(states), dtype=torch.float64)
    )


def tensor_bytes(obj: Any) -> int:
    """Bytes of every tensor inside nested dicts/lists/tuples (what crosses the network)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def frozen_copy(model: FedModel) -> FedModel:
    import copy

    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m
