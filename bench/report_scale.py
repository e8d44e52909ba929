"""How long the report steps take, and how much memory they hold, on the papers' full grid
(config/paper.yaml: 1,254 runs, 684 of them rounds-to-target runs of up to 1,000 rounds).

Synthetic finished runs, one per run of the grid, are written by fedkd's own writers
(``write_metrics``, ``write_json``: the digests and seals training writes) into a scratch
folder's results/runs, each with every round its spec asks for (``--round-scale`` less: a run
that stopped early), the columns training records (per-class accuracies, the clients of each
round). Then, each in its own process, with its wall time, CPU seconds and peak memory:

1. `fedkd aggregate` of the claims page's runs (every run) and of rounds_to_target's;
2. `fedkd render` of the claims page and of rounds_to_target, from those aggregates;
3. `fedkd status --configfile config/paper.yaml` over every run;
4. `snakemake -n --configfile config/paper.yaml` (its plan: nothing is built).

    python bench/report_scale.py                      # 1,000-round runs as planned
    python bench/report_scale.py --round-scale 0.5    # the same runs at half their rounds
    python bench/report_scale.py --skip-snakemake --keep /tmp/paper-runs

Two scales tell a cost that grows faster than the rounds. Each measurement is appended as a row
of bench/results.jsonl (topic "Report at scale"; then `python bench/results_table.py --out
docs/results.md`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "paper.yaml"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(ROOT / "bench"))
from planning import append_row, commit, load_average  # noqa: E402

RESULTS = ROOT / "bench" / "results.jsonl"
OUTPUTS = ("claims", "rounds_to_target")  # every run; the most rounds of one table
CLASSES = {"cifar10": 10, "cifar100": 100, "tinyimagenet": 200, "agnews": 4, "sst5": 5}


def load_plan():
    from fedkd.pipeline import Plan, validate_config
    from fedkd.pipeline.config_file import read_config_files

    config = read_config_files([CONFIG])
    validate_config(config, SCHEMA, check_specs=False)
    return Plan(config)


def make_runs(plan, folder: Path, round_scale: float) -> dict:
    """A finished run folder for every run of the grid, with ``round_scale`` of its rounds."""
    import numpy as np

    from fedkd.config import RunSpec
    from fedkd.engine.run_outputs import summarize, write_json, write_metrics
    from fedkd.run_paths import parse_run_dir

    rng = np.random.default_rng(0)
    t0, rounds = time.perf_counter(), 0
    for run in sorted(plan.all_runs()):
        keys = parse_run_dir(run)
        args = (keys["dataset"], keys["variant"], keys["setting"], keys["seed"])
        spec = RunSpec.from_dict(dict(plan.run_spec(*args)))
        classes, done = CLASSES[spec.dataset], max(2, int(spec.rounds * round_scale))
        rows = []
        for r in range(done):
            acc = float(0.1 + 0.8 * (r + 1) / done * rng.uniform(0.9, 1.0))
            picked = rng.choice(spec.clients, spec.clients_per_round, replace=False)
            rows.append({
                "round": r + 1, "test_acc": acc, "test_loss": 1 - acc, "val_acc": acc,
                "val_loss": 1 - acc, "class_acc": rng.uniform(0, 1, classes).tolist(),
                "train_loss": 0.5, "local_acc": acc if spec.eval_local else float("nan"),
                "bytes_sent": 1000, "bytes_received": 1000, "clients": sorted(picked.tolist()),
                "local_seconds": 1.0, "seconds": 1.2,
            })  # fmt: skip
        out = folder / run
        out.mkdir(parents=True)
        write_metrics(out / "metrics.parquet", rows)
        write_json(out / "run.json", {
            "status": "complete", "labels": {"variant": keys["variant"]},
            "spec": spec.to_dict(), "spec_hash": spec.hash(), "strategy_params": spec.params,
            "model": spec.resolved_model,
            "dataset": {"name": spec.dataset, "kind": "text" if classes < 10 else "image",
                        "num_classes": classes, "train": 45000, "val": 5000, "test": 10000},
            "rounds_done": done, "rounds_saved": 0, "summary": summarize(rows, classes),
        })  # fmt: skip
        rounds += done
    return {
        "runs": len(plan.all_runs()),
        "rounds": rounds,
        "make_runs_seconds": round(time.perf_counter() - t0, 1),
    }


# Runs a command and prints its exit code and resource use. A child's peak memory starts at its
# parent's size when it forks (and Linux keeps it across exec), so the measured command is
# started by this small interpreter, not by the benchmark, which holds the plan and torch.
LAUNCHER = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stderr=subprocess.STDOUT)
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime,
                  usage.ru_maxrss]), file=sys.stderr)
"""


def measure(name: str, cmd: list[str], cwd: Path) -> dict:
    """``cmd`` in its own process: wall seconds, CPU seconds (user + system) and peak memory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = cwd / f"{name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        launcher = [sys.executable, "-c", LAUNCHER, *cmd]
        proc = subprocess.run(launcher, cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    code, cpu, peak_kb = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    if code:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{log.read_text()[-3000:]}")
    print(f"{name}: {wall:.1f} s", file=sys.stderr)
    return {
        f"{name}_seconds": round(wall, 1),
        f"{name}_cpu_seconds": round(cpu, 1),
        f"{name}_peak_gb": round(peak_kb / 2**20, 2),  # ru_maxrss: kilobytes on Linux
    }


def report_steps(plan, work: Path, snakemake: bool) -> dict:
    fedkd = [sys.executable, "-m", "fedkd"]
    figures: dict = {}
    aggregates = work / "results" / "aggregate"
    aggregates.mkdir(parents=True)
    for name in OUTPUTS:
        runs = aggregates / f"{name}.runs"
        runs.write_text(plan.runs_list(name))
        out = aggregates / f"{name}.parquet"
        cmd = [*fedkd, "aggregate", "--out", str(out), "--runs-file", str(runs)]
        figures.update(measure(f"aggregate_{name}", cmd, work))
        figures[f"aggregate_{name}_rows"] = _rows(out)
    for name in OUTPUTS:
        options = work / f"{name}.options.json"
        options.write_text(json.dumps(plan.render_options(name)))
        cmd = [
            *fedkd, "render", plan.layout(name).name, "--name", name,
            "--aggregate", str(aggregates / f"{name}.parquet"),
            "--out", str(work / "results" / "tables" / name), "--options", f"@{options}",
        ]  # fmt: skip
        figures.update(measure(f"render_{name}", cmd, work))
    figures.update(measure("status", [*fedkd, "status", "--configfile", str(CONFIG)], work))
    if snakemake:
        cmd = [
            sys.executable, "-m", "snakemake", "-n", "--cores", "1",
            "--snakefile", str(ROOT / "Snakefile"), "--configfile", str(CONFIG),
        ]  # fmt: skip
        figures.update(measure("snakemake_n", cmd, work))
    return figures


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def record(figures: dict, head: str, round_scale: float) -> None:
    """This benchmark's row of bench/results.jsonl (planning.append_row)."""
    what = (
        f"fedkd aggregate and render of the claims page and rounds_to_target, fedkd status"
        f" and snakemake -n, on config/paper.yaml's {figures['runs']:,} runs as synthetic "
        f"finished run folders ({figures['rounds']:,} rounds)"
    )
    conditions = (
        f"runs at {round_scale:g} of their planned rounds, every column training records "
        f"(per-class accuracies, the clients of each round); Python "
        f"{platform.python_version()}; load average {load_average():.1f} at the end (the cores "
        "are shared: the CPU seconds are each process's own); peak memory: its maximum "
        "resident set"
    )
    append_row(f"report-scale-{round_scale:g}", head,
               {"topic": "Report at scale", "what": what, "figures": figures,
                "conditions": conditions}, [])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--round-scale", type=float, default=1.0,
        help="the share of each run's planned rounds its folder holds (0 < x <= 1) [1]",
    )  # fmt: skip
    parser.add_argument("--skip-snakemake", action="store_true", help="leave out snakemake -n")
    parser.add_argument("--keep", metavar="DIR", help="write the runs here and keep them")
    args = parser.parse_args()
    if not 0 < args.round_scale <= 1:
        raise SystemExit(f"--round-scale {args.round_scale}: give a share in (0, 1]")
    head = commit()  # the code measured: the checkout may move on while this runs
    sys.path.insert(0, str(ROOT / "src"))
    plan = load_plan()
    work = Path(args.keep or tempfile.mkdtemp(prefix="fedkd-report-scale-"))
    if args.keep and work.exists() and any(work.iterdir()):
        raise SystemExit(f"--keep {work}: give an empty or new folder")
    work.mkdir(parents=True, exist_ok=True)
    try:
        figures = make_runs(plan, work, args.round_scale)
        figures.update(report_steps(plan, work, not args.skip_snakemake))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    record(figures, head, args.round_scale)


if __name__ == "__main__":
    main()
