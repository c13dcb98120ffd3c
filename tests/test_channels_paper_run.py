"""The layouts the authors' data come in: MLPGradientFlow's layer matrices mapped to our
edge weights (`benchmarks/channels_paper_run.py`), the scaling study's teacher
(`benchmarks/channels_scaling.py`), and Fig. 2's neuron split and its coordinates
(`benchmarks/channels_saddle_split.py`), each against a hand computation in NumPy, and
the hover's balance against the penalty's own gradient."""

import sys

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402

sys.path.insert(0, "benchmarks")
from channels_paper_run import to_theta  # noqa: E402
from channels_saddle_split import _mu_coordinates, _split, _theta, hover_excess  # noqa: E402
from channels_scaling import seed_data  # noqa: E402


def test_mlpgradientflow_layers_map_to_our_edges():
    """`w2 [softplus(w1 [x; 1]); 1]`, MLPGradientFlow's network (bias last), equals our
    network at `to_theta(w1, w2)`."""
    rng = np.random.default_rng(0)
    din, r = 3, 5
    w1, w2 = rng.normal(size=(r, din + 1)), rng.normal(size=(1, r + 1))
    X = rng.normal(size=(7, din))
    g = ij.mlp([din, r, 1], bias=True)
    net = ij.DAGNetwork(g, "softplus", edge_weights=to_theta(g, w1, w2))
    ones = np.ones((1, X.shape[0]))
    hidden = np.logaddexp(0.0, w1 @ np.vstack([X.T, ones]))
    want = (w2 @ np.vstack([hidden, ones])).T
    np.testing.assert_allclose(np.asarray(net(X)), want, rtol=1e-12, atol=1e-12)


def test_scaling_teacher_is_the_authors_rosenbrock_of_two_coordinates():
    """The authors' `Rosenbrock(c=1.)` keeps its default `Din = 2`: the z-scored (corrected
    std) `log10(3 (x2 + 1 - x1^2)^2 + (1 - x1)^2 + 0.1)`, whatever the input dimension."""
    X, Y = seed_data(3, din=8, n_samples=500)
    X = np.asarray(X)
    assert X.shape == (500, 8)
    y = np.log10(3 * (X[:, 1] + 1 - X[:, 0] ** 2) ** 2 + (1 - X[:, 0]) ** 2 + 0.1)
    np.testing.assert_allclose(np.asarray(Y)[:, 0], (y - y.mean()) / y.std(ddof=1), rtol=1e-12, atol=1e-12)
    assert abs(X.mean()) < 0.05 and abs(X.std() - 1) < 0.05  # standard-normal inputs


def test_fig2_split_keeps_the_function_and_sits_on_the_mu_line():
    """`split(x, 2, mu)` (their neuron split) computes the network `x` computes, and panel G's
    coordinates of the split are `(mu, 0)`; a step of size h off the line, orthogonal to its
    direction, is at distance h."""
    rng = np.random.default_rng(1)
    w1, w2 = rng.normal(size=(2, 2)), rng.normal(size=(1, 2))
    X = rng.normal(size=(9, 2))
    act = lambda z: np.logaddexp(0.0, z)  # noqa: E731
    for mu in (-1.5, 0.0, 0.3, 2.0):
        w1s, w2s = _split(w1, w2, mu)
        np.testing.assert_allclose(w2s @ act(w1s @ X.T), w2 @ act(w1 @ X.T), rtol=1e-13, atol=1e-13)
        P = _theta(dict(w1=w1s, w2=w2s))[None]
        np.testing.assert_allclose(_mu_coordinates(P, w1, w2), [[mu, 0.0]], atol=1e-13)
        off = dict(w1=w1s.copy(), w2=w2s)
        off["w1"][0, 1] += 1e-3  # an input weight: orthogonal to the line's direction
        np.testing.assert_allclose(_mu_coordinates(_theta(off)[None], w1, w2), [[mu, 1e-3]], atol=1e-13)


def test_hover_excess_cancels_the_radial_pull_with_the_penalty_gradient():
    """At the excess `hover_excess` returns, `strength * grad ch.maxnorm_penalty` (autodiff)
    cancels the radial part of the loss gradient; a loss that pulls inward gives 0."""
    import invariant_jax.channels as ch

    rng = np.random.default_rng(2)
    theta = rng.normal(size=9) * 40
    for strength in (1.0, 1 / 10201):
        g = rng.normal(size=9) * 1e-3
        g -= (g @ theta / (theta @ theta) + 1e-6) * theta  # a pull outward (-g . theta > 0)
        e = hover_excess(g, theta, strength)
        maxnorm = float(ch.weightnorm(theta)) - e
        pen = strength * np.asarray(jax.grad(ch.maxnorm_penalty)(theta, maxnorm))
        assert e > 0
        np.testing.assert_allclose((g + pen) @ theta, 0.0, atol=1e-9 * abs(g @ theta))
    assert hover_excess(-g, theta, 1.0) == 0.0
