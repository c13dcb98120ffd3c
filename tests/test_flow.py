import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij
from scipy_reference import scipy_flow


@pytest.fixture(scope="module")
def relu_setup():
    g = ij.random_dag(3, 8, 1, 0.45, 7, bias=True)
    X, Y, _ = ij.teacher_student(g, 16, key=jax.random.key(11))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(5))
    return g, X, Y, net


def test_drift_shrinks_with_tolerance(relu_setup):
    g, X, Y, net = relu_setup
    drifts = []
    for tol in (1e-6, 1e-8, 1e-10):
        f = ij.gradient_flow(net, X, Y, 2.0, rtol=tol, atol=tol)  # one program for the three
        assert bool(f.success), ij.result_message(f.result)
        drifts.append(float(f.drift))
    assert drifts[2] < 1e-7
    assert drifts[0] > drifts[1] > drifts[2]
    assert drifts[0] / drifts[2] > 100


def test_weight_decay_law(relu_setup):
    g, X, Y, net = relu_setup
    lam = 0.3
    f = ij.gradient_flow(net, X, Y, 2.0, rtol=1e-10, atol=1e-10, loss=ij.Objective(weight_decay=lam))
    c0 = ij.conserved_quantities(net)
    expected = c0[None] * jnp.exp(-2 * lam * f.ts)[:, None]
    np.testing.assert_allclose(f.conserved, expected, atol=1e-8)
    assert float(f.drift) < 1e-8
    # and it is a real decay, not conservation
    assert float(jnp.max(jnp.abs(f.conserved[-1] - c0))) > 0.1 * float(jnp.max(jnp.abs(c0)))


def test_flow_matches_scipy_dop853_for_softplus():
    g = ij.random_dag(2, 6, 1, 0.5, 4, bias=True)
    X, Y, _ = ij.teacher_student(g, 12, key=jax.random.key(1), activation="tanh")
    net = ij.DAGNetwork(g, "softplus", key=jax.random.key(2))
    ts = np.linspace(0, 3.0, 7)
    f = ij.gradient_flow(net, X, Y, 3.0, rtol=1e-12, atol=1e-12, saveat=ts, solver="dopri8")
    ref = scipy_flow(net, X, Y, 3.0, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=ts)
    np.testing.assert_allclose(np.asarray(f.thetas), ref.y.T, atol=1e-8)


def test_loss_decreases_and_final_network(relu_setup):
    g, X, Y, net = relu_setup
    f = ij.gradient_flow(net, X, Y, 1.0, rtol=1e-8, atol=1e-8)
    assert np.all(np.diff(np.asarray(f.losses)) <= 1e-12)  # gradient flow is a descent
    np.testing.assert_allclose(ij.network_loss(f.final, X, Y), f.losses[-1], rtol=1e-12)
    assert float(f.t_final) == 1.0


def test_vmap_and_jit_over_initial_networks(relu_setup):
    g, X, Y, _ = relu_setup
    keys = jax.random.split(jax.random.key(0), 3)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    run = eqx.filter_jit(eqx.filter_vmap(lambda n: ij.gradient_flow(n, X, Y, 0.5, rtol=1e-9, atol=1e-9)))
    flows = run(nets)
    for i, k in enumerate(keys):
        # one network at a time: gradient_flow's own compiled program, the one
        # test_drift_shrinks_with_tolerance already compiled (t1 and tolerances are arrays)
        single = ij.gradient_flow(ij.DAGNetwork(g, "relu", key=k), X, Y, 0.5, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(flows.theta_final[i], single.theta_final, atol=1e-10)


def test_traced_start_times_under_vmap(relu_setup):
    # each run its own traced t0 (as the flat-channels hover starts where its flow passed
    # maxnorm): gradient flow is autonomous, so [t0, 1] equals [0, 1 - t0] run alone, and
    # t0 == t1 takes no step
    g, X, Y, net = relu_setup
    keys = jax.random.split(jax.random.key(3), 3)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    t0s = jnp.asarray([0.0, 0.25, 1.0])
    run = eqx.filter_jit(
        eqx.filter_vmap(
            lambda n, t0: ij.gradient_flow(n, X, Y, 1.0, t0=t0, saveat=ij.SaveTimes(n_save=3), rtol=1e-10, atol=1e-10)
        )
    )
    flows = run(nets, t0s)
    np.testing.assert_allclose(np.asarray(flows.ts[2]), [1.0, 1.0, 1.0])
    assert int(flows.stats["num_steps"][2]) == 0 and bool(flows.success[2])
    np.testing.assert_array_equal(np.asarray(flows.theta_final[2]), np.asarray(nets.edge_weights()[2]))
    for i in (0, 1):
        single = ij.gradient_flow(
            ij.DAGNetwork(g, "relu", key=keys[i]), X, Y, 1.0 - float(t0s[i]), rtol=1e-10, atol=1e-10
        )
        np.testing.assert_allclose(flows.theta_final[i], single.theta_final, atol=1e-8)
    np.testing.assert_allclose(np.asarray(flows.ts[1]), [0.25, 0.625, 1.0])
    with pytest.raises(ValueError, match="concrete t0"):
        eqx.filter_jit(lambda t0: ij.gradient_flow(net, X, Y, 1.0, t0=t0, saveat=ij.SaveTimes(spacing="log")))(
            jnp.asarray(0.5)
        )


def test_one_compiled_program_per_configuration():
    """A second call with other weights and other data (same shapes and options) reuses the
    compiled program: the loss is traced only on the first call; other options trace again."""
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.key(0), activation="tanh")
    traces = []

    def mse(pred, y):
        traces.append(1)  # runs when traced, not when the compiled program runs
        return 0.5 * jnp.mean((pred - y) ** 2)

    f1 = ij.gradient_flow(ij.DAGNetwork(g, "tanh", key=jax.random.key(1)), X, Y, 1.0, loss=mse)
    n = len(traces)
    assert n > 0
    f2 = ij.gradient_flow(ij.DAGNetwork(g, "tanh", key=jax.random.key(2)), 2 * X, Y + 1, 1.0, loss=mse)
    assert len(traces) == n
    assert not np.allclose(f1.theta_final, f2.theta_final)  # it did run on the new inputs
    # and the cached program computed the flow of the new inputs: the built-in MSE agrees
    f3 = ij.gradient_flow(ij.DAGNetwork(g, "tanh", key=jax.random.key(2)), 2 * X, Y + 1, 1.0)
    np.testing.assert_allclose(f2.theta_final, f3.theta_final, rtol=1e-10, atol=1e-12)
    # the horizon and the tolerances are arrays in the program too: no new trace, and the
    # same numbers as a run that started with them
    f4 = ij.gradient_flow(ij.DAGNetwork(g, "tanh", key=jax.random.key(2)), X, Y, 0.5, loss=mse, rtol=1e-6)
    assert len(traces) == n and float(f4.t_final) == 0.5 and f4.rtol == 1e-6
    assert float(f4.stats["num_steps"]) < float(f1.stats["num_steps"])
    # another solver is another program: traced (jax.eval_shape traces gradient_flow's
    # jitted program without compiling it)
    jax.eval_shape(
        lambda: ij.gradient_flow(ij.DAGNetwork(g, "tanh", key=jax.random.key(2)), X, Y, 1.0, loss=mse, solver="dopri5")
    )
    assert len(traces) > n


def test_failure_is_recorded_not_raised(relu_setup):
    g, X, Y, net = relu_setup
    f = ij.gradient_flow(net, X, Y, 5.0, solver=ij.SolverOptions(rtol=1e-10, atol=1e-10, max_steps=5))
    assert not bool(f.success)
    assert "max_steps" in ij.result_message(f.result)
    assert 0 <= float(f.t_final) < 5.0  # last saved state is kept
    assert bool(jnp.all(jnp.isfinite(f.theta_final)))


@pytest.mark.slow  # the default run checks the same rule, network and data (and t_final < t1):
# tests/test_results_options.py::test_each_stop_rule_reports_its_member_and_the_record_agrees
def test_grad_norm_stopping_rule():
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.key(0), activation="tanh")
    net = ij.DAGNetwork(g, "tanh", key=jax.random.key(1))
    f = ij.gradient_flow(
        net, X, Y, 1e4, rtol=1e-8, atol=1e-8, stop=ij.StopRules(grad_norm_tol=1e-3), saveat=ij.SaveTimes(spacing="log")
    )
    gn = jnp.linalg.norm(jax.grad(ij.edge_loss_fn(net, X, Y))(f.theta_final))
    assert bool(f.success) and float(f.t_final) < 1e4
    assert float(gn) < 1e-3


def test_check_conservation_report(relu_setup):
    g, X, Y, _ = relu_setup
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(jax.random.split(jax.random.key(3), 2))
    rep = ij.check_conservation(nets, X, Y, t1=0.5, rtol=1e-10, atol=1e-10)
    assert rep.passed and rep.drift.shape == (2,)
    assert np.all(rep.identity_residual < 1e-12)
    soft = ij.DAGNetwork(g, "softplus", key=jax.random.key(0))
    with pytest.raises(ValueError, match="not positively homogeneous"):
        ij.check_conservation(soft, X, Y)
    rep = ij.check_conservation(soft, X, Y, t1=0.5, force=True)
    assert not rep.homogeneous and rep.drift[0] > 1e-6  # the law really fails


def test_bad_flow_input(relu_setup):
    g, X, Y, net = relu_setup
    with pytest.raises(ValueError, match="t0 < t1"):
        ij.gradient_flow(net, X, Y, 0.0)
    with pytest.raises(ValueError, match="rtol must be a positive"):
        ij.gradient_flow(net, X, Y, 1.0, rtol=0.0)
    with pytest.raises(ValueError, match="atol must be a positive"):
        ij.gradient_flow(net, X, Y, 1.0, atol=-1e-8)
    with pytest.raises(ValueError, match="X has shape"):
        ij.gradient_flow(net, X[:, :2], Y, 1.0)
    with pytest.raises(ValueError, match="X has 16 samples but Y has 15"):
        ij.gradient_flow(net, X, Y[:15], 1.0)
    with pytest.raises(ValueError, match=r"X\[2, 1\] is not finite"):
        ij.gradient_flow(net, X.at[2, 1].set(jnp.nan), Y, 1.0)
    with pytest.raises(ValueError, match="Unknown solver 'rk99'"):
        ij.gradient_flow(net, X, Y, 1.0, solver="rk99")
    net32 = ij.DAGNetwork(g, "relu", edge_weights=net.edge_weights().astype(jnp.float32))
    with pytest.raises(ValueError, match="tighter than float32"):
        ij.gradient_flow(net32, X.astype(jnp.float32), Y.astype(jnp.float32), 1.0, rtol=1e-10)
    with pytest.raises(ValueError, match="weight_decay must be"):
        ij.gradient_flow(net, X, Y, 1.0, loss=ij.Objective(weight_decay=-1.0))
    with pytest.raises(TypeError, match=r"gradient_flow\(\) got unexpected keyword argument\(s\) 'n_saves'"):
        ij.gradient_flow(net, X, Y, 1.0, n_saves=3)
    with pytest.raises(ValueError, match="inside Objective"), pytest.warns(DeprecationWarning):
        ij.gradient_flow(net, X, Y, 1.0, loss=ij.Objective(), weight_decay=0.1)


@pytest.mark.parametrize(
    "old,new",
    [
        # two old keywords in one flow (one compiled program): a keyword dropped or mapped
        # wrongly changes the flow, and each must warn on its own
        (
            dict(n_save=5, regularizer="l1", strength=0.1),
            dict(saveat=ij.SaveTimes(n_save=5), loss=ij.Objective(regularizer="l1", strength=0.1)),
        ),
        # weight_decay=0.3 is test_weight_decay_law's program (a Python number is static)
        (dict(weight_decay=0.3), dict(loss=ij.Objective(weight_decay=0.3))),
    ],
)
def test_old_flow_keywords_warn_and_give_the_same_flow(relu_setup, old, new):
    g, X, Y, net = relu_setup
    with pytest.warns(DeprecationWarning) as rec:
        a = ij.gradient_flow(net, X, Y, 0.3, rtol=1e-8, atol=1e-8, **old)
    for name in old:
        assert any(f"gradient_flow({name}=...) is deprecated; pass " in str(w.message) for w in rec)
    b = ij.gradient_flow(net, X, Y, 0.3, rtol=1e-8, atol=1e-8, **new)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_gradient_flow_and_kink_aware_flow_answer_the_same_names():
    # one relu problem, both entry points, the same option objects and the same field names
    g = ij.mlp([2, 3, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 6, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1))
    common = dict(
        solver=ij.SolverOptions("tsit5", rtol=1e-9, atol=1e-9), saveat=ij.SaveTimes(n_save=3), loss=ij.Objective("mse")
    )
    flow = ij.gradient_flow(net, X, Y, 0.2, **common)
    kflow = ij.kink_aware_flow(net, X, Y, 0.2, **common)
    for name in ("final", "theta_final", "loss_final", "result", "success"):
        assert hasattr(flow, name) and hasattr(kflow, name), name
    assert isinstance(kflow.final, ij.DAGNetwork) and isinstance(flow.final, ij.DAGNetwork)
    assert ij.result_name(flow.result) == ij.result_name(kflow.result) == "successful"
    assert bool(flow.success) and bool(kflow.success)
    np.testing.assert_allclose(kflow.theta_final, flow.theta_final, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(kflow.loss_final, flow.loss_final, rtol=1e-6)
    np.testing.assert_array_equal(kflow.final.edge_weights(), kflow.theta_final)
    # the deprecated n_save works the same for both
    with pytest.warns(DeprecationWarning, match=r"kink_aware_flow\(n_save=...\) is deprecated"):
        old = ij.kink_aware_flow(net, X, Y, 0.2, solver=common["solver"], n_save=3)
    np.testing.assert_array_equal(old.theta_final, kflow.theta_final)


@pytest.mark.parametrize("objective", [ij.Objective(weight_decay=0.1), ij.Objective(regularizer="l1", strength=0.1)])
def test_kink_aware_flow_refuses_what_it_does_not_integrate_before_any_work(objective, monkeypatch):
    import invariant_jax.kinks._driver as driver

    def boom(*a, **k):
        raise AssertionError("reached the integrator")

    monkeypatch.setattr(driver, "make_kink_integrator", boom)
    net = ij.DAGNetwork(ij.mlp([2, 3, 1]), "relu", key=jax.random.key(1))
    with pytest.raises(ValueError, match="kink_aware_flow integrates the data loss alone.*use ij.gradient_flow"):
        ij.kink_aware_flow(net, jnp.ones((2, 2)), jnp.ones(2), 1.0, loss=objective)


def test_cli_check(capsys):
    from invariant_jax.cli import main

    # a passing `check` (its table and verdict) is tests/test_docs_cli.py::test_readme_check_command_passes
    assert main(["check", "--activation", "softplus"]) == 2
    assert "not positively homogeneous" in capsys.readouterr().err
    assert main(["check", "--graph", "ring"]) == 2
    assert "Unknown graph builder 'ring'" in capsys.readouterr().err
