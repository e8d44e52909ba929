"""Files written whole or not at all, and a run's files (run.json, metrics.parquet) read back with
a clear error. Free of torch, so the report reads runs without importing it.

Every file here is read by ``read_regular_file``: a FIFO, a device or a directory in a file's
place is refused unread (reading one would wait for ever, or until memory runs out), and so is a
file larger than any of its kind.

Every file fedkd writes is written by ``atomic_write``, which never writes through a symbolic
link: one planted in results/ (at the file, or at any folder between results/ and it) would
otherwise have fedkd overwrite the file it points to, anywhere the user may write.

fedkd's Parquet files carry page checksums and a digest of their values (``write_parquet``),
checked by every read (``parquet_table``): a damaged file is refused, never read as other
numbers."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from fedkd.digests import METRICS_SHA256, DigestMismatch
from fedkd.values import MAX_DEPTH, ValueTooLarge, is_int, load_json

if TYPE_CHECKING:
    import pyarrow as pa

# a run directory's files, named here for every reader and writer of them
RUN_JSON = "run.json"
METRICS = "metrics.parquet"
CHECKPOINT = "checkpoint.pt"
# a run.json is a few kilobytes; a metrics.parquet a few megabytes at the most rounds and classes
MAX_RUN_JSON_BYTES = 16 << 20
MAX_METRICS_BYTES = 1 << 30
# a partition holds three integers a sample; the aggregate every round of every run
MAX_PARTITION_BYTES = 1 << 30
MAX_AGGREGATE_BYTES = 1 << 36
READ_CHUNK = 1 << 20


class UnreadableFileError(ValueError):
    """A path refused unread: not a regular file, or larger than any file of its kind."""

    def __init__(self, message: str, regular: bool):
        super().__init__(message)
        self.regular = regular  # a regular file (too large), not a FIFO, device or directory


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular_file(path: Path, what: str, max_bytes: int | None = None) -> os.stat_result:
    """The status of ``path`` (a link followed), or ``UnreadableFileError`` naming it when it is
    not a regular file or holds more than ``max_bytes``; ``what`` names what it should be ("a run
    record"). A missing file raises ``FileNotFoundError`` as usual."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFileError(f"{path} is {_kind(info.st_mode)}, not {what}", regular=False)
    if max_bytes is not None and info.st_size > max_bytes:
        raise UnreadableFileError(
            f"{path} is damaged ({info.st_size:,} bytes, more than {what}'s {max_bytes:,})",
            regular=True,
        )
    return info


def read_regular_file(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, refused unread (``UnreadableFileError``) when it is not a regular
    file or is larger than ``max_bytes`` (see ``check_regular_file``)."""
    check_regular_file(path, what, max_bytes)
    # O_NONBLOCK: a FIFO put in the file's place since the check still opens at once, and is
    # refused below instead of waiting for a writer
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    too_large = UnreadableFileError(
        f"{path} is damaged (more than {what}'s {max_bytes:,} bytes)", regular=True
    )
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced since the check
            raise UnreadableFileError(f"{path} is {_kind(info.st_mode)}, not {what}", regular=False)
        if info.st_size > max_bytes:  # grown since the check
            raise too_large
        # the size it has (a read of n bytes reserves n), then what it has grown by since, in
        # bounded chunks, up to one byte past the limit
        data = file.read(info.st_size + 1)
        while info.st_size < len(data) <= max_bytes:
            chunk = file.read(min(READ_CHUNK, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    if len(data) > max_bytes:  # grown since the check
        raise too_large
    return data


class SymlinkError(ValueError):
    """A path fedkd was to write, or to write into, is a symbolic link."""


WRITES = (
    "fedkd writes nothing through a link, which could replace a file outside the results: "
    "remove the link and run again"
)
READS = (
    "fedkd reads no run through a link below results/, which could show another run's numbers: "
    "remove the link and run again"
)


def link_problem(path: Path, why: str = WRITES) -> str | None:
    """What is wrong with ``path`` being a symbolic link, naming it and where it points, and
    ``why`` it is refused; None when it is none."""
    if not os.path.islink(path):
        return None
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return f"{path} is a symbolic link{target}; {why}"


def refuse_link(path: Path, why: str = WRITES) -> None:
    """``SymlinkError`` (``link_problem``'s message) when ``path`` is a symbolic link."""
    problem = link_problem(path, why)
    if problem:
        raise SymlinkError(problem)


def refuse_links_below(
    root: str | Path, parts: list[str], leaves: tuple[str, ...] = (), why: str = WRITES
) -> None:
    """``refuse_link`` for root/a, root/a/b, ... (``parts`` a, b, ...) and then for each of
    ``leaves`` in the last of them; a path that does not exist ends the walk, as nothing below
    it can be a link (a plan of 100,000 runs not started checks one path a run). ``root`` itself
    may be a link (where the user keeps the results is the user's choice)."""
    path = Path(root)
    for part in parts:
        path = path / part
        mode = _lstat_mode(path)
        if mode is None:
            return
        if stat.S_ISLNK(mode):
            refuse_link(path, why)
    for leaf in leaves:
        mode = _lstat_mode(path / leaf)
        if mode is not None and stat.S_ISLNK(mode):
            refuse_link(path / leaf, why)


RESULTS = "results"


def below_results(path: str | Path) -> tuple[Path, list[str]] | None:
    """(the results folder above ``path``, the names from it down to ``path``): the last folder
    named ``results`` among those holding ``path``, as given (a relative path stays relative, so
    messages name it as the user gave it), else in its absolute form; None when there is none."""
    given = Path(path)
    for candidate in (given, Path(os.path.abspath(given))):
        if ".." in candidate.parts:
            continue
        folders = candidate.parts[:-1]
        if RESULTS in folders:
            cut = len(folders) - folders[::-1].index(RESULTS)
            return Path(*candidate.parts[:cut]), list(candidate.parts[cut:])
    return None


def refuse_links_in_results(path: str | Path, why: str = WRITES) -> None:
    """``SymlinkError`` when ``path``, or any folder between the results folder above it and
    it, is a symbolic link (``refuse_links_below``); only ``path`` itself when no folder named
    results holds it (a run trained by hand anywhere)."""
    found = below_results(path)
    if found is None:
        refuse_link(Path(path), why)
        return
    root, parts = found
    refuse_links_below(root, parts[:-1], (parts[-1],), why)


def _lstat_mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


# a new file, never an existing one nor what a link at its name points to
_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(file)`` into a new temporary file next to ``path``, then rename it over ``path``:
    a reader never sees half a file, and a failed write (a full disk, a kill of the writer aside)
    leaves the old file (or none) and no temporary file.

    The temporary file has a random name and is created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW),
    so nothing planted at its name is written through; ``path`` being a symbolic link is refused
    (``SymlinkError``), before the write and again before the rename (which would replace the
    link, not what it points to), and so is a link at any folder between the results folder
    above ``path`` and it (``refuse_links_in_results``)."""
    path = Path(path)
    refuse_links_in_results(path)
    fd, tmp = _create_exclusive(path)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
        refuse_links_in_results(path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create_exclusive(path: Path) -> tuple[int, Path]:
    for _ in range(100):  # a name taken (by a planted file or link) is passed over
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, _EXCLUSIVE, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path} in 100 tries")


class RunRecordError(ValueError):
    """A run.json that cannot be read as a run's record (damaged, not a JSON object, or no
    regular file)."""


def read_run_record(path: Path) -> dict:
    """A run.json as a dict; a damaged one (bad JSON, nested deeper than any record, not an
    object, too large) or one that is no file (a directory, a FIFO) raises ``RunRecordError``
    naming the file and the fix. A missing one raises ``FileNotFoundError`` as usual."""
    path = Path(path)
    again = (
        f"run the same `fedkd train --out {path.parent}` command again (it resumes from "
        f"{CHECKPOINT} when there is one)"
    )
    fix = f"delete it and {again}"
    try:
        raw = read_regular_file(path, "a run record", MAX_RUN_JSON_BYTES)
    except UnreadableFileError as exc:
        raise RunRecordError(f"{exc}; {fix if exc.regular else 'remove it and ' + again}") from None
    try:
        record = load_json(raw, str(path))
    except UnicodeDecodeError as exc:
        raise RunRecordError(f"{path} is damaged (not UTF-8 text: {exc}); {fix}") from exc
    except json.JSONDecodeError as exc:
        raise RunRecordError(f"{path} is damaged (not valid JSON: {exc}); {fix}") from exc
    except ValueTooLarge as exc:  # json.loads would recurse into it level by level
        raise RunRecordError(
            f"{path} is damaged (nested deeper than {MAX_DEPTH} levels, more than any run "
            f"record); {fix}"
        ) from exc
    if not isinstance(record, dict):
        raise RunRecordError(
            f"{path} is damaged (a JSON {type(record).__name__}, not the object a run "
            f"records); {fix}"
        )
    return record


class MetricsError(ValueError):
    """A run's metrics.parquet that cannot be read (damaged, or no file: a directory, a FIFO), or
    that holds fewer rounds than its run.json records as done; the message names the file, what
    is wrong and the fix."""

    def __init__(self, path: Path, problem: str, rebuildable: bool):
        super().__init__(f"{problem}; {metrics_fix(path)}")
        self.problem = problem
        # a regular file, which training may replace by one rebuilt from the checkpoint
        self.rebuildable = rebuildable


def metrics_fix(path: Path) -> str:
    """How to replace a run's damaged metrics.parquet at ``path``: training writes it again from
    the checkpoint's rows (fedkd.engine.run), or trains the run anew without a checkpoint."""
    return f"delete it and {_train_again(Path(path).parent)}"


def metrics_expected(record: dict) -> bool:
    """Whether a run record says its metrics.parquet must exist: a complete run, or a diverged
    one with rounds done (a run that diverged in round 1 recorded no round)."""
    done = record.get("rounds_done")
    return record.get("status") == "complete" or (
        record.get("status") == "diverged" and is_int(done) and done > 0
    )


def missing_metrics(run_dir: Path) -> str:
    """A finished run whose metrics.parquet is missing, and how to get it back."""
    return f"{Path(run_dir) / METRICS} is missing; {_train_again(Path(run_dir))}"


def _train_again(run_dir: Path) -> str:
    again = f"run the same `fedkd train --out {run_dir}` command again"
    if (run_dir / CHECKPOINT).exists():
        return f"{again}: it rebuilds it from {CHECKPOINT}"
    return f"{again}: with no {CHECKPOINT} to rebuild it from, it trains the run anew"


def parquet_table(raw: bytes, columns: list[str] | None = None) -> pa.Table:
    """The table of Parquet bytes (``columns``: those of them it has), parsed on the calling
    thread. fedkd reads its own Parquet files (metrics, partitions, the aggregate) this way,
    never by path nor with threads, so that no Arrow thread pool is started: one alive at the
    interpreter's exit can abort it ("terminate called without an active exception",
    apache/arrow#34314). That message ended a `fedkd train` that had only read a finished run's
    metrics, once in the hostile tests' many runs; Arrow is the likely cause, not a proven one.
    Every page's checksum is verified (a file written without them has none to verify), and
    the values against the digest the file records (``fedkd.digests``): ``DigestMismatch`` when
    they differ. The whole file is read for that, ``columns`` taken from it after."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fedkd.digests import check_table_digest

    parquet = pq.ParquetFile(pa.BufferReader(raw), page_checksum_verification=True)
    table = parquet.read(use_pandas_metadata=True, use_threads=False)
    check_table_digest(table)
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table


def read_parquet_file(path: Path, what: str, max_bytes: int) -> pa.Table:
    """``path``'s table, read as ``read_regular_file`` reads and ``parquet_table`` parses."""
    return parquet_table(read_regular_file(Path(path), what, max_bytes))


def read_metrics_table(
    path: Path,
    columns: list[str] | None = None,
    rounds_done: object = None,
    sha256: str | None = None,
) -> pa.Table:
    """A run's metrics.parquet (``columns``: those of them it has), read in one open, so a rename
    by the writer between pyarrow's metadata and data reads cannot mix two versions. Refused with
    ``MetricsError``: no regular file, too large, not Parquet, a page or its values not matching
    their checksums, (given run.json's ``metrics_sha256``) bytes of another SHA-256, or (given
    its ``rounds_done``) fewer rows than rounds done. A missing file raises ``FileNotFoundError``."""
    path = Path(path)
    try:
        raw = read_regular_file(path, "a metrics file", MAX_METRICS_BYTES)
    except UnreadableFileError as exc:
        raise MetricsError(path, str(exc), rebuildable=exc.regular) from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # no permission, a link loop: left to the user to look at
        reason = exc.strerror or str(exc)
        raise MetricsError(path, f"{path} cannot be read ({reason})", rebuildable=False) from None
    try:  # first what is wrong with the file itself, then whether it is the run's
        table = parquet_table(raw, columns)
    except DigestMismatch as exc:
        raise MetricsError(path, f"{path} is damaged ({exc})", rebuildable=True) from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = reason.removeprefix("Could not open Parquet input source '<Buffer>': ")
        raise MetricsError(
            path, f"{path} is damaged (not a readable Parquet file: {reason[:200]})", True
        ) from None
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        raise MetricsError(
            path,
            f"{path} is damaged (its SHA-256 is not the {METRICS_SHA256} its {RUN_JSON} records)",
            rebuildable=True,
        )
    held = table.num_rows  # one row a round
    if is_int(rounds_done) and held < rounds_done:
        raise MetricsError(
            path,
            f"{path} is damaged (it holds {held} round{'s' if held != 1 else ''}, fewer than "
            f"the {rounds_done} its {RUN_JSON} records as done)",
            rebuildable=True,
        )
    return table
