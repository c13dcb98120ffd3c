"""The status enumeration and the option objects, on the public API only: codes against
diffrax's own, one validator and one wording for every entry point, and the stop rule
reported by its own member."""

import ast
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.sweep import STATUSES, SweepConfig

ROOT = Path(__file__).resolve().parents[1]


def test_diffrax_codes_are_kept_and_decoded():
    # every diffrax member keeps its integer code, so stored codes mean the same thing
    for name in ("successful", "max_steps_reached", "event_occurred", "dt_min_reached", "singular"):
        item = getattr(diffrax.RESULTS, name)
        code = int(ij.result_code(item))
        assert ij.result_name(code) == name
        assert ij.result_message(item) == diffrax.RESULTS[item]
        assert bool(ij.RESULTS.promote(item) == ij.result_from_code(code))
    # a batch (as vmap returns) decodes element-wise
    codes = np.array(
        [int(ij.result_code(ij.RESULTS.stopped_loss_floor)), 0, int(ij.result_code(ij.RESULTS.max_steps_reached))]
    )
    batch = ij.result_from_code(codes)
    assert list(ij.result_name(batch)) == ["stopped_loss_floor", "successful", "max_steps_reached"]
    assert list(np.asarray(ij.is_success(batch))) == [True, True, False]
    assert "max_steps" in ij.result_message(batch)[2]
    with pytest.raises(ValueError, match="Invalid RESULTS code"):
        ij.result_name(10_000)


def test_every_diffrax_member_is_ours_and_compares_after_promotion():
    # the documented way to compare with diffrax's members (Flow docstring, docs/solvers.md)
    assert len(ij.RESULTS) > len(diffrax.RESULTS)
    for code in range(len(diffrax.RESULTS)):
        name = ij.result_name(code)
        theirs, ours = getattr(diffrax.RESULTS, name), getattr(ij.RESULTS, name)
        assert int(ij.result_code(theirs)) == int(ij.result_code(ours)) == code
        assert diffrax.RESULTS[theirs] == ij.result_message(ours)
        assert bool(ij.RESULTS.promote(theirs) == ours)
    # equinox compares items of one enumeration only, in either order
    with pytest.raises(ValueError, match="same type"):
        ij.RESULTS.successful == diffrax.RESULTS.successful  # noqa: B015
    with pytest.raises(ValueError, match="same type"):
        diffrax.RESULTS.successful == ij.RESULTS.successful  # noqa: B015


def test_every_new_member_says_a_fix_and_maps_to_a_status():
    for name in (
        "stopped_grad_norm",
        "stopped_loss_floor",
        "stopped_param_norm",
        "stopped_wall_time",
        "nonfinite_state",
        "max_events_reached",
        "training_diverged",
        "drift_exceeded",
        "lp_disagrees",
        "undecided",
    ):
        msg = ij.result_message(getattr(ij.RESULTS, name))
        assert len(msg) > 40 and "`" in msg  # names the option to change
    expect = {
        "successful": "ok",
        "stopped_grad_norm": "stopped",
        "event_occurred": "stopped",
        "max_steps_reached": "max_steps",
        "nonfinite_state": "nonfinite",
        "dt_min_reached": "failed",
    }
    for name, status in expect.items():
        code = ij.result_code(getattr(ij.RESULTS, name))
        assert STATUSES[int(jax.jit(ij.sweep.status_code)(code))] == status


def test_status_is_success_agrees_with_is_success_on_every_member():
    codes = np.arange(len(ij.RESULTS), dtype=np.int32)
    status = np.asarray(ij.sweep.status_code(codes))
    expect = np.asarray(ij.is_success(codes))
    np.testing.assert_array_equal(ij.sweep.status_is_success(status), expect)  # NumPy in, NumPy out
    np.testing.assert_array_equal(jax.jit(lambda c: ij.sweep.status_is_success(ij.sweep.status_code(c)))(codes), expect)
    assert expect.any() and not expect.all()  # both kinds are exercised
    for name in STATUSES:  # status_is names one status; the names partition the statuses
        np.testing.assert_array_equal(ij.sweep.status_is(status, name), status == STATUSES.index(name))
    assert sum(ij.sweep.status_is(status, name).sum() for name in STATUSES) == len(codes)
    with pytest.raises(ValueError, match="Unknown status 'okay'"):
        ij.sweep.status_is(status, "okay")
    with pytest.raises(ValueError, match="Invalid STATUSES index"):
        ij.sweep.status_is_success(np.array([0, len(STATUSES)]))


def _status_int_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing a status (a name `st`, `status` or `*_status`, an attribute
    `.status`, or a `["status"]` item) with an integer literal or a loop index `k`.
    SciPy's `res.status` is SciPy's own vocabulary."""

    def is_status(node):
        if isinstance(node, ast.Name):
            return node.id in ("st", "status") or node.id.endswith("_status")
        if isinstance(node, ast.Attribute):
            return node.attr == "status" and not (isinstance(node.value, ast.Name) and node.value.id == "res")
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "asarray",
            "int",
        ):
            return any(is_status(a) for a in node.args)
        return False

    def is_int(node):
        return (isinstance(node, ast.Constant) and type(node.value) is int) or (
            isinstance(node, ast.Name) and node.id == "k"
        )

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(is_status(x) for x in (node.left, *node.comparators))
        and any(is_int(x) for x in (node.left, *node.comparators))
    ]


def test_no_status_integer_comparisons_in_the_package_or_benchmarks():
    assert _status_int_comparisons(ast.parse('ok = rec["status"] <= 1\nbad = st.status >= 2\nx = st == k')) == [1, 2, 3]
    assert _status_int_comparisons(ast.parse("ok = np.asarray(rows['status']) <= 1")) == [1]
    assert _status_int_comparisons(ast.parse("ok = res.status == 0")) == []
    found = {}
    for path in [*(ROOT / "invariant_jax").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        if path.name == "_results.py":  # the vocabulary's own definitions
            continue
        lines = _status_int_comparisons(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"ask ij.sweep.status_is_success / status_is instead of comparing integers: {found}"


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(rtol=0.0), ValueError, "rtol must be a positive finite number"),
        (dict(atol=float("nan")), ValueError, "atol must be a positive finite number"),
        (dict(max_steps=1.5), TypeError, "max_steps must be a positive integer"),
        (dict(max_steps=True), TypeError, "max_steps must be a positive integer"),
        (dict(max_steps=0), ValueError, "max_steps must be a positive integer"),
        (dict(solver="rk99"), ValueError, "Unknown solver 'rk99'"),
        (dict(dt0=-1.0), ValueError, "dt0 must be a positive finite number"),
        (dict(recovery=1.0), ValueError, "recovery must be a number above 1"),
    ],
)
def test_solver_options_one_validator_everywhere(bad, err, match):
    with pytest.raises(err, match=match):
        ij.SolverOptions(**bad)
    # SweepConfig goes through the same validator, with the same words
    if "dt0" not in bad and "recovery" not in bad:  # SweepConfig has neither
        with pytest.raises(err, match=match):
            SweepConfig(**bad)


def test_save_times_and_stop_rules_validate_on_construction():
    with pytest.raises(ValueError, match="n_save must be an integer >= 2"):
        ij.SaveTimes(n_save=1)
    with pytest.raises(ValueError, match="spacing must be 'linear' or 'log'"):
        ij.SaveTimes(spacing="cubic")
    with pytest.raises(ValueError, match="non-decreasing"):
        ij.SaveTimes([0.0, 0.5, 0.2])
    with pytest.raises(TypeError, match="grad_norm_tol must be a real number"):
        ij.StopRules(grad_norm_tol="small")
    with pytest.raises(ValueError, match="n_save must be an integer >= 2"):
        SweepConfig(n_save=1)
    np.testing.assert_allclose(ij.SaveTimes(n_save=5).times(0.0, 2.0), np.linspace(0.0, 2.0, 5), rtol=0, atol=0)
    np.testing.assert_allclose(ij.SaveTimes(n_save=4, spacing="log").times(0.0, 1.0), ij.log_times(0.0, 1.0, 4))
    with pytest.raises(ValueError, match="within"):
        ij.SaveTimes([0.0, 3.0]).times(0.0, 2.0)


def test_thin_keywords_and_objects_give_the_same_flow():
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1))
    a = ij.gradient_flow(net, X, Y, 0.5, rtol=1e-9, atol=1e-9, saveat=ij.SaveTimes(n_save=5))
    b = ij.gradient_flow(
        net, X, Y, 0.5, solver=ij.SolverOptions("tsit5", rtol=1e-9, atol=1e-9), saveat=ij.SaveTimes(n_save=5)
    )
    assert bool(jnp.array_equal(a.thetas, b.thetas))  # the same compiled program, run twice
    with pytest.raises(ValueError, match="not both"):
        ij.gradient_flow(net, X, Y, 0.5, solver=ij.SolverOptions(), rtol=1e-9)
    with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning):
        ij.gradient_flow(net, X, Y, 0.5, saveat=ij.SaveTimes(n_save=5), n_save=5)


def test_each_stop_rule_reports_its_member_and_the_record_agrees():
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.key(0), activation="tanh")
    net = ij.DAGNetwork(g, "tanh", key=jax.random.key(1))
    f = ij.gradient_flow(net, X, Y, 1e4, stop=ij.StopRules(grad_norm_tol=1e-3), saveat=ij.SaveTimes(spacing="log"))
    assert bool(f.result == ij.RESULTS.stopped_grad_norm) and bool(f.success) and float(f.t_final) < 1e4
    # the independent check: the gradient norm at the stop is below the tolerance
    assert float(jnp.linalg.norm(jax.grad(ij.edge_loss_fn(net, X, Y))(f.theta_final))) < 1e-3
    # the per-trajectory record of the same flow, built by the one public builder
    rec = ij.trajectory_record(
        net,
        X,
        Y,
        theta0=net.edge_weights(),
        t_final=f.t_final,
        theta_final=f.theta_final,
        result=f.result,
        stats=f.stats,
        saved_drift=f.drift,
    )
    assert int(rec["result"]) == int(ij.result_code(f.result))
    # the record is computed eagerly here and inside the flow's compiled program: the same
    # formulas, two programs, so they agree to round-off
    np.testing.assert_allclose([rec["drift"], rec["loss_final"]], [f.drift, f.loss_final], rtol=1e-12, atol=0)
    np.testing.assert_allclose(rec["c0"], ij.conserved_quantities(net), rtol=0, atol=0)


def test_finite_checks_fail_under_jit_with_the_eager_words():
    import equinox as eqx

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1))
    Xb = X.at[2, 1].set(jnp.nan)
    run = lambda X: ij.gradient_flow(net, X, Y, 0.1, saveat=ij.SaveTimes(n_save=2)).theta_final  # noqa: E731
    with pytest.raises(ValueError, match=r"X\[2, 1\] is not finite; clean or drop that sample"):
        run(Xb)
    with pytest.raises(Exception, match=r"X\[\.\.\.\] is not finite; clean or drop that sample"):
        jax.block_until_ready(eqx.filter_jit(run)(Xb))
    theta = net.edge_weights().at[0].set(jnp.inf)
    make = lambda th: ij.DAGNetwork(g, "relu", edge_weights=th).weights  # noqa: E731
    with pytest.raises(ValueError, match=r"edge_weights\[0\] is not finite"):
        make(theta)
    with pytest.raises(Exception, match=r"edge_weights\[\.\.\.\] is not finite"):
        jax.block_until_ready(eqx.filter_jit(make)(theta))


def test_results_of_topology_and_training_are_results():
    g = ij.mlp([2, 2, 1])
    c = ij.conserved_quantities(ij.DAGNetwork(g, "relu", key=jax.random.key(0)))
    r = ij.connectivity(g, c)
    assert r.success and bool(r.result == ij.RESULTS.successful) and r.message == ""
    sp = ij.singular_point(g, c)
    assert sp.success and ij.result_name(sp.result) == "successful"


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(bias=1), TypeError, "bias must be true or false"),
        (dict(kink_aware="yes"), TypeError, "kink_aware must be true or false"),
        (dict(widths=(3, 2.5, 1)), TypeError, "each of widths must be a positive integer"),
        (dict(max_steps=1e5), TypeError, "max_steps must be a positive integer"),
        (dict(n_inits=True), TypeError, "n_inits must be a positive integer"),
        (dict(edge_prob=1.5), ValueError, r"edge_prob must be a probability in \[0, 1\]"),
        (dict(rtol=1e-17), ValueError, "tighter than float64 can honour"),
    ],
)
def test_sweep_config_is_strict_about_types_and_ranges(bad, err, match):
    with pytest.raises(err, match=match):
        SweepConfig(**bad)
