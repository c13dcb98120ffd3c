"""Small file primitives of the results store: atomic writes with the user's file mode,
strict JSON (NaN and infinities as `null`), and output-path checks made before any work."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path


def _read_umask() -> int:
    try:  # Linux: read it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # what open() would give: a shared folder stays shared


def atomic_write_bytes(path: str | Path, write) -> None:
    """Call `write(file)` on a temporary file next to `path` (same folder, so the rename
    is atomic), fsync it, give it the mode `open()` would (0666 minus the umask), and
    rename it to `path`. A killed process leaves either the old file or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def strict_json(obj):
    """`obj` with every non-finite float replaced by `None` (JSON `null`), NumPy scalars
    and arrays turned into Python numbers and lists, tuples into lists."""
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # NumPy / JAX scalars and arrays
        return strict_json(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj


def dumps_strict(obj, **kwargs) -> str:
    """`json.dumps` of `strict_json(obj)`; refuses anything that is not valid JSON."""
    return json.dumps(strict_json(obj), allow_nan=False, **kwargs)


def atomic_write_json(path: str | Path, obj, *, indent: int = 2) -> None:
    """Write `obj` as strict JSON (NaN as null) atomically."""
    text = dumps_strict(obj, indent=indent, sort_keys=True).encode()
    atomic_write_bytes(path, lambda f: f.write(text))


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_output_file(path: str | Path, flag: str, *, overwrite: bool = False) -> Path:
    """Check, before any work, that the file `path` can be written: not empty, not a
    directory, not an existing file (unless `overwrite`), in an existing writable folder
    (nothing is created, not even the folder).

    **Raises:** `ValueError` naming the path and the fix."""
    if path is None or str(path).strip() == "":
        raise ValueError(f"{flag} is empty; give a file path.")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a directory; give a file path, e.g. {str(path / 'out.json')!r}.")
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise ValueError(
                f"{flag} {str(path)!r} already exists; choose another path, or pass --overwrite to replace it."
            )
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {str(path)!r} exists and is not writable; choose another path.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        probe = _nearest_existing(parent)
        if not probe.is_dir():
            raise ValueError(f"{flag} {str(path)!r}: {str(probe)!r} is a file, not a folder; choose another path.")
        raise ValueError(
            f"{flag} {str(path)!r}: the folder {str(parent)!r} does not exist; create it first "
            f"(mkdir -p {str(parent)!r}) or choose another path."
        )
    if not parent.is_dir():
        raise ValueError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a folder; choose another path.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"{flag} {str(path)!r} is not writable (no write permission in {str(parent)!r}); choose another path."
        )
    return path


def create_exclusive(path: str | Path, data: bytes) -> bool:
    """Create the file `path` holding `data` only if no file of that name exists, atomically
    (a complete temporary file is hard-linked to `path`, which fails if `path` exists, also
    on NFS). Returns whether this call created it; a temporary is never left behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_no_space(error: BaseException) -> bool:
    """Whether `error` is a full disk or exceeded quota (ENOSPC, EDQUOT)."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def check_output_folder(folder: str | Path, flag: str = "--out") -> Path:
    """Check, before any work, that `folder` may hold a results folder: not empty, not the
    current directory or one of its ancestors, not a file, and writable.

    **Raises:** `ValueError` naming the folder and the fix."""
    if folder is None or str(folder).strip() == "":
        raise ValueError(f"{flag} is empty; give a folder for the results, e.g. runs/sweep.")
    folder = Path(folder)
    resolved, cwd = folder.resolve(), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise ValueError(
            f"{flag} {str(folder)!r} is the current directory (or contains it); give a "
            "sub-folder for the results, e.g. runs/sweep."
        )
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {str(folder)!r} is a file, not a folder; choose another {flag}.")
    probe = _nearest_existing(folder)
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(
            f"Output folder {str(folder)!r} is not writable (checked {str(probe)!r}); choose another {flag}."
        )
    return folder
