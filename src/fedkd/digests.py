"""Digests that tell a damaged file from a good one, so that a flipped bit is refused with the
file's name, never read as another number. Free of torch and pandas.

Parquet (``write_parquet``, checked by ``fedkd.files.parquet_table``): every page carries a CRC
(Parquet's page checksums), and the file's key-value metadata the SHA-256 of the values as read
back (``table_digest``): names, types, validity and values of every column, and the rest of the
metadata (pandas' column types among it). A flip the CRCs do not cover (a page header, the
footer's schema or offsets) changes either what is read, or nothing.

run.json (``seal_run_record``): ``metrics_sha256``, the SHA-256 of metrics.parquet's bytes as it
lay when the record was written, and ``record_sha256``, that of the record itself (every other
key, as JSON with sorted keys): its summary, status and provenance are covered as its spec is by
``spec_hash``. A record without them was written before records were sealed, and is read as
before; a single flip cannot remove one without changing the other's hash.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import pyarrow as pa

# the key of a Parquet file's values digest in its key-value metadata
DIGEST_KEY = b"fedkd.values.sha256"
RECORD_SHA256 = "record_sha256"
METRICS_SHA256 = "metrics_sha256"


class DigestMismatch(ValueError):
    """A file whose contents do not hash to the digest recorded for them: damaged or edited."""


def _update(h, data: bytes) -> None:
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def table_digest(table: pa.Table) -> str:
    """The SHA-256 of a table's schema metadata (``DIGEST_KEY`` aside), row count, and every
    column's name, type, validity and values (a null's slot hashed as a fixed value)."""
    h = hashlib.sha256()
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != DIGEST_KEY}
    for key in sorted(metadata):
        _update(h, key)
        _update(h, metadata[key])
    _update(h, str(table.num_rows).encode())
    for field, column in zip(table.schema, table.columns, strict=True):
        _update(h, f"{field.name}\0{field.type}\0{field.nullable}".encode())
        _array_digest(h, column.combine_chunks())
    return h.hexdigest()


def _array_digest(h, array: pa.Array) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    _update(h, np.packbits(pc.is_valid(array).to_numpy(zero_copy_only=False)).tobytes())
    if pa.types.is_null(kind):
        return
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = pc.fill_null(pc.list_value_length(array), 0)
        _update(h, lengths.to_numpy(zero_copy_only=False).astype("<i8").tobytes())
        _array_digest(h, array.flatten())
        return
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        _strings_digest(h, pc.fill_null(array, ""))
        return
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        _strings_digest(h, pc.fill_null(array, b""))
        return
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
        filled = pc.fill_null(array, False if pa.types.is_boolean(kind) else 0)
        _update(h, filled.to_numpy(zero_copy_only=False).tobytes())
        return
    # no column fedkd writes has another type; one that has is hashed by its values' text
    _update(h, repr(array.to_pylist()).encode())


def _strings_digest(h, array: pa.Array) -> None:
    import numpy as np
    import pyarrow as pa

    n = len(array)
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offsets = array.buffers()[1]
    if n == 0 or offsets is None:
        _update(h, b"")
        return
    ends = np.frombuffer(offsets, dtype="<i8" if wide else "<i4")[
        array.offset : array.offset + n + 1
    ]
    data = array.buffers()[2]
    _update(h, np.diff(ends).astype("<i8").tobytes())
    _update(h, b"" if data is None else data.to_pybytes()[int(ends[0]) : int(ends[-1])])


def write_parquet(table: pa.Table, file: BinaryIO) -> None:
    """``table`` as Parquet with page checksums and, in its metadata, the digest of its values
    as a reader gets them back (computed from a first write read back, so that what Parquet
    changes on the way, a list's item name or a null's slot, is what is hashed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, write_page_checksum=True)
    read_back = pq.ParquetFile(pa.BufferReader(buf.getvalue()))
    digest = table_digest(read_back.read(use_pandas_metadata=True, use_threads=False))
    metadata = {**(table.schema.metadata or {}), DIGEST_KEY: digest.encode()}
    pq.write_table(table.replace_schema_metadata(metadata), file, write_page_checksum=True)


def check_table_digest(table: pa.Table) -> None:
    """``DigestMismatch`` when a table read from a file that records a digest does not hash to
    it; a file without one (written by hand, or before digests) passes."""
    recorded = (table.schema.metadata or {}).get(DIGEST_KEY)
    if recorded is not None and table_digest(table).encode() != recorded:
        raise DigestMismatch("its values do not hash to the digest it records")


# --------------------------------------------------------------------------- run.json
def record_sha256(record: dict) -> str:
    """The SHA-256 of a run record's keys but ``record_sha256``, as JSON with sorted keys."""
    body = {k: v for k, v in record.items() if k != RECORD_SHA256}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def seal_run_record(record: dict, metrics: bytes | None) -> dict:
    """``record`` as it will be read back, with ``metrics_sha256`` (of the run folder's
    metrics.parquet as it lies now, ``metrics`` its bytes; None when there is none to read) and
    ``record_sha256``."""
    sealed = json.loads(json.dumps(record, default=str))
    sealed[METRICS_SHA256] = None if metrics is None else hashlib.sha256(metrics).hexdigest()
    sealed[RECORD_SHA256] = record_sha256(sealed)
    return sealed


def check_record_seal(record: dict) -> None:
    """``DigestMismatch`` when a sealed record does not hash to its ``record_sha256``, or has
    one of the two seal keys without the other; an unsealed record passes."""
    recorded = record.get(RECORD_SHA256)
    if recorded is None and METRICS_SHA256 not in record:
        return
    if not isinstance(recorded, str) or METRICS_SHA256 not in record:
        raise DigestMismatch(
            f"it has one of {RECORD_SHA256} and {METRICS_SHA256} without the other"
        )
    if record_sha256(record) != recorded:
        raise DigestMismatch(f"it does not hash to the {RECORD_SHA256} it records")


def recorded_metrics_sha256(rec: dict) -> str | None:
    """The SHA-256 a finished run's record gives its metrics.parquet (written after the last
    metrics, so it is theirs); None for a run still running or stopped, or a record written
    before records were sealed."""
    if rec.get("status") not in ("complete", "diverged"):
        return None
    value = rec.get(METRICS_SHA256)
    return value if isinstance(value, str) else None
