"""A run's set-up and provenance: the device, the data and its partition, the model and the
strategy (``RunSetup.prepare``), and the record of all of it written to run.json. The round loop
on top is ``fedkd.engine.run.Run``."""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from fedkd.config import RunSpec
from fedkd.data import load_dataset
from fedkd.data.partition import client_indices, partition_labels, read_partition
from fedkd.engine.client import TrainEnv
from fedkd.engine.gpu import claim_gpu
from fedkd.engine.reproducibility import configure_determinism, configure_precision
from fedkd.models import build_model
from fedkd.provenance import (
    cpu_model,
    kernel_environment,
    library_versions,
    package_hash,
    run_code_hash,
)
from fedkd.runtime.preprocess import Preprocessor, use_channels_last
from fedkd.runtime.processes import process_identity
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies import get_strategy_class
from fedkd.strategies.base import ServerContext, tensor_bytes


def check_client_capacity(n_train: int, clients: int, batch_size: int) -> None:
    """Refuse, before any training, a client count the data cannot serve: clients holding on
    average less than one batch would each take a single tiny step a round."""
    if n_train < clients * batch_size:
        raise ValueError(
            f"clients={clients} leaves {n_train / clients:.1f} training samples per client on "
            f"average ({n_train} in all), less than one batch (batch_size={batch_size}); use at "
            f"most {max(1, n_train // batch_size)} clients, or a smaller batch_size"
        )


class DeviceUnavailableError(ValueError):
    """The device asked for is not on this machine (a ValueError: the command line reports it as
    the user's to fix, without a traceback)."""


def _unavailable(name: str, what: str) -> DeviceUnavailableError:
    return DeviceUnavailableError(
        f"device {name!r} was asked for but {what} is not available on this machine; use "
        f"--device cpu, or --device auto (CUDA when present, else CPU); in a spec or workflow "
        f"config, device: cpu or auto"
    )


def resolve_device(name: str) -> torch.device:
    """auto: CUDA when present, else CPU. A process that sees several GPUs takes a free one
    (``fedkd.engine.gpu``), so parallel jobs on one machine spread over its GPUs. A device this
    machine lacks is a DeviceUnavailableError, raised before a run writes anything."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "mps" and not torch.backends.mps.is_available():
        raise _unavailable(name, "MPS (an Apple GPU)")
    if name != "cuda":
        return torch.device(name)
    if not torch.cuda.is_available():
        raise _unavailable(name, "CUDA")
    count = torch.cuda.device_count()
    device = torch.device("cuda", claim_gpu(count) if count > 1 else 0)
    # streams, graphs and caches made without a device argument land on the current device
    torch.cuda.set_device(device)
    return device


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform_cpu()


def platform_cpu() -> str:
    return f"cpu ({cpu_model()})"  # its thread count is a key of its own (``_run_record``)


class RunSetup:
    """One run's set-up (``prepare``) and provenance record; ``fedkd.engine.run.Run`` adds the
    round loop."""

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
    def prepare(self) -> None:
        """Everything a round needs, without touching the output directory: the spec's kernel
        determinism (first: the cuBLAS workspace must be fixed before the first CUDA
        operation) and TF32 policy (``fedkd.engine.reproducibility``), the data on the device,
        the partition (checked), the model and the strategy, and the training environment
        (``self.env``)."""
        spec = self.spec
        self.determinism = configure_determinism(spec.deterministic, self.device)
        self.precision = configure_precision(spec.precision)
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
            self._check_partition(meta, len(labels), len(assignment))
        else:
            assignment = partition_labels(
                labels, spec.partition, spec.clients, spec.seed, alpha=spec.alpha,
                shards_per_client=spec.shards, num_classes=ds.num_classes,
            )  # fmt: skip
        # which partition the run trained on, whether read from a file or drawn here
        self.partition_sha256 = hashlib.sha256(
            np.ascontiguousarray(assignment, dtype="<i8").data
        ).hexdigest()
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
        self.channels_last = use_channels_last(spec, self.device, ds)
        self.determinism["memory_format"] = "channels_last" if self.channels_last else "contiguous"

        def build():
            model = build_model(
                self.model_name, ds.num_classes, ds.input_shape,
                projection_head=strategy_cls.uses_projection_head,
                vocab_size=ds.vocab_size, pad_id=ds.pad_id,
                classifier_init=spec.classifier_init, **options,
            ).to(self.device)  # fmt: skip
            return model.to(memory_format=torch.channels_last) if self.channels_last else model

        self.build_model = build
        torch.manual_seed(derive_seed(spec.seed, "init"))
        self.global_model = build()
        self.preprocess = Preprocessor(
            ds, spec.augment, self.device, self.channels_last, getattr(spec, "cutout", 0)
        )
        self.strategy = strategy_cls(
            self.params,
            ServerContext(
                spec=spec, num_classes=ds.num_classes, num_clients=spec.clients,
                device=self.device, build_model=build, dataset=ds,
                client_sizes=sizes, client_label_counts=counts, preprocess=self.preprocess,
            ),
        )  # fmt: skip
        self.env = TrainEnv(
            spec=spec, dataset=ds, client_index=self.client_index, preprocess=self.preprocess,
            device=self.device, build_model=build, num_classes=ds.num_classes,
        )  # fmt: skip
        self.model_bytes = tensor_bytes(self.global_model.state_dict())

    def _check_partition(self, meta: dict, n_train: int, rows: int) -> None:
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
        # the rows themselves, not only the count the metadata claims (or lacks): fewer rows
        # would leave the last samples on no client, more would name samples the split lacks
        if rows != n_train:
            raise ValueError(
                f"partition file {spec.partition_file} has {rows} rows but the training split "
                f"has {n_train} samples; re-create the partition with `fedkd partition`"
            )

    # ------------------------------------------------------------------ provenance
    @cached_property
    def _code_hashes(self) -> dict[str, str]:
        """The hashes of the code this process runs, read once (each parses and reads sources)."""
        return {
            "code_hash": run_code_hash(self.spec.strategy, self.spec.dataset),
            "package_hash": package_hash(),
        }

    @cached_property
    def _versions(self) -> dict[str, str]:
        """The library versions, read once: run.json is written again after every round."""
        return library_versions()

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
            **self._code_hashes,
            "versions": self._versions,
            "device": {
                "type": self.device.type,
                "index": self.device.index,
                "name": device_name(self.device),
                # CPU kernels split their sums by thread: another count, other float32 numbers
                "threads": torch.get_num_threads(),
                # the instruction set ATen's CPU kernels were dispatched for (AVX512, AVX2, ...),
                # and the variables that steer the CPU kernels: each changes the numbers too
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "kernel_environment": kernel_environment(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            },
            "dataset": getattr(self, "dataset_info", None),
            "partition_sha256": getattr(self, "partition_sha256", None),
            "determinism": getattr(self, "determinism", None),
            # the float32 arithmetic of GPU convolutions and matmuls (TF32 or not), as set
            "precision": getattr(self, "precision", None),
            # which local-training path ran (batched or sequential) and why
            "engine": self.env.engine(self.strategy) if hasattr(self, "env") else None,
            # a resumed run: what trained its earlier rounds (fedkd.engine.run.earlier_attempts)
            **(
                {"earlier_attempts": self._earlier_attempts}
                if getattr(self, "_earlier_attempts", None)
                else {}
            ),
            # the interpreter's own command line, shell-quoted: pasted into a shell in ``cwd`` it
            # starts the process again (under `python -m fedkd` sys.argv[0] is the package's
            # __main__.py, which no shell runs; relative paths are the working directory's)
            "command": shlex.join(sys.orig_argv),
            "cwd": os.getcwd(),
            # which process writes the run, so that `fedkd status` tells a killed run from a
            # running one (metrics.parquet holds no trace of it)
            "process": process_identity(),
            "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        rec.update(extra or {})
        return rec
