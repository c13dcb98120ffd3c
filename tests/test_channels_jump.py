"""Jump procedure and exponent fits; the two-neuron toy model."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.scipy.special import erf

import invariant_jax as ij
from invariant_jax.channels import (
    channel_coordinates,
    collapse_channel,
    jump_procedure,
    power_law_fit,
    set_channel_coordinates,
    toy_critical_points,
    toy_data,
    toy_limit_loss,
    toy_network,
)
from invariant_jax.losses import network_loss


def test_power_law_fit_exact_and_noisy():
    x = np.geomspace(1, 1e3, 8)
    f = power_law_fit(x, 3 * x**-1.5)
    assert abs(f.exponent + 1.5) < 1e-12 and abs(f.prefactor - 3) < 1e-10 and f.stderr < 1e-10
    rng = np.random.default_rng(0)
    fn = power_law_fit(x, x**2 * np.exp(0.1 * rng.normal(size=8)))
    assert abs(fn.exponent - 2) < 4 * fn.stderr + 1e-12 and fn.stderr > 0
    with pytest.raises(ValueError, match="at least 3"):
        power_law_fit([1, 2], [1, 2])


def test_sharpness_exponent_on_constructed_channel():
    g = ij.mlp([2, 3, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 30, key=jr.key(0), activation="softplus")
    net = ij.DAGNetwork(g, "softplus", key=jr.key(7))
    p = channel_coordinates(net, 0, 1)
    net = set_channel_coordinates(net, p.with_eps(0.05))
    res = jump_procedure(net, (0, 1), X, Y, n_jumps=6, t_flow=0.0, progress=False)
    assert abs(res.sharpness_fit.exponent - 2.0) < 0.3
    assert abs(res.gap_fit.exponent - 2.0) < 0.3
    assert np.allclose(res.eps, 0.05 * 0.5 ** np.arange(1, 7))
    # w, Delta, c, a are held by the jumps
    assert np.allclose(res.pairs[-1].w, p.w) and np.allclose(res.pairs[-1].a, p.a)


@pytest.mark.slow
def test_jump_procedure_with_flow_on_toy_channel():
    X, Y, loss = toy_data()
    net = toy_network(0.64331965, 0.58033842, 17.67708378, -16.01127562, convention="erf")  # toy flow at t = 1e7
    res = jump_procedure(net, (0, 1), X, Y, loss=loss, n_jumps=5, t_flow=1e3, progress=False)
    assert abs(res.sharpness_fit.exponent - 2.0) < 0.05
    assert abs(res.gap_fit.exponent - 2.0) < 0.05
    assert np.all(res.gap > 0)  # h > 0: the channel descends towards its limit
    assert list(ij.result_name(res.result)) == ["successful"] * 5 and res.success.all()


def test_jump_procedure_solver_options_and_old_keywords():
    # the flow after each jump takes an ij.SolverOptions; the old rtol/atol/max_steps keywords
    # warn, name their replacement and give the same record
    g = ij.mlp([1, 2, 1], bias=False)
    X = jnp.linspace(-1, 1, 9)[:, None]
    Y = jnp.sin(2 * X)
    net = set_channel_coordinates(
        ij.DAGNetwork(g, "softplus", key=jr.key(3)),
        channel_coordinates(ij.DAGNetwork(g, "softplus", key=jr.key(3)), 0, 1).with_eps(0.1),
    )
    new = jump_procedure(
        net,
        (0, 1),
        X,
        Y,
        n_jumps=2,
        t_flow=1.0,
        progress=False,
        solver=ij.SolverOptions("tsit5", rtol=1e-6, atol=1e-6, max_steps=500),
    )
    with pytest.warns(DeprecationWarning, match=r"solver=ij.SolverOptions\(name, rtol="):
        old = jump_procedure(
            net,
            (0, 1),
            X,
            Y,
            n_jumps=2,
            t_flow=1.0,
            progress=False,
            solver="tsit5",
            rtol=1e-6,
            atol=1e-6,
            max_steps=500,
        )
    np.testing.assert_array_equal(old.loss, new.loss)
    np.testing.assert_array_equal(old.eps, new.eps)
    assert new.success.all() and new.sharpness_fit is None
    with pytest.raises(ValueError, match="inside SolverOptions"):
        jump_procedure(net, (0, 1), X, Y, solver=ij.SolverOptions(), rtol=1e-3, progress=False)
    with pytest.raises(TypeError, match="n_jumps"):
        jump_procedure(net, (0, 1), X, Y, n_jumps=1.5, progress=False)
    with pytest.raises(ValueError, match="t_flow"):
        jump_procedure(net, (0, 1), X, Y, t_flow=-1.0, progress=False)


def _dense_limit_loss(w):
    x = np.linspace(-10, 10, 100001)
    q = np.exp(-(x**2) / 2) / np.sqrt(2 * np.pi) * (x[1] - x[0])
    F = np.stack([np.asarray(erf(w * x)), x * 2 / np.sqrt(np.pi) * np.exp(-((w * x) ** 2))], 1)
    y = np.asarray(erf((5 * x + 2.5) / np.sqrt(2)) + erf((5 * x - 2.5) / np.sqrt(2)))
    coef = np.linalg.lstsq(F.T @ (q[:, None] * F), F.T @ (q * y), rcond=1e-13)[0]
    r = F @ coef - y
    return 0.5 * np.sum(q * r**2)


def test_toy_critical_points_against_dense_reference():
    cp = toy_critical_points(w_max=3.0, n_grid=101, convention="erf")
    kinds = list(cp.kind)
    assert cp.success and ij.result_name(cp.result) == "successful"
    assert "channel minimum" in kinds and "saddle" in kinds and "global minimum" in kinds
    assert cp.w[0] == 0.0 and kinds[0] == "saddle"
    for w, L, k in zip(cp.w, cp.loss, cp.kind):
        assert abs(L - _dense_limit_loss(w)) < 1e-8 * max(1, L)
        if k != "h = 0" and w > 0:  # a critical point: L0'(w) = 0 (central difference, dense reference)
            d = (_dense_limit_loss(w + 1e-4) - _dense_limit_loss(w - 1e-4)) / 2e-4
            assert abs(d) < 1e-6
    k = kinds.index("channel minimum")
    assert 0.5 < cp.w[k] < 0.7 and cp.h[k] > 0


def test_toy_limit_loss_is_the_collapsed_network_loss():
    X, Y, loss = toy_data()
    L0, c, a, h = jax.jit(lambda w: toy_limit_loss(w, convention="erf"))(0.7)  # one program: cheaper than eager ops
    net = toy_network(0.7 + 1e-3, 0.7 - 1e-3, 0.5 * (c + a / 1e-3), 0.5 * (c - a / 1e-3), convention="erf")
    p = channel_coordinates(net, 0, 1)
    assert np.isclose(float(loss(collapse_channel(net, p).forward(X), Y)), float(L0), rtol=1e-10)
    # L ~ L0 + eps^2 h
    gap = float(loss(net.forward(X), Y)) - float(L0)
    assert np.isclose(gap / 1e-6, float(h), rtol=1e-2)
    assert float(network_loss(net, X, Y, loss)) == float(loss(net.forward(X), Y))


def test_toy_paper_convention_is_erf_convention_with_w_times_sqrt2():
    # the paper's student neuron erf(z/sqrt2) at w*sqrt2 is the erf(z) neuron at w: same function,
    # so the limit loss and its critical points move to sqrt2 times the erf-convention w
    X, _, _ = toy_data(101)
    s2 = np.sqrt(2.0)
    a = toy_network(0.61 * s2, 0.9 * s2, 1.5, -0.4).forward(X)
    b = toy_network(0.61, 0.9, 1.5, -0.4, convention="erf").forward(X)
    assert np.allclose(a, b, rtol=1e-13, atol=1e-14)

    def limit_and_slope(convention):  # one compiled program per convention: (L0, c, a, h) and dL0/dw
        one = lambda w: toy_limit_loss(w, n_points=201, convention=convention)  # noqa: E731
        return jax.jit(lambda w: (one(w), jax.grad(lambda v: one(v)[0])(w)))

    paper, erf_ = limit_and_slope("paper"), limit_and_slope("erf")
    for w in (0.3, 0.6126, 2.2277):
        (Lp, dp), (Le, de) = paper(w * s2), erf_(w)
        assert np.isclose(float(Lp[0]), float(Le[0]), rtol=1e-10)
        assert np.isclose(float(Lp[3]) * 2, float(Le[3]), rtol=1e-8)  # h: the second-order coefficient in eps
        # chain rule: dL0/dw on the paper's axis at sqrt2 w is (1/sqrt2) dL0/dw of the erf convention at w,
        # so the critical points (the channel minimum 0.6126 -> 0.866) move to sqrt2 times theirs
        assert np.isclose(float(dp), float(de) / s2, rtol=1e-8, atol=1e-14)
    with pytest.raises(ValueError, match="convention"):
        toy_network(0.1, 0.2, 1.0, 1.0, convention="tanh")
