import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij


def data(g, n=15, seed=0):
    X = jax.random.normal(jax.random.key(seed), (n, g.n_in))
    Y = jax.random.normal(jax.random.key(seed + 1), (n, g.n_out))
    return X, Y


def test_conserved_quantities_by_hand():
    g = ij.DAG.from_edges([("x", "a"), ("a", "b"), ("x", "b"), ("b", "y"), ("a", "y")], inputs=["x"], outputs=["y"])
    theta = jnp.arange(1.0, 6.0)  # edges in canonical order
    net = ij.DAGNetwork(g, "relu", edge_weights=theta)
    w = dict(zip(g.edges, np.arange(1.0, 6.0)))
    ca = w[("x", "a")] ** 2 - w[("a", "b")] ** 2 - w[("a", "y")] ** 2
    cb = w[("a", "b")] ** 2 + w[("x", "b")] ** 2 - w[("b", "y")] ** 2
    np.testing.assert_allclose(ij.conserved_quantities(net), [ca, cb])


HOMOGENEOUS = ["relu", "leaky_relu", "leaky_relu:0.3", "linear"]


@pytest.mark.parametrize("act", ["mixed", *(pytest.param(a, marks=pytest.mark.slow) for a in HOMOGENEOUS)])
@pytest.mark.parametrize("seed", range(4))
def test_identity_vanishes_for_homogeneous(act, seed):
    # The identity holds node by node (it needs sigma(z) = sigma'(z) z at each hidden node),
    # so one network whose nodes cycle through the four activations checks each of them
    # (at 2-3 nodes of every graph): "mixed" on four graphs in the default run; one
    # activation for the whole network, the same check once more per activation, is slow.
    g = ij.random_dag(3, 10, 2, 0.4, seed, bias=seed % 2 == 0)
    acts = act if act != "mixed" else [HOMOGENEOUS[(k + seed) % 4] for k in range(len(g.hidden))]
    net = ij.DAGNetwork(g, acts, key=jax.random.key(seed))
    X, Y = data(g, seed=seed)
    # compiled whole (eager, every operation of a new graph compiles on its own); seed 0 eager
    run = (lambda f: f) if seed == 0 else eqx.filter_jit
    r = run(lambda n, X, Y: ij.identity_residual(n, X, Y, relative=True))(net, X, Y)
    assert jnp.max(jnp.abs(r)) <= 1e-12
    # also with BCE and at a point with zero pre-activations (sigma'(0) convention)
    r = run(lambda n, X, Y: ij.identity_residual(n, X, Y, loss="bce", relative=True))(
        net, jnp.zeros_like(X), (Y > 0).astype(float)
    )
    assert jnp.max(jnp.abs(r)) <= 1e-12


def test_identity_fails_for_softplus():
    g = ij.random_dag(3, 10, 2, 0.4, 0)
    net = ij.DAGNetwork(g, "softplus", key=jax.random.key(0))
    X, Y = data(g)
    assert jnp.max(jnp.abs(ij.identity_residual(net, X, Y, relative=True))) > 1e-3


def test_jacobian_is_autodiff_of_c():
    g = ij.random_dag(2, 7, 1, 0.5, 3, bias=True)
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(3))
    J = jax.jacfwd(lambda th: ij.conserved_quantities(net.with_edge_weights(th)))(net.edge_weights())
    np.testing.assert_allclose(ij.jacobian(net), J, atol=1e-14)
    assert int(ij.jacobian_rank(net)) == len(g.hidden) == np.linalg.matrix_rank(np.asarray(J))


def test_rank_drops_at_a_cut_off_neuron():
    g = ij.mlp([3, 4, 2])
    theta = jax.random.normal(jax.random.key(0), (len(g.edges),))
    cut = [k for k, (u, v) in enumerate(g.edges) if "h1_2" in (u, v)]
    net = ij.DAGNetwork(g, "relu", edge_weights=theta.at[jnp.array(cut)].set(0.0))
    groups = ij.singular_subnetworks(net)
    assert groups == [frozenset({"h1_2"})]
    assert int(ij.jacobian_rank(net)) == 3 == np.linalg.matrix_rank(np.asarray(ij.jacobian(net)))


def test_bad_tolerances():
    net = ij.DAGNetwork(ij.mlp([2, 2, 1]), "relu", key=jax.random.key(0))
    with pytest.raises(ValueError, match="tol must be a positive"):
        ij.jacobian_rank(net, tol=0.0)
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        ij.singular_subnetworks(net, tol=-1.0)
