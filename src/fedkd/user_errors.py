"""What a user can fix, said in one line: an ``--out`` path checked before any work, and an
error a command raised turned into ``fedkd COMMAND: error: ...`` with exit code 2, printed safe for
the terminal (fedkd.echo: no escape sequence or bidi override in user text reaches it, and no
line is longer than a screenful)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from fedkd.echo import safe_message


class OutputPathError(ValueError):
    """An output path that cannot be written as asked: a file where a folder goes, or a folder
    where a file goes."""


def check_output_path(path: str | Path, kind: str, example: str = "") -> None:
    """Refuse, before any work, an ``--out`` path that cannot become a ``kind``: "directory" (a
    run), "file" (``example``: a file name to suggest), or "prefix" (files PATH.suffix); the
    nearest existing path above it must be a directory, and the path no symbolic link (a run
    folder or file written through one would replace what it points to)."""
    from fedkd.files import refuse_link

    if kind == "prefix" and (str(path).endswith("/") or Path(path).is_dir()):
        raise OutputPathError(
            f"--out {path} is a directory, and this command writes files named by the prefix "
            f"(PREFIX.tex, .md, .csv, .html; a figure PREFIX.pdf, .png); give the prefix, e.g. "
            f"{Path(path) / 'table3'}"
        )
    path = Path(path)
    if kind != "prefix":
        refuse_link(path)
    if kind == "directory" and path.exists() and not path.is_dir():
        raise OutputPathError(
            f"--out {path} is a file, and a run writes a directory there; give a new path or "
            "a run's directory"
        )
    if kind == "file" and path.is_dir():
        raise OutputPathError(
            f"--out {path} is a directory, and this command writes a file there; give the "
            f"file's path, e.g. {path / example}"
        )
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputPathError(
                    f"--out {path}: {parent} is a file, not a directory; give a path whose "
                    "folders are directories or do not exist yet"
                )
            break


def read_only_out(out: Path, folder: Path) -> OutputPathError:
    return OutputPathError(
        f"--out {out}: {folder} is read-only (no write permission, or a read-only file system), "
        f"and a run writes its files there; give an --out you can write to, or make {folder} "
        "writable"
    )


def check_writable_out(out: str | Path) -> None:
    """Refuse, before any work, a new ``--out`` whose nearest existing folder cannot be written.
    An existing one is the run's to judge: a finished run there is read, not written."""
    out = Path(out)
    folder = next((p for p in out.parents if p.is_dir()), None)
    if not out.exists() and folder is not None and not os.access(folder, os.W_OK | os.X_OK):
        raise read_only_out(out, folder)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a SLURM time limit or scancel, `kill`, a container's stop) ending a command as
    Ctrl-C does: a run records after which round it stopped before the process exits."""


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises Terminated in the main thread instead of ending the process
    where it stands."""

    def terminated(signum, frame):
        raise Terminated("terminated (SIGTERM: a time limit, scancel or kill)")

    signal.signal(signal.SIGTERM, terminated)


def reporting_user_errors(command: str, run) -> int:
    """``run()``'s exit code; an error the user can fix is its one-line message and code 2."""
    try:
        return run()
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the run has said where it stopped
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    except BrokenPipeError:  # `fedkd strategies | head`: the reader has what it wanted
        # Python flushes stdout at exit, which would raise again: point it at nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped
    except Exception as exc:  # noqa: BLE001 (re-raised unless it is one the user can fix)
        message = user_error_message(exc, command)
        if message is None:
            raise
        print(safe_message(message), file=sys.stderr)
        return 2


def user_error_message(exc: Exception, command: str) -> str | None:
    """The one-line message for an error the user can fix (bad input, a full disk), else None.
    The engine's error types are imported only here, once an error happened: importing them up
    front would cost every `fedkd status` or `fedkd --help` the seconds of importing torch."""
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return (
            f"fedkd {command}: error: no space left on device writing "
            f"{exc.filename or 'its output'}; nothing half-written was left. Free some space and "
            f"run the same command again (a run resumes from its last checkpoint)"
        )
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        # an --out in a read-only place that no check before the work could see (root's, a
        # read-only mount); train says it before it starts (check_writable_out)
        return (
            f"fedkd {command}: error: {exc.filename or 'its output'}: {exc.strerror}; give a "
            "path this command may write (and read), or change the folder's permissions"
        )
    if isinstance(exc, ValueError):  # SpecError, DatasetCorruptError, an absent device, ...
        return f"fedkd {command}: error: {exc}"
    if isinstance(exc, (FileExistsError, IsADirectoryError, NotADirectoryError)):
        # a path of the wrong kind that check_output_path could not foresee (an input, a
        # file's temporary neighbour)
        path = exc.filename2 or exc.filename or "a path"
        return (
            f"fedkd {command}: error: {path}: {exc.strerror}; a file stands where a directory "
            "is needed or a directory where a file is: give another path or move it"
        )
    from fedkd.data.base import DatasetNotFoundError
    from fedkd.engine.checkpoint import CheckpointCorruptError
    from fedkd.engine.run_outputs import RunConflictError

    if isinstance(exc, (DatasetNotFoundError, CheckpointCorruptError, RunConflictError)):
        return f"fedkd {command}: error: {exc}"
    return None
