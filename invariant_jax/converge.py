"""The second-order convergence phase after a flow: trust-region Newton with the exact
Hessian, batched over many initializations.

This is the second half of MLPGradientFlow.jl's `train` (the tool the flat-channels
paper used): after an ODE phase (here `gradient_flow` / `sweep_flows` with an implicit
solver), a Newton-type optimiser walks the rest of the way, to a finite minimum or down
a flat channel until the weights reach `maxnorm`. Along a channel the gradient-flow
norm grows like a small power of `t`, so a flow alone never gets far; the Newton phase
does.

The optimiser is optimistix's (`ClassicalTrustRegion` search, `DampedNewtonDescent`:
`(H + lambda I) p = -g` with `lambda = 1/radius`, i.e. Levenberg-Marquardt-damped
Newton), fed the exact Hessian of the loss by `jax.hessian` with its eigenvalues
replaced by their absolute values (a convex model, so every accepted step descends; the
paper's optimiser, Optim.jl's `Newton`, likewise makes the Hessian positive definite
before each step). Nothing of the optimiser is hand-written here, only the stopping
rules of MLPGradientFlow:

- `"gradient"`: `max |grad L| <= g_tol`;
- `"patience"`: the best loss has not improved for `patience` iterations;
- `"maxnorm"`: `weightnorm(theta) = sum(theta^2) / (2 len(theta)) >= maxnorm`
  (MLPGradientFlow's definition; the paper counts such a run as "infinite");
- `"max_steps"`, `"max_time"` (wall clock, checked between chunks of iterations);
- `"nonfinite"`: a non-finite loss or gradient.

Every run returns its best point (lowest loss seen), as MLPGradientFlow does. Losses
use this package's convention `L = (1/2N) sum ||f - y||^2`; MLPGradientFlow reports
`(1/N) sum ||f - y||^2 = 2 L`.
"""

from __future__ import annotations

import time
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import Array, Bool, Float, Int

from ._results import RESULTS, result_code, result_from_code, status_code
from .flow import gradient_flow
from .losses import check_data, edge_loss_fn, hessian_fn
from .network import DAGNetwork
from .options import SolverOptions, StopRules
from .sweep import sweep_flows

__all__ = ["STOP_REASONS", "weightnorm", "ConvergeResult", "newton_phase", "flow_then_newton"]

STOP_REASONS = ("running", "gradient", "patience", "maxnorm", "max_steps", "max_time", "nonfinite")
"""Names of the integer `stopped_by` codes of a `ConvergeResult`. `"gradient"`,
`"patience"` and `"maxnorm"` count as success (a converged finite point, a run stuck at
its best loss, or a run counted infinite); the rest are budgets or failures: raise
`max_steps` / `max_time`, or look at the data for `"nonfinite"`."""
_RUNNING, _GRAD, _PATIENCE, _MAXNORM, _MAXSTEPS, _MAXTIME, _NONFINITE = range(7)


def weightnorm(theta: Float[Array, "... E"]) -> Float[Array, "..."]:
    """MLPGradientFlow's `weightnorm(x) = sum(x^2) / (2 length(x))` (half the mean
    square, not the Euclidean norm). The paper counts a run infinite when it is >= 1e3."""
    theta = jnp.asarray(theta)
    return jnp.sum(theta**2, axis=-1) / (2 * theta.shape[-1])


class ConvergeResult(eqx.Module):
    """Result of `newton_phase` / `flow_then_newton`; arrays have a leading batch axis.

    **Fields:**

    - `theta`: the best point of each run (edge weights, `graph.edges` order);
    - `loss`: `L(theta)` (`(1/2N) sum ||f - y||^2`); `grad_norm`: `max |grad L|`;
    - `weightnorm`: `sum(theta^2) / (2 E)`; `n_steps`: Newton iterations;
    - `stopped_by`: index into `STOP_REASONS`; `reason` gives the names;
    - `theta_flow`, `loss_flow`, `t_flow`, `flow_status` (sweep status codes, see
      `ij.sweep.STATUSES`): the state after the flow phase (equal to the start of the
      Newton phase; NaN / -1 when there was no flow phase);
    - `wall_time`: seconds of the Newton phase (all runs together, compilation
      included); `settings`: the options used.
    """

    theta: Float[Array, "B E"]
    loss: Float[Array, " B"]
    grad_norm: Float[Array, " B"]
    weightnorm: Float[Array, " B"]
    n_steps: Int[Array, " B"]
    stopped_by: Int[Array, " B"]
    theta_flow: Float[Array, "B E"]
    loss_flow: Float[Array, " B"]
    t_flow: Float[Array, " B"]
    flow_status: Int[Array, " B"]
    wall_time: float
    settings: dict = eqx.field(static=True)

    @property
    def reason(self) -> tuple[str, ...]:
        return tuple(STOP_REASONS[int(k)] for k in np.asarray(self.stopped_by))

    @property
    def success(self) -> Bool[Array, " B"]:
        return jnp.isin(self.stopped_by, jnp.array([_GRAD, _PATIENCE, _MAXNORM]))

    @property
    def result(self):
        """The stopping reasons as an `ij.RESULTS` item (one code per run; `ij.result_name`
        names them): gradient -> `stopped_grad_norm`, maxnorm -> `stopped_param_norm`,
        max_time -> `stopped_wall_time`, max_steps -> `max_steps_reached`, nonfinite ->
        `nonfinite_state`, patience -> `successful` (converged to its best loss)."""
        table = [RESULTS.successful, RESULTS.stopped_grad_norm, RESULTS.successful, RESULTS.stopped_param_norm,
                 RESULTS.max_steps_reached, RESULTS.stopped_wall_time, RESULTS.nonfinite_state]
        codes = jnp.stack([result_code(r) for r in table]).astype(jnp.int32)
        return result_from_code(codes[self.stopped_by])

    @property
    def infinite(self) -> Bool[Array, " B"]:
        """The paper's criterion: `weightnorm >= maxnorm`."""
        return self.weightnorm >= self.settings["maxnorm"]

    def table(self) -> str:
        reasons = np.array(self.reason)
        rows = [f"{'stopped by':>10} {'runs':>5} {'median loss':>12} {'median steps':>12}"]
        for r in STOP_REASONS:
            m = reasons == r
            if m.any():
                rows.append(f"{r:>10} {int(m.sum()):>5} {np.median(np.asarray(self.loss)[m]):>12.4e} "
                            f"{np.median(np.asarray(self.n_steps)[m]):>12.0f}")
        return "\n".join(rows)


class _ExactNewton(optx.AbstractQuasiNewton):
    """optimistix's quasi-Newton machinery with the quasi-Newton update replaced by the
    exact Hessian (`hess_fn`)."""

    rtol: float
    atol: float
    norm: Callable
    descent: optx.DampedNewtonDescent
    search: optx.ClassicalTrustRegion
    verbose: Callable
    hess_fn: Callable
    use_inverse: bool = False

    def init_hessian(self, y, f, grad):
        H = lx.MatrixLinearOperator(jnp.zeros((y.size, y.size), y.dtype), lx.positive_semidefinite_tag)
        return optx.FunctionInfo.EvalGradHessian(f, grad, H), None

    def update_hessian(self, y, y_eval, f_info, f_eval_info, hessian_update_state):
        # as Optim.jl's Newton (PositiveFactorizations) in MLPGradientFlow, make the model
        # convex: |eigenvalues| ("saddle-free Newton"), so every step is a descent step
        lam, V = jnp.linalg.eigh(self.hess_fn(y_eval))
        H = lx.MatrixLinearOperator((V * jnp.abs(lam)) @ V.T, lx.positive_semidefinite_tag)
        return optx.FunctionInfo.EvalGradHessian(f_eval_info.f, f_eval_info.grad, H), None


def _solver(hess_fn):
    return _ExactNewton(
        rtol=0.0, atol=0.0, norm=optx.max_norm, verbose=lambda **kw: None, hess_fn=hess_fn,
        descent=optx.DampedNewtonDescent(linear_solver=lx.AutoLinearSolver(well_posed=False)),
        search=optx.ClassicalTrustRegion(),
    )


class _Run(eqx.Module):
    y: Array
    state: eqx.Module
    best_y: Array
    best_f: Array
    best_k: Array
    k: Array
    reason: Array


def _problem(net, X, Y, loss):
    L = edge_loss_fn(net, X, Y, loss)
    return (lambda y, args: (L(y), None)), hessian_fn(net, X, Y, loss)


@eqx.filter_jit
def _start(net, X, Y, theta0, loss):
    fn, hess = _problem(net, X, Y, loss)
    solver = _solver(hess)
    f_struct = jax.ShapeDtypeStruct((), theta0.dtype)

    def one(y0):
        state = solver.init(fn, y0, None, {}, f_struct, None, frozenset())
        return _Run(y=y0, state=state, best_y=y0, best_f=jnp.asarray(jnp.inf, y0.dtype),
                    best_k=jnp.array(0), k=jnp.array(0), reason=jnp.array(_RUNNING))

    return jax.vmap(one)(theta0)


@eqx.filter_jit
def _advance(net, X, Y, runs, n_iter, loss, g_tol, patience, maxnorm, max_steps, rel_improve):
    fn, hess = _problem(net, X, Y, loss)
    solver = _solver(hess)

    def one(run):
        def cond(c):
            r, i = c
            return (i < n_iter) & (r.reason == _RUNNING)

        def body(c):
            r, i = c
            y, state, _ = solver.step(fn, r.y, None, {}, r.state, frozenset())
            info = state.f_info  # at the last accepted point y
            f, g = info.f, info.grad
            k = r.k + 1
            finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(g)) & jnp.all(jnp.isfinite(y))
            better = finite & ((r.k == 0) | (f < r.best_f - rel_improve * jnp.abs(r.best_f)))
            best_y = jnp.where(better, y, r.best_y)
            best_f = jnp.where(better, f, r.best_f)
            best_k = jnp.where(better, k, r.best_k)
            wn = jnp.sum(y**2) / (2 * y.size)
            gmax = jnp.max(jnp.abs(g))
            reason = jnp.where(~finite, _NONFINITE,
                     jnp.where(wn >= maxnorm, _MAXNORM,
                     jnp.where((k > 1) & (gmax <= g_tol), _GRAD,
                     jnp.where(k - best_k > patience, _PATIENCE,
                     jnp.where(k >= max_steps, _MAXSTEPS, _RUNNING)))))
            # a run that leaves through maxnorm keeps its last point (it is past the norm)
            best_y = jnp.where(reason == _MAXNORM, y, best_y)
            best_f = jnp.where(reason == _MAXNORM, f, best_f)
            return _Run(y=y, state=state, best_y=best_y, best_f=best_f, best_k=best_k, k=k, reason=reason), i + 1

        return jax.lax.while_loop(cond, body, (run, jnp.array(0)))[0]

    return jax.vmap(one)(runs)


@eqx.filter_jit
def _measure(net, X, Y, theta, loss):
    L = edge_loss_fn(net, X, Y, loss)
    f, g = jax.vmap(jax.value_and_grad(L))(theta)
    return f, jnp.max(jnp.abs(g), axis=-1)


def _check_positive(name, v, allow_inf=False):
    ok = np.isfinite(v) or (allow_inf and v == np.inf)
    if not (ok and v > 0):
        raise ValueError(f"{name} must be a positive number; got {v!r}.")


def newton_phase(
    nets: DAGNetwork,
    X,
    Y,
    *,
    loss="mse",
    maxnorm: float = 1e3,
    g_tol: float = 1e-12,
    patience: int = 100,
    rel_improve: float = 1e-12,
    max_steps: int = 2000,
    max_time: float = np.inf,
    chunk: int = 50,
    batch_size: int | None = None,
    progress: bool = False,
) -> ConvergeResult:
    """Trust-region Newton with the exact Hessian from every network of a batch.

    **Arguments:**

    - `nets`: a batch of `DAGNetwork`s of one graph (leading axis on `weights`, e.g.
        from `eqx.filter_vmap`), or one network. Smooth activations only (the Hessian).
    - `X`, `Y`: the data; `loss`: `"mse"` (default) or a callable `(pred, Y) -> scalar`.
    - `maxnorm`: stop a run once `weightnorm(theta) >= maxnorm` (default 1e3, the paper).
    - `g_tol`: stop once `max |grad L| <= g_tol`.
    - `patience`: stop once the best loss has not improved (by more than `rel_improve`
        relative) for this many iterations.
    - `max_steps`: Newton iterations per run; `max_time`: wall-clock seconds for the
        whole batch (checked every `chunk` iterations; runs not finished or not started
        by then stop with `"max_time"`).
    - `batch_size`: runs advanced together (one vmapped program); groups run one after
        another, so a run only waits for the slowest run of its group. Default: 1 on
        CPU (a vmapped batch costs its size times its slowest run there), all runs
        at once on an accelerator.
    - `progress`: print one line per chunk.

    **Returns:** a `ConvergeResult` (its `theta_flow` is the start).
    """
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    if nets.is_positively_homogeneous or any(a.kinked for a in nets.activations):
        names = sorted({a.name for a in nets.activations})
        raise ValueError(f"newton_phase needs a smooth activation (exact Hessian); got {names}. "
                         "Use softplus, erf, g, tanh or gelu.")
    X, Y = check_data(nets.graph, X, Y)
    theta0 = nets.edge_weights()
    single = theta0.ndim == 1
    theta0 = theta0[None] if single else theta0
    if not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError("Some initial weights are not finite; re-initialize those networks.")
    for name, v in (("maxnorm", maxnorm), ("g_tol", g_tol), ("rel_improve", rel_improve)):
        _check_positive(name, v, allow_inf=(name == "maxnorm"))
    _check_positive("max_time", max_time, allow_inf=True)
    for name, v in (("patience", patience), ("max_steps", max_steps), ("chunk", chunk)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}.")
    net = _one_net(nets)
    B = theta0.shape[0]
    if batch_size is None:
        batch_size = 1 if jax.default_backend() == "cpu" else B
    elif not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}.")
    bs = int(min(batch_size, B))
    t = time.monotonic()
    args = (loss, float(g_tol), int(patience), float(maxnorm), int(max_steps), float(rel_improve))
    best, steps, reasons = [], [], []
    for s0 in range(0, B, bs):
        # groups of `bs` runs (the last one padded by repeating its last run, so that
        # every group reuses one compiled program); a group ends when all its runs have
        # stopped, so a run never waits for a slower one outside its group
        idx = np.minimum(np.arange(s0, s0 + bs), B - 1)
        runs = _start(net, X, Y, theta0[idx], loss)
        while time.monotonic() - t <= max_time:  # a group started after max_time does not run
            runs = _advance(net, X, Y, runs, int(chunk), *args)
            reason = np.asarray(runs.reason)
            if progress:
                print(f"newton: runs {s0}..{min(s0 + bs, B) - 1} of {B}: {int((reason == _RUNNING).sum())} running, "
                      f"{time.monotonic() - t:.1f} s")
            if not (reason == _RUNNING).any():
                break
        runs = eqx.tree_at(lambda r: r.reason, runs, jnp.where(runs.reason == _RUNNING, _MAXTIME, runs.reason))
        n = min(bs, B - s0)
        best.append(runs.best_y[:n])
        steps.append(runs.k[:n])
        reasons.append(runs.reason[:n])
    wall = time.monotonic() - t
    theta = jnp.concatenate(best)
    f, gmax = _measure(net, X, Y, theta, loss)
    nan = jnp.full((B,), jnp.nan, theta.dtype)
    settings = dict(maxnorm=float(maxnorm), g_tol=float(g_tol), patience=int(patience), rel_improve=float(rel_improve),
                    max_steps=int(max_steps), max_time=float(max_time), chunk=int(chunk), batch_size=bs,
                    optimiser="optimistix ClassicalTrustRegion + DampedNewtonDescent, exact Hessian (ij.losses.hessian_fn)")
    return ConvergeResult(theta=theta, loss=f, grad_norm=gmax, weightnorm=weightnorm(theta), n_steps=jnp.concatenate(steps),
                          stopped_by=jnp.concatenate(reasons), theta_flow=theta0, loss_flow=nan, t_flow=nan,
                          flow_status=jnp.full((B,), -1), wall_time=wall, settings=settings)


def _one_net(nets: DAGNetwork) -> DAGNetwork:
    theta = nets.edge_weights()
    return nets.with_edge_weights(theta[0]) if theta.ndim == 2 else nets


class _FlowBatch(eqx.Module):
    theta_final: Array
    loss_final: Array
    t_final: Array
    status: Array


@eqx.filter_jit
def _vmapped_flow(nets, X, Y, t1, solver, rtol, atol, max_steps, ceiling, loss):
    opts = SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_steps)
    f = eqx.filter_vmap(lambda n: gradient_flow(n, X, Y, t1, n_save=2, solver=opts,
                                                stop=StopRules(max_param_norm=ceiling), loss=loss))(nets)
    return _FlowBatch(theta_final=f.theta_final, loss_final=f.loss_final, t_final=f.t_final,
                      status=status_code(f.result))


def flow_then_newton(
    nets: DAGNetwork,
    X,
    Y,
    *,
    t1: float = 1e12,
    solver: str = "kvaerno5",
    rtol: float = 1e-3,
    atol: float = 1e-6,
    max_flow_steps: int = 2000,
    maxnorm: float = 1e3,
    slots: int = 64,
    exact: bool | None = None,
    engine: str = "sweep",
    loss="mse",
    **newton_options,
) -> ConvergeResult:
    """MLPGradientFlow's `train`: a gradient-flow ("ODE") phase, then `newton_phase`.

    The flow runs through `ij.sweep_flows` (continuous batching, sharded over devices)
    with an implicit solver (the paper: KenCarp58 at reltol 1e-3; here Kvaerno5 at the
    same tolerances) to `t1` (gradient-flow time of `L = (1/2N) sum (f - y)^2`; an
    implicit solver's steps grow geometrically near a minimum or along a channel, so a
    large `t1` costs few steps), stopping early when `weightnorm` reaches `maxnorm`.
    The Newton phase starts from the flow's final state (`newton_options` go to
    `newton_phase`).

    `engine="sweep"` (default) flows through `ij.sweep_flows` (`slots`, `exact`);
    `engine="vmap"` runs one `eqx.filter_vmap` of `gradient_flow` (every run pays for
    the slowest: suits an accelerator); `engine="loop"` runs the same program on one
    run at a time (each run pays for itself: the fastest on a CPU). All are compiled
    once per graph, activation, options and data shape, so new data of the same shape
    (e.g. a new GP teacher) reuses the compiled program.

    **Returns:** a `ConvergeResult` with the flow's state in `theta_flow`, `loss_flow`,
    `t_flow`, `flow_status`.
    """
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    E = nets.edge_weights().shape[-1]
    _check_positive("maxnorm", maxnorm)
    if engine not in ("sweep", "vmap", "loop"):
        raise ValueError(f"engine must be 'sweep', 'vmap' or 'loop'; got {engine!r}.")
    if exact is None:
        exact = jax.default_backend() == "cpu"
    ceiling = float(np.sqrt(2 * maxnorm * E))
    if engine == "sweep":
        res = sweep_flows(nets, X, Y, t1, solver=SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_flow_steps),
                          n_save=2, stop=StopRules(max_param_norm=ceiling), slots=slots, exact=exact, loss=loss)
        order = np.argsort(np.asarray(res.index))
    elif engine == "vmap":
        X, Y = check_data(nets.graph, X, Y)
        res = _vmapped_flow(nets, X, Y, float(t1), solver, float(rtol), float(atol), int(max_flow_steps), ceiling, loss)
        order = np.arange(res.theta_final.shape[0])
    else:  # one run at a time through one compiled program of batch 1
        X, Y = check_data(nets.graph, X, Y)
        theta = nets.edge_weights()
        theta = theta[None] if theta.ndim == 1 else theta
        one_net = _one_net(nets)
        parts = [_vmapped_flow(eqx.filter_vmap(one_net.with_edge_weights)(theta[n:n + 1]), X, Y, float(t1), solver,
                               float(rtol), float(atol), int(max_flow_steps), ceiling, loss)
                 for n in range(theta.shape[0])]
        res = jax.tree.map(lambda *a: jnp.concatenate(a), *parts)
        order = np.arange(theta.shape[0])
    pick = lambda v: jnp.asarray(np.asarray(v)[order])  # noqa: E731
    theta_flow = pick(res.theta_final)
    one = _one_net(nets)
    flowed = eqx.filter_vmap(one.with_edge_weights)(theta_flow)
    out = newton_phase(flowed, X, Y, maxnorm=maxnorm, loss=loss, **newton_options)
    settings = dict(out.settings, t1=float(t1), solver=solver, rtol=float(rtol), atol=float(atol),
                    max_flow_steps=int(max_flow_steps), flow_stop="weightnorm >= maxnorm (StopRules.max_param_norm)")
    return ConvergeResult(
        theta=out.theta, loss=out.loss, grad_norm=out.grad_norm, weightnorm=out.weightnorm, n_steps=out.n_steps,
        stopped_by=out.stopped_by, theta_flow=theta_flow, loss_flow=pick(res.loss_final), t_flow=pick(res.t_final),
        flow_status=pick(res.status), wall_time=out.wall_time, settings=settings)
