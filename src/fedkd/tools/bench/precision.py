"""``--precision-check``: the test accuracy of the same runs under each precision
(``--check-precisions``, fp32, tf32 and bf16 by default), per seed. A reduced precision should
land within the seed-to-seed spread of fp32. On a CPU tf32 is fp32's arithmetic (equal figures by
construction); the comparison means something on a GPU with TF32 (NVIDIA Ampere and later).

Two settings (``--check-setting``): ``mnist5k``, the default configuration's small CNN runs; and
``table3``, table 3's FedGKD run (ResNet-8-GN, 20 clients, C 0.2, alpha 0.1, batch 64, 20 local
epochs, M 5) on mnist5k, the one real dataset a machine without downloads has. Each seed's runs
share their partition, client draws and initial weights, so the precisions are compared in pairs:
the per-seed differences from the first precision, their mean, and a paired t-test (it assumes
the differences are independent across seeds and roughly normal; with few seeds it detects only
large effects, so a p above 0.05 says no difference was found, not that there is none)."""

from __future__ import annotations

import statistics
import tempfile

import torch

from fedkd.config import RunSpec
from fedkd.engine.run import Run
from fedkd.tools.bench.common import STRATEGY_PARAMS, TABLE3

CHECK_SETTINGS = {
    "mnist5k": dict(dataset="mnist5k", clients=10, participation=0.4, alpha=0.5, local_epochs=1),
    "table3": dict(TABLE3, dataset="mnist5k", strategy="fedgkd", params=STRATEGY_PARAMS["fedgkd"]),
}


def precision_check(args, device: torch.device) -> list[dict]:
    """One record per run: precision, seed, best and final test accuracy."""
    results = []
    setting = CHECK_SETTINGS[args.check_setting]
    for seed in range(args.check_seeds):
        for precision in args.check_precisions:
            spec = RunSpec(
                **dict(setting, rounds=args.check_rounds, seed=seed, device=device.type),
                precision=precision,
            )
            with tempfile.TemporaryDirectory() as out:
                record = Run(spec, out, log=lambda msg: None).run()
            summary = record["summary"]
            results.append(
                dict(
                    precision=precision, seed=seed, best_acc=summary["best_acc"],
                    final_acc=summary["final_acc"], engine=record["engine"],
                )
            )  # fmt: skip
    return results


def paired_differences(checked: list[dict], precision: str, baseline: str, key: str) -> dict:
    """``key`` of ``precision`` less that of ``baseline``, seed by seed, with a paired t-test
    where scipy is installed (a bare GPU machine may lack it: then ``why`` says so)."""
    base = {r["seed"]: r[key] for r in checked if r["precision"] == baseline}
    mine = {r["seed"]: r[key] for r in checked if r["precision"] == precision}
    seeds = sorted(base)
    diffs = [mine[s] - base[s] for s in seeds]
    out = {"seeds": seeds, "differences": diffs, "mean": statistics.mean(diffs)}
    out["t"] = out["p"] = None
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        out["why"] = "no spread to test"  # one seed, or every difference equal (zero on a CPU)
        return out
    try:
        from scipy import stats
    except ImportError:
        out["why"] = "no t-test: scipy is not installed"
        return out
    test = stats.ttest_rel([mine[s] for s in seeds], [base[s] for s in seeds])
    out["t"], out["p"] = float(test.statistic), float(test.pvalue)
    return out


def describe_precision(checked: list[dict], precision: str, args) -> tuple[str, dict]:
    rows = [r for r in checked if r["precision"] == precision]
    best = [r["best_acc"] for r in rows]
    final = [r["final_acc"] for r in rows]
    line = (
        f"{args.check_setting} setting, {args.check_rounds} round(s), {precision}: best accuracy "
        f"{statistics.mean(best):.4f} ± {statistics.pstdev(best):.4f}, final "
        f"{statistics.mean(final):.4f} ± {statistics.pstdev(final):.4f} "
        f"(seeds: {', '.join(f'{a:.4f}' for a in final)} final)"
    )
    details = {
        "precision": precision, "setting": args.check_setting, "rounds": args.check_rounds,
        "best_acc_by_seed": {r["seed"]: r["best_acc"] for r in rows},
        "final_acc_by_seed": {r["seed"]: r["final_acc"] for r in rows},
        "engine": rows[0]["engine"],
    }  # fmt: skip
    baseline = args.check_precisions[0]
    if precision != baseline:
        for key in ("final_acc", "best_acc"):
            paired = paired_differences(checked, precision, baseline, key)
            details[f"{key}_minus_{baseline}"] = paired
            tested = (
                f"paired t {paired['t']:.2f}, p {paired['p']:.3f}"
                if paired["p"] is not None
                else paired["why"]
            )
            line += (
                f"; {key.replace('_acc', '')} minus {baseline}, seed by seed: "
                f"{', '.join(f'{d:+.4f}' for d in paired['differences'])}, mean "
                f"{paired['mean']:+.4f} ({tested})"
            )
    return line, details
