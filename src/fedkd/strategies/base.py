"""What a strategy is: a name, hyperparameters with the paper's defaults, table-1 traits, and hooks.

The engine owns every loop (rounds, clients, batches), devices, seeding, checkpoints and metrics;
a strategy only answers the engine's questions. Per round, in this order:

    payload(round, global_model)          what the server sends besides the global weights
    client_begin(client)                  for every selected client, before any trains: declares
                                          what its local_loss will read (below)
    local_loss(batch, ctx)                the local objective of one step (default: CE), called
                                          by one of two trainers: one client after another, or
                                          the K selected clients side by side (vmapped over K)
    client_end(client)                    for every client, after all trained: what it uploads
                                          besides its weights
    aggregate(round, global_model, ups)   the new global weights (default: weighted mean)
    server_update(round, global_model, ups)  a server step after aggregation; returns metrics
    state_dict() / load_state_dict()      server and per-client state that survives rounds

The contract of ``local_loss(batch, ctx)``, the same in both trainers:
- It reads only ``batch`` (``LocalBatch``: this client's inputs, labels, sample weights and the
  student's features and logits) and ``ctx`` (``LocalContext``): the student's parameters, the
  received global parameters, and what ``client_begin`` declared on the ``ClientContext``:
  ``share_model``/``own_model`` (frozen models whose outputs on the batch the engine computes:
  ``ctx.outputs[name]``; a name is one or the other), ``share``/``own`` (tensors:
  ``ctx.shared``/``ctx.own``) and ``own_per_step`` (one row per local step: ``ctx.step``).
  Shared means identical for every client of the round; own means this client's (every client
  declares the same names and shapes).
- It returns a scalar; per-sample terms are averaged with ``batch.mean`` (padding slots weigh 0).
- It may branch on which names were declared, never on tensor values (no ``.item()``, no
  ``if tensor``), draws no random numbers (declare them per step instead), and keeps no state:
  in the batched trainer it runs under ``torch.func.vmap`` and may be recorded once as a CUDA
  graph and replayed for every step of every round.
- ``client_begin`` and ``client_end`` run outside training, one client at a time, and may do
  anything (evaluate, keep per-client state). In ``client_begin`` ``client.model`` holds the
  global weights; in ``client_end`` the client's trained weights and ``client.steps`` its steps.

Everything sent or uploaded is counted in bytes by walking the tensors, so the accounting cannot
drift from what the strategy actually exchanges.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

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
    # the run's batch preprocessing (fedkd.runtime.preprocess.Preprocessor); None: built from spec
    preprocess: Any = None

    def preprocessor(self):
        """The run's preprocessing: augmentation policy, normalisation and memory format."""
        if self.preprocess is None:
            from fedkd.runtime.preprocess import Preprocessor

            self.preprocess = Preprocessor(self.dataset, self.spec.augment, self.device)
        return self.preprocess


class Outputs(NamedTuple):
    """A model's penultimate features and logits on a batch."""

    features: torch.Tensor
    logits: torch.Tensor


@dataclass
class Declared:
    """What a client's ``client_begin`` declared for its ``local_loss`` (see the module doc)."""

    shared_models: dict[str, FedModel] = field(default_factory=dict)
    own_models: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)
    own: dict[str, Any] = field(default_factory=dict)
    per_step: dict[str, torch.Tensor] = field(default_factory=dict)

    def names(self) -> tuple:
        return tuple(
            tuple(sorted(d))
            for d in (self.shared_models, self.own_models, self.shared, self.own, self.per_step)
        )


@dataclass
class ClientContext:
    """One client's view of one round in ``client_begin`` and ``client_end``."""

    client_id: int
    round: int  # 0-based
    model: FedModel  # begin: the global weights; end: the client's trained weights
    global_model: FedModel  # a frozen copy of the received global model (eval mode)
    payload: dict[str, Any]
    data: Any  # ArraySplit of this client's training data, on the device
    num_classes: int
    device: torch.device
    build_model: Any
    preprocess: Any  # (x, train=False) -> model input
    num_steps: int = 0  # the local steps this client takes this round
    batch_size: int = 0
    seed: int = 0  # this client's seed for the round: declare random draws from it
    steps: int = 0  # in client_end: the local steps taken
    declared: Declared = field(default_factory=Declared)

    # ---------------------------------------------------------------- declarations
    def share_model(self, name: str, model: FedModel) -> None:
        """A frozen model, the same object for every client: ``ctx.outputs[name]`` holds its
        outputs on each batch (computed once for all clients side by side)."""
        self._one_kind_of_model(name, self.declared.own_models, "own_model")
        if model.training and any(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()
        ):
            # in training mode its statistics would move with every batch it sees, one client
            # after another in one trainer and once for all in the other
            raise ValueError(
                f"share_model({name!r}) got a model in training mode with BatchNorm: a frozen "
                "model normalises with its running statistics; pass it in eval mode (.eval())"
            )
        self.declared.shared_models[name] = model

    def own_model(self, name: str, state: dict[str, torch.Tensor]) -> None:
        """A frozen model of the student's architecture with this client's weights (``state``,
        a state dict): ``ctx.outputs[name]`` holds its outputs on each batch."""
        self._one_kind_of_model(name, self.declared.shared_models, "share_model")
        self.declared.own_models[name] = state

    @staticmethod
    def _one_kind_of_model(name: str, other: dict, declared_by: str) -> None:
        # ctx.outputs has one entry per name: which of two models it held depended on the engine
        if name in other:
            raise ValueError(
                f"model {name!r} is already declared with {declared_by} this round; a name is "
                "either a shared or an own model: give the other one another name"
            )

    def share(self, name: str, value: Any) -> None:
        """A tensor (or number) identical for every client: ``ctx.shared[name]``. Numbers become
        0-d tensors, so a value that changes between rounds is read, not baked in."""
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value), device=self.device)
        self.declared.shared[name] = value

    def own(self, name: str, value: Any) -> None:
        """This client's tensor, or dict of tensors (same shapes for every client):
        ``ctx.own[name]``."""
        if not isinstance(value, (torch.Tensor, dict)):
            value = torch.tensor(float(value), device=self.device)
        self.declared.own[name] = value

    def own_per_step(self, name: str, value: torch.Tensor) -> None:
        """(num_steps, ...): row s is ``ctx.step[name]`` at this client's local step s."""
        if value.shape[0] != self.num_steps:
            raise ValueError(
                f"own_per_step({name!r}): {value.shape[0]} rows for {self.num_steps} local steps"
            )
        self.declared.per_step[name] = value


@dataclass
class LocalContext:
    """What ``local_loss`` may read besides the batch (see the module doc)."""

    params: dict[str, torch.Tensor]  # this client's trainable parameters, by name
    model: Any  # the student with these parameters, callable (e.g. model.classifier(z))
    global_params: dict[str, torch.Tensor]  # the received global model's, frozen
    outputs: dict[str, Outputs] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)
    own: dict[str, Any] = field(default_factory=dict)
    step: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class LocalBatch:
    x: torch.Tensor  # model input (augmented, normalised)
    y: torch.Tensor
    features: torch.Tensor
    logits: torch.Tensor
    # per-sample weights summing to 1 (padding slots 0); None: a plain mean over the batch
    weight: torch.Tensor | None = None

    def mean(self, per_sample: torch.Tensor) -> torch.Tensor:
        """The batch mean of a per-sample quantity (padding slots excluded)."""
        if self.weight is None:
            return per_sample.mean()
        return (per_sample * self.weight).sum()

    def ce(self) -> torch.Tensor:
        return self.mean(per_sample_ce(self.logits, self.y))


def per_sample_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per sample: -log_softmax at the label, picked by a one-hot product. What
    F.cross_entropy computes, in half the kernels under vmap (its batching rule decomposes
    nll_loss into a dozen ops), and with a multiplication for a backward where a gather would
    need a scatter (which CUDA's deterministic mode may refuse)."""
    classes = torch.arange(logits.shape[-1], device=logits.device)
    return -(F.log_softmax(logits, dim=-1) * (y.unsqueeze(-1) == classes)).sum(-1)


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
    # The name tables and figures show; "" shows the class's name (FedProx). The report reads it,
    # and code_choices, from the module's source without importing it: write each as a literal.
    # (The module's source is hashed into its runs' parameters: renaming here re-runs them; a
    # table's column_names option renames without that.)
    display_name: ClassVar[str] = ""
    # Where published code bases disagree on a detail their papers leave open, the parameter that
    # selects each behaviour, with its default (the same as its Params default): a caption names
    # a run that departs from it (fedkd.report.setting).
    code_choices: ClassVar[dict[str, Any]] = {}
    traits: ClassVar[Traits] = Traits()
    uses_projection_head: ClassVar[bool] = False
    # whether the batched trainer (fedkd.engine.batched) may train this strategy's clients side
    # by side; tests/test_trainers.py holds every strategy that says so to the sequential
    # trainer's numbers. False, with a reason, for a local_loss that breaks the contract above.
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
        from fedkd.echo import safe_text

        names = {f.name for f in dataclasses.fields(cls.Params)}
        return [
            f"params.{safe_text(k)} is not a parameter of strategy {cls.name!r}; "
            f"its parameters are: {', '.join(sorted(names)) or '(none)'}"
            for k in sorted(set(given) - names)
        ]

    @classmethod
    def make_params(cls, given: dict[str, Any], dataset: str, model: str) -> Any:
        values = {**cls.dataset_defaults(dataset, model), **given}
        return cls.Params(**values)

    @classmethod
    def param_value_errors(cls, given: dict[str, Any], dataset: str, model: str) -> list[str]:
        """Every value that ``make_params`` would refuse in ``given`` (over the dataset's
        defaults), each named with its value and what is allowed, so that a run spec is refused
        when it is read or planned rather than inside its training job. A name the strategy does
        not have is ``param_errors``'s to name."""
        names = {f.name for f in dataclasses.fields(cls.Params)}
        given = {k: v for k, v in given.items() if k in names}
        values = {**cls.dataset_defaults(dataset, model), **given}
        value_errors = getattr(cls.Params, "value_errors", None)
        if value_errors is not None:  # a CheckedParams
            return value_errors(values)
        try:
            cls.Params(**values)
        except (ValueError, TypeError) as exc:
            return [str(exc)]
        return []

    # ---------------------------------------------------------------- hooks (defaults = FedAvg)
    def payload(self, round: int, global_model: FedModel) -> dict[str, Any]:
        return {}

    def client_begin(self, client: ClientContext) -> None:
        pass

    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        return batch.ce()

    def checked_local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:
        """``local_loss`` as the trainers call it: refused, naming the strategy and what it
        returned, unless it is a scalar tensor (a per-sample loss left unaveraged failed inside
        autograd, or the batched trainer's sums, naming neither)."""
        loss = self.local_loss(batch, ctx)
        if isinstance(loss, torch.Tensor) and loss.dim() == 0:
            return loss
        got = (
            f"a tensor of shape {tuple(loss.shape)}"
            if isinstance(loss, torch.Tensor)
            else f"a {type(loss).__name__}"
        )
        raise ValueError(
            f"strategy {self.name!r}: local_loss returned {got}; it must return a scalar "
            "(average per-sample terms with batch.mean(...))"
        )

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
