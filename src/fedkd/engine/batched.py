"""Batched local training: a round's selected clients trained side by side in one process.

The sequential path (``fedkd.engine.client.local_train``) runs one client after another. Here the
trainable parameters of all K selected clients are stacked along a leading dimension and every
local step is one ``torch.func.vmap`` over ``grad`` of the client's loss, so the K clients' small
kernels become one set of wider kernels.

Exactness against the sequential path:
- every client keeps its own generators, seeded as ``local_train`` seeds them
  (``derive_seed(seed, "client", round, cid)``): the same shuffles and augmentation draws;
- clients advance in lockstep, one step each per iteration; at each iteration the still-active
  clients are grouped by their current batch size (and by the shape of their strategy scratch,
  below) and each group is one vmapped step, so a last partial batch keeps its exact size and a
  finished client takes no step at all (no momentum or weight-decay update either);
- gradient clipping uses each client's own total norm; SGD (``ForeachSGD``'s arithmetic) and Adam
  (``torch.optim.Adam``'s) keep per-client state.
The only differences are floating-point ones (vmapped kernels sum in another order); the tests
hold the two paths to 1e-4 max abs on the weights after two rounds and to equal accuracies.

Strategy hooks run unchanged: ``client_begin`` per client (sequentially, on a worker model holding
the global weights), then inside the vmapped loss ``local_loss`` sees a per-client view:
- ``client.model`` is a ``FunctionalModel`` over the client's slice of the stacked parameters;
- tensors in ``client.scratch`` that are the same object for every client are shared, others are
  stacked and vmapped; a tensor that *is* a worker parameter (SCAFFOLD keeps references) becomes
  the client's functional parameter;
- modules in scratch that hold the same weights for every client are shared (teachers); modules
  whose weights differ per client (MOON reloads one model with each client's previous weights)
  are snapshotted after each ``client_begin``, stacked, and called through their parameters;
- anything else (numbers, None, other objects) must be equal across a group: clients whose scratch
  differs in structure or such values are simply put in different groups.
After training each client's weights are written back into the worker, ``client_end`` runs as in
the sequential path, and the update is built from the worker's state.

Strategies opt out with ``Strategy.batched = False`` (e.g. FedGen draws from the global random
generator inside ``local_loss``); models with BatchNorm (running statistics are per-client
buffers updated in the forward pass) or active dropout (vmapped random draws cannot reproduce the
sequential ones) fall back as well. ``engine_choice`` says which path runs and why; the spec's
default, ``engine: auto``, runs batched on CUDA only: on a CPU the vmapped kernels have no launch
overhead to save and measured slower than the sequential path (docs/performance.md).

CUDA graphs (``FEDKD_CUDA_GRAPHS=1`` on a CUDA device): each group shape's whole step (forward,
backward, clipping, optimizer, loss accumulation) is captured once per round over static buffers
and replayed; batch gathering and augmentation fill the static inputs outside the graph. This
path has not been run on a GPU by its author (no GPU was available); see tests/test_batched_gpu.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import vmap
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils._pytree import tree_flatten, tree_unflatten

from fedkd.engine.evaluate import evaluate
from fedkd.engine.seeding import derive_seed
from fedkd.strategies.base import ClientContext, ClientUpdate, LocalBatch, Strategy, frozen_copy

# engine "auto" off CUDA: the vmapped kernels have no launch overhead to save on a CPU, and the
# batch rules' layout copies and grouped convolutions cost more than they save
AUTO_ON_CPU = (
    "engine auto: sequential off CUDA, where the batched engine measured slower "
    "(docs/performance.md); engine: batched forces it"
)
GRAPHS_ENV = "FEDKD_CUDA_GRAPHS"
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


# ---------------------------------------------------------------------------------- support
def model_unsupported_reason(model: nn.Module) -> str | None:
    """Why this model cannot train batched with sequential-exact numbers (None: it can)."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return (
                f"the model has BatchNorm ({name}): its running statistics are per-client buffers "
                "updated in the forward pass"
            )
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            return (
                f"the model has active dropout ({name}, p={m.p}): vmapped random draws cannot "
                "reproduce the sequential ones"
            )
    return None


def graphs_requested(device: torch.device) -> bool:
    return device.type == "cuda" and os.environ.get(GRAPHS_ENV, "0") not in ("", "0")


def engine_choice(spec, strategy: Strategy, model: nn.Module, device: torch.device) -> dict:
    """Which local-training path runs, and why: ``{"requested", "used", "reason"}`` (+ graphs)."""
    requested = getattr(spec, "engine", "sequential")
    reason = None
    wanted = requested
    if requested == "auto":
        wanted = "batched" if device.type == "cuda" else "sequential"
        if wanted == "sequential":
            reason = AUTO_ON_CPU
    if wanted == "batched":
        if not type(strategy).batched:
            reason = f"strategy {type(strategy).name!r} declares batched = False" + (
                f": {type(strategy).batched_reason}" if type(strategy).batched_reason else ""
            )
        elif getattr(spec, "compile", "none") != "none":
            reason = f"compile={spec.compile!r} compiles the sequential worker model"
        else:
            reason = model_unsupported_reason(model)
    used = "batched" if wanted == "batched" and reason is None else "sequential"
    choice = {"requested": requested, "used": used, "reason": reason}
    if used == "batched":
        choice["cuda_graphs"] = graphs_requested(device)
    return choice


# ---------------------------------------------------------------------------------- model view
class FunctionalModel:
    """A module called with given tensors in place of its parameters and buffers.

    ``client.model`` inside the vmapped loss: ``features_and_logits``, ``features``, ``forward``
    and any other method run the real module's code with these tensors (``functional_call``'s
    mechanism); ``parameters()`` / ``named_parameters()`` yield them in the module's order, and
    submodules (``.classifier``) are views over the matching subset."""

    def __init__(self, module: nn.Module, tensors: dict[str, torch.Tensor]):
        self.__dict__["_module"] = module
        self.__dict__["_tensors"] = tensors

    @contextmanager
    def _bound(self):
        with _reparametrize_module(self._module, self._tensors):
            yield

    def __call__(self, *args, **kwargs):
        with self._bound():
            return self._module(*args, **kwargs)

    def __getattr__(self, name: str):
        if name in self._tensors:
            return self._tensors[name]
        attr = getattr(self._module, name)
        if isinstance(attr, nn.Module):
            prefix = name + "."
            sub = {k[len(prefix) :]: v for k, v in self._tensors.items() if k.startswith(prefix)}
            return FunctionalModel(attr, sub)
        if callable(attr) and hasattr(attr, "__self__"):  # a bound method: run it reparametrized

            def method(*args, **kwargs):
                with self._bound():
                    return attr(*args, **kwargs)

            return method
        return attr

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        for name, _ in self._module.named_parameters(recurse=recurse):
            yield prefix + name, self._tensors[name]

    def parameters(self, recurse: bool = True):
        for _, t in self.named_parameters(recurse=recurse):
            yield t

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: self._tensors[k] for k in self._module.state_dict()}


def _module_state(m: nn.Module) -> dict[str, torch.Tensor]:
    return dict(m.named_parameters()) | dict(m.named_buffers())


def _fingerprint(m: nn.Module) -> tuple:
    """Changes whenever the module's tensors are replaced or written in place (load_state_dict)."""
    return tuple((t.data_ptr(), t._version) for t in _module_state(m).values())


def _module_signature(m: nn.Module) -> tuple:
    return (
        type(m),
        tuple(sub.training for sub in m.modules()),
        tuple((k, tuple(t.shape), t.dtype) for k, t in _module_state(m).items()),
    )


# ---------------------------------------------------------------------------------- scratch plan
@dataclass
class _Snapshot:
    """One leaf of one client's scratch, taken right after its client_begin."""

    leaf: Any
    fingerprint: tuple | None = None
    state: dict[str, torch.Tensor] | None = None  # a module's weights at snapshot time


@dataclass
class ScratchClass:
    """Clients whose scratch has one structure; per leaf how the vmapped loss rebuilds it."""

    members: list[int]  # positions in the round's client list
    spec: Any  # the pytree structure
    plan: list[tuple]  # per leaf: ("param", name) | ("model",) | ("shared", obj)
    #                    | ("tensor", j) | ("module", j, template)
    stacked: list[Any] = field(default_factory=list)  # j -> (n_members, ...) tensor or dict


def _leaf_signature(leaf: Any, param_names: dict[int, str], worker: nn.Module) -> tuple:
    if isinstance(leaf, torch.Tensor):
        if id(leaf) in param_names:
            return ("param", param_names[id(leaf)])
        return ("tensor", tuple(leaf.shape), leaf.dtype, leaf.device)
    if isinstance(leaf, nn.Module):
        return ("model",) if leaf is worker else ("module", _module_signature(leaf))
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return ("value", type(leaf), leaf)
    return ("object", id(leaf))


def snapshot_scratch(scratch: dict, worker: nn.Module, cache: dict) -> tuple[list, Any, tuple]:
    """Leaves, structure and signature of one client's scratch. Modules other than the worker get
    their weights copied (once per distinct state: ``cache`` maps id -> last snapshot), because a
    strategy may reload one module for the next client."""
    leaves, spec = tree_flatten(scratch)
    param_names = {id(p): n for n, p in worker.named_parameters()}
    snaps = []
    for leaf in leaves:
        if isinstance(leaf, nn.Module) and leaf is not worker:
            fp = _fingerprint(leaf)
            last = cache.get(id(leaf))
            if last is None or last.fingerprint != fp:
                state = {k: v.detach().clone() for k, v in _module_state(leaf).items()}
                last = cache[id(leaf)] = _Snapshot(leaf, fp, state)
            snaps.append(last)
        else:
            snaps.append(_Snapshot(leaf))
    signature = (spec, tuple(_leaf_signature(s.leaf, param_names, worker) for s in snaps))
    return snaps, spec, signature


def plan_scratch(snapshots: list, signatures: list, worker: nn.Module) -> tuple[list, list[int]]:
    """Group clients by scratch signature; per group and leaf decide shared or stacked."""
    by_sig: dict[Any, list[int]] = {}
    for k, sig in enumerate(signatures):
        by_sig.setdefault(sig, []).append(k)
    classes, class_of = [], [0] * len(signatures)
    for ci, (sig, members) in enumerate(by_sig.items()):
        spec, kinds = sig
        plan, stacked = [], []
        for li, kind in enumerate(kinds):
            snaps = [snapshots[k][li] for k in members]
            first = snaps[0]
            if kind[0] in ("param", "model", "value", "object"):
                plan.append(kind[:2] if kind[0] == "param" else (kind[0], first.leaf))
            elif kind[0] == "tensor":
                if all(s.leaf is first.leaf for s in snaps):
                    plan.append(("shared", first.leaf))
                else:
                    plan.append(("tensor", len(stacked)))
                    stacked.append(torch.stack([s.leaf.detach() for s in snaps]))
            else:  # a module other than the worker
                same = all(s is first for s in snaps)
                if same and _fingerprint(first.leaf) == first.fingerprint:
                    plan.append(("shared", first.leaf))  # e.g. one teacher for all clients
                else:
                    plan.append(("module", len(stacked), first.leaf))
                    stacked.append(
                        {n: torch.stack([s.state[n] for s in snaps]) for n in first.state}
                    )
        for k in members:
            class_of[k] = ci
        classes.append(ScratchClass(members, spec, plan, stacked))
    return classes, class_of


def rebuild_scratch(cls: ScratchClass, per_client: list, model_view: FunctionalModel) -> dict:
    """One client's scratch inside the vmapped loss (``per_client``: its slices of ``stacked``)."""
    leaves = []
    for entry in cls.plan:
        kind = entry[0]
        if kind == "param":
            leaves.append(model_view._tensors[entry[1]])
        elif kind == "model":
            leaves.append(model_view)
        elif kind in ("shared", "value", "object"):
            leaves.append(entry[1])
        elif kind == "tensor":
            leaves.append(per_client[entry[1]])
        else:
            leaves.append(FunctionalModel(entry[2], per_client[entry[1]]))
    return tree_unflatten(leaves, cls.spec)


# ---------------------------------------------------------------------------------- optimizers
def _scatter(store: dict[str, torch.Tensor], rows, names: list[str], values: list[torch.Tensor]):
    """Write a gathered group's rows back (a slice of rows was updated in place already)."""
    if not isinstance(rows, slice):
        for n, v in zip(names, values, strict=True):
            store[n][rows] = v


class StackedSGD:
    """``ForeachSGD`` (torch.optim.SGD without dampening or Nesterov) for K stacked clients: the
    same element-wise arithmetic in the same order, applied to the rows of the stepping group.
    ``params`` are that group's rows (views for a slice of rows, copies for gathered rows)."""

    def __init__(self, stacked: dict[str, torch.Tensor], spec):
        self.stacked = stacked
        self.lr, self.momentum = float(spec.lr), float(spec.momentum)
        self.wd = float(spec.weight_decay)
        self.buffers = {n: torch.zeros_like(p) for n, p in stacked.items()} if self.momentum else {}

    @torch.no_grad()
    def step(self, rows, names: list[str], params: list, grads: list, first: bool) -> None:
        if self.wd != 0:
            grads = torch._foreach_add(grads, params, alpha=self.wd)
        if self.momentum != 0:
            if first:  # torch creates the buffer as a copy of the first gradient
                bufs = [g.clone() for g in grads]
                if isinstance(rows, slice):
                    for n, b in zip(names, bufs, strict=True):
                        self.buffers[n][rows].copy_(b)
            else:
                bufs = [self.buffers[n][rows] for n in names]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, grads, alpha=1.0)
            _scatter(self.buffers, rows, names, bufs)
            grads = bufs
        torch._foreach_add_(params, grads, alpha=-self.lr)
        _scatter(self.stacked, rows, names, params)


class StackedAdam:
    """``torch.optim.Adam`` (foreach, L2 weight decay, no amsgrad) for K stacked clients."""

    def __init__(self, stacked: dict[str, torch.Tensor], spec, betas=(0.9, 0.999), eps=1e-8):
        self.stacked = stacked
        self.lr, self.wd = float(spec.lr), float(spec.weight_decay)
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        self.exp_avg = {n: torch.zeros_like(p) for n, p in stacked.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in stacked.items()}

    @torch.no_grad()
    def step(self, rows, names: list[str], params: list, grads: list, step: int) -> None:
        m = [self.exp_avg[n][rows] for n in names]
        v = [self.exp_avg_sq[n][rows] for n in names]
        if self.wd != 0:
            grads = torch._foreach_add(grads, params, alpha=self.wd)
        torch._foreach_lerp_(m, grads, 1 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, grads, grads, 1 - self.beta2)
        bias1 = 1 - self.beta1**step
        bias2_sqrt = (1 - self.beta2**step) ** 0.5
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, m, denom, value=-(self.lr / bias1))
        _scatter(self.exp_avg, rows, names, m)
        _scatter(self.exp_avg_sq, rows, names, v)
        _scatter(self.stacked, rows, names, params)


def clip_per_client(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` applied to each client (row) separately, by its own total norm."""
    g = grads[0].shape[0]
    # a norm over the trailing dims, not over a reshape: vmapped gradients can be transposed
    # views, which a reshape would copy
    norms = torch.stack(
        [torch.linalg.vector_norm(x, 2, dim=tuple(range(1, x.dim()))) for x in grads], 1
    )
    total = torch.linalg.vector_norm(norms, 2, dim=1)
    coef = torch.clamp(max_norm / (total + CLIP_EPS), max=1.0)
    for x in grads:
        x.mul_(coef.view(g, *([1] * (x.dim() - 1))))


# ---------------------------------------------------------------------------------- batches
def client_batches(
    n: int, epochs: int, batch_size: int, cpu_gen: torch.Generator, device
) -> Iterator[torch.Tensor]:
    """The sequential path's batch indices, in its order: one randperm per epoch."""
    for _ in range(epochs):
        order = torch.randperm(n, generator=cpu_gen).to(device, non_blocking=True)
        for start in range(0, n, batch_size):
            yield order[start : start + batch_size]


@dataclass
class Group:
    """Clients stepping together: one scratch class, one batch size, rows of the stacked params."""

    scratch_class: int  # index into the round's scratch classes
    members: list[int]
    rows: slice | torch.Tensor  # a slice where the members are consecutive (no gather)
    per_client: list  # the members' slices of the class's stacked scratch
    graph: Any = None  # CUDA graph state (GraphedStep), when graphs are on
    seen: int = 0


# ---------------------------------------------------------------------------------- training
class BatchedTrainer:
    """The local training of one round's clients, side by side (see the module doc)."""

    def __init__(self, strategy: Strategy, env, round: int, clients: list, classes, class_of):
        spec, device = env.spec, env.device
        self.strategy, self.env, self.spec, self.device = strategy, env, spec, device
        self.classes, self.class_of = classes, class_of
        worker = self.worker = env.worker()
        self.trainable = [n for n, p in worker.named_parameters() if p.requires_grad]
        state = _module_state(worker)
        self.fixed = {n: t.detach() for n, t in state.items() if n not in self.trainable}
        k = len(clients)
        self.stacked = {n: stack_copies(state[n].detach(), k) for n in self.trainable}
        if spec.optimizer == "sgd":
            self.opt = StackedSGD(self.stacked, spec)
        else:
            self.opt = StackedAdam(self.stacked, spec)
        self.loss_sum = torch.zeros(k, device=device)
        self.position = [classes[class_of[i]].members.index(i) for i in range(k)]
        self.groups: dict[tuple, Group] = {}
        self.graphs = graphs_requested(device) and spec.optimizer == "sgd"
        # the fields that differ per client (id, data, steps) are left out of the loss's view:
        # no local_loss reads them, and one that did would fail here rather than mix clients
        self.view_fields = dict(
            round=round, global_model=clients[0].global_model, payload=clients[0].payload,
            num_classes=env.num_classes, device=device, build_model=env.build_model,
            preprocess=env.preprocess,
        )  # fmt: skip
        self.forwards = [vmap(self._loss_fn(c)) for c in classes]

    def _loss_fn(self, cls: ScratchClass):
        autocast_on = self.spec.precision == "bf16"
        device_type = self.device.type
        # autocast's weight-cast cache must be off under CUDA graph capture (torch's docs)
        cache = not self.graphs

        def loss_fn(params, x, y, per_client):
            view = FunctionalModel(self.worker, {**self.fixed, **params})
            with torch.autocast(
                device_type, torch.bfloat16, enabled=autocast_on, cache_enabled=cache
            ):
                features, logits = view.features_and_logits(x)
                client = ClientContext(
                    client_id=None, model=view, data=None,
                    scratch=rebuild_scratch(cls, per_client, view), **self.view_fields,
                )  # fmt: skip
                return self.strategy.local_loss(LocalBatch(x, y, features, logits), client)

        return loss_fn

    def group(self, ci: int, members: list[int], batch_size: int) -> Group:
        key = (ci, tuple(members), batch_size)
        g = self.groups.get(key)
        if g is None:
            lo, hi = members[0], members[-1] + 1
            consecutive = members == list(range(lo, hi))
            rows = slice(lo, hi) if consecutive else torch.tensor(members, device=self.device)
            cls = self.classes[ci]
            if len(members) == len(cls.members):
                per_client = cls.stacked
            else:
                local = torch.tensor([self.position[k] for k in members], device=self.device)
                per_client = [_index(s, local) for s in cls.stacked]
            g = self.groups[key] = Group(ci, members, rows, per_client)
        return g

    def step(self, g: Group, x: torch.Tensor, y: torch.Tensor, t: int) -> None:
        """One local step of every member: forward, backward, clipping, optimizer, loss sum."""
        params = {n: self.stacked[n][g.rows].detach().requires_grad_() for n in self.trainable}
        losses = self.forwards[g.scratch_class](params, x, y, g.per_client)
        # the members' losses are independent: the gradient of their sum is, row by row, each
        # client's own gradient. autograd.grad rather than backward(): no AccumulateGrad, whose
        # layout contract copied the (transposed) vmapped linear-weight gradient every step
        all_grads = torch.autograd.grad(
            losses.sum(), [params[n] for n in self.trainable], allow_unused=True
        )
        # as torch's optimizers: a parameter the loss does not reach gets no gradient and is left
        # alone (no weight decay, no momentum); clipping only counts the ones that have one
        names = [n for n, gr in zip(self.trainable, all_grads, strict=True) if gr is not None]
        grads = [gr for gr in all_grads if gr is not None]
        if self.spec.grad_clip is not None:
            clip_per_client(grads, self.spec.grad_clip)
        leaves = [params[n].detach() for n in names]
        if isinstance(self.opt, StackedSGD):
            self.opt.step(g.rows, names, leaves, grads, first=t == 0)
        else:
            self.opt.step(g.rows, names, leaves, grads, step=t + 1)
        with torch.no_grad():
            self.loss_sum[g.rows] += losses.detach().float()

    def run_step(self, g: Group, x: torch.Tensor, y: torch.Tensor, t: int) -> None:
        # the first step creates the momentum buffers (another computation) and runs eagerly; so
        # does a shape's first later step, which warms up exactly the kernels the graph captures;
        # from its second later step on, a shape replays
        if t > 0:
            g.seen += 1
        if not self.graphs or t == 0 or g.seen == 1:
            if self.graphs:
                _on_side_stream(lambda: self.step(g, x, y, t))
            else:
                self.step(g, x, y, t)
            return
        if g.graph is None:
            g.graph = GraphedStep(self, g, x, y, t)
        g.graph.replay(x, y)


def stack_copies(t: torch.Tensor, k: int) -> torch.Tensor:
    """k copies of a parameter along a new leading dimension. A matrix (a linear layer's weight)
    is laid out transposed in memory: the vmapped linear is a bmm whose weight gradient comes out
    transposed, and in this layout it matches the parameter's strides, so the clipping and the
    optimizer's element-wise kernels read both contiguously instead of transposing 2 x 1.6 M
    values (the cnn's fc layer) every step."""
    if t.dim() == 2:
        return t.t().unsqueeze(0).repeat(k, 1, 1).transpose(1, 2)
    return t.unsqueeze(0).repeat(k, *[1] * t.dim())


def _on_side_stream(fn) -> None:
    """CUDA graph capture wants the warm-up iterations on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)


class GraphedStep:
    """One group shape's whole step captured as a CUDA graph over static input buffers.

    The stacked parameters, optimizer buffers and loss sums live at fixed addresses for the round,
    so the graph updates them in place; each replay only needs the batch copied into ``x``/``y``.
    Unverified on a GPU by its author (see the module doc)."""

    def __init__(self, trainer: BatchedTrainer, g: Group, x: torch.Tensor, y: torch.Tensor, t):
        self.x, self.y = x.clone(), y.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            trainer.step(g, self.x, self.y, t)  # t > 0: the momentum update, not its creation

    def replay(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()


def _index(stacked: Any, rows: torch.Tensor) -> Any:
    if isinstance(stacked, dict):
        return {n: t[rows] for n, t in stacked.items()}
    return stacked[rows]


def train_clients_batched(
    round: int,
    selected: list[int],
    global_model,
    payload: dict,
    strategy: Strategy,
    env,
    eval_local: bool = False,
) -> tuple[list[ClientUpdate], list[float]]:
    """``train_clients`` with the selected clients trained side by side (see the module doc)."""
    from fedkd.engine.client import DivergedError

    spec, device = env.spec, env.device
    frozen_global = frozen_copy(global_model)
    global_state = global_model.state_dict()
    worker = env.worker()
    worker.load_state_dict(global_state)
    worker.train()

    # ---- per-client set-up, in order: client_begin on the worker holding the global weights
    clients, snapshots, signatures, cache = [], [], [], {}
    for cid in selected:
        data = env.dataset.train.subset(env.client_index[cid])
        client = ClientContext(
            client_id=cid, round=round, model=worker, global_model=frozen_global,
            payload=payload, data=data, num_classes=env.num_classes, device=device,
            build_model=env.build_model, preprocess=env.preprocess,
        )  # fmt: skip
        strategy.client_begin(client)
        snaps, _, sig = snapshot_scratch(client.scratch, worker, cache)
        clients.append(client)
        snapshots.append(snaps)
        signatures.append(sig)
    classes, class_of = plan_scratch(snapshots, signatures, worker)
    del snapshots, cache

    trainer = BatchedTrainer(strategy, env, round, clients, classes, class_of)
    seeds = [derive_seed(spec.seed, "client", round, cid) for cid in selected]
    batches = [
        client_batches(
            len(c.data), spec.local_epochs, spec.batch_size,
            torch.Generator().manual_seed(s), device,
        )
        for c, s in zip(clients, seeds, strict=True)
    ]  # fmt: skip
    dev_gens = [torch.Generator(device=device).manual_seed(s) for s in seeds]
    pre = env.preprocess
    per_sample_aug = getattr(pre, "crop_flip", False)
    steps = [0] * len(selected)
    active, t = list(range(len(selected))), 0
    while active:  # lockstep: iteration t is every active client's t-th local step
        by_shape: dict[tuple[int, int], list[tuple[int, torch.Tensor]]] = {}
        still = []
        for k in active:
            idx = next(batches[k], None)
            if idx is not None:
                still.append(k)
                by_shape.setdefault((class_of[k], len(idx)), []).append((k, idx))
        active = still
        for (ci, size), items in by_shape.items():
            members = [k for k, _ in items]
            if per_sample_aug:  # each client's own augmentation draws, in its own order
                x = torch.stack(
                    [pre(clients[k].data.x[idx], train=True, gen=dev_gens[k]) for k, idx in items]
                )
            else:  # no random draws: one normalisation for the group
                raw = torch.stack([clients[k].data.x[idx] for k, idx in items])
                x = pre(raw.flatten(0, 1), train=True).unflatten(0, raw.shape[:2])
            y = torch.stack([clients[k].data.y[idx] for k, idx in items])
            trainer.run_step(trainer.group(ci, members, size), x, y, t)
            for k in members:
                steps[k] += 1
        t += 1

    # ---- back to the sequential path's shape: each client's weights in the worker, then its end
    losses = (trainer.loss_sum / torch.tensor([max(s, 1) for s in steps], device=device)).tolist()
    for k, cid in enumerate(selected):
        if not torch.isfinite(torch.tensor(losses[k])):
            raise DivergedError(
                f"client {cid} reached a non-finite training loss in round {round + 1}"
            )
    updates, local_acc = [], []
    for k, (cid, client) in enumerate(zip(selected, clients, strict=True)):
        with torch.no_grad():
            worker.load_state_dict(global_state)
            named = dict(worker.named_parameters())
            for n in trainer.trainable:
                named[n].copy_(trainer.stacked[n][k])
        client.model = worker
        client.steps = steps[k]
        # the global generator as the sequential path leaves it after this client's training
        torch.manual_seed(seeds[k])
        extras = strategy.client_end(client)
        if eval_local:
            local_acc.append(evaluate(worker, env.dataset.test, pre, env.num_classes)["acc"])
        updates.append(
            ClientUpdate(
                client_id=cid,
                state={n: v.detach().clone() for n, v in worker.state_dict().items()},
                num_samples=len(client.data),
                num_steps=steps[k],
                train_loss=losses[k],
                extras=extras,
            )
        )
    return updates, local_acc
