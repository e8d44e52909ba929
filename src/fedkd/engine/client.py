"""Local training: one function trains the round's clients and returns their updates.

``train_clients`` is the only place that loops over clients: it trains them one after another
here, or side by side in ``fedkd.engine.batched`` (the spec's ``engine``), without touching any
strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedkd.engine.evaluate import evaluate
from fedkd.engine.optim import ForeachSGD
from fedkd.engine.seeding import derive_seed
from fedkd.strategies.base import ClientContext, ClientUpdate, LocalBatch, Strategy, frozen_copy


class DivergedError(FloatingPointError):
    """Training produced a non-finite loss; the run stops and is recorded as diverged. Any
    FloatingPointError raised in a round (e.g. by a strategy's server step) counts the same."""


@dataclass
class TrainEnv:
    """Everything local training needs that does not change between rounds."""

    spec: object  # RunSpec
    dataset: object  # FedDataset, splits on the device
    client_index: list[torch.Tensor]  # training indices of each client, on the device
    preprocess: object
    device: torch.device
    build_model: object
    num_classes: int
    _worker: object = None
    _engine: dict | None = None

    def engine(self, strategy: Strategy) -> dict:
        """Which local-training path this run uses and why (recorded in run.json)."""
        if self._engine is None:
            from fedkd.engine.batched import engine_choice

            self._engine = engine_choice(self.spec, strategy, self.worker(), self.device)
        return self._engine

    def worker(self):
        """The model clients train in, built (and compiled, if asked) once per run and reloaded
        with the global weights for each client: no per-client allocation or recompilation."""
        if self._worker is None:
            keep_freed_memory()
            self._worker = self.build_model()
            mode = getattr(self.spec, "compile", "none")
            if mode != "none":
                self._worker.features_and_logits = torch.compile(
                    self._worker.features_and_logits, mode=None if mode == "default" else mode
                )
        return self._worker


_MALLOC_TUNED = False


def keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of handing it back to the OS.

    By default every tensor above 128 KiB (at first; the limit adapts slowly) is a fresh mmap,
    and freed heap tops are trimmed: each step's gradients and activations are page-faulted in
    anew. On the 2-core CPU machine a 5-round default-configuration job took 4.5 s without this
    and 4.0 s with it; with other processes on the cores a first small round took 6.7 s against
    0.45 s (docs/performance.md). Once per process; a no-op where the C library is not glibc."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD: only allocations above 256 MiB mmap
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap top
    except (OSError, AttributeError):
        pass


def make_optimizer(model: torch.nn.Module, spec):
    params = [p for p in model.parameters() if p.requires_grad]
    # foreach keeps the optimizer to a handful of kernels per step
    if spec.optimizer == "sgd":
        return ForeachSGD(
            params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay
        )
    return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay, foreach=True)


def local_train(client: ClientContext, strategy: Strategy, env: TrainEnv, seed: int) -> float:
    """Run the local epochs of one client in place on ``client.model``; returns the mean loss."""
    spec = env.spec
    model = client.model
    model.train()
    opt = make_optimizer(model, spec)
    params = [p for p in model.parameters() if p.requires_grad]
    # one generator per (run seed, round, client): shuffling and augmentation are reproducible
    # and independent of what ran before, so a resumed run draws exactly the same batches
    cpu_gen = torch.Generator().manual_seed(seed)
    dev_gen = torch.Generator(device=env.device).manual_seed(seed)
    torch.manual_seed(seed)  # dropout and anything else drawing from the global generator
    n = len(client.data)
    loss_sum = torch.zeros((), device=env.device)
    steps = 0
    # bf16 autocast is opt-in (spec.precision); its accuracy is checked against fp32 in the bench
    autocast = torch.autocast(env.device.type, torch.bfloat16, enabled=spec.precision == "bf16")
    for _ in range(spec.local_epochs):
        order = torch.randperm(n, generator=cpu_gen).to(env.device, non_blocking=True)
        for start in range(0, n, spec.batch_size):
            idx = order[start : start + spec.batch_size]
            x = env.preprocess(client.data.x[idx], train=True, gen=dev_gen)
            y = client.data.y[idx]
            with autocast:
                features, logits = model.features_and_logits(x)
                loss = strategy.local_loss(LocalBatch(x, y, features, logits), client)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if spec.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, spec.grad_clip, foreach=True)
            opt.step()
            loss_sum += loss.detach()
            steps += 1
            client.steps = steps
    return float(loss_sum / max(steps, 1))


def train_clients(
    round: int,
    selected: list[int],
    global_model,
    payload: dict,
    strategy: Strategy,
    env: TrainEnv,
    eval_local: bool = False,
) -> tuple[list[ClientUpdate], list[float]]:
    """Train the selected clients; returns updates and (optionally) the local models' test
    accuracies before aggregation. Side by side (``fedkd.engine.batched``) where the spec asks for
    it and the strategy and model support it, else one after another."""
    if env.engine(strategy)["used"] == "batched":
        from fedkd.engine.batched import train_clients_batched

        return train_clients_batched(
            round, selected, global_model, payload, strategy, env, eval_local
        )
    frozen_global = frozen_copy(global_model)
    global_state = global_model.state_dict()
    worker = env.worker()
    updates, local_acc = [], []
    for cid in selected:
        worker.load_state_dict(global_state)
        data = env.dataset.train.subset(env.client_index[cid])
        client = ClientContext(
            client_id=cid,
            round=round,
            model=worker,
            global_model=frozen_global,
            payload=payload,
            data=data,
            num_classes=env.num_classes,
            device=env.device,
            build_model=env.build_model,
            preprocess=env.preprocess,
        )
        strategy.client_begin(client)
        seed = derive_seed(env.spec.seed, "client", round, cid)
        train_loss = local_train(client, strategy, env, seed)
        if not torch.isfinite(torch.tensor(train_loss)):
            raise DivergedError(
                f"client {cid} reached a non-finite training loss in round {round + 1}"
            )
        extras = strategy.client_end(client)
        if eval_local:
            stats = evaluate(worker, env.dataset.test, env.preprocess, env.num_classes)
            local_acc.append(stats["acc"])
        updates.append(
            ClientUpdate(
                client_id=cid,
                state={k: v.detach().clone() for k, v in worker.state_dict().items()},
                num_samples=len(data),
                num_steps=client.steps,
                train_loss=train_loss,
                extras=extras,
            )
        )
    return updates, local_acc
