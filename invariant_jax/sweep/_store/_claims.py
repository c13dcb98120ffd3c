"""Claims: how several writers (processes, hosts, job-array tasks) share one results
folder without computing the same block of initializations twice.

The indices `0..n_inits-1` are cut into blocks of `block_size`. A writer claims block `k`
by creating `claims/block-<k>.json` atomically (`os.link` of a complete temporary file,
which fails if the claim exists, also on NFS). Each writer keeps a heartbeat file
`claims/writer-<id>.json` whose modification time a background thread refreshes. A claim
is *stale*, and the next writer takes it over, when its writer's heartbeat file is gone,
older than `stale_seconds` (measured on the folder's own clock), or, on the same host,
when the writer's process no longer exists. When a block's records are on disk the claim
is rewritten with `"done": true`."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from ._files import FILE_MODE, atomic_write_json

CLAIMED, BUSY, DONE = "claimed", "busy", "done"


def new_writer() -> dict:
    """This writer's identity: host, process id and a random id."""
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname()) or "host"
    return {"host": host, "pid": os.getpid(), "id": secrets.token_hex(4)}


def pid_alive(pid: int) -> bool:
    """Whether a process with id `pid` runs on this host (`True` when that cannot be told)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


class Claims:
    """Claims of one writer on `folder/claims` (see the module docstring)."""

    def __init__(self, claim_dir: Path, writer: dict, *, stale_seconds: float = 120.0, heartbeat_seconds: float = 5.0):
        self.dir = Path(claim_dir)
        self.writer = dict(writer)
        self.stale_seconds = float(stale_seconds)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def heartbeat_path(self) -> Path:
        return self.dir / f"writer-{self.writer['id']}.json"

    def block_path(self, k: int) -> Path:
        return self.dir / f"block-{int(k):07d}.json"

    # -- heartbeat -------------------------------------------------------------
    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.heartbeat_path, {**self.writer, "started": time.time()})

        def beat():
            while not self._stop.wait(self.heartbeat_seconds):
                try:
                    os.utime(self.heartbeat_path)
                except OSError:
                    pass

        self._thread = threading.Thread(target=beat, name="invariant_jax-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.heartbeat_path.unlink()
        except OSError:
            pass

    def _now(self) -> float:
        """The folder's clock: touch our heartbeat and read its modification time."""
        try:
            os.utime(self.heartbeat_path)
            return self.heartbeat_path.stat().st_mtime
        except OSError:
            return time.time()

    # -- claims ----------------------------------------------------------------
    def owner_alive(self, owner: dict, now: float | None = None) -> bool:
        """Whether the writer `owner` (a claim's content) still works on its claims."""
        if owner.get("id") == self.writer["id"]:
            return True
        hb = self.dir / f"writer-{owner.get('id')}.json"
        try:
            mtime = hb.stat().st_mtime
        except OSError:
            return False
        if owner.get("host") == self.writer["host"] and not pid_alive(owner.get("pid", -1)):
            return False
        now = self._now() if now is None else now
        return now - mtime < self.stale_seconds

    def read(self, k: int) -> dict | None:
        try:
            return json.loads(self.block_path(k).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # unreadable: treated as stale

    def _create(self, k: int) -> bool:
        tmp = self.dir / f".block-{int(k):07d}.{self.writer['id']}.{secrets.token_hex(3)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:  # a full disk must not leave an empty temporary behind
            with os.fdopen(fd, "w") as f:
                json.dump({**self.writer, "done": False, "claimed": time.time()}, f)
            os.link(tmp, self.block_path(k))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def try_claim(self, k: int, *, force: bool = False) -> str:
        """Claim block `k`: `CLAIMED`, `BUSY` (a live writer holds it) or `DONE`. A stale
        claim (or, with `force`, a done one) is taken over."""
        if self._create(k):
            return CLAIMED
        owner = self.read(k)
        if owner is None:  # released meanwhile
            return CLAIMED if self._create(k) else BUSY
        if owner.get("done") and not force:
            return DONE
        if not force and owner and self.owner_alive(owner):
            return BUSY
        # take over: only one writer's rename of the old claim succeeds
        aside = self.dir / f".stale-{int(k):07d}.{self.writer['id']}.{secrets.token_hex(3)}"
        try:
            os.rename(self.block_path(k), aside)
        except FileNotFoundError:
            return BUSY
        os.unlink(aside)
        return CLAIMED if self._create(k) else BUSY

    def mark_done(self, k: int, chunks: list[str]) -> None:
        atomic_write_json(
            self.block_path(k), {**self.writer, "done": True, "chunks": list(chunks), "finished": time.time()}
        )

    def release(self, k: int) -> None:
        """Give back a block this writer claimed but did not finish."""
        owner = self.read(k)
        if owner and owner.get("id") == self.writer["id"] and not owner.get("done"):
            try:
                self.block_path(k).unlink()
            except OSError:
                pass
