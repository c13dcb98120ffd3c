"""Training: regularized gradient flow, the optax loop against hand-written steps, the
drift of c under SGD and Adam, cut-off counting, and a seeded nuclear-vs-none run."""

import dataclasses

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
    obj = ij.Objective(regularizer="l2", strength=lam) if how == "regularizer" else ij.Objective(weight_decay=lam)
    flow = ij.gradient_flow(net, X, Y, 2.0, rtol=1e-10, atol=1e-10, saveat=ij.SaveTimes(n_save=6), loss=obj)
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
    res = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="l2", strength=lam),
        options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=6, log_every=3),
    )
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
    res = ij.fit(
        net,
        X,
        Yb,
        key=key,
        options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=2, batch_size=bs, log_every=1),
    )
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
    # lr = 1e-3 is the SGD configuration of the Adam test below: one compiled program for both
    # (c' - c is ~1e-7 here, far above the 1e-15 tolerance)
    g, X, _, Yb, net = small
    lr = 1e-3
    res = ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=1, log_every=1))
    grad = jax.grad(ij.edge_loss_fn(net, X, Yb, "bce"))(net.edge_weights())
    B = g.incidence()
    np.testing.assert_allclose(
        res.log.conserved[1] - res.log.conserved[0], lr**2 * B @ np.asarray(grad) ** 2, atol=1e-15
    )


def test_adam_drifts_c_at_first_order_and_the_log_shows_it(small):
    g, X, _, Yb, net = small
    B = g.incidence()
    theta0 = np.asarray(net.edge_weights())
    grad = np.asarray(jax.grad(ij.edge_loss_fn(net, X, Yb, "bce"))(net.edge_weights()))
    lr = 1e-3
    adam = ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="adam", learning_rate=lr, epochs=1, log_every=1))
    sgd = ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=1, log_every=1))
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
    l1 = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="l1", strength=lam),
        options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=1, log_every=1, proximal=True),
    )
    np.testing.assert_allclose(
        l1.network.edge_weights(), np.sign(step) * np.maximum(np.abs(step) - lr * lam, 0), atol=1e-14
    )
    nuc = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="nuclear", strength=lam),
        options=ij.TrainOptions(optimizer="sgd", learning_rate=lr, epochs=1, log_every=1, proximal=True),
    )
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


def test_adam_proximal_step_is_taken_in_adams_metric(small):
    # one Adam step, then soft-thresholding with threshold lr lam / (sqrt(v_hat) + eps) per coordinate
    g, X, _, Yb, net = small
    lr, lam = 0.05, 0.3
    theta = net.edge_weights()
    grad = jax.grad(ij.edge_loss_fn(net, X, Yb, "bce"))(theta)
    opt = optax.adam(lr)
    upd, st = opt.update(grad, opt.init(theta), theta)
    step = np.asarray(theta + upd)
    v_hat = np.asarray(st[0].nu) / (1 - 0.999)
    thr = lr * lam / (np.sqrt(v_hat) + 1e-8)
    res = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="l1", strength=lam),
        options=ij.TrainOptions(optimizer="adam", learning_rate=lr, epochs=1, log_every=1, proximal=True),
    )
    np.testing.assert_allclose(
        res.network.edge_weights(), np.sign(step) * np.maximum(np.abs(step) - thr, 0), atol=1e-14
    )
    assert np.sum(np.asarray(res.network.edge_weights()) == 0) > 0


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
    train = ij.TrainOptions(optimizer="sgd", learning_rate=0.2, epochs=200, log_every=200)
    kw = dict(X_test=d.X_test, Y_test=d.Y_test)
    none = ij.fit(nets, d.X_train, d.Y_train, options=train, **kw)
    nuc = ij.fit(
        nets,
        d.X_train,
        d.Y_train,
        loss=ij.Objective("bce", regularizer="nuclear", strength=0.02),
        options=dataclasses.replace(train, proximal=True),
        **kw,
    )
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
    res = ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer=optax.sgd(0.1), epochs=2, log_every=1))
    grad = jax.jit(jax.grad(ij.edge_loss_fn(net, X, Yb, "bce")))
    theta = net.edge_weights()
    for _ in range(2):
        theta = theta - 0.1 * grad(theta)
    np.testing.assert_allclose(res.network.edge_weights(), theta, rtol=1e-12)


def test_train_result_carries_result_and_success(small):
    """`TrainResult.result` is a `RESULTS` field like `Flow.result`; `success` is read off
    it (and the deprecated `finite`, with a warning). A step that diverges is
    `training_diverged`, element-wise on a batch."""
    g, X, Y, _, net = small
    ok = ij.fit(
        net, X, Y, loss="mse", options=ij.TrainOptions(optimizer="sgd", learning_rate=0.01, epochs=3, log_every=3)
    )
    bad = ij.fit(
        net, X, Y, loss="mse", options=ij.TrainOptions(optimizer="sgd", learning_rate=1e6, epochs=9, log_every=3)
    )
    assert not np.all(np.isfinite(np.asarray(bad.network.edge_weights())))  # it did diverge
    assert "result" in {f.name for f in dataclasses.fields(ok)}
    assert ij.result_name(ok.result) == "successful" and bool(ok.success)
    assert ij.result_name(bad.result) == "training_diverged" and not bool(bad.success)
    assert "learning_rate" in ij.result_message(bad.result)
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), ok.result, bad.result)
    batch = eqx.tree_at(lambda r: r.result, ok, both)
    np.testing.assert_array_equal(batch.success, [True, False])
    with pytest.warns(DeprecationWarning, match=r"TrainResult.finite is deprecated; ask `res.success`"):
        np.testing.assert_array_equal(batch.finite, [True, False])


@pytest.mark.parametrize(
    "kw,error,match",
    [
        (dict(learning_rate=0.0), ValueError, "learning_rate must be a positive finite number; got 0.0"),
        (dict(learning_rate="fast"), TypeError, "learning_rate must be a real number"),
        (dict(optimizer="adamax"), ValueError, r"Unknown optimizer 'adamax'; choose one of"),
        (dict(epochs=0), ValueError, "epochs must be a positive integer; got 0"),
        (dict(epochs=2.5), TypeError, "epochs must be a positive integer; got 2.5"),
        (dict(log_every=0), ValueError, "log_every must be a positive integer; got 0"),
        (dict(epochs=15, log_every=10), ValueError, r"epochs \(15\) must be a multiple of log_every \(10\)"),
        (dict(batch_size=0), ValueError, "batch_size must be a positive integer; got 0"),
        (dict(proximal="yes"), TypeError, "proximal must be True or False"),
        (dict(working_tol=-1.0), ValueError, r"working_tol must be a finite number >= 0 \(or None\); got -1.0"),
        (dict(tol=float("nan")), ValueError, "tol must be a finite number >= 0; got nan"),
    ],
)
def test_train_options_refuse_bad_values_by_name(kw, error, match):
    with pytest.raises(error, match=match):
        ij.TrainOptions(**kw)


def test_fit_refuses_what_the_objective_and_options_do_not_allow_together(small):
    g, X, _, Yb, net = small
    with pytest.raises(ValueError, match=r"fit takes no weight_decay \(got 0.1\); pass regularizer='l2'"):
        ij.fit(net, X, Yb, loss=ij.Objective("bce", weight_decay=0.1))
    with pytest.raises(ValueError, match=r"batch_size must be an integer in \[1, N=24\]"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(batch_size=25))
    with pytest.raises(TypeError, match="options must be an ij.TrainOptions"):
        ij.fit(net, X, Yb, options=dict(epochs=1))
    with pytest.raises(ValueError, match="Pass epochs inside TrainOptions"), pytest.warns(DeprecationWarning):
        ij.fit(net, X, Yb, options=ij.TrainOptions(), epochs=1)
    with pytest.raises(TypeError, match=r"fit\(\) got unexpected keyword argument\(s\) 'epoch'"):
        ij.fit(net, X, Yb, epoch=1)


def test_old_fit_keywords_warn_and_train_identically(small):
    g, X, _, Yb, net = small
    with pytest.warns(DeprecationWarning) as rec:
        old = ij.fit(
            net,
            X,
            Yb,
            optimizer="sgd",
            learning_rate=0.1,
            epochs=4,
            log_every=2,
            batch_size=8,
            regularizer="l1",
            strength=0.05,
            proximal=True,
            tol=0.0,
            working_tol=0.0,
        )
    said = " ".join(str(w.message) for w in rec)
    assert "fit(learning_rate=...) is deprecated; pass options=ij.TrainOptions(learning_rate=...) instead" in said
    assert "fit(strength=...) is deprecated; pass loss=ij.Objective(loss, strength=...) instead" in said
    new = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="l1", strength=0.05),
        options=ij.TrainOptions(
            optimizer="sgd",
            learning_rate=0.1,
            epochs=4,
            log_every=2,
            batch_size=8,
            proximal=True,
            tol=0.0,
            working_tol=0.0,
        ),
    )
    for a, b in zip(jax.tree.leaves((old.network, old.log)), jax.tree.leaves((new.network, new.log)), strict=True):
        np.testing.assert_array_equal(a, b)
    # the old spelling of "no regularizer" (its strength had no effect) still trains as before
    # (Adam, lr 1e-3, one epoch: the configuration of test_adam_drifts_c..., so nothing new compiles)
    with pytest.warns(DeprecationWarning):
        none = ij.fit(net, X, Yb, regularizer="none", strength=0.3, learning_rate=1e-3, epochs=1, log_every=1)
    plain = ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="adam", learning_rate=1e-3, epochs=1, log_every=1))
    np.testing.assert_array_equal(none.network.edge_weights(), plain.network.edge_weights())
    assert none.regularizer == "none"


def test_bad_training_input(small):
    g, X, _, Yb, net = small
    with pytest.raises(ValueError, match="strength must be a finite number >= 0; got -0.1"):
        ij.fit(net, X, Yb, loss=ij.Objective("bce", regularizer="l2", strength=-0.1))
    with pytest.raises(ValueError, match="Unknown optimizer 'adamax'"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="adamax"))
    with pytest.raises(ValueError, match="Unknown regularizer 'l0'"):
        ij.fit(net, X, Yb, loss=ij.Objective("bce", regularizer="l0", strength=1.0))
    with pytest.raises(ValueError, match="must be a multiple of log_every"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(epochs=15, log_every=10))
    with pytest.raises(ValueError, match="batch_size must be an integer in"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(batch_size=1000))
    with pytest.raises(ValueError, match="learning_rate must be a positive"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(learning_rate=0.0))
    with pytest.raises(ValueError, match="strength must be a finite number >= 0"):
        ij.gradient_flow(net, X, Yb, 1.0, loss=ij.Objective(regularizer="l2", strength=-1.0))
    with pytest.raises(ValueError, match="proximal=True needs regularizer 'l1', 'l2', 'nuclear' or 'group_lasso'"):
        ij.fit(
            net,
            X,
            Yb,
            loss=ij.Objective("bce", regularizer=lambda n: ij.l1(n), strength=0.1),
            options=ij.TrainOptions(proximal=True),
        )
    with pytest.raises(ValueError, match="working_tol must be a finite number >= 0"):
        ij.fit(
            net,
            X,
            Yb,
            loss=ij.Objective("bce", regularizer="nuclear", strength=0.1),
            options=ij.TrainOptions(proximal=True, working_tol=-1.0),
        )
    with pytest.raises(ValueError, match="tol must be a finite number >= 0; got -1.0"):
        ij.cut_off_mask(net, -1.0)
    with pytest.raises(ValueError, match="tol must be a finite number >= 0; got -1.0"):
        ij.fit(net, X, Yb, options=ij.TrainOptions(tol=-1.0))


def test_one_optimizer_name_per_optimizer(small):
    g, X, _, Yb, net = small
    assert sorted(ij.OPTIMIZERS) == ["adam", "momentum", "sgd"]  # no aliases
    with pytest.raises(
        ValueError,
        match=r"Unknown optimizer 'gd' \(plain gradient descent is 'sgd'\); "
        r"choose one of \['adam', 'momentum', 'sgd'\]",
    ):
        ij.fit(net, X, Yb, options=ij.TrainOptions(optimizer="gd"))


def test_fit_tol_is_the_zero_threshold_of_cut_off_mask(small):
    # one weight into each of two hidden neurons' only paths set to 5e-7: at tol=1e-6 the
    # neurons whose every edge is that small count as cut off, at tol=0 none does; fit's
    # epoch-0 log must count exactly what cut_off_mask counts at the same tol
    g, X, _, Yb, net = small
    theta = np.array(net.edge_weights())
    h0, h1 = g.hidden[0], g.hidden[1]
    for k, (u, v) in enumerate(g.edges):
        if h0 in (u, v) or h1 in (u, v):
            theta[k] = 5e-7
    net = net.with_edge_weights(theta)
    counts = {}
    for tol in (0.0, 1e-6):
        res = ij.fit(
            net, X, Yb, options=ij.TrainOptions(optimizer="sgd", learning_rate=1e-3, epochs=1, log_every=1, tol=tol)
        )
        assert res.tol == tol
        counts[tol] = int(res.log.n_cut_off[0])
        assert counts[tol] == int(np.sum(ij.cut_off_mask(net, tol)))
        assert int(res.log.rank[0]) == len(g.hidden) - int(ij.n_cut_off_groups(net, tol))
    assert counts == {0.0: 0, 1e-6: 2}


# ------------------------------------------- the nuclear norm on any DAG: the working-set step


def _deep_problem():
    g = ij.random_dag(3, 7, 1, 0.5, 2, bias=True)
    assert ij.has_hidden_to_hidden_edges(g)
    X, Y, _ = ij.teacher_student(ij.mlp([3, 2, 1], bias=True), 40, key=jr.key(3))
    Yb = (Y > jnp.median(Y)).astype(X.dtype)
    return g, X, Yb


def test_working_set_step_matches_its_formula():
    # one SGD step: theta' = groupshrink(theta - lr (grad L + lam grad ||(I - P) J_G||_*)), the groups
    # and P from theta (hidden nodes cut off at working_tol, merged along edges), threshold 2 lr lam / sqrt|W|
    g, X, Yb = _deep_problem()
    rng = np.random.default_rng(1)
    theta = rng.normal(size=len(g.edges))
    w = g.hidden[2]
    small = [k for k, (u, v) in enumerate(g.edges) if w in (u, v)]
    theta[small] *= 1e-3  # hidden node w is nearly cut off
    net = ij.DAGNetwork(g, edge_weights=theta)
    lr, lam, tol = 0.3, 0.05, 0.01
    groups = ij.singular_subnetworks(net, tol)
    assert groups == [frozenset({w})]  # no edge joins two groups here, so no merging
    W = groups[0]
    boundary = [k for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)]
    P = np.zeros((len(g.hidden),) * 2)
    i = g.hidden.index(w)
    P[i, i] = 1.0
    B = g.incidence()
    smooth = jax.jit(jax.grad(lambda t: ij.matrix_nuclear_norm(2 * (B - P @ B) * t)))(jnp.asarray(theta))  # SVD
    step = theta - lr * (
        np.asarray(jax.jit(jax.grad(ij.edge_loss_fn(net, X, Yb, "bce")))(theta)) + lam * np.asarray(smooth)
    )
    expected = step.copy()
    nrm = np.linalg.norm(step[boundary])
    expected[boundary] *= max(0.0, 1 - 2 * lr * lam / np.sqrt(len(W)) / nrm)
    res = ij.fit(
        net,
        X,
        Yb,
        loss=ij.Objective("bce", regularizer="nuclear", strength=lam),
        options=ij.TrainOptions(
            optimizer="sgd", learning_rate=lr, epochs=1, log_every=1, proximal=True, working_tol=tol
        ),
    )
    np.testing.assert_allclose(res.network.edge_weights(), expected, atol=1e-13)
    assert np.all(np.asarray(res.network.edge_weights())[boundary] == 0.0)  # exact zeros in one step
    assert res.log.rank[-1] == len(g.hidden) - 1 and res.log.n_cut_off[-1] == 1


def _train_deep(optimizer, lr, batch_size, lam):
    g, X, Yb = _deep_problem()
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(jr.split(jr.key(0), 2))
    return (
        g,
        X,
        ij.fit(
            nets,
            X,
            Yb,
            loss=ij.Objective("bce", regularizer="nuclear", strength=lam),
            options=ij.TrainOptions(
                optimizer=optimizer,
                learning_rate=lr,
                epochs=150,
                batch_size=batch_size,
                log_every=150,
                proximal=True,
                tol=0.0,
            ),
        ),
    )


@pytest.mark.parametrize(
    "optimizer,lr,batch_size,lam",
    [
        ("sgd", 0.2, None, 0.05),
        pytest.param("adam", 0.02, 8, 0.02, marks=pytest.mark.slow),  # minibatch Adam, proximal step in Adam's metric
    ],
)
def test_working_set_reaches_a_true_singular_point_that_prunes_losslessly(optimizer, lr, batch_size, lam):
    g, X, res = _train_deep(optimizer, lr, batch_size, lam)
    H = len(g.hidden)
    c0 = np.asarray(ij.conserved_quantities(res.initial))
    assert np.all(np.asarray(res.success))
    for i in range(2):
        net = jax.tree.map(lambda a: a[i], res.network)
        groups = ij.singular_subnetworks(net, 0.0)
        assert len(groups) >= 1  # exact zeros: cut off at tol 0
        # rank drop (SVD, numpy's threshold) = number of cut-off groups = what fit logged
        assert np.linalg.matrix_rank(np.asarray(ij.jacobian(net))) == H - len(groups) == int(res.log.rank[i, -1])
        assert int(ij.jacobian_rank(net)) == H - len(groups)
        # sum_W c = 0 on each group at the final weights (round-off of theta^2 sums); against c(0)
        # it is off by at most what training moved c
        c = np.asarray(ij.conserved_quantities(net))
        scale = float(ij.conservation_scale(net))
        hidx = {v: k for k, v in enumerate(g.hidden)}
        for W in groups:
            idx = [hidx[v] for v in W]
            assert abs(c[idx].sum()) <= 1e-13 * scale * len(W)
            assert abs(c0[i][idx].sum()) <= np.abs(c - c0[i]).max() * len(W) + 1e-12
        # singular_point finds a singular point of H_G(c) and connectivity freezes no boundary edge
        sp = ij.singular_point(g, c, tol=1e-9 * scale * H)
        assert sp.found and sp.success
        conn = ij.connectivity(net)
        assert conn.success
        boundary = {k for W in groups for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)}
        assert not boundary & set(conn.frozen_index)
        # and prune removes the groups without changing the function beyond round-off
        pruned, rep = ij.prune(net, 0.0, X=X)
        assert rep.counts().get("cut off", 0) == sum(len(W) for W in groups)
        assert rep.max_abs_change <= 1e-12
