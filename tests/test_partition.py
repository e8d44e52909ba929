import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fedkd.data.partition import (
    SCHEMES,
    client_indices,
    partition_labels,
    read_partition,
    uses_uniform_weights,
    write_partition,
)

NUM_CLASSES = 10


def synthetic_labels(n=10_000, num_classes=NUM_CLASSES, seed=0):
    return np.random.RandomState(seed).randint(0, num_classes, size=n).astype(np.int64)


def balanced_labels(per_class=100, num_classes=NUM_CLASSES):
    return np.repeat(np.arange(num_classes), per_class).astype(np.int64)


KWARGS = {
    "dirichlet-equal": {"alpha": 0.5},
    "dirichlet": {"alpha": 0.5},
    "shards": {"shards_per_client": 2},
    "iid": {},
}


def mean_label_entropy(assignment, labels, num_clients):
    entropies = []
    for idx in client_indices(assignment, num_clients):
        p = np.bincount(labels[idx], minlength=NUM_CLASSES) / len(idx)
        p = p[p > 0]
        entropies.append(-(p * np.log(p)).sum())
    return float(np.mean(entropies))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_disjoint_and_complete(scheme):
    labels = synthetic_labels(n=10_000)
    assignment = partition_labels(labels, scheme, 20, seed=1, **KWARGS[scheme])
    assert assignment.dtype == np.int64 and assignment.shape == labels.shape
    parts = client_indices(assignment)
    assert len(parts) == 20
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined)  # disjoint
    assert np.array_equal(np.sort(joined), np.flatnonzero(assignment >= 0))
    # 10,000 divides evenly over 20 clients (and 40 shards), so nothing is left out
    assert (assignment >= 0).all()


@pytest.mark.parametrize("scheme", ["dirichlet-equal", "iid"])
def test_equal_sizes_and_documented_remainder(scheme):
    labels = synthetic_labels(n=10_007)
    assignment = partition_labels(labels, scheme, 20, seed=3, **KWARGS[scheme])
    sizes = np.bincount(assignment[assignment >= 0], minlength=20)
    assert (sizes == 10_007 // 20).all()
    assert (assignment == -1).sum() == 10_007 % 20
    assert uses_uniform_weights(scheme)


def test_dirichlet_equal_fewer_than_ten_clients():
    labels = synthetic_labels(n=1_000)
    assignment = partition_labels(labels, "dirichlet-equal", 4, seed=0, alpha=0.1)
    assert (np.bincount(assignment, minlength=4) == 250).all()


def test_dirichlet_min_size_and_unequal_weights():
    labels = synthetic_labels()
    assignment = partition_labels(labels, "dirichlet", 20, seed=0, alpha=0.1)
    sizes = np.bincount(assignment, minlength=20)
    assert sizes.min() >= 10
    assert sizes.sum() == len(labels)
    # NIID-Bench's balance: a client past the average size takes nothing of the later classes,
    # so none ends a whole class beyond it
    assert sizes.max() < len(labels) / 20 + np.bincount(labels).max()
    assert len(np.unique(sizes)) > 1
    assert not uses_uniform_weights("dirichlet")
    assert not uses_uniform_weights("shards")


def test_shards_sizes_and_labels():
    labels = balanced_labels(per_class=100)  # 1,000 samples, shard size 25 divides each class
    assignment = partition_labels(labels, "shards", 20, seed=0, shards_per_client=2)
    for idx in client_indices(assignment):
        assert len(idx) == 2 * 25
        assert len(np.unique(labels[idx])) <= 2


@pytest.mark.parametrize("clients, shards", [(10, 2), (10, 3), (5, 4)])
def test_shards_hold_one_class_each_on_unequal_classes(clients, shards):
    """FedNTD (Appendix B.5): a shard holds samples of one class, so a client of s shards holds
    at most s classes, also on class sizes a held-out validation split leaves unequal (346 to
    372 of mnist5k's 3,600); as in FedNTD's code every sample is assigned, a class's shards
    within one sample of each other."""
    counts = [346, 365, 365, 359, 350, 363, 361, 372, 353, 366]
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_CLASSES), counts))
    assignment = partition_labels(labels, "shards", clients, seed=0, shards_per_client=shards)
    assert (assignment >= 0).all()
    parts = client_indices(assignment, clients)
    assert max(len(np.unique(labels[idx])) for idx in parts) <= shards
    per_class = clients * shards // NUM_CLASSES
    sizes = [len(idx) for idx in parts]
    assert min(sizes) >= shards * (min(counts) // per_class)
    assert max(sizes) <= shards * -(-max(counts) // per_class)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_deterministic(scheme):
    labels = synthetic_labels(n=2_000)
    a = partition_labels(labels, scheme, 10, seed=7, **KWARGS[scheme])
    b = partition_labels(labels, scheme, 10, seed=7, **KWARGS[scheme])
    c = partition_labels(labels, scheme, 10, seed=8, **KWARGS[scheme])
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("scheme", ["dirichlet-equal", "dirichlet"])
def test_heterogeneity_falls_as_alpha_grows(scheme):
    labels = synthetic_labels()
    entropies = [
        mean_label_entropy(partition_labels(labels, scheme, 20, seed=0, alpha=a), labels, 20)
        for a in (0.1, 1.0, 100.0)
    ]
    assert entropies[0] < entropies[1] < entropies[2]
    assert entropies[2] > 0.95 * np.log(NUM_CLASSES)  # near-IID at large alpha


def test_iid_clients_hold_every_class_in_its_share():
    labels = synthetic_labels()
    assignment = partition_labels(labels, "iid", 20, seed=0)
    assert mean_label_entropy(assignment, labels, 20) > 0.99 * np.log(NUM_CLASSES)


def test_parquet_round_trip(tmp_path):
    labels = synthetic_labels(n=1_001)
    assignment = partition_labels(labels, "dirichlet-equal", 10, seed=0, alpha=0.1)
    meta = {
        "scheme": "dirichlet-equal",
        "alpha": 0.1,
        "shards": None,
        "clients": np.int64(10),
        "seed": 0,
        "dataset": "synthetic",
        "num_classes": NUM_CLASSES,
    }
    path = tmp_path / "sub" / "partition.parquet"
    write_partition(path, assignment, labels, meta)
    table = pq.read_table(path)
    assert table.schema.field("index").type == pa.int64()
    assert table.schema.field("client").type == pa.int32()
    assert table.schema.field("label").type == pa.int32()
    assert np.array_equal(table.column("label").to_numpy(), labels)
    assert [p.name for p in path.parent.iterdir()] == ["partition.parquet"]  # no temp file left

    got, got_meta = read_partition(path)
    assert got.dtype == np.int64
    assert np.array_equal(got, assignment)
    assert got_meta == {**meta, "clients": 10}


def test_read_partition_orders_by_index(tmp_path):
    path = tmp_path / "p.parquet"
    table = pa.table(
        {"index": pa.array([2, 0, 1], pa.int64()), "client": pa.array([5, 3, 4], pa.int32())}
    )
    pq.write_table(table.replace_schema_metadata({b"fedkd": b"{}"}), path)
    assignment, meta = read_partition(path)
    assert assignment.tolist() == [3, 4, 5] and meta == {}


def test_read_partition_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        read_partition(tmp_path / "missing.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file")
    with pytest.raises(ValueError, match="bad.parquet"):
        read_partition(bad)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"scheme": "random"}, "'random'.*dirichlet-equal, dirichlet, shards, iid"),
        ({"scheme": "dirichlet", "alpha": None}, "needs alpha"),
        ({"scheme": "dirichlet", "alpha": 0.0}, "alpha=0.0"),
        ({"scheme": "dirichlet-equal", "alpha": -1}, "alpha=-1"),
        ({"scheme": "shards"}, "shards_per_client=None"),
        ({"scheme": "shards", "shards_per_client": 0}, "shards_per_client=0"),
        ({"scheme": "iid", "num_clients": 0}, "num_clients=0"),
        ({"scheme": "iid", "num_clients": 101}, "num_clients=101.*100 training samples"),
        (
            {"scheme": "shards", "num_clients": 30, "shards_per_client": 4},
            "120 shards.*100 training",
        ),
        ({"scheme": "dirichlet", "num_clients": 20, "alpha": 1.0}, "num_clients=20"),
        (
            {"scheme": "shards", "num_clients": 7, "shards_per_client": 2},
            "7 x 2 = 14 must be a multiple of 10; with 7 clients use a multiple of 10 shards",
        ),
    ],
)
def test_errors_name_the_bad_value(kwargs, match):
    args = {"labels": synthetic_labels(n=100), "num_clients": 5, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        partition_labels(**args)


def test_uses_uniform_weights_rejects_unknown_scheme():
    with pytest.raises(ValueError, match="'bogus'"):
        uses_uniform_weights("bogus")


def test_resampling_gives_up_with_advice(monkeypatch):
    import fedkd.data.partition as partition

    monkeypatch.setattr(partition, "_MAX_ATTEMPTS", 50)
    labels = synthetic_labels(n=100)  # 10 clients x min size 10 leaves no slack at tiny alpha
    with pytest.raises(ValueError, match="alpha=0.001.*larger alpha"):
        partition_labels(labels, "dirichlet", 10, seed=0, alpha=1e-3)
