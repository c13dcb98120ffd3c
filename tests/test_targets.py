"""Modified Rosenbrock against hand-computed values; Matérn-3/2 GP samples."""

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.datasets import gp_data, gp_sample, matern32_kernel, modified_rosenbrock


def test_rosenbrock_hand_computed():
    X = jnp.array([[1.0, 0.0], [0.0, 0.0], [2.0, 1.0]])
    # x=(1,0): b(0+1-1)^2 + (1-1)^2 = 0 -> log10(0.1) = -1
    # x=(0,0): 3(0+1-0)^2 + (1-0)^2 = 4 -> log10(4.1)
    # x=(2,1): 3(1+1-4)^2 + (1-2)^2 = 13 -> log10(13.1)
    raw = np.array([-1.0, np.log10(4.1), np.log10(13.1)])
    y = modified_rosenbrock(X, standardize=False)
    assert y.shape == (3, 1)
    assert np.allclose(y[:, 0], raw, rtol=0, atol=1e-14)
    z = modified_rosenbrock(X)
    assert np.allclose(z[:, 0], (raw - raw.mean()) / raw.std(), atol=1e-14)
    # three dimensions: x=(1,1,1): i=1: 3(1+1-1)^2 + 0 = 3, i=2: 3 -> log10(6.1)
    assert np.isclose(float(modified_rosenbrock(jnp.ones((1, 3)), standardize=False)[0, 0]), np.log10(6.1))


def test_rosenbrock_bad_input():
    with pytest.raises(ValueError, match="need D >= 2"):
        modified_rosenbrock(jnp.ones((4, 1)))
    with pytest.raises(ValueError, match="not finite"):
        modified_rosenbrock(jnp.array([[1.0, jnp.nan], [0.0, 0.0]]))


def test_matern_kernel_closed_form_and_psd():
    X = jnp.array([[0.0], [0.5], [2.0]])
    K = matern32_kernel(X, X, length_scale=0.5)
    r = 1.5 / 0.5 * np.sqrt(3)  # |0.5 - 2| / l * sqrt3
    assert np.isclose(float(K[1, 2]), (1 + r) * np.exp(-r))
    assert np.allclose(np.diag(K), 1.0)
    assert np.linalg.eigvalsh(np.asarray(K)).min() > 0


def test_gp_sample_covariance_matches_kernel():
    X = jnp.array([[0.0], [0.3], [1.0]])
    Ys = gp_sample(X, roughness=2.0, key=jr.key(0), n_functions=40000)
    emp = np.cov(np.asarray(Ys))
    K = np.asarray(matern32_kernel(X, X, length_scale=0.5))
    assert np.allclose(emp, K, atol=0.03)


def test_gp_roughness_controls_smoothness():
    X = jnp.linspace(-2, 2, 200)[:, None]
    smooth = gp_sample(X, roughness=0.5, key=jr.key(1), n_functions=50)
    rough = gp_sample(X, roughness=10.0, key=jr.key(1), n_functions=50)
    d = lambda Y: float(jnp.mean(jnp.diff(Y, axis=0) ** 2))  # noqa: E731
    assert d(rough) > 10 * d(smooth)


def test_gp_data_shapes_and_errors():
    X, Y = gp_data(30, 2, roughness=1.0, key=jr.key(0))
    assert X.shape == (30, 2) and Y.shape == (30, 1)
    with pytest.raises(ValueError, match=r"roughness s \(the length scale is 1/s\) must be a positive"):
        gp_data(10, 1, roughness=0.0, key=jr.key(0))
    assert ij.mlp([2, 3, 1]).n_in == X.shape[1]
