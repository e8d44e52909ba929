"""The sequential trainer: the round's clients trained one after another in one worker model.

Each client starts from the global weights and takes the steps of its schedule: the batch is one
gather (``TrainInputs``) of exactly the step's samples, the declared frozen models run on it, and
``local_loss`` sees a ``LocalContext`` over the worker's own parameters.
"""

from __future__ import annotations

import weakref

import torch

from fedkd.engine.optim import ForeachSGD, decay_exempt
from fedkd.engine.trainers import Trained
from fedkd.runtime.schedule import ClientSchedule
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Outputs, Strategy


def make_optimizer(model: torch.nn.Module, spec, lr: float):
    exempt = decay_exempt(model, spec)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if n not in exempt], "weight_decay": spec.weight_decay},
        {"params": [p for n, p in named if n in exempt], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    # foreach keeps the optimizer to a handful of kernels per step
    if spec.optimizer == "sgd":
        return ForeachSGD(groups, lr=lr, momentum=spec.momentum)
    return torch.optim.Adam(groups, lr=lr, foreach=True)


def step_tables(env, cid: int, schedule: ClientSchedule) -> tuple[torch.Tensor, ...]:
    """(start, flip, row in the training split, Cutout centres or None) of every slot of the
    client's schedule, on the device."""
    rows = env.client_rows(cid)[schedule.rows]
    start = env.inputs().start(rows, schedule.off_y, schedule.off_x)
    cut = None if schedule.cut is None else schedule.cut.to(env.device)
    return start.to(env.device), schedule.flip.to(env.device), rows.to(env.device), cut


def frozen_models(client: ClientContext, own_model) -> dict[str, torch.nn.Module]:
    """The client's declared frozen models by name; ``own_model(name, state)`` gives a model
    loaded with a per-client state."""
    decl = client.declared
    frozen = dict(decl.shared_models)
    frozen.update({n: own_model(n, s) for n, s in decl.own_models.items()})
    return frozen


def local_context(
    client: ClientContext, model, global_params: dict, frozen: dict, x: torch.Tensor, step: int
) -> LocalContext:
    """What ``local_loss`` sees for this client at local step ``step`` on input ``x``."""
    decl = client.declared
    with torch.no_grad():
        outputs = {k: Outputs(*m.features_and_logits(x)) for k, m in frozen.items()}
    return LocalContext(
        params={n: p for n, p in model.named_parameters() if p.requires_grad} if model else {},
        model=model,
        global_params=global_params, outputs=outputs, shared=decl.shared, own=decl.own,
        step={k: v[step] for k, v in decl.per_step.items()},
    )  # fmt: skip


def local_loss_on(strategy: Strategy, client: ClientContext, batch: LocalBatch, step: int = 0):
    """``strategy.local_loss`` for one client (after its ``client_begin``) on one batch, with
    ``client.model`` as the student: as the sequential trainer calls it."""

    def own_model(name, state):
        m = client.build_model().eval().requires_grad_(False)
        m.load_state_dict(state)
        return m

    gm = client.global_model
    ctx = local_context(
        client, client.model, dict(gm.named_parameters()), frozen_models(client, own_model),
        batch.x, step,
    )  # fmt: skip
    return strategy.local_loss(batch, ctx)


class SequentialTrainer:
    def __init__(self, env, strategy: Strategy):
        # a weak reference: env holds this trainer, and a cycle would outlive the run
        self._env, self.strategy, self.spec = weakref.ref(env), strategy, env.spec
        self._own_models: dict[str, torch.nn.Module] = {}

    @property
    def env(self):
        return self._env()

    def _own_model(self, name: str, state: dict) -> torch.nn.Module:
        """One reusable frozen model per declared name, loaded with each client's weights."""
        m = self._own_models.get(name)
        if m is None:
            m = self._own_models[name] = self.env.build_model().eval().requires_grad_(False)
        m.load_state_dict(state)
        return m

    def train(self, clients: list[ClientContext], schedules: list[ClientSchedule], global_model):
        env = self.env
        worker = env.worker()
        global_state = global_model.state_dict()
        global_params = {n: p for n, p in global_model.named_parameters()}
        results = []
        for client, schedule in zip(clients, schedules, strict=True):
            worker.load_state_dict(global_state)
            loss = self._train_one(worker, client, schedule, global_params)
            params = {
                n: p.detach().clone() for n, p in worker.named_parameters() if p.requires_grad
            }
            buffers = {n: b.detach().clone() for n, b in worker.named_buffers()}
            results.append(Trained(params, schedule.num_steps, loss, buffers))
        return results

    def _train_one(self, model, client: ClientContext, schedule, global_params) -> torch.Tensor:
        spec, env, strategy = self.spec, self.env, self.strategy
        model.train()
        opt = make_optimizer(model, spec, spec.lr_of_round(client.round))
        params = [p for p in model.parameters() if p.requires_grad]
        dtype = params[0].dtype if params else torch.float32
        frozen = frozen_models(client, self._own_model)
        start, flip, rows, cut = step_tables(env, client.client_id, schedule)
        inputs = env.inputs()
        labels = inputs.labels
        channels_last = getattr(env.preprocess, "channels_last", False)
        torch.manual_seed(client.seed)  # dropout and anything else drawing from the global RNG
        loss_sum = torch.zeros((), device=env.device)
        # bf16 autocast is opt-in (spec.precision); its accuracy is checked against fp32 in the bench
        autocast = torch.autocast(env.device.type, torch.bfloat16, enabled=spec.precision == "bf16")
        for s, n in enumerate(schedule.count):
            x = inputs(start[s, :n], flip[s, :n], dtype, None if cut is None else cut[:, s, :n])
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            y = labels[rows[s, :n]]
            with autocast:
                ctx = local_context(client, model, global_params, frozen, x, s)
                features, logits = model.features_and_logits(x)
                loss = strategy.checked_local_loss(LocalBatch(x, y, features, logits), ctx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if spec.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, spec.grad_clip, foreach=True)
            opt.step()
            loss_sum += loss.detach().float()
        return loss_sum / max(schedule.num_steps, 1)
