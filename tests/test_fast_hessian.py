"""The structured exact Hessian (`ij.losses.hessian_fn`) and the gradient whose Jacobian
it is (`ij.losses.gradient_fn`), against plain autodiff (`jax.hessian`, `jax.grad`), and
the Newton phase / flow engines that use them: per-run groups vs one batch."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax import channels as ch
from invariant_jax.losses import _structure, check_data, edge_loss_fn, gradient_fn, hessian_fn


def _skip_graph():
    # one hidden layer with a bias and a skip edge input -> output
    edges = [("x0", "h0"), ("x1", "h0"), ("x0", "h1"), ("b", "h1"), ("h0", "y"), ("h1", "y"), ("x1", "y"), ("b", "y")]
    return ij.DAG.from_edges(edges, inputs=["x0", "x1", "b"], outputs=["y"], constants=["b"])


CASES = [
    (ij.mlp([2, 3, 1], bias=True), "g"),
    (_skip_graph(), "erf"),
    pytest.param(ij.mlp([2, 2, 1], bias=False), "softplus", marks=pytest.mark.slow),
    pytest.param(ij.mlp([3, 4, 1], bias=True), "tanh", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("graph, act", CASES)
def test_structured_hessian_and_gradient_equal_autodiff(graph, act):
    X = jr.normal(jr.key(0), (40, graph.n_in))
    Y = jnp.sin(X.sum(1, keepdims=True))
    theta = jr.normal(jr.key(1), (len(graph.edges),))
    dX = jr.normal(jr.key(2), X.shape)
    net = ij.DAGNetwork(graph, act, edge_weights=theta)
    X, Y = check_data(graph, X, Y)
    assert _structure(net, "mse") is not None  # the structured path is the one under test

    @jax.jit
    def both(theta, X, Y, dX):
        L = edge_loss_fn(net, X, Y)
        grad = gradient_fn(net, X, Y)
        ref = (
            jax.hessian(L)(theta),
            jax.grad(L)(theta),
            jax.jvp(lambda X: jax.grad(edge_loss_fn(net, X, Y))(theta), (X,), (dX,))[1],
        )
        # the Hessian, the gradient, its Jacobians (an implicit solver's matrix), a derivative in the data
        got = (
            hessian_fn(net, X, Y)(theta),
            grad(theta),
            jax.jvp(lambda X: gradient_fn(net, X, Y)(theta), (X,), (dX,))[1],
            jax.jacfwd(grad)(theta),
            jax.jacrev(grad)(theta),
        )
        return ref, got

    (H_ref, g_ref, dg_ref), (H, g, dg, Jf, Jr) = both(theta, X, Y, dX)
    scale = float(jnp.max(jnp.abs(H_ref)))
    for M in (H, Jf, Jr):
        assert np.allclose(M, H_ref, rtol=0, atol=1e-12 * scale)
    assert np.allclose(g, g_ref, rtol=0, atol=1e-13 * scale)
    assert np.allclose(dg, dg_ref, rtol=1e-10, atol=1e-12)


def test_hessian_fn_falls_back_to_autodiff():
    # two hidden layers, a callable loss: jax.hessian (the same matrix)
    X = jr.normal(jr.key(0), (30, 2))
    for graph, loss in ((ij.mlp([2, 3, 2, 1]), "mse"), (ij.mlp([2, 3, 1]), ij.losses.mse)):
        net = ij.DAGNetwork(graph, "softplus", key=jr.key(3))
        Y = jnp.cos(X[:, : graph.n_out])
        assert _structure(net, loss) is None
        theta = net.edge_weights()
        H, ref = jax.jit(lambda t: (hessian_fn(net, X, Y, loss)(t), jax.hessian(edge_loss_fn(net, X, Y, loss))(t)))(
            theta
        )
        assert np.allclose(H, ref, rtol=1e-12, atol=1e-14)


def _glorot_nets(g, *, seed, n):
    """`n` networks with `g` activations from the authors' Glorot init, and the first one."""
    thetas = jax.vmap(lambda k: ch.mlpgf_glorot(g, k))(jr.split(jr.key(seed), n))
    net0 = ij.DAGNetwork(g, "g", edge_weights=thetas[0])
    return net0, eqx.filter_vmap(net0.with_edge_weights)(thetas)


def test_newton_phase_groups_agree_with_one_batch():
    # runs advanced one at a time (the CPU default) stop for the same reasons as in one
    # vmapped batch. Two compiled programs differ by round-off, which the trust region
    # amplifies (a step more or less to reach g_tol); a run that converges to a finite
    # minimum ends at the same point to the gradient tolerance.
    X, Y = ij.rosenbrock_grid(64)
    g = ij.mlp([2, 3, 1], bias=True)
    net0, nets = _glorot_nets(g, seed=0, n=4)
    opts = ij.NewtonOptions(max_steps=150, maxnorm=50.0, g_tol=1e-9, batch_size=1)
    one = ij.newton_phase(nets, X, Y, options=opts)
    # a group of 3 and a padded group of 1
    three = ij.newton_phase(nets, X, Y, options=ij.NewtonOptions(max_steps=150, maxnorm=50.0, g_tol=1e-9, batch_size=3))
    assert list(ij.result_name(one.result)) == ["stopped_g_tol"] * 4
    assert len(set(np.asarray(one.n_steps).tolist())) == 4  # unequal lengths
    for r in (three,):
        assert list(ij.result_name(r.result)) == list(ij.result_name(one.result))
        assert np.array_equal(np.asarray(r.infinite), np.asarray(one.infinite))
        k1, k2 = np.asarray(one.n_steps), np.asarray(r.n_steps)
        assert np.all(np.abs(k1 - k2) <= 0.1 * k1 + 2)
        hess = eqx.filter_jit(lambda th: ij.losses.hessian(net0.with_edge_weights(th), X, Y))  # one compile
        for n in range(4):  # both ends have max|grad| <= g_tol: they are within ~ 2 g_tol sqrt(E) / lambda_min
            lam = np.linalg.eigvalsh(np.asarray(hess(one.theta[n])))
            assert lam[0] > 0
            bound = 2 * 1e-9 * np.sqrt(lam.size) / lam[0]
            assert np.linalg.norm(np.asarray(r.theta[n] - one.theta[n])) <= bound
            assert abs(float(r.loss[n] - one.loss[n])) <= np.sqrt(lam.size) * 1e-9 * bound + 0.5 * lam[-1] * bound**2
    assert one.settings["batch_size"] == 1 and three.settings["batch_size"] == 3
    with pytest.raises(ValueError, match="batch_size"):
        ij.newton_phase(nets, X, Y, options=ij.NewtonOptions(batch_size=0))


@pytest.mark.slow
def test_flow_then_newton_loop_engine_matches_vmap():
    X, Y = ij.rosenbrock_grid(64)
    g = ij.mlp([2, 2, 1], bias=True)
    net0, nets = _glorot_nets(g, seed=1, n=3)
    newton = ij.NewtonOptions(max_steps=300, maxnorm=100.0)
    a = ij.flow_then_newton(nets, X, Y, flow=ij.FlowPhaseOptions(max_flow_steps=300, engine="loop"), newton=newton)
    b = ij.flow_then_newton(nets, X, Y, flow=ij.FlowPhaseOptions(max_flow_steps=300, engine="vmap"), newton=newton)
    assert list(ij.result_name(a.result)) == list(ij.result_name(b.result))
    assert np.array_equal(np.asarray(a.flow_status), np.asarray(b.flow_status))
    assert np.allclose(a.theta_flow, b.theta_flow, rtol=1e-6, atol=1e-8)
    assert np.array_equal(np.asarray(a.infinite), np.asarray(b.infinite))
