"""The batched trainer: a round's K selected clients trained side by side as one folded network.

Per local step, for all K clients at once (``BatchedTrainer._step``):
- the step's rows of the round's step tables (sample starts, flips, labels, sample weights, the
  active mask and the optimizer's per-step coefficients) by one index on a device step counter;
- one gather with the crops and flips, one normalisation (``TrainInputs``): (B, K*C, H, W);
- the declared frozen models: a model shared by all clients (a teacher, the global model) runs
  unfolded, once on the K batches stacked along the batch, (K*B, C, H, W); per-client models
  run folded;
- the student's folded forward (``fedkd.engine.folding``), then the strategy's ``local_loss``
  vmapped over the K clients, one gradient call for the sum of their losses;
- per-client clipping and the optimizer on flat (K, P) buffers (``fedkd.engine.flat_optim``).

Shapes are static for the whole run: every step has B slots per client (an epoch's last, smaller
batch is padded with zero-weight slots) and K clients (a client with fewer steps than the round's
longest is masked once it has finished: it takes no step, not even weight decay or momentum; the
mask overwrites (``masked_fill``, not a product), so nothing a finished client computes, inf or
NaN included, reaches any client's weights, optimizer state or recorded loss). So one step serves every step of every
round; on CUDA (unless ``engine: batched-eager``) it is captured once per run and per set of declared
names and buffers as a CUDA graph and replayed, each round only copying the global weights and
the round's tables into the captured buffers. All of a run's graphs share one memory pool.
With ``engine: batched-compiled`` the folded student's forward (and with it its backward) is also
``torch.compile``d, tried before the first step (``fedkd.engine.compiled_step``), eager where
that fails.

CUDA graphs and the compiled step never fail a run: a capture that fails (or its first replay)
ran nothing, so the step runs eagerly instead and so does every later step of the run; the
compiled forward's first step, if it fails, is undone (every buffer the step writes restored)
and run eagerly. The engine record (run.json) then says why and the seconds lost, and is written
at once (``on_record_change``). A failure of the eager step itself fails the run.

The price of static shapes: a finished client still computes its forward and backward passes
until the round's longest client is done, so a round costs K x the longest client's steps. With
equal client sizes (``dirichlet-equal``, the default, and ``iid``) every client takes the same
number of steps and nothing is wasted; with unequal ones (``dirichlet``, ``shards``) the share
spent on finished clients is 1 - mean(steps) / max(steps) of the round.

Numbers equal the sequential trainer's up to floating-point summation order (tests/test_trainers.py
holds every strategy to it on ResNet-8-GN and the CNN).
"""

from __future__ import annotations

import time

import torch
from torch.func import vmap

import fedkd.engine.static_buffers as buffers
from fedkd.engine.choice import unbatchable_loss
from fedkd.engine.compiled_step import TRIAL_RUNNING, first_line, too_short, try_compiled
from fedkd.engine.cuda_graphs import (
    DROPPED_WITH_GRAPHS,
    GraphedStep,
    capture_stream,
    graph_pool,
)
from fedkd.engine.flat_optim import FlatAdam, FlatSGD, clip_rows_
from fedkd.engine.flat_params import FlatParams
from fedkd.engine.folding import (
    bind,
    fill_norm_buffers,
    fold,
    folded_norms,
    param_kinds,
)
from fedkd.engine.frozen_slots import FrozenSlot, SharedSlot, per_client
from fedkd.engine.functional import FunctionalModel
from fedkd.engine.optim import decay_exempt
from fedkd.engine.static_buffers import same_buffers, shape_of, stack_into, static, steps_into
from fedkd.engine.trainers import Trained
from fedkd.runtime.schedule import ClientSchedule, steps_per_round
from fedkd.strategies.base import ClientContext, LocalBatch, LocalContext, Outputs, Strategy


class BatchedTrainer:
    def __init__(self, env, strategy: Strategy, k: int):
        spec, device = env.spec, env.device
        # no reference to env (which holds this trainer): nothing keeps the trainer, its buffers
        # and graphs alive past the run but the run itself
        self.strategy, self.spec, self.device, self.k = strategy, spec, device, k
        self.client_rows = [env.client_rows(c) for c in range(len(env.client_index))]
        worker = self.worker = env.worker()
        named = {n: p for n, p in worker.named_parameters() if p.requires_grad}
        self.dtype = next(iter(named.values())).dtype
        self.kinds = param_kinds(worker)
        self.params = FlatParams(named, k, self.kinds, self.dtype, device)
        self.student = fold(worker, k).train()
        bind(self.student, self.params.folded, requires_grad=True)
        # BatchNorm's statistics take each client's samples only: the step's occupied slots
        self.norms = folded_norms(self.student)
        self.slot_valid = torch.zeros(spec.batch_size, k, dtype=self.dtype, device=device)
        for norm in self.norms.values():
            norm.slot_valid = self.slot_valid
        self.leaves = [self.student.get_parameter(n) for n in self.params.names]
        # the run's engine record (run.json): graphs and compile as chosen, their failures noted,
        # each change told to the run at once (which writes run.json again)
        self.record = env.engine(strategy)
        self.on_record_change = env.on_engine_change
        self.forward = self.student.features_and_logits  # compiled before the first step, if asked
        self.compile_pending = bool(self.record.get("compile_step"))
        self.compiled_untried = False  # the compiled forward has yet to run its first step
        opt_cls = FlatSGD if spec.optimizer == "sgd" else FlatAdam
        self.opt = opt_cls(self.params.rows, spec, self._decayed_columns(worker))
        self.inputs = env.inputs()
        self.batch = spec.batch_size
        # the longest client's steps: the tables' length for the whole run
        self.max_steps = max(
            steps_per_round(len(ix), spec.local_epochs, spec.batch_size) for ix in env.client_index
        )
        s, b = self.max_steps, self.batch
        # per step, slot and client: start, flip, label, and with Cutout its centre's row and column
        int_rows = 5 if self.inputs.cutout_hw else 3
        self.int_table = torch.zeros(s, int_rows, b, k, dtype=torch.long, device=device)
        n_opt = len(opt_cls.names)
        self.float_table = torch.zeros(s, b + 1 + n_opt, k, dtype=self.dtype, device=device)
        self.t = torch.zeros(1, dtype=torch.long, device=device)
        self.loss_sum = torch.zeros(k, dtype=torch.float32, device=device)
        self.global_params = {n: torch.zeros_like(p) for n, p in named.items()}
        self.slots: dict[tuple[str, bool], FrozenSlot | SharedSlot] = {}  # by (name, shared)
        self.values: dict[str, dict[str, object]] = {"shared": {}, "own": {}, "step": {}}
        # every declared value's buffer, kept for the run: a captured graph reads it there, even
        # in a round that does not declare it
        self._store: dict[tuple[str, str], object] = {}
        self.use_graphs = bool(self.record.get("cuda_graphs"))
        # keyed by the round's declared names and their buffers' shapes; a graph is dropped when
        # a buffer it reads is replaced (``_keep``), so none ever replays on freed memory
        self.graphs: dict[tuple, GraphedStep] = {}
        # one memory pool and one capture stream for all the run's graphs, made with the first
        self.graph_pool = self.graph_stream = None
        self.names: tuple = ()
        self.whole_steps: set[int] = set()  # this round's steps with every slot filled
        self.whole = False  # the next step's: keys the graphs beside the declared names

    def _decayed_columns(self, worker) -> torch.Tensor:
        """(P,) bool over the flat rows: True where weight decay applies, by the sequential
        trainer's rule (``decay_exempt``)."""
        exempt = decay_exempt(worker, self.spec)
        return torch.cat(
            [
                torch.full((self.params.shapes[n].numel(),), n not in exempt, dtype=torch.bool)
                for n in self.params.names
            ]
        )

    # ---------------------------------------------------------------- per round
    def train(
        self, clients: list[ClientContext], schedules: list[ClientSchedule], global_model
    ) -> list[Trained]:
        if len(clients) != self.k:
            raise ValueError(
                f"the batched trainer was built for {self.k} clients, got {len(clients)}"
            )
        steps = [s.num_steps for s in schedules]
        self._load_tables(clients, schedules)
        self._load_declared(clients)
        with torch.no_grad():
            for n, p in global_model.named_parameters():
                if n in self.global_params:
                    self.global_params[n].copy_(p)
            self.params.fill(self.global_params)
            if self.norms:
                fill_norm_buffers(self.student, [global_model.state_dict()] * self.k)
        self.opt.reset()
        self.t.zero_()
        self.loss_sum.zero_()
        if self.compile_pending:
            self._whole_batch(0 in self.whole_steps)  # the form the trial compiles first
            self._compile(clients[0].round)
        try:
            for step in range(max(steps, default=0)):
                self._whole_batch(step in self.whole_steps)
                self._run_step()
        except RuntimeError as exc:
            if not str(exc).startswith("vmap:"):
                raise
            raise unbatchable_loss(type(self.strategy).name, self.k, exc) from exc
        return [
            Trained(
                self.params.export(c),
                steps[c],
                self.loss_sum[c] / max(steps[c], 1),
                {
                    f"{name}.{b}": value
                    for name, norm in self.norms.items()
                    for b, value in norm.client_buffers(c).items()
                },
            )
            for c in range(self.k)
        ]

    def _load_tables(self, clients, schedules) -> None:
        """The round's step tables: per step, slot and client the sample's start offset, flip and
        label; its weight (1/count, 0 in padding), the active mask and the optimizer's coefficients."""
        s_max, b, k = self.max_steps, self.batch, self.k
        start = torch.zeros(s_max, b, k, dtype=torch.long)
        flip = torch.zeros(s_max, b, k, dtype=torch.long)
        rows = torch.zeros(s_max, b, k, dtype=torch.long)
        cut = torch.zeros(2, s_max, b, k, dtype=torch.long)
        weight = torch.zeros(s_max, b, k, dtype=torch.float64)
        active = torch.zeros(s_max, k, dtype=torch.float64)
        for c, (client, sched) in enumerate(zip(clients, schedules, strict=True)):
            n = sched.num_steps
            if n == 0:
                continue
            global_rows = self.client_rows[client.client_id][sched.rows]
            start[:n, :, c] = self.inputs.start(global_rows, sched.off_y, sched.off_x)
            flip[:n, :, c] = sched.flip
            rows[:n, :, c] = global_rows
            if sched.cut is not None:
                cut[:, :n, :, c] = sched.cut
            valid = sched.valid().double()
            weight[:n, :, c] = valid / valid.sum(1, keepdim=True)
            active[:n, c] = 1.0
        # the steps whose every slot of every client holds a sample (BatchNorm needs no mask)
        full = (weight != 0).all(2).all(1)
        self.whole_steps = set(torch.nonzero(full).flatten().tolist())
        ints = torch.stack([start, flip, rows, *cut][: self.int_table.shape[1]], 1).to(self.device)
        labels = self.inputs.labels
        ints[:, 2] = labels[ints[:, 2]]
        self.int_table.copy_(ints)
        coef = self.opt.coefficients(active.to(self.dtype), self.spec.lr_of_round(clients[0].round))
        floats = torch.cat([weight.to(self.dtype), active.to(self.dtype).unsqueeze(1), coef], 1)
        self.float_table.copy_(floats)

    def _load_declared(self, clients: list[ClientContext]) -> None:
        """Copy what the clients declared into the trainer's static buffers, checking that every
        client declared the same names and that shared values are shared."""
        decls = [c.declared for c in clients]
        names = decls[0].names()
        for c, d in zip(clients, decls, strict=True):
            if d.names() != names:
                raise ValueError(
                    f"strategy {self.strategy.name!r}: client {c.client_id} declared {d.names()} "
                    f"but client {clients[0].client_id} declared {names}; the batched trainer needs "
                    "every client of a round to declare the same names (see strategies/base.py)"
                )
        first = decls[0]
        for name, model in first.shared_models.items():
            if any(d.shared_models[name] is not model for d in decls):
                raise ValueError(
                    f"strategy {self.strategy.name!r}: share_model({name!r}) got different models "
                    "for different clients; declare a per-client model with own_model"
                )
            self._slot(name, shared=True).fill(model)
        for name in first.own_models:
            self._slot(name, shared=False).fill(
                [{n: t.to(self.device) for n, t in d.own_models[name].items()} for d in decls]
            )
        self.values = {"shared": {}, "own": {}, "step": {}}  # this round's names, over the store
        shared = self.values["shared"]
        for name, value in first.shared.items():
            for d in decls:
                v = d.shared[name]
                if v is not value and not torch.equal(v, value):
                    raise ValueError(
                        f"strategy {self.strategy.name!r}: share({name!r}) differs between "
                        "clients; declare it with own"
                    )
            shared[name] = self._keep("shared", name, static(self._kept("shared", name), value))
        buffers.same_shapes(self.strategy.name, [c.client_id for c in clients], decls)
        own = self.values["own"]
        for name in first.own:
            stacked = stack_into(self._kept("own", name), [d.own[name] for d in decls])
            own[name] = self._keep("own", name, stacked)
        step = self.values["step"]
        for name in first.per_step:
            rows = [d.per_step[name] for d in decls]
            step[name] = self._keep(
                "step", name, steps_into(self._kept("step", name), rows, self.max_steps)
            )
        self.names = (
            names,
            tuple(
                (kind, n, shape_of(v))
                for kind in sorted(self.values)
                for n, v in sorted(self.values[kind].items())
            ),
        )
        self.active_slots = sorted(
            [(n, True) for n in first.shared_models] + [(n, False) for n in first.own_models]
        )

    def _kept(self, kind: str, name: str):
        return self._store.get((kind, name))

    def _keep(self, kind: str, name: str, value):
        old = self._store.get((kind, name))
        if old is not None and not same_buffers(old, value):
            self._drop_graphs_reading(kind, name)
        self._store[(kind, name)] = value
        return value

    def _drop_graphs_reading(self, kind: str, name: str) -> None:
        """Forget every graph captured on the buffer of ``(kind, name)``, which is being replaced
        (a new shape): replayed, it would read and write memory the old buffer no longer owns."""
        for key in [k for k in self.graphs if any(e[:2] == (kind, name) for e in k[1])]:
            del self.graphs[key]

    def _slot(self, name: str, shared: bool) -> FrozenSlot | SharedSlot:
        key = (name, shared)
        if key not in self.slots:
            self.slots[key] = (
                SharedSlot(self.worker)
                if shared
                else FrozenSlot(
                    self.student, self.global_params, self.k, self.kinds, self.dtype, self.device
                )
            )
        return self.slots[key]

    def _whole_batch(self, whole: bool) -> None:
        """The next step fills every slot (or not): BatchNorm takes its unmasked form, and with
        CUDA graphs the step's graph for that form."""
        self.whole = whole and bool(self.norms)
        for norm in self.norms.values():  # the layers found once, not walked every step
            norm.whole_batch = self.whole

    def _compile(self, first_round: int) -> None:
        """Compile the folded student on this round's first batch, before any step or capture,
        if the run's steps left repay it (counted from ``first_round``, 0-based: a resumed run's);
        run.json records the outcome (``fedkd.engine.compiled_step``)."""
        self.compile_pending = False
        if (short := too_short((self.spec.rounds - first_round) * self.max_steps)) is not None:
            self.record.update(compile_step=False, compile_step_reason=short)
            return self._recorded()
        ints = self.int_table[0]
        x = self.inputs(ints[0], ints[1], self.dtype, ints[3:]).flatten(1, 2)
        self.record.update(compile_step=False, compile_step_reason=TRIAL_RUNNING)
        self._recorded()
        try:
            self.forward, seconds, error = try_compiled(
                self.student, x, self.leaves, self._autocast
            )
        except KeyboardInterrupt:  # a stop asked for, not the compiler's failure
            self.record.update(compile_step=True, compile_step_reason=None)
            raise
        self.compiled_untried = error is None
        self.record.update(compile_step=error is None, compile_step_reason=error)
        self.record["compile_step_seconds"] = round(seconds, 3)
        if error is not None:
            self.record["compile_step_seconds_lost"] = round(seconds, 3)
        self._recorded()

    def _recorded(self) -> None:
        """Tell the run that the engine record changed (it writes run.json again)."""
        if self.on_record_change is not None:
            self.on_record_change()

    # ---------------------------------------------------------------- per step
    def _autocast(self):
        return torch.autocast(
            self.device.type, torch.bfloat16, enabled=self.spec.precision == "bf16",
            cache_enabled=not self.use_graphs,  # the weight-cast cache must be off in a graph
        )  # fmt: skip

    def _run_step(self) -> None:
        if self.compiled_untried:
            return self._first_compiled_step()
        if not self.use_graphs:
            return self._step()
        started = time.perf_counter()
        try:  # the pool and stream too: where CUDA cannot make them, the run goes on eagerly
            key = (*self.names, self.whole)
            graph = self.graphs.get(key)
            if graph is None:
                if self.graph_pool is None:
                    self.graph_pool = graph_pool()
                    self.graph_stream = capture_stream(self.device)
                graph = self.graphs[key] = GraphedStep(
                    self.device, self.graph_pool, self.graph_stream
                )
            if graph.captures_next:
                return graph.step(self._step)  # the capture, which runs nothing, then a replay
        except Exception as exc:  # the step has not happened: it runs eagerly, as every later one
            self._without_graphs(exc, time.perf_counter() - started)
            return self._step()
        # a replay, or a warm-up step: an eager step, whose failure is the step's and not the
        # graphs' (and may have written part of the step)
        graph.step(self._step)

    def _without_graphs(self, exc: Exception, seconds: float) -> None:
        """The eager step for the rest of the run, after a failed capture: no graphs, and the
        compiled forward dropped with them (its kernels may be what failed)."""
        self.use_graphs, self.graphs = False, {}
        self.graph_pool = self.graph_stream = None
        cause = exc  # a capture ended after a failure raises again: the first error is the cause
        while cause.__context__ is not None:
            cause = cause.__context__
        self.record.update(
            cuda_graphs=False,
            cuda_graphs_reason=(
                f"capturing the step as a CUDA graph failed ({first_line(cause)}); the batched "
                "step runs eagerly"
            ),
            cuda_graphs_seconds_lost=round(seconds, 3),
        )
        if self.forward != self.student.features_and_logits:
            self.forward = self.student.features_and_logits
            self.record.update(
                compile_step=False,
                compile_step_reason=DROPPED_WITH_GRAPHS,
            )
        self._recorded()

    def _first_compiled_step(self) -> None:
        """The compiled forward's first step, eagerly and guarded: where it fails, every buffer
        the step writes is put back and the step runs with the eager forward, for the run."""
        self.compiled_untried = False
        written = [self.params.rows, self.params.blocks, self.loss_sum, self.t]
        written += [t for t in vars(self.opt).values() if isinstance(t, torch.Tensor)]
        written += list(self.student.buffers())
        saved = [t.clone() for t in written]
        started = time.perf_counter()
        try:
            self._step()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # an asynchronous failure surfaces here
        except Exception as exc:
            with torch.no_grad():
                for t, before in zip(written, saved, strict=True):
                    t.copy_(before)
            self.forward = self.student.features_and_logits
            lost = self.record.get("compile_step_seconds", 0) + time.perf_counter() - started
            self.record.update(
                compile_step=False,
                compile_step_reason=(
                    f"the compiled step failed in its first use ({first_line(exc)}); the "
                    "batched step runs eagerly"
                ),
                compile_step_seconds_lost=round(lost, 3),
            )
            self._recorded()
            self._run_step()

    def _step(self) -> None:
        """One local step of every client; reads and writes only the trainer's buffers."""
        k, b, spec = self.k, self.batch, self.spec
        ints = self.int_table.index_select(0, self.t).squeeze(0)  # (3 or 5, B, K)
        floats = self.float_table.index_select(0, self.t).squeeze(0)  # (B + 1 + n, K)
        step_values = {
            n: v.index_select(0, self.t).squeeze(0) for n, v in self.values["step"].items()
        }
        weight, coef = floats[:b], floats[b + 1 :]
        finished = floats[b] == 0  # (K,) the clients done with their local steps (active 0)
        x = self.inputs(ints[0], ints[1], self.dtype, ints[3:])  # (B, K, C, H, W)
        x_folded = x.flatten(1, 2)
        if self.norms:
            self.slot_valid.copy_(weight != 0)
        with self._autocast():
            with torch.no_grad():
                # the clients' batches one after another, for the shared models (made once)
                stacked = None
                if any(shared for _, shared in self.active_slots):
                    stacked = x.transpose(0, 1).reshape(-1, *x.shape[2:])  # (K*B, C, H, W)
                outputs = {
                    n: self.slots[n, shared].outputs(stacked if shared else x_folded, k)
                    for n, shared in self.active_slots
                }
            features, logits = per_client(*self.forward(x_folded), k)
            # each client's parameters as views of the folded ones: the gradient reaches them
            params = {
                n: leaf.transpose(1, 2) if n in self.params.transposed else leaf.view(k, *shape)
                for (n, shape), leaf in zip(self.params.shapes.items(), self.leaves, strict=True)
            }
            losses = vmap(self._loss_fn(), in_dims=(0, 0, 0, 1, 1, 1, 0, 0, 0))(
                params, features, logits, ints[2], weight, x,
                outputs, self.values["own"], step_values,
            )  # fmt: skip
        grads = torch.autograd.grad(losses.sum(), self.leaves)
        g = self.params.gather_grads(grads)
        if spec.grad_clip is not None:
            clip_rows_(g, spec.grad_clip)
        # finished clients: no step (their regularisers neither), whatever their rows hold
        self.opt.step(self.params.rows, g, coef, finished)
        self.params.sync()
        self.loss_sum.add_(losses.detach().float().masked_fill(finished, 0.0))
        self.t.add_(1)  # last: a step that failed part way has not moved the counter

    def _loss_fn(self):
        """One client's loss (vmapped over K). A fresh function per step: the trainer holds no
        closure over itself, so it is freed with the run."""
        strategy, worker = self.strategy, self.worker
        global_params, shared = self.global_params, self.values["shared"]

        def loss(params, features, logits, y, weight, x, outputs, own, step):
            ctx = LocalContext(
                params=params, model=FunctionalModel(worker, params), global_params=global_params,
                outputs={n: Outputs(*o) for n, o in outputs.items()}, shared=shared, own=own,
                step=step,
            )  # fmt: skip
            return strategy.checked_local_loss(LocalBatch(x, y, features, logits, weight), ctx)

        return loss
