"""The runs an aggregate is made of, as ``fedkd aggregate`` is given them: ``--run LABEL=RUN_DIR``
arguments and runs files (one run a line, as the workflow writes ``results/aggregate/NAME.runs``),
each label checked as a table column's name."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from fedkd.echo import label_character_problem
from fedkd.files import MAX_RUN_JSON_BYTES, UnreadableFileError, read_regular_file
from fedkd.report.aggregate import ReportError


def parse_run_arg(text: str) -> tuple[str, str]:
    """``LABEL=RUN_DIR`` -> (label, run_dir).

    Labels may themselves contain ``=`` (``M=3``) and so may directories, so the split is the one
    whose right-hand side is an existing directory; if none is, the first ``=`` is used and the
    missing directory is reported when the run is read.
    """
    text = text.strip()
    cuts = [i for i, ch in enumerate(text) if ch == "="]
    if not cuts:
        raise ReportError(f"--run {text!r} is not LABEL=RUN_DIR (no '=')")
    candidates = [(text[:i], text[i + 1 :]) for i in cuts if i > 0 and text[i + 1 :]]
    if not candidates:
        raise ReportError(f"--run {text!r} is not LABEL=RUN_DIR (empty label or directory)")
    existing = [c for c in candidates if Path(c[1]).is_dir()]
    if len(existing) > 1:
        raise ReportError(
            f"--run {text!r} is ambiguous: it splits into LABEL=RUN_DIR as "
            + " or ".join(f"{lab!r}={d!r}" for lab, d in existing)
            + "; rename the label or the directory"
        )
    label, run_dir = existing[0] if existing else candidates[0]
    _check_label(label, f"--run {text!r}")
    return label, run_dir


def _check_label(label: str, where: str) -> None:
    """A label is a table column's name: one with an invisible character (a bidi override, a
    control character) is refused, as the workflow refuses it in a configuration and ``fedkd
    train`` in ``--label``."""
    problem = label_character_problem(label)
    if problem:
        raise ReportError(f"{where}: its label {label!r} {problem}")


def read_runs_file(path: str | Path, sha256: str | None = None) -> list[tuple[str, str]]:
    """One run per line: ``LABEL<TAB>RUN_DIR`` (as the workflow writes it: a tab is in no label,
    so a label ``M=3`` splits where it should even before the run exists), or ``LABEL=RUN_DIR``
    as --run takes it; blank lines and lines starting with ``#`` are skipped. ``sha256``: the
    hash of the list the plan names (the workflow passes it), which the file must have."""
    path = Path(path)
    try:
        # at most as large as a run record: a line per run, a few hundred thousand runs
        raw = read_regular_file(path, "a runs file", MAX_RUN_JSON_BYTES)
        if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
            raise ReportError(
                f"runs file {path} does not list the runs the configuration names (its SHA-256 "
                f"is not the plan's {sha256}): it was edited or damaged since the workflow wrote "
                "it; delete it and run the workflow again, which writes it anew"
            )
        lines = raw.decode().splitlines()
    except (OSError, UnreadableFileError, UnicodeDecodeError) as exc:
        raise ReportError(f"runs file {path} cannot be read: {exc}") from exc
    runs = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        label, tab, run_dir = line.partition("\t")
        if tab:
            if not label or not run_dir.strip():
                raise ReportError(
                    f"runs file {path}, line {number}: {line!r} is not LABEL<TAB>RUN_DIR "
                    "(empty label or directory)"
                )
            _check_label(label, f"runs file {path}, line {number}")
            runs.append((label, run_dir.strip()))
            continue
        try:
            runs.append(parse_run_arg(line))
        except ReportError as exc:  # name the file and line, not a --run flag never given
            problem = str(exc).replace(f"--run {line.strip()!r} ", "", 1)
            raise ReportError(
                f"runs file {path}, line {number}: {line.strip()!r} {problem}"
            ) from None
    return runs


def reading_progress(
    say: Callable[[str], None], every: float = 10.0, clock: Callable[[], float] = time.monotonic
) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` for ``aggregate_runs`` that says how far the reading is, at
    most once every ``every`` seconds (an aggregate of 30,000 runs reads for minutes); a short
    one says nothing."""
    last = clock()

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = clock()
        if done < total and now - last >= every:
            last = now
            say(f"read {done:,} of {total:,} runs ({100 * done // total} %)")

    return progress
