"""Regularizers: values against SciPy, gradients against finite differences, and finite,
valid subgradients at zero and repeated singular values."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.linalg

import invariant_jax as ij


def _fd_grad(f, theta, h=1e-6):
    theta = np.asarray(theta, float)
    g = np.zeros_like(theta)
    for k in range(theta.size):
        e = np.zeros_like(theta)
        e[k] = h
        g[k] = (float(f(theta + e)) - float(f(theta - e))) / (2 * h)
    return g


def _deep_graph():
    # hidden-to-hidden edges: the rows of J_G overlap, so the SVD path is used
    return ij.random_dag(3, 6, 2, 0.6, 3, bias=True)


@pytest.mark.parametrize("method", ["svd", "groups"])
def test_nuclear_norm_value_matches_scipy(method):
    g = ij.mlp([3, 4, 2], bias=True)
    net = ij.DAGNetwork(g, key=jr.key(0))
    J = np.asarray(ij.jacobian(net))
    ref = scipy.linalg.svdvals(J).sum()
    assert float(ij.nuclear_norm(net, method=method)) == pytest.approx(ref, rel=1e-12)


def test_nuclear_norm_value_deep_graph_matches_scipy():
    g = _deep_graph()
    assert ij.has_hidden_to_hidden_edges(g)
    net = ij.DAGNetwork(g, key=jr.key(1))
    ref = scipy.linalg.svdvals(np.asarray(ij.jacobian(net))).sum()
    assert float(ij.nuclear_norm(net)) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("graph,method", [("deep", "svd"), ("mlp", "svd"), ("mlp", "groups")])
def test_nuclear_norm_gradient_matches_finite_differences(graph, method):
    g = _deep_graph() if graph == "deep" else ij.mlp([3, 4, 2], bias=True)
    net = ij.DAGNetwork(g, key=jr.key(2))
    f = jax.jit(lambda th: ij.nuclear_norm(net.with_edge_weights(jnp.asarray(th)), method=method))
    theta = np.asarray(net.edge_weights())
    grad = np.asarray(jax.grad(f)(jnp.asarray(theta)))
    np.testing.assert_allclose(grad, _fd_grad(f, theta), rtol=1e-6, atol=1e-8)


def _cut_off_net():
    """An MLP whose neuron h1_0 is cut off (all its edges zero) and whose neuron h1_1 has
    zero input weights but nonzero output weights: two zero singular values."""
    g = ij.mlp([3, 4, 2], bias=True)
    theta = np.asarray(ij.DAGNetwork(g, key=jr.key(3)).edge_weights()).copy()
    for k, (u, v) in enumerate(g.edges):
        if "h1_0" in (u, v):
            theta[k] = 0.0
    return ij.DAGNetwork(g, edge_weights=theta), theta


@pytest.mark.parametrize("method", ["svd", "groups"])
def test_nuclear_norm_gradient_finite_and_a_subgradient_at_zero_singular_value(method):
    net, theta = _cut_off_net()
    s = scipy.linalg.svdvals(np.asarray(ij.jacobian(net)))
    assert s.min() < 1e-14  # a zero singular value: not differentiable here
    f = jax.jit(lambda th: ij.nuclear_norm(net.with_edge_weights(jnp.asarray(th)), method=method))
    g = np.asarray(jax.grad(f)(jnp.asarray(theta)))
    assert np.all(np.isfinite(g))
    # the documented choice: minimum-norm subgradient, 0 on the cut-off group's edges
    zero = theta == 0
    assert np.all(g[zero] == 0)
    # it is a subgradient of the convex map theta -> ||J_G(theta)||_*
    rng = np.random.default_rng(0)
    f0 = float(f(theta))
    for _ in range(50):
        other = theta + rng.normal(size=theta.size) * rng.choice([1e-3, 1e-1, 1.0])
        assert float(f(other)) >= f0 + g @ (other - theta) - 1e-12


def test_nuclear_norm_gradient_at_zero_is_zero():
    g = _deep_graph()
    net = ij.DAGNetwork(g, edge_weights=np.zeros(len(g.edges)))
    grad = jax.grad(lambda th: ij.nuclear_norm(net.with_edge_weights(th)))(jnp.zeros(len(g.edges)))
    assert np.all(np.asarray(grad) == 0)


def test_matrix_nuclear_norm_repeated_singular_values():
    # J = Q diag(2, 2, 2, 1) W^T with random orthogonal Q, W: a repeated singular value.
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    W, _ = np.linalg.qr(rng.normal(size=(6, 4)))
    J = Q @ np.diag([2.0, 2.0, 2.0, 1.0]) @ W.T
    G = np.asarray(jax.grad(ij.matrix_nuclear_norm)(jnp.asarray(J)))
    np.testing.assert_allclose(G, Q @ W.T, atol=1e-12)  # U V^T, independent of the basis choice
    fd = _fd_grad(lambda x: ij.matrix_nuclear_norm(jnp.asarray(x.reshape(J.shape))), J.ravel()).reshape(J.shape)
    np.testing.assert_allclose(G, fd, atol=1e-7)


def test_matrix_nuclear_norm_zero_rows_finite():
    J = np.zeros((3, 5))
    J[0, 1] = 2.0
    G = np.asarray(jax.grad(ij.matrix_nuclear_norm)(jnp.asarray(J)))
    expected = np.zeros_like(J)
    expected[0, 1] = 1.0
    np.testing.assert_allclose(G, expected, atol=1e-14)
    # JAX's own derivative adds singular vectors of the zero singular values (a valid but
    # basis-dependent subgradient): it would push zero weights away from zero.
    naive = jax.grad(lambda x: jnp.sum(jnp.linalg.svd(x, compute_uv=False)))(jnp.asarray(J))
    assert np.abs(np.asarray(naive) - expected).max() > 0.5


def test_nuclear_norm_jit_and_vmap_agree_with_loop():
    g = _deep_graph()
    keys = jr.split(jr.key(4), 3)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(keys)
    batched = jax.jit(ij.nuclear_norm)(nets)
    loop = [float(ij.nuclear_norm(ij.DAGNetwork(g, key=k))) for k in keys]
    np.testing.assert_allclose(batched, loop, rtol=1e-12)
    grad_one = jax.grad(lambda th: ij.nuclear_norm(ij.DAGNetwork(g, edge_weights=th)))
    gb = jax.vmap(grad_one)(nets.edge_weights())
    for i in range(3):
        np.testing.assert_allclose(gb[i], grad_one(nets.edge_weights()[i]), rtol=1e-10, atol=1e-14)


def test_l1_subgradient_zero_at_zero_and_fd_elsewhere():
    g = ij.mlp([2, 3, 1])
    net = ij.DAGNetwork(g, key=jr.key(5))
    theta = np.asarray(net.edge_weights()).copy()
    theta[[0, 3]] = 0.0
    f = lambda th: ij.l1(net.with_edge_weights(jnp.asarray(th)))  # noqa: E731
    grad = np.asarray(jax.grad(f)(jnp.asarray(theta)))
    np.testing.assert_array_equal(grad, np.sign(theta))
    assert float(f(theta)) == pytest.approx(np.abs(theta).sum(), rel=1e-14)


def test_l2_gradient_is_theta():
    g = _deep_graph()
    net = ij.DAGNetwork(g, key=jr.key(6))
    theta = net.edge_weights()
    grad = jax.grad(lambda th: ij.l2(net.with_edge_weights(th)))(theta)
    np.testing.assert_allclose(grad, theta, rtol=1e-14)
    assert float(ij.l2(net)) == pytest.approx(0.5 * float(jnp.sum(theta**2)))


def test_bad_regularizer_names():
    with pytest.raises(ValueError, match="Unknown regularizer 'lasso'"):
        ij.get_regularizer("lasso")
    net = ij.DAGNetwork(_deep_graph(), key=jr.key(0))
    with pytest.raises(ValueError, match="method='groups' needs a graph with no hidden-to-hidden edge"):
        ij.nuclear_norm(net, method="groups")
    with pytest.raises(ValueError, match="method must be"):
        ij.nuclear_norm(net, method="eig")
