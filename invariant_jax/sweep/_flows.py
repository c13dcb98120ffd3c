"""`sweep_flows`: gradient flow from every network of a batch, in memory."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import take_deprecated
from .._defaults import KINK_MAX_STEPS, MAX_STEPS
from ..losses import check_data
from ..network import DAGNetwork
from ..options import (
    OBJECTIVE_KEYWORDS,
    KinkOptions,
    Objective,
    SaveTimes,
    SolverOptions,
    StopRules,
    as_objective,
    as_save_times,
    as_solver_options,
    check_positive,
)
from ._engine import SweepEngine, make_problem
from ._engines import flow_engine, kink_engine, run_engine
from ._kink import resolve_kinks
from ._options import BATCH_KEYWORDS, BatchOptions, deprecated_replacements, fold_options
from ._result import SweepResult, result_from_records, stats_dict

_DEPRECATED = {
    **deprecated_replacements("sweep_flows"),
    "weight_decay": OBJECTIVE_KEYWORDS["weight_decay"],
    "n_save": "pass saveat=ij.SaveTimes(n_save=...) instead",
    "kink_aware": "pass kinks=True / kinks=False (or kinks=ij.KinkOptions(...)) instead",
}


def sweep_objective(loss, weight_decay=None) -> Objective:
    """The `Objective` of a sweep's `loss` (a name or an `ij.Objective`; the deprecated
    `weight_decay` folded in). The engines support a loss and weight decay only: a
    regularizer is refused here, before any work."""
    objective = as_objective(loss, **({} if weight_decay is None else {"weight_decay": weight_decay}))
    if objective.regularizer is not None:
        raise ValueError(
            f"Sweeps integrate the data loss and weight decay only; got regularizer="
            f"{objective.regularizer!r}. Drop it from the Objective, or run ij.gradient_flow on each "
            "network."
        )
    return objective


def fold_kink_aware(kinks: KinkOptions | bool | None, kink_aware: bool | None) -> KinkOptions | bool | None:
    """`kinks` with the deprecated `kink_aware` (`None`, `True`, `False`) folded in."""
    if kink_aware is None:
        return kinks
    if not kink_aware:
        if isinstance(kinks, KinkOptions) or kinks is True:
            raise ValueError(
                "kinks=KinkOptions(...) only applies to kink-aware sweeps (relu / leaky_relu without "
                "stopping rules or weight decay); drop it or pass kinks=True."
            )
        return False
    if kinks is False:
        raise ValueError("kink_aware=True and kinks=False contradict each other; pass kinks=True (or kinks=False).")
    return kinks if isinstance(kinks, KinkOptions) else True


def _batch_of(nets, X, Y):
    """`(template, X, Y, thetas)`: one network, the checked data and the initial edge
    weights of every network, `(n, E)`, on the host."""
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    X, Y = check_data(nets.graph, X, Y)
    # host-side (NumPy): an eager JAX op on the batch would compile once per batch size
    rows, cols = nets.graph.edge_index
    thetas = np.asarray(nets.weights)[..., rows, cols].reshape(-1, len(rows))
    if not np.all(np.isfinite(thetas)):
        bad = np.flatnonzero(~np.all(np.isfinite(thetas), axis=1))
        raise ValueError(f"The initial weights of networks {bad[:10].tolist()} are not finite; re-initialize them.")
    template = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)[0]) if a.ndim == 3 else a, nets)
    return template, X, Y, thetas


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
    stop: StopRules | None = None,
    loss: str | Callable | Objective = "mse",
    kinks: KinkOptions | bool | None = None,
    batch: BatchOptions | None = None,
    **deprecated,
) -> SweepResult:
    """Gradient flow from every network of a batch, through the continuous-batching
    engine. Trajectory `i` equals `ij.gradient_flow(nets[i], X, Y, t1, ...)` with the same
    options, to round-off amplified by adaptive stepping (two compiled programs; see
    docs/sweep.md). Results are bit-identical across slot counts, `steps_per_call`,
    resume and device counts (the same compiled program on every device).

    **Arguments:**

    - `nets`: a batch of `DAGNetwork`s (leading axis on `weights`, e.g. from
        `eqx.filter_vmap`), or one network.
    - `X`, `Y`, `t1`: as in `ij.gradient_flow`.
    - `solver`, `rtol`, `atol`: as in `ij.gradient_flow`: an `ij.SolverOptions`, or a
        solver name with the thin keywords `rtol`, `atol` (default 1e-8; the step budget
        is then `MAX_STEPS` per flow, or `KINK_MAX_STEPS` per segment of a kink-aware one,
        as in `ij.kink_aware_flow`).
    - `saveat`, `stop`: an `ij.SaveTimes` (the times at which the drift of `c` is
        checked) and an `ij.StopRules`, as in `ij.gradient_flow`.
    - `loss`: a loss name or an `ij.Objective` (the loss and weight decay; sweeps take
        no regularizer).
    - `kinks`: integrate each trajectory with `ij.kink_aware_flow` (relu / leaky_relu;
        `solver` is then the solver inside each activation pattern, e.g. `"gauss4"` to
        conserve `c` to round-off). Trajectory `i` equals `kink_aware_flow(nets[i], ...)`;
        event counts land in `SweepResult.kink`. `None` (default): kink-aware for networks
        with kinked piecewise-linear activations (relu, leaky_relu) unless `dt0`, a
        stopping rule or weight decay is set (the kink-aware integrator does not support
        them), off otherwise. `True` or an `ij.KinkOptions` (as in `kink_aware_flow`):
        kink-aware; `False` opts out.
    - `batch`: an `ij.sweep.BatchOptions` (slots, `steps_per_call`, exact or vmap mode,
        devices, progress bar); it never changes the results.

    The keywords `n_save`, `weight_decay`, `kink_aware`, `slots`,
    `steps_per_call`, `exact`, `devices` and `progress` of earlier versions still work,
    with a `DeprecationWarning` naming their replacement.

    **Returns:** a `SweepResult` (`index` = position in the batch).
    """
    old = take_deprecated("sweep_flows", deprecated, _DEPRECATED)
    batch = fold_options(BatchOptions, batch, old, BATCH_KEYWORDS, "sweep_flows")
    objective = sweep_objective(loss, old.pop("weight_decay", None))
    kinks = fold_kink_aware(kinks, old.pop("kink_aware", None))
    template, X, Y, thetas = _batch_of(nets, X, Y)
    check_positive("t1", t1)
    stop = StopRules() if stop is None else stop
    acts = template.activations
    kink = resolve_kinks(
        kinks,
        kinked=all(a.piecewise_linear for a in acts) and any(a.kinked for a in acts),
        options=solver if isinstance(solver, SolverOptions) else SolverOptions(),
        stop=stop,
        weight_decay=objective.weight_decay,
    )
    opts = as_solver_options(solver, rtol=rtol, atol=atol, max_steps=MAX_STEPS if kink is None else KINK_MAX_STEPS)
    save = as_save_times(saveat, old.pop("n_save", None))
    opts.check_dtype(jnp.zeros(()).dtype)
    engine = _engine(
        template, X, Y, t1, thetas, batch=batch, options=opts, saveat=save, stop=stop, objective=objective, kink=kink
    )
    rec, st = run_engine(engine, np.arange(len(thetas)), batch.show_progress(False))
    return result_from_records(rec, stats_dict(st, engine), opts.rtol, opts.atol)


def _engine(template, X, Y, t1, thetas, *, batch, options, saveat, stop, objective, kink) -> SweepEngine:
    """The kink-aware engine when `kink` is set, else the flow engine (keyed on what its
    compiled program depends on)."""
    if kink is not None:
        return kink_engine(
            template, X, Y, t1, thetas, batch=batch, options=options, saveat=saveat, kinks=kink, loss=objective.loss
        )
    problem = make_problem(
        template,
        X,
        Y,
        t1,
        options=options,
        saveat=saveat,
        stop=stop,
        loss=objective.loss,
        weight_decay=objective.weight_decay,
    )
    key = (jax.tree.structure(template), options, saveat, stop, objective.loss, float(objective.weight_decay))
    return flow_engine(problem, thetas, batch=batch, key=key)
