"""The layouts the authors' data come in: MLPGradientFlow's layer matrices mapped to our
edge weights (`benchmarks/channels_paper_run.py`), and the scaling study's teacher
(`benchmarks/channels_scaling.py`), each against a hand computation in NumPy."""

import sys

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402

sys.path.insert(0, "benchmarks")
from channels_paper_run import to_theta  # noqa: E402
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
