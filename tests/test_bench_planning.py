"""bench/planning.py measures what its figures are named for: torch's import on its own line
(import_torch_seconds), not inside validation's seconds; and a bad --aggregate-runs is refused
naming that option before anything is measured. Offline: a sweep of 1,000 runs, no snakemake -n,
nothing appended to bench/results.jsonl."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "planning.py"


def run_in_fresh_process(code: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter (so torch is not imported yet), bench/ importable."""
    env_path = f"{ROOT / 'bench'}:{ROOT / 'src'}"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": ""}, timeout=300,
    )  # fmt: skip


def test_torch_is_imported_in_the_step_timed_as_its_import(tmp_path):
    # validation is timed with torch already imported: its seconds are fedkd's own work
    code = f"""
import sys
from pathlib import Path
import fedkd.pipeline
import planning

seen = []
real = fedkd.pipeline.validate_config
def validate(*args, **kwargs):
    seen.append("torch" in sys.modules)
    return real(*args, **kwargs)
fedkd.pipeline.validate_config = validate
assert "torch" not in sys.modules
config = planning.write_config(planning.sweep_config(1000), Path({str(tmp_path)!r}))
figures = planning.fedkd_planning(config)
print(seen, figures["runs"])
"""
    proc = run_in_fresh_process(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[True]", "1000"], proc.stdout


def test_a_bad_aggregate_count_is_refused_naming_it_before_any_measurement():
    before = (ROOT / "bench" / "results.jsonl").read_bytes()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1000", "--aggregate-runs", "500",
         "--skip-snakemake"],
        capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--aggregate-runs 500: give a multiple of 1,000" in proc.stderr, proc.stderr
    assert "fedkd planning:" not in proc.stderr  # refused before the first measurement
    assert (ROOT / "bench" / "results.jsonl").read_bytes() == before


def test_a_bad_run_count_is_refused_naming_it():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1500", "--skip-snakemake"],
        capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--runs 1500: give a multiple of 1,000" in proc.stderr, proc.stderr
