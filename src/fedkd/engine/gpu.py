"""Which GPU a training process uses when it sees several.

Under SLURM every job sees only the GPU it was given (``CUDA_VISIBLE_DEVICES``). On a machine
with several GPUs and no scheduler, Snakemake runs as many training jobs at once as
``--resources gpu=N`` allows, but tells none of them which GPU to use: they would all pile onto
the first one. So a process that sees several GPUs claims a *slot*: a lock file it holds for its
lifetime (the operating system releases it when the process ends, killed or not). Slot ``s`` is
GPU ``s % n``, so ``FEDKD_RUNS_PER_GPU=k`` packs up to ``k`` runs onto each GPU (run Snakemake
with ``--resources gpu=<k × GPUs>``).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path

_held: list = []  # open lock files: a claim lasts as long as the process
_claimed: list[int] = []  # the GPU this process took: a process claims once (every run in it)


def lock_dir() -> Path:
    return Path(os.environ.get("FEDKD_GPU_LOCK_DIR") or default_lock_dir())


def default_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"fedkd-gpu-slots-{os.getuid()}"


def runs_per_gpu() -> int:
    raw = os.environ.get("FEDKD_RUNS_PER_GPU", "1")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"FEDKD_RUNS_PER_GPU={raw!r} must be a positive integer (runs per GPU)")
    return value


def claim_gpu(num_gpus: int, per_gpu: int | None = None, directory: Path | None = None) -> int:
    """Index of the GPU this process should use, holding a free slot's lock; when every slot is
    taken (more jobs than slots), the GPU of the slot ``pid`` maps to, unlocked. Claimed once
    per process: a second call (another run in the same process, e.g. ``fedkd bench``) gets the
    same GPU, not a second slot on another one."""
    if _claimed:
        return _claimed[0]
    gpu = _claim_slot(num_gpus, per_gpu, directory)
    _claimed.append(gpu)
    return gpu


def use_gpu(index: int) -> None:
    """Make ``index`` this process's GPU without a slot: for a process that must share its
    parent's GPU (fedkd bench's packed runs), which holds the slot."""
    _claimed[:] = [index]


def _claim_slot(num_gpus: int, per_gpu: int | None, directory: Path | None) -> int:
    per_gpu = runs_per_gpu() if per_gpu is None else per_gpu
    directory = lock_dir() if directory is None else directory
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_own_directory(directory)
    slots = num_gpus * per_gpu
    # fill every GPU's first slot before any second one: slot order is GPU-major per round
    for slot in range(slots):
        # O_NOFOLLOW and no truncation before the lock: a link planted at the name (the default
        # folder is in the shared temporary directory) is refused, not written through
        fd = os.open(directory / f"slot{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        handle = os.fdopen(fd, "w")  # kept open: the claim
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        _held.append(handle)
        return slot % num_gpus
    return os.getpid() % num_gpus


def _check_own_directory(directory: Path) -> None:
    """The slot folder must not be a link, and the default one (in the shared temporary
    directory, where another user could have made it first and planted links in it) must be
    this user's own and writable by no one else."""
    info = os.lstat(directory)
    shared = directory == default_lock_dir()
    if stat.S_ISLNK(info.st_mode) or (
        shared and (info.st_uid != os.getuid() or info.st_mode & 0o022)
    ):
        raise ValueError(
            f"{directory} (the GPU slot locks) is a link, another user's, or writable by others; "
            "remove it, or set FEDKD_GPU_LOCK_DIR to a folder of your own"
        )


def release_all() -> None:
    """Give back this process's slots (tests; a process's slots are released when it exits)."""
    while _held:
        _held.pop().close()
    _claimed.clear()
