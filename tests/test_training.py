"""Training: regularized gradient flow, the optax loop against hand-written steps, the
drift of c under SGD and Adam, cut-off counting, and a seeded nuclear-vs-none run."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import invariant_jax as ij
from invariant_jax.training import _prox


@pytest.fixture(scope="module")
def small():
    g = ij.mlp([3, 5, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 24, key=jr.key(0))
    Yb = (Y > jnp.median(Y)).astype(X.dtype)
    net = ij.DAGNetwork(g, key=jr.key(1))
    return g, X, Y, Yb, net


@pytest.mark.parametrize("how", ["regularizer", "weight_decay"])
def test_l2_gradient_flow_decays_c_like_exp_minus_2_lambda_t(small, how):
    g, X, Y, _, net = small
    lam = 0.7
    kw = dict(regularizer="l2", strength=lam) if how == "regularizer" else dict(weight_decay=lam)
    flow = ij.gradient_flow(net, X, Y, 2.0, rtol=1e-10, atol=1e-10, n_save=6, **kw)
    c0 = np.asarray(ij.conserved_quantities(net))
    expected = c0[None, :] * np.exp(-2 * lam * np.asarray(flow.ts))[:, None]
    np.testing.assert_allclose(flow.conserved, expected, atol=1e-7)
    assert np.abs(expected[-1] - c0).max() > 0.1  # the decay is real, not within tolerance
    if how == "weight_decay":
        assert float(flow.drift) < 1e-7  # the law with decay is what flow.expected holds
    else:
        # the regularizer route reports the deviation from c(0) as drift
        assert float(flow.drift) == pytest.approx(np.abs(expected - c0).max(), rel=1e-5)


@pytest.mark.exactness  # fixed steps: round-off only, never amplified by a controller
def test_full_batch_sgd_matches_hand_written_gradient_descent(small):
    g, X, _, Yb, net = small
    lr, lam = 0.1, 0.01
    res = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=6, log_every=3,
                 regularizer="l2", strength=lam)
    L = ij.edge_loss_fn(net, X, Yb, "bce")
    grad = jax.jit(jax.grad(L))
    theta = net.edge_weights()
    for _ in range(6):
        theta = theta - lr * (grad(theta) + lam * theta)
    np.testing.assert_allclose(res.network.edge_weights(), theta, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(res.log.epochs, [0, 3, 6])
    assert float(res.log.loss[-1]) == pytest.approx(float(L(theta)), rel=1e-12)
    assert float(res.log.objective[-1]) == pytest.approx(float(L(theta)) + lam * 0.5 * float(theta @ theta), rel=1e-12)


@pytest.mark.exactness  # fixed steps: round-off only, never amplified by a controller
def test_minibatch_epoch_matches_hand_written_permutation(small):
    g, X, _, Yb, net = small
    lr, bs, key = 0.05, 10, jr.key(7)
    res = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=2, log_every=1, batch_size=bs, key=key)
    theta, k = net.edge_weights(), key
    grad = jax.jit(lambda th, Xb, Yb: jax.grad(ij.edge_loss_fn(net, Xb, Yb, "bce"))(th))
    for _ in range(2):
        k, sub = jr.split(k)
        perm = jr.permutation(sub, X.shape[0])[: 2 * bs].reshape(2, bs)
        for idx in perm:
            theta = theta - lr * grad(theta, X[idx], Yb[idx])
    np.testing.assert_allclose(res.network.edge_weights(), theta, rtol=1e-12, atol=1e-14)


def test_sgd_step_changes_c_by_exactly_lr_squared_B_g_squared(small):
    # theta' = theta - lr g  =>  c' - c = lr^2 B~ g^2, because B~ (theta g) = 0 (ReLU).
    g, X, _, Yb, net = small
    lr = 1e-2
    res = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=1, log_every=1)
    grad = jax.grad(ij.edge_loss_fn(net, X, Yb, "bce"))(net.edge_weights())
    B = g.incidence()
    np.testing.assert_allclose(res.log.conserved[1] - res.log.conserved[0], lr**2 * B @ np.asarray(grad) ** 2,
                               atol=1e-15)


def test_adam_drifts_c_at_first_order_and_the_log_shows_it(small):
    g, X, _, Yb, net = small
    B = g.incidence()
    theta0 = np.asarray(net.edge_weights())
    grad = np.asarray(jax.grad(ij.edge_loss_fn(net, X, Yb, "bce"))(net.edge_weights()))
    lr = 1e-3
    adam = ij.fit(net, X, Yb, optimizer="adam", learning_rate=lr, epochs=1, log_every=1)
    sgd = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=1, log_every=1)
    # Adam's first step is -lr g / (|g| + eps): the hand-computed c matches the log
    theta1 = theta0 - lr * grad / (np.abs(grad) + 1e-8)
    np.testing.assert_allclose(adam.log.conserved[1], B @ theta1**2, atol=1e-14)
    # first order in lr (Adam) against second order (SGD, lr^2 B~ g^2)
    first_order = np.abs(B @ (-2 * lr * theta0 * grad / (np.abs(grad) + 1e-8))).max()
    assert float(adam.log.drift[1]) == pytest.approx(first_order, rel=1e-2)
    assert float(adam.log.drift[1]) > 100 * float(sgd.log.drift[1])


def test_proximal_steps_match_their_formulas(small):
    g, X, _, Yb, net = small
    lr, lam = 0.5, 0.3
    L = ij.edge_loss_fn(net, X, Yb, "bce")
    theta = net.edge_weights()
    step = np.asarray(theta - lr * jax.grad(L)(theta))
    l1 = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=1, log_every=1,
                regularizer="l1", strength=lam, proximal=True)
    np.testing.assert_allclose(l1.network.edge_weights(),
                               np.sign(step) * np.maximum(np.abs(step) - lr * lam, 0), atol=1e-14)
    nuc = ij.fit(net, X, Yb, optimizer="sgd", learning_rate=lr, epochs=1, log_every=1,
                 regularizer="nuclear", strength=lam, proximal=True)
    expected = step.copy()
    for v in g.hidden:
        ks = list(g.in_edges(v)) + list(g.out_edges(v))
        nrm = np.linalg.norm(step[ks])
        expected[ks] = step[ks] * max(0.0, 1 - 2 * lr * lam / nrm)
    np.testing.assert_allclose(nuc.network.edge_weights(), expected, atol=1e-14)
    # the group prox is the prox of ||J_G||_*: it minimises ||t - step||^2/2 + lr lam ||J_G(t)||_*
    t = jnp.asarray(expected)
    obj = jax.jit(lambda th: 0.5 * jnp.sum((th - step) ** 2) + lr * lam * ij.nuclear_norm(net.with_edge_weights(th)))
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert float(obj(t + 1e-3 * rng.normal(size=t.shape))) >= float(obj(t)) - 1e-12
    assert np.allclose(_prox("l2", g, jnp.asarray(step), 0.5), step / 1.5)


def test_cut_off_counts_agree_with_singular_subnetworks():
    rng = np.random.default_rng(0)
    for seed in range(3):
        g = ij.random_dag(3, 7, 2, 0.45, seed, bias=bool(seed % 2))
        theta = rng.normal(size=len(g.edges))
        theta[rng.random(len(g.edges)) < 0.5] = rng.choice([0.0, 1e-9], size=1)
        net = ij.DAGNetwork(g, edge_weights=theta)
        for tol in (0.0, 1e-6):
            groups = ij.singular_subnetworks(net, tol)
            mask = np.asarray(ij.cut_off_mask(net, tol))
            assert set(np.asarray(g.hidden, dtype=object)[mask]) == set().union(*groups) if groups else not mask.any()
            assert int(ij.n_cut_off_groups(net, tol)) == len(groups)


def test_nuclear_disconnects_more_neurons_than_unregularized():
    d = ij.breast_cancer()
    g = ij.mlp([30, 8, 1], bias=True)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(jr.split(jr.key(0), 3))
    kw = dict(X_test=d.X_test, Y_test=d.Y_test, optimizer="sgd", learning_rate=0.2, epochs=200, log_every=200)
    none = ij.fit(nets, d.X_train, d.Y_train, **kw)
    nuc = ij.fit(nets, d.X_train, d.Y_train, regularizer="nuclear", strength=0.02, proximal=True, **kw)
    assert np.all(np.asarray(none.log.n_cut_off[:, -1]) == 0)
    assert np.all(np.asarray(nuc.log.n_cut_off[:, -1]) >= 4)
    # rank J_G = H - (cut-off groups), and each cut-off neuron is its own group here
    np.testing.assert_array_equal(nuc.log.rank[:, -1], 8 - nuc.log.n_cut_off[:, -1])
    for i in range(3):
        one = jax.tree.map(lambda a: a[i], nuc.network)
        assert np.linalg.matrix_rank(np.asarray(ij.jacobian(one))) == int(nuc.log.rank[i, -1])
    assert np.all(np.asarray(nuc.log.test_accuracy[:, -1]) > 0.9)


def test_optax_transformation_passes_through(small):
    g, X, _, Yb, net = small
    res = ij.fit(net, X, Yb, optimizer=optax.sgd(0.1), epochs=2, log_every=1)
    grad = jax.jit(jax.grad(ij.edge_loss_fn(net, X, Yb, "bce")))
    theta = net.edge_weights()
    for _ in range(2):
        theta = theta - 0.1 * grad(theta)
    np.testing.assert_allclose(res.network.edge_weights(), theta, rtol=1e-12)


def test_bad_training_input(small):
    g, X, _, Yb, net = small
    with pytest.raises(ValueError, match="strength must be a finite number >= 0; got -0.1"):
        ij.fit(net, X, Yb, regularizer="l2", strength=-0.1)
    with pytest.raises(ValueError, match="Unknown optimizer 'adamax'"):
        ij.fit(net, X, Yb, optimizer="adamax")
    with pytest.raises(ValueError, match="Unknown regularizer 'l0'"):
        ij.fit(net, X, Yb, regularizer="l0", strength=1.0)
    with pytest.raises(ValueError, match="must be a multiple of log_every"):
        ij.fit(net, X, Yb, epochs=15, log_every=10)
    with pytest.raises(ValueError, match="batch_size must be an integer in"):
        ij.fit(net, X, Yb, batch_size=1000)
    with pytest.raises(ValueError, match="learning_rate must be a positive"):
        ij.fit(net, X, Yb, learning_rate=0.0)
    with pytest.raises(ValueError, match="strength must be a finite number >= 0"):
        ij.gradient_flow(net, X, Yb, 1.0, regularizer="l2", strength=-1.0)
    deep = ij.random_dag(3, 6, 1, 0.6, 3, bias=True)
    assert ij.has_hidden_to_hidden_edges(deep)
    with pytest.raises(ValueError, match="proximal map of the nuclear norm is exact only"):
        ij.fit(ij.DAGNetwork(deep, key=jr.key(0)), X, Yb, regularizer="nuclear", strength=0.1, proximal=True)
    with pytest.raises(ValueError, match="cut-off tolerance must be a finite number >= 0"):
        ij.cut_off_mask(net, -1.0)
