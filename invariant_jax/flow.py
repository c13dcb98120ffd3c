"""Exact gradient flow `dtheta/dt = -grad L(theta)` with diffrax, and the conservation
check built on it.

Time is the gradient-flow time of the loss as normalised in `losses` (MSE is
`(1/2N) sum ||f - y||^2`); an Euler step of size `dt` is gradient descent with learning
rate `dt`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._checks import check_finite, take_deprecated
from ._compile import quick_compile
from ._defaults import DRIFT_TOL_UNITS
from ._results import RESULTS, is_success, result_code, result_from_code, result_message, result_name, status_code
from .invariants import conservation_scale, conserved_quantities, identity_residual
from .losses import check_data, edge_loss_fn, gradient_fn
from .network import DAGNetwork
from .options import (
    OBJECTIVE_KEYWORDS,
    Objective,
    SaveTimes,
    SolverOptions,
    StopRules,
    as_objective,
    as_save_times,
    as_solver_options,
)
from .regularizers import get_regularizer
from .solvers import GradientFlowTerm, is_implicit

__all__ = [
    "Flow",
    "gradient_flow",
    "flow_field",
    "flow_potential",
    "trajectory_record",
    "ConservationReport",
    "check_conservation",
    "NoConservationLaw",
]


class Flow(eqx.Module):
    """The result of `gradient_flow`.

    **Fields:**

    - `ts`: saved times, shape `(T,)`. Times after an early stop are `inf`.
    - `thetas`: edge weights at `ts`, `(T, E)` (rows after an early stop are `inf`).
    - `losses`: data loss at `ts` (without regularizer), `(T,)`.
    - `conserved`: `c = B~ theta^2` at `ts`, `(T, H)`.
    - `expected`: what the law predicts for `c` at `ts`: `c(0)`, or
        `c(0) exp(-2 lambda t)` with weight decay `lambda`.
    - `drift`: `max_t max_v |c(t) - expected(t)|` over saved times and the final time.
    - `drift_relative`: `drift` divided by `conservation_scale` at time 0.
    - `t_final`, `theta_final`: where integration stopped (t1, or an early stop). After
        a failure, the last finite saved state, so finished work is never lost.
    - `loss_final`: the data loss at `theta_final`.
    - `result`: an `ij.RESULTS` item: `successful`, a stopping rule's member
        (`stopped_grad_norm`, ...), or the failure (`max_steps_reached`,
        `nonfinite_state`, ...) with a message saying the fix (`ij.result_message`).
        `ij.RESULTS` extends `diffrax.RESULTS` (same names and codes), so compare with
        `ij.RESULTS.max_steps_reached`, not `diffrax.RESULTS.max_steps_reached`: equinox
        refuses `==` between items of two enumerations (a `ValueError`);
        `ij.RESULTS.promote(item)` converts a diffrax item.
    - `stats`: diffrax's step statistics (`num_steps`, `num_accepted_steps`, ...).
    - `network`: the initial network (its graph and activation define the flow).
    - `rtol`, `atol`: the tolerances used.
    - `conservation_law`: whether a conservation law applies, so that `drift` measures
        the error of the integration: `True` for positively homogeneous activations
        (relu, leaky_relu, linear) without a regularizer (weight decay keeps the law:
        `expected` is `c(0) exp(-2 lambda t)`). `False` for other activations (tanh,
        softplus, ...) or with a regularizer: `conserved` and `drift` are then measured
        all the same, but nothing conserves `c`, and `gradient_flow` warns once per
        activation (`NoConservationLaw`).
    """

    ts: Float[Array, " T"]
    thetas: Float[Array, "T E"]
    losses: Float[Array, " T"]
    conserved: Float[Array, "T H"]
    expected: Float[Array, "T H"]
    drift: Float[Array, ""]
    drift_relative: Float[Array, ""]
    t_final: Float[Array, ""]
    theta_final: Float[Array, " E"]
    loss_final: Float[Array, ""]
    result: RESULTS
    stats: dict[str, Any]
    network: DAGNetwork
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    conservation_law: bool = eqx.field(static=True, default=True)

    @property
    def final(self) -> DAGNetwork:
        """The network at `t_final`."""
        return self.network.with_edge_weights(self.theta_final)

    @property
    def success(self) -> Bool[Array, "..."]:
        """True when integration reached `t1` or stopped on a stopping rule."""
        return is_success(self.result)

    @property
    def num_steps(self) -> Int[Array, "..."]:
        return self.stats["num_steps"]

    def network_at(self, i: int) -> DAGNetwork:
        """The network at saved time `ts[i]`."""
        return self.network.with_edge_weights(self.thetas[..., i, :])

    @classmethod
    def from_solution(
        cls,
        net: DAGNetwork,
        X,
        Y,
        sol,
        *,
        theta0,
        t0: float | Array = 0.0,
        loss="mse",
        weight_decay: float = 0.0,
        rtol: float,
        atol: float,
        result=None,
    ) -> Flow:
        """Build a `Flow` from a diffrax-like solution `sol` (fields `ts`, `ys`, `result`,
        `stats`) saved at the save times plus the final time (`SaveAt(ts=..., t1=True)`).
        `result` (a `RESULTS` item or code) replaces `sol.result` when given. The
        per-trajectory numbers come from `trajectory_record`."""
        ts_all, ys_all = sol.ts, sol.ys
        ts, thetas = ts_all[:-1], ys_all[:-1]
        t_final, theta_final = _final_state(ts_all, ys_all, t0, theta0)
        L = edge_loss_fn(net, X, Y, loss)
        valid = jnp.isfinite(ts) & jnp.all(jnp.isfinite(thetas), axis=-1)
        safe = jnp.where(valid[:, None], thetas, theta0)
        losses = jnp.where(valid, jax.vmap(L)(safe), jnp.inf)
        net0 = net.with_edge_weights(theta0)
        c0 = conserved_quantities(net0)
        conserved = conserved_quantities(net.with_edge_weights(safe))
        expected = c0[None, :] * _decay(weight_decay, jnp.where(valid, ts, t0), t0)[:, None]
        dev = jnp.where(valid[:, None], jnp.abs(conserved - expected), 0.0)
        rec = trajectory_record(
            net,
            X,
            Y,
            theta0=theta0,
            t_final=t_final,
            theta_final=theta_final,
            result=sol.result if result is None else result,
            stats=sol.stats,
            saved_drift=jnp.max(dev, initial=0.0),
            t0=t0,
            loss=loss,
            weight_decay=weight_decay,
        )
        return cls(
            ts=ts,
            thetas=thetas,
            losses=losses,
            conserved=jnp.where(valid[:, None], conserved, jnp.inf),
            expected=expected,
            drift=rec["drift"],
            drift_relative=rec["drift_relative"],
            t_final=t_final,
            theta_final=theta_final,
            loss_final=rec["loss_final"],
            result=result_from_code(rec["result"]),
            stats=dict(sol.stats),
            network=net0,
            rtol=float(rtol),
            atol=float(atol),
            conservation_law=bool(net.is_positively_homogeneous),
        )


def _final_state(ts_all, ys_all, t0, theta0):
    # diffrax leaves inf at unreached times (after a failure or a stop, the final state is
    # not in the last row): the last finite saved state.
    ok_all = jnp.isfinite(ts_all) & jnp.all(jnp.isfinite(ys_all), axis=-1)
    last = jnp.max(jnp.where(ok_all, jnp.arange(ts_all.shape[0]), 0))
    return jnp.where(ok_all[last], ts_all[last], t0), jnp.where(ok_all[last], ys_all[last], theta0)


def _decay(weight_decay, t, t0):
    return jnp.exp(-2.0 * weight_decay * (t - t0))


def trajectory_record(
    net: DAGNetwork,
    X: Float[Array, "N d_in"],
    Y: Float[Array, "N d_out"],
    *,
    theta0: Float[Array, " E"],
    t_final: Float[ArrayLike, ""],
    theta_final: Float[Array, " E"],
    result,
    stats: dict[str, Any],
    saved_drift: Float[ArrayLike, ""] = 0.0,
    t0: Float[ArrayLike, ""] = 0.0,
    loss: str | Callable = "mse",
    weight_decay: float = 0.0,
) -> dict[str, Array]:
    """The per-trajectory record of one flow: the numbers a `Flow` reports about its
    start and end, and one row of a `SweepResult`. `gradient_flow` and both sweep
    engines build their records with this function, so they agree by construction.

    **Arguments:**

    - `net`: a network of the flow's graph and activations (its weights are unused).
    - `X`, `Y`: the data.
    - `theta0`: the initial edge weights; `t_final`, `theta_final`: where the flow stopped.
    - `result`: the solver's outcome (a `RESULTS` or `diffrax.RESULTS` item, or a code).
    - `stats`: step counts (`num_steps`, `num_accepted_steps`, `num_rejected_steps`).
    - `saved_drift`: `max |c(t) - expected(t)|` over the save times (the final time is
        added here).
    - `t0`, `loss`, `weight_decay`: as in `gradient_flow`.

    **Returns:** a dict of arrays: `theta0`, `theta_final`, `t_final`, `c0`,
    `loss_initial`, `loss_final`, `drift`, `drift_relative`, `scale`, `num_steps`,
    `num_accepted_steps`, `num_rejected_steps`, `result` (int32 `RESULTS` code; a
    non-finite final weight, loss or gradient makes it `nonfinite_state`) and `status`
    (index into `ij.sweep.STATUSES`).
    """
    net0 = net.with_edge_weights(theta0)
    c0 = conserved_quantities(net0)
    dev_final = jnp.max(
        jnp.abs(conserved_quantities(net.with_edge_weights(theta_final)) - c0 * _decay(weight_decay, t_final, t0)),
        initial=0.0,
    )
    drift = jnp.maximum(saved_drift, dev_final)
    scale = conservation_scale(net0)
    L = edge_loss_fn(net, X, Y, loss)
    loss_final = L(theta_final)
    finite = (
        jnp.isfinite(loss_final) & jnp.all(jnp.isfinite(jax.grad(L)(theta_final))) & jnp.all(jnp.isfinite(theta_final))
    )
    code = jnp.where(finite, result_code(result), result_code(RESULTS.nonfinite_state))
    return dict(
        theta0=theta0,
        theta_final=theta_final,
        t_final=t_final,
        c0=c0,
        loss_initial=L(theta0),
        loss_final=loss_final,
        drift=drift,
        drift_relative=drift / jnp.where(scale > 0, scale, 1.0),
        scale=scale,
        num_steps=jnp.asarray(stats["num_steps"], jnp.int32),
        num_accepted_steps=jnp.asarray(stats["num_accepted_steps"], jnp.int32),
        num_rejected_steps=jnp.asarray(stats["num_rejected_steps"], jnp.int32),
        result=code,
        status=status_code(code),
    )


def flow_field(
    net: DAGNetwork,
    *,
    loss: str | Callable = "mse",
    weight_decay: float = 0.0,
    regularizer: Callable | None = None,
    strength: float = 0.0,
) -> Callable:
    """The gradient-flow vector field `(t, theta, (X, Y)) -> -(grad L + strength grad R +
    weight_decay theta)` of `gradient_flow`, in diffrax's `ODETerm` signature. Its
    Jacobian (an implicit solver's Newton matrix) comes from `ij.losses.gradient_fn`: one
    exact Hessian of the loss per Jacobian, structured for one-hidden-layer MSE networks."""

    def field(t, theta, args):
        X, Y = args
        g = gradient_fn(net, X, Y, loss)(theta)
        if regularizer is not None:
            g = g + strength * jax.grad(lambda th: regularizer(net.with_edge_weights(th)))(theta)
        return -(g + weight_decay * theta)

    return field


def flow_potential(
    net: DAGNetwork,
    *,
    loss: str | Callable = "mse",
    weight_decay: float = 0.0,
    regularizer: Callable | None = None,
    strength: float = 0.0,
) -> Callable:
    """The potential `(t, theta, (X, Y)) -> L + strength R + weight_decay |theta|^2 / 2`
    whose negative gradient is `flow_field`'s field (`ij.GradientFlowTerm` carries it)."""

    def potential(t, theta, args):
        X, Y = args
        v = edge_loss_fn(net, X, Y, loss)(theta)
        if regularizer is not None:
            v = v + strength * regularizer(net.with_edge_weights(theta))
        return v + weight_decay * jnp.sum(theta**2) / 2

    return potential


def gradient_flow(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    t1: float,
    *,
    t0: float | Array = 0.0,
    solver: str | diffrax.AbstractSolver | SolverOptions = "tsit5",
    rtol: float | None = None,
    atol: float | None = None,
    saveat: SaveTimes | ArrayLike | None = None,
    stop: StopRules | None = None,
    loss: str | Callable | Objective = "mse",
    throw: bool = False,
    **deprecated,
) -> Flow:
    """Integrate gradient flow from `net` over `[t0, t1]`.

    **Arguments:**

    - `net`: the initial `DAGNetwork`.
    - `X`, `Y`: data, `(N, d_in)` and `(N, d_out)` (1-D `Y` for one output).
    - `t1`: final time (gradient-flow time; see the module docstring).
    - `t0`: initial time. `t0` and `t1` may be traced JAX scalars (under `jit` or `vmap`, e.g.
        a run's own start); diffrax then checks `t0 <= t1` at run time, and `t0 == t1` takes no step.
    - `solver`: an `ij.SolverOptions` (solver, `rtol`, `atol`, `max_steps`, `dt0`,
        `stepsize_controller`), or just a solver (a name in `ij.SOLVERS` or a diffrax
        solver; default Tsit5) with the thin keywords `rtol`, `atol` (default 1e-8).
    - `saveat`: an `ij.SaveTimes`, or explicit save times in `[t0, t1]`; default
        `SaveTimes()` (101 linearly spaced times).
    - `stop`: an `ij.StopRules` (gradient norm, loss floor, parameter norm, wall time).
        A stop is a success with its own `RESULTS` member, and `t_final` is the end of the
        step at which the rule first held.
    - `loss`: what the flow minimizes: `"mse"`, `"bce"`, a callable `(pred, Y) -> scalar`,
        or an `ij.Objective` with weight decay `lambda` (the law becomes
        `c(t) = c(0) exp(-2 lambda t)`) or a regularizer `strength * R(net)` (no law;
        `drift` reports the deviation).
    - `throw`: raise on solver failure. Default `False`: a failure is recorded in
        `result`, so `vmap` over many initializations never aborts.

    Deprecated keywords (they warn, and give the same flow): `n_save` (pass
    `saveat=ij.SaveTimes(n_save=...)`), `weight_decay`, `regularizer`, `strength` (pass
    `loss=ij.Objective(loss, ...)`).

    **Returns:** a `Flow`.
    """
    kw = take_deprecated("gradient_flow", deprecated, FLOW_KEYWORDS)
    save = as_save_times(saveat, kw.pop("n_save", None))
    obj = as_objective(loss, **kw)
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    opts = as_solver_options(solver, rtol=rtol, atol=atol)
    stop = StopRules() if stop is None else stop
    if not isinstance(stop, StopRules):
        raise TypeError(f"stop must be an ij.StopRules; got {stop!r}.")
    X, Y = check_data(net.graph, X, Y)
    theta0 = _initial_weights(net, X.dtype)
    dtype = theta0.dtype
    ts = jnp.asarray(save.times(t0, t1), dtype=dtype)
    opts.check_dtype(dtype)
    reg = get_regularizer(obj.regularizer) if obj.regularizer is not None else None
    _warn_implicit_on_kinks(net, opts)
    law = bool(net.is_positively_homogeneous) and not obj.regularized
    if not law:
        warn_no_law(net, regularized=obj.regularized)
    flow = _solve(net, X, Y, theta0, ts, t0, t1, opts=opts, stop=stop, obj=obj, reg=reg, throw=throw)
    return dataclasses.replace(flow, rtol=float(opts.rtol), atol=float(opts.atol), conservation_law=law)


def _solve(net, X, Y, theta0, ts, t0, t1, *, opts: SolverOptions, stop: StopRules, obj: Objective, reg, throw) -> Flow:
    """`_gradient_flow` with the options unpacked, in the dtype of `theta0`."""
    dtype = theta0.dtype
    # t0, t1 and the tolerances enter the program as arrays, so a new horizon or tolerance
    # compiles nothing (a stepsize_controller given by the user is passed as it is)
    controller = opts.get_controller(dtype)
    return _gradient_flow(
        net,
        X,
        Y,
        theta0,
        ts,
        jnp.asarray(t0, dtype),
        jnp.asarray(t1, dtype),
        solver=opts.get_solver(),
        controller=controller,
        max_steps=opts.max_steps,
        dt0=opts.dt0,
        stop=stop,
        loss=obj.loss,
        weight_decay=obj.weight_decay,
        reg=reg,
        strength=obj.strength,
        throw=throw,
    )


FLOW_KEYWORDS = {**OBJECTIVE_KEYWORDS, "n_save": "pass saveat=ij.SaveTimes(n_save=...) instead"}
"""The deprecated keywords of `gradient_flow` and `kink_aware_flow`, with their replacements."""


def _initial_weights(net: DAGNetwork, data_dtype) -> Array:
    """`theta0` in the common dtype of the weights and the data, refused if not finite."""
    theta0 = net.edge_weights()
    theta0 = theta0.astype(jnp.result_type(theta0.dtype, data_dtype))
    return check_finite(theta0, "is not finite; re-initialize the network.", where="initial weight theta0[{index}] ")


def _warn_implicit_on_kinks(net: DAGNetwork, opts: SolverOptions) -> None:
    kinked = [a.name for a in net.activations if a.kinked]
    if kinked and is_implicit(opts.get_solver()):
        warnings.warn(
            f"An implicit solver on {kinked[0]} (a kinked activation): steps that straddle a kink "
            "cannot converge, so the step size collapses there. Use ij.kink_aware_flow(..., "
            "solver=...) for relu / leaky_relu, or an explicit solver such as 'tsit5'.",
            stacklevel=3,
        )


class NoConservationLaw(UserWarning):
    """`gradient_flow` on a network to which no conservation law applies: `Flow.drift`
    and `Flow.conserved` are measured, but nothing conserves `c = B~ theta^2`."""


_WARNED_NO_LAW: set = set()


def warn_no_law(net: DAGNetwork, *, regularized: bool = False) -> None:
    """Warn (once per process for each activation, or for a regularizer) that no
    conservation law applies to this flow (`NoConservationLaw`)."""
    names = tuple(sorted({a.name for a in net.activations if not a.positively_homogeneous}))
    key = ("regularizer",) if regularized and not names else names
    if key in _WARNED_NO_LAW:
        return
    _WARNED_NO_LAW.add(key)
    why = (
        f"activation(s) {list(names)} are not positively homogeneous" if names else "a regularizer is added to the loss"
    )
    warnings.warn(
        f"No conservation law applies to this flow ({why}): flow.drift and flow.conserved measure "
        "c = B~ theta^2, but nothing conserves it, so they are not integration errors "
        "(flow.conservation_law is False). Use relu, leaky_relu or linear, without a regularizer, "
        "for a law. Shown once per activation.",
        NoConservationLaw,
        stacklevel=3,
    )


@quick_compile
def _gradient_flow(
    net,
    X,
    Y,
    theta0,
    ts,
    t0,
    t1,
    *,
    solver,
    controller,
    max_steps: int,
    dt0,
    stop: StopRules,
    loss,
    weight_decay,
    reg,
    strength,
    throw: bool,
) -> Flow:
    """`gradient_flow` after its checks: one compiled program per configuration (graph,
    shapes, solver, step budget, stopping rules, loss; Python numbers are part of the
    configuration, arrays are not: weights, data, `t0`, `t1`, `rtol`, `atol`), reused by
    later calls. Under a wall-time rule the clock starts inside the program, so
    compilation is not timed. The returned `Flow`'s `rtol` / `atol` are NaN placeholders
    (static fields cannot hold traced values); `gradient_flow` fills them in."""
    field = flow_field(net, loss=loss, weight_decay=weight_decay, regularizer=reg, strength=strength)

    def rule_hits(t, y, args, clock_start):
        X, Y = args
        return stop.hits(
            t,
            y,
            gradient=lambda th: field(t, th, args) + weight_decay * th,
            loss=edge_loss_fn(net, X, Y, loss),
            clock_start=clock_start,
        )

    event = None
    if stop.enabled:
        start = stop.start_clock()
        event = diffrax.Event(lambda t, y, args, **kwargs: jnp.any(rule_hits(t, y, args, start)))
    potential = flow_potential(net, loss=loss, weight_decay=weight_decay, regularizer=reg, strength=strength)
    sol = diffrax.diffeqsolve(
        GradientFlowTerm(field, potential),
        solver,
        t0,
        t1,
        dt0,
        theta0,
        args=(X, Y),
        saveat=diffrax.SaveAt(ts=ts, t1=True),
        stepsize_controller=controller,
        max_steps=max_steps,
        event=event,
        throw=throw,
    )
    code = result_code(sol.result)
    if stop.enabled:
        # which rule stopped it: the same condition at the final state (without a clock,
        # the wall-time rule is the one left when no other holds there)
        t_end, y_end = _final_state(sol.ts, sol.ys, t0, theta0)
        hits = rule_hits(t_end, y_end, (X, Y), None).at[3].set(stop.max_wall_time is not None)
        event_code = result_code(RESULTS.event_occurred)
        code = jnp.where(code == event_code, StopRules.result_code(hits, event_code), code)
    return Flow.from_solution(
        net,
        X,
        Y,
        sol,
        theta0=theta0,
        t0=t0,
        loss=loss,
        weight_decay=weight_decay,
        rtol=float("nan"),
        atol=float("nan"),
        result=code,
    )


# ------------------------------------------------------------------ conservation check


@eqx.filter_jit
def _check_run(nets, X, Y, t1, opts, loss):
    """The flows of `check_conservation`, vmapped: one compiled program per configuration."""

    def one(n):
        f = gradient_flow(n, X, Y, t1, solver=opts, saveat=SaveTimes(n_save=21), loss=loss)
        res = identity_residual(n, X, Y, loss=loss, relative=True)
        return (
            f.drift,
            f.drift_relative,
            conservation_scale(n),
            jnp.max(jnp.abs(res)),
            f.stats["num_steps"],
            f.losses[0],
            f.loss_final,
            result_code(f.result),
        )

    return eqx.filter_vmap(one)(nets)


class ConservationReport(eqx.Module):
    """Per-trajectory conservation check (see `check_conservation`).

    **Fields** (each of shape `(n_inits,)`): `drift`, `drift_relative`, `drift_in_tol`
    (drift divided by `atol + rtol * scale`), `identity_residual` (max relative
    `|B~ (theta * grad L)|` at time 0), `num_steps`, `loss_initial`, `loss_final`,
    `result` (`RESULTS`: the flow's result, or `drift_exceeded` when a successful flow
    drifted by more than 100 tolerance units; only where a law applies). Also `rtol`,
    `atol`, `homogeneous` (whether the law is expected to hold: without it, the table's
    rows say `no law` and drift is not judged).
    """

    drift: np.ndarray
    drift_relative: np.ndarray
    drift_in_tol: np.ndarray
    identity_residual: np.ndarray
    num_steps: np.ndarray
    loss_initial: np.ndarray
    loss_final: np.ndarray
    result: RESULTS
    rtol: float
    atol: float
    homogeneous: bool

    @property
    def success(self) -> np.ndarray:
        """Per trajectory: the flow succeeded and drifted by at most 100 tolerance units."""
        return np.asarray(is_success(self.result))

    @property
    def passed(self) -> bool:
        """All trajectories succeeded and drifted by at most 100 tolerance units."""
        return bool(np.all(self.success))

    def table(self) -> str:
        head = f"{'init':>4} {'status':>8} {'steps':>7} {'loss0':>10} {'loss1':>10} {'drift':>9} {'drift/tol':>9} {'identity':>9}"
        lines = [head, "-" * len(head)]
        ok = self.success
        for i in range(len(self.drift)):
            st = ("ok" if self.homogeneous else "no law") if ok[i] else "FAILED"
            lines.append(
                f"{i:>4} {st:>8} {int(self.num_steps[i]):>7d} {self.loss_initial[i]:>10.3e} "
                f"{self.loss_final[i]:>10.3e} {self.drift[i]:>9.1e} {self.drift_in_tol[i]:>9.2f} "
                f"{self.identity_residual[i]:>9.1e}"
            )
        for code in np.unique(np.asarray(result_code(self.result))[~ok]):
            lines.append(f"{result_name(code)}: {result_message(code)}")
        return "\n".join(lines)


def check_conservation(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    t1: float = 1.0,
    solver: str | diffrax.AbstractSolver | SolverOptions = "tsit5",
    rtol: float | None = None,
    atol: float | None = None,
    loss: str = "mse",
    force: bool = False,
) -> ConservationReport:
    """Run gradient flow from each network in a batch and measure the drift of `c`.

    **Arguments:**

    - `net`: a `DAGNetwork`, or a batch of them (leading axis on `weights`, as
        made by `eqx.filter_vmap`).
    - `X`, `Y`: data.
    - `t1`, `solver`, `loss`: as in `gradient_flow`; `rtol`, `atol` default to 1e-10 here.
    - `force`: measure even when the activation is not positively homogeneous (then the
        law is not expected to hold, and the report says so).

    **Returns:** a `ConservationReport`.
    """
    nets = net
    if not nets.is_positively_homogeneous and not force:
        names = [a.name for a in nets.activations if not a.positively_homogeneous]
        raise ValueError(
            f"Activation(s) {names} are not positively homogeneous, so c = B~ theta^2 is not "
            "conserved and there is nothing to check. Use relu, leaky_relu or linear, or "
            "pass force=True to measure the drift anyway (invariant-jax check: --force)."
        )
    if not isinstance(solver, SolverOptions):
        solver = as_solver_options(solver, rtol=1e-10 if rtol is None else rtol, atol=1e-10 if atol is None else atol)
        rtol = atol = None
    opts = as_solver_options(solver, rtol=rtol, atol=atol)
    if nets.weights.ndim == 2:
        nets = jax.tree.map(lambda a: a[None], nets)
    X, Y = check_data(nets.graph, X, Y)

    d, dr, scale, idr, steps, l0, l1, code = (np.asarray(a) for a in _check_run(nets, X, Y, t1, opts, loss))
    drift_in_tol = d / (opts.atol + opts.rtol * scale)
    ok = np.asarray(is_success(code))
    if nets.is_positively_homogeneous:  # without a law (force=True), drift is measured, not judged
        code = np.where(ok & ~(drift_in_tol <= DRIFT_TOL_UNITS), int(result_code(RESULTS.drift_exceeded)), code)
    return ConservationReport(
        drift=d,
        drift_relative=dr,
        drift_in_tol=drift_in_tol,
        identity_residual=idr,
        num_steps=steps,
        loss_initial=l0,
        loss_final=l1,
        result=result_from_code(code),
        rtol=float(opts.rtol),
        atol=float(opts.atol),
        homogeneous=nets.is_positively_homogeneous,
    )
