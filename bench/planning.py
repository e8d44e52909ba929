"""How long planning takes for a large sweep: fedkd's own planning, `snakemake -n`, and an
aggregate of tens of thousands of runs.

A generated configuration asks for ``--runs`` runs (default 100,000: 100 alphas x 100 client
counts x 10 participations on mnist5k, one column, one seed). Measured, each in seconds:

1. fedkd's planning in this process: reading and validating the configuration (every distinct
   run spec through RunSpec), every output's runs and partitions, the aggregate's runs list, and
   every train job's flags and stamp, as the workflow's rules ask for them (the import of torch,
   which validation needs, on its own line);
2. ``snakemake -n`` on the same configuration, run in this process through Snakemake's own
   command line, with every call into fedkd's plan and validation timed: the rest of the total is
   Snakemake's own work (parsing, its DAG of jobs, printing the plan);
3. ``--aggregate-runs`` small synthetic run folders (one per run of a generated table, two rounds
   each, with the records training writes) aggregated by `fedkd aggregate --runs-file`.

    python bench/planning.py                       # all three, 100,000 runs and 30,000
    python bench/planning.py --runs 20000 --skip-snakemake
    python bench/planning.py --snakemake-timeout 1200

Each measurement is appended as a row of bench/results.jsonl (topic "Planning at scale"; then
`python bench/results_table.py --out docs/results.md`). The goal for step 1 is under 60 s on 2
cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
RESULTS = ROOT / "bench" / "results.jsonl"


def check_count(flag: str, runs: int) -> None:
    """A sweep's run count is a multiple of 1,000 (100 client counts x 10 participations)."""
    if runs % 1000:
        raise SystemExit(f"{flag} {runs}: give a multiple of 1,000")


def sweep_config(runs: int) -> dict:
    """A configuration of one table whose grid has ``runs`` points (100 client counts x 10
    participations x as many alphas as it takes; ``runs`` a multiple of 1,000)."""
    check_count("--runs", runs)
    alphas = [round(0.01 * (i + 1), 2) for i in range(runs // 1000)]
    return {
        "name": "sweep",
        "seeds": [0],
        "defaults": {
            "partition": "dirichlet-equal",
            "alpha": 0.5,
            "clients": 4,
            "participation": 0.5,
            "local_epochs": 1,
            "rounds": 2,
            "batch_size": 16,
        },  # fmt: skip
        "variants": {"fedavg": {"strategy": "fedavg"}},
        "tables": {
            "sweep": {
                "layout": "grid",
                "caption": "A sweep of alpha, clients and participation.",
                "grid": {
                    "dataset": ["mnist5k"],
                    "alpha": alphas,
                    "clients": list(range(2, 102)),
                    "participation": [round(0.1 * (i + 1), 1) for i in range(10)],
                },
                "columns": {"FedAvg": "fedavg"},
            }
        },
    }


def write_config(cfg: dict, folder: Path) -> Path:
    path = folder / "config.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML; Snakemake and fedkd read it as such
    return path


# ----------------------------------------------------------------------------- 1. fedkd
def fedkd_planning(configfile: Path) -> dict:
    t0 = time.perf_counter()
    # validation imports torch (through the strategies it checks); timed here on its own line
    import torch  # noqa: F401

    t_import = time.perf_counter() - t0
    from fedkd.pipeline import Plan, validate_config
    from fedkd.pipeline.config_file import read_config_files
    from fedkd.run_paths import parse_run_dir

    t0, cpu0 = time.perf_counter(), time.process_time()
    config = read_config_files([configfile])
    validate_config(config, SCHEMA)
    t_validate = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = Plan(config)
    runs = plan.all_runs()
    for name in plan.outputs:
        plan.aggregate_inputs(name)
        plan.runs_list(name)
        plan.target_partitions(name)
    for run in runs:  # what the train rule asks of each job
        keys = parse_run_dir(run)
        args = (keys["dataset"], keys["variant"], keys["setting"], keys["seed"])
        plan.train_args(*args)
        plan.train_stamp(*args)
    t_plan = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return {
        "runs": len(runs),
        "import_torch_seconds": round(t_import, 2),
        "validate_seconds": round(t_validate, 2),
        "plan_seconds": round(t_plan, 2),
        "fedkd_planning_seconds": round(t_validate + t_plan, 2),
        # on a shared machine the wall time counts the other processes' share of the cores too
        "fedkd_planning_cpu_seconds": round(cpu, 2),
    }


# ----------------------------------------------------------------------------- 2. snakemake -n
class FedkdClock:
    """Seconds spent inside fedkd's plan and validation, outermost calls only, on the main
    thread (Snakemake calls the rules' functions there)."""

    def __init__(self):
        self.seconds = 0.0
        self.depth = 0

    def wrap(self, func):
        @functools.wraps(func)
        def timed(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return func(*args, **kwargs)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - t0

        return timed

    def install(self) -> None:
        import fedkd.pipeline
        import fedkd.pipeline.validation as validation
        from fedkd.pipeline.plan import Plan

        for name, member in list(vars(Plan).items()):
            if callable(member) and not name.startswith("__"):
                setattr(Plan, name, self.wrap(member))
        original_init = Plan.__init__

        def init(plan, config):
            original_init(plan, config)
            for attr, value in list(vars(plan).items()):  # the per-instance caches
                if callable(value) and not isinstance(value, type):
                    setattr(plan, attr, self.wrap(value))

        Plan.__init__ = init
        fedkd.pipeline.validate_config = self.wrap(fedkd.pipeline.validate_config)
        validation.reread_config = self.wrap(validation.reread_config)
        validation.unknown_targets_message = self.wrap(validation.unknown_targets_message)


def snakemake_dry_run(configfile: Path, timeout: float) -> dict:
    """`snakemake -n` in a child process that times fedkd's part of it."""
    workdir = configfile.parent / "workdir"
    workdir.mkdir(exist_ok=True)
    child = [sys.executable, __file__, "--snakemake-child", str(configfile), str(workdir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path[1:]])}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(child, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"snakemake_n_timeout_seconds": round(timeout)}
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"snakemake -n failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    figures = json.loads(lines[-1])
    return {**figures, "snakemake_n_wall_seconds": round(wall, 1)}


def snakemake_child(configfile: str, workdir: str) -> None:
    from snakemake.cli import main

    clock = FedkdClock()
    clock.install()
    argv = [
        "-n", "--cores", "1", "--snakefile", str(ROOT / "Snakefile"), "--directory", workdir,
        "--configfile", configfile,
    ]  # fmt: skip
    sys.argv = ["snakemake", *argv]
    out = open(os.devnull, "w")  # the plan's listing of every job: its printing is timed
    real_stdout = sys.stdout
    t0, cpu0 = time.perf_counter(), time.process_time()
    sys.stdout = out
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    finally:
        sys.stdout = real_stdout
    total = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if code:
        raise SystemExit(code)
    print(
        json.dumps(
            {
                "snakemake_n_seconds": round(total, 1),
                "snakemake_n_cpu_seconds": round(cpu, 1),
                "snakemake_n_in_fedkd_seconds": round(clock.seconds, 1),
                "snakemake_n_own_seconds": round(total - clock.seconds, 1),
                "snakemake_n_own_percent": round(100 * (total - clock.seconds) / total, 1),
            }
        )
    )


# ----------------------------------------------------------------------------- 3. aggregate
def aggregate_of(runs: int, folder: Path) -> dict:
    """``runs`` synthetic run folders of a generated table, then `fedkd aggregate` of them."""
    import pandas as pd

    from fedkd.config import RunSpec
    from fedkd.pipeline import Plan, validate_config
    from fedkd.run_paths import parse_run_dir, parse_setting

    config = sweep_config(runs)
    validate_config(config, SCHEMA)
    plan = Plan(config)
    t0 = time.perf_counter()
    for _label, run in plan.target_runs("sweep"):
        keys = parse_run_dir(run)
        spec = RunSpec(
            **{**config["defaults"], **parse_setting(keys["setting"])},
            dataset=keys["dataset"],
            seed=int(keys["seed"]),
        )
        acc = [0.3, 0.5]
        path = folder / run
        path.mkdir(parents=True)
        record = {
            "status": "complete", "labels": {"variant": keys["variant"]},
            "spec": spec.to_dict(), "spec_hash": spec.hash(), "rounds_done": 2,
            "summary": {"rounds": 2, "best_acc": 0.5, "final_acc": 0.5},
            "dataset": {"train": 3240, "val": 360, "test": 1400, "num_classes": 10},
        }  # fmt: skip
        (path / "run.json").write_text(json.dumps(record))
        pd.DataFrame({"round": [1, 2], "test_acc": acc, "test_loss": [1.0, 0.8]}).to_parquet(
            path / "metrics.parquet", index=False
        )
    t_make = time.perf_counter() - t0
    runs_file = folder / "sweep.runs"
    runs_file.write_text(plan.runs_list("sweep"))
    out = folder / "sweep.parquet"
    cmd = [
        sys.executable,
        "-m",
        "fedkd",
        "aggregate",
        "--out",
        str(out),
        "--runs-file",
        str(runs_file),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    before, t0 = os.times(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    t_aggregate = time.perf_counter() - t0
    after = os.times()
    cpu_aggregate = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    if proc.returncode != 0:
        raise SystemExit(f"fedkd aggregate failed:\n{proc.stderr[-3000:]}")
    rows = len(pd.read_parquet(out, columns=["round"]))
    return {
        "aggregate_runs": runs,
        "aggregate_rows": rows,
        "make_run_folders_seconds": round(t_make, 1),
        "fedkd_aggregate_seconds": round(t_aggregate, 1),
        "fedkd_aggregate_cpu_seconds": round(cpu_aggregate, 1),
        "runs_file_bytes": runs_file.stat().st_size,
    }


# ----------------------------------------------------------------------------- record
def device() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores}-core {model} CPU"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+edits" if dirty else "")
    except OSError:
        return "unknown"


def append_row(base: str, head: str, fields: dict, notes: list[str]) -> None:
    """Append one row of bench/results.jsonl in its format (bench/results_table.py: id, topic,
    date, device, commit, command, what, figures, conditions); then `python
    bench/results_table.py --out docs/results.md` puts it in the tables. ``base``: the row's id
    (a suffix -1, -2, ... where the file has it); ``head``: the commit measured, taken at the
    start; ``fields``: topic, what, figures and conditions; ``notes``: the row's note, if any."""
    edits = head.endswith("+edits")
    head = head.removesuffix("+edits")
    rows = RESULTS.read_text(encoding="utf-8").splitlines() if RESULTS.exists() else []
    ids = {json.loads(line)["id"] for line in rows if line.strip()}
    row_id, n = f"{base}-{head}", 1
    while row_id in ids:
        row_id, n = f"{base}-{head}-{n}", n + 1
    row = {
        "id": row_id,
        "topic": fields["topic"],
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "device": device(),
        "commit": head if head != "unknown" else None,
        "command": shlex.join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "what": fields["what"],
        "figures": fields["figures"],
        "conditions": fields["conditions"],
    }
    if edits:
        notes = [*notes, "measured with uncommitted edits on top of the commit"]
    if notes:
        row["note"] = "; ".join(notes)
    with open(RESULTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


def load_average() -> float:
    """The 1-minute load average at the end of a measurement (NaN where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def record(figures: dict, head: str) -> None:
    """This benchmark's row of bench/results.jsonl (``append_row``)."""
    what = f"fedkd's planning of a generated sweep of {figures['runs']:,} runs"
    if "snakemake_n_seconds" in figures or "snakemake_n_timeout_seconds" in figures:
        what += ", snakemake -n of it"
    if "aggregate_runs" in figures:
        what += f", fedkd aggregate of {figures['aggregate_runs']:,} synthetic run folders"
    conditions = (
        "mnist5k sweep: one table, one column, one seed; 100 client counts x 10 "
        "participations x alphas; Python "
        f"{platform.python_version()}; load average {load_average():.1f} at the end (the cores "
        "are shared: the CPU seconds are this process's own); torch's import on its own line"
    )
    notes = []
    if "snakemake_n_timeout_seconds" in figures:
        notes.append("snakemake -n did not finish within its timeout")
    append_row(f"planning-{figures['runs'] // 1000}k", head,
               {"topic": "Planning at scale", "what": what, "figures": figures,
                "conditions": conditions}, notes)  # fmt: skip


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--snakemake-child":
        snakemake_child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs of the sweep [100000]")
    parser.add_argument(
        "--aggregate-runs", type=int, default=30_000, help="runs aggregated (0: skip) [30000]"
    )
    parser.add_argument("--skip-snakemake", action="store_true", help="leave out snakemake -n")
    parser.add_argument(
        "--snakemake-timeout", type=float, default=1800, help="seconds for snakemake -n [1800]"
    )
    args = parser.parse_args()
    # refused before the first measurement, which can take half an hour
    check_count("--runs", args.runs)
    check_count("--aggregate-runs", args.aggregate_runs)
    head = commit()  # the code measured: the checkout may move on while this runs
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="fedkd-planning-") as tmp:
        folder = Path(tmp)
        configfile = write_config(sweep_config(args.runs), folder)
        figures.update(fedkd_planning(configfile))
        print(f"fedkd planning: {json.dumps(figures)}", file=sys.stderr)
        if not args.skip_snakemake:
            figures.update(snakemake_dry_run(configfile, args.snakemake_timeout))
            print(f"snakemake -n: {json.dumps(figures)}", file=sys.stderr)
    if args.aggregate_runs:
        with tempfile.TemporaryDirectory(prefix="fedkd-aggregate-") as tmp:
            figures.update(aggregate_of(args.aggregate_runs, Path(tmp)))
    record(figures, head)


if __name__ == "__main__":
    main()
