"""The second-order convergence phase after a flow: trust-region Newton with the exact
Hessian, batched over many initializations; and `flow_then_newton`, MLPGradientFlow.jl's
`train` (the tool the flat-channels paper used): an ODE phase, then the Newton phase.

The ODE phase follows MLPGradientFlow by default (`flow_stop="penalty"`): gradient flow
on the loss plus MLPGradientFlow's soft, cubic `maxnorm` penalty
(`ij.converge.maxnorm_penalty`: theirs is `(nx - maxnorm)^3/3 * n_samples(net)` added
to `sum (f - y)^2`, with `nx = weightnorm`), so a flow can reach `maxnorm` and hover
there, under a budget in flow time (`t1`) and wall time (`flow_wall_time`) rather than
in steps. Every run records whether the ODE phase alone passed `maxnorm` (the paper's
Fig. 4 criterion reads the ODE phase's end), a log-spaced `TrajectoryRecord` of the
flow, and at its final point the converged gradient inf-norm and the minimum Hessian
eigenvalue (a minimum has it >= 0, a saddle < 0). `flow_stop="stop"` is the earlier
scheme: no penalty, the flow stops where `weightnorm` reaches `maxnorm`.

The Newton phase is optimistix's (`ClassicalTrustRegion` search, `DampedNewtonDescent`:
`(H + lambda I) p = -g` with `lambda = 1/radius`, i.e. Levenberg-Marquardt-damped
Newton), fed the exact Hessian of the loss from `ij.losses.hessian_fn` (assembled from
the network's structure for one-hidden-layer MSE networks, `jax.hessian` otherwise),
with its eigenvalues replaced by their absolute values (a convex model, so every
accepted step descends; the paper's optimiser, Optim.jl's `Newton`, likewise makes the
Hessian positive definite before each step). Its options are one `NewtonOptions`.
Nothing of the optimiser is hand-written here, only the stopping rules, each an
`ij.RESULTS` member (`ConvergeResult.result`; the names in `STOP_REASONS` are kept for
tables and old JSON files, `newton_result` maps them):

- `"gradient"` (`stopped_grad_norm`): `max |grad L| <= g_tol` (default 1e-12; the
  paper's MLPGradientFlow default `min_gnorm` is 1e-15);
- `"patience"` (`stopped_patience`): the best loss has not improved for `patience`
  iterations;
- `"maxnorm"` (`stopped_weightnorm`): `weightnorm(theta) = sum(theta^2) / (2 len(theta))
  >= maxnorm` (MLPGradientFlow's definition; the paper counts such a run "infinite").
  MLPGradientFlow keeps the penalty in its Newton phase instead of stopping there;
- `"max_steps"` (`max_steps_reached`), `"max_time"` (`stopped_wall_time`; wall clock,
  checked between chunks of iterations);
- `"nonfinite"` (`nonfinite_state`): a non-finite loss or gradient.

Every run returns its best point (lowest loss seen), as MLPGradientFlow does. Losses
use this package's convention `L = (1/2N) sum ||f - y||^2`; MLPGradientFlow reports
`(1/N) sum ||f - y||^2 = 2 L`, and its ODE time is ours divided by `2N`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import Array, Bool, Float, Int

from ._defaults import MAX_STEPS
from ._flow_phase import (
    MaxnormPenalty,
    TrajectoryRecord,
    closest_pair_distance,
    maxnorm_penalty,
    min_hessian_eigenvalue,
    weightnorm,
)
from ._results import RESULTS, result_code, result_from_code, status_code
from .flow import gradient_flow
from .losses import check_data, edge_loss_fn, hessian_fn
from .network import DAGNetwork
from .options import SaveTimes, SolverOptions, StopRules, log_times
from .sweep import sweep_flows

__all__ = ["STOP_REASONS", "NEWTON_RESULTS", "newton_result", "NewtonOptions", "weightnorm", "maxnorm_penalty",
           "MaxnormPenalty", "closest_pair_distance", "min_hessian_eigenvalue", "TrajectoryRecord", "ConvergeResult",
           "newton_phase", "flow_then_newton", "FLOW_STOPS"]

STOP_REASONS = ("running", "gradient", "patience", "maxnorm", "max_steps", "max_time", "nonfinite")
"""Names of the integer `stopped_by` codes of a `ConvergeResult` (as stored in tables and
JSON files). Each maps to one `ij.RESULTS` member (`NEWTON_RESULTS`, `newton_result`):
`"gradient"`, `"patience"` and `"maxnorm"` are successes (a converged finite point, a run
stuck at its best loss, a run counted infinite); the rest are budgets or failures: raise
`max_steps` / `max_time`, or look at the data for `"nonfinite"`. `"running"` never ends a
run (a run still running when read is `newton_unfinished`, a failure)."""
_RUNNING, _GRAD, _PATIENCE, _MAXNORM, _MAXSTEPS, _MAXTIME, _NONFINITE = range(7)

NEWTON_RESULTS = {
    "running": RESULTS.newton_unfinished,
    "gradient": RESULTS.stopped_grad_norm,
    "patience": RESULTS.stopped_patience,
    "maxnorm": RESULTS.stopped_weightnorm,
    "max_steps": RESULTS.max_steps_reached,
    "max_time": RESULTS.stopped_wall_time,
    "nonfinite": RESULTS.nonfinite_state,
}
"""The `ij.RESULTS` member of each name in `STOP_REASONS`."""

FLOW_STOPS = ("penalty", "stop")
"""How `flow_then_newton`'s ODE phase treats `maxnorm`: `"penalty"` (MLPGradientFlow's
soft cubic penalty; the flow goes on) or `"stop"` (no penalty; stop at `maxnorm`)."""


def newton_result(names) -> RESULTS:
    """The `ij.RESULTS` item(s) of stop-reason names (a name, or a sequence of them, as
    `ConvergeResult.reason` and older study JSON files store them)."""
    arr = np.asarray(names, dtype=object)
    bad = sorted({str(n) for n in arr.ravel() if n not in NEWTON_RESULTS})
    if bad:
        raise ValueError(f"Unknown Newton stop reason(s) {bad}; expected names from {STOP_REASONS}.")
    table = {k: int(result_code(v)) for k, v in NEWTON_RESULTS.items()}
    return result_from_code(np.vectorize(table.__getitem__, otypes=[np.int32])(arr) if arr.ndim else table[arr.item()])


def _positive(name, v, *, integer=False, allow_inf=False):
    if integer:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}.")
        return
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and \
        (np.isfinite(v) or (allow_inf and v == np.inf))
    if not (ok and v > 0):
        raise ValueError(f"{name} must be a positive number{' (or inf)' if allow_inf else ''}; got {v!r}.")


class NewtonOptions(eqx.Module):
    """Options of the Newton phase (`newton_phase`, `flow_then_newton`), validated once.

    **Fields:**

    - `maxnorm`: stop a run once `weightnorm(theta) >= maxnorm` (default 1e3, the paper's).
    - `g_tol`: stop once `max |grad L| <= g_tol` (default 1e-12; MLPGradientFlow's
        `min_gnorm` is 1e-15, below what float64 Hessian solves reach on these nets).
    - `patience`: stop once the best loss has not improved (by more than `rel_improve`,
        relative) for this many iterations (default 100; MLPGradientFlow counts loss
        evaluations, default 10^6 in `train`).
    - `rel_improve`: default 1e-12.
    - `max_steps`: Newton iterations per run (default 2000).
    - `max_time`: wall-clock seconds for the whole batch (default inf), checked every
        `chunk` iterations (default 50).
    - `batch_size`: runs advanced together (one vmapped program); `None`: 1 on CPU, all
        runs on an accelerator.
    """

    maxnorm: float = 1e3
    g_tol: float = 1e-12
    patience: int = 100
    rel_improve: float = 1e-12
    max_steps: int = 2000
    max_time: float = np.inf
    chunk: int = 50
    batch_size: int | None = None

    def __check_init__(self):
        _positive("maxnorm", self.maxnorm, allow_inf=True)
        _positive("g_tol", self.g_tol)
        _positive("rel_improve", self.rel_improve)
        _positive("max_time", self.max_time, allow_inf=True)
        for name in ("patience", "max_steps", "chunk"):
            _positive(name, getattr(self, name), integer=True)
        if self.batch_size is not None:
            if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, (int, np.integer)) \
                    or self.batch_size < 1:
                raise ValueError(f"batch_size must be a positive integer or None; got {self.batch_size!r}.")

    def settings(self) -> dict:
        """The options as plain numbers (for `ConvergeResult.settings` and JSON)."""
        return dict(maxnorm=float(self.maxnorm), g_tol=float(self.g_tol), patience=int(self.patience),
                    rel_improve=float(self.rel_improve), max_steps=int(self.max_steps),
                    max_time=float(self.max_time), chunk=int(self.chunk))


def _newton_options(options, thin: dict) -> NewtonOptions:
    """`options` (a `NewtonOptions` or None) with the thin keywords that are not None."""
    if options is not None and not isinstance(options, NewtonOptions):
        raise TypeError(f"options must be an ij.converge.NewtonOptions; got {type(options).__name__}.")
    given = {k: v for k, v in thin.items() if v is not None}
    if options is None:
        return NewtonOptions(**given)
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    return NewtonOptions(**{**fields, **given})


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
    - `min_eig`: the smallest eigenvalue of the data loss's Hessian at `theta` (< 0: a
      saddle; about 0 or above: a minimum, or a point along a channel);
    - `weightnorm_flow_max`: the largest `weightnorm` the ODE phase reached (over its
      saved times and its end; NaN without a flow phase); `passed_maxnorm_ode`: whether
      it reached `maxnorm` (the ODE phase alone, before Newton);
    - `trajectory`: a `TrajectoryRecord` of the ODE phase (`(B, K)` arrays, log-spaced
      in time; all NaN without a flow phase); `flow_steps`: the ODE phase's solver steps
      (-1 when not known: no flow phase, or the sweep engine);
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
    min_eig: Float[Array, " B"]
    weightnorm_flow_max: Float[Array, " B"]
    passed_maxnorm_ode: Bool[Array, " B"]
    trajectory: TrajectoryRecord
    flow_steps: Int[Array, " B"]
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
        names them), by `NEWTON_RESULTS`: gradient -> `stopped_grad_norm`, patience ->
        `stopped_patience`, maxnorm -> `stopped_weightnorm`, max_steps ->
        `max_steps_reached`, max_time -> `stopped_wall_time`, nonfinite ->
        `nonfinite_state`, running -> `newton_unfinished`."""
        codes = jnp.stack([result_code(NEWTON_RESULTS[r]) for r in STOP_REASONS]).astype(jnp.int32)
        return result_from_code(codes[self.stopped_by])

    @property
    def infinite_ode(self) -> Bool[Array, " B"]:
        """The authors' Fig. 4 norm criterion: the ODE phase alone reached `maxnorm`."""
        return self.passed_maxnorm_ode

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
    lam = min_hessian_eigenvalue(jax.vmap(hessian_fn(net, X, Y, loss))(theta))
    return f, jnp.max(jnp.abs(g), axis=-1), lam


def newton_phase(
    nets: DAGNetwork,
    X,
    Y,
    *,
    loss="mse",
    options: NewtonOptions | None = None,
    maxnorm: float | None = None,
    g_tol: float | None = None,
    patience: int | None = None,
    rel_improve: float | None = None,
    max_steps: int | None = None,
    max_time: float | None = None,
    chunk: int | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> ConvergeResult:
    """Trust-region Newton with the exact Hessian from every network of a batch.

    **Arguments:**

    - `nets`: a batch of `DAGNetwork`s of one graph (leading axis on `weights`, e.g.
        from `eqx.filter_vmap`), or one network. Smooth activations only (the Hessian).
    - `X`, `Y`: the data; `loss`: `"mse"` (default) or a callable `(pred, Y) -> scalar`.
    - `options`: a `NewtonOptions` (stopping rules, budgets, `batch_size`); the thin
        keywords `maxnorm`, `g_tol`, `patience`, `rel_improve`, `max_steps`, `max_time`,
        `chunk`, `batch_size` override its fields (defaults: `NewtonOptions`'s).
        `max_time` is wall-clock seconds for the whole batch (checked every `chunk`
        iterations; runs not finished or not started by then stop with `"max_time"`);
        groups of `batch_size` runs run one after another, so a run only waits for the
        slowest run of its group.
    - `progress`: print one line per chunk.

    **Returns:** a `ConvergeResult` (its `theta_flow` is the start; no flow record).
    """
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    if nets.is_positively_homogeneous or any(a.kinked for a in nets.activations):
        names = sorted({a.name for a in nets.activations})
        raise ValueError(f"newton_phase needs a smooth activation (exact Hessian); got {names}. "
                         "Use softplus, erf, g, tanh or gelu.")
    opts = _newton_options(options, dict(maxnorm=maxnorm, g_tol=g_tol, patience=patience, rel_improve=rel_improve,
                                         max_steps=max_steps, max_time=max_time, chunk=chunk, batch_size=batch_size))
    X, Y = check_data(nets.graph, X, Y)
    theta0 = nets.edge_weights()
    theta0 = theta0[None] if theta0.ndim == 1 else theta0
    if not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError("Some initial weights are not finite; re-initialize those networks.")
    net = _one_net(nets)
    B = theta0.shape[0]
    bs = opts.batch_size if opts.batch_size is not None else (1 if jax.default_backend() == "cpu" else B)
    bs = int(min(bs, B))
    t = time.monotonic()
    best, steps, reasons = [], [], []
    for s0 in range(0, B, bs):
        runs = _run_group(net, X, Y, theta0, s0, bs, loss, opts, t, progress)
        n = min(bs, B - s0)
        best.append(runs.best_y[:n])
        steps.append(runs.k[:n])
        reasons.append(runs.reason[:n])
    wall = time.monotonic() - t
    theta = jnp.concatenate(best)
    f, gmax, lam = _measure(net, X, Y, theta, loss)
    nan = jnp.full((B,), jnp.nan, theta.dtype)
    settings = dict(opts.settings(), batch_size=bs,
                    optimiser="optimistix ClassicalTrustRegion + DampedNewtonDescent, exact Hessian (ij.losses.hessian_fn)")
    return ConvergeResult(theta=theta, loss=f, grad_norm=gmax, weightnorm=weightnorm(theta), n_steps=jnp.concatenate(steps),
                          stopped_by=jnp.concatenate(reasons), theta_flow=theta0, loss_flow=nan, t_flow=nan,
                          flow_status=jnp.full((B,), -1), min_eig=lam, weightnorm_flow_max=nan,
                          passed_maxnorm_ode=jnp.zeros((B,), bool), trajectory=TrajectoryRecord.empty(B, 1, theta.dtype),
                          flow_steps=jnp.full((B,), -1), wall_time=wall, settings=settings)


def _run_group(net, X, Y, theta0, s0, bs, loss, opts: NewtonOptions, t_start, progress):
    """Advance runs `s0 .. s0 + bs - 1` (padded by repeating the last run, so that every
    group reuses one compiled program) until all stop or `max_time` has passed; a group
    started after `max_time` does not run."""
    B = theta0.shape[0]
    idx = np.minimum(np.arange(s0, s0 + bs), B - 1)
    runs = _start(net, X, Y, theta0[idx], loss)
    args = (loss, float(opts.g_tol), int(opts.patience), float(opts.maxnorm), int(opts.max_steps),
            float(opts.rel_improve))
    while time.monotonic() - t_start <= opts.max_time:
        runs = _advance(net, X, Y, runs, int(opts.chunk), *args)
        reason = np.asarray(runs.reason)
        if progress:
            print(f"newton: runs {s0}..{min(s0 + bs, B) - 1} of {B}: {int((reason == _RUNNING).sum())} running, "
                  f"{time.monotonic() - t_start:.1f} s")
        if not (reason == _RUNNING).any():
            break
    return eqx.tree_at(lambda r: r.reason, runs, jnp.where(runs.reason == _RUNNING, _MAXTIME, runs.reason))


def _one_net(nets: DAGNetwork) -> DAGNetwork:
    theta = nets.edge_weights()
    return nets.with_edge_weights(theta[0]) if theta.ndim == 2 else nets


class _FlowBatch(eqx.Module):
    theta_final: Array
    loss_final: Array
    t_final: Array
    status: Array
    record: TrajectoryRecord | None = None
    n_steps: Array | None = None


@eqx.filter_jit
def _vmapped_flow(nets, X, Y, t1, solver, rtol, atol, max_steps, ceiling, loss, *, maxnorm=None, n_record=0,
                  wall_time=None):
    """The flow phase of a batch, vmapped. `t1` is a Python float (static). `ceiling`: the
    hard stop on `||theta||` (None: none); `maxnorm`: add `MaxnormPenalty(maxnorm)` (None:
    none); `n_record`: rows of the log-spaced `TrajectoryRecord` (0: none); `wall_time`:
    seconds per call."""
    opts = SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_steps)
    stop = StopRules(max_param_norm=ceiling, max_wall_time=wall_time)
    reg = dict(regularizer=MaxnormPenalty(maxnorm), strength=1.0) if maxnorm is not None else {}
    # the record's times: 0, then geometric from 1e-2 (or t1/10) to t1 (gradient-flow time)
    save = SaveTimes(log_times(0.0, t1, n_record, first=min(1e-2, t1 / 10))) if n_record else SaveTimes(n_save=2)
    one_net = _one_net(nets)

    def one(n):
        f = gradient_flow(n, X, Y, t1, saveat=save, solver=opts, stop=stop, loss=loss, **reg)
        rec = TrajectoryRecord.from_flow(one_net, f.ts, f.thetas, f.losses, edge_loss_fn(one_net, X, Y, loss)) \
            if n_record else None
        return _FlowBatch(theta_final=f.theta_final, loss_final=f.loss_final, t_final=f.t_final,
                          status=status_code(f.result), record=rec, n_steps=f.stats["num_steps"])

    return eqx.filter_vmap(one)(nets)


def _flow_phase(nets, X, Y, *, t1, solver, rtol, atol, max_flow_steps, maxnorm, flow_stop, flow_wall_time,
                n_record, engine, slots, exact, loss):
    """The ODE phase of `flow_then_newton`: a `_FlowBatch` in the order of `nets`."""
    E = nets.edge_weights().shape[-1]
    ceiling = float(np.sqrt(2 * maxnorm * E)) if flow_stop == "stop" else None
    pen = float(maxnorm) if flow_stop == "penalty" else None
    wall = None if flow_wall_time == np.inf else float(flow_wall_time)
    if engine == "sweep":
        res = sweep_flows(nets, X, Y, t1, solver=SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_flow_steps),
                          n_save=2, stop=StopRules(max_param_norm=ceiling, max_wall_time=wall), slots=slots,
                          exact=exact, loss=loss)
        order = np.argsort(np.asarray(res.index))
        pick = lambda v: jnp.asarray(np.asarray(v)[order])  # noqa: E731
        return _FlowBatch(theta_final=pick(res.theta_final), loss_final=pick(res.loss_final),
                          t_final=pick(res.t_final), status=pick(res.status))
    X, Y = check_data(nets.graph, X, Y)
    theta = nets.edge_weights()
    theta = theta[None] if theta.ndim == 1 else theta
    one_net = _one_net(nets)
    kw = dict(maxnorm=pen, n_record=int(n_record), wall_time=wall)
    args = (float(t1), solver, float(rtol), float(atol), int(max_flow_steps), ceiling, loss)
    if engine == "vmap":
        return _vmapped_flow(eqx.filter_vmap(one_net.with_edge_weights)(theta), X, Y, *args, **kw)
    # one run at a time through one compiled program of batch 1 (each run its own wall clock)
    parts = [_vmapped_flow(eqx.filter_vmap(one_net.with_edge_weights)(theta[n:n + 1]), X, Y, *args, **kw)
             for n in range(theta.shape[0])]
    return jax.tree.map(lambda *a: jnp.concatenate(a), *parts)


def flow_then_newton(
    nets: DAGNetwork,
    X,
    Y,
    *,
    t1: float = 1e12,
    solver: str = "kvaerno5",
    rtol: float = 1e-3,
    atol: float = 1e-6,
    max_flow_steps: int = MAX_STEPS,
    flow_wall_time: float = np.inf,
    maxnorm: float = 1e3,
    flow_stop: str = "penalty",
    n_record: int = 41,
    slots: int = 64,
    exact: bool | None = None,
    engine: str | None = None,
    loss="mse",
    newton: NewtonOptions | None = None,
    **newton_options,
) -> ConvergeResult:
    """MLPGradientFlow's `train`: a gradient-flow ("ODE") phase, then `newton_phase`.

    The flow runs with an implicit solver (the paper: KenCarp58 at reltol 1e-3; here
    Kvaerno5 at the same tolerances) to `t1` (gradient-flow time of
    `L = (1/2N) sum (f - y)^2`; an implicit solver's steps grow geometrically near a
    minimum or along a channel, so a large `t1` costs few steps). Its budget is flow time
    `t1` and wall time `flow_wall_time` (seconds per run; the paper gives up to 2 h),
    with `max_flow_steps` only as a backstop.

    - `flow_stop="penalty"` (default, the paper's way): the loss gets MLPGradientFlow's
        soft `maxnorm` penalty (`maxnorm_penalty`), and the flow goes on, so it can reach
        `maxnorm` and hover there. Needs `engine="loop"` or `"vmap"`.
    - `flow_stop="stop"`: no penalty; the flow stops once `weightnorm >= maxnorm`.

    Every run records the largest `weightnorm` of its ODE phase and whether it reached
    `maxnorm` (`passed_maxnorm_ode`), and, for the loop and vmap engines, a
    `TrajectoryRecord` at `n_record` log-spaced times (0: none). The Newton phase starts
    from the flow's final state; its options are `newton` (a `NewtonOptions`) or the thin
    keywords `newton_options` (those of `newton_phase`), with `maxnorm` shared.

    `engine`: `"loop"` runs one compiled program of batch 1 on one run at a time (each
    run pays for itself: the fastest on a CPU, and the default there); `"vmap"` runs one
    `eqx.filter_vmap` of `gradient_flow` (every run pays for the slowest: suits an
    accelerator, the default there); `"sweep"` flows through `ij.sweep_flows`
    (continuous batching; `slots`, `exact`; `flow_stop="stop"` only, no record). All are
    compiled once per graph, activation, options and data shape.

    **Returns:** a `ConvergeResult` with the flow's state in `theta_flow`, `loss_flow`,
    `t_flow`, `flow_status`, `weightnorm_flow_max`, `passed_maxnorm_ode`, `trajectory`.
    """
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    _positive("maxnorm", maxnorm)
    _positive("t1", t1)
    _positive("flow_wall_time", flow_wall_time, allow_inf=True)
    _positive("max_flow_steps", max_flow_steps, integer=True)
    if flow_stop not in FLOW_STOPS:
        raise ValueError(f"flow_stop must be one of {FLOW_STOPS}; got {flow_stop!r}.")
    if engine is None:
        engine = "loop" if jax.default_backend() == "cpu" else "vmap"
    if engine not in ("sweep", "vmap", "loop"):
        raise ValueError(f"engine must be 'sweep', 'vmap' or 'loop'; got {engine!r}.")
    if engine == "sweep" and flow_stop == "penalty":
        raise ValueError("engine='sweep' cannot add the maxnorm penalty (ij.sweep_flows takes no regularizer); "
                         "use engine='loop' or 'vmap', or flow_stop='stop'.")
    if isinstance(n_record, bool) or not isinstance(n_record, (int, np.integer)) or n_record < 0 or n_record == 1:
        raise ValueError(f"n_record must be 0 (no record) or an integer >= 2; got {n_record!r}.")
    opts = _newton_options(newton, dict(newton_options, maxnorm=maxnorm))
    exact = jax.default_backend() == "cpu" if exact is None else exact
    res = _flow_phase(nets, X, Y, t1=t1, solver=solver, rtol=rtol, atol=atol, max_flow_steps=max_flow_steps,
                      maxnorm=maxnorm, flow_stop=flow_stop, flow_wall_time=flow_wall_time,
                      n_record=0 if engine == "sweep" else n_record, engine=engine, slots=slots, exact=exact, loss=loss)
    one = _one_net(nets)
    out = newton_phase(eqx.filter_vmap(one.with_edge_weights)(res.theta_final), X, Y, loss=loss, options=opts)
    B = res.theta_final.shape[0]
    rec = res.record if res.record is not None else TrajectoryRecord.empty(B, 1, res.theta_final.dtype)
    wn_max = jnp.fmax(jnp.max(jnp.nan_to_num(rec.weightnorm, nan=-jnp.inf), axis=-1), weightnorm(res.theta_final))
    settings = dict(out.settings, t1=float(t1), solver=solver, rtol=float(rtol), atol=float(atol),
                    max_flow_steps=int(max_flow_steps), flow_wall_time=float(flow_wall_time), flow_stop=flow_stop,
                    engine=engine, n_record=int(n_record),
                    flow_maxnorm=("MLPGradientFlow penalty (weightnorm - maxnorm)^3/6 in L = (1/2N) sum (f-y)^2 units"
                                  if flow_stop == "penalty" else "stop at weightnorm >= maxnorm (StopRules.max_param_norm)"))
    return dataclasses.replace(out, theta_flow=res.theta_final, loss_flow=res.loss_final, t_flow=res.t_final,
                               flow_status=res.status, weightnorm_flow_max=wn_max,
                               passed_maxnorm_ode=wn_max >= maxnorm, trajectory=rec, settings=settings,
                               flow_steps=res.n_steps if res.n_steps is not None else jnp.full((B,), -1))
