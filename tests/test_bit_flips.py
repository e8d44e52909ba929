"""Single-bit flips in the files a table is read from: a real run's metrics.parquet and run.json,
and the aggregate made of it. Each flipped file, read back by fedkd's own readers, is refused with
an error naming it, or reads back the very values it held: never other numbers. The offsets are
drawn once from a fixed seed (a sample: every bit of the 5 KB metrics file takes minutes)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from fedkd.config import RunSpec
from fedkd.digests import DIGEST_KEY, METRICS_SHA256, RECORD_SHA256
from fedkd.engine.run import Run
from fedkd.files import METRICS, RUN_JSON, MetricsError, read_metrics_table
from fedkd.report import ReportError, aggregate_runs, read_aggregate, render, write_aggregate
from fedkd.run_paths import run_dir
from small_runs import TINY

FLIPS = 200


def quiet(msg: str) -> None:
    pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A real run (two rounds) where the workflow puts it."""
    root = tmp_path_factory.mktemp("project")
    spec = RunSpec(**TINY, rounds=2, seed=0)
    path = root / run_dir({**spec.to_dict(), "dataset": spec.dataset}, "fedavg", 0)
    Run(spec, path, log=quiet, labels={"variant": "fedavg"}).run()
    return path


def offsets(data: bytes, n: int = FLIPS) -> list[int]:
    return sorted(random.Random(len(data)).sample(range(len(data) * 8), n))


def flipped(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def outcomes(path: Path, read, refused: type[Exception]) -> dict[str, list[int]]:
    """Each sampled flip of ``path`` as "refused" (an error naming the file), "identical" (the
    values read before) or "different"; the file is restored after."""
    data = path.read_bytes()
    before = read()
    seen: dict[str, list[int]] = {"refused": [], "identical": [], "different": []}
    try:
        for bit in offsets(data):
            path.write_bytes(flipped(data, bit))
            try:
                after = read()
            except refused as exc:
                # the file, or its run folder and the file's name ("run folder X does not hold
                # the run its path names (variant 'fedavg' in the path, None in run.json)")
                named = str(path) in str(exc) or (
                    str(path.parent) in str(exc) and path.name in str(exc)
                )
                assert named, f"bit {bit}: {exc}"
                seen["refused"].append(bit)
                continue
            same = after.equals(before) and list(after.columns) == list(before.columns)
            seen["identical" if same else "different"].append(bit)
    finally:
        path.write_bytes(data)
    return seen


def check(seen: dict[str, list[int]]) -> None:
    assert not seen["different"], f"flipped bits read as other values: {seen['different']}"
    # the sample reaches the values: a reader that refused nothing would not be checked here
    assert len(seen["refused"]) > FLIPS // 4, seen


def test_a_runs_files_carry_their_checksums(trained):
    import pyarrow.parquet as pq

    record = json.loads((trained / RUN_JSON).read_text())
    assert len(record[RECORD_SHA256]) == 64 and len(record[METRICS_SHA256]) == 64
    parquet = pq.ParquetFile(trained / METRICS)
    assert DIGEST_KEY in parquet.schema_arrow.metadata


def test_a_flip_in_metrics_read_alone_is_refused_or_reads_the_same(trained, tmp_path):
    """As `fedkd train` reads a finished run's metrics before rebuilding or keeping them, and
    `fedkd status` reads them: no run.json to hold their hash, the file's own checks decide."""
    copy = tmp_path / METRICS
    shutil.copy(trained / METRICS, copy)
    check(outcomes(copy, lambda: read_metrics_table(copy).to_pandas(), MetricsError))


@pytest.mark.parametrize("name", [METRICS, RUN_JSON])
def test_a_flip_in_a_runs_files_is_refused_by_the_aggregate_or_reads_the_same(
    trained, tmp_path, name
):
    copy = tmp_path / trained.relative_to(trained.parents[4])
    shutil.copytree(trained, copy)
    check(outcomes(copy / name, lambda: aggregate_runs([("FedAvg", str(copy))]), ReportError))


@pytest.fixture
def aggregate(trained, tmp_path) -> Path:
    out = tmp_path / "agg.parquet"
    write_aggregate(aggregate_runs([("FedAvg", str(trained))]), out)
    return out


def test_a_flip_in_an_aggregate_is_refused_or_reads_the_same(aggregate):
    check(outcomes(aggregate, lambda: read_aggregate(aggregate), ReportError))


def test_a_flipped_aggregate_renders_the_same_table_or_is_refused(aggregate, tmp_path):
    """Never a column of "–" with the exit of a good table: the render reads the aggregate
    through read_aggregate, whose checks refuse what would change a value."""
    out = tmp_path / "table" / "t"
    options = {"columns": ["FedAvg"]}

    def table() -> pd.DataFrame:
        render("grid", out, aggregate=aggregate, options=options)
        return pd.DataFrame({"md": [out.with_name("t.md").read_text()]})

    check(outcomes(aggregate, table, ReportError))


def test_train_rebuilds_flipped_metrics_from_the_checkpoint(trained, tmp_path):
    """A finished run whose metrics a flip damaged is not kept: the same run rebuilds them from
    its checkpoint, with the values it had."""
    copy = tmp_path / trained.relative_to(trained.parents[4])
    shutil.copytree(trained, copy)
    metrics = copy / METRICS
    data, before = metrics.read_bytes(), read_metrics_table(metrics).to_pandas()
    for bit in offsets(data):
        metrics.write_bytes(flipped(data, bit))
        try:
            read_metrics_table(metrics)
        except MetricsError:
            break  # a flip the reader refuses
    else:
        pytest.fail("no sampled flip was refused")
    messages = []
    spec = RunSpec(**TINY, rounds=2, seed=0)
    Run(spec, copy, log=messages.append, labels={"variant": "fedavg"}).run()
    assert any(f"{metrics} is damaged" in m and "rebuilding" in m for m in messages), messages
    pd.testing.assert_frame_equal(read_metrics_table(metrics).to_pandas(), before)
    aggregate_runs([("FedAvg", str(copy))])  # and the record sealed again agrees with them


def test_a_flip_in_a_partition_file_is_refused_or_reads_the_same(tmp_path):
    """The partition a run trains on, as the trainer reads it (`read_partition`): a flip in a
    client's number would move an example to another client."""
    import numpy as np

    from fedkd.data.partition import partition_labels, read_partition, write_partition

    labels = np.random.default_rng(0).integers(0, 10, 300)
    assignment = partition_labels(labels, "dirichlet", 5, 0, alpha=0.5, num_classes=10)
    meta = {"dataset": "mnist5k", "scheme": "dirichlet", "alpha": 0.5, "shards": None,
            "clients": 5, "seed": 0, "num_classes": 10, "num_samples": 300}  # fmt: skip
    path = tmp_path / "partition.parquet"
    write_partition(path, assignment, labels, meta)

    def read() -> pd.DataFrame:
        clients, read_meta = read_partition(path)
        return pd.DataFrame({"client": clients, "meta": json.dumps(read_meta, sort_keys=True)})

    check(outcomes(path, read, ValueError))


def test_a_flip_in_a_features_file_is_refused_or_reads_the_same(tmp_path):
    """The t-SNE figure's input (`read_features`): its arrays are stored uncompressed, each with
    the CRC-32 the zip format keeps, which the read checks."""
    import numpy as np

    from fedkd.engine.features import FeaturesError, _npz_bytes, read_features

    rng = np.random.default_rng(0)
    arrays = {
        "labels": rng.integers(0, 10, 40),
        "global_features": rng.normal(size=(40, 8)).astype(np.float32),
        "local_features": rng.normal(size=(40, 8)).astype(np.float32),
    }
    meta = {"num_classes": 10, "class_names": [str(c) for c in range(10)], "client": 0,
            "strategy": "fedavg", "objective": "strategy",
            "models": [{"title": "global", "acc": 0.5}, {"title": "local", "acc": 0.4}]}  # fmt: skip
    path = tmp_path / "tsne.features.npz"
    path.write_bytes(_npz_bytes(arrays, json.dumps(meta, sort_keys=True)))

    def read() -> pd.DataFrame:
        got = read_features(path)
        rows = [("labels", got.pop("labels").tolist())]
        rows += [(title, (feats.tolist(), acc)) for title, feats, acc in got.pop("models")]
        rows += sorted((key, value) for key, value in got.items())
        return pd.DataFrame({"key": [k for k, _ in rows], "value": [repr(v) for _, v in rows]})

    check(outcomes(path, read, FeaturesError))


def test_train_makes_an_edited_record_or_other_metrics_again_from_the_checkpoint(trained, tmp_path):
    """A finished run whose run.json was edited (a better accuracy written in), or whose
    metrics.parquet is another sound file (sealed, checksummed, one value changed), is not
    taken as finished: the same command makes both again from the checkpoint, as they were."""
    from fedkd.digests import write_parquet

    record_before = json.loads((trained / RUN_JSON).read_text())
    metrics_before = read_metrics_table(trained / METRICS).to_pandas()
    spec = RunSpec(**TINY, rounds=2, seed=0)
    for damage in ("edited record", "other metrics"):
        copy = tmp_path / damage / trained.relative_to(trained.parents[4])
        shutil.copytree(trained, copy)
        if damage == "edited record":
            record = json.loads((copy / RUN_JSON).read_text())
            record["summary"]["best_acc"] = 0.9
            (copy / RUN_JSON).write_text(json.dumps(record))
        else:
            other = metrics_before.copy()
            other.loc[0, "test_acc"] = 0.999
            with (copy / METRICS).open("wb") as file:
                write_parquet(pa.Table.from_pandas(other, preserve_index=False), file)
            read_metrics_table(copy / METRICS)  # a sound file, on its own
        messages = []
        record = Run(spec, copy, log=messages.append, labels={"variant": "fedavg"}).run()
        assert any("rebuilding" in m for m in messages), (damage, messages)
        assert record["summary"] == record_before["summary"], damage
        pd.testing.assert_frame_equal(
            read_metrics_table(copy / METRICS).to_pandas(), metrics_before
        )


def test_features_refuse_another_runs_checkpoint(trained, tmp_path):
    """A checkpoint copied in from another run of the same settings (another seed) would give
    the t-SNE figure that run's models and accuracies."""
    from fedkd.engine.features import FeaturesError, tsne_features

    other = tmp_path / "other"
    Run(RunSpec(**TINY, rounds=2, seed=1), other, log=quiet).run()
    copy = tmp_path / "copy"
    shutil.copytree(trained, copy)
    shutil.copyfile(other / "checkpoint.pt", copy / "checkpoint.pt")
    with pytest.raises(FeaturesError, match="checkpoint.pt is another run's"):
        tsne_features(copy, tmp_path / "f.npz", samples=10)
