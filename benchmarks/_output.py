"""Where a benchmark writes its results, and the record of how they were made.

By default a script writes under `benchmarks/results/local/` (ignored by git), so running
it never overwrites the committed results in `benchmarks/results/`; pass `--out` with a
path there to replace them on purpose. Every JSON written through `write_json` starts
with `"command"` (the exact command line, with `PYTHONPATH`) and `"provenance"`: the git
commit and whether the tree was dirty, package versions, platform, devices, and the start
and end times of the run.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# One BLAS/LAPACK thread, as the CLI runs (`invariant_jax.cli._common.one_blas_thread`):
# the implicit solvers' LU factorizations otherwise start one OpenBLAS thread per core,
# which wait on each other when other work keeps the cores busy
# (benchmarks/results/blas_threads.json): the variable for libraries loaded later, and
# threadpoolctl for those the script loaded before importing this. A user's own
# OPENBLAS_NUM_THREADS wins. The provenance records each library's threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOCAL = HERE / "results" / "local"
STARTED = datetime.datetime.now(datetime.UTC)

# the packages whose versions decide a result (the runtime dependencies that compute)
PACKAGES = (
    "jax",
    "jaxlib",
    "diffrax",
    "equinox",
    "optax",
    "lineax",
    "optimistix",
    "numpy",
    "scipy",
    "networkx",
    "scikit-learn",
    "pyarrow",
)


def output_path(out: str | os.PathLike | None, name: str) -> Path:
    """`out` if given, else `benchmarks/results/local/<name>`; the parent folder is created."""
    path = Path(out) if out else LOCAL / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def command() -> str:
    """The command line that is running, as it would be typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    return env + " ".join(["python", str(script), *sys.argv[1:]])


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _devices() -> list[str] | None:
    """The JAX devices, only if the script already imported JAX (never imports it here)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        return [str(d) for d in jax.devices()]
    except Exception:  # noqa: BLE001 (a broken backend must not lose the results)
        return None


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads() -> dict:
    """Threads of each BLAS library loaded in this process (threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    return {Path(i["filepath"]).name: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def provenance() -> dict:
    """How this process made its results: commit, dirty flag (uncommitted changes to
    tracked files, `null` outside a git checkout), versions, machine (with its load
    average when the results were written: other work on a shared machine slows
    timings) and times."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": None if status is None else bool(status),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in PACKAGES},
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": _devices(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "blas_threads": _blas_threads(),
        # what child processes inherit (a parent that never loads BLAS lists no library above)
        "blas_thread_variables": {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES},
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "started": STARTED.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_json(path: str | os.PathLike, data: dict, **dumps) -> Path:
    """Write `{"command": ..., "provenance": ..., **data}` to `path` atomically (a
    temporary file, then a rename) and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dumps.setdefault("indent", 1)
    record = {"command": data.get("command", command()), "provenance": provenance(), **data}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, **dumps))
    os.replace(tmp, path)
    print(f"wrote {path}")
    return path


def _limit_blas_threads() -> None:
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=int(os.environ["OPENBLAS_NUM_THREADS"]), user_api="blas")
    except (ImportError, ValueError):  # no threadpoolctl, or a variable it cannot read
        pass


_limit_blas_threads()


class CompileCounter:
    """XLA compilations in this process, from JAX's monitoring events: `n` and `seconds`
    since it was made or last `reset()`. One per process (listeners cannot be removed)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        import jax

        self.reset()
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kw):
        if event == self.EVENT:
            self.n += 1
            self.seconds += duration

    def reset(self) -> None:
        self.n, self.seconds = 0, 0.0
