"""The round loop of one federated run, with per-round metrics, checkpoints and resumption.

Outputs in the run directory:
  run.json         resolved spec, seeds, code hashes, library versions, device, status, summary
  metrics.parquet  one row per round (accuracy, loss, per-class accuracy, bytes, seconds, ...)
  checkpoint.pt    global model, strategy state (incl. per-client state), metrics so far, RNG states
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedkd.config import RunSpec
from fedkd.data import load_dataset
from fedkd.data.base import atomic_write
from fedkd.data.partition import client_indices, partition_labels, read_partition
from fedkd.engine.checkpoint import load_checkpoint, save_checkpoint
from fedkd.engine.client import DivergedError, TrainEnv, train_clients
from fedkd.engine.evaluate import evaluate
from fedkd.engine.gpu import claim_gpu
from fedkd.engine.preprocess import Preprocessor
from fedkd.engine.reproducibility import capture_rng, configure_determinism, restore_rng
from fedkd.engine.seeding import derive_seed, sample_clients
from fedkd.models import build_model
from fedkd.provenance import library_versions, package_hash, run_code_hash
from fedkd.strategies import get_strategy_class
from fedkd.strategies.base import ServerContext, tensor_bytes

METRICS = "metrics.parquet"
RUN_JSON = "run.json"
CHECKPOINT = "checkpoint.pt"


def check_client_capacity(n_train: int, clients: int, batch_size: int) -> None:
    """Refuse, before any training, a client count the data cannot serve: clients holding on
    average less than one batch would each take a single tiny step a round."""
    if n_train < clients * batch_size:
        raise ValueError(
            f"clients={clients} leaves {n_train / clients:.1f} training samples per client on "
            f"average ({n_train} in all), less than one batch (batch_size={batch_size}); use at "
            f"most {max(1, n_train // batch_size)} clients, or a smaller batch_size"
        )


class RunConflictError(RuntimeError):
    """The output directory holds a different run; nothing there is touched."""


def resolve_device(name: str) -> torch.device:
    """auto: CUDA when present, else CPU. A process that sees several GPUs takes a free one
    (``fedkd.engine.gpu``), so parallel jobs on one machine spread over its GPUs."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name != "cuda":
        return torch.device(name)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "device='cuda' was asked for but CUDA is not available; use device=auto or cpu"
        )
    count = torch.cuda.device_count()
    return torch.device("cuda", claim_gpu(count) if count > 1 else 0)


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2, default=str) + "\n"))


# the columns every round row has (strategies add server_* columns)
METRIC_COLUMNS = [
    "round", "test_acc", "test_loss", "val_acc", "val_loss", "class_acc", "train_loss", "local_acc",
    "bytes_sent", "bytes_received", "clients", "seconds",
]  # fmt: skip


def write_metrics(path: Path, rows: list[dict]) -> None:
    # a run that diverged in round 1 still gets a readable file with the usual columns
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=METRIC_COLUMNS)
    atomic_write(path, lambda p: frame.to_parquet(p, index=False))


def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform_cpu()


def platform_cpu() -> str:
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


class Run:
    """One federated run: set up data, partition, model and strategy; then loop over rounds."""

    def __init__(
        self,
        spec: RunSpec,
        out_dir: str | Path,
        log: Callable[[str], None] | None = None,
        labels: dict[str, str] | None = None,
        dataset=None,
    ):
        self.spec = spec
        # free-form tags from the pipeline (e.g. the table variant); recorded, not part of identity
        self.labels = dict(labels or {})
        # an in-memory FedDataset (benchmarks); None: load spec.dataset
        self._given_dataset = dataset
        self.out = Path(out_dir)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.device = resolve_device(spec.device)
        self.model_name = spec.resolved_model

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> None:
        spec = self.spec
        ds = self._given_dataset or load_dataset(
            spec.dataset, spec.data_root, seed=spec.seed, **spec.dataset_options
        )
        self.dataset_info = ds.describe()
        ds.train, ds.val, ds.test = (s.to(self.device) for s in (ds.train, ds.val, ds.test))
        self.dataset = ds
        labels = ds.train.y.cpu().numpy()
        check_client_capacity(len(labels), spec.clients, spec.batch_size)
        if spec.partition_file:
            assignment, meta = read_partition(spec.partition_file)
            self._check_partition(meta, len(labels))
        else:
            assignment = partition_labels(
                labels, spec.partition, spec.clients, spec.seed, alpha=spec.alpha,
                shards_per_client=spec.shards, num_classes=ds.num_classes,
            )  # fmt: skip
        parts = client_indices(assignment, spec.clients)
        if len(parts) != spec.clients:
            raise ValueError(
                f"partition has {len(parts)} clients but the spec asks for {spec.clients}"
            )
        self.client_index = [
            torch.as_tensor(p, dtype=torch.long, device=self.device) for p in parts
        ]
        sizes = [len(p) for p in parts]
        counts = torch.zeros(spec.clients, ds.num_classes, dtype=torch.long)
        for c, p in enumerate(parts):
            counts[c] = torch.bincount(
                torch.as_tensor(labels[p], dtype=torch.long), minlength=ds.num_classes
            )

        strategy_cls = get_strategy_class(spec.strategy)
        self.params = strategy_cls.make_params(spec.params, spec.dataset, self.model_name)
        options = dict(spec.model_options)

        def build():
            return build_model(
                self.model_name, ds.num_classes, ds.input_shape,
                projection_head=strategy_cls.uses_projection_head,
                vocab_size=ds.vocab_size, pad_id=ds.pad_id, **options,
            ).to(self.device)  # fmt: skip

        self.build_model = build
        torch.manual_seed(derive_seed(spec.seed, "init"))
        self.global_model = build()
        self.preprocess = Preprocessor(ds, spec.augment, self.device)
        self.strategy = strategy_cls(
            self.params,
            ServerContext(
                spec=spec, num_classes=ds.num_classes, num_clients=spec.clients,
                device=self.device, build_model=build, dataset=ds,
                client_sizes=sizes, client_label_counts=counts,
            ),
        )  # fmt: skip
        self.env = TrainEnv(
            spec=spec, dataset=ds, client_index=self.client_index, preprocess=self.preprocess,
            device=self.device, build_model=build, num_classes=ds.num_classes,
        )  # fmt: skip
        self.model_bytes = tensor_bytes(self.global_model.state_dict())

    def _check_partition(self, meta: dict, n_train: int) -> None:
        spec = self.spec
        want = {
            "dataset": spec.dataset,
            "scheme": spec.partition,
            "clients": spec.clients,
            "seed": spec.seed,
        }
        if spec.partition in ("dirichlet", "dirichlet-equal"):
            want["alpha"] = spec.alpha
        if spec.partition == "shards":
            want["shards"] = spec.shards
        bad = {k: (meta.get(k), v) for k, v in want.items() if meta.get(k) != v}
        if bad:
            raise ValueError(
                f"partition file {spec.partition_file} does not match the run spec "
                f"(file vs spec: {bad}); point partition_file at the matching partition or drop it"
            )
        if meta.get("num_samples") not in (None, n_train):
            raise ValueError(
                f"partition file {spec.partition_file} covers {meta.get('num_samples')} samples but "
                f"the training split has {n_train}; re-create the partition for this dataset"
            )

    # ------------------------------------------------------------------ provenance
    def _run_record(self, status: str, extra: dict | None = None) -> dict:
        spec = self.spec
        rec = {
            "status": status,
            "labels": self.labels,
            "spec": spec.to_dict(),
            "spec_hash": spec.hash(),
            "strategy_params": vars(self.params) if hasattr(self, "params") else None,
            "model": self.model_name,
            "seeds": {
                "run": spec.seed,
                "init": derive_seed(spec.seed, "init"),
                "data_split": spec.seed,
                "partition": spec.seed,
            },
            "code_hash": run_code_hash(spec.strategy),
            "package_hash": package_hash(),
            "versions": library_versions(),
            "device": {
                "type": self.device.type,
                "index": self.device.index,
                "name": _device_name(self.device),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            },
            "dataset": getattr(self, "dataset_info", None),
            "determinism": getattr(self, "determinism", None),
            # which local-training path ran (batched or sequential) and why
            "engine": self.env.engine(self.strategy) if hasattr(self, "env") else None,
            "command": " ".join(sys.argv),
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        rec.update(extra or {})
        return rec

    # ------------------------------------------------------------------ checkpoint
    def _checkpoint_state(self, round_done: int, rows: list[dict]) -> dict:
        return {
            "spec_hash": self.spec.hash(),
            "round_done": round_done,
            "global": self.global_model.state_dict(),
            "strategy": self.strategy.state_dict(),
            "rows": rows,
            "rng": capture_rng(self.device),
        }

    def _restore(self, state: dict) -> tuple[int, list[dict]]:
        if state.get("spec_hash") != self.spec.hash():
            raise RunConflictError(
                f"checkpoint {self.out / CHECKPOINT} belongs to a different run spec "
                f"({state.get('spec_hash')} vs {self.spec.hash()}); use another output directory, "
                f"or delete the checkpoint to start this spec from round 0"
            )
        self.global_model.load_state_dict(state["global"])
        self.strategy.load_state_dict(state["strategy"])
        restore_rng(state["rng"], self.device)
        return state["round_done"], list(state["rows"])

    # ------------------------------------------------------------------ main loop
    def run(self, stop_after_round: int | None = None) -> dict:
        """Train to the last round (or stop after ``stop_after_round`` rounds, for tests).
        Resumes from the checkpoint in the output directory if there is one."""
        spec = self.spec
        ckpt_path = self.out / CHECKPOINT
        run_json = self.out / RUN_JSON
        if run_json.exists():
            prev = json.loads(run_json.read_text())
            if prev.get("spec_hash") != spec.hash():
                raise RunConflictError(
                    f"{self.out} holds a run with a different spec (hash {prev.get('spec_hash')}, "
                    f"this spec {spec.hash()}); choose another output directory"
                )
            if prev.get("status") in ("complete", "diverged") and (self.out / METRICS).exists():
                self.log(f"[fedkd] {self.out}: already {prev['status']}, nothing to do")
                return prev
        # before _setup: the cuBLAS workspace must be fixed before the first CUDA operation
        self.determinism = configure_determinism(spec.deterministic, self.device)
        self._setup()
        # only now, with the data, partition, model and strategy checked: a run that fails its
        # checks leaves no output folder behind
        self.out.mkdir(parents=True, exist_ok=True)
        start, rows = 0, []
        if ckpt_path.exists():
            start, rows = self._restore(load_checkpoint(ckpt_path))
            self.log(f"[fedkd] resuming {self.out} after round {start}/{spec.rounds}")
        write_json(run_json, self._run_record("running", {"rounds_done": start}))
        self.log(
            f"[fedkd] {spec.strategy} on {spec.dataset} ({self.model_name}, {len(self.dataset.train)} "
            f"train samples), {spec.clients} clients, alpha {spec.alpha}, C {spec.participation}, "
            f"{spec.rounds} rounds, device {self.device}"
        )
        status, error = "running", None
        last = spec.rounds if stop_after_round is None else min(spec.rounds, stop_after_round)
        t_run = time.perf_counter()
        reached = target_reached(spec, rows)  # a resumed run may have reached it already
        for r in range(start, last):
            if reached:
                break
            t0 = time.perf_counter()
            try:
                row = self._round(r)
            except FloatingPointError as exc:  # DivergedError, or a strategy's non-finite value
                status, error = "diverged", str(exc)
                self.log(f"[fedkd] round {r + 1}: diverged ({exc}); stopping, metrics so far kept")
                break
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            write_metrics(self.out / METRICS, rows)
            save_checkpoint(ckpt_path, self._checkpoint_state(r + 1, rows))
            reached = target_reached(spec, rows)
            done = r + 1 - start
            eta = (time.perf_counter() - t_run) / done * (spec.rounds - r - 1)
            self.log(
                f"[fedkd] round {r + 1}/{spec.rounds}  acc {row['test_acc']:.4f}  "
                f"loss {row['test_loss']:.4f}  {row['seconds']:.1f}s  ETA {_fmt_seconds(eta)}"
            )
        if status == "running" and (len(rows) == spec.rounds or reached):
            status = "complete"
        if reached:
            self.log(f"[fedkd] reached stop_at_acc {spec.stop_at_acc} in round {len(rows)}")
        if status == "diverged":
            write_metrics(self.out / METRICS, rows)
        summary = summarize(rows)
        record = self._run_record(
            status,
            {
                "rounds_done": len(rows),
                # rounds not trained because stop_at_acc was reached
                "rounds_saved": spec.rounds - len(rows) if reached else 0,
                "summary": summary,
                "error": error,
            },
        )
        write_json(run_json, record)
        return record

    def _round(self, r: int) -> dict:
        spec = self.spec
        selected = sample_clients(spec.seed, r, spec.clients, spec.participation)
        payload = self.strategy.payload(r, self.global_model)
        updates, local_acc = train_clients(
            r, selected, self.global_model, payload, self.strategy, self.env, spec.eval_local
        )
        new_state = self.strategy.aggregate(r, self.global_model, updates)
        self.global_model.load_state_dict(new_state)
        server_metrics = self.strategy.server_update(r, self.global_model, updates) or {}
        stats = evaluate(
            self.global_model, self.dataset.test, self.preprocess, self.dataset.num_classes
        )
        if not math.isfinite(stats["loss"]):
            raise DivergedError(
                f"the global model's test loss is {stats['loss']} after round {r + 1}"
            )
        # the validation split too: model selection without the test set picks the round
        # that is best on it (fedkd.metrics.val_selected_accuracy)
        val = (
            evaluate(self.global_model, self.dataset.val, self.preprocess, self.dataset.num_classes)
            if len(self.dataset.val)
            else {"acc": float("nan"), "loss": float("nan")}
        )
        sent = len(selected) * (self.model_bytes + tensor_bytes(payload))
        received = sum(self.model_bytes + tensor_bytes(u.extras) for u in updates)
        row = {
            "round": r + 1,
            "test_acc": stats["acc"],
            "test_loss": stats["loss"],
            "val_acc": val["acc"],
            "val_loss": val["loss"],
            "class_acc": stats["class_acc"],
            "train_loss": float(np.mean([u.train_loss for u in updates])),
            "local_acc": float(np.mean(local_acc)) if local_acc else float("nan"),
            "bytes_sent": int(sent),
            "bytes_received": int(received),
            "clients": selected,
        }
        for key, value in server_metrics.items():
            row[f"server_{key}"] = value
        return row


def target_reached(spec: RunSpec, rows: list[dict]) -> bool:
    """Whether the run's stop_at_acc (if any) is reached by the global test accuracy so far."""
    target = spec.stop_at_acc
    return target is not None and any(r["test_acc"] >= target for r in rows)


def summarize(rows: list[dict]) -> dict:
    if not rows:
        return {"rounds": 0}
    acc = [r["test_acc"] for r in rows]
    best = int(np.argmax(acc))
    val = [r.get("val_acc", float("nan")) for r in rows]
    by_val = int(np.nanargmax(val)) if not np.all(np.isnan(val)) else None
    return {
        "rounds": len(rows),
        "best_acc": acc[best],
        "best_round": rows[best]["round"],
        "final_acc": acc[-1],
        "val_selected_acc": acc[by_val] if by_val is not None else None,
        "val_selected_round": rows[by_val]["round"] if by_val is not None else None,
        "seconds": float(sum(r["seconds"] for r in rows)),
    }


def run_training(spec: RunSpec, out_dir: str | Path, **kwargs) -> dict:
    return Run(spec, out_dir).run(**kwargs)
