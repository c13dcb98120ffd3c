"""Regression targets for the flat-channels experiments: the modified Rosenbrock
function and samples of Gaussian-process functions with a Matérn-3/2 kernel."""

from __future__ import annotations

import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._checks import check_finite, check_integer, check_positive

__all__ = [
    "modified_rosenbrock",
    "rosenbrock_data",
    "rosenbrock_grid",
    "regular_grid",
    "matern32_kernel",
    "gp_sample",
    "gp_data",
    "PAPER_GP_SCALINGS",
]

PAPER_GP_SCALINGS = (0.1, 0.5, 2.0, 10.0)
"""The kernel input scalings of the paper's four GP teachers (`ScaleTransform(s)` of a
Matérn-3/2 kernel, i.e. length scale `1/s`; `gp_teacher1..4` in channels-to-infinity)."""


def _check_X(X: ArrayLike, name: str = "X") -> Array:
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"{name} must have shape (N, d) with N >= 1; got {X.shape}.")
    return jnp.asarray(check_finite(X, "is not finite; clean or drop that sample.", where=name + "[{index}] "))


def modified_rosenbrock(
    X: ArrayLike,
    *,
    a: float = 1.0,
    b: float = 3.0,
    c: float = 1.0,
    d: float = 0.1,
    standardize: bool = True,
    ddof: int = 0,
) -> Float[Array, "N 1"]:
    """The modified Rosenbrock target
    `log10(sum_{i<D} [b (x_{i+1} + c - x_i^2)^2 + (a - x_i)^2] + d)`, z-scored over the
    rows of `X` (mean 0, standard deviation 1) unless `standardize=False`.

    **Arguments:** `X` of shape `(N, D)` with `D >= 2`; the constants `a, b, c, d`
    (`d > 0` keeps the logarithm finite); `ddof` of the standard deviation (the paper's
    Julia `std` is the corrected one, `ddof=1`).

    **Returns:** `Y` of shape `(N, 1)`.
    """
    X = _check_X(X)
    if X.shape[1] < 2:
        raise ValueError(f"The Rosenbrock sum runs over pairs (x_i, x_i+1): need D >= 2 columns; got {X.shape[1]}.")
    check_positive("d", d)  # so that log10(... + d) is finite
    xi, xn = X[:, :-1], X[:, 1:]
    s = jnp.sum(b * (xn + c - xi**2) ** 2 + (a - xi) ** 2, axis=1)
    y = jnp.log10(s + d)
    if standardize:
        if X.shape[0] < 2:
            raise ValueError("z-scoring needs N >= 2 samples; pass standardize=False for one point.")
        y = (y - jnp.mean(y)) / jnp.std(y, ddof=ddof)
    return y[:, None]


def rosenbrock_data(
    n_samples: int, dim: int = 2, *, key: PRNGKeyArray, low: float = -2.0, high: float = 2.0, **kwargs
) -> tuple[Float[Array, "N D"], Float[Array, "N 1"]]:
    """Inputs uniform in `[low, high]^dim` and their z-scored modified Rosenbrock values
    (`kwargs` go to `modified_rosenbrock`). **Returns:** `(X, Y)`."""
    check_integer("n_samples", n_samples, minimum=2)
    X = jr.uniform(key, (n_samples, dim), minval=low, maxval=high)
    return X, modified_rosenbrock(X, **kwargs)


def regular_grid(n_samples: int = 10**4, *, half_width: float = float(np.sqrt(3.0))) -> Float[Array, "M 2"]:
    """The paper's regular 2-D input grid (`regulargrid2D_input` of channels-to-infinity):
    `res = ceil(sqrt(n_samples))`, step `2 half_width / res`, the points
    `-half_width : step : half_width` on each axis (`res + 1` of them), first coordinate
    varying fastest. `n_samples = 10^4` gives 101 x 101 = 10201 points on
    `[-sqrt3, sqrt3]^2` (unit variance per coordinate, like the uniform inputs).

    **Returns:** `X` of shape `((res + 1)^2, 2)`.
    """
    check_integer("n_samples", n_samples, minimum=1)
    check_positive("half_width", half_width)
    res = int(np.ceil(np.sqrt(n_samples)))
    step = 2 * half_width / res
    x = -half_width + step * np.arange(res + 1)
    x[-1] = min(x[-1], half_width)
    a, b = np.meshgrid(x, x, indexing="xy")  # a varies fastest along the flattened rows
    return jnp.asarray(np.stack([a.ravel(), b.ravel()], axis=1))


def rosenbrock_grid(n_samples: int = 10**4, **kwargs) -> tuple[Float[Array, "M 2"], Float[Array, "M 1"]]:
    """The paper's loss-levels data set: the modified Rosenbrock target (a=1, b=3, c=1,
    offset 0.1), z-scored with the corrected standard deviation as in the authors' code,
    on `regular_grid(n_samples)` (10201 points for the default).

    **Returns:** `(X, Y)`.
    """
    X = regular_grid(n_samples)
    kwargs.setdefault("ddof", 1)
    return X, modified_rosenbrock(X, **kwargs)


def matern32_kernel(
    X1: ArrayLike, X2: ArrayLike, *, length_scale: float = 1.0, variance: float = 1.0
) -> Float[Array, "N M"]:
    """Matérn-3/2 kernel `variance (1 + sqrt3 r / l) exp(-sqrt3 r / l)`, `r = ||x - x'||`."""
    check_positive("length_scale", length_scale)
    X1, X2 = jnp.asarray(X1), jnp.asarray(X2)
    d2 = jnp.sum((X1[:, None, :] - X2[None, :, :]) ** 2, axis=-1)
    r = jnp.sqrt(jnp.maximum(d2, 0.0) + 1e-300) * (d2 > 0)  # zero distance: exact 0, finite grad
    z = jnp.sqrt(3.0) * r / length_scale
    return variance * (1 + z) * jnp.exp(-z)


def gp_sample(
    X: ArrayLike, *, roughness: float, key: PRNGKeyArray, n_functions: int = 1, jitter: float = 1e-8
) -> Float[Array, "N n_functions"]:
    """Values at the rows of `X` of functions drawn from a zero-mean Gaussian process with
    a Matérn-3/2 kernel of unit variance and length scale `1 / roughness` (larger
    `roughness` means rougher functions).

    **Arguments:** `X` `(N, d)`; `roughness` `s > 0`; `key`; `n_functions`; `jitter`
    added to the kernel diagonal for the Cholesky factor.

    **Returns:** `(N, n_functions)` samples.
    """
    check_positive("roughness s (the length scale is 1/s)", roughness)
    X = _check_X(X)
    K = matern32_kernel(X, X, length_scale=1.0 / roughness)
    L = jnp.linalg.cholesky(K + jitter * jnp.eye(X.shape[0], dtype=K.dtype))
    return L @ jr.normal(key, (X.shape[0], n_functions), dtype=K.dtype)


def gp_data(
    n_samples: int, dim: int = 1, *, roughness: float, key: PRNGKeyArray
) -> tuple[Float[Array, "N d"], Float[Array, "N 1"]]:
    """Inputs `x ~ N(0, I_dim)` and one Matérn-3/2 GP sample at length scale
    `1 / roughness` on them. **Returns:** `(X, Y)`."""
    check_integer("n_samples", n_samples, minimum=1)
    kx, ky = jr.split(key)
    X = jr.normal(kx, (n_samples, dim))
    return X, gp_sample(X, roughness=roughness, key=ky)
