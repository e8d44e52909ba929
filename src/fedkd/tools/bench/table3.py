"""Table-3 runs (``--strategies``, ``--engine``): CIFAR-10-shaped synthetic data, ResNet-8-GN (or
with BatchNorm, ``--norm batch``, FedDF Table 1's model), 20
clients, C 0.2, 20 local epochs, batch 64, 100 rounds planned, through the full round loop
(``Run.run``). The first ``--warmup-rounds`` rounds (cuDNN autotuning, compilation, CUDA-graph
capture, fedgkd's first round without a teacher) are not timed; each of the next
``--run-rounds`` rounds is timed whole (from the end of the previous round's writes to the end
of its own, ``Run.on_rounds_done``) and split into local training (the ``local_seconds`` the run
loop records) and the fixed cost of a round (payload, aggregation, server update, evaluation,
metrics and checkpoint writes). Reported: img/s of local training and of whole rounds, the fixed
cost per round, the projected minutes per 100 rounds, and the compile time where the step was
compiled."""

from __future__ import annotations

import torch

from fedkd.runtime.seeding import clients_a_round
from fedkd.tools.bench.common import (
    TABLE3,
    TABLE3_CLIENTS_A_ROUND,
    TABLE3_TRAIN_IMAGES,
    RoundClock,
    engine_label,
    synthetic_table3_data,
    table3_spec,
)


def bench_table3_run(args, device: torch.device, strategy: str, engine: str) -> dict:
    """One table-3 run: ``args.warmup_rounds`` untimed rounds, then ``args.run_rounds`` timed."""
    clock = RoundClock(device)
    spec = table3_spec(strategy, engine, args, device)
    clock.run_rounds(
        spec, synthetic_table3_data(args),
        args.warmup_rounds + args.run_rounds,
    )  # fmt: skip
    first = args.warmup_rounds + 1
    result = clock.summary(list(range(first, first + args.run_rounds)))
    choice = clock.run.env.engine(clock.run.strategy)
    result.update(strategy=strategy, engine=engine_label(choice), engine_record=choice)
    result["precision_record"] = getattr(clock.run, "precision", None)  # run.json's, as set
    result["norm"] = getattr(args, "norm", "group")
    per_round = clients_a_round(spec.clients, spec.participation)
    result["clients_per_round"] = per_round
    full_images = TABLE3["local_epochs"] * per_round * TABLE3_TRAIN_IMAGES / TABLE3["clients"]
    result["full_images"] = full_images
    if result["images_per_round"] < full_images:  # a reduced shape: scale its local training
        local_full = full_images / result["local_img_s"]
        result["projected_min_100_full"] = 100 * (local_full + result["fixed_s"]) / 60
    return result


def describe_table3_run(r: dict, args) -> str:
    timed = r["timed_rounds"]
    graphs, teacher = "CUDA graphs" in r["engine"], r["strategy"] == "fedgkd"
    compiled = "compiled step" in r["engine"]
    warm = ["autotuning", *(["compilation"] if compiled else []),
            *(["graph capture"] if graphs else [])]  # fmt: skip
    if args.warmup_rounds == 0:
        excluded = f"none: the timed rounds include {' and '.join(warm)}"
        if teacher:
            excluded += "; round 1, timed, has no teacher"
    else:
        excluded = ", ".join(warm + (["a first round without a teacher"] if teacher else []))
        if teacher and args.warmup_rounds == 1 and r["engine"] != "sequential":
            # the teacher first runs in round 2: a new step (its graph) and new shapes
            new = (
                "its step's graph capture and its convolutions' autotuning are"
                if graphs
                else "its convolutions' autotuning is"
            )
            excluded += f"; round 2, timed, is the teacher's first: {new} in it"
    rounds = f"s {timed[0]}-{timed[-1]}" if len(timed) > 1 else f" {timed[0]}"
    k = r.get("clients_per_round", TABLE3_CLIENTS_A_ROUND)
    per_round_note = f", {k} clients a round" if k != TABLE3_CLIENTS_A_ROUND else ""
    line = (
        f"table-3 run {r['strategy']}"
        f"{', ResNet-8 with BatchNorm' if r.get('norm') == 'batch' else ''}, {r['engine']}, "
        f"{args.precision}"
        f"{', deterministic' if args.deterministic else ''}"
        f"{per_round_note}"
        f"{f', compile {args.compile}' if args.compile != 'none' else ''}: "
        f"round{rounds} timed after {args.warmup_rounds} warm-up round(s) ({excluded}), "
        f"{r['images_per_round']:,.0f} images a round; local training {r['local_img_s']:,.0f} "
        f"img/s ({r['local_s']:.2f} s a round); whole rounds {r['round_img_s']:,.0f} img/s "
        f"({r['round_s']:.2f} s a round); fixed cost {r['fixed_s']:.2f} s a round (payload, "
        f"aggregation, server update, evaluation of {args.eval_images + args.eval_images // 2:,} "
        f"images, metrics and checkpoint writes); projected 100 rounds: "
        f"{r['projected_min_100']:.1f} min"
    )
    record = r.get("engine_record") or {}
    seconds, why_not = record.get("compile_step_seconds"), record.get("compile_step_reason")
    if compiled and seconds is not None:
        line += f"; the step compiled in {seconds:.1f} s, before round 1's first step"
    elif why_not and why_not.startswith("torch.compile failed"):
        line += f"; {why_not}"
    if "projected_min_100_full" in r:
        line += (
            f" (a reduced shape; at the full table-3 work, {r['full_images']:,.0f} images a "
            f"round, by this local "
            f"img/s and fixed cost: {r['projected_min_100_full']:.1f} min)"
        )
    return line
