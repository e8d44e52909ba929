"""The step machinery of the batched engine: per-client batch order, groups of clients stepping
together, and ``BatchedTrainer`` (one round's stacked parameters, optimizer and vmapped loss).
The round itself (client set-up, the lockstep loop, write-back) is ``fedkd.engine.batched``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import vmap

from fedkd.engine.cuda_graphs import GraphedStep, graphs_requested, on_side_stream
from fedkd.engine.functional import FunctionalModel, module_state, stack_copies
from fedkd.engine.scratch import ScratchClass, rebuild_scratch
from fedkd.engine.stacked_optim import StackedAdam, StackedSGD, clip_per_client
from fedkd.strategies.base import ClientContext, LocalBatch, Strategy


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


class BatchedTrainer:
    """The local training of one round's clients, side by side (see the module doc)."""

    def __init__(self, strategy: Strategy, env, round: int, clients: list, classes, class_of):
        spec, device = env.spec, env.device
        self.strategy, self.env, self.spec, self.device = strategy, env, spec, device
        self.classes, self.class_of = classes, class_of
        worker = self.worker = env.worker()
        self.trainable = [n for n, p in worker.named_parameters() if p.requires_grad]
        state = module_state(worker)
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
                on_side_stream(lambda: self.step(g, x, y, t))
            else:
                self.step(g, x, y, t)
            return
        if g.graph is None:
            g.graph = GraphedStep(self, g, x, y, t)
        g.graph.replay(x, y)


def _index(stacked: Any, rows: torch.Tensor) -> Any:
    if isinstance(stacked, dict):
        return {n: t[rows] for n, t in stacked.items()}
    return stacked[rows]
