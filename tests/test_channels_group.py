"""Channels of more than two neurons: `group_coordinates`, `group_output`, `group_limit`,
and collapsing a group, against the pair functions and Taylor's remainder."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
import invariant_jax.channels as ch


def _softplus2(z):  # softplus'' = s (1 - s), s the logistic sigmoid
    s = jax.nn.sigmoid(z)
    return s * (1 - s)


def _triplet(eps, key=0):
    """A softplus mlp([2, 3, 1]) (bias) whose three neurons merge at rate `eps` with
    `c`, `V` fixed: `w_i = w + eps d_i` (`sum d_i = 0`), `a_i = c/3 + b_i / eps`
    (`sum b_i = 0`). Returns the network and `(w, d, b, c)`."""
    k = jr.split(jr.key(key), 4)
    w = jr.normal(k[0], (3,))
    d = jr.normal(k[1], (3, 3))
    d = d - d.mean(axis=0)
    b = jr.normal(k[2], (3,))
    b = b - b.mean()
    c = 0.7
    g = ij.mlp([2, 3, 1], bias=True)
    W = np.zeros((g.n_nodes, g.n_nodes))
    preds = [g.index[u] for u in g.predecessors(g.hidden[0])]  # the data inputs and the bias
    for i, v in enumerate(g.hidden):
        W[preds, g.index[v]] = np.asarray(w + eps * d[i])
        W[g.index[v], g.index[g.outputs[0]]] = c / 3 + float(b[i]) / eps
    edges = jnp.asarray([W[g.index[a], g.index[bb]] for a, bb in g.edges])
    return ij.DAGNetwork(g, "softplus", edge_weights=edges), (w, d, b, c)


def test_a_pair_is_its_glu_limit():
    g = ij.mlp([3, 4, 2], bias=True)
    net = ij.DAGNetwork(g, "softplus", key=jr.key(1))
    X = jr.normal(jr.key(2), (30, 3))
    pair, group = ch.channel_coordinates(net, 1, 3), ch.group_coordinates(net, [1, 3])
    np.testing.assert_allclose(group.limit(X), ch.glu_limit(pair, X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ch.group_output(group, X), ch.pair_output(pair, X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(group.V, np.outer(pair.a, pair.Delta), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(group.spread, pair.eps, rtol=1e-12)


def test_triplet_tends_to_its_limit_with_taylor_remainder():
    X = jr.normal(jr.key(3), (40, 2))
    errs, rests = [], []
    for eps in (1e-2, 1e-3):
        net, (w, d, b, c) = _triplet(eps)
        grp = ch.group_coordinates(net, [0, 1, 2])
        np.testing.assert_allclose(grp.w, w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grp.c, [c], rtol=1e-9)
        np.testing.assert_allclose(grp.V, (b @ d)[None, :], rtol=1e-8, atol=1e-10)  # fixed as eps -> 0
        out, lim = np.asarray(ch.group_output(grp, X)), np.asarray(grp.limit(X))
        U = np.column_stack([np.asarray(X), np.ones(len(X))])  # predecessors: x1, x2, bias
        z = U @ np.asarray(w)
        a = c / 3 + np.asarray(b) / eps
        second = 0.5 * sum(a[i] * (eps * U @ np.asarray(d[i])) ** 2 for i in range(3)) * np.asarray(_softplus2(z))
        errs.append(np.max(np.abs(out[:, 0] - lim[:, 0])))
        rests.append(np.max(np.abs(out[:, 0] - lim[:, 0] - second)))
    assert 8 < errs[0] / errs[1] < 12.5  # the remainder is O(eps)
    assert rests[0] / rests[1] > 80  # and after its second-order term, O(eps^2)


def test_collapsing_a_group_replaces_its_output_by_the_limit():
    net, _ = _triplet(1e-2)
    X = jr.normal(jr.key(4), (25, 2))
    grp = ch.group_coordinates(net, ["h1_0", "h1_1", 2])  # (labels or positions)
    col = ch.collapse_channel(net, grp)
    want = net.forward(X) - ch.group_output(grp, X) + grp.limit(X)
    np.testing.assert_allclose(col.forward(X), want, rtol=1e-10, atol=1e-10)


def test_bad_groups_are_refused():
    net, _ = _triplet(1e-2)
    with pytest.raises(ValueError, match="two or more different"):
        ch.group_coordinates(net, [1])
    with pytest.raises(ValueError, match="two or more different"):
        ch.group_coordinates(net, [1, 1])
    with pytest.raises(ValueError, match="a sequence of two or more"):
        ch.group_coordinates(net, "h1_0")
    deep = ij.DAGNetwork(ij.mlp([2, 2, 2, 1]), "softplus", key=jr.key(0))
    with pytest.raises(ValueError, match="same layer"):
        ch.group_coordinates(deep, [0, 1, 2])
    relu = ij.DAGNetwork(ij.mlp([2, 3, 1]), "relu", key=jr.key(0))
    with pytest.raises(ValueError, match="smooth"):
        ch.group_coordinates(relu, [0, 1, 2]).limit(jnp.ones((2, 2)))
