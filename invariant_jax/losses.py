"""Losses on a data set: MSE (the default) and binary cross-entropy on logits.

`L(theta) = (1/2N) sum_i ||f(x_i) - y_i||^2` for MSE, so gradient flow
`dtheta/dt = -grad L` runs on the time scale this normalisation fixes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["LOSSES", "mse", "bce", "get_loss", "network_loss"]


def mse(pred: Float[Array, "N d"], Y: Float[Array, "N d"]) -> Float[Array, ""]:
    """`(1/2N) sum_i ||pred_i - y_i||^2`."""
    return 0.5 * jnp.sum((pred - Y) ** 2) / pred.shape[0]


def bce(logits: Float[Array, "N d"], Y: Float[Array, "N d"]) -> Float[Array, ""]:
    """Mean binary cross-entropy on logits, labels in {0, 1}; averaged over samples and
    outputs. Numerically stable: `softplus(z) - y z`."""
    return jnp.mean(jax.nn.softplus(logits) - Y * logits)


LOSSES = {"mse": mse, "bce": bce}


def get_loss(loss):
    """A loss by name (`"mse"`, `"bce"`) or a callable `(pred, Y) -> scalar`."""
    if callable(loss):
        return loss
    if loss not in LOSSES:
        raise ValueError(f"Unknown loss {loss!r}; choose one of {sorted(LOSSES)} or pass a callable.")
    return LOSSES[loss]


def network_loss(net, X, Y, loss="mse") -> Float[Array, ""]:
    """The loss of `net` on data `(X, Y)`; `Y` has shape `(N, d_out)`."""
    return get_loss(loss)(net.forward(X), Y)


def edge_loss_fn(net, X, Y, loss="mse"):
    """`theta -> L(theta)`: the loss as a function of the edge weights (in `graph.edges`
    order), with `net` supplying the graph and activation. Differentiate this one: its
    gradient has exactly one entry per edge."""
    fn = get_loss(loss)

    def L(theta):
        return fn(net.with_edge_weights(theta).forward(X), Y)

    return L


def check_data(graph, X, Y):
    """Validate and shape data: returns `X` as `(N, n_in)` and `Y` as `(N, n_out)`.
    A 1-D `Y` is accepted for one output. Raises `ValueError` naming the problem."""
    import numpy as np

    X = jnp.asarray(X)
    Y = jnp.asarray(Y)
    if X.ndim == 1 and graph.n_in == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[1] != graph.n_in:
        raise ValueError(
            f"X has shape {X.shape}; expected (N, {graph.n_in}): one row per sample, one column "
            "per data input (constant/bias nodes excluded)."
        )
    if Y.ndim == 1 and graph.n_out == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or Y.shape[1] != graph.n_out:
        raise ValueError(f"Y has shape {Y.shape}; expected (N, {graph.n_out}), one column per output.")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} samples but Y has {Y.shape[0]}; they must match.")
    if X.shape[0] == 0:
        raise ValueError("The data set is empty; pass at least one sample.")
    for name, A in (("X", X), ("Y", Y)):
        if not isinstance(A, jax.core.Tracer):
            bad = ~np.isfinite(np.asarray(A))
            if bad.any():
                i, j = np.argwhere(bad)[0]
                raise ValueError(f"{name}[{i}, {j}] is not finite; clean or drop that sample.")
    return X, Y
