"""Local training throughput: the sequential trainer against a bare PyTorch loop doing the same
work (same model and initial weights, batches and augmentation, optimizer, clipping; FedAvg's
step), side by side in one process, interleaved, median of the repeats; the final weights are
compared. Both run under the set-up a run gets (``Run.prepare``): the precision they are
labelled with (TF32 or not, bf16 autocast) and the run's kernel settings, recorded with the
figures (``precision``)."""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.nn.functional as F

from fedkd.config import RunSpec
from fedkd.data.synthetic import synthetic_cifar
from fedkd.engine.client import TrainEnv, train_clients
from fedkd.engine.run import Run
from fedkd.models import MODELS
from fedkd.runtime.schedule import ClientSchedule
from fedkd.tools.bench.common import max_abs_diff, scratch_dir, sync

# the models of the comparison, which trains on CIFAR-10-shaped images
IMAGE_MODELS = tuple(m for m in MODELS if m != "distilbert")


def bare_loop(model, env: TrainEnv, schedule: ClientSchedule, spec: RunSpec, device) -> None:
    """The reference: a plain PyTorch training loop (torch.optim.SGD) over the same batches, in
    the same precision (bf16: under the same autocast)."""
    opt = torch.optim.SGD(
        model.parameters(), lr=spec.lr, momentum=spec.momentum,
        weight_decay=spec.weight_decay, foreach=True,
    )  # fmt: skip
    params = list(model.parameters())
    inputs = env.inputs()
    rows = env.client_rows(0)[schedule.rows]  # the client's samples as rows of the split
    start = inputs.start(rows, schedule.off_y, schedule.off_x).to(device)
    flip, rows = schedule.flip.to(device), rows.to(device)
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=spec.precision == "bf16")
    model.train()
    for s, n in enumerate(schedule.count):
        x = inputs(start[s, :n], flip[s, :n])
        with autocast:
            loss = F.cross_entropy(model(x), inputs.labels[rows[s, :n]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.grad_clip, foreach=True)
        opt.step()


def bench_local_training(args, device: torch.device) -> dict:
    ds = synthetic_cifar(n_train=args.batch_size * args.steps, n_val=10, n_test=10)
    spec = RunSpec(
        dataset="cifar10", model=args.model, clients=1, participation=1.0, local_epochs=1,
        batch_size=args.batch_size, device=device.type, precision=args.precision,
        engine="sequential", memory_format="contiguous", strategy="fedavg",
    )  # fmt: skip
    # a run's set-up: its precision and kernel settings, the data on the device, model, strategy
    run = Run(spec, scratch_dir(), dataset=ds, log=lambda msg: None)
    run.prepare()
    env, init, strategy = run.env, run.global_model, run.strategy
    schedule = env.schedule(0, 0)  # the batches the engine draws for client 0 in round 0
    images = len(ds.train) * spec.local_epochs
    times = {"engine": [], "bare": []}
    final = {}
    for rep in range(args.repeats + 1):  # the first repetition warms up and is discarded
        for which in ("engine", "bare"):
            sync(device)
            t0 = time.perf_counter()
            if which == "engine":
                updates, _ = train_clients(0, [0], init, {}, strategy, env)
                final[which] = updates[0].state
            else:
                model = copy.deepcopy(init)
                bare_loop(model, env, schedule, spec, device)
                final[which] = model.state_dict()
            sync(device)
            if rep > 0:
                times[which].append(time.perf_counter() - t0)
    diff = max_abs_diff(final["engine"], final["bare"])
    eng = images / statistics.median(times["engine"])
    bare = images / statistics.median(times["bare"])
    return {
        "engine_img_s": eng, "bare_img_s": bare, "ratio": eng / bare, "max_abs_diff": diff,
        "precision": run.precision,  # as set for both, read back from torch
    }  # fmt: skip


def describe_local_training(r: dict, args) -> str:
    return (
        f"local training, sequential trainer vs a bare PyTorch loop on the same batches "
        f"(FedAvg's step, {args.model}, batch {args.batch_size}, {args.steps} steps, median "
        f"of {args.repeats}, {args.precision}): engine {r['engine_img_s']:,.1f} img/s, bare "
        f"{r['bare_img_s']:,.1f} img/s, ratio {r['ratio']:.3f} (final weights, max abs "
        f"difference: {r['max_abs_diff']:.1e})"
    )
