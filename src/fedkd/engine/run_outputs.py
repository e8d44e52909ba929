"""What a run writes to its directory, and the summaries read back from it.

run.json         resolved spec, seeds, code hashes, library versions, device, status, summary
metrics.parquet  one row per round (accuracy, loss, per-class accuracy, bytes, seconds, the
                 seconds of local training, ...)
checkpoint.pt    global model, strategy state (incl. per-client state), metrics so far, RNG states
run.lock         locked (flock) while a process writes the directory; who holds it, as text
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedkd.collapse import chance_accuracy, is_collapsed
from fedkd.config import RunSpec
from fedkd.digests import seal_run_record, write_parquet
from fedkd.files import (
    CHECKPOINT,
    MAX_METRICS_BYTES,
    METRICS,
    RUN_JSON,
    UnreadableFileError,
    atomic_write,
    read_metrics_table,
    read_regular_file,
    refuse_link,
)

if TYPE_CHECKING:
    import pandas as pd

LOCK = "run.lock"


class RunConflictError(RuntimeError):
    """The output directory holds a different run, or another process writes it; nothing there
    is touched."""


def write_json(path: Path, obj: Any) -> None:
    if Path(path).name == RUN_JSON:  # its summary and metrics.parquet covered by hashes
        try:
            metrics = read_regular_file(
                Path(path).parent / METRICS, "a metrics file", MAX_METRICS_BYTES
            )
        except (OSError, UnreadableFileError):
            metrics = None
        obj = seal_run_record(obj, metrics)
    data = (json.dumps(obj, indent=2, default=str) + "\n").encode()
    atomic_write(path, lambda file: file.write(data))


class RunLock:
    """An exclusive ``flock`` on ``run.lock`` in a run directory while a process writes it. The
    kernel drops it when the process ends, however it ends (kill -9 included), so a killed run
    resumes; a second process on the same directory is refused with the holder's name. The file
    stays (removing it would let two processes lock two different files of one name)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None
        self.unsupported: str | None = None  # why the file system took no lock, if it did not

    def acquire(self) -> None:
        refuse_link(self.path)
        # O_NOFOLLOW: a link planted since the check is refused (ELOOP), not written through
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            held = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if not held:  # a file system without flock (ENOLCK, EOPNOTSUPP): run unlocked
                self.unsupported = str(exc)
                return
            raise RunConflictError(
                f"{self.path.parent} is being written by another run ({holder}); wait for it to "
                f"end, or stop it, or use another output directory"
            ) from None
        holder = (
            f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{datetime.now(UTC).isoformat(timespec='seconds')}"
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode() + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the lock
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


# the files of a run folder written through fedkd.files.atomic_write, and the temporary name it
# gives each while it is written: a kill during the write leaves that file behind
RUN_FILES = (CHECKPOINT, RUN_JSON, METRICS)
_TEMPORARY = re.compile(rf"({'|'.join(map(re.escape, RUN_FILES))})\.[0-9a-f]{{12}}\.tmp")


def remove_stale_temporaries(run_dir: Path) -> list[str]:
    """Remove the temporary files killed writes left in ``run_dir`` (regular files named as
    ``atomic_write`` names those of ``RUN_FILES``, nothing else); call it holding the run's lock,
    so no live writer's file is taken. Returns the names removed."""
    removed = []
    for entry in os.scandir(run_dir):
        if _TEMPORARY.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.name)
    return sorted(removed)


# the columns every round row has (strategies add server_* columns); seconds: the round's
# training, aggregation, server step and evaluation (not its writes); local_seconds: the part of
# it in local training (fedkd.engine.client.train_clients), eval_local's evaluations included
METRIC_COLUMNS = [
    "round", "test_acc", "test_loss", "val_acc", "val_loss", "class_acc", "train_loss", "local_acc",
    "bytes_sent", "bytes_received", "clients", "seconds", "local_seconds",
]  # fmt: skip


def read_metrics(
    path: Path, columns: list[str] | None = None, rounds_done: object = None
) -> pd.DataFrame:
    """A run's metrics (``columns``: those of them it has), safe to call while the run writes
    them; ``MetricsError`` names a damaged file and the fix (``fedkd.files.read_metrics_table``)."""
    return read_metrics_table(path, columns, rounds_done).to_pandas(use_threads=False)


def write_metrics(path: Path, rows: list[dict]) -> None:
    """One column per key of any row (a row without it: null), in first-seen order; written with
    pyarrow's API alone (pyarrow itself imports pandas at its first conversion of values)."""
    import pyarrow as pa

    # a run that diverged in round 1 still gets a readable file with the usual columns
    keys = list(dict.fromkeys(k for r in rows for k in r)) or METRIC_COLUMNS
    table = pa.table({k: pa.array([r.get(k) for r in rows]) for k in keys})
    # with page checksums and its values' digest: a damaged file is refused, not read
    atomic_write(path, lambda file: write_parquet(table, file))


def fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def target_reached(spec: RunSpec, rows: list[dict]) -> bool:
    """Whether the run's stop_at_acc (if any) is reached by the global test accuracy so far."""
    target = spec.stop_at_acc
    return target is not None and any(r["test_acc"] >= target for r in rows)


def summarize(rows: list[dict], num_classes: int | None = None) -> dict:
    """The run's summary in run.json; ``collapsed`` (with ``num_classes``) follows
    ``fedkd.collapse``: the global model never got meaningfully above chance."""
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
        **(
            {
                "collapsed": is_collapsed(acc, num_classes),
                "chance_acc": chance_accuracy(num_classes),
            }
            if num_classes
            else {}
        ),
    }
