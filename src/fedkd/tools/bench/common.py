"""What the benchmarks share: the table-3 run's shape and its synthetic data, the engines a
benchmark names, a clock over a run's rounds, and the writer of ``bench-results.jsonl``."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from fedkd.config import ENGINES, RunSpec
from fedkd.data.synthetic import synthetic_cifar
from fedkd.engine.run import Run
from fedkd.files import atomic_write
from fedkd.runtime.seeding import clients_a_round

# the local-training engines a benchmark can ask for: the run spec's own values. On CUDA,
# "batched" (and "auto") is the batched trainer with CUDA graphs, as a run gets it by default;
# "batched-eager" the same trainer without; "batched-compiled" with graphs and the compiled step.
BENCH_ENGINES = ENGINES
# the table-3 CIFAR-10 run (FedGKD's table 3): 4 of 20 clients a round, 20 local epochs
TABLE3 = dict(
    dataset="cifar10", model="resnet8", clients=20, participation=0.2, alpha=0.1,
    batch_size=64, local_epochs=20, rounds=100,
)  # fmt: skip
TABLE3_TRAIN_IMAGES = 45_000  # CIFAR-10's training split less its 5,000 validation images
# the clients a table-3 round folds into one step (C 0.2 of 20), --clients-per-round's default
TABLE3_CLIENTS_A_ROUND = clients_a_round(TABLE3["clients"], TABLE3["participation"])
STRATEGY_PARAMS = {"fedgkd": {"buffer": 5}}  # table 3's M
REPO = Path(__file__).resolve().parents[4]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def engine_label(choice: dict) -> str:
    """What ran, from run.json's ``engine`` record: "sequential", "batched", or "batched" with
    "+ CUDA graphs" and "+ compiled step" where they were on."""
    if choice["used"] != "batched":
        return "sequential"
    parts = ["batched"]
    if choice.get("cuda_graphs"):
        parts.append("CUDA graphs")
    if choice.get("compile_step"):
        parts.append("compiled step")
    return " + ".join(parts)


_SCRATCH: list[tempfile.TemporaryDirectory] = []


def scratch_dir() -> str:
    """A fresh directory for a benchmark run, inside one removed when the process exits."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="fedkd-bench-"))
    return tempfile.mkdtemp(dir=_SCRATCH[0].name)


def synthetic_table3_data(args):
    """CIFAR-10-shaped synthetic data, sized by ``--train-images`` and ``--eval-images``."""
    return synthetic_cifar(
        n_train=args.train_images, n_val=args.eval_images // 2, n_test=args.eval_images
    )


def norm_options(norm: str) -> dict:
    """ResNet-8's ``model_options`` for ``--norm``: none for GroupNorm, its default."""
    return {} if norm == "group" else {"norm": norm}


def table3_spec(strategy: str, engine: str, args, device: torch.device, **changes) -> RunSpec:
    # K clients a round out of 20: the clients folded into one step
    per_round = getattr(args, "clients_per_round", TABLE3_CLIENTS_A_ROUND)
    options = dict(
        TABLE3, strategy=strategy, params=STRATEGY_PARAMS.get(strategy, {}),
        participation=per_round / TABLE3["clients"],
        model_options=norm_options(getattr(args, "norm", "group")),
        local_epochs=args.run_epochs, engine=engine, device=device.type,
        precision=args.precision, compile=args.compile, deterministic=args.deterministic,
    )  # fmt: skip
    options.update(changes)
    return RunSpec(**options)


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


class RoundClock:
    """Times a run's rounds through ``Run.on_rounds_done``: a round ends once its metrics and
    checkpoint are written (after the device finished its work), and its local training is the
    ``local_seconds`` the run loop records in the round's metrics row. ``on_round_end(done)``
    runs as the loop begins (``done``: the rounds already done) and at each round's end, before
    the clock reads (a barrier, the profiler)."""

    def __init__(self, device: torch.device, on_round_end=None):
        self.device = device
        self.on_round_end = on_round_end
        self.ends: dict[int, float] = {}  # rounds done -> the time they were (0: the loop starts)
        self.local: dict[int, float] = {}  # round (1-based) -> seconds of local training
        self.images: dict[int, int] = {}  # round -> images trained
        self.run: Run | None = None

    def __call__(self, done: int, row: dict | None) -> None:
        sync(self.device)
        if self.on_round_end is not None:
            self.on_round_end(done)
        if row is not None:
            env = self.run.env
            self.local[done] = row["local_seconds"]
            self.images[done] = env.spec.local_epochs * sum(
                len(env.client_index[c]) for c in row["clients"]
            )
        self.ends[done] = time.perf_counter()

    def run_rounds(self, spec: RunSpec, dataset, rounds: int) -> None:
        with tempfile.TemporaryDirectory(prefix="fedkd-bench-") as out:
            self.run = Run(spec, out, dataset=dataset, log=lambda msg: None)
            self.run.on_rounds_done = self
            self.run.run(stop_after_round=rounds)

    def summary(self, timed: list[int]) -> dict:
        missing = [r for r in timed if r not in self.local or r - 1 not in self.ends]
        if missing:
            raise RuntimeError(
                f"round(s) {missing} of the benchmark run did not finish: the run stopped early "
                "(diverged, or reached stop_at_acc)"
            )
        total = [self.ends[r] - self.ends[r - 1] for r in timed]
        local = [self.local[r] for r in timed]
        images = sum(self.images[r] for r in timed)
        return {
            "timed_rounds": timed,
            "images_per_round": images / len(timed),
            "local_img_s": images / sum(local),
            "round_img_s": images / sum(total),
            "round_s": statistics.mean(total),
            "local_s": statistics.mean(local),
            "fixed_s": statistics.mean(t - loc for t, loc in zip(total, local, strict=True)),
            "projected_min_100": 100 * statistics.mean(total) / 60,
        }


def source_commit() -> str | None:
    """The commit of the checkout the benchmark runs from (``+dirty`` with uncommitted changes),
    or None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


class Results:
    """Prints each figure with what it timed and, with ``--out``, appends it to
    bench-results.jsonl: one JSON object a line with the date, the device, the commit of the
    checkout, what was timed, img/s, the command and the details (the columns of
    docs/performance.md's GPU table)."""

    def __init__(self, args, device_name: str):
        self.path = Path(args.out) / "bench-results.jsonl" if args.out else None
        self.device, self.command = device_name, getattr(args, "command", "fedkd bench")
        self.commit = source_commit() if self.path else None

    def add(self, line: str, img_s: float, details: dict | None = None) -> None:
        print(line, flush=True)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {
            "date": datetime.now(UTC).date().isoformat(), "device": self.device,
            "commit": self.commit, "what": line, "img_s": img_s, "command": self.command,
            "details": details or {},
        }  # fmt: skip
        # the whole file again through atomic_write: an appended line would follow a link
        before = self.path.read_bytes() if self.path.exists() else b""
        line_bytes = (json.dumps(row) + "\n").encode()
        atomic_write(self.path, lambda file: file.write(before + line_bytes))
