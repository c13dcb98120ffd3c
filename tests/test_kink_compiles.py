"""`kink_aware_flow` is one compiled program per configuration: a new horizon, start time
or tolerance compiles nothing (they enter the program as arrays), and the flow still
honours them (reaches the new `t1`, reports the new tolerances)."""

import jax
import jax.numpy as jnp

import invariant_jax as ij
from compile_count import CountCompiles


def test_new_horizon_and_tolerances_compile_nothing():
    jax.config.update("jax_enable_x64", True)
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1), init="glorot")
    counter = CountCompiles()
    with counter:
        first = ij.kink_aware_flow(net, X, Y, 1.0, solver="tsit5", rtol=1e-6, atol=1e-6)
    assert counter.n > 0 and bool(first.success)
    calls = [
        dict(t1=1.7, rtol=1e-6, atol=1e-6),
        dict(t1=1.0, rtol=1e-8, atol=1e-9),
        dict(t1=2.5, t0=0.5, rtol=1e-7, atol=1e-7),
    ]
    for kw in calls:
        t1 = kw.pop("t1")
        with counter:
            kf = ij.kink_aware_flow(net, X, Y, t1, solver="tsit5", **kw)
        assert counter.n == 0, (t1, kw)
        assert bool(kf.success)
        assert float(kf.flow.t_final) == t1
        assert float(kf.flow.ts[0]) == kw.get("t0", 0.0)
        assert (kf.flow.rtol, kf.flow.atol) == (kw["rtol"], kw["atol"])
    # the same horizon twice gives the same flow: t1 is read, not baked in from the first call
    again = ij.kink_aware_flow(net, X, Y, 1.0, solver="tsit5", rtol=1e-6, atol=1e-6)
    assert jnp.array_equal(again.flow.theta_final, first.flow.theta_final)


def test_a_segment_returns_the_state_types_it_was_given():
    """The state a trajectory starts in has the dtypes and weak types a segment returns,
    so the engine's programs, fed their own output, compile once. `init` had weak-typed
    integer counters: vmap mode compiled its 8 s program twice on the first call."""
    jax.config.update("jax_enable_x64", True)
    from invariant_jax.kinks import make_kink_integrator

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1))
    integ = make_kink_integrator(net, X, Y, 1.0, options=ij.SolverOptions("tsit5"))
    # (a batch of two, as the engine's programs hold them)
    start = jax.eval_shape(jax.vmap(integ.init), jnp.stack([net.edge_weights()] * 2))
    after = jax.eval_shape(jax.vmap(integ.segment), start)
    for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(after), strict=True):
        assert (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type)
