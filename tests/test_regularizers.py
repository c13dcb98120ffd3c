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


# ------------------------------------------------ any DAG: the working-set bound of ||J_G||_*


_WS_GRAPH = ij.random_dag(3, 10, 2, 0.35, 3, bias=True)  # one graph: one compilation


def _net_with_small_weights(seed, frac=0.7):
    g = _WS_GRAPH
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=len(g.edges))
    theta[rng.random(theta.size) < frac] *= 1e-3
    return g, theta


def test_working_set_groups_are_the_cut_off_nodes_merged_along_edges():
    from invariant_jax.regularizers import nuclear_working_set

    found = 0
    for seed in range(4):
        g, theta = _net_with_small_weights(seed)
        net = ij.DAGNetwork(g, edge_weights=theta)
        ws = nuclear_working_set(net, 1e-2)
        ng, eg = np.asarray(ws.node_group), np.asarray(ws.edge_group)
        members = {k: {v for v, gk in zip(g.hidden, ng) if gk == k} for k in set(ng) - {-1}}
        found += len(members)
        # the nodes in groups are exactly those cut off at tol (singular_subnetworks)
        cut = set().union(*ij.singular_subnetworks(net, 1e-2)) if ij.singular_subnetworks(net, 1e-2) else set()
        assert (set().union(*members.values()) if members else set()) == cut
        for k, W in members.items():
            assert ng[g.hidden.index(min(W, key=g.hidden.index))] == k and np.asarray(ws.size)[k] == len(W)
            for e, (u, v) in enumerate(g.edges):
                on_boundary = (u in W) != (v in W)
                assert (eg[e] == k) == on_boundary  # each boundary edge is labelled with its group
                if on_boundary:
                    assert abs(theta[e]) <= 1e-2
                    # no edge joins two groups
                    other = v if u in W else u
                    assert ng[g.hidden.index(other)] == -1 if other in g.hidden else True
        P = np.zeros((len(g.hidden),) * 2)
        for W in members.values():
            idx = [g.hidden.index(v) for v in W]
            P[np.ix_(idx, idx)] = 1.0 / len(W)
        np.testing.assert_allclose(ws.projector, P, atol=1e-15)
        np.testing.assert_allclose(np.asarray(ws.projector) @ np.asarray(ws.projector), P, atol=1e-14)
    assert found >= 2  # the check above is not vacuous


def test_nuclear_upper_bound_holds_and_is_tight_exactly_where_the_groups_are_cut_off():
    from invariant_jax.regularizers import nuclear_upper_bound, nuclear_working_set

    bound = eqx.filter_jit(lambda n: nuclear_upper_bound(n, 1e-2))
    tight = 0
    for seed in range(4):
        g, theta = _net_with_small_weights(seed)
        net = ij.DAGNetwork(g, edge_weights=theta)
        ref = scipy.linalg.svdvals(np.asarray(ij.jacobian(net))).sum()
        assert float(bound(net)) >= ref - 1e-12
        eg = np.asarray(nuclear_working_set(net, 1e-2).edge_group)
        if not (eg >= 0).any():
            continue
        tight += 1
        gaps = []
        for t in (1.0, 0.1, 0.0):  # shrink the boundaries: the gap closes at second order
            th = np.where(eg >= 0, t * theta, theta)
            n = ij.DAGNetwork(g, edge_weights=th)
            gaps.append(float(bound(n)) - scipy.linalg.svdvals(np.asarray(ij.jacobian(n))).sum())
        assert gaps[0] > 0 and gaps[1] <= gaps[0] / 30 and abs(gaps[2]) <= 1e-12
    assert tight >= 2


def test_gram_nuclear_norm_matches_svd_and_finite_differences():
    from invariant_jax.regularizers import gram_nuclear_norm, nuclear_working_set

    g, theta = _net_with_small_weights(3)
    net = ij.DAGNetwork(g, edge_weights=theta)
    P = np.asarray(nuclear_working_set(net, 1e-2).projector)
    assert P.any()
    Bt = jnp.asarray(g.incidence() - P @ g.incidence())
    f = jax.jit(lambda t: gram_nuclear_norm(Bt, t))
    assert float(f(theta)) == pytest.approx(scipy.linalg.svdvals(2 * np.asarray(Bt) * theta).sum(), rel=1e-12)
    # gradient: against the SVD path (U_+ V_+^T) here, and finite differences at well-separated weights
    svd = jax.grad(lambda t: ij.matrix_nuclear_norm(2 * Bt * t))(jnp.asarray(theta))
    np.testing.assert_allclose(jax.grad(f)(jnp.asarray(theta)), svd, atol=1e-9)
    generic = np.random.default_rng(0).normal(size=theta.size)
    np.testing.assert_allclose(jax.grad(f)(jnp.asarray(generic)), _fd_grad(f, generic), atol=1e-7)
    # vmapped over a batch
    thetas = jnp.stack([theta, 2 * theta])
    np.testing.assert_allclose(jax.vmap(f)(thetas), [float(f(theta)), 2 * float(f(theta))], rtol=1e-12)


def test_group_lasso_value_and_gradient():
    g = _deep_graph()
    net = ij.DAGNetwork(g, key=jr.key(4))
    theta = np.asarray(net.edge_weights())
    ref = sum(np.linalg.norm(theta[list(g.in_edges(v))]) for v in g.hidden)
    assert float(ij.group_lasso(net)) == pytest.approx(ref, rel=1e-12)
    f = lambda t: ij.group_lasso(net.with_edge_weights(jnp.asarray(t)))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(theta), _fd_grad(f, theta), atol=1e-7)
    zero = theta.copy()
    zero[list(g.in_edges(g.hidden[0]))] = 0.0
    gz = np.asarray(jax.grad(f)(zero))
    assert np.all(gz[list(g.in_edges(g.hidden[0]))] == 0) and np.all(np.isfinite(gz))
