"""``fedkd bench --ops``: the operations one batched local step dispatches, per strategy.

The step is the batched trainer's (``fedkd.engine.batched``) on ResNet-8-GN (or with BatchNorm:
``--norm batch``) with CIFAR-shaped
synthetic data: 4 clients x 64 images, crop-flip on, gathering, augmentation, forward, backward,
clipping and the optimizer included. It is counted in the second round (so strategies that start
distilling after the first round, such as fedgkd, do), at the round's second step (the first
step is the same work; this one shows the steady state), eagerly (``engine: batched-eager``:
the kernels a CUDA graph of the step captures). Kernels and host syncs are counted as
``fedkd.tools.opcount`` defines them. Each line: ``<strategy> ops_per_step=<N> host_syncs=<S>``.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager

import torch

from fedkd.config import RunSpec
from fedkd.data.synthetic import synthetic_cifar
from fedkd.engine.client import train_clients
from fedkd.engine.run import Run
from fedkd.runtime.seeding import sample_clients
from fedkd.strategies import strategy_names
from fedkd.tools.bench.common import norm_options
from fedkd.tools.opcount import count_ops

# server-side work kept small where a strategy has a knob for it (the clients' step is measured)
SERVER_LIGHT = {"feddf": {"max_steps": 2, "eval_every": 1, "patience": 2, "unlabeled": "noise"}}


def step_ops(strategy: str, dataset, clients: int = 4, batch_size: int = 64, device="cpu",
             model: str = "resnet8", norm: str = "group") -> dict:  # fmt: skip
    """Kernels and host syncs of one batched local step of ``strategy`` in round 2."""
    spec = RunSpec(
        dataset="cifar10", model=model, model_options=norm_options(norm),
        strategy=strategy, params=SERVER_LIGHT.get(strategy, {}),
        clients=clients, participation=1.0, partition="iid", local_epochs=1,
        batch_size=batch_size, rounds=2, engine="batched-eager", device=str(device), augment="crop-flip",
        memory_format="contiguous", seed=0,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        run = Run(spec, out, dataset=dataset, log=lambda msg: None)
        run.prepare()
        if run.env.engine(run.strategy)["used"] != "batched":
            raise RuntimeError(f"{strategy}: {run.env.engine(run.strategy)['reason']}")
        run._round(0)
        trainer = run.env.trainer(run.strategy, clients)
        selected = sample_clients(spec.seed, 1, spec.clients, spec.participation)
        payload = run.strategy.payload(1, run.global_model)
        with counting_step(trainer) as counted:
            train_clients(1, selected, run.global_model, payload, run.strategy, run.env)
    return counted


@contextmanager
def counting_step(trainer, at_step: int = 1):
    """Within the block, the batched ``trainer``'s step at device step counter ``at_step`` (the
    round's second: the first is the same work) is counted; yields a dict that then holds
    ``kernels``, ``syncs`` and ``by_op``. Reading the counter is outside the counted region."""
    counted: dict = {}
    original = trainer._step

    def step():
        if trainer.t.item() == at_step and not counted:
            with count_ops() as c:
                original()
            counted.update(kernels=c.kernels, syncs=c.syncs, by_op=dict(c.by_op))
        else:
            original()

    trainer._step = step
    try:
        yield counted
    finally:
        del trainer._step  # the class's method again


def ops_report(
    strategies: list[str] | None = None, device="cpu", norm: str = "group"
) -> list[tuple[str, dict]]:
    # 4 clients x 128 images: two steps of 64 each per round
    data = synthetic_cifar(n_train=512, n_val=64, n_test=64)
    torch.manual_seed(0)
    return [
        (s, step_ops(s, data, device=device, norm=norm)) for s in (strategies or strategy_names())
    ]


def print_ops(
    strategies: list[str] | None = None, device="cpu", detail: bool = False, norm: str = "group"
) -> None:
    for name, c in ops_report(strategies, device, norm):
        print(f"{name} ops_per_step={c['kernels']} host_syncs={c['syncs']}", flush=True)
        if detail:
            ops = ", ".join(
                f"{op} {n}" for op, n in sorted(c["by_op"].items(), key=lambda i: -i[1])
            )
            print(f"    {ops}")
