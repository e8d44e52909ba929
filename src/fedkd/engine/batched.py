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

The engine's parts: this module (which path runs, and one round: client set-up, the lockstep
loop, write-back), ``batched_trainer`` (groups and the vmapped step), ``functional`` (the
stacked-parameter view), ``scratch`` (the scratch plan), ``stacked_optim`` (per-client
optimizers and clipping) and ``cuda_graphs``.
"""

from __future__ import annotations

import torch
from torch import nn

from fedkd.engine.batched_trainer import BatchedTrainer, client_batches
from fedkd.engine.cuda_graphs import GRAPHS_ENV, graphs_requested
from fedkd.engine.evaluate import evaluate
from fedkd.engine.functional import FunctionalModel
from fedkd.engine.scratch import plan_scratch, rebuild_scratch, snapshot_scratch
from fedkd.engine.seeding import derive_seed
from fedkd.engine.stacked_optim import StackedAdam, StackedSGD
from fedkd.strategies.base import ClientContext, ClientUpdate, Strategy, frozen_copy

# the engine's parts, importable from here as before the split
__all__ = [
    "AUTO_ON_CPU", "GRAPHS_ENV", "BatchedTrainer", "FunctionalModel", "StackedAdam", "StackedSGD",
    "engine_choice", "graphs_requested", "model_unsupported_reason", "plan_scratch",
    "rebuild_scratch", "snapshot_scratch", "train_clients_batched",
]  # fmt: skip

# engine "auto" off CUDA: the vmapped kernels have no launch overhead to save on a CPU, and the
# batch rules' layout copies and grouped convolutions cost more than they save
AUTO_ON_CPU = (
    "engine auto: sequential off CUDA, where the batched engine measured slower "
    "(docs/performance.md); engine: batched forces it"
)


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
