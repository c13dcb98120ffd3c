"""Population losses for x ~ N(0, I): Gauss-Hermite and closed forms against Monte Carlo
with 10^6 samples; Hessian tools refuse non-smooth activations."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.scipy.special import erf

import invariant_jax as ij
from invariant_jax.losses import gauss_hermite, hessian, hessian_spectrum, population_loss

N_MC = 1_000_000


def _mc(student, target_fn, d, seed=0):
    X = jr.normal(jr.key(seed), (N_MC, d))
    r = student.forward(X) - target_fn(X)
    vals = 0.5 * jnp.sum(r**2, axis=1)
    return float(jnp.mean(vals)), float(jnp.std(vals) / np.sqrt(N_MC))


@pytest.mark.parametrize("act", ["erf", "relu"])
def test_closed_form_matches_monte_carlo(act):
    g = ij.mlp([3, 4, 2])
    s = ij.DAGNetwork(g, act, key=jr.key(1))
    t = ij.DAGNetwork(ij.mlp([3, 2, 2]), act, key=jr.key(2))
    closed = float(population_loss(s, t, method="closed"))
    mc, se = _mc(s, t.forward, 3)
    assert abs(closed - mc) < 5 * se, (closed, mc, se)


@pytest.mark.parametrize("d", [1, 2])
def test_quadrature_matches_monte_carlo_with_bias(d):
    s = ij.DAGNetwork(ij.mlp([d, 3, 1], bias=True), "softplus", key=jr.key(3))
    target = lambda X: erf(2 * X[:, :1] + 0.5) + (X[:, 1:2] ** 2 if d == 2 else 0.0)  # noqa: E731
    q = float(population_loss(s, target, method="quadrature", n_points=80))
    mc, se = _mc(s, target, d)
    assert abs(q - mc) < 5 * se, (q, mc, se)


def test_quadrature_equals_closed_form_in_2d():
    s = ij.DAGNetwork(ij.mlp([2, 3, 1]), "erf", key=jr.key(4))
    t = ij.DAGNetwork(ij.mlp([2, 2, 1]), "erf", key=jr.key(5))
    a = float(population_loss(s, t, method="closed"))
    b = float(population_loss(s, t, method="quadrature", n_points=60))
    assert abs(a - b) < 1e-10 * max(1.0, a)


def test_gauss_hermite_moments():
    X, w = gauss_hermite(2, 10)
    assert abs(float(jnp.sum(w)) - 1) < 1e-14
    assert abs(float(jnp.sum(w * X[:, 0] ** 4)) - 3) < 1e-12  # E x^4 = 3
    assert abs(float(jnp.sum(w * X[:, 0] ** 2 * X[:, 1] ** 2)) - 1) < 1e-12


def test_quadrature_dimension_above_two_is_refused():
    with pytest.raises(ValueError, match="dimension 1 or 2; got dim=3"):
        gauss_hermite(3, 10)
    s = ij.DAGNetwork(ij.mlp([3, 2, 1], bias=True), "softplus", key=jr.key(0))
    with pytest.raises(ValueError, match="dim=3"):
        population_loss(s, lambda X: X[:, :1], method="quadrature")


def test_closed_form_refuses_bias():
    s = ij.DAGNetwork(ij.mlp([2, 2, 1], bias=True), "erf", key=jr.key(0))
    with pytest.raises(ValueError, match="without bias"):
        population_loss(s, s, method="closed")


def test_hessian_matches_finite_differences():
    g = ij.mlp([2, 2, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 15, key=jr.key(0), activation="erf")
    net = ij.DAGNetwork(g, "g", key=jr.key(1))
    H = hessian(net, X, Y)
    th = net.edge_weights()
    grad = jax.jit(jax.vmap(jax.grad(ij.edge_loss_fn(net, X, Y))))
    h = 1e-5
    E = h * jnp.eye(len(th))
    fd = (grad(th[None] + E) - grad(th[None] - E)) / (2 * h)
    assert np.allclose(H, fd.T, atol=1e-8)
    ev, V = hessian_spectrum(net, X, Y)
    assert np.allclose(V @ jnp.diag(ev) @ V.T, H, atol=1e-10)
    assert np.all(np.diff(np.asarray(ev)) >= 0)


def test_hessian_refuses_relu_and_says_why():
    g = ij.mlp([2, 2, 1])
    X, Y, _ = ij.teacher_student(g, 5, key=jr.key(0))
    net = ij.DAGNetwork(g, "relu", key=jr.key(1))
    with pytest.raises(ValueError, match=r"hessian needs a smooth activation; \['relu'\].*piecewise linear"):
        hessian(net, X, Y)
