"""fedkd status and the workflow's re-runs: a run the train job started under other flags or
code than the configuration and the sources give now (its .stamp) is one Snakemake trains again,
so status counts it as left to train, not done."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from fedkd.cli import main
from fedkd.pipeline import Plan
from fedkd.run_paths import parse_run_dir
from test_status import record_for

REPO = Path(__file__).resolve().parents[1]


def test_a_done_run_whose_stamp_is_not_the_configurations_is_outdated(
    tmp_path, capsys, monkeypatch
):
    """The train job's .stamp holds the hash of the flags and code a run was started under;
    where the configuration or the sources now give another, Snakemake trains the run again
    (its params changed), and status counts it as left to train, not done."""
    monkeypatch.chdir(tmp_path)
    config = REPO / "config" / "tiny.yaml"
    plan = Plan(yaml.safe_load(config.read_text()))
    table3 = sorted(run for _, run in plan.target_runs("table3"))
    for run in table3:
        folder = Path(run)
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(record_for(folder, status="complete")))
        pd.DataFrame({"round": [1, 2, 3], "test_acc": [0.1] * 3, "seconds": [2.0] * 3}).to_parquet(
            folder / "metrics.parquet"
        )
        (folder / ".stamp").write_text(plan.train_stamp(**parse_run_dir(run)) + "\n")
    args = ["status", "results/tables/table3.tex", "--configfile", str(config)]
    assert main(args) == 0
    assert f"{len(table3)} of {len(table3)} runs done" in capsys.readouterr().out
    # one run started under other flags or code; one trained by hand (no stamp): done
    Path(table3[0], ".stamp").write_text("0123456789abcdef\n")
    Path(table3[1], ".stamp").unlink()
    assert main(args) == 0
    out = capsys.readouterr().out
    head = f"{len(table3) - 1} of {len(table3)} runs done, 0 running, 1 outdated"
    assert head in out, out
    assert f"  outdated {table3[0].removeprefix('results/runs/')}\n" in out, out
    assert "ETA: ~6 s of training left (1 run, none running now)" in out, out
