"""No job writes below results/ through a symbolic link, checked before any job runs.

A job's shell sends its log to results/logs/...; Snakemake removes a job's old outputs and makes
their folders before the job runs; fedkd writes its files with ``fedkd.files.atomic_write``. A
link at results/tables, results/aggregate, results/logs/render or results/report (or at any file
or folder below them) would have them write, or delete, files wherever it leads. So every link
below results/ is refused when the workflow starts, naming it, before Snakemake touches a file.

results/runs and results/logs/train hold a folder or a log per run (100,000 in a large plan):
they are checked run by run as their jobs are planned (``fedkd.files.refuse_links_below`` in the
train rule's adapter), and by ``fedkd train`` and ``fedkd aggregate`` themselves; here only the
two folders themselves. results/ itself may be a link: where the results live is the user's
choice, said once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedkd.files import RESULTS, SymlinkError, link_problem

# checked run by run, not walked here (see above)
PER_RUN = ("runs", "logs/train")


def check_results_links(
    root: str | Path = RESULTS, error: type[Exception] = SymlinkError
) -> str | None:
    """Refuse (``error``, naming it) a symbolic link anywhere below ``root`` but inside
    ``PER_RUN``'s folders. When ``root`` itself is a link, a note says so on stderr, and is
    returned (else None)."""
    root = Path(root)
    note = None
    if root.is_symlink():
        note = (
            f"note: {root} is a symbolic link (to {os.readlink(root)}); fedkd writes the "
            "results where it leads, and follows no link below it"
        )
        print(note, file=sys.stderr)
    if not root.is_dir():
        return note
    try:
        _walk(root)
    except SymlinkError as exc:
        raise error(str(exc)) from None
    return note


def _walk(root: Path) -> None:
    folders = [root]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                path = Path(entry.path)
                if entry.is_symlink():
                    raise SymlinkError(link_problem(path))
                if entry.is_dir(follow_symlinks=False):
                    if path.relative_to(root).as_posix() not in PER_RUN:
                        folders.append(path)
