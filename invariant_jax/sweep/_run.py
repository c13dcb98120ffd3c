"""`run_sweep`: a `SweepConfig` run into a resumable results folder (or in memory),
shared by any number of writers."""

from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from .._checks import take_deprecated
from .._version import __version__
from ..losses import network_loss
from ..network import DAGNetwork
from ._claimed import default_block_size, run_claimed
from ._config import SweepConfig, init_theta
from ._engines import config_engine, run_engine
from ._jobs import writer_share
from ._load import SweepStoreWarning
from ._options import BATCH_KEYWORDS, STORE_KEYWORDS, BatchOptions, StoreOptions, deprecated_replacements, fold_options
from ._result import SweepResult, result_from_records, stats_dict, with_columns
from ._store import ResultsStore

_DEPRECATED = deprecated_replacements("run_sweep")


def x64_enabled() -> bool:
    """Whether JAX computes in float64 (`jax_enable_x64`), asked through the public API."""
    return jax.dtypes.canonicalize_dtype(np.float64) == np.dtype(np.float64)


def manifest_for(config: SweepConfig) -> dict:
    """The manifest of a results folder of `config` (its config, versions, float64)."""
    return {
        "format": "invariant_jax.sweep/1",
        "package": "invariant_jax",
        "version": __version__,
        "config": config.to_dict(),
        "jax_version": jax.__version__,
        "float64": x64_enabled(),
        "note": "time is gradient-flow time of L = (1/2N) sum ||f - y||^2 (MSE)",
    }


def run_sweep(
    config: SweepConfig,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    batch: BatchOptions | None = None,
    store: StoreOptions | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    on_chunk: Callable[[Path], None] | None = None,
    tag: str | None = None,
    **deprecated,
) -> SweepResult:
    """Run (or finish) the sweep `config`, writing records to the folder `out`.

    Many writers (processes, hosts, job-array tasks, restarts) may work on one folder at
    once: they claim blocks of indices (`claims/`), so each block is computed once, and a
    writer that finishes early helps with what is left. Each returns when the whole sweep
    is done.

    **Arguments:**

    - `config`: a `SweepConfig` (validated on construction).
    - `out`: results folder (`manifest.json` + `chunks/*.parquet`); `None` keeps
        everything in memory.
    - `resume`: finish a sweep already in `out` (its config must match); finished
        trajectories are loaded, never recomputed. Implied when `process_count > 1`. Damaged chunks are moved to
        `quarantine/` and recomputed; a lost manifest is rebuilt from the chunks.
    - `overwrite`: delete the files the store can prove it wrote in `out` first (a
        folder holding any other file is refused, naming it). Never with `resume`.
    - `batch`: an `ij.sweep.BatchOptions` (slots, `steps_per_call`, exact or vmap mode,
        devices; they never change the results), and whether to show a progress bar (done
        by all writers, failures, ETA; on unless `progress=False`).
    - `store`: an `ij.sweep.StoreOptions`: how often and in what chunks records are
        written, and when another writer's claim counts as stale.
    - `process_index`, `process_count`: where in the sweep this writer starts claiming
        (writer `p` of `P` starts at block `p * n_blocks / P`, then helps the others).
        Default: `jax.process_index()`/`jax.process_count()` after
        `jax.distributed.initialize()`, else the job-array variables
        (`SLURM_ARRAY_TASK_ID`, ...; see `job_array_share`), else `0, 1`. Without `out`,
        process `p` runs the indices `i % P == p`.
    - `on_chunk`: called with the path of each chunk written.
    - `tag`: a label kept in the manifest; with `overwrite`, only a sweep written with
        the same tag is replaced (`invariant-jax demo` replaces only an earlier demo).

    The keywords `slots`, `steps_per_call`, `exact`, `devices`, `progress`,
    `flush_seconds`, `chunk_size` and `stale_seconds` of earlier versions still work, with
    a `DeprecationWarning` naming their replacement.

    One folder holds one experiment: the manifest is created exclusively before anything
    compiles, so a second writer with another config is refused at once. SIGINT and
    SIGTERM (e.g. Slurm preemption) flush the finished records, release this writer's
    claims and raise `SweepInterrupted` ("progress saved; rerun with --resume").

    **Returns:** a `SweepResult` with every record found in `out` (all writers).
    """
    old = take_deprecated("run_sweep", deprecated, _DEPRECATED)
    batch = fold_options(BatchOptions, batch, old, BATCH_KEYWORDS, "run_sweep")
    store = fold_options(StoreOptions, store, old, STORE_KEYWORDS, "run_sweep")
    if out is None:
        _check_run(config, resume, overwrite)
        pi, pc = writer_share(process_index, process_count)
        _, engine = _checked_engine(config, batch)
        return _run_in_memory(config, engine, np.arange(config.n_inits)[pi::pc], batch.show_progress(True))
    share = dict(process_index=process_index, process_count=process_count)
    results, stats = run_in_folder(
        config, out, resume=resume, overwrite=overwrite, batch=batch, store=store, on_chunk=on_chunk, tag=tag, **share
    )
    rec = results.load_records()
    if rec is None:
        raise ValueError("The sweep produced no records.")
    return result_from_records(with_columns(config, config.build_graph(), rec), stats, config.rtol, config.atol)


def run_in_folder(
    config: SweepConfig,
    out: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    batch: BatchOptions,
    store: StoreOptions | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    on_chunk: Callable[[Path], None] | None = None,
    tag: str | None = None,
) -> tuple[ResultsStore, dict]:
    """`run_sweep` into the folder `out` without loading its records (the CLI summarizes
    the folder chunk by chunk: `summarize_sweep(config, out)`). Open the folder (the
    writers of a multi-process sweep join one folder, so they resume) and run this
    writer's claims.

    **Returns:** the folder's `ResultsStore` and the engine's statistics (`SweepResult.stats`).
    """
    _check_run(config, resume, overwrite)
    pi, pc = writer_share(process_index, process_count)
    _, engine = _checked_engine(config, batch)  # before the folder is touched
    results = ResultsStore(out)
    results.open(
        {**manifest_for(config), "block_size": default_block_size(config.n_inits)},
        resume=resume or pc > 1,
        overwrite=overwrite,
        tag=tag,
    )
    for note in results.notes:
        warnings.warn(note, SweepStoreWarning, stacklevel=3)  # run_sweep's caller (the CLI calls this directly)
    options, progress = store or StoreOptions(), batch.show_progress(True)
    try:
        with signals_interrupt(results.folder):
            stats = run_claimed(
                config, engine, results, pi=pi, pc=pc, progress=progress, options=options, on_chunk=on_chunk
            )
    except Exception:
        results.discard_if_unused()  # failed before any record: the corrected command starts afresh
        raise
    return results, stats


def _checked_engine(config: SweepConfig, batch: BatchOptions):
    """`(graph, engine)` of `config`: graph, data and engine errors come here, before any
    folder is touched."""
    graph = config.build_graph()
    X, Y = config.build_data(graph)
    check_initial_state(config, graph, X, Y)
    return graph, config_engine(config, graph, X, Y, batch=batch)


def _run_in_memory(config, engine, indices, progress) -> SweepResult:
    """Run `indices` with no folder (this writer's share: `i % P == p`)."""
    rec, st = run_engine(engine, indices, progress)
    rec = with_columns(config, config.build_graph(), rec)
    return result_from_records(rec, stats_dict(st, engine), config.rtol, config.atol)


def _check_run(config, resume: bool, overwrite: bool) -> None:
    if not isinstance(config, SweepConfig):
        raise TypeError(f"config must be a SweepConfig; got {type(config).__name__}.")
    if resume and overwrite:
        raise ValueError(
            "resume=True and overwrite=True contradict each other: resume keeps the finished "
            "records, overwrite deletes them. Pass one of them."
        )
    if not x64_enabled():
        raise ValueError(
            "Sweeps check conservation laws and need float64: call jax.config.update('jax_enable_x64', True) first."
        )


def check_initial_state(config: SweepConfig, graph, X, Y) -> None:
    """Refuse, before any folder or compile, a graph without hidden nodes, and a config
    whose first initialization already overflows: non-finite weights, `|theta0|^2` or
    initial loss (e.g. a huge `scale`)."""
    if not graph.hidden:
        raise ValueError(
            f"The graph {graph} has no hidden nodes, so there is no conserved quantity c = B~ theta^2 "
            "to sweep; add a hidden layer (e.g. --graph mlp --widths 3,4,1)."
        )
    theta = np.asarray(init_theta(config, graph, 0))
    net = DAGNetwork(graph, config.activation, edge_weights=theta)
    with np.errstate(over="ignore", invalid="ignore"):
        sq = float(np.sum(theta.astype(np.float64) ** 2))
    loss = float(network_loss(net, X, Y, config.loss.loss))
    if not (np.all(np.isfinite(theta)) and np.isfinite(sq) and np.isfinite(loss)):
        what = "weights" if not np.all(np.isfinite(theta)) else "|theta0|^2" if not np.isfinite(sq) else "loss"
        raise ValueError(
            f"scale={config.scale:g} gives an initialization whose {what} is not finite in float64 "
            f"(initialization 0: max |theta0| = {np.nanmax(np.abs(theta)):.3g}, loss {loss:.3g}); "
            "lower --scale."
        )


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT (Ctrl-C) or SIGTERM (e.g. Slurm preemption) after its
    finished records were written and its claims released (`signal`, `folder`)."""

    def __init__(self, signal_name: str, folder: Path):
        super().__init__(f"{signal_name}: progress saved in {str(folder)!r}; rerun with --resume")
        self.signal, self.folder = signal_name, Path(folder)


@contextlib.contextmanager
def signals_interrupt(folder: Path):
    """Inside: SIGTERM raises like Ctrl-C (in the main thread, where no handler of the
    caller's is installed), so `run_claimed`'s cleanup flushes and releases; both leave
    as `SweepInterrupted`."""
    installed = False
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):

        def on_term(signum, frame):
            raise SweepInterrupted("SIGTERM", folder)

        signal.signal(signal.SIGTERM, on_term)
        installed = True
    try:
        yield
    except SweepInterrupted:
        raise
    except KeyboardInterrupt:
        raise SweepInterrupted("SIGINT", folder) from None
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
