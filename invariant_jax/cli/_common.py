"""Options shared by subcommands: choosing a graph, an activation and data."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import jax
import jax.random as jr
from jax.experimental.compilation_cache import compilation_cache

from ..datasets import teacher_student
from ..graph import DAG, example_dag, mlp, random_dag
from ..sweep._store import atomic_write_json, check_output_file

BUILDERS = ("example", "mlp", "random")


def add_graph_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("graph")
    g.add_argument("--graph", default="example",
                   help="builder name (example, mlp, random) or an edge-list file (default: example)")
    g.add_argument("--widths", default="5,8,1", help="mlp widths, comma-separated (default: 5,8,1)")
    g.add_argument("--bias", action="store_true", help="add a bias (constant) node")
    g.add_argument("--n-inputs", type=int, default=3)
    g.add_argument("--n-hidden", type=int, default=8)
    g.add_argument("--n-outputs", type=int, default=1)
    g.add_argument("--edge-prob", type=float, default=0.4)
    g.add_argument("--graph-seed", type=int, default=0)


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
        return random_dag(args.n_inputs, args.n_hidden, args.n_outputs, args.edge_prob,
                          args.graph_seed, bias=args.bias)
    if Path(name).suffix or Path(name).exists():
        return read_edge_list(name)
    raise ValueError(f"Unknown graph builder {name!r}; choose one of {list(BUILDERS)} or give an edge-list file.")


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--n-samples", type=int, default=20, help="teacher-student samples (default: 20)")
    g.add_argument("--data-seed", type=int, default=1)


def teacher_data(graph: DAG, args, activation: str):
    X, Y, _ = teacher_student(graph, args.n_samples, key=jr.key(args.data_seed), activation=activation)
    return X, Y


def check_output_path(path, flag: str):
    """Check an output file flag (e.g. `--out`, `--json`) before any work; `None` passes.

    **Raises:** `ValueError` naming the path and the fix (a directory, an unwritable place)."""
    return None if path is None else check_output_file(path, flag)


def write_json(path, obj) -> Path:
    """Write `obj` to `path` as strict JSON (NaN as null), atomically (write, then rename),
    creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, obj, indent=1)
    return path


CACHE_ENV = "INVARIANT_JAX_CACHE_DIR"
NO_CACHE_ENV = "INVARIANT_JAX_NO_CACHE"


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
    if jax.config.jax_compilation_cache_dir:
        return Path(jax.config.jax_compilation_cache_dir)
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


_CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                  "jax_persistent_cache_min_entry_size_bytes")


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
