"""Structure-preserving and stiff solvers for gradient flow, as diffrax solvers.

- `GaussLegendre(stages=1|2|3)`: implicit Gauss-Legendre collocation (orders 2, 4, 6).
  Every Gauss method conserves every quadratic invariant `Q(y) = y^T S y` whose
  derivative along the field vanishes *everywhere* (`Q'(y) f(y) = 0` for all `y`). For
  a positively homogeneous network `B~ (theta * grad L(theta)) = 0` holds for every
  `theta`, so `c = B~ theta^2` is conserved up to the stage solve and round-off.
  Registered as `"gauss2"`, `"gauss4"`, `"gauss6"` in `SOLVERS`.
- `Projected(solver)`: after each step rescale each hidden neuron's in-/out-weights by
  `alpha_v`, `1/alpha_v` so that `c` equals its initial value exactly. The network
  function is unchanged by the rescaling; the drift check becomes meaningless (it is
  zero by construction).
- `hessian_kvaerno5()`: diffrax's `Kvaerno5` whose Newton (chord) Jacobian is the exact
  Hessian of the loss by autodiff, tagged symmetric for lineax. Registered as
  `"kvaerno5_hessian"`.
- `newton_kvaerno5()`: diffrax's `Kvaerno5` whose stage equations are solved by Newton's
  method, the Jacobian evaluated afresh at every iteration (at most 30 per stage), to a
  tenth of the step's tolerance in `y` (`StageTolerance`). Registered as
  `"kvaerno5_newton"`: the solver of the flat-channels flow phase.
- `StageTolerance(solver)`: an implicit solver whose stages are solved by `StageNewton`
  to a fraction of the step's tolerance in `y` (diffrax's own rule is `atol` in `f`).
  Given a `GradientFlowTerm`, it also rejects a step that raises the potential by more
  than the step's error can explain.
- `GradientFlowTerm(field, potential)`: an `ODETerm` `-grad V` that carries `V`.
- `FilteredError(solver)`: an implicit solver whose error estimate is filtered along the
  field's stable directions (Shampine's filter). Registered, around
  `newton_kvaerno5(None, 10)`, as `"kvaerno5_newton_filtered"`.

Step-size control of `GaussLegendre` is by **step doubling**: every step is taken once
with `h` and twice with `h/2`; the two-half-step result is kept and the difference,
divided by `2^(2s) - 1`, is the error estimate (local order `2s + 1`). A stage solve
that does not converge returns an infinite error estimate and a failure code, so the
step-size controller rejects the step and retries with a smaller one; it is never
accepted silently (with a constant step size the failure ends the solve with its code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.flatten_util as jfu
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float

from ._checks import check_positive

__all__ = [
    "SOLVERS",
    "get_solver",
    "is_implicit",
    "GaussLegendre",
    "Projected",
    "FilteredError",
    "StageTolerance",
    "StageNewton",
    "RecoveringPIDController",
    "StepRecovery",
    "as_step_recovery",
    "GradientFlowTerm",
    "hessian_kvaerno5",
    "newton_kvaerno5",
    "gauss_legendre_tableau",
    "rescale_to_conserved",
]


# Instrumentation for benchmarks (never set by the library): a Python callable that
# receives an array whose size is a number of vector-field evaluations. See
# `count_evaluations`.
_EVAL_HOOK: Callable | None = None


@jax.custom_jvp
def _tap(y):
    jax.debug.callback(_hook_primal, jnp.ones((), y.dtype) + _none_of(y))
    return y


def _none_of(x):
    # 0, computed from `x` (an empty slice's sum): under `vmap` a callback argument built
    # from it is batched wherever `x` is, so each point is counted (a constant would be
    # counted once per batch).
    return jnp.sum(jnp.ravel(x)[:0])


@_tap.defjvp
def _tap_jvp(primals, tangents):
    (y,), (t,) = primals, tangents
    # One call per tangent direction (under vmap, e.g. inside jax.jacfwd, the batch of
    # tangents is counted element by element).
    jax.debug.callback(_hook_primal, jnp.ones((), y.dtype) + _none_of(y) + _none_of(t))
    return _tap(y), t


def _hook_primal(n):
    if _EVAL_HOOK is not None:
        _EVAL_HOOK(np.size(n))


def count_evaluations(y):
    """Identity on `y` that, when the benchmark hook `solvers._EVAL_HOOK` is set at trace
    time, reports one vector-field evaluation per primal evaluation and one per tangent
    direction (so a forward-mode Jacobian of an `E`-dimensional field counts `E`).
    Put it at the start of a vector field. Does nothing when the hook is unset."""
    if _EVAL_HOOK is None:
        return y
    return _tap(y)


def count_extra(n):
    """Report `n` further vector-field-equivalent evaluations to the benchmark hook (for
    derivative work that `count_evaluations` cannot see, e.g. JVPs in other arguments).
    `n` may be a traced integer. Does nothing when the hook is unset."""
    if _EVAL_HOOK is not None:
        jax.debug.callback(lambda k: _EVAL_HOOK(int(k)), n)


def gauss_legendre_tableau(stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Butcher tableau `(A, b, c)` of the `stages`-stage Gauss-Legendre method (order
    `2 * stages`), computed from the Legendre nodes."""
    if stages not in (1, 2, 3):
        raise ValueError(f"GaussLegendre supports 1, 2 or 3 stages (orders 2, 4, 6); got stages={stages!r}.")
    x, w = np.polynomial.legendre.leggauss(stages)
    c = (x + 1) / 2
    b = w / 2
    # a_ij = int_0^{c_i} l_j(t) dt with l_j the Lagrange basis on the nodes c.
    A = np.zeros((stages, stages))
    for j in range(stages):
        others = np.delete(c, j)
        poly = np.poly1d(np.poly(others)) / np.prod(c[j] - others) if stages > 1 else np.poly1d([1.0])
        integral = np.polyint(poly)
        A[:, j] = integral(c) - integral(0.0)
    return A, b, c


_State = tuple  # (f0, t_prev, y_prev[, J, restep], missing): with keep_jacobian the step's Jacobian J and a
# restep flag; `missing`: f0 not evaluated yet


class GaussLegendre(diffrax.AbstractAdaptiveSolver):
    """Gauss-Legendre implicit Runge-Kutta collocation with `stages` stages (order
    `2 * stages`), adaptive by step doubling.

    The stage equations are solved by simplified Newton: the Jacobian of the vector field
    at the step's start is computed by forward-mode autodiff (`jax.jacfwd`), and the
    `(s E) x (s E)` Newton matrices `I - h A (x) J` of the full and the half step are
    LU-factorised once per step, together, and reused across iterations and half steps.
    Iteration stops when the update is below `newton_rtol * max|y0| + newton_atol`
    (default: a few ulps, so that quadratic invariants are kept to round-off); it fails
    if it has not converged after `max_newton` iterations or the updates stop shrinking.
    Every evaluation of the field in a step (the stages, at its end, and at its start
    where the state holds none) is made in one place in one loop, so a large field is
    compiled once per step.

    **Arguments:**

    - `stages`: 1, 2 or 3 (orders 2, 4, 6).
    - `newton_rtol`, `newton_atol`: convergence test of the stage solve.
    - `max_newton`: iteration cap of the stage solve.
    - `keep_jacobian`: also keep the last step's Jacobian (at its start) in the solver
        state, for a caller that repeats part of the step (the kink-aware flow's event
        restart, `restep_state`); default False.
    - `newton_jacobian`: the matrix `J` of the simplified Newton iteration, as a function
        `(t0, y0_flat, args) -> J` of the step's start; default None, the vector field's
        Jacobian by `jax.jacfwd`. The iteration converges to the same stage values with
        any `J` close enough to the Jacobian (its tolerance, not `J`, sets the solution's
        accuracy); a poorer `J` costs iterations, and a stage solve that stalls rejects
        the step. The kink-aware flow passes the Jacobian of the pattern-frozen field,
        which needs no derivative of the Filippov solve.
    """

    stages: int = eqx.field(static=True, default=2)
    newton_rtol: float = eqx.field(static=True, default=1e-14)
    newton_atol: float = eqx.field(static=True, default=1e-15)
    max_newton: int = eqx.field(static=True, default=20)
    keep_jacobian: bool = eqx.field(static=True, default=False)
    newton_jacobian: Callable | None = eqx.field(static=True, default=None)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation
    conserves_quadratic_invariants: ClassVar[bool] = True

    def __check_init__(self):
        gauss_legendre_tableau(self.stages)
        if not (self.newton_rtol >= 0 and self.newton_atol >= 0 and self.newton_rtol + self.newton_atol > 0):
            raise ValueError(
                f"newton_rtol and newton_atol must be >= 0 and not both 0; got {self.newton_rtol!r}, {self.newton_atol!r}."
            )
        if self.max_newton < 1:
            raise ValueError(f"max_newton must be >= 1; got {self.max_newton!r}.")

    def order(self, terms):
        return 2 * self.stages

    def error_order(self, terms):
        return 2 * self.stages + 1

    def init(self, terms, t0, t1, y0, args) -> _State:
        # no field value yet: the first step evaluates it, at the one place the step
        # evaluates the field (`step`), so the field is compiled once per step, not also here
        yf = jfu.ravel_pytree(y0)[0]
        f0 = jax.tree.map(lambda a: jnp.full(a.shape, jnp.nan, a.dtype), y0)
        missing = jnp.asarray(True)
        if self.keep_jacobian:
            return (f0, t0, y0, jnp.zeros((yf.shape[0],) * 2, yf.dtype), jnp.asarray(False), missing)
        return (f0, t0, y0, missing)

    def restep_state(self, solver_state) -> _State:
        """With `keep_jacobian`: the state that makes the next `step` a *restep* of the last
        one, from its start `(t_prev, y_prev)` (the state's) to a new end: one Gauss step
        with the kept Jacobian, no step doubling (error estimate 0). The caller steps from
        `(t_prev, y_prev)`; the kink-aware flow's event restart uses it."""
        return solver_state[:4] + (jnp.asarray(True),) + solver_state[5:]

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        missing = solver_state[-1] | made_jump  # (no field value at the start: the first step, or a jump)
        y_flat, unravel = jfu.ravel_pytree(y0)

        def f_flat(t, yf):
            return jfu.ravel_pytree(terms.vf(t, unravel(yf), args))[0]

        h = t1 - t0

        def jacobian():
            if self.newton_jacobian is None:
                return jax.jacfwd(lambda yf: f_flat(t0, yf))(y_flat)
            return self.newton_jacobian(t0, y_flat, args)

        restep: bool | jax.Array = False
        if self.keep_jacobian:  # a restep (`restep_state`): the kept Jacobian, the full step only
            restep = solver_state[4]
            J = jax.lax.cond(restep, lambda: solver_state[3], jacobian)
        else:
            J = jacobian()

        # The full and the half step's Newton matrices, factorised outside the phases (below)
        # and together: a field-only phase factorises nothing, also where a batched
        # (vmapped) `lax.cond` would compute both branches.
        lus = jax.vmap(lambda hh: _newton_lu(J, hh, self.stages))(jnp.stack([h, h / 2]))

        # Every evaluation of the field, in one loop, so that the field (often large) is
        # compiled once. Its iterations are phases: the full step (1), two half steps (2,
        # 3; not for a restep), and the field at the end, with the field at the start where
        # the state holds none (4, one pass). Every lane of a batch (vmap) runs the same
        # phases, so a batched loop runs no phase that some lane does not need.
        def phase(c):
            i, y_full, ok_full, y_half, ok_1, y1, ok_2, _ = c
            tt = jnp.where(i == 3, t0 + h / 2, t0)
            yy = jnp.where(i == 3, y_half, y_flat)
            hh = jnp.where(i == 1, h, h / 2)
            lu = jax.tree.map(lambda a: a[jnp.where(i == 1, 0, 1)], lus)
            ends = (jnp.stack([t1, t0]), jnp.stack([jnp.where(restep, y_full, y1), y_flat]))
            mode = jnp.where(i == 4, jnp.where(missing, _EVAL2, _EVAL), _STEP)
            y, ok, K = _gl_solve(f_flat, lu, tt, yy, hh, self, mode, ends)
            return (
                jnp.where((i == 1) & restep, 4, i + 1),
                jnp.where(i == 1, y, y_full),
                jnp.where(i == 1, ok, ok_full),
                jnp.where(i == 2, y, y_half),
                jnp.where(i == 2, ok, ok_1),
                jnp.where(i == 3, y, y1),
                jnp.where(i == 3, ok, ok_2),
                K[:2],
            )

        false = jnp.asarray(False)
        f_prev = jfu.ravel_pytree(solver_state[0])[0]
        ends0 = jnp.zeros((2,) + y_flat.shape, y_flat.dtype)
        _, y_full, ok_full, _, ok_1, y1, ok_2, f_ends = jax.lax.while_loop(
            lambda c: c[0] <= 4, phase, (jnp.asarray(1), y_flat, false, y_flat, false, y_flat, false, ends0)
        )
        f1, f0 = f_ends[0], jnp.where(missing, f_ends[1], f_prev)
        ok = jnp.where(restep, ok_full, ok_full & ok_1 & ok_2)
        err = jnp.where(restep, 0.0, (y1 - y_full) / (2.0 ** (2 * self.stages) - 1.0))
        err = jnp.where(ok, err, jnp.inf)
        y1 = jnp.where(restep, y_full, y1)
        y1_tree, f0, f1 = unravel(y1), unravel(f0), unravel(f1)
        dense_info = dict(y0=y0, y1=y1_tree, k0=jax.tree.map(lambda a: h * a, f0), k1=jax.tree.map(lambda a: h * a, f1))
        result = diffrax.RESULTS.where(
            ok, diffrax.RESULTS.successful, diffrax.RESULTS.promote(optx.RESULTS.nonlinear_divergence)
        )
        state = (f1, t0, y0, J, false, false) if self.keep_jacobian else (f1, t0, y0, false)
        return y1_tree, unravel(err), dense_info, state, result


_EVAL, _EVAL2, _STEP = 1, 2, 3  # what `_gl_solve` does: the field at 1 or 2 points, or a Gauss step


def gl_step(f_flat, J, t0, y0, h, solver: GaussLegendre):
    """One Gauss-Legendre step of size `h` from flat `y0`, by simplified Newton with the
    fixed Jacobian `J`. Returns `(y1, converged)`."""
    y1, ok, _ = _gl_solve(f_flat, _newton_lu(J, h, solver.stages), t0, y0, h, solver, _STEP)
    return y1, ok


def _newton_lu(J, h, stages: int):
    """The LU factorisation (`jax.scipy.linalg.lu_factor`) of the simplified Newton
    matrix `I - h A (x) J` of a Gauss step of size `h`."""
    A = jnp.asarray(gauss_legendre_tableau(stages)[0], J.dtype)
    return jax.scipy.linalg.lu_factor(jnp.eye(stages * J.shape[0], dtype=J.dtype) - h * jnp.kron(A, J))


def _gl_solve(f_flat, lu, t0, y0, h, solver: GaussLegendre, mode, points=None):
    """`gl_step` where `mode` is `_STEP`, with `lu` the factorised Newton matrix
    (`_newton_lu`); with `_EVAL` (`_EVAL2`), the field at the first (two) of `points`
    (`(ts, ys)`, two rows each) alone: one pass, `lu` unused. Returns `(y1, converged,
    K)`: `K` the field's values, a row per stage (at least two rows; with `_EVAL*`, at
    the points)."""
    A, b, c = (jnp.asarray(a, y0.dtype) for a in gauss_legendre_tableau(solver.stages))
    s, n = solver.stages, y0.shape[0]
    R = max(s, 2)
    stepping = mode == _STEP
    if points is None:
        points = (jnp.zeros((2,), y0.dtype), jnp.zeros((2, n), y0.dtype))
    tol = solver.newton_rtol * jnp.max(jnp.abs(y0)) + solver.newton_atol
    n_evals = jnp.select([stepping, mode == _EVAL2], [s, 2], 1)

    def F(Z):  # the stages one after another: unbatched, the field compiles faster than under vmap
        def one(i, K):
            j = jnp.minimum(i, s - 1)
            t = jnp.where(stepping, t0 + c[j] * h, points[0][jnp.minimum(i, 1)])
            y = jnp.where(stepping, y0 + Z[j], points[1][jnp.minimum(i, 1)])
            return K.at[i].set(f_flat(t, y))

        return jax.lax.fori_loop(0, n_evals, one, jnp.zeros((R, n), y0.dtype))

    # Each pass evaluates the stages K = F(Z), then (unless converged, failed or out of
    # iterations) makes one Newton update of Z: the field is evaluated in one place
    # (compiled once), s + s * (number of updates) times.
    def body(carry):
        k, Z, _, dz, dz_prev, done, bad, _ = carry
        K = F(Z)
        go = stepping & (k < solver.max_newton) & ~done & ~bad
        G = Z - h * (A @ K[:s])
        # (no solve where none is wanted: the field alone, or the pass that found convergence)
        solve = lambda: jax.scipy.linalg.lu_solve(lu, -G.reshape(-1)).reshape(s, n)  # noqa: E731
        dZ = jax.lax.cond(go, solve, lambda: jnp.zeros_like(G))
        nd = jnp.max(jnp.abs(dZ))
        done_new = nd <= tol
        # Diverging, or stagnating above the tolerance (rate >= 1 after two iterations).
        bad_new = ~jnp.isfinite(nd) | ((k >= 2) & (nd >= dz) & ~done_new)
        return (
            k + jnp.where(go, 1, 0),
            jnp.where(go, Z + dZ, Z),
            K,
            jnp.where(go, nd, dz),
            jnp.where(go, dz, dz_prev),
            jnp.where(go, done_new, done),
            jnp.where(go, bad_new, bad),
            ~go,
        )

    Z0 = jnp.zeros((s, n), y0.dtype)
    inf = jnp.asarray(jnp.inf, y0.dtype)
    false = jnp.asarray(False)
    k, Z, K, dz, _, done, bad, _ = jax.lax.while_loop(
        lambda c: ~c[-1], body, (jnp.asarray(0), Z0, jnp.zeros((R, n), y0.dtype), inf, inf, false, false, false)
    )
    y1 = y0 + h * (b @ K[:s])
    return y1, done & ~bad & jnp.all(jnp.isfinite(y1)), K


# ------------------------------------------------------------------ projection


def rescale_to_conserved(
    theta: Float[Array, " E"], c0: Float[Array, " H"], graph, *, sweeps: int = 30
) -> Float[Array, " E"]:
    """Rescale each hidden node's in-weights by `alpha_v` and out-weights by `1/alpha_v`
    so that `B~ theta^2 = c0`. For a positively homogeneous activation the network
    function is unchanged.

    Rescaling one node changes its neighbours' sums, so the node-wise solve is repeated
    as Gauss-Seidel sweeps (alternating topological and reverse order). For one node,
    with `I` = sum of squared in-weights and `O` = sum of squared out-weights, `alpha^2`
    is the positive root of `alpha^4 I - c0 alpha^2 - O = 0`. A node with no weight on
    one side is left alone.
    """
    rows, cols = graph.edge_index
    index = graph.index
    hidden_idx = [index[v] for v in graph.hidden]
    nodes = [(k, v, np.flatnonzero(cols == v), np.flatnonzero(rows == v)) for k, v in enumerate(hidden_idx)]

    def node(theta, k, ins, outs):
        q = theta**2
        I = jnp.sum(q[ins])
        O = jnp.sum(q[outs])
        disc = jnp.sqrt(c0[k] ** 2 + 4 * I * O)
        # a2 = (c0 + disc) / (2 I), written stably for c0 < 0.
        a2 = jnp.where(
            c0[k] >= 0,
            (c0[k] + disc) / jnp.where(I > 0, 2 * I, 1.0),
            2 * O / jnp.where(disc - c0[k] > 0, disc - c0[k], 1.0),
        )
        usable = (I > 0) & (O > 0) & jnp.isfinite(a2) & (a2 > 0)
        alpha = jnp.where(usable, jnp.sqrt(jnp.where(usable, a2, 1.0)), 1.0)
        return theta.at[ins].multiply(alpha).at[outs].divide(alpha)

    def sweep(i, theta):
        for k, _, ins, outs in nodes:
            theta = node(theta, k, ins, outs)
        for k, _, ins, outs in reversed(nodes):
            theta = node(theta, k, ins, outs)
        return theta

    return jax.lax.fori_loop(0, sweeps, sweep, theta)


class _Wrapper(diffrax.AbstractAdaptiveSolver):
    """A solver around `solver` whose order, initial state and field evaluation are its."""

    solver: eqx.AbstractVar[diffrax.AbstractSolver]

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class Projected(_Wrapper):
    """Wrap a solver: after each step, restore `c = B~ theta^2` to `c0` exactly by
    neuron-wise rescaling (`rescale_to_conserved`). Cheap, and the network function is
    unchanged by the rescaling, but **the conservation drift reported by
    `gradient_flow` is then zero by construction and checks nothing**.

    **Arguments:**

    - `solver`: the diffrax solver to wrap (any with an error estimate).
    - `graph`: the network's `DAG`.
    - `c0`: the conserved quantities to restore, `(H,)`.
    """

    solver: diffrax.AbstractSolver
    c0: Float[Array, " H"]
    graph: object = eqx.field(static=True)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        # The wrapped solver must not reuse a derivative from before the projection.
        y1, err, _, state, res = self.solver.step(terms, t0, t1, y0, args, solver_state, True)
        y1p = rescale_to_conserved(y1, self.c0, self.graph)
        h = t1 - t0
        # Dense output: cubic Hermite through the projected end points (exact there).
        dense = dict(y0=y0, y1=y1p, k0=h * terms.vf(t0, y0, args), k1=h * terms.vf(t1, y1p, args))
        return y1p, err, dense, state, res


# ------------------------------------------------------------------ stage solves in y


class StageTolerance(diffrax.AbstractImplicitSolver, _Wrapper):
    """Wrap an implicit Runge-Kutta solver (e.g. `diffrax.Kvaerno5`): the same method,
    its stage equations solved by `StageNewton` to `stage_tolerance` times the step's
    tolerance in `y`.

    Why: diffrax solves stage `i` for its derivative `f_i` to the controller's `atol` in
    `f`, which is `gamma h atol` in `y`. Once `gamma h > 1` that is looser than the step's
    own tolerance, so the error estimate, built from those stages, carries their error,
    and the controller keeps `h` where `gamma h atol` is about the step's tolerance. Where
    Newton converges quadratically the stages are far more accurate than asked and this
    does not show; at a hover on `maxnorm` it converges linearly (docs/channels.md,
    "Hovering at maxnorm"), and the flow crawls (docs/solvers.md has the measurement).

    The test is `gamma h norm(diff / tol_y) < 1` for each Newton update `diff` of `f_i`,
    with `tol_y = stage_tolerance (atol + rtol |y0|)` (the controller's tolerances and
    norm, which diffrax hands to the wrapped root finder). `gamma h` multiplies the
    update's size rather than dividing the tolerance, which would fall below the smallest
    normal float (and be flushed to zero) for `gamma h` above about 1e300. A step whose
    stage solve failed (rejected) returns `y0`.

    **Arguments:**

    - `solver`: the implicit solver to wrap (a diffrax Runge-Kutta method with a
        diagonal coefficient, or any implicit solver given `gamma`).
    - `gamma`: the diagonal coefficient; default None, read from the solver's tableau.
    - `stage_tolerance`: the fraction of the step's tolerance; default 0.1. None keeps
        the wrapped solver's root finder.
    """

    solver: diffrax.AbstractImplicitSolver
    gamma: float | None = eqx.field(static=True, default=None)
    stage_tolerance: float | None = eqx.field(static=True, default=0.1)

    def __check_init__(self):
        name = type(self).__name__
        if not isinstance(self.solver, diffrax.AbstractImplicitSolver):
            raise ValueError(
                f"{name} wraps an implicit solver (e.g. diffrax.Kvaerno5()); got {type(self.solver).__name__}."
            )
        if isinstance(self.solver, StageTolerance):
            raise ValueError(
                f"{name} solves the stages of the solver it wraps itself; wrap the bare solver, e.g. "
                f"{name}(ij.newton_kvaerno5(None, 10)), or give stage_tolerance= to {name}."
            )
        check_positive(f"{name}'s gamma (the diagonal coefficient)", self._gamma())
        if self.stage_tolerance is not None:
            check_positive(f"{name}'s stage_tolerance", self.stage_tolerance)

    def _gamma(self) -> float:
        if self.gamma is not None:
            return float(self.gamma)
        diagonal = getattr(getattr(self.solver, "tableau", None), "a_diagonal", None)
        if diagonal is None:
            raise ValueError(f"{type(self.solver).__name__} has no diagonal coefficient to read; pass gamma=.")
        return float(np.max(diagonal))

    @property
    def root_finder(self):  # type: ignore[override]
        return self.solver.root_finder

    @property
    def root_find_max_steps(self):  # type: ignore[override]
        return self.solver.root_find_max_steps

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # type: ignore[override]
        return self.solver.interpolation_cls

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        solver = self.stage_solver(t0, t1, y0)
        y1, err, dense, state, result = solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        # a failed stage solve is rejected; its y1 may be NaN, which would poison the
        # controller's error scale (max(|y0|, |y1|)) and so the next step size
        failed = result != diffrax.RESULTS.successful
        y1 = jax.tree.map(lambda a, b: jnp.where(failed, b, a), y1, y0)
        flow = _gradient_flow_term(terms)
        if flow is not None:
            raised = self.raised(flow, t0, t1, y0, y1, err, args)
            err = jax.tree.map(lambda e: jnp.where(raised, jnp.inf, e), err)
        return y1, err, dense, state, result

    def raised(self, flow: GradientFlowTerm, t0, t1, y0, y1, err, args):
        """Whether a step from `y0` to `y1` with error estimate `err` raised the flow's
        potential `V` by more than its error can explain: by more than 10 times
        `|V(y1) - V(y1 - err)|` (the difference to the embedded solution), plus
        `rtol |V(y0)| + atol`. True also for a NaN potential."""
        rf = self.solver.root_finder
        v0, v1 = flow.potential(t0, y0, args), flow.potential(t1, y1, args)
        embedded = flow.potential(t1, jax.tree.map(lambda a, e: a - e, y1, err), args)
        slack = 10 * jnp.abs(v1 - embedded) + rf.rtol * jnp.abs(v0) + rf.atol
        return ~(v1 - v0 <= slack)

    def stage_solver(self, t0, t1, y0) -> diffrax.AbstractImplicitSolver:
        """The wrapped solver, its stages solved by `StageNewton` to `stage_tolerance` times
        the step's tolerance in `y` for a step from `(t0, y0)` to `t1`."""
        fraction = self.stage_tolerance
        if fraction is None:
            return self.solver
        rf = self.solver.root_finder
        atol = jax.tree.map(lambda y: fraction * (rf.atol + rf.rtol * jnp.abs(y)), y0)
        linear = getattr(rf, "linear_solver", lx.AutoLinearSolver(well_posed=None))
        scale = self._gamma() * jnp.abs(t1 - t0)
        stages = StageNewton(rtol=0.0, atol=atol, norm=rf.norm, linear_solver=linear, scale=scale)
        return eqx.tree_at(lambda s: s.root_finder, self.solver, stages)


class GradientFlowTerm(diffrax.ODETerm):
    """`diffrax.ODETerm(field)` for a gradient flow, `field = -grad V`, carrying the
    potential `V(t, y, args)` it descends (the loss and its regularizers).

    The exact flow never raises `V`. `StageTolerance` (so `"kvaerno5_newton"`) rejects
    any step that raises it by more than the step's error can explain (`StageTolerance.raised`),
    as it would a step whose error estimate is infinite, and retries with a smaller one.
    Why: at large `h` the stage equations can have roots far from the flow, and Newton
    may converge to one; all stages then agree with each other, so the error estimate
    passes the step. In a flat-channels study run one such step took the flow from loss
    0.1487 at `weightnorm` 623 to loss 0.49995 at `weightnorm` 0.0074 (docs/solvers.md,
    "A step may not raise the loss").

    **Arguments:** `vector_field` (as `diffrax.ODETerm`), `potential`.
    """

    potential: Callable

    def __init__(self, vector_field: Callable, potential: Callable):
        super().__init__(vector_field)
        self.potential = potential


def _gradient_flow_term(terms) -> GradientFlowTerm | None:
    """The `GradientFlowTerm` inside diffrax's wrappers (`diffeqsolve` wraps every term
    in a `WrapTerm`), or None."""
    while not isinstance(terms, GradientFlowTerm) and hasattr(terms, "term"):
        terms = terms.term
    return terms if isinstance(terms, GradientFlowTerm) else None


class StageNewton(optx.Newton):
    """`optx.Newton` for an implicit stage, stopped when its last update is below 1 in
    `scale * norm(diff / atol)` (give `rtol=0`), after at least two updates. The residual
    is not tested: in `f`-space it cannot fall below the field's round-off, while the
    tolerance that matters is the stage value's, in `y`, `gamma h` times the update's
    (`StageTolerance` passes `scale = gamma h`). The first update is not trusted: it
    measures how far the predictor was, not how far its result is; stopping on it, a
    hover at loose tolerances took 9078 steps where two updates at least take 43
    (docs/solvers.md, "Stage solves to the step's tolerance").

    A solve that fails returns NaN. The step is rejected in any case, and the later
    stages of a Runge-Kutta step, built on this one, then stop before their first
    iteration (`optx.root_find` stops on a non-finite start) instead of each running to
    `max_steps` on values that cannot be used."""

    scale: float | Array = 1.0

    def terminate(self, fn, y, args, options, state, tags):
        ok = state.result == optx.RESULTS.successful
        return ~ok | ((state.step >= 2) & (self.scale * state.diffsize < 1)), state.result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        failed = result != optx.RESULTS.successful
        return jax.tree.map(lambda a: jnp.where(failed, jnp.nan, a), y), aux, {}


# ------------------------------------------------------------------ step sizes after a failed step


def check_recovery(recovery, *, allow_none: bool = True, name: str = "recovery") -> None:
    """`recovery` (the step size's growth per accepted step after a failed step) is a
    number above 1, or None where `allow_none`."""
    if recovery is None and allow_none:
        return
    if isinstance(recovery, bool) or not (isinstance(recovery, (int, float)) and recovery > 1):
        none = ", an ij.StepRecovery, or None for diffrax.PIDController's growth" if allow_none else ""
        raise ValueError(
            f"{name} must be a number above 1 (the step size's growth per accepted step after a "
            f"failed step){none}; got {recovery!r}."
        )


class RecoveringPIDController(diffrax.PIDController):
    """`diffrax.PIDController` that, after a failed step, lets the step size grow back
    by at most `recovery` per accepted step, from the size it was cut to.

    A failed step is one whose error estimate is not finite: an implicit stage solve
    that did not converge, a step that raised the potential (`StageTolerance`), or a
    non-finite field. `PIDController` cuts such a step by `factormin` and accepts the
    retry, whose error is then tiny, so it grows the step by up to `factormax` at once,
    back into the size where the stage solves fail. Along a flat channel the step size
    is bounded by where Newton converges, not by accuracy, and the error estimate cannot
    see that bound: on one flat-channels study run 88 of 164 steps failed, each after a
    stage solve's full `root_find_max_steps` iterations (docs/solvers.md, "Steps after a
    failed stage solve"). Here the step sizes after a failure stay below `factormin`
    times the failed size, times `recovery` per accepted step since, until the next
    failure. Steps without a failure are `PIDController`'s, bit for bit.

    The flat-channels flow phase uses it (`ij.FlowPhaseOptions(recovery=ij.StepRecovery(1.5))`;
    the options build it from an `ij.StepRecovery`). It costs steps where a flow must grow
    its steps fast after a failure: on the authors'
    saddle-split runs at 1e-8, whose steps grow by decades to `t ~ 1e300`, two of three
    runs took 2.1 and 2.8 times `PIDController`'s steps, so `ij.SolverOptions` keeps
    `PIDController` unless given a `recovery`.

    With a `horizon`, a failure bounds the steps only while they start within `horizon`
    failed step sizes of the failed step's start; after that they are `PIDController`'s
    until the next failure. A flow whose failing step size grows with `t` (steps growing
    by decades towards `t ~ 1e300`) then grows its steps by `factormax` again, while one
    that fails again at about the same size (along a channel) stays capped. With
    `horizon=100` those two runs took 1.2 times `PIDController`'s steps, and six channel
    runs 3% more Jacobians than without a horizon (`benchmarks/channels_step_control.py`).

    **Arguments:** those of `diffrax.PIDController`, `recovery` (> 1; default 1.5) and
    `horizon` (> 0, in failed step sizes; default None: the cap holds until the next
    failure).
    """

    recovery: float = eqx.field(static=True, default=1.5)
    horizon: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_recovery(self.recovery, allow_none=False)
        if self.horizon is not None:
            check_positive("horizon", self.horizon)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = super().init(terms, t0, t1, y0, dt0, args, func, error_order)
        dtype = jnp.result_type(tnext)
        return tnext, (state, jnp.asarray(jnp.inf, dtype), jnp.asarray(t0, dtype), jnp.asarray(0.0, dtype))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, cap, t_fail, h_fail = controller_state
        keep, next_t0, next_t1, made_jump, state, result = super().adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        failed = ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(e)) for e in jax.tree.leaves(y_error)]))
        cap = jnp.where(failed, jnp.abs(t1 - t0) * self.factormin, jnp.where(keep, cap * self.recovery, cap))
        t_fail, h_fail = jnp.where(failed, t0, t_fail), jnp.where(failed, jnp.abs(t1 - t0), h_fail)
        binds = jnp.abs(next_t1 - next_t0) > cap
        if self.horizon is not None:  # a failure this far back no longer bounds the step
            binds = binds & (jnp.abs(next_t0 - t_fail) <= self.horizon * h_fail)
        dt = next_t1 - next_t0  # PIDController's next step, passed through unless the cap binds
        next_t1 = jnp.where(binds, next_t0 + jnp.sign(dt) * cap, next_t1)
        return keep, next_t0, next_t1, made_jump, (state, cap, t_fail, h_fail), result


class StepRecovery(eqx.Module):
    """How the step size grows back after a failed step: the settings of
    `ij.RecoveringPIDController`, without its tolerances, for the options that build one
    (`ij.SolverOptions(recovery=)`, `ij.FlowPhaseOptions(recovery=)`). A plain number `r`
    given there means `StepRecovery(r)`.

    **Fields:** `growth` (> 1; default 1.5: the step size's growth per accepted step after a
    failed step) and `horizon` (> 0, in failed step sizes, or None, the default: the cap
    holds until the next failure), as in `ij.RecoveringPIDController`.
    """

    growth: float = eqx.field(static=True, default=1.5)
    horizon: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_recovery(self.growth, allow_none=False, name="growth")
        if self.horizon is not None:
            check_positive("horizon", self.horizon)

    def controller(self, rtol, atol) -> RecoveringPIDController:
        """`ij.RecoveringPIDController(rtol, atol)` with these settings."""
        return RecoveringPIDController(rtol=rtol, atol=atol, recovery=self.growth, horizon=self.horizon)


def as_step_recovery(recovery) -> StepRecovery | None:
    """`recovery` as a `StepRecovery` (a number `r`: `StepRecovery(r)`), or None for
    `diffrax.PIDController`'s growth. Raises `ValueError` naming the field otherwise."""
    if recovery is None or isinstance(recovery, StepRecovery):
        return recovery
    check_recovery(recovery)
    return StepRecovery(recovery)


# ------------------------------------------------------------------ filtered error estimate


class FilteredError(StageTolerance):
    """Wrap an implicit Runge-Kutta solver (e.g. `diffrax.Kvaerno5`): the same steps,
    with the error estimate `e` filtered along the field's stable directions (Shampine's
    filter, Hairer & Wanner, *Solving ODEs II*, IV.8):

        e <- V diag(1 / max(1, 1 + gamma h lambda_i)) V^T e,

    where `-(J + J^T)/2 = V diag(lambda) V^T` at the step's start and `gamma` is the
    method's diagonal coefficient. For a gradient flow `J = -Hessian` is symmetric, and
    on its stable directions (`lambda_i > 0`) this is `(I - gamma h J)^-1 e`, the filter
    that OrdinaryDiffEq.jl's ESDIRK methods (KenCarp58 among them) apply by default. On
    unstable or flat directions the estimate is left as it is: there the full filter
    would shrink the estimate of a growing error once `gamma h lambda_i < -2`.

    Why: along a stiff direction the method damps any perturbation, but the plain
    estimate does not shrink with it; late on a hover at `maxnorm` it is the stiff
    wall's round-off times `h`, so the controller rejects steps and keeps `h` small where
    nothing is left to resolve. It is not the default: with its stages solved to the
    step's tolerance it loses its gain on the long hovers of the flat-channels runs, and
    stalls where the plain estimate finishes (docs/solvers.md has the measurement). The
    method, its dense output and its linear solver are the wrapped solver's; the
    accept/reject decision, the next step size and the stage solves' stopping rule change.
    Costs one Jacobian (`jax.jacfwd` of the field) and one symmetric eigendecomposition
    per step. A non-finite estimate is passed through unchanged, and so is every estimate
    whose Jacobian is not finite.

    The filter is only as good as the stage solves: with diffrax's, at large `h` the
    stage values are wrong by far more than the step's tolerance, along stiff directions
    too, and the filter hides that error (docs/solvers.md, "Why the filtered run
    stalled"). So the stages are solved as `StageTolerance` solves them.

    **Arguments:** those of `StageTolerance`.
    """

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, err, dense, state, result = super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        return y1, self.filter(terms, t0, t1, y0, args, err), dense, state, result

    def filter(self, terms, t0, t1, y0, args, err):
        """The filtered estimate of a step from `(t0, y0)` to `t1` whose plain estimate is `err`."""
        y_flat, unravel = jfu.ravel_pytree(y0)
        e = jfu.ravel_pytree(err)[0]
        J = jax.jacfwd(lambda yf: jfu.ravel_pytree(terms.vf(t0, unravel(yf), args))[0])(y_flat)
        usable = jnp.all(jnp.isfinite(J)) & jnp.all(jnp.isfinite(e))
        lam, V = jnp.linalg.eigh(jnp.where(usable, -(J + J.T) / 2, 0.0))  # (zeroed when unusable: no NaN)
        factor = 1 / jnp.maximum(1.0, 1 + self._gamma() * (t1 - t0) * lam)
        filtered = V @ (factor * (V.T @ jnp.where(usable, e, 0.0)))
        return unravel(jnp.where(usable, filtered, e))


# ------------------------------------------------------------------ Kvaerno5 + Hessian


def hessian_kvaerno5(*, rtol: float | None = None, atol: float | None = None) -> diffrax.Kvaerno5:
    """`diffrax.Kvaerno5` whose stage solves use the exact Jacobian of the gradient-flow
    field (the negative Hessian, by forward-over-reverse autodiff), computed once per
    step and reused across all implicit stages (diffrax's chord method), with the linear
    solves done by lineax's LU on the materialised symmetric-tagged matrix.

    **Arguments:** `rtol`, `atol`: tolerances of the stage solve (default: those of the
    step-size controller).
    """
    if rtol is None or atol is None:
        rf = diffrax.with_stepsize_controller_tols(diffrax.VeryChord)(linear_solver=_SymmetricLU())
    else:
        rf = diffrax.VeryChord(rtol=rtol, atol=atol, linear_solver=_SymmetricLU())
    return diffrax.Kvaerno5(root_finder=rf)


def newton_kvaerno5(
    stage_tolerance: float | None = 0.1, root_find_max_steps: int = 30
) -> diffrax.AbstractImplicitSolver:
    """`diffrax.Kvaerno5` whose stage equations are solved by Newton's method: the
    Jacobian (the negative Hessian, structured where `ij.losses.gradient_fn` applies) is
    evaluated afresh at every iteration, at most `root_find_max_steps` iterations per
    stage, and (`StageTolerance`) the stages are solved to `stage_tolerance` times the
    step's tolerance in `y`.

    diffrax's default, the chord method, evaluates the Jacobian once per step. Along a
    flat channel the Hessian changes so fast within a step that the chord iteration fails
    to converge on many steps; each failure rejects the step, and the step size stays
    small: on the flat-channels studies' networks the flow crawls out along a channel
    (`benchmarks/channels_flow_budget.py`). With diffrax's stage tolerance (`atol` in
    `f`; `stage_tolerance=None`) the flow crawls where it hovers at `maxnorm`, and there
    Newton converges only linearly, so diffrax's 10 iterations often fail where 30 do not
    (docs/solvers.md, "Stage solves to the step's tolerance").
    `newton_kvaerno5(None, 10)` is the earlier form of this solver.
    """
    inner = diffrax.Kvaerno5(
        root_finder=diffrax.with_stepsize_controller_tols(optx.Newton)(), root_find_max_steps=root_find_max_steps
    )
    return inner if stage_tolerance is None else StageTolerance(inner, stage_tolerance=stage_tolerance)


class _SymmetricLU(lx.AbstractLinearSolver):
    """LU on the materialised operator, tagging it symmetric first (the Jacobian of
    `-grad L` is the negative Hessian). Materialisation of the Jacobian operator is done
    once per step by diffrax's chord method and the factorisation is reused across
    stages and iterations."""

    def init(self, operator, options):
        op = lx.MatrixLinearOperator(operator.as_matrix(), lx.symmetric_tag)
        return lx.LU().init(op, options)

    def compute(self, state, vector, options):
        return lx.LU().compute(state, vector, options)

    def transpose(self, state, options):
        return lx.LU().transpose(state, options)

    def conj(self, state, options):
        return lx.LU().conj(state, options)

    def assume_full_rank(self):
        return True

    def allow_dependent_columns(self, operator):
        return False

    def allow_dependent_rows(self, operator):
        return False


# ------------------------------------------------------------------ the registry

SOLVERS: dict[str, Callable[[], diffrax.AbstractSolver]] = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
    "heun": diffrax.Heun,
    "euler": diffrax.Euler,
    "gauss2": lambda: GaussLegendre(stages=1),
    "gauss4": lambda: GaussLegendre(stages=2),
    "gauss6": lambda: GaussLegendre(stages=3),
    "kvaerno5_hessian": hessian_kvaerno5,
    "kvaerno5_newton": newton_kvaerno5,
    "kvaerno5_newton_filtered": lambda: FilteredError(newton_kvaerno5(None, 10)),
    # kvaerno5_newton as it was: diffrax's stage solves (atol in f, 10 iterations), for
    # side-by-side runs
    "kvaerno5_newton_diffrax_stages": lambda: newton_kvaerno5(None, 10),
}
"""Solver names accepted wherever a solver is chosen (`SolverOptions(solver=...)`,
`SweepConfig.solver`, the CLI's `--solver`), each mapped to a factory of a fresh
diffrax solver. Read-only by convention: pass a solver instance for anything else."""


def get_solver(solver: str | diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """A diffrax solver instance, by name (see `SOLVERS`, case-insensitive) or passed
    through."""
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    if isinstance(solver, str) and solver.lower() in SOLVERS:
        return SOLVERS[solver.lower()]()
    raise ValueError(f"Unknown solver {solver!r}; choose one of {sorted(SOLVERS)} or pass a diffrax solver.")


def is_implicit(solver: diffrax.AbstractSolver) -> bool:
    """Whether `solver`, or a solver it wraps (`Projected`, `FilteredError`), solves an
    implicit stage equation (diffrax's implicit solvers and `GaussLegendre`): such solvers
    cannot step across a kink of relu / leaky_relu (`gradient_flow` warns of it)."""
    own = lambda x: isinstance(x, (diffrax.AbstractImplicitSolver, GaussLegendre))  # noqa: E731
    return any(own(x) for x in jax.tree_util.tree_leaves(solver, is_leaf=own))
