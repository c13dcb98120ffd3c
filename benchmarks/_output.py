"""Where a benchmark writes its results, and the record of how they were made.

By default a script writes under `benchmarks/results/local/` (ignored by git), so running
it never overwrites the committed results in `benchmarks/results/`; pass `--out` with a
path there to replace them on purpose. Every JSON written through `write_json` starts
with `"command"` (the exact command line, with `PYTHONPATH`) and `"provenance"`: the git
commit and whether the tree was dirty, package versions, platform, devices, and the start
and end times of the run.

A script replaces only files it wrote (`written_by`: a JSON whose command runs the same
script, or a PNG that says so in its metadata (`save_figure`) or lies beside such a JSON),
and files committed unchanged to this repository (git keeps them). Any other file at
`--out` (or `--png`, or the `.png` beside an `--out` JSON) is refused when this module is
imported, before any work; one that appears during the run is kept, and `write_json` and
`save_figure` write beside it instead.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
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


def _script() -> str | None:
    """`benchmarks/<name>.py` of the running script (None when something else imported this)."""
    if not sys.argv or not sys.argv[0]:
        return None
    script = Path(sys.argv[0]).resolve()
    return f"benchmarks/{script.name}" if script.parent == HERE and script.suffix == ".py" else None


def _json_command(path: Path) -> str | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record.get("command") if isinstance(record, dict) and isinstance(record.get("command"), str) else None


def _png_description(path: Path) -> str | None:
    try:
        from PIL import Image

        with Image.open(path) as image:
            return getattr(image, "text", {}).get("Description")
    except Exception:  # noqa: BLE001 (not a PNG we can read: not ours)
        return None


def written_by(path: str | os.PathLike, script: str | None) -> bool:
    """Whether `path` is absent, or results that `script` (`benchmarks/<name>.py`) wrote:
    a JSON whose `"command"` runs it, or a PNG whose metadata `Description` does or whose
    same-named JSON is such a file."""
    path = Path(path)
    if not path.exists():
        return True
    if script is None or not path.is_file():
        return False
    runs = lambda cmd: cmd is not None and f" {script} " in f" {cmd} "  # noqa: E731
    if path.suffix == ".png":
        json_twin = path.with_suffix(".json")
        return runs(_png_description(path)) or (json_twin.is_file() and runs(_json_command(json_twin)))
    return runs(_json_command(path))


def _committed(path: Path) -> bool:
    """Whether `path` is tracked by this repository's git and unchanged (git keeps a copy)."""
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return False
    tracked = _git("ls-files", "--error-unmatch", str(rel)) is not None
    return tracked and _git("diff", "--quiet", "HEAD", "--", str(rel)) is not None


def replaceable(path: str | os.PathLike, script: str | None) -> bool:
    """Whether a run of `script` may replace `path`: absent, `written_by(path, script)`, or
    committed unchanged to this repository (so git keeps it)."""
    return written_by(path, script) or _committed(Path(path))


def _outputs_in(argv: list[str]) -> list[Path]:
    """The paths given to `--out` and `--png` in `argv`, and the `.png` beside an `--out` JSON."""
    paths = []
    for i, arg in enumerate(argv):
        for flag in ("--out", "--png"):
            if arg == flag and i + 1 < len(argv):
                paths.append(Path(argv[i + 1]))
            elif arg.startswith(flag + "="):
                paths.append(Path(arg.split("=", 1)[1]))
    return paths + [p.with_suffix(".png") for p in paths if p.suffix == ".json"]


def refuse_foreign_outputs(argv: list[str], script: str | None) -> None:
    """Exit (status 1, the reason on stderr) before any work if an output path in `argv`
    holds a file that a run of `script` may not replace (`replaceable`)."""
    foreign = [p for p in _outputs_in(argv) if not replaceable(p, script)]
    if foreign:
        names = ", ".join(str(p) for p in foreign)
        sys.exit(
            f"{script or 'this script'}: refusing to replace {names}: not results that this script wrote "
            "(no JSON whose command runs it, no PNG that records it) and not committed unchanged to git. "
            "Pass another --out, or move the file away yourself if it is yours to replace."
        )


def _beside(path: Path) -> Path:
    """Where results go when `path` holds a file that is not this script's: `path` with the
    first `.<k>` before its suffix that names no file or one this script wrote (so a script
    that writes after every round keeps writing to one file)."""
    k = 1
    while not written_by(candidate := path.with_name(f"{path.stem}.{k}{path.suffix}"), _script()):
        k += 1
    return candidate


def save_figure(fig, path: str | os.PathLike, **kw) -> Path:
    """`fig.savefig(path)` with the command line in the PNG's metadata (so a later run of
    the same script may replace it); beside a file it did not write, it writes to a free
    name instead, and says so."""
    path = Path(path)
    if not replaceable(path, _script()):
        kept, path = path, _beside(path)
        print(f"{kept} is not this script's; writing {path} instead", file=sys.stderr)
    fig.savefig(path, metadata={"Description": command()}, **kw)
    return path


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
    return env + shlex.join(["python", str(script), *sys.argv[1:]])  # (quoted where an argument needs it)


def _git(*args: str, root: Path | None = None) -> str | None:
    try:  # (`ROOT` read here, not bound as a default: tests point it elsewhere)
        out = subprocess.run(["git", *args], cwd=root or ROOT, capture_output=True, text=True, timeout=20)
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


def _cpu_model() -> str | None:
    """The CPU's model name (Linux's `/proc/cpuinfo`), or `platform.processor()`: compile
    and run times differ between the machines a session may get."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


DIRTY_DIFF_BYTES = 65536


def _dirty_diff(paths: list[str]) -> dict:
    """For a dirty tree, what the commit does not say: the changed paths, the sha256 of
    `git diff HEAD` over them, and the diff itself up to `DIRTY_DIFF_BYTES` (so the code
    that made a result is the commit plus this diff)."""
    if not paths:
        return {}
    targets = [p.split(" -> ")[-1] for p in paths]  # a rename: "old -> new"
    diff = _git("diff", "HEAD", "--", *targets) or ""
    diff += "\n" if diff else ""  # `_git` strips it; `git apply` needs it
    size = len(diff.encode())
    return {
        "dirty_paths": paths,
        "dirty_diff_sha256": hashlib.sha256(diff.encode()).hexdigest(),
        "dirty_diff": diff if size <= DIRTY_DIFF_BYTES else None,
        "dirty_diff_bytes": size,
    }


FIGURES = (".png", ".svg", ".pdf")


def _is_output(path: str) -> bool:
    """A path benchmarks write and no code reads: results, and figures (e.g. the ones in
    `docs/` that `topology_figure.py` draws)."""
    path = path.split(" -> ")[-1]
    return path.startswith("benchmarks/results/") or path.endswith(FIGURES)


def _checkout(root: Path) -> tuple[str | None, list[str] | None]:
    """`(commit, changed paths)` of the git checkout at `root`: tracked files other than
    results and figures (`_is_output`); `(None, None)` outside a checkout."""
    status = _git("status", "--porcelain", "--untracked-files=no", root=root)
    paths = None
    if status is not None:
        paths = [ln.split(None, 1)[-1] for ln in status.splitlines() if ln.strip()]
        paths = sorted(p for p in paths if not _is_output(p))
    return _git("rev-parse", "HEAD", root=root), paths


def checkout(root: str | os.PathLike) -> dict:
    """`{"commit", "dirty"}` of another checkout (e.g. the code a benchmark compares
    with), by `provenance`'s rule."""
    commit, paths = _checkout(Path(root))
    return {"commit": commit, "dirty": None if paths is None else bool(paths)}


def provenance() -> dict:
    """How this process made its results: commit, dirty flag (uncommitted changes to
    tracked files other than results and figures (`_is_output`), `null` outside a git
    checkout: a script that rewrites its committed JSON as it goes, or a figure in
    `docs/`, must not mark itself dirty) and, when
    dirty, the changed paths and their diff (`_dirty_diff`), versions,
    machine (with its load average when the results were written: other work on a
    shared machine slows timings) and times."""
    commit, paths = _checkout(ROOT)
    return {
        "commit": commit,
        "dirty": None if paths is None else bool(paths),
        **_dirty_diff(paths or []),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in PACKAGES},
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
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
    if not replaceable(path, _script()):  # (appeared during the run: keep it, and the results)
        kept, path = path, _beside(path)
        print(f"{kept} is not this script's; writing {path} instead", file=sys.stderr)
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
if _script() is not None:  # a benchmark run as a script
    refuse_foreign_outputs(sys.argv[1:], _script())


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
