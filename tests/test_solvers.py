"""Gauss-Legendre solvers, projection, and Kvaerno5 with the exact Hessian."""

import sys
import warnings
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

import invariant_jax as ij
from invariant_jax.solvers import GaussLegendre, Projected, gauss_legendre_tableau, gl_step, rescale_to_conserved
from scipy_reference import scipy_flow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from filtered_error_hover import hover_exact, hover_loss  # noqa: E402


@pytest.mark.parametrize("s", [1, 2, 3])
def test_tableau_order_conditions(s):
    A, b, c = gauss_legendre_tableau(s)
    np.testing.assert_allclose(A.sum(1), c, atol=1e-14)
    # quadrature order 2s: sum b c^k = 1/(k+1) for k < 2s, and fails at k = 2s
    for k in range(2 * s):
        assert abs(b @ c**k - 1 / (k + 1)) < 1e-14
    assert abs(b @ c ** (2 * s) - 1 / (2 * s + 1)) > 1e-6
    # collocation (stage order s): A c^(k-1) = c^k / k
    for k in range(1, s + 1):
        np.testing.assert_allclose(A @ c ** (k - 1), c**k / k, atol=1e-14)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_classical_order_on_linear_problem(s):
    M = jnp.array([[-1.0, 2.0], [-2.0, -0.5]])
    y0 = jnp.array([1.0, 0.5])
    exact = scipy.linalg.expm(np.asarray(M) * 2.0) @ np.asarray(y0)
    term = diffrax.ODETerm(lambda t, y, a: M @ y)
    hs = np.array([0.2, 0.1, 0.05])
    errs = []
    for h in hs:
        sol = diffrax.diffeqsolve(
            term, GaussLegendre(stages=s), 0.0, 2.0, jnp.asarray(h), y0, stepsize_controller=diffrax.ConstantStepSize()
        )
        errs.append(np.max(np.abs(np.asarray(sol.ys[-1]) - exact)))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert abs(slope - 2 * s) < 0.25, (slope, errs)


def test_adaptive_reaches_tolerance():
    M = jnp.array([[-1.0, 2.0], [-2.0, -0.5]])
    y0 = jnp.array([1.0, 0.5])
    exact = scipy.linalg.expm(np.asarray(M) * 2.0) @ np.asarray(y0)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: M @ y),
        ij.get_solver("gauss6"),
        0.0,
        2.0,
        None,
        y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
    )
    assert np.max(np.abs(np.asarray(sol.ys[-1]) - exact)) < 1e-8
    assert int(sol.stats["num_steps"]) < 60


def test_kept_jacobian_is_the_fields_jacobian_at_the_last_steps_start():
    # keep_jacobian (used by the kink-aware flow's event restart) only adds the Jacobian
    # of the last accepted step's start to the state: the same steps, and the kept J is
    # jacfwd of the field there (an independent evaluation, so to round-off)
    def f(t, y, a):
        return jnp.stack([y[1], -jnp.sin(y[0]) - 0.1 * y[1] * y[0] ** 2])

    y0 = jnp.array([1.2, 0.3])
    kw = dict(
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        saveat=diffrax.SaveAt(t1=True, solver_state=True),
    )
    a = diffrax.diffeqsolve(diffrax.ODETerm(f), GaussLegendre(keep_jacobian=True), 0.0, 3.0, None, y0, **kw)
    b = diffrax.diffeqsolve(diffrax.ODETerm(f), GaussLegendre(), 0.0, 3.0, None, y0, **kw)
    assert int(a.stats["num_steps"]) == int(b.stats["num_steps"]) > 5
    np.testing.assert_allclose(a.ys[-1], b.ys[-1], rtol=0, atol=1e-12)
    _, t_prev, y_prev, J = a.solver_state[:4]
    assert 0.0 < float(t_prev) < 3.0
    np.testing.assert_allclose(J, jax.jacfwd(lambda y: f(t_prev, y, None))(y_prev), rtol=1e-12, atol=1e-14)


def test_newton_jacobian_changes_the_iteration_not_the_solution():
    # `newton_jacobian` replaces the Newton matrix (the kink-aware flow passes the frozen
    # field's): the stage values it converges to, so the steps and the solution, are the
    # default's to round-off; with few iterations allowed, a poor matrix shows it is used
    def f(t, y, a):
        return jnp.stack([y[1], -jnp.sin(y[0]) - 0.1 * y[1] * y[0] ** 2])

    zero = lambda t, y, args: jnp.zeros((2, 2))  # noqa: E731  (plain fixed-point iteration)
    kw = dict(stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8), throw=False)
    solve = lambda solver: diffrax.diffeqsolve(diffrax.ODETerm(f), solver, 0.0, 3.0, None, jnp.array([1.2, 0.3]), **kw)  # noqa: E731
    a, b = solve(GaussLegendre()), solve(GaussLegendre(newton_jacobian=zero))
    assert int(a.stats["num_steps"]) == int(b.stats["num_steps"]) > 5
    np.testing.assert_allclose(a.ys[-1], b.ys[-1], rtol=0, atol=1e-12)
    c, d = solve(GaussLegendre(max_newton=3)), solve(GaussLegendre(max_newton=3, newton_jacobian=zero))
    assert int(c.stats["num_rejected_steps"]) < int(d.stats["num_rejected_steps"])


def test_nonconverged_stage_solve_is_never_accepted():
    # One Newton iteration cannot reach the round-off tolerance on a nonlinear field.
    term = diffrax.ODETerm(lambda t, y, a: -(y**3))
    y0 = jnp.array([1.0])
    bad = GaussLegendre(stages=2, max_newton=1)
    sol = diffrax.diffeqsolve(
        term, bad, 0.0, 1.0, jnp.asarray(0.1), y0, stepsize_controller=diffrax.ConstantStepSize(), throw=False
    )
    assert ij.result_message(sol.result) != ""  # recorded failure, not a silent step
    # Adaptive: a discontinuous field makes the stage solve fail across the jump;
    # those steps are rejected and the step size shrinks.
    term = diffrax.ODETerm(lambda t, y, a: jnp.where(t < 0.5, 1.0, -1.0) * jnp.ones_like(y) + 0 * y)
    sol = diffrax.diffeqsolve(
        term,
        GaussLegendre(stages=2),
        0.0,
        1.0,
        jnp.asarray(0.3),
        y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-6),
        throw=False,
    )
    assert int(sol.stats["num_rejected_steps"]) > 0


def test_bad_stages():
    with pytest.raises(ValueError, match="1, 2 or 3 stages"):
        GaussLegendre(stages=4)
    with pytest.raises(ValueError, match="max_newton"):
        GaussLegendre(stages=2, max_newton=0)


def _linear_problem():
    """One linear-activation problem (positively homogeneous and smooth: no kinks) for the
    conservation tests below, so their Tsit5 flows share one compiled program (the
    tolerances are arrays in it)."""
    g = ij.mlp([2, 3, 1], bias=False)
    net = ij.DAGNetwork(g, "linear", key=jax.random.PRNGKey(0))
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.PRNGKey(1), activation="tanh")
    return g, net, X, Y, np.linspace(0.0, 1.0, 5)


def test_gauss_conserves_on_homogeneous_dag_where_tsit5_drifts():
    # Linear activation: positively homogeneous and smooth (no kinks), so plain Gauss
    # conserves c to round-off; saves on step ends (step_ts) to measure exactly.
    g, net, X, Y, ts = _linear_problem()
    ctrl = diffrax.PIDController(rtol=1e-4, atol=1e-4, step_ts=ts)
    fg = ij.gradient_flow(
        net, X, Y, 1.0, saveat=ts, solver=ij.SolverOptions("gauss4", rtol=1e-4, atol=1e-4, stepsize_controller=ctrl)
    )
    ft = ij.gradient_flow(net, X, Y, 1.0, solver="tsit5", saveat=ts, rtol=1e-4, atol=1e-4)
    assert bool(fg.success) and bool(ft.success)
    assert float(fg.drift_relative) < 1e-13
    assert float(ft.drift_relative) > 1e3 * float(fg.drift_relative)


def test_rescale_to_conserved_is_exact_and_keeps_function():
    g = ij.random_dag(3, 6, 2, 0.5, 11, bias=True)
    a = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    b = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(1))
    # target: c of a slightly perturbed theta (as after an inexact step)
    theta = a.edge_weights() * (1 + 1e-3 * jax.random.normal(jax.random.PRNGKey(2), (len(g.edges),)))
    c0 = ij.conserved_quantities(a)
    th2 = rescale_to_conserved(theta, c0, g)
    np.testing.assert_allclose(ij.conserved_quantities(a.with_edge_weights(th2)), c0, atol=1e-12)
    X = jax.random.normal(jax.random.PRNGKey(3), (9, 3))
    np.testing.assert_allclose(a.with_edge_weights(th2).forward(X), a.with_edge_weights(theta).forward(X), atol=1e-12)
    del b


def test_projected_tsit5_has_zero_drift():
    g, net, X, Y, ts = _linear_problem()
    solver = Projected(diffrax.Tsit5(), c0=ij.conserved_quantities(net), graph=g)
    ctrl = diffrax.PIDController(rtol=1e-4, atol=1e-4, step_ts=ts)  # saves on projected step ends
    f = ij.gradient_flow(
        net, X, Y, 1.0, saveat=ts, solver=ij.SolverOptions(solver, stepsize_controller=ctrl, rtol=1e-4, atol=1e-4)
    )
    ref = ij.gradient_flow(net, X, Y, 1.0, solver="tsit5", rtol=1e-10, atol=1e-10, saveat=ts)  # the program above
    assert float(f.drift_relative) < 1e-12
    assert float(jnp.max(jnp.abs(f.network_at(-1).forward(X) - ref.network_at(-1).forward(X)))) < 1e-3


def test_hessian_kvaerno5_matches_tsit5():
    g = ij.mlp([2, 3, 1], bias=False)
    net = ij.DAGNetwork(g, "softplus", key=jax.random.PRNGKey(0))
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.PRNGKey(1), activation="softplus")
    fk = ij.gradient_flow(
        net, X, Y, 2.0, solver="kvaerno5_hessian", rtol=1e-9, atol=1e-9, saveat=ij.SaveTimes(n_save=3)
    )
    ft = ij.gradient_flow(net, X, Y, 2.0, solver="tsit5", rtol=1e-11, atol=1e-11, saveat=ij.SaveTimes(n_save=3))
    assert bool(fk.success)
    assert float(jnp.max(jnp.abs(fk.theta_final - ft.theta_final))) < 1e-6


def test_implicit_solver_on_relu_warns_and_names_kink_aware_flow():
    # The warning comes from gradient_flow's Python code, before the solve: jax.eval_shape
    # runs all of that code (tracing the solve too) without compiling three XLA programs.
    g = ij.mlp([2, 3, 1])
    net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    X, Y, _ = ij.teacher_student(g, 6, key=jax.random.PRNGKey(1))
    with pytest.warns(UserWarning, match="kink.*ij.kink_aware_flow"):
        flow = jax.eval_shape(lambda: ij.gradient_flow(net, X, Y, 0.01, solver="gauss2", saveat=ij.SaveTimes(n_save=2)))
    assert isinstance(flow, ij.Flow)  # traced through, not cut short
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.eval_shape(lambda: ij.gradient_flow(net, X, Y, 0.01, solver="tsit5", saveat=ij.SaveTimes(n_save=2)))
        lin = ij.DAGNetwork(g, "linear", key=jax.random.PRNGKey(0))
        jax.eval_shape(lambda: ij.gradient_flow(lin, X, Y, 0.01, solver="gauss2", saveat=ij.SaveTimes(n_save=2)))


def test_newton_kvaerno5_matches_scipy_radau():
    # An independent stiff solver: SciPy's Radau IIA on the same field (-grad L, compiled once).
    g = ij.mlp([2, 3, 1], bias=False)
    net = ij.DAGNetwork(g, "softplus", key=jax.random.PRNGKey(2))
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.PRNGKey(3), activation="softplus")
    f = ij.gradient_flow(net, X, Y, 3.0, solver="kvaerno5_newton", rtol=1e-9, atol=1e-9, saveat=ij.SaveTimes(n_save=2))
    ref = scipy_flow(net, X, Y, 3.0, method="Radau", rtol=1e-11, atol=1e-12)
    assert bool(f.success) and ref.success
    assert float(np.max(np.abs(np.asarray(f.theta_final) - ref.y[:, -1]))) < 1e-7


def test_restep_is_one_gauss_step_with_the_kept_jacobian():
    # `restep_state` makes the next step retake the last one from its start to a new end:
    # the single Gauss step `gl_step` computes with the kept Jacobian, error estimate 0
    def f(t, y, a):
        return jnp.stack([y[1], -jnp.sin(y[0]) - 0.1 * y[1] * y[0] ** 2])

    solver, term = GaussLegendre(keep_jacobian=True), diffrax.ODETerm(f)
    y0 = jnp.array([1.2, 0.3])
    state = solver.init(term, 0.0, 0.2, y0, None)
    _, _, _, state, _ = solver.step(term, 0.0, 0.2, y0, None, state, False)
    _, t_prev, y_prev, J = state[:4]
    y1, err, _, _, result = solver.step(term, t_prev, 0.13, y_prev, None, solver.restep_state(state), False)
    ref, ok = gl_step(lambda t, y: f(t, y, None), J, t_prev, y_prev, 0.13 - t_prev, solver)
    assert bool(ok) and result == diffrax.RESULTS.successful
    np.testing.assert_array_equal(np.asarray(err), 0.0)
    np.testing.assert_allclose(y1, ref, rtol=0, atol=1e-15)


def test_gauss_step_evaluates_the_field_in_one_place():
    # The field at the step's start (none in the state after init), the stages and the
    # field at its end are one call site: a large field is compiled once per step. The
    # values are the field's own: k0 = h f(t0, y0) and k1 = h f(t1, y1) of the dense
    # output, and y1 the exact solution of y' = -y to the step's order.
    calls = []

    def f(t, y, a):
        calls.append(t)
        return -y

    solver = GaussLegendre(keep_jacobian=True, newton_jacobian=lambda t, y, a: -jnp.eye(2))
    term, y0, h = diffrax.ODETerm(f), jnp.array([1.0, 2.0]), 0.1
    state = jax.jit(lambda: solver.init(term, 0.0, h, y0, None))()
    assert calls == []
    y1, _, dense, state, result = jax.jit(lambda s: solver.step(term, 0.0, h, y0, None, s, False))(state)
    assert len(calls) == 1 and result == diffrax.RESULTS.successful
    np.testing.assert_allclose(dense["k0"], -h * np.asarray(y0), rtol=1e-15)
    np.testing.assert_allclose(dense["k1"], -h * np.asarray(y1), rtol=1e-15)
    np.testing.assert_allclose(y1, np.exp(-h) * np.asarray(y0), rtol=1e-9)
    np.testing.assert_array_equal(state[0], -np.asarray(y1))  # the next step's start, kept


def _eqns(jaxpr, in_loop=False):
    # every equation of a jaxpr and of the jaxprs inside it, and whether a loop holds it
    for e in jaxpr.eqns:
        yield e, in_loop
        for v in e.params.values():
            for j in v if isinstance(v, (tuple, list)) else (v,):
                j = getattr(j, "jaxpr", j)
                if hasattr(j, "eqns"):
                    yield from _eqns(j, in_loop or e.primitive.name in ("while", "scan"))


def test_gauss_step_runs_the_same_phases_in_every_lane_and_factorises_outside_them():
    # Under vmap a `lax.cond` or a loop whose predicate differs between lanes runs for all
    # of them. A factorisation inside the step's loop of phases ran in every phase, the
    # field-only ones too, and a lane with no field value at its start (a segment's first
    # step) ran one phase more than the others, each a Gauss solve for the whole batch
    # (slower vmap-mode sweeps: benchmarks/results/gauss_sweep_modes.json). The Newton
    # matrices of the full and the half step are factorised once per step, together,
    # before the loops; the field at the step's start is evaluated with the one at its
    # end. A batch of a lane with no field value and two with one agrees with each lane
    # stepped alone (y1 and the dense output's k0, k1), and y1 with expm(-h a A) y0.
    A = jnp.array([[1.0, 0.3], [0.3, 2.0]])
    solver = GaussLegendre(keep_jacobian=True)
    term, h = diffrax.ODETerm(lambda t, y, a: -a * (A @ y)), 0.1  # (a per lane: a batched Jacobian)
    y0s, rates = jnp.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.1]]), jnp.array([1.0, 0.5, 2.0])

    def start(y0, a, warm):  # warm: the state after a step that ended at y0 (its f1 kept)
        state = solver.init(term, 0.0, h, y0, a)
        return jax.tree.map(lambda x, y: jnp.where(warm, x, y), (-a * (A @ y0),) + state[1:-1] + (False,), state)

    def step(y0, a, state):
        y1, _, dense, _, _ = solver.step(term, 0.0, h, y0, a, state, False)
        return y1, dense["k0"], dense["k1"]

    states = jax.vmap(start)(y0s, rates, jnp.array([False, True, True]))
    jaxpr = jax.make_jaxpr(jax.vmap(step))(y0s, rates, states).jaxpr
    lus = [(e.invars[0].aval.shape, in_loop) for e, in_loop in _eqns(jaxpr) if e.primitive.name == "lu"]
    assert lus == [((3, 2, 4, 4), False)]  # lanes x (full, half) step, outside every loop
    out = jax.jit(jax.vmap(step))(y0s, rates, states)
    for i, (y0, a) in enumerate(zip(y0s, rates)):
        alone = jax.jit(step)(y0, a, jax.tree.map(lambda x: x[i], states))
        for batched, own in zip(out, alone):
            np.testing.assert_allclose(batched[i], own, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(out[1][i], -h * a * (A @ y0), rtol=1e-14)  # k0 = h f(y0), evaluated or kept
        exact = scipy.linalg.expm(-h * float(a) * np.asarray(A)) @ np.asarray(y0)
        np.testing.assert_allclose(out[0][i], exact, rtol=0, atol=1e-6 * np.max(np.abs(exact)))  # (h a |A| <= 0.42)


def test_filtered_error_is_shampines_filter_on_a_linear_flow():
    # y' = -A y: with the wrapped solver's stage solves the solution is its, bit for bit;
    # with StageNewton's (to a tenth of 1e-10 in y) it agrees to 1e-11. The estimate is
    # (I + gamma h A)^-1 e for an SPD A (SciPy's solve) and, for an indefinite A, left as
    # it is along the unstable eigenvector.
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    plain = diffrax.Kvaerno5(root_finder=diffrax.VeryChord(rtol=1e-10, atol=1e-10))
    gamma, y0 = float(np.max(plain.tableau.a_diagonal)), jnp.asarray(rng.normal(size=4))
    t0, h = jnp.asarray(0.0), jnp.asarray(0.3)
    for lams in ([1e-2, 1.0, 30.0, 1e4], [-2.0, 1.0, 30.0, 1e4]):
        A = Q @ np.diag(lams) @ Q.T
        term = diffrax.ODETerm(lambda t, y, args: -jnp.asarray(A) @ y)
        steps = [
            s.step(term, t0, h, y0, None, s.init(term, t0, h, y0, None), False)
            for s in (plain, ij.FilteredError(plain, stage_tolerance=None), ij.FilteredError(plain))
        ]
        (y1, e, *_), (y1f, ef, *_), (y1s, efs, _, _, result) = steps
        np.testing.assert_array_equal(y1f, y1)
        assert result == diffrax.RESULTS.successful
        np.testing.assert_allclose(y1s, y1, rtol=0, atol=1e-11)
        if lams[0] > 0:
            np.testing.assert_allclose(
                ef, scipy.linalg.solve(np.eye(4) + gamma * h * A, e, assume_a="pos"), rtol=1e-10, atol=1e-16
            )
        else:
            # in A's eigenbasis: the unstable component unchanged, the others divided
            np.testing.assert_allclose(
                Q.T @ ef, (Q.T @ e) / np.maximum(1, 1 + gamma * h * np.array(lams)), rtol=1e-9, atol=1e-14
            )


def test_stages_solved_in_y_cross_a_hover_that_stalls_diffraxs_stage_solves():
    # The hover and its exact solution (polar coordinates): benchmarks/filtered_error_hover.py
    ts = jnp.array([1e2, 1e4, 1e8, 1e12, 1e15])
    term = diffrax.ODETerm(lambda t, z, args: -jax.grad(hover_loss)(z))  # to t = 1e20
    kw = dict(saveat=diffrax.SaveAt(ts=ts), stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8))

    def solve(s):
        return diffrax.diffeqsolve(term, s, 0.0, 1e20, None, jnp.array([1.0, 0.0]), max_steps=2000, throw=False, **kw)

    # With diffrax's stage solves (atol in f, gamma h atol in y) the steps stop growing
    # late on the hover, and the 2000 steps run out; where that starts depends on the
    # CPU's round-off (t ~ 1e15 with AVX, past 1e16 with SSE4.2), hence a horizon far
    # beyond both. Solved to a tenth of the step's tolerance in y (the plain estimate, or
    # the filtered one) the stages let the steps grow (378 and 607 steps in a scratch run).
    assert solve(ij.newton_kvaerno5(None, 10)).result == diffrax.RESULTS.max_steps_reached
    exact = hover_exact(np.asarray(ts))
    for solver in (ij.newton_kvaerno5(), ij.get_solver("kvaerno5_newton_filtered")):
        sol = solve(solver)
        assert sol.result == diffrax.RESULTS.successful
        np.testing.assert_allclose(sol.ys, exact, rtol=0, atol=1e-5)  # filtered_error_hover.json: the errors


def test_stage_solves_in_y_stay_fast_at_loose_tolerances():
    # The same hover at the flow phase's tolerances (rtol 1e-3, atol 1e-6), to t = 1e16.
    # When the stage solves could stop after one Newton update, the run took 9078 steps
    # (filtered_error_hover_loose.json at 0000f02); stopping after two at least, it takes
    # no more steps than diffrax's stage solves (43 and 79 in a scratch run), and its
    # saved points are as close to the exact solution (within rtol |y| = 1e-2).
    ts = jnp.array([1e4, 1e8, 1e12, 1e15])
    term = diffrax.ODETerm(lambda t, z, args: -jax.grad(hover_loss)(z))
    kw = dict(saveat=diffrax.SaveAt(ts=ts), stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6))

    def solve(s):
        return diffrax.diffeqsolve(term, s, 0.0, 1e16, None, jnp.array([1.0, 0.0]), max_steps=2000, throw=False, **kw)

    ours, theirs = solve(ij.newton_kvaerno5()), solve(ij.newton_kvaerno5(None, 10))
    assert ours.result == theirs.result == diffrax.RESULTS.successful
    assert int(ours.stats["num_steps"]) <= int(theirs.stats["num_steps"])
    exact = hover_exact(np.asarray(ts))
    for sol in (ours, theirs):
        np.testing.assert_allclose(sol.ys, exact, rtol=0, atol=1e-2)  # rtol |y|


def test_stage_tolerance_rejects_a_step_that_raises_the_potential():
    # y' = -grad V for V = |y - 1|^2 / 2, one step of h = 0.5 from y = 0: given the true
    # potential the step is kept (a finite error estimate), given one that the step raises
    # (-V) it is rejected (an infinite estimate), and a plain ODETerm is never checked.
    # Through diffeqsolve (which wraps the term) only steps that raise -V by less than
    # rtol |V| + atol are kept, so the solve cannot get far.
    import optimistix as optx

    V = lambda t, y, args: jnp.sum((y - 1.0) ** 2) / 2  # noqa: E731
    field = lambda t, y, args: -(y - 1.0)  # noqa: E731
    inner = diffrax.Kvaerno5(root_finder=optx.Newton(rtol=1e-6, atol=1e-8, norm=optx.rms_norm))
    s = ij.StageTolerance(inner)
    t0, t1, y0 = jnp.asarray(0.0), jnp.asarray(0.5), jnp.zeros(2)

    def err(term):
        _, e, _, _, result = s.step(term, t0, t1, y0, None, s.init(term, t0, t1, y0, None), False)
        assert result == diffrax.RESULTS.successful
        return np.asarray(e)

    assert np.all(np.isfinite(err(ij.GradientFlowTerm(field, V))))
    assert np.all(np.isinf(err(ij.GradientFlowTerm(field, lambda t, y, a: -V(t, y, a)))))
    assert np.all(np.isfinite(err(diffrax.ODETerm(field))))

    def solve(term):
        ctrl = diffrax.PIDController(rtol=1e-6, atol=1e-8)
        return diffrax.diffeqsolve(
            term, ij.newton_kvaerno5(), 0.0, 1.0, 0.1, y0, stepsize_controller=ctrl, max_steps=50, throw=False
        )

    assert solve(ij.GradientFlowTerm(field, V)).result == diffrax.RESULTS.successful
    rising = solve(ij.GradientFlowTerm(field, lambda t, y, a: -V(t, y, a)))
    assert rising.result == diffrax.RESULTS.max_steps_reached


def test_filtered_error_refuses_what_it_cannot_filter():
    with pytest.raises(ValueError, match="implicit solver.*Tsit5"):
        ij.FilteredError(diffrax.Tsit5())
    with pytest.raises(ValueError, match="gamma.*positive"):
        ij.FilteredError(diffrax.Kvaerno5(), gamma=-1.0)
    with pytest.raises(ValueError, match=r"solves the stages.*newton_kvaerno5\(None, 10\)"):
        ij.FilteredError(ij.newton_kvaerno5())


def test_stage_newton_stops_on_its_update_in_the_given_units():
    # x^3 + x = b (a root SciPy's brentq finds): StageNewton stops once an update is below
    # atol, so its root is within atol of SciPy's; with atol below the round-off of the
    # iterates (1e-30) it never stops, and the solve fails at max_steps. It takes two
    # updates at least, even when the first is below atol.
    import optimistix as optx

    b = 3.0
    fn = lambda x, _: x**3 + x - b  # noqa: E731
    ref = scipy.optimize.brentq(lambda x: x**3 + x - b, 0.0, 2.0, xtol=1e-15)
    sol = optx.root_find(fn, ij.StageNewton(rtol=0.0, atol=1e-6), jnp.array(0.5), max_steps=20, throw=False)
    assert sol.result == optx.RESULTS.successful and abs(float(sol.value) - ref) < 1e-6
    stuck = optx.root_find(fn, ij.StageNewton(rtol=0.0, atol=1e-30), jnp.array(0.5), max_steps=20, throw=False)
    assert stuck.result == optx.RESULTS.nonlinear_max_steps_reached
    loose = optx.root_find(fn, ij.StageNewton(rtol=0.0, atol=1e30), jnp.array(0.5), max_steps=20, throw=False)
    assert loose.result == optx.RESULTS.successful and int(loose.stats["num_steps"]) == 2


def test_stage_tolerance_solves_the_stages_to_a_tolerance_in_y():
    # The stage root finder stops when gamma h norm(diff / (stage_tolerance (atol + rtol
    # |y0|))) < 1, by hand; and the step (h = 1) uses it: with a stage tolerance of 1e30
    # StageNewton stops after two Newton updates, which leaves the cubic's stages off,
    # while 0.1 agrees with the wrapped root finder's converged solve. The filtered
    # solver solves its stages the same way.
    import optimistix as optx

    inner = diffrax.Kvaerno5(root_finder=optx.Newton(rtol=1e-6, atol=1e-8, norm=optx.rms_norm))
    gamma = float(np.max(inner.tableau.a_diagonal))
    t0, t1, y0 = jnp.asarray(0.0), jnp.asarray(1.0), jnp.array([1.0, -2.0])
    for wrapper in (ij.StageTolerance, ij.FilteredError):
        rf = wrapper(inner, stage_tolerance=0.5).stage_solver(t0, t1, y0).root_finder
        assert isinstance(rf, ij.StageNewton) and rf.rtol == 0.0
        diff = jnp.array([3e-7, -1e-6])
        by_hand = gamma * 1.0 * np.sqrt(np.mean((diff / (0.5 * (1e-8 + 1e-6 * np.array([1.0, 2.0])))) ** 2))
        np.testing.assert_allclose(rf.scale * rf.norm(diff / rf.atol), by_hand, rtol=1e-14)

    term = diffrax.ODETerm(lambda t, y, args: -(y**3) - y)

    def y1(stage_tolerance):
        s = ij.StageTolerance(inner, stage_tolerance=stage_tolerance)
        y, _, _, _, result = s.step(term, t0, t1, y0, None, s.init(term, t0, t1, y0, None), False)
        assert result == diffrax.RESULTS.successful
        return np.asarray(y)

    converged = y1(None)
    assert np.max(np.abs(y1(1e30) - converged)) > 1e-6
    np.testing.assert_allclose(y1(0.1), converged, rtol=1e-7, atol=1e-9)


def test_a_failed_stage_solve_stops_the_steps_later_stages():
    # One Kvaerno5 step (6 implicit stages) of y' = -y^3 - y, each stage solve given two
    # Newton updates: with a stage tolerance of 1e30 every stage passes after two; with
    # 1e-30 the first implicit stage fails, and returns NaN so that the later stages, built
    # on it, stop before their first update: 12 field evaluations (primal and tangents)
    # against 42 (42 before, when each later stage ran its two updates too). The step is
    # rejected either way: y0 back, an infinite estimate.
    import optimistix as optx

    from invariant_jax import solvers

    inner = diffrax.Kvaerno5(root_finder=optx.Newton(rtol=1e-6, atol=1e-8, norm=optx.rms_norm), root_find_max_steps=2)
    term = diffrax.ODETerm(lambda t, y, args: -(solvers.count_evaluations(y) ** 3) - y)
    t0, t1, y0 = jnp.asarray(0.0), jnp.asarray(0.5), jnp.array([1.0, -2.0])
    count = [0]

    def step(stage_tolerance):
        s = ij.StageTolerance(inner, stage_tolerance=stage_tolerance)
        count[0] = 0
        out = jax.jit(lambda y: s.step(term, t0, t1, y, None, s.init(term, t0, t1, y, None), False))(y0)
        jax.block_until_ready(out)
        jax.effects_barrier()
        return out, count[0]

    solvers._EVAL_HOOK = lambda k: count.__setitem__(0, count[0] + k)
    try:
        (y_ok, _, _, _, ok), n_ok = step(1e30)
        (y_bad, err, _, _, bad), n_bad = step(1e-30)
    finally:
        solvers._EVAL_HOOK = None
    assert ok == diffrax.RESULTS.successful and bad != diffrax.RESULTS.successful
    assert np.all(np.isfinite(y_ok)) and np.array_equal(y_bad, y0) and np.all(np.isinf(err))
    assert 0 < n_bad <= n_ok / 3


def test_recovering_controller_grows_back_gradually_after_a_failed_step():
    # adapt_step_size by hand: a step of h = 1 fails (infinite error), then every retry
    # passes with a tiny error. PIDController retries at factormin h = 0.2 and then grows
    # by factormax = 10 per step; the recovering one by 1.5 from 0.2: 0.3, 0.45, ...
    # Errors stay finite, its steps are PIDController's.
    y0 = jnp.zeros(2)
    ctrls = [ctrl(rtol=1e-6, atol=1e-6) for ctrl in (diffrax.PIDController, ij.RecoveringPIDController)]
    term = diffrax.ODETerm(lambda t, y, args: -y)
    states = [c.init(term, 0.0, 10.0, y0, 1.0, None, lambda *a: -y0, 5)[1] for c in ctrls]
    sizes = [[], []]
    t0, t1 = [0.0, 0.0], [1.0, 1.0]
    for k in range(5):
        err = jnp.full(2, jnp.inf if k == 0 else 1e-12)
        for i, c in enumerate(ctrls):
            keep, t0[i], t1[i], _, states[i], _ = c.adapt_step_size(t0[i], t1[i], y0, y0, None, err, 5, states[i])
            assert bool(keep) == (k > 0)
            sizes[i].append(float(t1[i] - t0[i]))
    np.testing.assert_allclose(sizes[0], [0.2, 2.0, 20.0, 200.0, 2000.0], rtol=1e-12)
    np.testing.assert_allclose(sizes[1], [0.2, 0.3, 0.45, 0.675, 1.0125], rtol=1e-12)
    # with a horizon of one failed step, the cap binds until the step starts past t = 1:
    # the steps end at 0.2, 0.5, 0.95, 1.625, then PIDController's 10 x 0.675
    ctrl = ij.RecoveringPIDController(rtol=1e-6, atol=1e-6, horizon=1.0)
    state, t0, t1, got = ctrl.init(term, 0.0, 10.0, y0, 1.0, None, lambda *a: -y0, 5)[1], 0.0, 1.0, []
    for k in range(5):
        err = jnp.full(2, jnp.inf if k == 0 else 1e-12)
        _, t0, t1, _, state, _ = ctrl.adapt_step_size(t0, t1, y0, y0, None, err, 5, state)
        got.append(float(t1 - t0))
    np.testing.assert_allclose(got, [0.2, 0.3, 0.45, 0.675, 6.75], rtol=1e-12)
    # no failure: the same steps as PIDController (its next step passed through; two
    # programs compiled apart, so compared to round-off, not bit for bit)
    sols = [
        diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, 5.0, 0.1, jnp.ones(2), stepsize_controller=c, saveat=diffrax.SaveAt(steps=True)
        )
        for c in ctrls
    ]
    assert int(sols[0].stats["num_steps"]) == int(sols[1].stats["num_steps"]) > 5
    np.testing.assert_allclose(sols[0].ts, sols[1].ts, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="recovery must be a number above 1"):
        ij.RecoveringPIDController(rtol=1e-6, atol=1e-6, recovery=1.0)
    with pytest.raises(ValueError, match="horizon"):
        ij.RecoveringPIDController(rtol=1e-6, atol=1e-6, horizon=0.0)


def test_step_recovery_builds_the_controller_it_names():
    # The options' `recovery` (a number or an ij.StepRecovery) builds the same controller
    # as `RecoveringPIDController` given those settings: the cap sequence of the test above
    # (one failed step, then four accepted), with and without a horizon.
    y0 = jnp.ones(2)
    term = diffrax.ODETerm(lambda t, y, args: -y)

    def sizes(ctrl):
        state, t0, t1, got = ctrl.init(term, 0.0, 10.0, y0, 1.0, None, lambda *a: -y0, 5)[1], 0.0, 1.0, []
        for k in range(5):
            err = jnp.full(2, jnp.inf if k == 0 else 1e-12)
            _, t0, t1, _, state, _ = ctrl.adapt_step_size(t0, t1, y0, y0, None, err, 5, state)
            got.append(float(t1 - t0))
        return got

    tol = dict(rtol=1e-6, atol=1e-6)
    assert ij.SolverOptions(**tol, recovery=1.5).recovery == ij.StepRecovery(1.5)
    np.testing.assert_allclose(
        sizes(ij.SolverOptions(**tol, recovery=1.5).get_controller()), [0.2, 0.3, 0.45, 0.675, 1.0125]
    )
    with_horizon = ij.SolverOptions(**tol, recovery=ij.StepRecovery(1.5, horizon=1.0)).get_controller()
    np.testing.assert_allclose(sizes(with_horizon), [0.2, 0.3, 0.45, 0.675, 6.75], rtol=1e-12)
    assert isinstance(ij.SolverOptions(**tol).get_controller(), diffrax.PIDController)
    assert not isinstance(ij.SolverOptions(**tol).get_controller(), ij.RecoveringPIDController)
    flow = ij.FlowPhaseOptions(recovery=ij.StepRecovery(2.0, horizon=100.0))
    assert (flow.recovery.growth, flow.recovery.horizon) == (2.0, 100.0)
    assert (
        ij.FlowPhaseOptions().recovery == ij.StepRecovery(1.5) and ij.FlowPhaseOptions(recovery=None).recovery is None
    )
    for bad, match in (
        (dict(growth=1.0), "growth must be a number above 1"),
        (dict(horizon=-1.0), "horizon"),
    ):
        with pytest.raises(ValueError, match=match):
            ij.StepRecovery(**bad)
    for bad in (1.0, True, "1.5"):
        with pytest.raises(ValueError, match="recovery must be a number above 1.*StepRecovery"):
            ij.SolverOptions(recovery=bad)
        with pytest.raises(ValueError, match="recovery must be a number above 1.*StepRecovery"):
            ij.FlowPhaseOptions(recovery=bad)


def test_stage_tolerance_holds_at_steps_near_the_largest_float():
    # y' = -A (y - 1) from its fixed point, one step of h = 1e305: the stage updates are
    # round-off, and a tolerance of 1e-9 / (gamma h) would be below the smallest normal
    # float (flushed to zero on XLA's CPU). Scaling the update instead, the step succeeds
    # and stays at the fixed point.
    import optimistix as optx

    A = jnp.asarray(np.diag([1e-3, 1.0, 30.0]))
    term = diffrax.ODETerm(lambda t, y, args: -A @ (y - 1.0))
    inner = diffrax.Kvaerno5(root_finder=optx.Newton(rtol=1e-8, atol=1e-8, norm=optx.rms_norm))
    t0, t1, y0 = jnp.asarray(1e305), jnp.asarray(1.1e306), jnp.ones(3)
    s = ij.StageTolerance(inner)
    y, _, _, _, result = s.step(term, t0, t1, y0, None, s.init(term, t0, t1, y0, None), False)
    assert result == diffrax.RESULTS.successful
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-12)


def test_evaluation_counter_counts_each_point_of_a_batch():
    # `count_evaluations` against counts known by construction: one per point, plus one
    # per tangent direction (E = 3) under `jacfwd`, under `vmap` (5 points) and `lax.map`.
    from invariant_jax import solvers

    count = [0]
    f = lambda y: jnp.sin(solvers.count_evaluations(y))  # noqa: E731
    y = jnp.linspace(0.1, 1.5, 15).reshape(5, 3)
    solvers._EVAL_HOOK = lambda k: count.__setitem__(0, count[0] + k)
    try:
        seen = {}
        for name, fn in {
            "one": lambda y: f(y[0]),
            "vmap": jax.vmap(f),
            "map": lambda y: jax.lax.map(f, y),
            "jacfwd": lambda y: jax.jacfwd(f)(y[0]),
            "vmap of jacfwd": jax.vmap(jax.jacfwd(f)),
        }.items():
            count[0] = 0
            jax.block_until_ready(jax.jit(fn)(y))
            jax.effects_barrier()
            seen[name] = count[0]
    finally:
        solvers._EVAL_HOOK = None
    assert seen == {"one": 1, "vmap": 5, "map": 5, "jacfwd": 4, "vmap of jacfwd": 20}
