"""Channel coordinates, duplication and saddle lines, GLU limit and collapse, detection."""

import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.channels import (
    channel_coordinates,
    collapse_channel,
    detect_channels,
    duplicate_neuron,
    escape_saddle,
    glu_convergence,
    glu_limit,
    pair_output,
    refine_critical_point,
    saddle_line,
    set_channel_coordinates,
)
from invariant_jax.losses import loss_gradient, network_loss


@pytest.fixture(scope="module")
def data():
    g = ij.mlp([2, 3, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 25, key=jr.key(0), activation="erf")
    return X, Y


@pytest.fixture(scope="module")
def critical_net():
    """A minimum of a width-1 erf net (gradient ~1e-13 after Newton). Newton starts from
    where gradient flow from `DAGNetwork(mlp([2, 1, 1]), "erf", key=key(10))` ends at
    t = 1e4 (`StopRules(grad_norm_tol=1e-9)`), rounded to 4 digits: the same minimum to
    round-off, without compiling that flow here (the notebook's section 5 runs it)."""
    X, Y, _ = ij.teacher_student(ij.mlp([2, 2, 1]), 40, key=jr.key(0), activation="erf")
    net = ij.DAGNetwork(ij.mlp([2, 1, 1]), "erf", edge_weights=jnp.array([-0.9118, -0.4818, -0.2834]))
    return refine_critical_point(net, X, Y), X, Y


def test_coordinates_round_trip_and_definition(data):
    net = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "softplus", key=jr.key(1))
    p = channel_coordinates(net, 0, 2)
    assert np.allclose(set_channel_coordinates(net, p).edge_weights(), net.edge_weights(), atol=1e-14)
    W = np.asarray(net.weights)
    g = net.graph
    rows = [g.index[u] for u in p.predecessors]
    wi, wj = W[rows, g.index["h1_0"]], W[rows, g.index["h1_2"]]
    ai, aj = W[g.index["h1_0"], g.index["y0"]], W[g.index["h1_2"], g.index["y0"]]
    assert np.isclose(float(p.eps), np.linalg.norm(wi - wj) / 2)
    assert np.allclose(p.w, (wi + wj) / 2) and np.allclose(p.Delta, (wi - wj) / np.linalg.norm(wi - wj))
    assert np.isclose(float(p.c[0]), ai + aj) and np.isclose(float(p.a[0]), float(p.eps) * (ai - aj))
    # the pair's contribution: the network minus the third neuron's term
    X, _ = data
    third = W[g.index["h1_1"], g.index["y0"]] * jax.nn.softplus(net.preactivations(X)[:, 1])
    bias = W[g.index["b"], g.index["y0"]]
    assert np.allclose(pair_output(p, X)[:, 0], net.forward(X)[:, 0] - third - bias, atol=1e-13)


@pytest.mark.parametrize("gamma", [0.0, 0.3, 1.0, -2.5, 7.0])
def test_duplication_keeps_loss_and_splits_gradient(data, gamma):
    X, Y = data
    g = ij.mlp([2, 3, 1], bias=True)
    net = ij.DAGNetwork(g, "softplus", key=jr.key(2))
    n2 = duplicate_neuron(net, 1, gamma)
    assert n2.graph == ij.mlp([2, 4, 1], bias=True)
    L1, g1 = loss_gradient(net, X, Y)
    L2, g2 = loss_gradient(n2, X, Y)
    assert abs(float(L1 - L2)) <= 1e-14 * float(L1)
    # gradient identity: copy in-weights get gamma (1 - gamma) times the original's,
    # both copies' output weights get the original's output gradient
    e1 = {e: k for k, e in enumerate(g.edges)}
    e2 = {e: k for k, e in enumerate(n2.graph.edges)}
    for u in ("x0", "x1", "b"):
        assert np.isclose(g2[e2[(u, "h1_1")]], gamma * g1[e1[(u, "h1_1")]], atol=1e-13)
        assert np.isclose(g2[e2[(u, "h1_3")]], (1 - gamma) * g1[e1[(u, "h1_1")]], atol=1e-13)
    assert np.isclose(g2[e2[("h1_1", "y0")]], g1[e1[("h1_1", "y0")]], atol=1e-13)
    assert np.isclose(g2[e2[("h1_3", "y0")]], g1[e1[("h1_1", "y0")]], atol=1e-13)


def test_duplication_on_random_dag_keeps_function():
    g = ij.random_dag(3, 4, 2, 0.6, 3, bias=True)
    net = ij.DAGNetwork(g, ["erf", "softplus", "g", "tanh"], key=jr.key(0))
    X = jr.normal(jr.key(1), (10, 3))
    forward = eqx.filter_jit(lambda n, X: n.forward(X))  # one program per graph: ~5x cheaper than eager op-by-op
    for i in (2,):
        n2 = duplicate_neuron(net, i, 0.37)
        assert len(n2.graph.hidden) == 5 and n2.activation_of(n2.graph.hidden.index(g.hidden[i])) == net.activation_of(
            i
        )
        assert np.allclose(forward(n2, X), forward(net, X), rtol=1e-13, atol=1e-13)


def test_zero_gradient_stays_zero_along_the_saddle_line(critical_net):
    net, X, Y = critical_net
    g0 = float(jnp.linalg.norm(loss_gradient(net, X, Y)[1]))
    assert g0 < 1e-11
    gammas = jnp.array([-3.0, -0.5, 0.2, 0.5, 1.0, 4.0])
    sl = saddle_line(net, 0, X, Y, gammas)
    assert np.all(np.asarray(sl.grad_norms) < 10 * g0 * (1 + np.abs(np.asarray(gammas))))
    assert np.allclose(sl.losses, sl.losses[0], rtol=1e-14)
    # Fukumizu-Amari: the new Hessian direction has eigenvalue ~ gamma (1 - gamma) h, so the
    # sign of the min eigenvalue flips between [0, 1] and outside for a definite h
    assert bool(sl.is_saddle[0]) and bool(sl.is_saddle[-1])  # gamma = -3 and 4: saddle directions
    assert sl.success.all() and list(ij.result_name(sl.result)) == ["successful"] * 6


def test_escape_from_saddle_lowers_the_loss(critical_net):
    net, X, Y = critical_net
    start = duplicate_neuron(net, 0, 2.0)  # outside [0, 1]: a saddle for this minimum (see saddle_line test)
    esc = escape_saddle(start, X, Y, size=1e-2, t1=2e3, saveat=ij.SaveTimes(n_save=11, spacing="log"))
    assert float(esc.min_eigenvalue) < 0
    assert float(esc.loss_final) < float(esc.loss_saddle) - 1e-4
    assert bool(esc.success) and ij.result_name(esc.result) == ij.result_name(esc.flow.result)


def test_glu_limit_rate_is_at_least_linear(data):
    X, _ = data
    net = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "softplus", key=jr.key(3))
    p = channel_coordinates(net, 0, 1)
    conv = glu_convergence(p, X, np.geomspace(1e-1, 1e-3, 7))
    # midpoint convention: the error is even in eps, so O(eps^2) (which is O(eps))
    assert abs(conv.fit.exponent - 2.0) < 0.1 and conv.fit.stderr < 0.05
    assert conv.success.all()
    # softplus: the gate is the logistic sigmoid, checked by hand
    U = jnp.concatenate([X, jnp.ones((X.shape[0], 1))], axis=1)
    z = U @ p.w
    hand = p.c[0] * jax.nn.softplus(z) + p.a[0] * (U @ p.Delta) * jax.nn.sigmoid(z)
    assert np.allclose(glu_limit(p, X)[:, 0], hand, atol=1e-14)


def test_collapse_channel_in_a_hidden_layer(data):
    """A pair of the first of two hidden layers: the collapsed network is the limit of the
    pair's channel (its successors are hidden neurons), the gap closing as eps^2."""
    X, Y = data
    net = ij.DAGNetwork(ij.mlp([2, 3, 2, 1], bias=True), "erf", key=jr.key(5))
    p = channel_coordinates(net, 0, 2)
    assert all(v in net.graph.hidden for v in p.successors)
    col = collapse_channel(net, p)
    gaps = [
        np.max(np.abs(set_channel_coordinates(net, p.with_eps(e)).forward(X) - col.forward(X))) for e in (1e-2, 1e-3)
    ]
    assert gaps[1] < 1e-4 and 50 < gaps[0] / gaps[1] < 200


def test_collapse_channel_is_the_limit_network(data):
    X, Y = data
    net = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "erf", key=jr.key(4))
    p = channel_coordinates(net, 1, 2)
    col = collapse_channel(net, p)
    near = set_channel_coordinates(net, p.with_eps(1e-4))
    assert np.allclose(col.forward(X), near.forward(X), atol=1e-6)
    assert col(X[0]).shape == (1,)
    L0 = float(network_loss(col, X, Y))
    gaps = [float(network_loss(set_channel_coordinates(net, p.with_eps(e)), X, Y)) - L0 for e in (1e-2, 1e-3)]
    assert abs(gaps[1]) < abs(gaps[0]) / 50  # eps^2 scaling: a factor ~100


def test_pair_classification_is_a_readable_enumeration():
    """`ChannelPair.classification` is a `PairClass` member: equal to, printed and
    serialised as its word; a misspelt class is refused rather than silently unequal."""
    from invariant_jax.channels import CLASSIFICATIONS, PairClass

    net0 = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "softplus", key=jr.key(5))
    p = channel_coordinates(net0, 0, 2)
    assert p.classification is PairClass.constructed and p.classification == "constructed"
    rep = detect_channels(set_channel_coordinates(net0, p.with_eps(1e-5)))
    (c,) = rep.pairs
    assert c.classification is PairClass.channel and rep.channels == (c,)
    assert f"{c.classification:>8}" == " channel" and json.dumps([c.classification]) == '["channel"]'
    assert CLASSIFICATIONS == ("channel", "candidate", "merging")
    assert [m.value for m in PairClass] == ["constructed", *CLASSIFICATIONS]
    assert _reclassified(p, "merging").classification is PairClass.merging  # a string converts
    with pytest.raises(ValueError, match="classification must be one of .*'chanel'"):
        _reclassified(p, "chanel")


def _reclassified(p, cls):
    """`p` built again with another classification (through `ChannelPair`'s own `__init__`)."""
    return type(p)(**{**{f.name: getattr(p, f.name) for f in dataclasses.fields(p)}, "classification": cls})


def test_detector_flags_constructed_channel_not_finite_minimum(critical_net):
    net0 = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "softplus", key=jr.key(5))
    p = channel_coordinates(net0, 0, 2)
    chan = set_channel_coordinates(net0, p.with_eps(1e-5))
    rep = detect_channels(chan)
    assert rep.in_channel and rep.param_norm > 1e3
    (c,) = rep.channels
    assert set(c.nodes) == {"h1_0", "h1_2"}
    assert np.isclose(float(c.eps), 1e-5) and np.allclose(np.abs(c.a), np.abs(p.a))
    assert rep.cosine_distances[0] < 1e-3 and rep.opposite[0]
    # a finite minimum duplicated onto its saddle line: merged input weights, but output
    # weights neither opposite nor diverging and a small norm -> not a channel
    net, X, Y = critical_net
    dup = duplicate_neuron(net, 0, 0.5)
    rep2 = detect_channels(dup, X, Y)
    assert not rep2.in_channel
    assert [q.classification for q in rep2.pairs] == [ij.channels.PairClass.merging]
    # the finite minimum itself: nothing to report
    assert detect_channels(net, X, Y).pairs == ()
    # a large norm alone is not a channel
    big = ij.DAGNetwork(ij.mlp([2, 3, 1]), "softplus", edge_weights=1e3 * jr.normal(jr.key(6), (9,)))
    assert not detect_channels(big).in_channel and detect_channels(big).success
    # non-finite weights: no verdict, and the report says so
    bad = detect_channels(big.with_edge_weights(big.edge_weights().at[0].set(jnp.nan)))
    assert not bad.success and ij.result_name(bad.result) == "nonfinite_state" and bad.pairs == ()


def test_bad_inputs(data):
    X, Y = data
    net = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "softplus", key=jr.key(1))
    with pytest.raises(ValueError, match="Hidden index 3 is out of range"):
        duplicate_neuron(net, 3, 0.5)
    with pytest.raises(ValueError, match="Hidden index -1 is out of range"):
        duplicate_neuron(net, -1, 0.5)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="gamma must be finite"):
            duplicate_neuron(net, 0, bad)
    relu = ij.DAGNetwork(ij.mlp([2, 3, 1], bias=True), "relu", key=jr.key(1))
    p = channel_coordinates(relu, 0, 1)
    with pytest.raises(ValueError, match="glu_limit needs a smooth activation; 'relu'.*sigma' jumps"):
        glu_limit(p, X)
    with pytest.raises(ValueError, match="collapse_channel needs a smooth activation"):
        collapse_channel(relu, p)
    with pytest.raises(ValueError, match="saddle_line needs a smooth activation"):
        saddle_line(relu, 0, X, Y, [0.5])
    deep = ij.DAGNetwork(ij.mlp([2, 2, 2, 1]), "erf", key=jr.key(1))
    with pytest.raises(ValueError, match="do not share predecessors"):
        channel_coordinates(deep, 0, 2)
