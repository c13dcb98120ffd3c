import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf as np_erf

import invariant_jax as ij

NP_ACT = {
    "relu": lambda z: np.maximum(z, 0),
    "leaky_relu": lambda z: np.where(z > 0, z, 0.01 * z),
    "linear": lambda z: z,
    "softplus": lambda z: np.logaddexp(0, z),
    "erf": np_erf,
    "tanh": np.tanh,
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "gelu": lambda z: 0.5 * z * (1 + np_erf(z / np.sqrt(2))),
    "g": lambda z: 1 / (1 + np.exp(-4 * z)) + np.logaddexp(0, z),
}


def numpy_forward(g, theta, acts, x):
    """Independent node-by-node evaluation in topological order."""
    a = {}
    xi = iter(x)
    for v in g.inputs:
        a[v] = 1.0 if v in g.constants else next(xi)
    w = {e: t for e, t in zip(g.edges, theta)}
    for k, v in enumerate(g.hidden):
        z = sum(w[(u, v)] * a[u] for u in g.predecessors(v))
        a[v] = NP_ACT[acts[k]](z)
    return np.array([sum(w[(u, v)] * a[u] for u in g.predecessors(v)) for v in g.outputs])


# seeds 0-2 (default run) use all nine activations between them, with and without bias,
# eagerly and compiled; seeds 3-5 (more random graphs, the same check) are slow
@pytest.mark.parametrize("seed", [0, 1, 2, *(pytest.param(s, marks=pytest.mark.slow) for s in (3, 4, 5))])
def test_forward_matches_numpy_node_by_node(seed):
    rng = np.random.default_rng(seed)
    g = ij.random_dag(3, 10, 2, 0.35, seed, bias=seed % 2 == 1)
    acts = list(rng.choice(sorted(NP_ACT), size=len(g.hidden)))
    net = ij.DAGNetwork(g, acts, key=jax.random.key(seed))
    X = rng.normal(size=(7, 3))
    # compiled whole, as every flow calls it (eager, each operation of a new graph compiles
    # on its own: 1-3 s per graph); seed 0 also runs eagerly
    run = (lambda f: f) if seed == 0 else eqx.filter_jit
    out = np.asarray(run(lambda n, x: n.forward(x))(net, jnp.asarray(X)))
    theta = np.asarray(net.edge_weights())
    ref = np.stack([numpy_forward(g, theta, acts, x) for x in X])
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(run(lambda n, x: n(x))(net, jnp.asarray(X[0]))), ref[0], atol=1e-12)


def test_edge_weights_round_trip_and_mask():
    g = ij.random_dag(2, 6, 1, 0.5, 1, bias=True)
    theta = jax.random.normal(jax.random.key(0), (len(g.edges),))
    net = ij.DAGNetwork(g, "relu", edge_weights=theta)
    assert jnp.array_equal(net.edge_weights(), theta)
    assert jnp.array_equal(net.with_edge_weights(2 * theta).edge_weights(), 2 * theta)
    assert jnp.all(jnp.where(jnp.asarray(g.mask), True, net.weights == 0))
    # a stack of weight vectors gives a stack of matrices, each the one of its vector
    W = np.zeros((2,) + net.weights.shape)
    rows, cols = g.edge_index
    W[0][rows, cols], W[1][rows, cols] = theta, -theta
    np.testing.assert_array_equal(np.asarray(net.with_edge_weights(jnp.stack([theta, -theta])).weights), W)


def test_gradients_never_leak_off_mask():
    g = ij.random_dag(3, 8, 2, 0.3, 2, bias=True)
    net = ij.DAGNetwork(g, "softplus", key=jax.random.key(1))
    # put garbage off the mask: it must not change the output nor receive gradient
    net = eqx.tree_at(lambda n: n.weights, net, net.weights + jnp.where(jnp.asarray(g.mask), 0.0, 5.0))
    X = jax.random.normal(jax.random.key(2), (5, 3))
    grads = eqx.filter_jit(eqx.filter_grad(lambda n: jnp.sum(n.forward(X) ** 2)))(net)  # one compile
    assert jnp.all(jnp.where(jnp.asarray(g.mask), True, grads.weights == 0))
    assert jnp.any(grads.weights != 0)


def test_filter_vmap_over_networks():
    g = ij.example_dag()
    keys = jax.random.split(jax.random.key(0), 5)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    X = jax.random.normal(jax.random.key(1), (4, 3))
    out = eqx.filter_jit(eqx.filter_vmap(lambda n: n.forward(X)))(nets)
    alone = eqx.filter_jit(lambda k: ij.DAGNetwork(g, "relu", key=k).forward(X))  # one compile, 5 calls
    for i, k in enumerate(keys):
        np.testing.assert_allclose(out[i], alone(k), atol=1e-14)
    c = ij.conserved_quantities(nets)
    assert c.shape == (5, len(g.hidden))


@pytest.mark.parametrize("init", ["glorot", "kaiming", "normal"])
def test_initializer_standard_deviations(init):
    g = ij.mlp([30, 20, 10])
    thetas = jax.vmap(lambda k: ij.init_edge_weights(g, k, init, scale=0.5))(jax.random.split(jax.random.key(0), 200))
    first = np.asarray(thetas[:, :600]).ravel()  # 30x20 layer
    second = np.asarray(thetas[:, 600:]).ravel()  # 20x10 layer
    expect = {
        "glorot": (np.sqrt(2 / 50), np.sqrt(2 / 30)),
        "kaiming": (np.sqrt(2 / 30), np.sqrt(2 / 20)),
        "normal": (1.0, 1.0),
    }[init]
    np.testing.assert_allclose(first.std(), 0.5 * expect[0], rtol=0.02)
    np.testing.assert_allclose(second.std(), 0.5 * expect[1], rtol=0.02)


def test_homogeneity_flags_are_true():
    x = jnp.linspace(-3, 3, 61)
    for name, act in ij.ACTIVATIONS.items():
        homog = bool(jnp.allclose(act(2.5 * x), 2.5 * act(x), atol=1e-12))
        assert homog == act.positively_homogeneous, name
        d = jax.vmap(jax.grad(act.fn))(x + 1e-3)  # avoid the kink at 0
        np.testing.assert_allclose(act.derivative(x + 1e-3), d, atol=1e-10, err_msg=name)


def _numeric_flags(act):
    """Each flag measured from the function alone: homogeneity f(a x) = a f(x) for a > 0;
    piecewise linearity as zero second differences away from the kink; a kink as one-sided
    slopes that differ at 0; the slope for x < 0."""
    x = np.linspace(-4.0, 4.0, 801)
    x = x[np.abs(x) > 0.005]  # away from the kink at 0
    f = lambda z: np.asarray(act(jnp.asarray(z)), np.float64)  # noqa: E731
    homogeneous = all(np.allclose(f(a * x), a * f(x), rtol=1e-12, atol=1e-12) for a in (0.3, 2.5, 7.0))
    h = 1e-3
    second = f(x + h) - 2 * f(x) + f(x - h)
    piecewise_linear = bool(np.all(np.abs(second) < 1e-11))
    h = 1e-6  # one-sided slopes differ by O(h) where f is smooth, by the jump where it has a kink
    left, right = (f(0.0) - f(-h)) / h, (f(h) - f(0.0)) / h
    kinked = bool(abs(right - left) > 1e-3)
    return dict(
        positively_homogeneous=homogeneous,
        piecewise_linear=piecewise_linear,
        kinked=kinked,
        negative_slope=float(left) if piecewise_linear else None,
    )


@pytest.mark.parametrize("act", [*ij.ACTIVATIONS.values(), ij.leaky_relu(0.2), ij.leaky_relu(0.0)], ids=repr)
def test_registry_flags_match_an_independent_numerical_check(act):
    got = _numeric_flags(act)
    assert act.positively_homogeneous == got["positively_homogeneous"], act
    assert act.piecewise_linear == got["piecewise_linear"], act
    assert act.kinked == got["kinked"], act
    assert act.smooth == (not got["kinked"]), act  # no registry member has a kink away from 0
    if act.piecewise_linear:
        np.testing.assert_allclose(act.negative_slope, got["negative_slope"], atol=1e-12)


def test_numerical_flag_check_can_fail():
    relu = ij.get_activation("relu")
    assert _numeric_flags(ij.get_activation("softplus"))["positively_homogeneous"] is False
    assert _numeric_flags(ij.get_activation("linear"))["kinked"] is False
    shifted = ij.Activation(
        "shifted_relu",
        lambda z: jax.nn.relu(z - 0.5),
        lambda z: (z > 0.5) * 1.0,
        positively_homogeneous=True,
        piecewise_linear=True,
        smooth=False,
    )
    got = _numeric_flags(shifted)  # kink away from 0: neither homogeneous nor "piecewise linear" here
    assert not got["positively_homogeneous"] and not got["piecewise_linear"]
    assert _numeric_flags(relu) == dict(
        positively_homogeneous=True, piecewise_linear=True, kinked=True, negative_slope=0.0
    )


def test_activation_is_a_keyword_module():
    softsign = dict(name="softsign", fn=lambda x: x / (1 + jnp.abs(x)), derivative=lambda x: 1 / (1 + jnp.abs(x)) ** 2)
    with pytest.raises(TypeError, match="positional"):
        ij.Activation(*softsign.values(), False, False, False)
    act = ij.Activation(**softsign, positively_homogeneous=False, piecewise_linear=False, smooth=False)
    assert isinstance(act, eqx.Module) and jax.tree.leaves(act) == []
    assert not act.kinked and act.negative_slope == 0.0 and repr(act) == "Activation('softsign')"
    with pytest.raises(ValueError, match="positively_homogeneous=True"):
        ij.Activation(**softsign, positively_homogeneous=False, piecewise_linear=True, smooth=False)
    with pytest.raises(ValueError, match="0 <= s <= 1"):
        ij.Activation(**softsign, positively_homogeneous=True, piecewise_linear=True, smooth=False, negative_slope=2.0)
    with pytest.raises(ValueError, match="smooth=False"):
        ij.Activation(**softsign, positively_homogeneous=True, piecewise_linear=True, smooth=True)
    with pytest.raises(TypeError, match="True or False"):
        ij.Activation(**softsign, positively_homogeneous=1, piecewise_linear=False, smooth=False)
    with pytest.raises(ValueError, match="Unknown activation 'rleu'"):
        ij.get_activation("rleu")


def test_equal_activations_share_compiled_programs():
    """Equality and hashing ignore the identity of `fn`: two separately built copies of one
    activation are equal, and networks made from them hit one jit cache entry."""

    def smoothed(beta):
        return ij.Activation(
            f"softplus_beta{beta:g}",
            lambda z: jax.nn.softplus(beta * z) / beta,
            lambda z: jax.nn.sigmoid(beta * z),
            positively_homogeneous=False,
            piecewise_linear=False,
            smooth=True,
        )

    a, b = smoothed(10.0), smoothed(10.0)
    assert a.fn is not b.fn and a == b and hash(a) == hash(b) and a != smoothed(20.0)
    assert ij.leaky_relu(0.2) is ij.get_activation("leaky_relu:0.2") and ij.leaky_relu(0.2) != ij.leaky_relu(0.3)
    traces = []

    @eqx.filter_jit
    def out(net, x):
        traces.append(1)
        return net(x)

    g = ij.mlp([2, 3, 1])
    x = jnp.array([0.3, -1.2])
    for act in (a, b, a):
        out(ij.DAGNetwork(g, act, key=jax.random.key(0)), x)
    assert len(traces) == 1
    out(ij.DAGNetwork(g, smoothed(20.0), key=jax.random.key(0)), x)
    assert len(traces) == 2


def test_bad_network_input():
    g = ij.mlp([2, 3, 1])
    with pytest.raises(ValueError, match="Unknown activation 'rleu'"):
        ij.DAGNetwork(g, "rleu", key=jax.random.key(0))
    with pytest.raises(ValueError, match="Unknown init 'lecun'"):
        ij.DAGNetwork(g, "relu", key=jax.random.key(0), init="lecun")
    with pytest.raises(ValueError, match="expected \\(9,\\)"):
        ij.DAGNetwork(g, "relu", edge_weights=jnp.zeros(8))
    with pytest.raises(ValueError, match="not finite"):
        ij.DAGNetwork(g, "relu", edge_weights=jnp.full(9, jnp.nan))
    with pytest.raises(ValueError, match="2 activations for 3 hidden nodes"):
        ij.DAGNetwork(g, ["relu", "tanh"], key=jax.random.key(0))
    with pytest.raises(ValueError, match="needs `key=`"):
        ij.DAGNetwork(g, "relu")
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(0))
    with pytest.raises(ValueError, match="expected \\(N, 2\\)"):
        net.forward(jnp.zeros((4, 3)))
