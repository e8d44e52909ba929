"""Split a training set over federated clients, and store the split as Parquet.

``partition_labels`` returns one client id per training index (-1: a documented remainder no
client trains on). Schemes:

- ``dirichlet-equal`` (FedDF/FedGKD, epfml/federated-learning): clients in groups of 10, a
  Dir(alpha) label draw per group, then equal slices of floor(n / clients) per client.
- ``dirichlet`` (NIID-Bench/MOON): Dir(alpha) per class over all clients, every client >= 10
  samples, sizes differ, every sample assigned.
- ``shards`` (FedNTD): each class cut into the same number of one-class shards,
  ``shards_per_client`` random ones each; every sample assigned, sizes differ with the classes'.
- ``iid``: a random permutation cut into equal slices.

The Parquet file has columns ``index`` (int64), ``client`` (int32), ``label`` (int32) and the
JSON metadata under the schema-metadata key ``b"fedkd"``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from fedkd.digests import write_parquet
from fedkd.files import MAX_PARTITION_BYTES, atomic_write, read_parquet_file
from fedkd.values import exact_int, load_json

SCHEMES = ("dirichlet-equal", "dirichlet", "shards", "iid")
_MAX_ATTEMPTS = 10_000  # Dirichlet resampling limit before giving up with advice
_GROUP = 10  # FedDF/FedGKD draw the Dirichlet split over groups of 10 clients
_MIN_SIZE = 10  # NIID-Bench: every client gets at least 10 samples


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(
            f"unknown partition scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}"
        )


def uses_uniform_weights(scheme: str) -> bool:
    """True where all clients hold equally many samples, so FedAvg weights them uniformly."""
    _check_scheme(scheme)
    return scheme in ("dirichlet-equal", "iid")


def partition_labels(
    labels, scheme: str, num_clients: int, seed: int, *,
    alpha: float | None = None, shards_per_client: int | None = None,
    num_classes: int | None = None,
) -> np.ndarray:  # fmt: skip
    """Client id (int64) per training index, -1 for the remainder left out; deterministic."""
    _check_scheme(scheme)
    labels = np.asarray(labels).astype(np.int64).ravel()
    n = len(labels)
    if num_clients is None or int(num_clients) < 1:
        raise ValueError(f"num_clients={num_clients} must be at least 1")
    num_clients = int(num_clients)
    if num_clients > n:
        raise ValueError(
            f"num_clients={num_clients} exceeds the {n} training samples; use at most {n} clients"
        )
    if n and labels.min() < 0:
        raise ValueError(f"labels must be >= 0, got {labels.min()}")
    k = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    if n and labels.max() >= k:
        raise ValueError(f"label {labels.max()} is out of range for num_classes={num_classes}")
    rng = np.random.default_rng(seed)

    if scheme in ("dirichlet-equal", "dirichlet"):
        if alpha is None:
            raise ValueError(f"scheme {scheme!r} needs alpha (Dirichlet concentration, e.g. 0.5)")
        if not alpha > 0:
            raise ValueError(f"alpha={alpha} must be > 0 (small: skewed labels, large: near IID)")
        if scheme == "dirichlet-equal":
            return _dirichlet_equal(rng, labels, num_clients, alpha, k)
        if num_clients * _MIN_SIZE > n:
            raise ValueError(
                f"scheme 'dirichlet' gives every client at least {_MIN_SIZE} samples, so "
                f"num_clients={num_clients} needs {num_clients * _MIN_SIZE} training samples but "
                f"there are {n}; use at most {n // _MIN_SIZE} clients"
            )
        parts = _dirichlet_split(rng, np.arange(n), labels, num_clients, alpha, k, _MIN_SIZE)
        out = np.full(n, -1, dtype=np.int64)
        for c, part in enumerate(parts):
            out[part] = c
        return out

    if scheme == "shards":
        if shards_per_client is None or int(shards_per_client) < 1:
            raise ValueError(
                f"scheme 'shards' needs shards_per_client >= 1, got "
                f"shards_per_client={shards_per_client}"
            )
        s = int(shards_per_client)
        total = num_clients * s
        if total > n:
            raise ValueError(
                f"{num_clients} clients x {s} shards per client = {total} shards exceed the {n} "
                f"training samples; use fewer clients or fewer shards per client"
            )
        return _one_class_shards(rng, labels, num_clients, s)

    # iid: equal slices of a random permutation; the tail (n % num_clients) is left out
    m = n // num_clients
    out = np.full(n, -1, dtype=np.int64)
    out[rng.permutation(n)[: m * num_clients]] = np.repeat(np.arange(num_clients), m)
    return out


def shards_misfit(num_classes: int, num_clients: int, shards_per_client: int) -> str | None:
    """Why the ``shards`` scheme cannot cut ``num_classes`` classes into the same number of
    one-class shards for ``num_clients`` x ``shards_per_client`` shards (None: it can); planning
    asks it too (fedkd.pipeline.capacity)."""
    total = num_clients * shards_per_client
    if total % num_classes == 0:
        return None
    fits = num_classes // math.gcd(num_clients, num_classes)
    return (
        f"scheme 'shards' cuts each of the {num_classes} classes into the same number of "
        f"one-class shards, so clients x shards = {num_clients} x {shards_per_client} = {total} "
        f"must be a multiple of {num_classes}; with {num_clients} clients use a multiple of "
        f"{fits} shards per client"
    )


def _one_class_shards(rng, labels, num_clients, shards_per_client) -> np.ndarray:
    """FedNTD (Appendix B.5 and its code): every class present is cut into the same number of
    shards, each of one class; a class's samples are spread over its shards within one of each
    other, so nothing is left out, and each client takes ``shards_per_client`` random shards."""
    classes = np.unique(labels)
    problem = shards_misfit(len(classes), num_clients, shards_per_client)
    if problem:
        raise ValueError(problem)
    total = num_clients * shards_per_client
    per_class = total // len(classes)
    counts = np.bincount(labels)[classes]
    if counts.min() < per_class:
        raise ValueError(
            f"scheme 'shards' cuts each class into {per_class} shards but class "
            f"{classes[counts.argmin()]} has {counts.min()} samples; use fewer clients or fewer "
            "shards per client"
        )
    shards = [
        shard
        for c in classes
        for shard in np.array_split(rng.permutation(np.flatnonzero(labels == c)), per_class)
    ]
    owner = np.repeat(np.arange(num_clients), shards_per_client)[rng.permutation(total)]
    out = np.full(len(labels), -1, dtype=np.int64)
    for shard, client in zip(shards, owner, strict=True):
        out[shard] = client
    return out


def _dirichlet_split(rng, idx, labels, num_clients, alpha, num_classes, min_size) -> list:
    """NIID-Bench draw of ``idx`` over clients: per class Dir(alpha) proportions, resampled until
    the smallest client holds ``min_size``. Each client's indices come out class by class."""
    cap = len(idx) / num_clients
    by_class = [idx[labels[idx] == c] for c in range(num_classes)]
    for _ in range(_MAX_ATTEMPTS):
        chunks = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for members in by_class:
            members = rng.permutation(members)
            p = rng.dirichlet(np.full(num_clients, float(alpha)))
            # NIID-Bench balance trick: clients already above the average take no more samples
            capped = p * (sizes < cap)
            if capped.sum() > 0:  # all mass on capped clients can underflow to 0 at tiny alpha
                p = capped
            cuts = (np.cumsum(p / p.sum()) * len(members)).astype(int)[:-1]
            for c, chunk in enumerate(np.split(members, cuts)):
                chunks[c].append(chunk)
                sizes[c] += len(chunk)
        if sizes.min() >= min_size:
            return [np.concatenate(ch) if ch else np.empty(0, np.int64) for ch in chunks]
    raise ValueError(
        f"no draw with alpha={alpha} gave every client at least {min_size} samples in "
        f"{_MAX_ATTEMPTS} attempts; use a larger alpha or fewer clients"
    )


def _dirichlet_equal(rng, labels, num_clients, alpha, num_classes) -> np.ndarray:
    """FedDF/FedGKD: Dirichlet draw per group of 10 clients (min size half the average), then
    the class-ordered concatenation is cut into equal slices, so label skew survives."""
    n = len(labels)
    m = n // num_clients
    # the authors drop the tail of the class-ordered list (a label-biased cut); here the
    # n % num_clients remainder is a random subset instead, and each group gets exactly g * m
    kept = rng.permutation(n)[: m * num_clients]
    out = np.full(n, -1, dtype=np.int64)
    first = 0
    for start in range(0, num_clients, _GROUP):
        g = min(_GROUP, num_clients - start)
        idx = kept[first : first + g * m]
        first += g * m
        parts = _dirichlet_split(rng, idx, labels, g, alpha, num_classes, int(0.5 * m))
        out[np.concatenate(parts)] = start + np.repeat(np.arange(g), m)
    return out


def client_indices(assignment, num_clients: int | None = None) -> list[np.ndarray]:
    """Sorted training indices per client. At least ``num_clients`` lists (default max id + 1);
    more if the assignment names more clients, so callers can report the mismatch."""
    assignment = np.asarray(assignment, dtype=np.int64)
    used = assignment >= 0
    count = int(assignment.max()) + 1 if used.any() else 0
    count = max(count, int(num_clients or 0))
    order = np.argsort(assignment, kind="stable")[(~used).sum() :]  # stable: sorted per client
    sizes = np.bincount(assignment[used], minlength=count)
    return np.split(order, np.cumsum(sizes)[:-1]) if count else []


def draw_partition(
    dataset: str, scheme: str, clients: int, seed: int, *,
    alpha: float | None = None, shards: int | None = None, data_root: str | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:  # fmt: skip
    """What ``fedkd partition`` writes: (assignment, training labels, metadata) of ``dataset``'s
    training set split by ``scheme``. Here rather than in the command, so that the partition's
    code hash (``fedkd.provenance.partition_code_hash``) covers every line that decides it."""
    from fedkd.data import load_dataset

    ds = load_dataset(dataset, data_root, seed=seed)
    labels = ds.train.y.numpy()
    assignment = partition_labels(
        labels, scheme, clients, seed, alpha=alpha, shards_per_client=shards,
        num_classes=ds.num_classes,
    )  # fmt: skip
    meta = {
        "dataset": dataset, "scheme": scheme, "alpha": alpha, "shards": shards,
        "clients": clients, "seed": seed, "num_classes": ds.num_classes,
        "num_samples": int(len(labels)),
    }  # fmt: skip
    return assignment, labels, meta


def _json_default(obj):
    # numpy scalars/arrays (e.g. np.int64 client counts) are not JSON-serialisable as they are
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"partition metadata value {obj!r} is not JSON-serialisable")


def write_partition(path, assignment, labels, meta: dict) -> None:
    """Write the partition Parquet atomically (temp file in the same folder, then rename), with
    page checksums and its values' digest (``fedkd.digests``), so a damaged file is refused."""
    import pyarrow as pa

    path = Path(path)
    assignment = np.asarray(assignment, dtype=np.int64)
    labels = np.asarray(labels)
    if assignment.shape != labels.shape:
        raise ValueError(f"{len(assignment)} assignments but {len(labels)} labels")
    table = pa.table({
        "index": pa.array(np.arange(len(assignment), dtype=np.int64)),
        "client": pa.array(assignment.astype(np.int32)),
        "label": pa.array(labels.astype(np.int32)),
    })  # fmt: skip
    raw = json.dumps(meta, default=_json_default).encode()
    table = table.replace_schema_metadata({b"fedkd": raw})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda file: write_parquet(table, file))


def read_partition(path) -> tuple[np.ndarray, dict]:
    """(assignment int64 ordered by ``index``, metadata) of a partition Parquet."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"partition file {path} does not exist; write it with `fedkd partition`"
        )
    try:
        table = read_parquet_file(path, "a partition file", MAX_PARTITION_BYTES)
        raw = (table.schema.metadata or {}).get(b"fedkd")
        meta = load_json(raw, "its metadata") if raw else {}
        index = table.column("index").to_numpy().astype(np.int64)
        client = table.column("client").to_numpy().astype(np.int64)
    except Exception as exc:
        raise ValueError(
            f"partition file {path} cannot be read as a partition: {exc}; delete it and run the "
            "workflow (or `fedkd partition`) again to write it anew"
        ) from exc
    meta = checked_meta(meta, path)
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(len(index))):
        raise ValueError(f"partition file {path}: column 'index' is not a permutation of 0..n-1")
    _check_no_empty_client(client, meta.get("clients"), path)
    return client[order], meta


# the metadata `fedkd partition` writes, by kind; a file made or edited elsewhere is held to them
_META_COUNTS = ("clients", "num_classes", "num_samples")  # integers >= 1
_META_INTS = ("seed",)  # integers >= 0
_META_OPTIONAL_COUNTS = ("shards",)  # integers >= 1, or null
_META_OPTIONAL_NUMBERS = ("alpha",)  # finite numbers, or null
_META_TEXTS = ("dataset", "scheme")


def checked_meta(meta, path) -> dict:
    """A partition's metadata with each known key of its kind: an integral number another tool
    wrote as a float (``clients: 4.0``) is the integer; any other wrong type is refused naming
    the file, the key and the value, so that no check below skips a value it cannot read."""
    if not isinstance(meta, dict):
        raise ValueError(
            f"partition file {path}: its metadata is a JSON {type(meta).__name__}, not an object; "
            "re-create the file with `fedkd partition`"
        )
    meta = dict(meta)
    problems = []
    for key in _META_COUNTS + _META_INTS + _META_OPTIONAL_COUNTS:
        if key not in meta or (meta[key] is None and key in _META_OPTIONAL_COUNTS):
            continue
        value = meta[key]
        value = exact_int(value)  # from 2^53 on a float is refused below, not rounded
        least = 0 if key in _META_INTS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "an integer >= 0" if least == 0 else "a positive integer"
            problems.append(f"{key}={meta[key]!r} (must be {kind})")
        else:
            meta[key] = value
    for key in _META_OPTIONAL_NUMBERS:
        value = meta.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            problems.append(f"{key}={value!r} (must be a finite number, or null)")
        else:
            meta[key] = float(value)
    problems += [
        f"{key}={meta[key]!r} (must be a name)"
        for key in _META_TEXTS
        if key in meta and not isinstance(meta[key], str)
    ]
    if problems:
        raise ValueError(
            f"partition file {path}: its metadata holds {', '.join(problems)}; re-create the "
            "file with `fedkd partition`"
        )
    return meta


def _check_no_empty_client(assignment: np.ndarray, clients, path: Path) -> None:
    """Refuse a partition in which a client holds no sample. Every scheme here gives each client
    data; a file with empty clients was edited or made elsewhere, and a run on it would sample
    clients that train on nothing (its rounds silently average fewer models than C asks for)."""
    if clients is None:
        return  # no client count recorded: the run compares the file with its spec
    if clients > len(assignment):  # before bincount allocates that many counters
        raise ValueError(
            f"partition file {path}: {clients} clients share {len(assignment)} training "
            f"samples, so some hold none; every client must hold data. Re-create it with "
            f"`fedkd partition`"
        )
    used = assignment[(assignment >= 0) & (assignment < clients)]
    empty = np.flatnonzero(np.bincount(used, minlength=clients) == 0)
    if len(empty):
        shown = ", ".join(str(c) for c in empty[:10]) + (", ..." if len(empty) > 10 else "")
        raise ValueError(
            f"partition file {path}: {len(empty)} of its {clients} clients hold no training "
            f"sample (client {shown}); every client must hold data. Re-create it with "
            f"`fedkd partition` (fewer clients, or a larger alpha)"
        )
