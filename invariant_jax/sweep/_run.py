"""Running sweeps: `sweep_flows` (a batch of networks, in memory) and `run_sweep` (a
`SweepConfig`, persisted to a results folder, resumable, sharded over devices)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from tqdm.auto import tqdm

from .._defaults import KINK_MAX_STEPS, MAX_STEPS
from .._results import STATUSES, is_success, status_is_success
from .._version import __version__
from ..losses import check_data, network_loss
from ..network import DAGNetwork, init_edge_weights
from ..options import KinkOptions, SaveTimes, SolverOptions, StopRules, as_save_times, as_solver_options, check_positive
from ._columns import DERIVED, records_frame, trajectory_columns
from ._config import SweepConfig, check_kink_options
from ._engine import Engine, EngineStats, make_problem
from ._kink import KINK_FIELDS, KinkEngine, kink_aware_default
from ._store import BUSY, DONE, ResultsStore

_FIELDS = ("index", "theta0", "theta_final", "t_final", "c0", "loss_initial", "loss_final", "drift",
           "drift_relative", "scale", "num_steps", "num_accepted_steps", "num_rejected_steps",
           "result", "status")


class SweepResult(eqx.Module):
    """Per-trajectory records of a sweep, sorted by initialization index.

    **Fields** (leading axis: trajectories):

    - `index`: initialization index `i` (key `fold_in(key(seed), i)` in `run_sweep`).
    - `theta0`, `theta_final`: edge weights at `t0` and where integration stopped.
    - `t_final`: where it stopped (`t1`, the stopping rule's time, or the last state).
    - `c0`: `c = B~ theta0^2`.
    - `loss_initial`, `loss_final`: data loss.
    - `drift`, `drift_relative`: as `Flow.drift` (max over `n_save` times and the end).
    - `drift_in_tol`: `drift / (atol + rtol * scale)`, `scale = conservation_scale(net0)`.
    - `num_steps`, `num_accepted_steps`, `num_rejected_steps`: diffrax's counts.
    - `result`: `ij.RESULTS` codes (int32, a column like the others, as the results store
        keeps it): `ij.result_name(res.result)` / `ij.result_message(res.result)` decode
        them, `ij.result_from_code(res.result)` gives the `RESULTS` item; `status`: the
        coarse `STATUSES` index derived from it (`ij.sweep.status_code`).
    - `stats`: `useful_steps`, `slot_iterations`, `work_efficiency`, `seconds`, `calls`
        of the engine run that produced them (summed over resumptions in this process).
    - `rtol`, `atol`.
    - `kink`: for kink-aware sweeps, a dict of per-trajectory event counts
        (`num_events`, `num_crossings`, `num_sliding_entries`, `num_sliding_exits`,
        `num_ambiguous`, `max_sliding_pairs`, `sliding_time`); otherwise `None`.
    - `columns`: for sweeps of a `SweepConfig` (`run_sweep`, `load_sweep`), the derived
        per-trajectory columns of the tidy table (`rank_start`, `rank_end`, `connected`,
        `n_components`, `frozen`, `component`, sign changes, `result_name`,
        `status_name`; see `ij.sweep.trajectory_columns`), as the chunks store them;
        otherwise `None`.

    `to_pandas()` gives all of it as one data frame, one row per trajectory.
    """

    index: np.ndarray
    theta0: np.ndarray
    theta_final: np.ndarray
    t_final: np.ndarray
    c0: np.ndarray
    loss_initial: np.ndarray
    loss_final: np.ndarray
    drift: np.ndarray
    drift_relative: np.ndarray
    drift_in_tol: np.ndarray
    scale: np.ndarray
    num_steps: np.ndarray
    num_accepted_steps: np.ndarray
    num_rejected_steps: np.ndarray
    result: np.ndarray
    status: np.ndarray
    stats: dict = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    kink: dict | None = None
    columns: dict | None = None

    def to_pandas(self):
        """The tidy table: one row per trajectory, `index` first, every per-trajectory
        field (`theta0`, `theta_final`, `c0`, `frozen` as one vector per cell), the kink
        counts and the derived `columns`: the same columns `pd.read_parquet(folder +
        "/chunks")` reads (deduplicated and sorted by `index`). Needs pandas."""
        cols = {k: getattr(self, k) for k in _FIELDS}
        cols["drift_in_tol"] = self.drift_in_tol
        return records_frame({**cols, **(self.kink or {}), **(self.columns or {})})

    @property
    def status_names(self) -> tuple[str, ...]:
        return tuple(STATUSES[int(s)] for s in self.status)

    @property
    def success(self) -> np.ndarray:
        """Per trajectory: reached `t1` or stopped by a stopping rule."""
        return np.asarray(is_success(self.result))

    @property
    def n_failed(self) -> int:
        return int(np.sum(~status_is_success(self.status)))

    def __len__(self) -> int:
        return len(self.index)


def _result_from_records(rec: dict[str, np.ndarray], stats: dict, rtol: float, atol: float) -> SweepResult:
    order = np.argsort(rec["index"], kind="stable")
    kink = {k: np.asarray(rec[k])[order] for k in KINK_FIELDS if k in rec} or None
    columns = {k: np.asarray(rec[k])[order] for k in DERIVED if k in rec and k != "drift_in_tol"} or None
    rec = {k: np.asarray(v)[order] for k, v in rec.items() if k in _FIELDS}
    tol = atol + rtol * rec["scale"]
    return SweepResult(**rec, drift_in_tol=rec["drift"] / tol, stats=dict(stats), rtol=float(rtol), atol=float(atol),
                       kink=kink, columns=columns)


def with_columns(config: SweepConfig, graph, rec: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`rec` with the derived columns of the tidy table (`trajectory_columns`) added
    where they are missing (records of folders written before they existed)."""
    if all(k in rec for k in DERIVED):
        return rec
    return {**rec, **trajectory_columns(graph, rec, rtol=config.rtol, atol=config.atol)}


def _stats_dict(st: EngineStats, slots: int, n_devices: int) -> dict[str, Any]:
    return dict(useful_steps=st.useful_steps, slot_iterations=st.slot_iterations,
                work_efficiency=st.work_efficiency, seconds=st.seconds, calls=st.calls,
                slots=slots, devices=n_devices)


def _progress(total: int, initial: int, enabled: bool):
    if not enabled:
        return None, lambda rec: None
    bar = tqdm(total=total, initial=initial, unit="traj", desc="sweep", dynamic_ncols=True)
    failures = [0]

    def update(rec):
        failures[0] += int(np.sum(~status_is_success(rec["status"])))
        bar.update(len(rec["index"]))
        bar.set_postfix(failures=failures[0], refresh=False)

    return bar, update


def sweep_flows(
    nets: DAGNetwork,
    X,
    Y,
    t1: float,
    *,
    solver: str | SolverOptions = "tsit5",
    rtol: float | None = None,
    atol: float | None = None,
    saveat: SaveTimes | None = None,
    n_save: int | None = None,
    stop: StopRules | None = None,
    loss: str = "mse",
    weight_decay: float = 0.0,
    slots: int = 64,
    steps_per_call: int | None = None,
    exact: bool = True,
    devices=None,
    progress: bool = False,
    kink_aware: bool | None = None,
    kinks: KinkOptions | None = None,
) -> SweepResult:
    """Gradient flow from every network of a batch, through the continuous-batching
    engine. Trajectory `i` equals `ij.gradient_flow(nets[i], X, Y, t1, ...)` with the same
    options, to round-off amplified by adaptive stepping (two compiled programs; see
    docs/sweep.md). Results are bit-identical across slot counts, `steps_per_call`,
    resume and device counts (one compiled program).

    **Arguments:**

    - `nets`: a batch of `DAGNetwork`s (leading axis on `weights`, e.g. from
        `eqx.filter_vmap`), or one network.
    - `X`, `Y`, `t1`, `solver`, `rtol`, `atol`, `saveat`, `n_save`, `stop`, `loss`,
        `weight_decay`: as in `ij.gradient_flow` (the same option objects).
    - `slots`: trajectories integrated at once (rounded up to a multiple of the devices).
    - `steps_per_call`: loop iterations between harvests (default: 64 solver steps;
        kink-aware: 64 segments in exact mode, 4 under vmap so finished slots refill soon).
    - `exact`: evaluate each slot with the unbatched program (default; an idle slot
        costs nothing on CPU, and results do not depend on the number of slots). `False` vmaps over slots,
        which suits GPUs.
    - `devices`: JAX devices to shard the slots over (default: all local devices).
    - `progress`: show a progress bar.
    - `kink_aware`: integrate each trajectory with `ij.kink_aware_flow` (relu /
        leaky_relu; `solver` is then the solver inside each activation pattern, e.g.
        `"gauss4"` to conserve `c` to round-off). Trajectory `i` equals
        `kink_aware_flow(nets[i], ...)`; event counts land in `SweepResult.kink`.
        `None` (default): on for networks with kinked piecewise-linear activations
        (relu, leaky_relu) unless `dt0`, a stopping rule or weight decay is set (the
        kink-aware integrator does not support them), off otherwise. `False` opts out.
    - `kinks`: the `ij.KinkOptions` of a kink-aware sweep (as in `kink_aware_flow`;
        default `KinkOptions()`); an error for a sweep that is not kink-aware.

    **Returns:** a `SweepResult` (`index` = position in the batch).
    """
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    X, Y = check_data(nets.graph, X, Y)
    # host-side (NumPy): an eager JAX op on the batch would compile once per batch size
    rows, cols = nets.graph.edge_index
    thetas = np.asarray(nets.weights)[..., rows, cols].reshape(-1, len(rows))
    if not np.all(np.isfinite(thetas)):
        bad = np.flatnonzero(~np.all(np.isfinite(thetas), axis=1))
        raise ValueError(f"The initial weights of networks {bad[:10].tolist()} are not finite; re-initialize them.")
    check_positive("t1", t1)
    stop = StopRules() if stop is None else stop
    template = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)[0]) if a.ndim == 3 else a, nets)
    acts = template.activations
    given = solver if isinstance(solver, SolverOptions) else SolverOptions()
    kink_aware = kink_aware_default(
        kink_aware, kinked=all(a.piecewise_linear for a in acts) and any(a.kinked for a in acts),
        unsupported=dict(weight_decay=weight_decay, dt0=given.dt0, stepsize_controller=given.stepsize_controller,
                         grad_norm_tol=stop.grad_norm_tol, loss_floor=stop.loss_floor,
                         max_param_norm=stop.max_param_norm, max_wall_time=stop.max_wall_time))
    opts = as_solver_options(solver, rtol=rtol, atol=atol, max_steps=KINK_MAX_STEPS if kink_aware else MAX_STEPS)
    save = as_save_times(saveat, n_save)
    opts.check_dtype(jnp.zeros(()).dtype)
    check_positive("weight_decay", weight_decay, allow_zero=True)
    if kinks is not None and not kink_aware:
        raise ValueError("kinks=KinkOptions(...) only applies to kink-aware sweeps (relu / leaky_relu without "
                         "stopping rules or weight decay); drop it or pass kink_aware=True.")
    if kink_aware:
        check_kink_options(opts, stop, weight_decay)
        engine = _kink_engine(template, X, Y, t1, thetas, slots=slots, steps_per_call=steps_per_call,
                              devices=devices, exact=exact, options=opts, saveat=save,
                              kinks=KinkOptions() if kinks is None else kinks, loss=loss)
    else:
        problem = make_problem(template, X, Y, t1, options=opts, saveat=save, stop=stop, loss=loss,
                               weight_decay=weight_decay)
        engine = _flow_engine(problem, thetas, slots=slots, steps_per_call=steps_per_call or 64, devices=devices,
                              exact=exact, key=(jax.tree.structure(template), opts, save, stop, loss, float(weight_decay)))
    parts: list[dict] = []
    bar, update = _progress(len(thetas), 0, progress)
    try:
        st = engine.run(np.arange(len(thetas)), on_results=parts.append, progress=update)
    finally:
        if bar is not None:
            bar.close()
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return _result_from_records(rec, _stats_dict(st, engine.slots, len(engine.mesh.devices.flat)), opts.rtol,
                                opts.atol)


def init_theta(config: SweepConfig, graph, index) -> jax.Array:
    """Initial edge weights of initialization `index`: the key is
    `jax.random.fold_in(jax.random.key(config.seed), index)`, so a trajectory does not
    depend on how the sweep is split. Equals `DAGNetwork(graph, activation,
    key=that_key, init=config.init, scale=config.scale).edge_weights()`."""
    key = jr.fold_in(jr.key(config.seed), index)
    return init_edge_weights(graph, key, config.init, scale=config.scale)


def manifest_for(config: SweepConfig) -> dict:
    return {"format": "invariant_jax.sweep/1", "package": "invariant_jax", "version": __version__,
            "config": config.to_dict(), "jax_version": jax.__version__,
            "float64": bool(jax.config.jax_enable_x64),
            "note": "time is gradient-flow time of L = (1/2N) sum ||f - y||^2 (MSE)"}


_ENGINES: dict = {}
_FLOW_ENGINES: dict = {}


def _cached(cache: dict, key, build: Callable, reuse: Callable | None = None):
    """The engine kept under `key` (given the new data by `reuse`), or a new one from
    `build()`. The 8 most recent engines are kept."""
    engine = cache.get(key)
    if engine is not None:
        return engine if reuse is None else reuse(engine)
    engine = build()
    if len(cache) >= 8:
        cache.pop(next(iter(cache)))
    cache[key] = engine
    return engine


def _shapes(*trees) -> tuple:
    return tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(eqx.filter(trees, eqx.is_array)))


def _flow_engine(problem, thetas, *, slots, steps_per_call, devices, exact, key) -> Engine:
    """A `sweep_flows` engine: compiled once per graph, activations, options and array
    shapes (`key` + the shapes and dtypes of the problem's arrays and `thetas`), then
    reused with new data (`Engine.with_data`): the data set and `t1` are arguments of its
    programs, not constants, and the initial weights are fed with the queue in blocks of
    `slots` rows, so the number of networks compiles nothing."""
    full = (key, _shapes(problem), thetas.shape[1:], str(thetas.dtype), int(slots), int(steps_per_call),
            bool(exact), None if devices is None else tuple(devices))
    return _cached(_FLOW_ENGINES, full,
                   lambda: Engine(problem, init_table=thetas, slots=slots, steps_per_call=steps_per_call,
                                  devices=devices, exact=exact),
                   lambda engine: engine.with_data(problem, thetas))


def _kink_engine(template, X, Y, t1, thetas, *, slots, steps_per_call, devices, exact, **options) -> KinkEngine:
    """A kink-aware `sweep_flows` engine, compiled once per graph, activations, `t1`,
    options and array shapes, then reused with new data and initial weights
    (`KinkEngine.with_data`)."""
    full = ("kink", jax.tree.structure(template), float(t1), tuple(sorted(options.items())),
            _shapes(jnp.asarray(X), jnp.asarray(Y)), thetas.shape[1:], str(thetas.dtype), slots, steps_per_call,
            bool(exact), None if devices is None else tuple(devices))
    return _cached(_FLOW_ENGINES, full,
                   lambda: KinkEngine(template, X, Y, t1, init_table=thetas, slots=slots,
                                      steps_per_call=steps_per_call, devices=devices, exact=exact, **options),
                   lambda engine: engine.with_data(template, X, Y, t1, thetas, **options))


# job-array environment variables: (index, first index, count) per scheduler
_JOB_ARRAYS = (("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"),
               ("SGE_TASK_ID", "SGE_TASK_FIRST", None), ("PBS_ARRAY_INDEX", None, None),
               ("LSB_JOBINDEX", None, None))


def job_array_share(environ=None) -> tuple[int, int] | None:
    """`(process_index, process_count)` of a job-array task from the environment (Slurm
    `SLURM_ARRAY_TASK_ID/_MIN/_COUNT`, Grid Engine `SGE_TASK_ID/_FIRST/_LAST/_STEPSIZE`),
    or `None` outside a job array (or when the count is not known)."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_ARRAY_TASK_ID") and env.get("SLURM_ARRAY_TASK_COUNT"):
        first = int(env.get("SLURM_ARRAY_TASK_MIN") or 0)
        step = int(env.get("SLURM_ARRAY_TASK_STEP") or 1)
        return (int(env["SLURM_ARRAY_TASK_ID"]) - first) // step, int(env["SLURM_ARRAY_TASK_COUNT"])
    if env.get("SGE_TASK_ID", "undefined") != "undefined" and env.get("SGE_TASK_LAST", "undefined") != "undefined":
        first, last = int(env.get("SGE_TASK_FIRST") or 1), int(env["SGE_TASK_LAST"])
        step = int(env.get("SGE_TASK_STEPSIZE") or 1)
        return (int(env["SGE_TASK_ID"]) - first) // step, (last - first) // step + 1
    return None


def _share(process_index, process_count) -> tuple[int, int]:
    if process_index is None and process_count is None:
        if jax.process_count() > 1:
            return jax.process_index(), jax.process_count()
        return job_array_share() or (0, 1)
    pi = 0 if process_index is None else int(process_index)
    pc = (jax.process_count() if process_count is None else int(process_count))
    return pi, pc


def default_block_size(n_inits: int) -> int:
    """Initializations per claim: about 64 blocks per sweep, between 1 and 256."""
    return max(1, min(256, -(-int(n_inits) // 64)))


def run_sweep(
    config: SweepConfig,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    slots: int = 64,
    steps_per_call: int | None = None,
    exact: bool = True,
    devices=None,
    progress: bool = True,
    flush_seconds: float = 2.0,
    chunk_size: int = 1024,
    process_index: int | None = None,
    process_count: int | None = None,
    stale_seconds: float = 120.0,
    on_chunk: Callable[[Path], None] | None = None,
    tag: str | None = None,
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
    - `slots`, `steps_per_call`, `exact`, `devices`: engine settings (see
        `sweep_flows`); they never change the results.
    - `progress`: progress bar (done by all writers, failures, ETA).
    - `flush_seconds`, `chunk_size`: finished records are written at least this often /
        in chunks of at most this many.
    - `process_index`, `process_count`: where in the sweep this writer starts claiming
        (writer `p` of `P` starts at block `p * n_blocks / P`, then helps the others).
        Default: `jax.process_index()`/`jax.process_count()` after
        `jax.distributed.initialize()`, else the job-array variables
        (`SLURM_ARRAY_TASK_ID`, ...; see `job_array_share`), else `0, 1`. Without `out`,
        process `p` runs the indices `i % P == p`.
    - `stale_seconds`: a claim whose writer's heartbeat is older than this is taken
        over (a writer on the same host whose process is gone is taken over at once).
    - `on_chunk`: called with the path of each chunk written.
    - `tag`: a label kept in the manifest; with `overwrite`, only a sweep written with
        the same tag is replaced (`invariant-jax demo` replaces only an earlier demo).

    One folder holds one experiment: the manifest is created exclusively before anything
    compiles, so a second writer with another config is refused at once. SIGINT and
    SIGTERM (e.g. Slurm preemption) flush the finished records, release this writer's
    claims and raise `SweepInterrupted` ("progress saved; rerun with --resume").

    **Returns:** a `SweepResult` with every record found in `out` (all writers).
    """
    if not isinstance(config, SweepConfig):
        raise TypeError(f"config must be a SweepConfig; got {type(config).__name__}.")
    if resume and overwrite:
        raise ValueError("resume=True and overwrite=True contradict each other: resume keeps the finished "
                         "records, overwrite deletes them. Pass one of them.")
    if not jax.config.jax_enable_x64:
        raise ValueError("Sweeps check conservation laws and need float64: call "
                         "jax.config.update('jax_enable_x64', True) first.")
    check_engine_settings(slots=slots, steps_per_call=steps_per_call, chunk_size=chunk_size)
    if not (np.isfinite(flush_seconds) and flush_seconds >= 0):
        raise ValueError(f"flush_seconds must be a finite number >= 0; got {flush_seconds!r}.")
    check_positive("stale_seconds", stale_seconds)
    pi, pc = _share(process_index, process_count)
    if not (0 <= pi < pc):
        raise ValueError(f"Need 0 <= process_index < process_count; got {pi}, {pc}.")
    slots = min(int(slots), config.n_inits)  # more slots than trajectories only costs memory
    graph = config.build_graph()  # graph, data and engine errors come before the folder is touched
    X, Y = config.build_data(graph)
    check_initial_state(config, graph, X, Y)
    engine = _engine(config, graph, X, Y, slots=slots, steps_per_call=steps_per_call, exact=exact, devices=devices)
    if out is None:
        return _run_in_memory(config, engine, np.arange(config.n_inits)[pi::pc], progress)
    store = ResultsStore(out)
    resume = resume or pc > 1  # the writers of a multi-process sweep join one folder
    store.open({**manifest_for(config), "block_size": default_block_size(config.n_inits)},
               resume=resume, overwrite=overwrite, tag=tag)
    for note in store.notes:
        warnings.warn(note, SweepStoreWarning, stacklevel=2)
    try:
        with _signals_interrupt(store.folder):
            stats = _run_claimed(config, engine, store, pi=pi, pc=pc, progress=progress, flush_seconds=flush_seconds,
                                 chunk_size=chunk_size, stale_seconds=stale_seconds, on_chunk=on_chunk)
    except Exception:
        store.discard_if_unused()  # failed before any record: the corrected command starts afresh
        raise
    rec = store.load_records()
    if rec is None:
        raise ValueError("The sweep produced no records.")
    return _result_from_records(with_columns(config, graph, rec), stats, config.rtol, config.atol)


INT32_MAX = 2**31 - 1


def check_engine_settings(*, slots, steps_per_call, chunk_size=1) -> None:
    """Refuse engine settings that are not integers in `[1, 2**31 - 1]` (the engine's
    counters are int32), naming the value. `steps_per_call=None` is the default."""
    for name, v in (("slots", slots), ("steps_per_call", steps_per_call), ("chunk_size", chunk_size)):
        if v is None and name == "steps_per_call":
            continue  # the engine's default
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= INT32_MAX:
            raise ValueError(f"{name} must be an integer >= 1 (and at most {INT32_MAX}); got {v!r}.")


def check_initial_state(config: SweepConfig, graph, X, Y) -> None:
    """Refuse, before any folder or compile, a graph without hidden nodes, and a config
    whose first initialization already overflows: non-finite weights, `|theta0|^2` or
    initial loss (e.g. a huge `scale`)."""
    if not graph.hidden:
        raise ValueError(f"The graph {graph} has no hidden nodes, so there is no conserved quantity c = B~ theta^2 "
                         "to sweep; add a hidden layer (e.g. --graph mlp --widths 3,4,1).")
    theta = np.asarray(init_theta(config, graph, 0))
    net = DAGNetwork(graph, config.activation, edge_weights=theta)
    with np.errstate(over="ignore", invalid="ignore"):
        sq = float(np.sum(theta.astype(np.float64) ** 2))
    loss = float(network_loss(net, X, Y, config.loss))
    if not (np.all(np.isfinite(theta)) and np.isfinite(sq) and np.isfinite(loss)):
        what = "weights" if not np.all(np.isfinite(theta)) else "|theta0|^2" if not np.isfinite(sq) else "loss"
        raise ValueError(f"scale={config.scale:g} gives an initialization whose {what} is not finite in float64 "
                         f"(initialization 0: max |theta0| = {np.nanmax(np.abs(theta)):.3g}, loss {loss:.3g}); "
                         "lower --scale.")


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT (Ctrl-C) or SIGTERM (e.g. Slurm preemption) after its
    finished records were written and its claims released (`signal`, `folder`)."""

    def __init__(self, signal_name: str, folder: Path):
        super().__init__(f"{signal_name}: progress saved in {str(folder)!r}; rerun with --resume")
        self.signal, self.folder = signal_name, Path(folder)


@contextlib.contextmanager
def _signals_interrupt(folder: Path):
    """Inside: SIGTERM raises like Ctrl-C (in the main thread, where no handler of the
    caller's is installed), so `_run_claimed`'s cleanup flushes and releases; both leave
    as `SweepInterrupted`."""
    installed = False
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
            signal.SIG_DFL, None):
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


class SweepStoreWarning(UserWarning):
    """What the store did to a results folder: a damaged file set aside, a manifest rebuilt."""


def _engine(config, graph, X, Y, *, slots, steps_per_call, exact, devices):
    template = DAGNetwork(graph, config.activation, edge_weights=np.zeros(len(graph.edges)))
    key = (json.dumps({k: v for k, v in config.to_dict().items() if k != "n_inits"}, sort_keys=True),
           slots, steps_per_call, exact, None if devices is None else tuple(devices))

    def build():
        if config.kink_aware:
            return KinkEngine(template, X, Y, config.t1, lambda i: init_theta(config, graph, i), slots=slots,
                              steps_per_call=steps_per_call, devices=devices, exact=exact,
                              options=config.solver_options, saveat=config.save_times, kinks=config.kink_options,
                              loss=config.loss)
        problem = make_problem(template, X, Y, config.t1, options=config.solver_options,
                               saveat=config.save_times, stop=config.stop_rules, loss=config.loss,
                               weight_decay=config.weight_decay)
        return Engine(problem, lambda i: init_theta(config, graph, i), slots=slots,
                      steps_per_call=64 if steps_per_call is None else steps_per_call, devices=devices, exact=exact)

    return _cached(_ENGINES, key, build)  # compiled engines are reused by later sweeps of the same problem


def _stats_of(st: EngineStats | None, engine) -> dict:
    st = st or EngineStats(0, 0, 0, 0.0)
    return _stats_dict(st, engine.slots, len(engine.mesh.devices.flat))


def _run_in_memory(config, engine, todo, progress) -> SweepResult:
    memory: list[dict] = []
    bar, update = _progress(len(todo), 0, progress)
    try:
        st = engine.run(todo, on_results=memory.append, progress=update)
    finally:
        if bar is not None:
            bar.close()
    rec = {k: np.concatenate([m[k] for m in memory]) for k in memory[0]}
    rec = with_columns(config, config.build_graph(), rec)
    return _result_from_records(rec, _stats_of(st, engine), config.rtol, config.atol)


def _add_stats(a: EngineStats | None, b: EngineStats) -> EngineStats:
    if a is None:
        return b
    return EngineStats(a.useful_steps + b.useful_steps, a.slot_iterations + b.slot_iterations,
                       a.calls + b.calls, a.seconds + b.seconds)


def _run_claimed(config, engine, store: ResultsStore, *, pi, pc, progress, flush_seconds, chunk_size,
                 stale_seconds, on_chunk) -> dict:
    """Claim blocks of indices, run them, write their records, until the sweep is done."""
    n = config.n_inits
    graph = config.build_graph()
    bs = int(store.manifest.get("block_size") or default_block_size(n))
    n_blocks = -(-n // bs)
    done = np.zeros(n, bool)
    done[store.done_indices()] = True
    store.new_indices()  # mark the chunks read so far as seen
    blocks = [np.arange(k * bs, min(n, (k + 1) * bs)) for k in range(n_blocks)]
    start = (pi * n_blocks) // pc
    pending = [(start + j) % n_blocks for j in range(n_blocks)]
    pending = [k for k in pending if not done[blocks[k]].all()]
    target = 2 * engine.slots  # indices per round: enough to keep every slot busy
    bar, update = _progress(n, int(done.sum()), progress)
    claims = store.claims(stale_seconds=stale_seconds, heartbeat_seconds=min(5.0, stale_seconds / 4))
    buffer: list[dict] = []
    written: list[str] = []
    last = [time.monotonic()]
    stats = None

    def refresh():
        new = store.new_indices()
        new = new[(new >= 0) & (new < n)]
        fresh = np.unique(new[~done[new]])
        done[fresh] = True
        if bar is not None and fresh.size:
            bar.update(int(fresh.size))

    def flush():
        if buffer:
            rec = {k: np.concatenate([b[k] for b in buffer]) for k in buffer[0]}
            # the tidy table's derived columns (topology, ranks, names) for pandas/DuckDB users
            rec.update(trajectory_columns(graph, rec, rtol=config.rtol, atol=config.atol))
            path = store.write_chunk(rec)
            store._seen_indices[path.name] = rec["index"]
            written.append(path.name)
            if on_chunk is not None:
                on_chunk(path)
        buffer.clear()
        last[0] = time.monotonic()

    def on_results(rec):
        done[rec["index"]] = True
        for s in range(0, len(rec["index"]), chunk_size):
            buffer.append({k: v[s:s + chunk_size] for k, v in rec.items()})
            if sum(len(b["index"]) for b in buffer) >= chunk_size:
                flush()
        if time.monotonic() - last[0] >= flush_seconds:
            flush()
        update(rec)

    claims.start()
    mine: list[int] = []
    try:
        while pending:
            mine, todo, busy = [], [], []
            for k in pending:
                if sum(map(len, todo)) >= target:
                    busy.append(k)  # not looked at this round
                    continue
                if done[blocks[k]].all():
                    continue
                got = claims.try_claim(k)
                if got == DONE:
                    refresh()
                    if done[blocks[k]].all():
                        continue
                    got = claims.try_claim(k, force=True)  # its records were lost (quarantined)
                if got == BUSY:
                    busy.append(k)
                    continue
                refresh()  # another writer may have finished part of it meanwhile
                rest = blocks[k][~done[blocks[k]]]
                if rest.size == 0:
                    claims.mark_done(k, [])
                    continue
                mine.append(k)
                todo.append(rest)
            pending = busy
            if not mine:
                if pending:  # the rest is claimed by live writers: wait, and take over the dead
                    time.sleep(min(1.0, stale_seconds / 10))
                    refresh()
                continue
            written.clear()
            st = engine.run(np.concatenate(todo), on_results=on_results)
            flush()
            stats = _add_stats(stats, st)
            for k in mine:
                claims.mark_done(k, written)
            mine = []
    finally:
        try:
            flush()  # may raise again (a full disk, an on_chunk that raises): release anyway
        finally:
            for k in mine:  # interrupted: give the unfinished blocks back at once
                claims.release(k)
            claims.stop()  # else the heartbeat thread keeps this writer's claims alive forever
            if bar is not None:
                bar.close()
    return _stats_of(stats, engine)


def load_sweep(out: str | Path) -> tuple[SweepConfig, SweepResult]:
    """Read a results folder: its `SweepConfig` and every finished record.

    Reads Parquet folders and the `.npz` folders of earlier versions. A damaged chunk is
    skipped with a warning naming it (`run_sweep(..., resume=True)` recomputes it); a
    chunk of another sweep, or two different records for one index, raise `ValueError`
    naming the files. A lost or damaged manifest, or one whose config disagrees with every
    chunk, is rebuilt from the chunks (in memory, with a warning). Missing initializations
    are never silent: a `SweepStoreWarning` gives how many and which, and names the chunks
    that a finished claim lists but that are gone.
    """
    if not Path(out).is_dir():
        raise FileNotFoundError(f"{str(out)!r} is not a results folder (no such directory).")
    store = ResultsStore(out)
    man, why = store._manifest_or_rebuild()
    if man is None:
        raise FileNotFoundError(f"{str(out)!r} holds no sweep: {why}, and no chunk to rebuild it from.")
    if why is not None:
        warnings.warn(f"{why}: config read from {man['rebuilt_from']}; `--resume` rewrites the manifest.",
                      SweepStoreWarning, stacklevel=2)
    store.manifest = man
    config = SweepConfig.from_dict(man["config"])
    rec = store.load_records()
    if rec is None:
        raise ValueError(f"{str(out)!r} holds no finished trajectories yet; run it with --resume.")
    _warn_missing(store, config, rec["index"])
    return config, _result_from_records(with_columns(config, config.build_graph(), rec), {}, config.rtol,
                                        config.atol)


def _ranges(idx) -> str:
    """`[0, 1, 2, 5, 7, 8]` -> `"0-2, 5, 7-8"` (at most 8 runs)."""
    runs, start = [], None
    for a, b in zip(idx, list(idx[1:]) + [None]):
        start = a if start is None else start
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = None
    return ", ".join(runs[:8]) + (f", ... ({len(runs) - 8} more runs)" if len(runs) > 8 else "")


def _warn_missing(store: ResultsStore, config: SweepConfig, index: np.ndarray) -> None:
    missing = sorted(set(range(config.n_inits)) - {int(i) for i in index})
    lost = store.lost_chunks()
    if not missing and not lost:
        return
    msg = f"{str(store.folder)!r}: {len(index)} of {config.n_inits} initializations have records"
    if missing:
        msg += f"; missing: {_ranges(missing)}"
    if lost:
        msg += (f"; chunks listed as finished but gone: {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''} "
                "(deleted or moved by hand)")
    msg += ". `invariant-jax sweep --resume` computes the missing ones (a sweep still running adds them itself)."
    warnings.warn(msg, SweepStoreWarning, stacklevel=3)
