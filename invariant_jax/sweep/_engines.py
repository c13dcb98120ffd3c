"""The compiled engines kept between sweeps (one per problem and engine settings), and
running one over a queue of indices with a progress bar."""

from __future__ import annotations

import json
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from .._results import status_is_success
from ..network import DAGNetwork
from ._config import SweepConfig, init_theta
from ._engine import Engine, EngineStats, make_problem
from ._kink import KinkEngine
from ._options import BatchOptions

_ENGINES: dict = {}
_FLOW_ENGINES: dict = {}

KEPT = 8
"""Compiled engines kept per cache (the most recent)."""


def cached(cache: dict, key, build: Callable, reuse: Callable | None = None):
    """The engine kept under `key` (given the new data by `reuse`), or a new one from
    `build()`. The `KEPT` most recent engines are kept."""
    engine = cache.get(key)
    if engine is not None:
        return engine if reuse is None else reuse(engine)
    engine = build()
    if len(cache) >= KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = engine
    return engine


def clear_engines() -> None:
    """Forget every kept engine (the next sweep compiles afresh), e.g. to time a first call."""
    _ENGINES.clear()
    _FLOW_ENGINES.clear()


def _shapes(*trees) -> tuple:
    return tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(eqx.filter(trees, eqx.is_array)))


def _batch_key(settings: dict, steps_per_call) -> tuple:
    return (settings["slots"], steps_per_call, settings["exact"], settings["devices"])


def flow_engine(problem, thetas, *, batch: BatchOptions, key) -> Engine:
    """A `sweep_flows` engine: compiled once per graph, activations, options and array
    shapes (`key` + the shapes and dtypes of the problem's arrays and `thetas`), then
    reused with new data (`Engine.with_data`): the data set and `t1` are arguments of its
    programs, not constants, and the initial weights are fed with the queue in blocks of
    `slots` rows, so the number of networks compiles nothing."""
    settings = batch.engine_keywords()
    steps = batch.steps_per_call or 64
    full = (key, _shapes(problem), thetas.shape[1:], str(thetas.dtype), *_batch_key(settings, int(steps)))
    return cached(
        _FLOW_ENGINES,
        full,
        lambda: Engine(
            problem,
            init_table=thetas,
            steps_per_call=steps,
            **settings,
        ),
        lambda engine: engine.with_data(problem, thetas),
    )


def kink_engine(template, X, Y, t1, thetas, *, batch: BatchOptions, **options) -> KinkEngine:
    """A kink-aware `sweep_flows` engine, compiled once per graph, activations, `t1`,
    options and array shapes, then reused with new data and initial weights
    (`KinkEngine.with_data`)."""
    settings = batch.engine_keywords()
    full = (
        "kink",
        jax.tree.structure(template),
        float(t1),
        tuple(sorted(options.items())),
        _shapes(jnp.asarray(X), jnp.asarray(Y)),
        thetas.shape[1:],
        str(thetas.dtype),
        *_batch_key(settings, batch.steps_per_call),
    )
    return cached(
        _FLOW_ENGINES,
        full,
        lambda: KinkEngine(
            template,
            X,
            Y,
            t1,
            init_table=thetas,
            steps_per_call=batch.steps_per_call,
            **settings,
            **options,
        ),
        lambda engine: engine.with_data(template, X, Y, t1, thetas, **options),
    )


def config_engine(config: SweepConfig, graph, X, Y, *, batch: BatchOptions):
    """The engine of a `SweepConfig` (initial weights by `init_theta` inside the programs),
    kept for later sweeps of the same problem (every field but `n_inits`)."""
    settings = batch.engine_keywords()
    template = DAGNetwork(graph, config.activation, edge_weights=np.zeros(len(graph.edges)))
    key = (
        json.dumps({k: v for k, v in config.to_dict().items() if k != "n_inits"}, sort_keys=True),
        *_batch_key(settings, batch.steps_per_call),
    )
    init = lambda i: init_theta(config, graph, i)  # noqa: E731

    def build():
        if config.kink_aware:
            return KinkEngine(
                template,
                X,
                Y,
                config.t1,
                init,
                steps_per_call=batch.steps_per_call,
                **settings,
                options=config.solver_options,
                saveat=config.save_times,
                kinks=config.kink_options,
                loss=config.loss.loss,
            )
        problem = make_problem(
            template,
            X,
            Y,
            config.t1,
            options=config.solver_options,
            saveat=config.save_times,
            stop=config.stop_rules,
            loss=config.loss.loss,
            weight_decay=config.loss.weight_decay,
        )
        return Engine(
            problem,
            init,
            steps_per_call=batch.steps_per_call or 64,
            **settings,
        )

    return cached(_ENGINES, key, build)  # compiled engines are reused by later sweeps of the same problem


def progress_bar(total: int, initial: int, enabled: bool):
    """`(bar, update)`: a tqdm bar of trajectories (with the failures so far) and the
    function that advances it by a batch of records; `(None, no-op)` when disabled."""
    if not enabled:
        return None, lambda rec: None
    bar = tqdm(total=total, initial=initial, unit="traj", desc="sweep", dynamic_ncols=True)
    failures = [0]

    def update(rec):
        failures[0] += int(np.sum(~status_is_success(rec["status"])))
        bar.update(len(rec["index"]))
        bar.set_postfix(failures=failures[0], refresh=False)

    return bar, update


def run_engine(engine, todo, progress: bool) -> tuple[dict[str, np.ndarray], EngineStats]:
    """Run `engine` over the indices `todo`, in memory: `(records, stats)`."""
    parts: list[dict] = []
    bar, update = progress_bar(len(todo), 0, progress)
    try:
        st = engine.run(todo, on_results=parts.append, progress=update)
    finally:
        if bar is not None:
            bar.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, st


def add_stats(a: EngineStats | None, b: EngineStats) -> EngineStats:
    """The work of two engine runs together."""
    if a is None:
        return b
    return EngineStats(
        a.useful_steps + b.useful_steps,
        a.slot_iterations + b.slot_iterations,
        a.calls + b.calls,
        a.seconds + b.seconds,
        max(a.devices, b.devices),
        a.host_seconds + b.host_seconds,
    )
