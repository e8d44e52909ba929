"""Files written whole or not at all, and the run record (run.json) read back with a clear error.
Free of torch, so the report reads runs without importing it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from fedkd.values import MAX_DEPTH, ValueTooLarge, load_json


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` next to ``path``, then rename over it: a reader never sees half a file, and
    a failed write (a full disk, a kill of the writer aside) leaves the old file (or none) and no
    temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RunRecordError(ValueError):
    """A run.json that cannot be read as a run's record (damaged, or not a JSON object)."""


def read_run_record(path: Path) -> dict:
    """A run.json as a dict; a damaged one (bad JSON, nested deeper than any record, not an
    object) raises ``RunRecordError`` naming the file and the fix. A missing one raises
    ``FileNotFoundError`` as usual."""
    path = Path(path)
    fix = (
        f"delete it and run the same `fedkd train --out {path.parent}` command again (it "
        f"resumes from checkpoint.pt when there is one)"
    )
    try:
        record = load_json(path.read_bytes(), str(path))
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
