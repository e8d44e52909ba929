"""No code file over 500 lines (DESIGN.md, "One job per file, none over 500 lines"): a file past
it holds more than one job, and the next person reads it whole. Counted over what git tracks."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500
CODE = ("*.py", "*.smk", "Snakefile", "*.sh")


def tracked_code() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", *CODE], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_code_file_is_over_500_lines():
    files = tracked_code()
    assert any(f.name == "config.py" for f in files), "the listing holds the package's files"
    long = {
        str(f.relative_to(ROOT)): n
        for f in files
        if f.is_file() and (n := len(f.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert long == {}, f"over {LIMIT} lines: {long}; split the file by what it does"
