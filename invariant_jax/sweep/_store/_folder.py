"""The results folder: `manifest.json`, `chunks/` (Parquet records), `claims/` (who works
on what), `quarantine/` (damaged files set aside) and the outputs listed in the manifest
(`table.csv`, `summary.json`, figures). The store deletes only files it wrote."""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from ._chunks import SCHEMA_VERSION, DamagedChunk, read_chunk, read_indices, read_meta, write_chunk
from ._claims import Claims, _pid_alive, new_writer
from ._files import atomic_write_json, check_output_folder

MANIFEST = "manifest.json"
CHUNKS = "chunks"
CLAIMS = "claims"
QUARANTINE = "quarantine"
FORMAT = "invariant_jax.sweep/2"
# what format-1 folders (npz chunks, before outputs were listed) wrote besides chunks
_LEGACY_OUTPUTS = ("table.csv", "summary.json", "figures/overview.png", "figures/drift_tol.png",
                   "figures/loss_by_connectivity.png", "figures/disconnected.png", "figures/rank.png",
                   "figures/steps.png")


def config_hash(config: dict) -> str:
    """SHA-256 (first 16 hex digits) of a config dict in canonical JSON."""
    text = json.dumps(json.loads(json.dumps(config)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _is_chunk(name: str) -> bool:
    return name.startswith("chunk-") and name.endswith((".parquet", ".npz"))


class ResultsStore:
    """A results folder. `open(manifest, resume=, overwrite=)` checks it before any work.

    **Arguments:**

    - `folder`: the results folder.
    - `writer`: this writer's identity (`host`, `pid`, `id`); default: a new one.
    """

    def __init__(self, folder: str | Path, *, writer: dict | None = None):
        self.folder = Path(folder)
        self.writer = new_writer() if writer is None else dict(writer)
        self.notes: list[str] = []  # what open/load did to the folder, in words
        self._n_written = 0
        self._cache: dict[str, tuple[dict, dict]] = {}  # chunk name -> (records, metadata)
        self._seen_indices: dict[str, np.ndarray] = {}
        self.manifest: dict | None = None

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
        """The manifest, `None` if there is none. **Raises:** `ValueError` naming a damaged one."""
        p = self.folder / MANIFEST
        if not p.is_file():
            return None
        try:
            man = json.loads(p.read_text())
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{str(p)!r} is damaged ({type(e).__name__}: {e}).") from None
        if not isinstance(man, dict) or not isinstance(man.get("config"), dict):
            raise ValueError(f"{str(p)!r} is damaged (no 'config' entry).")
        return man

    def _manifest_or_rebuild(self) -> tuple[dict | None, str | None]:
        """(manifest, None), or (manifest rebuilt from the chunks, why), or (None, why)."""
        try:
            man = self.read_manifest()
            if man is not None:
                return man, None
            why = f"{str(self.folder / MANIFEST)!r} is missing"
        except ValueError as e:
            why = str(e)
        for f in self.chunk_files():
            if f.suffix != ".parquet":
                continue
            try:
                meta = read_meta(f)
            except DamagedChunk:
                continue
            if isinstance(meta.get("config"), dict):
                return {"format": FORMAT, "config": meta["config"], "config_hash": meta.get("config_hash"),
                        "schema_version": SCHEMA_VERSION, "rebuilt_from": f.name, "outputs": []}, why
        return None, why

    def _write_manifest(self, man: dict) -> None:
        atomic_write_json(self.folder / MANIFEST, man)
        self.manifest = man

    def add_outputs(self, paths) -> None:
        """List files written into the folder (e.g. `table.csv`) in the manifest, so that
        `--overwrite` may delete them later."""
        man = self.read_manifest() or self.manifest
        rel = [str(Path(p).resolve().relative_to(self.folder.resolve())) for p in paths]
        outs = sorted(set(man.get("outputs", [])) | set(rel))
        if outs != man.get("outputs"):
            self._write_manifest({**man, "outputs": outs})

    # -- ownership -------------------------------------------------------------
    def _owned(self, man: dict | None) -> set[str]:
        outs = set(man.get("outputs", [])) if man else set()
        if man is not None and man.get("format") != FORMAT:
            outs |= set(_LEGACY_OUTPUTS)
        return outs

    def foreign_files(self, man: dict | None) -> list[str]:
        """Files and folders under `folder` the store did not write (relative paths)."""
        outs = self._owned(man)
        out_dirs = {str(Path(o).parent) for o in outs} - {"."}
        foreign = []
        for p in sorted(self.folder.iterdir()):
            name = p.name
            if name == MANIFEST or (name.startswith(f".{MANIFEST}.") and name.endswith(".tmp")):
                continue
            if name in (CLAIMS, QUARANTINE) and p.is_dir() and not p.is_symlink():
                continue  # entirely the store's
            if name == CHUNKS and p.is_dir() and not p.is_symlink():
                foreign += [f"{CHUNKS}/{q.name}" for q in sorted(p.iterdir())
                            if not (q.is_file() and (_is_chunk(q.name) or q.name.startswith(".chunk-")))]
                continue
            if name in out_dirs and p.is_dir() and not p.is_symlink():
                foreign += [f"{name}/{q.name}" for q in sorted(p.iterdir()) if f"{name}/{q.name}" not in outs]
                continue
            if name in outs and p.is_file():
                continue
            foreign.append(name + ("/" if p.is_dir() else ""))
        return foreign

    def _clear(self, man: dict | None) -> int:
        """Delete the files the store wrote (never anything else). Returns how many."""
        n = 0
        for sub in (CHUNKS, CLAIMS, QUARANTINE):
            d = self.folder / sub
            if d.is_dir() and not d.is_symlink():
                for q in d.iterdir():
                    if q.is_file() or q.is_symlink():
                        q.unlink()
                        n += 1
                d.rmdir()
        for o in self._owned(man):
            p = self.folder / o
            if p.is_file():
                p.unlink()
                n += 1
                if p.parent != self.folder and p.parent.is_dir() and not any(p.parent.iterdir()):
                    p.parent.rmdir()
        for p in self.folder.iterdir():
            if p.name == MANIFEST or (p.name.startswith(f".{MANIFEST}.") and p.name.endswith(".tmp")):
                p.unlink()
                n += 1
        return n

    # -- open ------------------------------------------------------------------
    def open(self, manifest: dict, *, resume: bool = False, overwrite: bool = False) -> None:
        """Prepare the folder for `manifest` (a dict with a `"config"` entry), before any work.

        - missing or empty folder: create it;
        - same config: with `resume`, keep the finished chunks (a lost or damaged
            manifest is rebuilt from them); without, refuse unless `overwrite`;
        - different config: refuse unless `overwrite`;
        - `overwrite` deletes only the files the store wrote; a folder holding anything
            else is refused.
        Damaged chunks are moved to `quarantine/` (named in `self.notes`); a chunk of
        another sweep is refused by name.
        """
        check_output_folder(self.folder)
        manifest = {**manifest, "format": FORMAT, "schema_version": SCHEMA_VERSION,
                    "config_hash": config_hash(manifest["config"])}
        manifest.setdefault("outputs", [])
        if self.folder.is_dir() and any(self.folder.iterdir()):
            old, why = self._manifest_or_rebuild()
            if old is None and why is not None and (self.folder / MANIFEST).exists():
                # a damaged manifest and no readable chunk to rebuild it from: set it aside
                self._quarantine(self.folder / MANIFEST, why)
                old, why = None, None
            foreign = self.foreign_files(old)
            if old is None and not foreign:
                pass  # only the store's own empty folders (another writer is creating it): join
            elif old is None:
                raise ValueError(
                    f"Output folder {str(self.folder)!r} holds files this store did not write "
                    f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}) and no sweep; "
                    "choose another --out (nothing was deleted).")
            elif overwrite:
                if foreign:
                    raise ValueError(
                        f"--overwrite refused: {str(self.folder)!r} also holds files this store did not write "
                        f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}). Move them away or "
                        "choose another --out (nothing was deleted).")
                busy = [f"{w.get('host')}:{w.get('pid')}" for w in self.writers() if w["alive"]]
                if busy:
                    raise ValueError(
                        f"--overwrite refused: writer(s) {', '.join(busy)} still work on {str(self.folder)!r} "
                        "(see `invariant-jax sweep --status`). Stop them first, or choose another --out.")
                n = self._clear(old)
                self.notes.append(f"--overwrite: deleted {n} files the store had written in {self.folder}")
            elif config_hash(old["config"]) != manifest["config_hash"]:
                raise ValueError(
                    f"Results folder {str(self.folder)!r} holds a sweep with a different config "
                    f"(differs in {_diff(old['config'], manifest['config'])}). Choose another --out, or pass "
                    "--overwrite to delete the files the store wrote there.")
            elif not resume:
                raise ValueError(
                    f"Results folder {str(self.folder)!r} already holds this sweep. Pass --resume to "
                    "finish it, or --overwrite to start again.")
            elif why is not None:
                self.notes.append(f"{why}: manifest rebuilt from the chunks (config from {old['rebuilt_from']})")
                if (self.folder / MANIFEST).exists():
                    self._quarantine(self.folder / MANIFEST, why)
                self._write_manifest({**manifest, "outputs": old.get("outputs", []),
                                      "rebuilt_from": old["rebuilt_from"]})
            elif old.get("format") != FORMAT or old.get("config_hash") != manifest["config_hash"]:
                self._write_manifest({**manifest, "outputs": sorted(set(old.get("outputs", []))
                                                                     | set(self._owned(old)))})
            else:
                self.manifest = old
        self.folder.mkdir(parents=True, exist_ok=True)
        self.chunk_dir.mkdir(exist_ok=True)
        if self.manifest is None:
            try:
                current = self.read_manifest()
            except ValueError:
                current = None
            if current is not None and config_hash(current["config"]) == manifest["config_hash"]:
                self.manifest = current  # another writer created it meanwhile
            else:
                self._write_manifest(manifest)
        self.scan(quarantine=True)

    # -- chunks ----------------------------------------------------------------
    def write_chunk(self, records: dict[str, np.ndarray]) -> Path:
        """Atomically write one chunk of per-trajectory records (name unique per writer)."""
        w = self.writer
        path = self.chunk_dir / f"chunk-{w['host']}-{w['pid']}-{w['id']}-{self._n_written:06d}.parquet"
        man = self.manifest
        write_chunk(path, records, config_hash=man["config_hash"], config=man["config"], writer=w)
        self._n_written += 1
        return path

    def _quarantine(self, path: Path, why: str) -> Path:
        self.quarantine_dir.mkdir(exist_ok=True)
        dest = self.quarantine_dir / path.name
        k = 1
        while dest.exists():
            dest = self.quarantine_dir / f"{path.name}.{k}"
            k += 1
        try:
            os.replace(path, dest)
        except FileNotFoundError:  # another writer set it aside first
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

    def scan(self, *, quarantine: bool = False) -> dict[str, tuple[dict, dict]]:
        """Read and verify every chunk (cached by name). A damaged chunk is moved to
        `quarantine/` (with `quarantine=True`) or skipped with a warning; both name it.

        **Raises:** `ValueError` naming a chunk of another sweep (other config hash)."""
        expected = self._expected_hash()
        live = {}
        for f in self.chunk_files():
            if f.name in self._cache:
                live[f.name] = self._cache[f.name]
                continue
            try:
                rec, meta = read_chunk(f)
            except DamagedChunk as e:
                if quarantine:
                    self._quarantine(f, f"damaged chunk {str(f)!r}: {e.reason}")
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
                    f"differs in {_diff(meta.get('config') or {}, cfg)}). Move it out of {str(self.chunk_dir)!r}.")
            self._cache[f.name] = live[f.name] = (rec, meta)
        self._cache = dict(live)
        return live

    def load_records(self, *, quarantine: bool = False) -> dict[str, np.ndarray] | None:
        """All finished records, sorted by index, each index once.

        **Raises:** `ValueError` if two chunks hold different records for one index."""
        chunks = self.scan(quarantine=quarantine)
        if not chunks:
            return None
        names = list(chunks)
        keys = [k for k in chunks[names[0]][0] if all(k in chunks[n][0] for n in names)]
        rec = {k: np.concatenate([chunks[n][0][k] for n in names]) for k in keys}
        source = np.concatenate([np.full(len(chunks[n][0]["index"]), i) for i, n in enumerate(names)])
        order = np.lexsort((source, rec["index"]))
        idx = rec["index"][order]
        first = np.ones(len(idx), bool)
        first[1:] = idx[1:] != idx[:-1]
        for j in np.flatnonzero(~first):  # duplicates must be identical records
            a, b = order[np.searchsorted(idx, idx[j])], order[j]
            for k in keys:
                va, vb = rec[k][a], rec[k][b]
                if not np.array_equal(va, vb, equal_nan=np.issubdtype(np.asarray(va).dtype, np.inexact)):
                    raise ValueError(
                        f"Index {int(idx[j])} has different records in {str(self.chunk_dir / names[source[a]])!r} "
                        f"and {str(self.chunk_dir / names[source[b]])!r} (field {k!r}); results are "
                        "deterministic, so one of these files is wrong: move it out of the folder.")
        keep = order[first]
        return {k: v[keep] for k, v in rec.items()}

    def done_indices(self) -> np.ndarray:
        """Indices with a finished record (verified chunks)."""
        rec = self.load_records()
        return np.zeros(0, np.int64) if rec is None else rec["index"].astype(np.int64)

    def new_indices(self) -> np.ndarray:
        """Indices in chunk files not seen before by this method (cheap: not verified)."""
        out = []
        for f in self.chunk_files():
            if f.name in self._seen_indices:
                continue
            try:
                self._seen_indices[f.name] = idx = (self._cache[f.name][0]["index"] if f.name in self._cache
                                                    else read_indices(f))
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
            alive = age < stale_seconds and (w.get("host") != me["host"] or _pid_alive(w.get("pid", -1)))
            out.append({**w, "heartbeat_age_s": round(age, 1), "alive": alive})
        return out

    def status(self) -> dict:
        """Progress across all writers: records, writers, claims, quarantined files."""
        man, why = self._manifest_or_rebuild()
        if man is None:
            raise FileNotFoundError(f"{str(self.folder)!r} holds no sweep ({why}).")
        n_inits = int(man["config"].get("n_inits", 0))
        done, per_writer, damaged = set(), {}, []
        for f in self.chunk_files():
            try:
                idx = read_indices(f)
                w = read_meta(f).get("writer", {}) if f.suffix == ".parquet" else {}
            except DamagedChunk as e:
                damaged.append(f"{f.name}: {e.reason}")
                continue
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
            blocks["done" if c.get("done") else "live" if beats.get(c.get("id")) else "stale"] += 1
        quarantined = sorted(p.name for p in self.quarantine_dir.iterdir()) if self.quarantine_dir.is_dir() else []
        return {"folder": str(self.folder), "config_hash": config_hash(man["config"]), "n_inits": n_inits,
                "done": len(done), "remaining": n_inits - len(done), "records_by_writer": per_writer,
                "writers": writers, "blocks": blocks, "quarantined": quarantined, "damaged": damaged,
                "manifest": "ok" if why is None else why}
