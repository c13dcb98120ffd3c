"""Options shared by subcommands: choosing a graph, an activation and data."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings
from pathlib import Path

import jax
import jax.random as jr
from jax.experimental.compilation_cache import compilation_cache
from threadpoolctl import threadpool_limits

from ..datasets import teacher_student
from ..graph import DAG, example_dag, mlp, random_dag
from ..sweep import atomic_write_json, check_output_file, read_config_toml

BUILDERS = ("example", "mlp", "random")


def read_edge_list(path: str | Path) -> DAG:
    """Read an edge-list file: `DAG.from_file` (its docstring gives the format)."""
    return DAG.from_file(path)


def graph_from_args(args) -> DAG:
    name = args.graph
    if name == "example":
        return example_dag()
    if name == "mlp":
        try:
            widths = [int(w) for w in str(args.widths).split(",")]
        except ValueError:
            raise ValueError(f"--widths must be comma-separated integers; got {args.widths!r}.") from None
        return mlp(widths, bias=args.bias)
    if name == "random":
        return random_dag(args.n_inputs, args.n_hidden, args.n_outputs, args.edge_prob, args.graph_seed, bias=args.bias)
    if Path(name).suffix or Path(name).exists():
        return read_edge_list(name)
    raise ValueError(f"Unknown graph builder {name!r}; choose one of {list(BUILDERS)} or give an edge-list file.")


def teacher_data(graph: DAG, args, activation: str):
    X, Y, _ = teacher_student(graph, args.n_samples, key=jr.key(args.data_seed), activation=activation)
    return X, Y


def check_output_path(path, flag: str, *, overwrite: bool = False):
    """Check an output file flag (e.g. `--out`, `--json`) before any work; `None` passes.

    **Raises:** `ValueError` naming the path and the fix (an existing file without
    `--overwrite`, a directory, a missing or unwritable folder)."""
    return None if path is None else check_output_file(path, flag, overwrite=overwrite)


# ------------------------------------------------------------ one validation per option

INT32_MAX = 2**31 - 1
SEED_MAX = 2**63 - 1  # jax.random.key takes a signed 64-bit seed
# option (argparse dest / TOML key) -> (smallest, largest) integer
INTEGER_OPTIONS = {
    "seed": (0, SEED_MAX),
    "data_seed": (0, SEED_MAX),
    "graph_seed": (0, SEED_MAX),
    "split_seed": (0, SEED_MAX),
    "n_inits": (1, INT32_MAX),
    "n_samples": (1, INT32_MAX),
    "n_inputs": (1, INT32_MAX),
    "n_hidden": (0, INT32_MAX),
    "n_outputs": (1, INT32_MAX),
    "slots": (1, INT32_MAX),
    "steps_per_call": (1, INT32_MAX),
    "max_steps": (1, INT32_MAX),
    "n_save": (1, INT32_MAX),
    "rows": (0, INT32_MAX),
    "epochs": (1, INT32_MAX),
    "batch_size": (1, INT32_MAX),
    "max_events": (1, INT32_MAX),
    "max_sliding": (0, INT32_MAX),
    "process_index": (0, INT32_MAX),
    "process_count": (1, INT32_MAX),
    "dim": (1, INT32_MAX),
    "trajectories": (0, 64),
}
# option -> (lower bound, lower bound included, upper bound, upper bound included)
FLOAT_OPTIONS = {
    "t1": (0.0, False, None, False),
    "rtol": (0.0, False, 1.0, False),
    "atol": (0.0, False, None, False),
    "scale": (0.0, False, None, False),
    "edge_prob": (0.0, True, 1.0, True),
    "weight_decay": (0.0, True, None, False),
    "grad_norm_tol": (0.0, False, None, False),
    "loss_floor": (0.0, True, None, False),
    "max_param_norm": (0.0, False, None, False),
    "event_tol": (0.0, False, None, False),
    "surface_tol": (0.0, False, None, False),
    "lr": (0.0, False, None, False),
    "strength": (0.0, True, None, False),
    "tol": (0.0, True, None, False),
    "test_fraction": (0.0, False, 1.0, False),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_option(name: str, value) -> None:
    """Validate one option by its name (`seed`, `rtol`, ...), the same way for every
    command and for TOML files. `None` (unset) passes; unknown names pass.

    **Raises:** `ValueError` (or `TypeError`) naming the option, the value and the range."""
    if value is None:
        return
    if name in INTEGER_OPTIONS:
        lo, hi = INTEGER_OPTIONS[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{_flag(name)} must be an integer in [{lo}, {hi}]; got {value!r}.")
        if not lo <= value <= hi:
            raise ValueError(f"{_flag(name)} must be an integer in [{lo}, {hi}]; got {value!r}.")
    elif name in FLOAT_OPTIONS:
        flo, lo_in, fhi, hi_in = FLOAT_OPTIONS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{_flag(name)} must be a number; got {value!r}.")
        ok = math.isfinite(value) and (value >= flo if lo_in else value > flo)
        ok = ok and (fhi is None or (value <= fhi if hi_in else value < fhi))
        if not ok:
            what = f"{'[' if lo_in else '('}{flo:g}, {'inf)' if fhi is None else f'{fhi:g}' + (']' if hi_in else ')')}"
            hint = " (a relative tolerance of 1 or more accepts any error)" if name == "rtol" else ""
            raise ValueError(f"{_flag(name)} must be a finite number in {what}{hint}; got {value!r}.")


def check_args(args) -> None:
    """`check_option` on every option of parsed arguments (run by `main` before any
    command, so `--seed -1` reads the same in `sweep`, `check` and `connectivity`)."""
    for name, value in sorted(vars(args).items()):
        check_option(name, value)


def read_config_file(path) -> dict:
    """The options of a TOML config file: `read_config_toml` (the one reader, shared with
    `SweepConfig.from_toml`; its docstring gives the rules). A deprecated form (flat option
    keys) is read, and its message printed to stderr for the person at the command line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        values = read_config_toml(path)
    for w in caught:
        if issubclass(w.category, DeprecationWarning):
            print(f"invariant-jax: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return values


def write_json(path, obj) -> Path:
    """Write `obj` to `path` as strict JSON (NaN as null), atomically (write, then rename),
    creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, obj, indent=1)
    return path


CACHE_ENV = "INVARIANT_JAX_CACHE_DIR"
NO_CACHE_ENV = "INVARIANT_JAX_NO_CACHE"


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread():
    """A context in which SciPy's and NumPy's BLAS/LAPACK run on one thread (threadpoolctl),
    unless the user set one of `BLAS_THREAD_VARIABLES`. The implicit solvers factor a
    matrix at every step through them; with every core busy (a sweep runs one JAX device
    per core), OpenBLAS's own threads wait on each other, and a warm Gauss4 kink-aware
    flow took 22 s instead of 0.7 s (median; `benchmarks/results/blas_threads.json`). The CLI
    owns its process, so it sets this; called from Python, the caller's limits come back
    on exit."""
    if any(os.environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def compilation_cache_dir() -> Path | None:
    """Where the CLI keeps JAX's persistent compilation cache: `$INVARIANT_JAX_CACHE_DIR`
    if set, else `$XDG_CACHE_HOME/invariant-jax/jax` (default `~/.cache/invariant-jax/jax`).
    `None` when `INVARIANT_JAX_NO_CACHE` is set to anything but `0` / empty (the opt-out)."""
    if os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return None
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "invariant-jax" / "jax"


def enable_compilation_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache in `compilation_cache_dir()`, so a
    repeated command loads its compiled programs instead of compiling them again. A
    cache folder the user already gave JAX (`JAX_COMPILATION_CACHE_DIR`) is kept. Returns
    the folder in use, or `None` (opted out, or the folder cannot be created)."""
    given = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # a flag jax's stub does not list
    if given:
        return Path(given)
    path = compilation_cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


_CACHE_OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


def compilation_cache_settings() -> dict:
    """JAX's persistent-compilation-cache options as they are now, for
    `restore_compilation_cache` (what `enable_compilation_cache` may change)."""
    return {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}


def restore_compilation_cache(settings: dict) -> None:
    """Put JAX's persistent-compilation-cache options back as `compilation_cache_settings()`
    returned them. If they had changed, the cache JAX opened meanwhile is dropped too
    (`reset_cache`; JAX opens it once per process), so later compiles in this process
    follow the restored options. `main` does this when it returns, so calling the CLI from
    Python leaves the caller's JAX as it was."""
    if compilation_cache_settings() == settings:
        return
    for name, value in settings.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()
