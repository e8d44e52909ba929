"""Local training of a round's clients: the one seam between the round loop and the trainers.

``train_clients`` owns the client loop: every selected client's ``client_begin`` (declaring what
its ``local_loss`` reads), then one trainer call that trains them all, then every ``client_end``.
Two trainers implement ``Trainer.train``: ``SequentialTrainer`` (one client after another,
``fedkd.engine.sequential``) and ``BatchedTrainer`` (the K clients side by side as one folded
network, ``fedkd.engine.batched``). They draw the same batches and augmentations (each client's
``fedkd.runtime.schedule``) and differ only in floating-point summation order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fedkd.engine.batched import BatchedTrainer
from fedkd.engine.choice import after_earlier_attempt, engine_choice
from fedkd.engine.sequential import SequentialTrainer
from fedkd.engine.trainers import DivergedError
from fedkd.runtime.evaluate import evaluate
from fedkd.runtime.preprocess import TrainInputs
from fedkd.runtime.schedule import ClientSchedule, client_schedule
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies.base import ClientContext, ClientUpdate, Strategy, frozen_copy


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
    # called (no arguments) when the trainer changes the engine record, e.g. a fallback from CUDA
    # graphs or the compiled step (``fedkd.engine.batched``): the run writes run.json again
    on_engine_change: object = None
    # run.json's engine record of this run's earlier attempt, if any (``after_earlier_attempt``)
    earlier_engine: dict | None = None
    _worker: object = None
    _engine: dict | None = None
    _trainer: object = None
    _inputs: object = None
    _index_cpu: list = field(default_factory=list)

    def engine(self, strategy: Strategy) -> dict:
        """Which trainer this run uses and why (recorded in run.json)."""
        if self._engine is None:
            choice = engine_choice(
                self.spec, strategy, self.worker(), self.device,
                channels_last=getattr(self.preprocess, "channels_last", False),
            )  # fmt: skip
            self._engine = after_earlier_attempt(choice, self.earlier_engine)
        return self._engine

    def worker(self):
        """The model clients train in (sequential trainer) or that the batched trainer folds,
        built (and compiled, if asked) once per run."""
        if self._worker is None:
            keep_freed_memory()
            self._worker = self.build_model()
            mode = getattr(self.spec, "compile", "none")
            if mode != "none":
                self._worker.features_and_logits = torch.compile(
                    self._worker.features_and_logits, mode=None if mode == "default" else mode
                )
        return self._worker

    def inputs(self) -> TrainInputs:
        """The training split laid out for one-gather batches (once per run)."""
        if self._inputs is None:
            self._inputs = TrainInputs(self.dataset.train, self.preprocess)
        return self._inputs

    def trainer(self, strategy: Strategy, k: int):
        """The run's trainer, built once (the batched one keeps its buffers and CUDA graphs)."""
        if self._trainer is None or getattr(self._trainer, "k", k) != k:
            if self.engine(strategy)["used"] == "batched":
                self._trainer = BatchedTrainer(self, strategy, k)
            else:
                self._trainer = SequentialTrainer(self, strategy)
        return self._trainer

    def client_seed(self, round: int, cid: int) -> int:
        """Client ``cid``'s seed for ``round``: its batch schedule and its strategy's draws."""
        return derive_seed(self.spec.seed, "client", round, cid)

    def schedule(self, round: int, cid: int) -> ClientSchedule:
        """Client ``cid``'s batches and augmentation draws for ``round``."""
        spec, inputs = self.spec, self.inputs()
        return client_schedule(
            len(self.client_index[cid]), spec.local_epochs, spec.batch_size,
            self.client_seed(round, cid), crop_pad=inputs.pad, flip=bool(inputs.pad),
            cutout_hw=inputs.cutout_hw,
        )  # fmt: skip

    def client_rows(self, cid: int) -> torch.Tensor:
        """Client ``cid``'s training indices on the CPU (for building its step tables)."""
        if not self._index_cpu:
            self._index_cpu = [ix.cpu() for ix in self.client_index]
        return self._index_cpu[cid]

    def release(self) -> None:
        """Drop the trainer and its buffers (and CUDA graphs) at the end of a run."""
        self._trainer = None


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
    accuracies before aggregation."""
    spec, device = env.spec, env.device
    frozen_global = frozen_copy(global_model)
    global_state = global_model.state_dict()
    worker = env.worker()
    worker.load_state_dict(global_state)
    clients, schedules = [], []
    for cid in selected:
        schedule = env.schedule(round, cid)
        client = ClientContext(
            client_id=cid, round=round, model=worker, global_model=frozen_global,
            payload=payload, data=env.dataset.train.subset(env.client_index[cid]),
            num_classes=env.num_classes, device=device, build_model=env.build_model,
            preprocess=env.preprocess, num_steps=schedule.num_steps, batch_size=spec.batch_size,
            seed=env.client_seed(round, cid),
        )  # fmt: skip
        strategy.client_begin(client)
        clients.append(client)
        schedules.append(schedule)

    trained = env.trainer(strategy, len(selected)).train(clients, schedules, frozen_global)

    losses = torch.stack([t.loss.float() for t in trained]).cpu()  # one read per round
    for cid, loss in zip(selected, losses.tolist(), strict=True):
        if not math.isfinite(loss):
            raise DivergedError(
                f"client {cid} reached a non-finite training loss in round {round + 1}"
            )
    updates, local_acc = [], []
    named = {**dict(worker.named_parameters()), **dict(worker.named_buffers())}
    for client, result, loss in zip(clients, trained, losses.tolist(), strict=True):
        with torch.no_grad():
            worker.load_state_dict(global_state)
            for n, v in (*result.params.items(), *result.buffers.items()):
                named[n].copy_(v)
        client.model = worker
        client.steps = result.steps
        # the global generator is the same for client_end whichever trainer ran
        torch.manual_seed(derive_seed(spec.seed, "client_end", round, client.client_id))
        extras = strategy.client_end(client)
        if eval_local:
            local_acc.append(
                evaluate(worker, env.dataset.test, env.preprocess, env.num_classes)["acc"]
            )
        updates.append(
            ClientUpdate(
                client_id=client.client_id,
                state={k: v.detach().clone() for k, v in worker.state_dict().items()},
                num_samples=len(client.data),
                num_steps=result.steps,
                train_loss=loss,
                extras=extras,
            )
        )
    return updates, local_acc
