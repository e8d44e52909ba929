"""fedkd reads its own Parquet files (metrics, partitions, the aggregate) on the calling thread:
a started Arrow thread pool can abort the interpreter at its exit ("terminate called without an
active exception", apache/arrow#34314), the likely cause of that message ending a `fedkd train`
that only read a finished run's metrics. Checked in a fresh process, where nothing else has started the pool: reading
every kind of file starts no thread."""

import subprocess
import sys
from pathlib import Path

PROBE = r"""
import os, sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow  # its own allocator threads start at import: counted as the baseline

from fedkd.data.partition import read_partition, write_partition
from fedkd.engine.run_outputs import read_metrics, write_metrics
from fedkd.files import read_metrics_table
from fedkd.config import RunSpec
from fedkd.engine.run import Run
from fedkd.report.aggregate import RUN_KEY_COLUMNS, aggregate_runs, read_aggregate, write_aggregate
from fedkd.report.figures.partition import read_partition_counts

out = Path(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from small_runs import TINY

# a finished run for aggregate_runs (training's own threads start here, before the count)
Run(RunSpec(**TINY, rounds=1), out / "run", log=lambda msg: None).run()
rows = [{"round": r, "test_acc": 0.1 * r, "class_acc": [0.1, 0.2]} for r in range(1, 4)]
write_metrics(out / "metrics.parquet", rows)
write_partition(out / "part.parquet", np.arange(40) % 4, np.arange(40) % 2,
                {"clients": 4, "num_classes": 2, "num_samples": 40, "seed": 0})
aggregate = {c: ["x"] for c in RUN_KEY_COLUMNS}
write_aggregate(pd.DataFrame({**aggregate, "round": [1], "test_acc": [0.5]}), out / "agg.parquet")

def threads():
    return len(os.listdir("/proc/self/task"))

before = threads()
read_metrics_table(out / "metrics.parquet", rounds_done=3)
read_metrics(out / "metrics.parquet")
read_partition(out / "part.parquet")
read_partition_counts(out / "part.parquet")
assert len(read_aggregate(out / "agg.parquet")) == 1
assert list(aggregate_runs([("a", str(out / "run"))])["round"]) == [1]
print(before, threads())
"""


def test_reading_fedkd_parquet_files_starts_no_arrow_thread(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split())
    assert after == before, f"{after - before} thread(s) started by the reads"
