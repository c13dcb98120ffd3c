"""The results folder: a JSON manifest (full config, package version) and chunked `.npz`
files of per-trajectory records. Every write is atomic (write a temporary file in the
same folder, then `os.replace`), so a killed sweep leaves only complete files."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
CHUNKS = "chunks"


def atomic_write_bytes(path: Path, write) -> None:
    """Call `write(file)` on a temporary file next to `path`, then rename it to `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, lambda f: f.write(json.dumps(obj, indent=2, sort_keys=True).encode()))


def _check_writable(folder: Path) -> None:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"Output folder {str(folder)!r} is not writable (checked {str(probe)!r}); "
                         "choose another --out.")


class ResultsStore:
    """A results folder. `open(manifest, resume=, overwrite=)` checks it before any work."""

    def __init__(self, folder: str | Path, *, process_index: int = 0):
        self.folder = Path(folder)
        self.process_index = int(process_index)
        self._n_written = 0

    @property
    def chunk_dir(self) -> Path:
        return self.folder / CHUNKS

    def read_manifest(self) -> dict | None:
        p = self.folder / MANIFEST
        if not p.is_file():
            return None
        return json.loads(p.read_text())

    def open(self, manifest: dict, *, resume: bool = False, overwrite: bool = False) -> None:
        """Prepare the folder for `manifest` (a dict with a `"config"` entry).

        - empty or missing folder: create it;
        - same config: with `resume`, keep the finished chunks; without, refuse (it
            would mix runs) unless `overwrite`;
        - different config: refuse unless `overwrite`.
        """
        _check_writable(self.folder)
        old = self.read_manifest()
        if old is not None:
            same = old.get("config") == manifest["config"]
            if overwrite:
                self._clear()
            elif not same:
                diff = sorted(k for k in set(old.get("config", {})) | set(manifest["config"])
                              if old.get("config", {}).get(k) != manifest["config"].get(k))
                raise ValueError(
                    f"Results folder {str(self.folder)!r} holds a sweep with a different config "
                    f"(differs in {diff}). Choose another --out, or pass --overwrite to delete it.")
            elif not resume:
                raise ValueError(
                    f"Results folder {str(self.folder)!r} already holds this sweep. Pass --resume to "
                    "finish it, or --overwrite to start again.")
        elif self.folder.exists() and any(self.folder.iterdir()) and not overwrite:
            raise ValueError(f"Output folder {str(self.folder)!r} is not empty and holds no sweep "
                             "manifest; choose another --out or pass --overwrite.")
        elif overwrite and self.folder.exists():
            self._clear()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.chunk_dir.mkdir(exist_ok=True)
        if self.read_manifest() is None:
            atomic_write_json(self.folder / MANIFEST, manifest)
        mine = [int(f.stem.rsplit("-", 1)[1]) for f in self.chunk_dir.glob(f"chunk-p{self.process_index:03d}-*.npz")]
        self._n_written = max(mine, default=-1) + 1  # never reuse a name: resume appends

    def _clear(self) -> None:
        for p in self.folder.iterdir():
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()

    def write_chunk(self, records: dict[str, np.ndarray]) -> Path:
        """Atomically write one chunk of per-trajectory records."""
        path = self.chunk_dir / f"chunk-p{self.process_index:03d}-{self._n_written:06d}.npz"
        atomic_write_bytes(path, lambda f: np.savez(f, **records))
        self._n_written += 1
        return path

    def load_records(self) -> dict[str, np.ndarray] | None:
        """All finished records, sorted by index (duplicates, if any, dropped)."""
        files = sorted(self.chunk_dir.glob("chunk-*.npz")) if self.chunk_dir.is_dir() else []
        parts = []
        for f in files:
            with np.load(f) as z:
                parts.append({k: z[k] for k in z.files})
        if not parts:
            return None
        rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        _, first = np.unique(rec["index"], return_index=True)
        return {k: v[first] for k, v in rec.items()}

    def done_indices(self) -> np.ndarray:
        rec = self.load_records()
        return np.zeros(0, np.int64) if rec is None else rec["index"].astype(np.int64)
