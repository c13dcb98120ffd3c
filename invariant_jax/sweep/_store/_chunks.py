"""Chunk files: per-trajectory records as Parquet (pyarrow), one row per trajectory.

Vectors (`theta0`, `theta_final`, `c0`) are fixed-size list columns, so pandas, polars
and DuckDB read a sweep's `chunks/` folder directly. The key-value metadata entry
`invariant_jax` holds the schema version, the sweep's config hash (and the config
itself, so a lost manifest can be rebuilt), the writer and a SHA-256 checksum of the
records. Old folders wrote `.npz` chunks; they are still read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ._files import atomic_write_bytes

SCHEMA_VERSION = 2
META_KEY = b"invariant_jax"


class DamagedChunk(Exception):
    """A chunk file that cannot be read or fails its checksum (`path`, `reason`)."""

    def __init__(self, path: Path, reason: str):
        reason = " ".join(str(reason).split())  # one line
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def checksum(records: dict[str, np.ndarray]) -> str:
    """SHA-256 over the records' names, dtypes, shapes and bytes, in sorted name order."""
    h = hashlib.sha256()
    for k in sorted(records):
        a = np.ascontiguousarray(records[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _column(a: np.ndarray):
    import pyarrow as pa

    a = np.ascontiguousarray(a)
    if a.ndim == 1:
        return pa.array(a)
    if a.ndim == 2:
        return pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[1])
    raise ValueError(f"records of rank > 2 are not supported; got shape {a.shape}.")


def write_chunk(path: Path, records: dict[str, np.ndarray], *, config_hash: str, config: dict, writer: dict) -> None:
    """Write `records` (dict of arrays, leading axis = trajectories) to the Parquet file
    `path` atomically, with the metadata described in the module docstring."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = {k: np.asarray(v) for k, v in records.items()}
    names = sorted(records)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "config_hash": config_hash,
        "config": config,
        "writer": writer,
        "checksum": checksum(records),
        "n_records": int(len(records["index"])),
        "dtypes": {k: records[k].dtype.str for k in names},
    }
    table = pa.table({k: _column(records[k]) for k in names})
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    atomic_write_bytes(path, lambda f: pq.write_table(table, f))


def read_meta(path: Path) -> dict:
    """The `invariant_jax` metadata of a Parquet chunk. **Raises:** `DamagedChunk`."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
        return json.loads(md[META_KEY])
    except KeyError:
        raise DamagedChunk(path, "no invariant_jax metadata (not written by this store)") from None
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise DamagedChunk(path, f"unreadable ({type(e).__name__}: {e})") from None


def read_chunk(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """(records, metadata) of a chunk, verified against its checksum.

    `.npz` chunks (schema 1) have no metadata: `({...}, {"schema_version": 1})`.

    **Raises:** `DamagedChunk` naming the file and what is wrong."""
    path = Path(path)
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                rec = {k: z[k] for k in z.files}
        except Exception as e:
            raise DamagedChunk(path, f"unreadable ({type(e).__name__}: {e})") from None
        _check_lengths(path, rec)
        return rec, {"schema_version": 1}
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = read_meta(path)
    try:
        table = pq.read_table(path)
        rec = {}
        for name in table.column_names:
            col = table.column(name).combine_chunks()
            dtype = np.dtype(meta["dtypes"][name])
            if pa.types.is_fixed_size_list(col.type):
                flat = col.flatten().to_numpy(zero_copy_only=False)
                rec[name] = flat.astype(dtype).reshape(len(col), col.type.list_size)
            else:
                rec[name] = col.to_numpy(zero_copy_only=False).astype(dtype)
    except Exception as e:
        raise DamagedChunk(path, f"unreadable ({type(e).__name__}: {e})") from None
    _check_lengths(path, rec)
    if checksum(rec) != meta.get("checksum"):
        raise DamagedChunk(path, "checksum mismatch (the records were altered or damaged)")
    return rec, meta


def read_indices(path: Path) -> np.ndarray:
    """Only the `index` column (cheap; not verified). **Raises:** `DamagedChunk`."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return np.asarray(z["index"], np.int64)
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=["index"]).column("index").to_numpy().astype(np.int64)
    except Exception as e:
        raise DamagedChunk(path, f"unreadable ({type(e).__name__}: {e})") from None


def _check_lengths(path: Path, rec: dict) -> None:
    if "index" not in rec:
        raise DamagedChunk(path, "no 'index' column")
    n = {len(v) for v in rec.values()}
    if len(n) != 1:
        raise DamagedChunk(path, f"columns of different lengths {sorted(n)}")
