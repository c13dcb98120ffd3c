"""The results folder: `manifest.json`, `chunks/` (Parquet records), `claims/` (who works
on what), `quarantine/` (damaged files set aside) and the outputs listed in the manifest
(`table.csv`, `summary.json`, figures). The store deletes or moves only files it can prove
it wrote (`_ownership`), and one folder holds one experiment, decided by the exclusive
creation of its manifest before any compile."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._chunks import SCHEMA_VERSION, DamagedChunk, read_chunk, read_indices, read_meta, write_chunk
from ._claims import Claims, new_writer, pid_alive
from ._files import atomic_write_bytes, atomic_write_json, check_output_folder, create_exclusive, dumps_strict
from ._ownership import (
    CHUNKS,
    CLAIMS,
    MANIFEST,
    QUARANTINE,
    SIDECAR,
    Inventory,
    chunk_meta,
    inventory,
    read_store_manifest,
    sidecar_record,
)

FORMAT = "invariant_jax.sweep/2"
# what format-1 folders (npz chunks, before outputs were listed) wrote besides chunks
_LEGACY_OUTPUTS = (
    "table.csv",
    "summary.json",
    "figures/overview.png",
    "figures/drift_tol.png",
    "figures/loss_by_connectivity.png",
    "figures/disconnected.png",
    "figures/rank.png",
    "figures/steps.png",
)


def config_hash(config: dict) -> str:
    """SHA-256 (first 16 hex digits) of a config dict in canonical JSON."""
    text = json.dumps(json.loads(json.dumps(config)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _is_chunk(name: str) -> bool:
    return name.startswith("chunk-") and name.endswith((".parquet", ".npz"))


CACHE_BYTES = 256 * 2**20
"""Bytes of records a store keeps in memory after verifying their chunks; beyond this it
keeps only their indices and reads the records again when it loads them, so the cache does
not grow with the number of records."""


class VerifiedChunk(NamedTuple):
    """A chunk that `ResultsStore.scan` verified: its indices, fields (`name -> (dtype,
    trailing shape)`; one dict shared by the chunks that have the same) and records
    (`None` when not kept in memory). A scan keeps these for every chunk, so they are
    small: no metadata."""

    indices: np.ndarray
    fields: dict
    records: dict | None


class _Layout(NamedTuple):
    """The verified chunks of a folder in sorted order (`ResultsStore._layout`): `chunks`
    by name, their `names` in order, `offsets` of each chunk's rows in `row_index` (their
    indices one after another), `dest` (each row's place in the sorted records, -1 for a
    duplicate) and `keys` (the fields every chunk has)."""

    chunks: dict[str, VerifiedChunk]
    names: list[str]
    offsets: np.ndarray
    row_index: np.ndarray
    dest: np.ndarray
    keys: list[str]


class ResultsStore:
    """A results folder. `open(manifest, resume=, overwrite=)` checks it before any work.

    **Arguments:**

    - `folder`: the results folder.
    - `writer`: this writer's identity (`host`, `pid`, `id`); default: a new one.
    - `cache_bytes`: bytes of verified records to keep in memory (default `CACHE_BYTES`;
        0 for one pass over the folder, as a summary makes).
    """

    def __init__(self, folder: str | Path, *, writer: dict | None = None, cache_bytes: int | None = None):
        self.folder = Path(folder)
        self.cache_bytes = cache_bytes
        self.writer = new_writer() if writer is None else dict(writer)
        self.notes: list[str] = []  # what open/load did to the folder, in words
        self._n_written = 0
        self._cache: dict[str, VerifiedChunk] = {}  # chunk name -> what its verification found
        self._fields: dict[str, dict] = {}  # one `VerifiedChunk.fields` per distinct set of fields
        self._seen_indices: dict[str, np.ndarray] = {}
        self.manifest: dict | None = None
        self.created = False  # whether this writer created the manifest

    # -- paths -----------------------------------------------------------------
    @property
    def chunk_dir(self) -> Path:
        return self.folder / CHUNKS

    @property
    def claim_dir(self) -> Path:
        return self.folder / CLAIMS

    @property
    def quarantine_dir(self) -> Path:
        return self.folder / QUARANTINE

    def chunk_files(self) -> list[Path]:
        if not self.chunk_dir.is_dir():
            return []
        return sorted(p for p in self.chunk_dir.iterdir() if _is_chunk(p.name) and p.is_file())

    # -- manifest --------------------------------------------------------------
    def read_manifest(self) -> dict | None:
        """The store's manifest, `None` if there is none.

        **Raises:** `ValueError` naming a damaged manifest, or one the store did not write."""
        man, problem, _ = read_store_manifest(self.folder / MANIFEST)
        if man is None and (self.folder / MANIFEST).exists():
            raise ValueError(f"{problem}.")
        return man

    def manifest_or_rebuild(self) -> tuple[dict | None, str | None]:
        """(manifest, None), or (manifest rebuilt from the chunks, why), or (None, why).
        A manifest whose config disagrees with every chunk (all of one other config) is
        replaced by the chunks' config."""
        man, why, _ = read_store_manifest(self.folder / MANIFEST)
        metas: dict[str | None, tuple[str, dict]] = {}
        for f in self.chunk_files():
            if f.suffix == ".parquet":
                meta, _ = chunk_meta(f)
                if meta is not None and isinstance(meta.get("config"), dict):
                    metas.setdefault(meta.get("config_hash"), (f.name, meta))
        if man is not None:
            if len(metas) == 1 and config_hash(man["config"]) not in metas:
                name, meta = next(iter(metas.values()))
                why = (
                    f"{str(self.folder / MANIFEST)!r} disagrees with every chunk (differs in "
                    f"{_diff(man['config'], meta['config'])})"
                )
                return self._rebuilt(meta, name, man), why
            return man, None
        for name, meta in metas.values():
            return self._rebuilt(meta, name, None), why
        return None, why

    @staticmethod
    def _rebuilt(meta: dict, name: str, old: dict | None) -> dict:
        keep = {k: old[k] for k in ("outputs", "output_sha256", "tag", "block_size") if old and k in old}
        return {
            "format": FORMAT,
            "outputs": [],
            **keep,
            "config": meta["config"],
            "config_hash": config_hash(meta["config"]),
            "schema_version": SCHEMA_VERSION,
            "rebuilt_from": name,
        }

    def _write_manifest(self, man: dict) -> None:
        atomic_write_json(self.folder / MANIFEST, man)
        self.manifest = man

    def _create_manifest(self, man: dict) -> None:
        """Create `manifest.json` exclusively: of two writers starting at once, one creates
        it; the other joins if its config is the same and is refused otherwise."""
        data = dumps_strict(man, indent=2, sort_keys=True).encode()
        if create_exclusive(self.folder / MANIFEST, data):
            self.manifest, self.created = man, True
            return
        cur, problem, _ = read_store_manifest(self.folder / MANIFEST)
        if cur is not None and config_hash(cur["config"]) == man["config_hash"]:
            self.manifest = cur  # another writer of this sweep created it meanwhile
            return
        differs = _diff(cur["config"], man["config"]) if cur is not None else problem
        raise ValueError(
            f"Another writer has just started a different sweep in {str(self.folder)!r} "
            f"(differs in {differs}); one folder holds one experiment. Choose another --out."
        )

    def write_output(self, path: str | Path, data: bytes | os.PathLike) -> Path:
        """Write an output file (e.g. `table.csv`) into the folder atomically, listed in the
        manifest with its SHA-256 first, so that `--overwrite` can prove it wrote it.
        `data`: its bytes, or a file to copy (read in blocks: a large table is never
        held in memory)."""
        path = Path(path)
        rel = str(path.resolve().relative_to(self.folder.resolve()))
        man = self.read_manifest() or self.manifest
        assert man is not None, "open the store first"
        if isinstance(data, bytes):
            digest, source = hashlib.sha256(data).hexdigest(), None
        else:
            source = Path(data)
            digest = _file_sha256(source)
        hashes = dict(man.get("output_sha256") or {})
        known = hashes.get(rel) or []
        hashes[rel] = [digest, *[h for h in known if h != digest]][:4]  # the file now, or before
        outs = sorted(set(man.get("outputs", [])) | {rel})
        if outs != man.get("outputs") or hashes != man.get("output_sha256"):
            self._write_manifest({**man, "outputs": outs, "output_sha256": hashes})
        path.parent.mkdir(exist_ok=True)
        if source is None:
            atomic_write_bytes(path, lambda f: f.write(data))
        else:
            with source.open("rb") as src:
                atomic_write_bytes(path, lambda f: shutil.copyfileobj(src, f, _BLOCK))
        return path

    # -- ownership -------------------------------------------------------------
    def inventory(self) -> Inventory:
        """What the folder holds: the store's files, foreign files, damaged chunks."""
        return inventory(self.folder, _LEGACY_OUTPUTS)

    def _refuse_foreign(self, inv: Inventory, doing: str) -> None:
        if inv.foreign:
            more = f" and {len(inv.foreign) - 8} more" if len(inv.foreign) > 8 else ""
            raise ValueError(
                f"{doing} refused: {str(self.folder)!r} holds files this store did not write: "
                f"{'; '.join(inv.foreign[:8])}{more}. The store never deletes or moves them: move them out "
                "of the folder, or choose another --out (nothing was changed)."
            )

    def _clear(self, inv: Inventory) -> str:
        """Delete the files the store can prove it wrote (`inv.owned`), then the store's
        folders left empty. Returns what was deleted, in words."""
        counts: dict[str, int] = {}
        for p in inv.owned:
            rel = p.relative_to(self.folder).parts
            kind = rel[0] if len(rel) > 1 and rel[0] in (CHUNKS, CLAIMS, QUARANTINE) else "outputs"
            kind = "manifest" if rel == (MANIFEST,) else kind
            try:
                p.unlink()
            except FileNotFoundError:
                continue
            counts[kind] = counts.get(kind, 0) + 1
        for d in sorted({p.parent for p in inv.owned if p.parent != self.folder}, reverse=True):
            try:
                d.rmdir()  # only if empty
            except OSError:
                pass
        n = sum(counts.values())
        parts = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        return f"deleted {n} file{'s' if n != 1 else ''} the store had written ({parts or 'none'})"

    def _overwrite(self, inv: Inventory, tag: str | None) -> None:
        unproven = [str(p.relative_to(self.folder)) for p in inv.damaged]
        if (self.folder / MANIFEST).exists() and inv.manifest is None:
            assert inv.manifest_problem is not None  # the inventory says why there is no manifest
            unproven.append(f"{MANIFEST} ({inv.manifest_problem.split(' ', 1)[1]})")
        if unproven:
            raise ValueError(
                f"--overwrite refused: the store cannot prove it wrote {', '.join(unproven)} in "
                f"{str(self.folder)!r} (unreadable). Move them away, or choose another --out (nothing was changed)."
            )
        if tag is not None and (inv.manifest is None or inv.manifest.get("tag") != tag) and inv.owned:
            what = "no sweep manifest" if inv.manifest is None else f"a sweep not written by {tag!r}"
            raise ValueError(
                f"{str(self.folder)!r} holds {what}; {tag!r} replaces only an earlier {tag!r}. "
                "Choose another --out (nothing was changed)."
            )
        busy = [f"{w.get('host')}:{w.get('pid')}" for w in self.writers() if w["alive"]]
        if busy:
            raise ValueError(
                f"--overwrite refused: writer(s) {', '.join(busy)} still work on {str(self.folder)!r} "
                "(see `invariant-jax sweep --status`). Stop them first, or choose another --out."
            )
        self.notes.append(f"--overwrite: {self._clear(inv)} in {self.folder}")

    def _rebuild(self, manifest: dict, inv: Inventory, why: str) -> None:
        """Replace an unusable or disagreeing manifest with one for `manifest`'s config,
        whose chunks are all in the folder (the old file is set aside, not deleted)."""
        first = sorted(inv.chunk_hashes)[0]
        old = inv.manifest or {}
        keep = {k: old[k] for k in ("outputs", "output_sha256") if k in old}
        if (self.folder / MANIFEST).exists():
            self._quarantine(self.folder / MANIFEST, why, proven=inv.manifest is not None)
        new = {**manifest, **keep, "rebuilt_from": first}
        self.notes.append(f"{why}: manifest rebuilt from the chunks (config from {first})")
        self._create_manifest(new)

    def _existing(self, inv: Inventory, manifest: dict, resume: bool) -> None:
        """Decide what to do with a folder that already holds a sweep (no --overwrite)."""
        requested, old = manifest["config_hash"], inv.manifest
        hashes = set(inv.chunk_hashes.values())
        if old is None:
            if not inv.chunk_hashes and not (self.folder / MANIFEST).exists():
                return  # only the store's empty folders or claims: create or join
            if not resume:
                raise ValueError(
                    f"Results folder {str(self.folder)!r} holds a sweep whose manifest is unusable "
                    f"({inv.manifest_problem}). Pass --resume to rebuild it from the chunks, or choose "
                    "another --out."
                )
            if not inv.chunk_hashes:
                raise ValueError(
                    f"{inv.manifest_problem}, and no readable chunk to rebuild it from: the store cannot "
                    f"prove it wrote {MANIFEST}. Move it away, or choose another --out (nothing was changed)."
                )
            if hashes != {requested}:
                raise self._other_sweep(inv, manifest)
            assert inv.manifest_problem is not None  # the inventory says why there is no manifest
            return self._rebuild(manifest, inv, inv.manifest_problem)
        if config_hash(old["config"]) == requested:
            if not resume:
                raise ValueError(
                    f"Results folder {str(self.folder)!r} already holds this sweep. Pass --resume to "
                    "finish it, or --overwrite to start again."
                )
            if old.get("format") != FORMAT or old.get("config_hash") != requested:
                self._write_manifest(
                    {
                        **manifest,
                        "outputs": sorted(
                            set(old.get("outputs", [])) | set(_LEGACY_OUTPUTS if old.get("format") != FORMAT else ())
                        ),
                        **({"output_sha256": old["output_sha256"]} if "output_sha256" in old else {}),
                    }
                )
            else:
                self.manifest = old
            return
        if resume and hashes == {requested}:  # the chunks are this sweep's: the manifest is wrong
            return self._rebuild(
                manifest,
                inv,
                f"{str(self.folder / MANIFEST)!r} disagrees with its chunks "
                f"(differs in {_diff(old['config'], manifest['config'])})",
            )
        raise self._other_sweep(inv, manifest)

    def _other_sweep(self, inv: Inventory, manifest: dict) -> ValueError:
        by_hash: dict = {}
        for name, h in sorted(inv.chunk_hashes.items()):
            by_hash.setdefault(h, []).append(name)
        old = inv.manifest
        if len(by_hash) > 1:
            listing = "; ".join(f"{h}: {', '.join(v[:3])}{' ...' if len(v) > 3 else ''}" for h, v in by_hash.items())
            return ValueError(
                f"Results folder {str(self.folder)!r} mixes chunks of {len(by_hash)} sweeps ({listing}); "
                f"this sweep's config hash is {manifest['config_hash']}. Move the other sweep's chunks "
                "to their own folder."
            )
        cfg = old["config"] if old is not None else None
        if cfg is None and by_hash:
            meta, _ = chunk_meta(self.chunk_dir / next(iter(by_hash.values()))[0])
            cfg = (meta or {}).get("config") or {}
        return ValueError(
            f"Results folder {str(self.folder)!r} holds a sweep with a different config (differs in "
            f"{_diff(cfg or {}, manifest['config'])}). Choose another --out, or pass --overwrite (without "
            "--resume) to delete the files the store wrote there."
        )

    # -- open ------------------------------------------------------------------
    def open(self, manifest: dict, *, resume: bool = False, overwrite: bool = False, tag: str | None = None) -> None:
        """Prepare the folder for `manifest` (a dict with a `"config"` entry), before any work.

        - a file the store did not write anywhere in the folder (see `inventory`): refused,
            named, nothing changed;
        - missing or empty folder: the manifest is created exclusively, so that of two
            writers starting at once with different configs one is refused;
        - same config: with `resume`, keep the finished chunks (a lost, damaged or
            disagreeing manifest is rebuilt from them); without, refuse unless `overwrite`;
        - different config: refuse unless `overwrite`;
        - `overwrite` (never with `resume`) deletes only the files the store can prove it
            wrote; with `tag`, only a sweep opened with the same tag is replaced.
        Damaged chunks are moved to `quarantine/` (named in `self.notes`); a chunk of
        another sweep is refused by name.
        """
        if resume and overwrite:
            raise ValueError(
                "--resume and --overwrite contradict each other: --resume keeps the finished "
                "records, --overwrite deletes them. Pass one of them."
            )
        check_output_folder(self.folder)
        manifest = {
            **manifest,
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "config_hash": config_hash(manifest["config"]),
            "output_sha256": {},
        }
        manifest.setdefault("outputs", [])
        if tag is not None:
            manifest["tag"] = str(tag)
        if self.folder.is_dir() and any(self.folder.iterdir()):
            inv = self.inventory()
            self._refuse_foreign(inv, "--overwrite" if overwrite else "--resume" if resume else "The sweep")
            if overwrite:
                self._overwrite(inv, tag)
            else:
                self._existing(inv, manifest, resume)
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.manifest is None:
            self._create_manifest(manifest)
        self.chunk_dir.mkdir(exist_ok=True)
        self.scan(quarantine=True)

    def discard_if_unused(self) -> bool:
        """Undo `open` when this writer created the sweep and nothing was computed (an
        error before the first record): delete the manifest it created and the store's
        empty folders, so the corrected command starts afresh. Returns whether it did."""
        if not self.created or self.chunk_files() or self.writers():
            return False
        inv = self.inventory()
        if (
            inv.foreign
            or inv.damaged
            or inv.manifest is None
            or inv.manifest.get("config_hash") != (self.manifest or {}).get("config_hash")
        ):
            return False
        self._clear(inv)
        for d in (self.chunk_dir, self.claim_dir, self.folder):
            try:
                d.rmdir()
            except OSError:
                pass
        return True

    # -- chunks ----------------------------------------------------------------
    def write_chunk(self, records: dict[str, np.ndarray]) -> Path:
        """Atomically write one chunk of per-trajectory records (name unique per writer).
        Its indices count as seen by `new_indices` (this writer knows them)."""
        w = self.writer
        path = self.chunk_dir / f"chunk-{w['host']}-{w['pid']}-{w['id']}-{self._n_written:06d}.parquet"
        man = self.manifest
        assert man is not None, "open the store first"
        n = len(records["index"])  # a column, so pandas / DuckDB can keep to one experiment
        records = {**records, "config_hash": np.full(n, man["config_hash"], dtype=f"<U{len(man['config_hash'])}")}
        write_chunk(path, records, config_hash=man["config_hash"], config=man["config"], writer=w)
        self._seen_indices[path.name] = np.asarray(records["index"])
        self._n_written += 1
        return path

    def _quarantine(self, path: Path, why: str, *, proven: bool) -> Path:
        """Move `path` into `quarantine/` with a sidecar `<name>.why.json` (its SHA-256, why,
        and whether the store had proven it wrote it: only then may `--overwrite` delete it)."""
        self.quarantine_dir.mkdir(exist_ok=True)
        dest = self.quarantine_dir / path.name
        k = 1
        while dest.exists() or (self.quarantine_dir / (dest.name + SIDECAR)).exists():
            dest = self.quarantine_dir / f"{path.name}.{k}"
            k += 1
        try:
            record = sidecar_record(path, why=why, proven=proven, moved_from=str(path.relative_to(self.folder)))
            atomic_write_json(self.quarantine_dir / (dest.name + SIDECAR), record)
            os.replace(path, dest)
        except FileNotFoundError:  # another writer set it aside first
            (self.quarantine_dir / (dest.name + SIDECAR)).unlink(missing_ok=True)
            self.notes.append(f"{why}; already moved to {self.quarantine_dir} by another writer")
            return dest
        self.notes.append(f"{why}; moved to {dest}")
        return dest

    def _expected_hash(self) -> str | None:
        man = self.manifest
        if man is None:
            try:
                man = self.read_manifest()
            except ValueError:
                man = None
        return None if man is None else config_hash(man["config"])

    def scan(self, *, quarantine: bool = False) -> dict[str, VerifiedChunk]:
        """Read and verify every chunk (cached by name; their records up to `cache_bytes`).
        A damaged chunk is moved to `quarantine/` (with `quarantine=True`) or skipped with a
        warning; both name it.

        **Raises:** `ValueError` naming a chunk of another sweep (other config hash)."""
        return {name: chunk for name, chunk, _ in self._scan_each(quarantine)}

    def _scan_each(self, quarantine: bool = False) -> Iterator[tuple[str, VerifiedChunk, dict | None]]:
        """`scan` a chunk at a time: `(name, chunk, records)`, with the records it has just
        read and verified (`None` for a chunk verified before)."""
        expected = self._expected_hash()
        live: dict[str, VerifiedChunk] = {}
        kept = 0  # bytes of records kept in memory
        for f in self.chunk_files():
            if f.name in self._cache:
                live[f.name] = c = self._cache[f.name]
                kept += 0 if c.records is None else _nbytes(c.records)
                yield f.name, c, None
                continue
            try:
                rec, meta = read_chunk(f)
            except DamagedChunk as e:
                if quarantine:
                    proven = f.suffix == ".parquet" and chunk_meta(f)[0] is not None
                    self._quarantine(f, f"damaged chunk {str(f)!r}: {e.reason}", proven=proven)
                else:
                    msg = f"damaged chunk {str(f)!r} skipped: {e.reason}; `--resume` sets it aside and recomputes it"
                    self.notes.append(msg)
                    warnings.warn(msg, stacklevel=3)
                continue
            h = meta.get("config_hash")
            if meta.get("schema_version", 1) > 1 and expected is not None and h != expected:
                cfg = (self.manifest or self.read_manifest() or {}).get("config", {})
                raise ValueError(
                    f"Chunk {str(f)!r} belongs to another sweep (config hash {h}, this folder's is {expected}; "
                    f"differs in {_diff(meta.get('config') or {}, cfg)}). Move it out of {str(self.chunk_dir)!r}."
                )
            keep = kept + _nbytes(rec) <= (CACHE_BYTES if self.cache_bytes is None else self.cache_bytes)
            kept += _nbytes(rec) if keep else 0
            fields = {k: (v.dtype, v.shape[1:]) for k, v in rec.items()}
            fields = self._fields.setdefault(repr(fields), fields)
            self._cache[f.name] = live[f.name] = VerifiedChunk(
                indices=rec["index"], fields=fields, records=rec if keep else None
            )
            yield f.name, live[f.name], rec
        self._cache = dict(live)

    def _records(self, name: str, chunk: VerifiedChunk) -> dict[str, np.ndarray]:
        """The records of a verified chunk: kept in memory, or read (and verified) again."""
        if chunk.records is not None:
            return chunk.records
        try:
            return read_chunk(self.chunk_dir / name)[0]
        except DamagedChunk as e:
            raise ValueError(
                f"{str(self.chunk_dir / name)!r} changed while the sweep was being loaded ({e.reason}); "
                "rerun with --resume, which sets damaged chunks aside and recomputes them."
            ) from None

    def _layout(self, quarantine: bool = False) -> _Layout | None:
        """The verified chunks in sorted order, duplicates checked; `None` when there is
        no chunk.

        **Raises:** `ValueError` if two chunks hold different records for one index."""
        chunks = self.scan(quarantine=quarantine)
        if not chunks:
            return None
        names = list(chunks)
        sizes = [len(chunks[n].indices) for n in names]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        source = np.repeat(np.arange(len(names)), sizes)
        index = np.concatenate([chunks[n].indices for n in names])
        order = np.lexsort((source, index))
        idx = index[order]
        first = np.ones(len(idx), bool)
        first[1:] = idx[1:] != idx[:-1]
        keys = _common_fields(chunks)
        recent: dict[int, dict] = {}  # the last two chunks read for the duplicates

        def records_of(i: int) -> dict[str, np.ndarray]:
            if i not in recent:
                while len(recent) >= 2:
                    recent.pop(next(iter(recent)))
                recent[i] = self._records(names[i], chunks[names[i]])
            return recent[i]

        for j in np.flatnonzero(~first):  # duplicates must be identical records
            a, b = order[np.searchsorted(idx, idx[j])], order[j]
            ra, rb = records_of(source[a]), records_of(source[b])
            for k in keys:
                va, vb = ra[k][a - offsets[source[a]]], rb[k][b - offsets[source[b]]]
                if not np.array_equal(va, vb, equal_nan=np.issubdtype(np.asarray(va).dtype, np.inexact)):
                    raise ValueError(
                        f"Index {int(idx[j])} has different records in {str(self.chunk_dir / names[source[a]])!r} "
                        f"and {str(self.chunk_dir / names[source[b]])!r} (field {k!r}); results are "
                        "deterministic, so one of these files is wrong: move it out of the folder."
                    )
        dest = np.full(len(index), -1)
        dest[order[first]] = np.arange(int(first.sum()))
        return _Layout(chunks, names, offsets, index, dest, keys)

    def load_records(self, *, quarantine: bool = False, keys=None, indices=None) -> dict[str, np.ndarray] | None:
        """The finished records, sorted by index, each index once, built chunk by chunk
        into the sorted arrays (one copy of the records in memory).

        **Arguments:**

        - `quarantine`: move damaged chunks to `quarantine/` (else skip them, warning).
        - `keys`: only these fields (`index` is always given); default: every field.
        - `indices`: only the records of these initialization indices; default: all.

        **Raises:** `ValueError` if two chunks hold different records for one index, or a
        key no chunk has."""
        layout = self._layout(quarantine)
        if layout is None:
            return None
        chunks, names, offsets, row_index, dest, fields = layout
        if keys is not None:
            unknown = sorted(set(keys) - set(fields))
            if unknown:
                raise ValueError(f"No field {unknown} in the chunks of {str(self.folder)!r}; they have {fields}.")
            fields = ["index", *(k for k in fields if k in set(keys) - {"index"})]
        if indices is not None:  # keep only the wanted rows, in their sorted order
            wanted = (dest >= 0) & np.isin(row_index, np.asarray(indices))
            kept_dest = dest[wanted]
            dest = np.full(len(dest), -1)
            dest[wanted] = np.argsort(np.argsort(kept_dest))
        n = int(np.sum(dest >= 0))
        out = {
            k: np.empty((n,) + chunks[names[0]].fields[k][1], np.result_type(*[chunks[c].fields[k][0] for c in names]))
            for k in fields
        }
        for i, name in enumerate(names):
            d = dest[offsets[i] : offsets[i + 1]]
            kept = d >= 0
            if not kept.any():
                continue
            rec = self._records(name, chunks[name])
            for k in fields:
                out[k][d[kept]] = rec[k][kept]
        return out

    def iter_records(self) -> Iterator[dict[str, np.ndarray]]:
        """The finished records a chunk at a time, each index once (the record
        `load_records` keeps: its first, in chunk order), for statistics over sweeps too
        large to load. Holds one chunk's records at a time, and reads each chunk once (a
        chunk not verified before is verified by that read, as `scan` does). Chunks
        written by other versions may hold other fields. Unlike `load_records`, it does
        not compare an index's later records with its first."""
        seen = np.zeros(0, bool)
        for name, chunk, rec in self._scan_each():
            rec = self._records(name, chunk) if rec is None else rec
            idx = np.asarray(rec["index"], np.int64)
            if idx.size and idx.max() >= seen.size:  # (grown by doubling)
                seen = np.concatenate([seen, np.zeros(max(int(idx.max()) + 1 - seen.size, seen.size), bool)])
            first = np.sort(np.unique(idx, return_index=True)[1])
            fresh = first[~seen[idx[first]]]
            seen[idx[fresh]] = True
            if fresh.size:
                yield {k: v[fresh] for k, v in rec.items()}

    def iter_index_blocks(self, width: int, *, keys=None) -> Iterator[dict[str, np.ndarray]]:
        """The finished records in blocks of `width` consecutive indices, sorted by index,
        each index once (as `load_records`): a table written in index order holds one
        block at a time. A chunk is read for every block its indices reach into."""
        chunks = self.scan()
        fields = _common_fields(chunks, keys)
        spans = {n: (int(c.indices.min()), int(c.indices.max())) for n, c in chunks.items() if len(c.indices)}
        top = max((hi + 1 for _, hi in spans.values()), default=0)
        for a in range(0, top, width):
            parts = []
            for name, (lo, hi) in spans.items():
                if lo < a + width and hi >= a:
                    rec = self._records(name, chunks[name])
                    idx = np.asarray(rec["index"], np.int64)
                    take = (idx >= a) & (idx < a + width)
                    parts.append({k: rec[k][take] for k in fields})
            if parts:
                both = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
                first = np.unique(both["index"], return_index=True)[1]  # (sorted by index)
                if first.size:
                    yield {k: v[first] for k, v in both.items()}

    def done_indices(self) -> np.ndarray:
        """Indices with a finished record, sorted (verified chunks; different records for
        one index are refused, as in `load_records`), without loading the records."""
        layout = self._layout()
        if layout is None:
            return np.zeros(0, np.int64)
        return np.sort(layout.row_index[layout.dest >= 0].astype(np.int64))

    def new_indices(self) -> np.ndarray:
        """Indices in chunk files not seen before by this method (cheap: not verified).
        One listing of `chunks/`, whose names seen before cost a set lookup each: a
        writer calls this after each claim, so a stat or sort of every chunk per call
        would grow with the square of the sweep."""
        try:
            with os.scandir(self.chunk_dir) as entries:
                fresh = sorted(
                    e.name for e in entries if e.name not in self._seen_indices and _is_chunk(e.name) and e.is_file()
                )
        except (FileNotFoundError, NotADirectoryError):
            return np.zeros(0, np.int64)
        out = []
        for f in (self.chunk_dir / name for name in fresh):
            try:
                self._seen_indices[f.name] = idx = (
                    self._cache[f.name].indices if f.name in self._cache else read_indices(f)
                )
            except DamagedChunk:
                continue
            out.append(idx)
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)

    def claims(self, **kw) -> Claims:
        return Claims(self.claim_dir, self.writer, **kw)

    # -- status ----------------------------------------------------------------
    def writers(self, stale_seconds: float = 120.0) -> list[dict]:
        """The writers with a heartbeat file: identity, `heartbeat_age_s` and `alive`
        (heartbeat younger than `stale_seconds` and, on this host, a running process)."""
        if not self.claim_dir.is_dir():
            return []
        me = new_writer()
        now = time.time()
        out = []
        for p in sorted(self.claim_dir.glob("writer-*.json")):
            try:
                w = json.loads(p.read_text())
                age = now - p.stat().st_mtime
            except (OSError, ValueError):
                continue
            alive = age < stale_seconds and (w.get("host") != me["host"] or pid_alive(w.get("pid", -1)))
            out.append({**w, "heartbeat_age_s": round(age, 1), "alive": alive})
        return out

    def lost_chunks(self) -> list[str]:
        """Chunks that a finished claim lists but that are neither in `chunks/` nor set
        aside in `quarantine/` (deleted or moved away by hand)."""
        if not self.claim_dir.is_dir():
            return []
        listed: set[str] = set()
        for p in self.claim_dir.glob("block-*.json"):
            try:
                c = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(c, dict) and c.get("done"):
                listed.update(str(n) for n in c.get("chunks") or [])
        present = {p.name for p in self.chunk_files()}
        aside = (
            {p.name.split(".parquet")[0] + ".parquet" for p in self.quarantine_dir.glob("chunk-*")}
            if self.quarantine_dir.is_dir()
            else set()
        )
        return sorted(listed - present - aside)

    def status(self) -> dict:
        """Progress across all writers: records, missing indices and lost chunks, chunks of
        another sweep, writers, claims, quarantined, damaged and foreign files."""
        man, why = self.manifest_or_rebuild()
        if man is None:
            raise FileNotFoundError(f"{str(self.folder)!r} holds no sweep ({why}).")
        n_inits = int(man["config"].get("n_inits", 0))
        expected = config_hash(man["config"])
        done: set[int] = set()
        per_writer: dict[str, int] = {}
        damaged: list[str] = []
        other: list[str] = []
        for f in self.chunk_files():
            try:
                idx = read_indices(f)
                meta = read_meta(f) if f.suffix == ".parquet" else {}
            except DamagedChunk as e:
                damaged.append(f"{f.name}: {e.reason}")
                continue
            if meta.get("config_hash", expected) != expected:
                other.append(f"{f.name} (config hash {meta.get('config_hash')})")
                continue
            w = meta.get("writer", {})
            done.update(int(i) for i in idx)
            key = f"{w.get('host', '?')}:{w.get('pid', '?')}:{w.get('id', 'npz')}"
            per_writer[key] = per_writer.get(key, 0) + len(idx)
        writers = self.writers()
        beats = {w.get("id"): w["alive"] for w in writers}
        blocks = {"done": 0, "live": 0, "stale": 0}
        for p in sorted(self.claim_dir.glob("block-*.json")) if self.claim_dir.is_dir() else []:
            try:
                c = json.loads(p.read_text())
            except (OSError, ValueError):
                c = {}
            c = c if isinstance(c, dict) else {}
            blocks["done" if c.get("done") else "live" if beats.get(c.get("id")) else "stale"] += 1
        quarantined = (
            sorted(p.name for p in self.quarantine_dir.iterdir() if not p.name.endswith(SIDECAR))
            if self.quarantine_dir.is_dir()
            else []
        )
        done &= set(range(n_inits))
        missing = sorted(set(range(n_inits)) - done)
        return {
            "folder": str(self.folder),
            "config_hash": expected,
            "n_inits": n_inits,
            "done": len(done),
            "remaining": n_inits - len(done),
            "missing": missing,
            "lost_chunks": self.lost_chunks(),
            "other_sweep_chunks": other,
            "records_by_writer": per_writer,
            "writers": writers,
            "blocks": blocks,
            "quarantined": quarantined,
            "damaged": damaged,
            "foreign": self.inventory().foreign,
            "manifest": "ok" if why is None else why,
        }


def _common_fields(chunks: dict[str, VerifiedChunk], keys=None) -> list[str]:
    """The fields every chunk has (`keys` among them, and `index`), in the first chunk's order."""
    names = list(chunks)
    common = [k for k in chunks[names[0]].fields if all(k in chunks[n].fields for n in names)] if names else []
    return [k for k in common if keys is None or k == "index" or k in keys]


def _nbytes(records: dict[str, np.ndarray]) -> int:
    return sum(np.asarray(v).nbytes for v in records.values())


_BLOCK = 1 << 20  # bytes read at a time from an output file to copy


def _file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
