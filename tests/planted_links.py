"""Links planted where fedkd writes, and the file outside the results they point to: shared by the
tests of links at outputs (test_hostile_writes.py) and in run folders (test_run_folder_hostile.py).
The ``victim`` fixture itself is in conftest.py."""

from __future__ import annotations

from pathlib import Path

VICTIM_TEXT = b"a file outside the results, which no write may touch\n"


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link
