"""Kink-aware integration: events, crossings, sliding modes, conservation."""

import dataclasses

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.special

import invariant_jax as ij
from invariant_jax.kinks import kink_aware_flow


def sliding_case():
    """x -> h (relu) -> y with data chosen so that on the surface w0 = 0 (sample 0) the
    field pushes w0 down on the active side and up on the inactive side:
    sample 0: x = (1, 0), y = -1; sample 1: x = (1, 1), y = 1. Sliding lasts while
    0 < a w1 < 1."""
    g = ij.mlp([2, 1, 1], bias=False)  # edges (x0,h), (x1,h), (h,y)
    net = ij.DAGNetwork(g, "relu", edge_weights=jnp.array([0.3, 0.2, 1.0]))
    X = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    Y = jnp.array([-1.0, 1.0])
    return net, X, Y


def test_non_piecewise_linear_activation_is_refused():
    g = ij.mlp([2, 3, 1])
    net = ij.DAGNetwork(g, "softplus", key=jax.random.PRNGKey(0))
    X = jnp.ones((4, 2))
    with pytest.raises(ValueError, match="piecewise-linear.*softplus.*solver='tsit5'.*kvaerno5_hessian.*gauss4"):
        kink_aware_flow(net, X, jnp.ones(4), 1.0)


def test_max_events_is_told_by_result_alone():
    """`max_events` stopping the flow is `result == RESULTS.max_events_reached` (as the
    removed `events_exhausted` field computed it: the cap reached before `t1`); the old
    name survives as a property that warns."""
    net, X, Y = sliding_case()
    kf = kink_aware_flow(net, X, Y, 3.0, solver="tsit5", rtol=1e-8, atol=1e-8, kinks=ij.KinkOptions(max_events=1))
    assert int(kf.num_events) == 1 and float(kf.flow.t_final) < 3.0  # the cap binds (the old field's test)
    assert bool(kf.result == ij.RESULTS.max_events_reached) and not bool(kf.success)
    with pytest.warns(DeprecationWarning, match="events_exhausted is deprecated"):
        assert bool(kf.events_exhausted)
    done = eqx.tree_at(lambda k: k.flow.result, kf, ij.RESULTS.successful)  # a flow that reached t1
    with pytest.warns(DeprecationWarning):
        assert not bool(done.events_exhausted) and bool(done.success)
    assert "events_exhausted" not in {f.name for f in dataclasses.fields(kf)}


def test_bad_options():
    net, X, Y = sliding_case()
    with pytest.raises(ValueError, match="max_sliding"):
        kink_aware_flow(net, X, Y, 1.0, kinks=ij.KinkOptions(max_sliding=-1))
    with pytest.raises(ValueError, match="t0 < t1"):
        kink_aware_flow(net, X, Y, 0.0)
    with pytest.raises(ValueError, match="event_tol"):
        kink_aware_flow(net, X, Y, 1.0, kinks=ij.KinkOptions(event_tol=0.0))
    with pytest.raises(TypeError, match="KinkOptions"):
        kink_aware_flow(net, X, Y, 1.0, kinks=dict(max_events=3))


def test_constructed_sliding_case_stays_on_surface():
    net, X, Y = sliding_case()
    kf = kink_aware_flow(net, X, Y, 4.0, solver="tsit5", rtol=1e-8, atol=1e-8, saveat=ij.SaveTimes(n_save=41))
    assert bool(kf.success)
    # the names every flow result answers, as Flow does
    assert np.array_equal(kf.theta_final, kf.flow.theta_final) and kf.loss_final == kf.flow.loss_final
    assert np.array_equal(kf.final.edge_weights(), kf.flow.theta_final)
    assert int(kf.num_sliding_entries) >= 1
    assert float(kf.sliding_time) > 0.5
    # on the surface: w0 = z_{0,h} stays 0 to round-off while sliding (linear invariant)
    assert float(kf.surface_residual) < 1e-12
    th = np.asarray(kf.flow.thetas)
    t = np.asarray(kf.flow.ts)
    sliding = (t > kf.event_times[0] + 1e-6) & (t < (kf.event_times[1] if int(kf.num_events) > 1 else 4.0))
    assert sliding.sum() >= 3
    assert np.max(np.abs(th[sliding, 0])) < 1e-12
    # bounded work: a handful of events and steps
    assert int(kf.num_events) <= 4 and int(kf.flow.num_steps) < 200
    # Filippov check against the analytic sliding field: on w0 = 0 only sample 1 acts on
    # (w1, a) (sample 0 has zero output and zero w1-gradient), so (w1, a) follow the
    # one-sample flow with z = w1: d w1/dt = -(a w1 - 1) a / 2, d a/dt = -(a w1 - 1) w1 / 2.
    t_in = float(kf.event_times[0])
    i0 = int(np.argmax(t > t_in + 1e-6))
    j = int(np.flatnonzero(sliding)[-1])
    rhs = lambda s, u: [-(u[1] * u[0] - 1) * u[1] / 2, -(u[1] * u[0] - 1) * u[0] / 2]  # noqa: E731
    ref = scipy.integrate.solve_ivp(rhs, (t[i0], t[j]), th[i0, 1:], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(th[j, 1:], ref.y[:, -1], atol=1e-6)


def test_gauss_stage_solve_with_the_frozen_jacobian():
    """Gauss steps of a kink-aware flow iterate with the pattern-frozen field's Jacobian,
    not the Filippov field's. While a pair slides the two differ, and the step must still
    be the Gauss collocation solution, which SciPy's `fsolve` finds independently."""
    from invariant_jax.kinks import make_kink_integrator
    from invariant_jax.kinks._filippov import no_ties
    from invariant_jax.solvers import gauss_legendre_tableau, gl_step

    net, X, Y = sliding_case()
    prob = make_kink_integrator(net, X, Y, 1.0).prob
    theta = jnp.array([0.0, 0.2, 1.0])  # sample 0 on its surface w0 = 0, sliding
    P = jnp.array([[False], [True]])
    slots = jnp.full((prob.max_sliding,), -1).at[0].set(0)
    field = jax.jit(lambda th: prob.field(th, P, slots, no_ties(prob.max_sliding, th.dtype))[0])
    J_exact = jax.jit(jax.jacfwd(field))(theta)
    J_frozen = eqx.filter_jit(prob.frozen_jacobian)(theta, P)  # what the flow's Gauss steps use
    assert float(jnp.max(jnp.abs(J_exact - J_frozen))) > 0.1
    # with no pair sliding it is the field's own Jacobian: central differences of the
    # field, inside one pattern (both pairs active at the network's own weights)
    th = jnp.array([0.3, 0.2, 1.0])
    P1, free = jnp.array([[True], [True]]), jnp.full((prob.max_sliding,), -1)
    f1 = jax.jit(lambda t: prob.field(t, P1, free, no_ties(prob.max_sliding, t.dtype))[0])
    e = 1e-6 * np.eye(3)
    J_fd = np.stack([(np.asarray(f1(th + e[k])) - np.asarray(f1(th - e[k]))) / 2e-6 for k in range(3)], axis=1)
    np.testing.assert_allclose(eqx.filter_jit(prob.frozen_jacobian)(th, P1), J_fd, rtol=0, atol=1e-7)

    h = 0.2
    A, b, _ = gauss_legendre_tableau(2)
    f = lambda y: np.asarray(field(jnp.asarray(y)))  # noqa: E731

    def stage_residual(z):
        Z = z.reshape(2, 3)
        return (Z - h * A @ np.stack([f(theta + Zi) for Zi in Z])).ravel()

    Z = scipy.optimize.fsolve(stage_residual, np.zeros(6), xtol=1e-15).reshape(2, 3)
    reference = np.asarray(theta) + h * b @ np.stack([f(theta + Zi) for Zi in Z])
    step = jax.jit(lambda J: gl_step(lambda t, y: field(y), J, 0.0, theta, h, ij.GaussLegendre(stages=2)))
    for J in (J_exact, J_frozen):
        y1, ok = step(J)
        assert bool(ok)
        np.testing.assert_allclose(np.asarray(y1), reference, rtol=0, atol=1e-14)


@pytest.mark.slow
def test_sliding_mode_conserves_with_gauss():
    net, X, Y = sliding_case()
    kf = kink_aware_flow(net, X, Y, 4.0, solver="gauss4", rtol=1e-6, atol=1e-6, saveat=ij.SaveTimes(n_save=21))
    assert bool(kf.success) and int(kf.num_sliding_entries) >= 1
    assert float(kf.flow.drift_relative) < 1e-12
    ft = ij.gradient_flow(net, X, Y, 4.0, rtol=1e-6, atol=1e-6, saveat=ij.SaveTimes(n_save=21))
    assert float(ft.drift_relative) > 100 * max(float(kf.flow.drift_relative), 1e-16)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random_dag", "mlp"])
def test_gauss_kink_aware_conserves_on_random_relu_dags(kind):
    if kind == "random_dag":
        g = ij.random_dag(3, 6, 1, 0.6, 0, bias=True)
        net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
        X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(100))
    else:  # a case with several crossings
        g = ij.mlp([3, 6, 1], bias=False)
        X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
        net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(1))
    kf = kink_aware_flow(net, X, Y, 2.0, solver="gauss4", rtol=1e-6, atol=1e-6, saveat=ij.SaveTimes(n_save=11))
    ft = ij.gradient_flow(net, X, Y, 2.0, rtol=1e-6, atol=1e-6, saveat=ij.SaveTimes(n_save=11))
    assert bool(kf.success)
    if kind == "mlp":
        assert int(kf.num_crossings) >= 2
        # events located on the Gauss solution itself: no spurious extra events
        kt = kink_aware_flow(net, X, Y, 2.0, solver="tsit5", rtol=1e-10, atol=1e-10, saveat=ij.SaveTimes(n_save=11))
        assert int(kf.num_events) == int(kt.num_events)
        # event times to a few times the Gauss flow's tolerance: 1.3e-6 here since each
        # segment starts with the step proposed at the event (1.2e-7 with a fresh first step)
        np.testing.assert_allclose(kf.event_times, kt.event_times, atol=5e-6)
    assert float(kf.flow.drift_relative) < 1e-12
    assert float(ft.drift_relative) > 1e3 * max(float(kf.flow.drift_relative), 1e-16)


@pytest.mark.slow
def test_agrees_with_brute_force_on_crossings():
    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
    net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    kf = kink_aware_flow(net, X, Y, 2.0, solver="tsit5", rtol=1e-10, atol=1e-10, saveat=ij.SaveTimes(n_save=11))
    ref = ij.gradient_flow(
        net,
        X,
        Y,
        2.0,
        saveat=ij.SaveTimes(n_save=11),
        solver=ij.SolverOptions(rtol=1e-13, atol=1e-13, max_steps=500_000),
    )
    assert bool(ref.success) and bool(kf.success)
    assert int(kf.num_crossings) >= 2 and int(kf.num_sliding_entries) == 0
    np.testing.assert_allclose(kf.flow.thetas, ref.thetas, atol=1e-7)


@pytest.mark.slow
def test_event_time_located_to_root_finder_tolerance():
    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
    net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    kf = kink_aware_flow(
        net, X, Y, 2.0, solver="tsit5", rtol=1e-12, atol=1e-12, kinks=ij.KinkOptions(max_events=1, event_tol=1e-13)
    )
    assert bool(kf.result == ij.RESULTS.max_events_reached) and not bool(kf.success)
    with pytest.warns(DeprecationWarning, match="events_exhausted is deprecated"):
        assert bool(kf.events_exhausted)
    t_ev = float(kf.event_times[0])
    th = kf.flow.theta_final
    Z = net.with_edge_weights(th).preactivations(X)
    k = int(jnp.argmin(jnp.abs(Z)))
    # the located state is on the surface to (slope of z) * event_tol
    Z0 = net.preactivations(X).reshape(-1)
    dz = float(
        jnp.abs(
            jax.jvp(
                lambda t: net.with_edge_weights(t).preactivations(X).reshape(-1)[k],
                (th,),
                (-jax.grad(ij.edge_loss_fn(net, X, Y))(th),),
            )[1]
        )
    )
    assert abs(float(Z.reshape(-1)[k])) <= dz * 1e-13 + 1e-14
    # independent reference: brute-force flow with dense output, Brent on z_k(t)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: -jax.grad(ij.edge_loss_fn(net, X, Y))(y)),
        diffrax.Tsit5(),
        0.0,
        2.0 * t_ev,
        None,
        net.edge_weights(),
        stepsize_controller=diffrax.PIDController(rtol=1e-13, atol=1e-13),
        saveat=diffrax.SaveAt(dense=True),
        max_steps=200_000,
    )
    zk = lambda t: float(net.with_edge_weights(sol.evaluate(t)).preactivations(X).reshape(-1)[k])  # noqa: E731
    assert np.sign(zk(0.0)) == np.sign(float(Z0[k]))
    t_ref = scipy.optimize.brentq(zk, 0.5 * t_ev, min(1.5 * t_ev, 2.0 * t_ev), xtol=1e-15)
    assert abs(t_ev - t_ref) < 1e-9


@pytest.mark.slow
def test_vmap_keeps_pattern_state_per_trajectory():
    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    run = lambda n: kink_aware_flow(n, X, Y, 1.0, solver="tsit5", rtol=1e-8, atol=1e-8, saveat=ij.SaveTimes(n_save=5))  # noqa: E731
    batched = eqx.filter_vmap(run)(nets)
    for i in range(3):
        one = run(jax.tree.map(lambda a: a[i], nets))
        assert int(batched.num_events[i]) == int(one.num_events)
        np.testing.assert_array_equal(batched.pattern_final[i], one.pattern_final)
        np.testing.assert_allclose(batched.flow.theta_final[i], one.flow.theta_final, atol=1e-10)


def smoothed_relu(beta):
    """softplus(beta z) / beta (`ij.smoothed_relu`, checked against NumPy in
    `test_smoothed_relu_against_numpy`)."""
    return ij.smoothed_relu(beta)


def test_smoothed_relu_against_numpy():
    z = np.linspace(-3.0, 3.0, 61)
    for beta in (1.0, 1e2, 1e4):
        act = ij.smoothed_relu(beta)
        np.testing.assert_allclose(np.asarray(act(jnp.asarray(z))), np.logaddexp(0.0, beta * z) / beta, rtol=1e-12)
        np.testing.assert_allclose(
            np.asarray(act.derivative(jnp.asarray(z))), scipy.special.expit(beta * z), rtol=1e-12
        )
        assert np.max(np.abs(np.asarray(act(jnp.asarray(z))) - np.maximum(z, 0.0))) <= np.log(2.0) / beta * (1 + 1e-12)
        assert act is ij.smoothed_relu(beta) and act.smooth and not act.kinked
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite beta > 0"):
            ij.smoothed_relu(bad)


@pytest.mark.slow
def test_multi_surface_sliding_matches_the_smooth_limit():
    """Independent reference for sliding on several surfaces at once: the gradient flow
    of the smoothed net (softplus_beta, Kvaerno5) converges to the kink-aware flow at
    first order in 1/beta. (Brute-force Tsit5 chatters and lands 8e-2 away here.)"""
    g = ij.mlp([3, 8, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 12, key=jax.random.PRNGKey(101))
    net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    ts = np.linspace(0.0, 2.0, 5)
    kf = kink_aware_flow(net, X, Y, 2.0, solver="tsit5", rtol=1e-10, atol=1e-10, saveat=ts)
    assert bool(kf.success) and int(kf.num_ambiguous) == 0
    assert int(kf.max_sliding_pairs) >= 3 and int(kf.num_sliding_exits) >= 1
    errs = []
    for beta in (1e3, 1e4):
        sm = ij.DAGNetwork(g, smoothed_relu(beta), edge_weights=net.edge_weights())
        fl = ij.gradient_flow(
            sm, X, Y, 2.0, saveat=ts, solver=ij.SolverOptions("kvaerno5", rtol=1e-10, atol=1e-10, max_steps=100_000)
        )
        assert bool(fl.success)
        errs.append(float(jnp.max(jnp.abs(fl.thetas - kf.flow.thetas))))
    assert errs[1] < 5e-4
    assert errs[0] > 5 * errs[1]  # first-order convergence in 1/beta


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["tsit5", "gauss4"])
def test_lean_segments_take_diffeqsolves_steps_and_events(solver):
    # kinks/_segment.py writes out diffeqsolve's loop (+ the Illinois root find) for one
    # segment; the reference is the same segment run by diffrax.diffeqsolve
    # (reference_solve=True). Two compiled programs: the discrete path (events, steps)
    # is the same, the numbers agree to round-off amplified by adaptive stepping. (The
    # lean segments also check the condition inside each step, which diffeqsolve does
    # not; on these inits that finds no event the step ends miss.)
    import dataclasses

    from invariant_jax.kinks import make_kink_integrator

    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 12, key=jax.random.PRNGKey(3))
    tol = 1e-8
    integ = make_kink_integrator(
        ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0)),
        X,
        Y,
        1.0,
        options=ij.SolverOptions(solver, rtol=tol, atol=tol, max_steps=10_000),
        saveat=ij.SaveTimes(n_save=5),
    )
    ref = dataclasses.replace(integ, reference_solve=True)
    thetas = jnp.stack([ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(s)).edge_weights() for s in range(4)])
    # one_site=True: the condition in one loop (unbatched default); False: a step loop
    # and a root-find loop (the engine's vmap mode)
    a = [eqx.filter_jit(integ.run)(t) for t in thetas]
    a2 = [eqx.filter_jit(dataclasses.replace(integ, one_site=False).run)(t) for t in thetas]
    b = [eqx.filter_jit(ref.run)(t) for t in thetas]
    assert sum(int(x.n_events) for x in a) > 4  # the comparison covers events
    for x, y in zip(a + a2, b + b):
        assert int(x.n_events) == int(y.n_events) and int(x.n_cross) == int(y.n_cross)
        assert int(x.n_sin) == int(y.n_sin) and int(x.n_sout) == int(y.n_sout)
        assert abs(int(x.steps) - int(y.steps)) <= int(x.n_events) + 1
        ev = jnp.isfinite(y.ev_times)
        assert float(jnp.max(jnp.where(ev, jnp.abs(x.ev_times - y.ev_times), 0.0))) <= 100 * tol
        assert float(jnp.max(jnp.abs(x.theta - y.theta))) <= 100 * tol
        assert float(jnp.max(jnp.abs(x.ys - y.ys))) <= 100 * tol


@pytest.mark.parametrize("solver", ["tsit5", "gauss4"])
def test_a_segment_stops_past_a_jump_of_its_condition(solver):
    # At a two-fold the sliding weights' event condition jumps (its determinant changes
    # sign, `_filippov._weights_value`), and a restart before the jump meets it again at
    # once: init 401537 of the demo sweep took 176 events at one time (Tsit5 1e-8). The
    # root finder's last iterate lies on either side of a jump, so a segment stops at its
    # final bracket's far end, and Gauss-Legendre's refinement keeps a Gauss step past
    # the event (`_segment.Refine`). Here the condition is a pure jump where y' = -y
    # passes a level: for every level the segment must stop where it is negative. (Before
    # the change both failed: Tsit5 at the first level, Gauss4 at 28 of the 29, whose
    # Gauss steps jump up to 3e-6 later than the Hermite interpolant.)
    from invariant_jax.kinks._segment import solve_segment
    from invariant_jax.solvers import GaussLegendre

    gl = solver == "gauss4"
    inner = GaussLegendre(keep_jacobian=True, newton_jacobian=lambda t, y, a: -jnp.eye(2)) if gl else diffrax.Tsit5()
    controller = diffrax.PIDController(rtol=1e-8, atol=1e-8)

    @jax.jit
    def stop(level):
        return solve_segment(
            lambda t, y, a: -y, lambda ys, a: jnp.where(ys[:, 0] > a, 1.0, -1.0), inner, controller, 0.0, 3.0,
            jnp.array([1.0, 2.0]), level, jnp.linspace(0.0, 3.0, 4), max_steps=64, event_tol=1e-13, one_site=gl,
            refine=gl,
        )  # fmt: skip

    for level in np.linspace(0.2, 0.9, 29):
        sol = stop(level)
        assert sol.result == diffrax.RESULTS.event_occurred
        assert float(sol.y[0]) <= level  # past the jump
        # near it: the solution's error; for Gauss4 the refinement's offsets from the
        # interpolant's root, 1e-6 and 1e-4 of a step (~0.2 here), and a secant
        assert abs(float(sol.t) + np.log(level)) < (1e-4 if gl else 1e-7)


@pytest.mark.parametrize("solver", ["gauss4", "gauss4-interpolant-end", "tsit5"])
def test_a_segment_returns_its_conditions_aux_at_its_end(solver, monkeypatch):
    # A condition that returns `(values, aux)` hands the segment's end its aux from its
    # own evaluation there (the kink-aware restart takes its sliding weights so, with no
    # Filippov solve of its own). A refined Gauss segment ends at the refinement's last
    # point, or where the refinement's step is not kept (forced here), at the
    # interpolant's root, evaluated in one more iteration; Tsit5's (two loops) at the
    # final bracket's end past the root. The reference: the aux function at the end state.
    from invariant_jax.kinks import _segment
    from invariant_jax.solvers import GaussLegendre

    gl = solver.startswith("gauss4")
    if solver == "gauss4-interpolant-end":
        monkeypatch.setattr(_segment, "_end_point", lambda f, R: jnp.zeros((), bool))
    inner = GaussLegendre(keep_jacobian=True, newton_jacobian=lambda t, y, a: -jnp.eye(2)) if gl else diffrax.Tsit5()
    aux_of = lambda y: (2.0 * y, y[0] - y[1])  # noqa: E731 (exact in any program: no FMA, no libm)
    sol = jax.jit(
        lambda y0: _segment.solve_segment(
            lambda t, y, a: -y, lambda ys, a: (ys[:, 0] - 0.3, aux_of(ys[-1])), inner,
            diffrax.PIDController(rtol=1e-8, atol=1e-8), 0.0, 3.0, y0, None, jnp.linspace(0.0, 3.0, 4),
            max_steps=64, event_tol=1e-13, one_site=gl, refine=gl, aux0=aux_of(jnp.zeros(2)),
        )
    )(jnp.array([1.0, 2.0]))  # fmt: skip
    assert sol.result == diffrax.RESULTS.event_occurred
    assert abs(float(sol.t) + np.log(0.3)) < 1e-4
    for a, b in zip(sol.aux, aux_of(sol.y)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_segment_ends_with_the_step_diffeqsolve_takes_next():
    # A segment stopped by an event hands the next segment the step the controller
    # proposed after the event's step (`SegmentSolution.dt_next`), not a fresh initial
    # step selection. The reference: diffeqsolve over the same interval with no event,
    # whose steps are the segment's up to the event and whose next step is the proposal
    # (y' = -y, no rejected step). `first_step` is diffeqsolve's own first step.
    from invariant_jax.kinks._segment import first_step, solve_segment

    solver = diffrax.Tsit5()
    controller = diffrax.PIDController(rtol=1e-6, atol=1e-6)
    vf = lambda t, y, args: -y  # noqa: E731
    y0 = jnp.array([1.0, 2.0])
    ref = diffrax.diffeqsolve(
        diffrax.ODETerm(vf), solver, 0.0, 3.0, None, y0, stepsize_controller=controller,
        saveat=diffrax.SaveAt(steps=True), max_steps=64,
    )  # fmt: skip
    ts = np.asarray(ref.ts)[: int(ref.stats["num_steps"])]
    assert int(ref.stats["num_rejected_steps"]) == 0 and len(ts) > 5
    np.testing.assert_allclose(float(first_step(vf, solver, controller, 0.0, 3.0, y0, None)), ts[0], rtol=1e-12)
    k = 3  # the event lies inside step k (from ts[k-1] to ts[k])
    level = float(jnp.exp(-(ts[k - 1] + ts[k]) / 2))
    sol = solve_segment(
        vf, lambda ys, args: ys[:, 0] - level, solver, controller, 0.0, 3.0, y0, None, jnp.linspace(0.0, 3.0, 4),
        max_steps=64, event_tol=1e-13,
    )  # fmt: skip
    assert sol.result == diffrax.RESULTS.event_occurred and int(sol.num_steps) == k + 1
    np.testing.assert_allclose(float(sol.dt_next), ts[k + 1] - ts[k], rtol=1e-12)
    # a segment given that step as its first takes it
    again = solve_segment(
        vf, lambda ys, args: ys[:, 0] + 1.0, solver, controller, ts[k], 3.0, ref.ys[k], None, jnp.linspace(0.0, 3.0, 4),
        max_steps=64, event_tol=1e-13, dt0=ts[k + 1] - ts[k],
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(again.y), np.asarray(ref.ys[int(ref.stats["num_steps"]) - 1]), rtol=1e-12)
