"""Exact gradient flow `dtheta/dt = -grad L(theta)` with diffrax, and the conservation
check built on it.

Time is the gradient-flow time of the loss as normalised in `losses` (MSE is
`(1/2N) sum ||f - y||^2`); an Euler step of size `dt` is gradient descent with learning
rate `dt`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .invariants import conservation_scale, conserved_quantities, identity_residual
from .losses import check_data, edge_loss_fn, get_loss
from .network import DAGNetwork
from .regularizers import get_regularizer

__all__ = [
    "Flow",
    "gradient_flow",
    "get_solver",
    "log_times",
    "SOLVERS",
    "ConservationReport",
    "check_conservation",
    "status_message",
    "save_times",
]

SOLVERS: dict[str, Callable[[], diffrax.AbstractSolver]] = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
    "heun": diffrax.Heun,
    "euler": diffrax.Euler,
}


def get_solver(solver: str | diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """A diffrax solver instance, by name (see `SOLVERS`) or passed through."""
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    if isinstance(solver, str):
        key = solver.lower()
        if key in SOLVERS:
            return SOLVERS[key]()
        try:  # solvers registered by other modules (e.g. Gauss-Legendre)
            from . import solvers as _s  # noqa: F401

            if key in SOLVERS:
                return SOLVERS[key]()
        except ImportError:
            pass
    raise ValueError(f"Unknown solver {solver!r}; choose one of {sorted(SOLVERS)} or pass a diffrax solver.")


def log_times(t0: float, t1: float, n: int, *, first: float | None = None) -> np.ndarray:
    """`n` save times: `t0`, then `n - 1` log-spaced times from `t0 + first` to `t1`
    (`first` defaults to `(t1 - t0) * 1e-6`)."""
    if n < 2:
        raise ValueError(f"log_times needs n >= 2; got {n}.")
    first = (t1 - t0) * 1e-6 if first is None else first
    return np.concatenate([[t0], t0 + np.geomspace(first, t1 - t0, n - 1)])


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
    - `result`: a `diffrax.RESULTS`; `successful` or `event_occurred` are fine.
    - `stats`: diffrax's step statistics (`num_steps`, `num_accepted_steps`, ...).
    - `network`: the initial network (its graph and activation define the flow).
    - `rtol`, `atol`: the tolerances used.
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
    result: diffrax.RESULTS
    stats: dict[str, Any]
    network: DAGNetwork
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)

    @property
    def final(self) -> DAGNetwork:
        """The network at `t_final`."""
        return self.network.with_edge_weights(self.theta_final)

    @property
    def success(self) -> Bool[Array, "..."]:
        """True when integration reached `t1` or stopped on its stopping rule."""
        return (self.result == diffrax.RESULTS.successful) | (
            self.result == diffrax.RESULTS.event_occurred
        )

    @property
    def num_steps(self) -> Int[Array, "..."]:
        return self.stats["num_steps"]

    def network_at(self, i: int) -> DAGNetwork:
        """The network at saved time `ts[i]`."""
        return self.network.with_edge_weights(self.thetas[..., i, :])


_CLOCK0 = __import__("time").monotonic()
_OK_CODES = (diffrax.RESULTS.successful._value, diffrax.RESULTS.event_occurred._value)


def status_message(result) -> str:
    """`""` for a successful (or stopped-by-rule) solve, else diffrax's message, which
    says how to fix it. Accepts a `RESULTS` item or its integer code."""
    code = int(getattr(result, "_value", result))
    if code in _OK_CODES:
        return ""
    return diffrax.RESULTS._index_to_message[code]


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_time_span(t0, t1):
    if not np.isfinite(t1) or not np.isfinite(t0) or t1 <= t0:
        raise ValueError(f"Need finite t0 < t1; got t0={t0!r}, t1={t1!r}.")


def save_times(t0: float, t1: float, *, saveat=None, n_save: int = 101, spacing: str = "linear") -> np.ndarray:
    """The save times of a flow: `saveat` (validated: non-empty, 1-D, non-decreasing,
    within `[t0, t1]`), or `n_save` times spaced `"linear"` or `"log"` (`log_times`)."""
    _check_time_span(t0, t1)
    if saveat is None:
        if spacing == "linear":
            return np.linspace(t0, t1, n_save)
        if spacing == "log":
            return log_times(t0, t1, n_save)
        raise ValueError(f"spacing must be 'linear' or 'log'; got {spacing!r}.")
    ts = np.asarray(saveat, dtype=float)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"saveat must be a non-empty 1-D array of times; got shape {ts.shape}.")
    if ts.min() < t0 or ts.max() > t1 or np.any(np.diff(ts) < 0):
        raise ValueError(f"saveat must be non-decreasing within [t0, t1] = [{t0}, {t1}].")
    return ts


def _check_tolerances(rtol, atol, dtype):
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number; got {v!r}.")
    eps = float(jnp.finfo(dtype).eps)
    if rtol < 10 * eps:
        hint = " Enable float64 with jax.config.update('jax_enable_x64', True)." if eps > 1e-10 else ""
        raise ValueError(
            f"rtol={rtol:g} is tighter than {np.dtype(dtype).name} can honour (10 eps = "
            f"{10 * eps:.1e}). Loosen rtol.{hint}"
        )


def _vector_field(net: DAGNetwork, loss, weight_decay, regularizer, strength):
    def field(t, theta, args):
        X, Y = args
        g = jax.grad(edge_loss_fn(net, X, Y, loss))(theta)
        if regularizer is not None:
            g = g + strength * jax.grad(lambda th: regularizer(net.with_edge_weights(th)))(theta)
        return -(g + weight_decay * theta)

    return field


def gradient_flow(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    t1: float,
    *,
    t0: float = 0.0,
    solver: str | diffrax.AbstractSolver = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-8,
    saveat: ArrayLike | None = None,
    n_save: int = 101,
    spacing: str = "linear",
    max_steps: int = 100_000,
    dt0: float | None = None,
    loss: str | Callable = "mse",
    weight_decay: float = 0.0,
    regularizer: str | Callable | None = None,
    strength: float = 0.0,
    grad_norm_tol: float | None = None,
    loss_floor: float | None = None,
    max_param_norm: float | None = None,
    max_wall_time: float | None = None,
    throw: bool = False,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
) -> Flow:
    """Integrate gradient flow from `net` over `[t0, t1]`.

    **Arguments:**

    - `net`: the initial `DAGNetwork`.
    - `X`, `Y`: data, `(N, d_in)` and `(N, d_out)` (1-D `Y` for one output).
    - `t1`: final time (gradient-flow time; see the module docstring).
    - `t0`: initial time.
    - `solver`: a diffrax solver or a name in `SOLVERS` (default Tsit5).
    - `rtol`, `atol`: tolerances of the `PIDController`.
    - `saveat`: explicit save times in `[t0, t1]`; otherwise `n_save` times spaced
        `"linear"` or `"log"` (see `log_times`).
    - `max_steps`: diffrax's step budget.
    - `dt0`: initial step (default: chosen by diffrax).
    - `loss`: `"mse"`, `"bce"` or a callable `(pred, Y) -> scalar`.
    - `weight_decay`: `lambda` of the penalty `(lambda/2) ||theta||^2`; the law becomes
        `c(t) = c(0) exp(-2 lambda t)`.
    - `regularizer`, `strength`: an extra penalty `strength * R(net)` (a name in
        `regularizers` or a callable). Conservation does not hold; `drift` reports it.
    - `grad_norm_tol`: stop early once `|grad| < grad_norm_tol` (a diffrax `Event`).
    - `loss_floor`: stop early once the data loss falls below `loss_floor`.
    - `max_param_norm`: stop early once `||theta|| > max_param_norm` (e.g. a flow
        running off into a flat channel).
    - `max_wall_time`: stop early after this many seconds of wall-clock time. Checked
        at every step by a host callback (`jax.pure_callback` reading
        `time.monotonic()`; the start time is read by a callback when the solve
        starts, so it also works under `jit`/`vmap`). All stopping rules are boolean
        diffrax `Event` conditions combined with "any"; a stop reports
        `RESULTS.event_occurred` and `t_final` is the end of the step that triggered it.
    - `throw`: raise on solver failure. Default `False`: a failure is recorded in
        `result`, so `vmap` over many initializations never aborts.
    - `stepsize_controller`: override the default `PIDController(rtol, atol)`.

    **Returns:** a `Flow`.
    """
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    X, Y = check_data(net.graph, X, Y)
    theta0 = net.edge_weights()
    dtype = jnp.result_type(theta0.dtype, X.dtype)
    theta0 = theta0.astype(dtype)
    if _is_concrete(theta0) and not bool(jnp.all(jnp.isfinite(theta0))):
        bad = int(np.flatnonzero(~np.isfinite(np.asarray(theta0)))[0])
        raise ValueError(f"Initial weight of edge {net.graph.edges[bad]!r} is not finite; re-initialize.")
    _check_time_span(t0, t1)
    _check_tolerances(rtol, atol, dtype)
    for name, v in (("weight_decay", weight_decay), ("strength", strength)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0; got {v!r}.")
    if grad_norm_tol is not None and not (np.isfinite(grad_norm_tol) and grad_norm_tol > 0):
        raise ValueError(f"grad_norm_tol must be positive; got {grad_norm_tol!r}.")
    for name, v in (("loss_floor", loss_floor), ("max_param_norm", max_param_norm),
                    ("max_wall_time", max_wall_time)):
        if v is not None and not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number (or None); got {v!r}.")
    if max_steps is None or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer; got {max_steps!r}.")
    get_loss(loss)
    reg = get_regularizer(regularizer) if regularizer is not None else None

    ts = jnp.asarray(save_times(t0, t1, saveat=saveat, n_save=n_save, spacing=spacing), dtype=dtype)
    kinked = [a.name for a in net.activations if a.kinked]
    from .solvers import GaussLegendre  # noqa: PLC0415 (solvers imports flow)

    if kinked and isinstance(get_solver(solver), (diffrax.AbstractImplicitSolver, GaussLegendre)):
        warnings.warn(
            f"An implicit solver on {kinked[0]} (a kinked activation): steps that straddle a kink "
            "cannot converge, so the step size collapses there. Use ij.kink_aware_flow(..., "
            "solver=...) for relu / leaky_relu, or an explicit solver such as 'tsit5'.",
            stacklevel=2,
        )

    field = _vector_field(net, loss, weight_decay, reg, strength)
    event = None
    if grad_norm_tol is not None:

        def cond_fn(t, y, args, **kwargs):
            return jnp.linalg.norm(field(t, y, args) + weight_decay * y) < grad_norm_tol

        event = diffrax.Event(cond_fn)
    controller = stepsize_controller or diffrax.PIDController(rtol=rtol, atol=atol)

    def _solve(theta0, X, Y, ts):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            get_solver(solver),
            t0,
            t1,
            dt0,
            theta0,
            args=(X, Y),
            saveat=diffrax.SaveAt(ts=ts, t1=True),
            stepsize_controller=controller,
            max_steps=max_steps,
            event=_stopping_rules(event, net, loss, loss_floor, max_param_norm, max_wall_time),
            throw=throw,
        )

    # with a wall-time limit, compile the solve with its clock start so compilation is not timed
    sol = (eqx.filter_jit(_solve) if max_wall_time is not None else _solve)(theta0, X, Y, ts)
    return _make_flow(net, X, Y, loss, weight_decay, sol, rtol, atol, theta0, t0)


def _stopping_rules(event, net, loss, loss_floor, max_param_norm, max_wall_time):
    """Add the loss-floor, parameter-norm and wall-time rules to `event` (any triggers)."""
    conds = [] if event is None else [event.cond_fn]
    if loss_floor is not None:

        def below_floor(t, y, args, **kwargs):
            X, Y = args
            return edge_loss_fn(net, X, Y, loss)(y) < loss_floor

        conds.append(below_floor)
    if max_param_norm is not None:
        conds.append(lambda t, y, args, **kwargs: jnp.linalg.norm(y) > max_param_norm)
    if max_wall_time is not None:
        import time

        fdt = jnp.zeros(()).dtype  # float64 when x64 is on; clock read relative to import
        clock = lambda: np.asarray(time.monotonic() - _CLOCK0, fdt)  # noqa: E731
        start = jax.pure_callback(clock, jax.ShapeDtypeStruct((), fdt), vmap_method="broadcast_all")

        def too_long(t, y, args, **kwargs):
            # `t` is an operand so the callback is not hoisted out of the step loop
            def over(t_, s):
                return np.asarray(clock() - np.asarray(s) > max_wall_time)

            return jax.pure_callback(over, jax.ShapeDtypeStruct(jnp.shape(t), jnp.bool_), t, start,
                                     vmap_method="broadcast_all")

        conds.append(too_long)
    if not conds:
        return None
    return diffrax.Event(conds[0] if len(conds) == 1 else conds)


def _make_flow(net, X, Y, loss, weight_decay, sol, rtol, atol, theta0, t0) -> Flow:
    ts_all, ys_all = sol.ts, sol.ys
    ts, thetas = ts_all[:-1], ys_all[:-1]
    # On failure diffrax leaves inf at unreached times: fall back to the last saved state.
    ok_all = jnp.isfinite(ts_all) & jnp.all(jnp.isfinite(ys_all), axis=-1)
    last = jnp.max(jnp.where(ok_all, jnp.arange(ts_all.shape[0]), 0))
    t_final = jnp.where(ok_all[last], ts_all[last], t0)
    theta_final = jnp.where(ok_all[last], ys_all[last], theta0)
    L = edge_loss_fn(net, X, Y, loss)
    valid = jnp.isfinite(ts) & jnp.all(jnp.isfinite(thetas), axis=-1)
    safe = jnp.where(valid[:, None], thetas, theta0)
    losses = jnp.where(valid, jax.vmap(L)(safe), jnp.inf)
    net0 = net.with_edge_weights(theta0)
    c0 = conserved_quantities(net0)
    conserved = conserved_quantities(net.with_edge_weights(safe))
    decay = lambda t: jnp.exp(-2.0 * weight_decay * (t - t0))  # noqa: E731
    expected = c0[None, :] * decay(jnp.where(valid, ts, t0))[:, None]
    dev = jnp.where(valid[:, None], jnp.abs(conserved - expected), 0.0)
    c_final = conserved_quantities(net.with_edge_weights(theta_final))
    dev_final = jnp.abs(c_final - c0 * decay(t_final))
    drift = jnp.maximum(jnp.max(dev, initial=0.0), jnp.max(dev_final, initial=0.0))
    scale = conservation_scale(net0)
    drift_rel = drift / jnp.where(scale > 0, scale, 1.0)
    return Flow(
        ts=ts,
        thetas=thetas,
        losses=losses,
        conserved=jnp.where(valid[:, None], conserved, jnp.inf),
        expected=expected,
        drift=drift,
        drift_relative=drift_rel,
        t_final=t_final,
        theta_final=theta_final,
        loss_final=L(theta_final),
        result=sol.result,
        stats=dict(sol.stats),
        network=net0,
        rtol=float(rtol),
        atol=float(atol),
    )


# ------------------------------------------------------------------ conservation check


class ConservationReport(eqx.Module):
    """Per-trajectory conservation check (see `check_conservation`).

    **Fields** (each of shape `(n_inits,)`): `drift`, `drift_relative`, `drift_in_tol`
    (drift divided by `atol + rtol * scale`), `identity_residual` (max relative
    `|B~ (theta * grad L)|` at time 0), `num_steps`, `loss_initial`, `loss_final`,
    `status` (diffrax result messages, `""` = success). Also `rtol`, `atol`,
    `homogeneous` (whether the law is expected to hold).
    """

    drift: np.ndarray
    drift_relative: np.ndarray
    drift_in_tol: np.ndarray
    identity_residual: np.ndarray
    num_steps: np.ndarray
    loss_initial: np.ndarray
    loss_final: np.ndarray
    status: tuple[str, ...]
    rtol: float
    atol: float
    homogeneous: bool

    @property
    def passed(self) -> bool:
        """All trajectories succeeded and drifted by at most 100 tolerance units."""
        return bool(all(s == "" for s in self.status) and np.all(self.drift_in_tol <= 100.0))

    def table(self) -> str:
        head = f"{'init':>4} {'status':>8} {'steps':>7} {'loss0':>10} {'loss1':>10} {'drift':>9} {'drift/tol':>9} {'identity':>9}"
        lines = [head, "-" * len(head)]
        for i in range(len(self.drift)):
            st = "ok" if self.status[i] == "" else "FAILED"
            lines.append(
                f"{i:>4} {st:>8} {int(self.num_steps[i]):>7d} {self.loss_initial[i]:>10.3e} "
                f"{self.loss_final[i]:>10.3e} {self.drift[i]:>9.1e} {self.drift_in_tol[i]:>9.2f} "
                f"{self.identity_residual[i]:>9.1e}"
            )
        return "\n".join(lines)


def check_conservation(
    net_or_nets: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    t1: float = 1.0,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    solver: str | diffrax.AbstractSolver = "tsit5",
    loss: str = "mse",
    max_steps: int = 100_000,
    force: bool = False,
) -> ConservationReport:
    """Run gradient flow from each network in a batch and measure the drift of `c`.

    **Arguments:**

    - `net_or_nets`: a `DAGNetwork`, or a batch of them (leading axis on `weights`, as
        made by `eqx.filter_vmap`).
    - `X`, `Y`: data.
    - `t1`, `rtol`, `atol`, `solver`, `loss`, `max_steps`: as in `gradient_flow`.
    - `force`: measure even when the activation is not positively homogeneous (then the
        law is not expected to hold, and the report says so).

    **Returns:** a `ConservationReport`.
    """
    nets = net_or_nets
    if not nets.is_positively_homogeneous and not force:
        names = [a.name for a in nets.activations if not a.positively_homogeneous]
        raise ValueError(
            f"Activation(s) {names} are not positively homogeneous, so c = B~ theta^2 is not "
            "conserved and there is nothing to check. Use relu, leaky_relu or linear, or "
            "pass force=True to measure the drift anyway."
        )
    if nets.weights.ndim == 2:
        nets = jax.tree.map(lambda a: a[None], nets)
    X, Y = check_data(nets.graph, X, Y)

    @eqx.filter_jit
    def run(nets):
        def one(n):
            f = gradient_flow(n, X, Y, t1, rtol=rtol, atol=atol, solver=solver, loss=loss,
                              max_steps=max_steps, n_save=21)
            res = identity_residual(n, X, Y, loss=loss, relative=True)
            return f.drift, f.drift_relative, conservation_scale(n), jnp.max(jnp.abs(res)), \
                f.stats["num_steps"], f.losses[0], f.loss_final, f.result._value

        return eqx.filter_vmap(one)(nets)

    d, dr, scale, idr, steps, l0, l1, res = (np.asarray(a) for a in run(nets))
    status = tuple(status_message(r) for r in res)
    return ConservationReport(
        drift=d,
        drift_relative=dr,
        drift_in_tol=d / (atol + rtol * scale),
        identity_residual=idr,
        num_steps=steps,
        loss_initial=l0,
        loss_final=l1,
        status=status,
        rtol=float(rtol),
        atol=float(atol),
        homogeneous=nets.is_positively_homogeneous,
    )
