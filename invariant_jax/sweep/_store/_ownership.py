"""Which files of a results folder the store can prove it wrote.

The store deletes (`--overwrite`) or moves (`quarantine/`) only what `inventory` lists as
its own. A file is the store's when it carries one of the store's names *and* the proof
that goes with that name:

- `manifest.json`: JSON whose `format` starts with `invariant_jax.sweep/`;
- `chunks/chunk-*.parquet`: the store's `invariant_jax` Parquet metadata (`.npz` chunks of
    format-1 folders: their name);
- `claims/block-NNNNNNN.json`, `claims/writer-<id>.json`: a claim or heartbeat record (the
    writer's `host`, `pid`, `id`; a heartbeat's `id` is the one in its name);
- `quarantine/<name>`: a sidecar `<name>.why.json` written when the store set the file
    aside, whose SHA-256 matches and which says the store had proven it wrote the file;
- outputs (`table.csv`, `summary.json`, figures): listed in the manifest with their SHA-256;
- the store's temporaries (`.<name>.<random>.tmp`, `.stale-*`), by name.

Anything else is *foreign*: every command refuses a folder holding a foreign file, naming
it, before any work. A chunk-named file that cannot be read is *damaged*: `--resume` sets it
aside (without the proof, so `--overwrite` never deletes it).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from ._files import sha256_file

MANIFEST = "manifest.json"
CHUNKS = "chunks"
CLAIMS = "claims"
QUARANTINE = "quarantine"
FORMAT_PREFIX = "invariant_jax.sweep/"
SIDECAR = ".why.json"
SIDECAR_KEY = "invariant_jax_quarantine"
_BLOCK = re.compile(r"block-\d{7}\.json")
_WRITER = re.compile(r"writer-([0-9a-f]+)\.json")
_CLAIM_TMP = re.compile(r"\.(block-\d{7}\..+\.tmp|writer-[0-9a-f]+\.json\..+\.tmp|stale-\d{7}\..+)")
_CHUNK = re.compile(r"chunk-.+\.(parquet|npz)")
_CHUNK_TMP = re.compile(r"\.chunk-.+\.tmp")


@dataclasses.dataclass
class Inventory:
    """What a results folder holds, as far as the store can tell.

    - `manifest`: the store's manifest (`None` if missing, damaged or foreign);
    - `manifest_problem`: why there is no usable manifest (`None` when there is one);
    - `owned`: files the store can prove it wrote (what `--overwrite` may delete);
    - `foreign`: relative paths (with the reason) the store did not write;
    - `damaged`: chunk-named files that cannot be read (neither proven nor foreign);
    - `chunk_hashes`: config hash of every readable Parquet chunk, by file name.
    """

    manifest: dict | None = None
    manifest_problem: str | None = None
    owned: list = dataclasses.field(default_factory=list)
    foreign: list = dataclasses.field(default_factory=list)
    damaged: list = dataclasses.field(default_factory=list)
    chunk_hashes: dict = dataclasses.field(default_factory=dict)


def _json(path: Path):
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def read_store_manifest(path: Path) -> tuple[dict | None, str | None, bool]:
    """(manifest, problem, foreign) of `path`: a readable store manifest, or why not, and
    whether it is someone else's file (readable, but not the store's format)."""
    if not path.exists() and not path.is_symlink():
        return None, f"{str(path)!r} is missing", False
    if path.is_symlink() or not path.is_file():
        return None, f"{str(path)!r} is not a file the store wrote", True
    try:
        man = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return None, f"{str(path)!r} is damaged ({type(e).__name__}: {' '.join(str(e).split())[:80]})", False
    if not isinstance(man, dict) or not str(man.get("format", "")).startswith(FORMAT_PREFIX):
        return None, f"{str(path)!r} was not written by this store (no '{FORMAT_PREFIX}' format entry)", True
    if not isinstance(man.get("config"), dict):
        return None, f"{str(path)!r} is damaged (no 'config' entry)", False
    return man, None, False


def chunk_meta(path: Path) -> tuple[dict | None, str]:
    """(metadata, "") of a store chunk; (None, "damaged: why") or (None, "foreign")."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except Exception as e:  # pyarrow raises several types for a damaged file
        return None, f"damaged: unreadable ({type(e).__name__})"
    if b"invariant_jax" not in md:
        return None, "foreign"
    try:
        meta = json.loads(md[b"invariant_jax"])
    except ValueError:
        return None, "damaged: unreadable metadata"
    return (meta, "") if isinstance(meta, dict) else (None, "foreign")


def _chunks(d: Path, inv: Inventory) -> None:
    for q in sorted(d.iterdir()):
        rel = f"{CHUNKS}/{q.name}"
        if q.is_symlink() or not q.is_file():
            inv.foreign.append(f"{rel} (not a file the store wrote)")
        elif _CHUNK_TMP.fullmatch(q.name) or (_CHUNK.fullmatch(q.name) and q.suffix == ".npz"):
            inv.owned.append(q)
        elif _CHUNK.fullmatch(q.name):
            meta, why = chunk_meta(q)
            if meta is not None:
                inv.owned.append(q)
                inv.chunk_hashes[q.name] = meta.get("config_hash")
            elif why == "foreign":
                inv.foreign.append(f"{rel} (a Parquet file without the store's metadata)")
            else:
                inv.damaged.append(q)
        else:
            inv.foreign.append(f"{rel} (not a name the store uses)")


def _claims(d: Path, inv: Inventory) -> None:
    for q in sorted(d.iterdir()):
        rel = f"{CLAIMS}/{q.name}"
        if q.is_symlink() or not q.is_file():
            inv.foreign.append(f"{rel} (not a file the store wrote)")
            continue
        if _CLAIM_TMP.fullmatch(q.name):
            inv.owned.append(q)
            continue
        rec = _json(q) if (_BLOCK.fullmatch(q.name) or _WRITER.fullmatch(q.name)) else None
        m = _WRITER.fullmatch(q.name)
        ok = isinstance(rec, dict) and {"host", "pid", "id"} <= set(rec) and (m is None or rec["id"] == m.group(1))
        if ok:
            inv.owned.append(q)
        else:
            inv.foreign.append(f"{rel} (not a claim or heartbeat the store wrote)")


def _quarantine(d: Path, inv: Inventory) -> None:
    names = {q.name for q in d.iterdir()}
    for q in sorted(d.iterdir()):
        rel = f"{QUARANTINE}/{q.name}"
        if q.is_symlink() or not q.is_file():
            inv.foreign.append(f"{rel} (not a file the store wrote)")
            continue
        if q.name.endswith(SIDECAR):
            side = _json(q)
            if isinstance(side, dict) and SIDECAR_KEY in side:
                inv.owned.append(q)
            else:
                inv.foreign.append(f"{rel} (not a record the store wrote)")
            continue
        side = _json(d / (q.name + SIDECAR)) if q.name + SIDECAR in names else None
        info = side.get(SIDECAR_KEY) if isinstance(side, dict) else None
        if isinstance(info, dict) and info.get("proven") and info.get("sha256") == sha256_file(q):
            inv.owned.append(q)
        elif isinstance(info, dict) and info.get("sha256") == sha256_file(q):
            inv.foreign.append(
                f"{rel} (set aside as unreadable; the store cannot prove it wrote it: delete it "
                "yourself if it is not yours)"
            )
        else:
            inv.foreign.append(f"{rel} (not a file the store set aside)")


def _outputs(folder: Path, man: dict | None, legacy: tuple) -> dict[str, str | None]:
    """Listed outputs -> their recorded SHA-256s (`None`: proven by name, older folders)."""
    if man is None:
        return {}
    hashes = man.get("output_sha256")
    outs: dict[str, str | None] = {str(o): None for o in man.get("outputs", [])}
    if not str(man.get("format", "")).endswith("/2"):
        outs.update({o: None for o in legacy})
    if isinstance(hashes, dict):  # listed before hashes were kept: proven by name, as then
        outs = {o: hashes.get(o) for o in outs}
    return outs


def _hash_ok(path: Path, recorded) -> bool:
    if recorded is None:
        return True
    recorded = [recorded] if isinstance(recorded, str) else list(recorded)
    return sha256_file(path) in recorded


def _output_file(folder: Path, rel: str, outs: dict, inv: Inventory) -> None:
    p = folder / rel
    parent = p.parent.name
    tmp = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", p.name)
    key = f"{parent}/{tmp.group(1)}" if tmp and p.parent != folder else tmp.group(1) if tmp else None
    if p.is_file() and not p.is_symlink() and rel in outs and _hash_ok(p, outs[rel]):
        inv.owned.append(p)
    elif p.is_file() and not p.is_symlink() and key in outs:
        inv.owned.append(p)  # the store's temporary of a listed output
    elif rel in outs:
        inv.foreign.append(f"{rel} (its content is not what the store wrote there)")
    else:
        inv.foreign.append(f"{rel}{'/' if p.is_dir() else ''} (not a file the store wrote)")


def inventory(folder: Path, legacy_outputs: tuple = ()) -> Inventory:
    """Classify every file under `folder` (see the module docstring)."""
    folder = Path(folder)
    inv = Inventory()
    man, inv.manifest_problem, foreign_manifest = read_store_manifest(folder / MANIFEST)
    inv.manifest = man
    outs = _outputs(folder, man, legacy_outputs)
    out_dirs = {str(Path(o).parent) for o in outs} - {"."}
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        name = p.name
        real_dir = p.is_dir() and not p.is_symlink()
        if name == MANIFEST:
            if man is not None:
                inv.owned.append(p)
            elif foreign_manifest:
                assert inv.manifest_problem is not None  # read_store_manifest says why it is foreign
                inv.foreign.append(f"{MANIFEST} ({inv.manifest_problem.split(' ', 1)[1]})")
        elif re.fullmatch(rf"\.{re.escape(MANIFEST)}\..+\.tmp", name):
            inv.owned.append(p)
        elif name == CHUNKS and real_dir:
            _chunks(p, inv)
        elif name == CLAIMS and real_dir:
            _claims(p, inv)
        elif name == QUARANTINE and real_dir:
            _quarantine(p, inv)
        elif name in out_dirs and real_dir:
            for q in sorted(p.iterdir()):
                _output_file(folder, f"{name}/{q.name}", outs, inv)
        else:
            _output_file(folder, name, outs, inv)
    return inv


def sidecar_record(path: Path, *, why: str, proven: bool, moved_from: str) -> dict:
    """The sidecar written beside a file set aside in `quarantine/`."""
    return {SIDECAR_KEY: {"sha256": sha256_file(path), "why": why, "proven": bool(proven), "from": moved_from}}
