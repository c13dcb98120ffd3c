"""Regularizers on edge weights: the nuclear norm of `J_G`, L1 and L2."""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array, Float

from .invariants import jacobian
from .network import DAGNetwork

__all__ = ["nuclear_norm", "l1", "l2", "REGULARIZERS", "get_regularizer"]


def nuclear_norm(net: DAGNetwork) -> Float[Array, ""]:
    """`||J_G(theta)||_*`, the sum of the singular values of `2 B~ diag(theta)`."""
    return jnp.sum(jnp.linalg.svd(jacobian(net), compute_uv=False), axis=-1)


def l1(net: DAGNetwork) -> Float[Array, ""]:
    """`sum_e |theta_e|`."""
    return jnp.sum(jnp.abs(net.edge_weights()), axis=-1)


def l2(net: DAGNetwork) -> Float[Array, ""]:
    """`(1/2) sum_e theta_e^2`, so that strength `lambda` adds `lambda theta` to the
    gradient (weight decay)."""
    return 0.5 * jnp.sum(net.edge_weights() ** 2, axis=-1)


REGULARIZERS: dict[str, Callable[[DAGNetwork], Array]] = {
    "nuclear": nuclear_norm,
    "l1": l1,
    "l2": l2,
}


def get_regularizer(reg: str | Callable) -> Callable[[DAGNetwork], Array]:
    """A regularizer by name (`"nuclear"`, `"l1"`, `"l2"`) or a callable `net -> scalar`."""
    if callable(reg):
        return reg
    if reg not in REGULARIZERS:
        raise ValueError(f"Unknown regularizer {reg!r}; choose one of {sorted(REGULARIZERS)} or pass a callable.")
    return REGULARIZERS[reg]
