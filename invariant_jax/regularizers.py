"""Regularizers on edge weights: the nuclear norm of `J_G`, L1 and L2.

Each takes a `DAGNetwork` and returns a scalar (or one scalar per network for a batch of
networks); each works under `jax.jit`, `jax.vmap` and `eqx.filter_vmap`, and each has a
finite, documented gradient everywhere, including the non-smooth points that pruning is
after:

- `nuclear_norm`: `||J_G(theta)||_* = sum_i s_i(J_G)`. Where `J_G` has full row rank
  (every hidden node connected) this is differentiable with gradient `U V^T` for the thin
  SVD `J = U diag(s) V^T`; `U V^T` does not depend on how an SVD routine picks the bases
  of repeated singular values, so repeated values are harmless. Where singular values
  vanish (a cut-off sub-network: exactly where pruning happens) the norm is not
  differentiable, and we use the minimum-norm subgradient `U_+ V_+^T`, with `U_+`, `V_+`
  the singular vectors of the singular values above
  `max(H, E) * eps * s_max` (the `numpy.linalg.matrix_rank` threshold). At `J = 0` the
  gradient is `0`. (Differentiating `jnp.linalg.svd` directly gives `U V^T` over *all*
  singular vectors, including an arbitrary, LAPACK-chosen basis of the null space: a
  valid but basis-dependent subgradient that pushes zero weights away from zero. The
  minimum-norm choice leaves a cut-off group's zero weights alone.)
- `l1`: `sum_e |theta_e|`, with subgradient `sign(theta)`, so `0` at `theta_e = 0`
  (the minimum-norm subgradient; JAX's `abs` would give `1`).
- `l2`: `(1/2) sum_e theta_e^2`, so strength `lambda` adds `lambda theta` to the
  gradient, exactly like `weight_decay` in `gradient_flow`.

On networks without hidden-to-hidden edges (one hidden layer, with or without bias) the
rows of `J_G` have disjoint supports, so `||J_G||_* = 2 sum_v ||theta_{edges(v)}||_2`:
a group lasso over the edges of each hidden node. `training.fit` uses this to take an
exact proximal step that sets whole neurons to zero.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .invariants import jacobian
from .network import DAGNetwork

__all__ = ["nuclear_norm", "has_hidden_to_hidden_edges", "l1", "l2", "REGULARIZERS", "get_regularizer", "matrix_nuclear_norm"]


@jax.custom_jvp
def matrix_nuclear_norm(J: Float[Array, "... m n"]) -> Float[Array, "..."]:
    """Sum of the singular values of `J` (batched over leading axes), with the
    finite gradient `U_+ V_+^T` described in the module docstring."""
    return jnp.sum(jnp.linalg.svd(J, compute_uv=False), axis=-1)


def _polar_part(J):
    U, s, Vh = jnp.linalg.svd(J, full_matrices=False)
    eps = jnp.finfo(J.dtype).eps
    thr = max(J.shape[-2:]) * eps * jnp.max(s, axis=-1, keepdims=True)
    keep = (s > thr).astype(J.dtype)
    G = (U * keep[..., None, :]) @ Vh
    return jnp.sum(s, axis=-1), G


@matrix_nuclear_norm.defjvp
def _matrix_nuclear_norm_jvp(primals, tangents):
    (J,), (dJ,) = primals, tangents
    value, G = _polar_part(J)
    return value, jnp.sum(G * dJ, axis=(-2, -1))


def nuclear_norm(net: DAGNetwork, *, method: str = "auto") -> Float[Array, "..."]:
    """`||J_G(theta)||_*`, the sum of the singular values of `J_G = 2 B~ diag(theta)`:
    a smooth-where-possible surrogate of `rank J_G`.

    **Arguments:**

    - `net`: a `DAGNetwork` (or a batch of them).
    - `method`: `"svd"` (any graph), `"groups"` (only when no edge joins two hidden
        nodes: then the rows of `J_G` have disjoint supports and the singular values are
        `2 ||theta_{edges(v)}||`, one per hidden node `v`, with no SVD), or `"auto"`
        (`"groups"` when it applies, else `"svd"`). Both give the same value and the same
        gradient, except that `"svd"` treats singular values below its rank threshold
        as zero.

    **Returns:** a scalar per network. Its gradient is finite everywhere: `U V^T` where
    `J_G` has full rank (repeated singular values included), the minimum-norm
    subgradient `U_+ V_+^T` where some singular values are zero (module docstring).
    """
    if method not in ("auto", "svd", "groups"):
        raise ValueError(f"method must be 'auto', 'svd' or 'groups'; got {method!r}.")
    disjoint = not has_hidden_to_hidden_edges(net.graph)
    if method == "groups" and not disjoint:
        raise ValueError("method='groups' needs a graph with no hidden-to-hidden edge; use method='svd'.")
    if method == "groups" or (method == "auto" and disjoint):
        theta = net.edge_weights()
        Babs = jnp.asarray(np.abs(net.graph._incidence), theta.dtype)
        return 2.0 * jnp.sum(_safe_sqrt(theta**2 @ Babs.T), axis=-1)
    return matrix_nuclear_norm(jacobian(net))


def has_hidden_to_hidden_edges(graph) -> bool:
    """Whether some edge joins two hidden nodes (otherwise the rows of `J_G` have
    disjoint supports: each edge touches at most one hidden node)."""
    hidden = set(graph.hidden)
    return any(u in hidden and v in hidden for u, v in graph.edges)


@jax.custom_jvp
def _safe_sqrt(x):
    return jnp.sqrt(x)


@_safe_sqrt.defjvp
def _safe_sqrt_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = jnp.sqrt(x)
    # d sqrt(sum theta^2) = theta . dtheta / ||theta||; at a zero group the minimum-norm
    # subgradient 0 (dx vanishes there too, being 2 theta dtheta).
    return y, jnp.where(y > 0, dx / (2.0 * jnp.where(y > 0, y, 1.0)), 0.0)


@jax.custom_jvp
def _abs_sum(theta):
    return jnp.sum(jnp.abs(theta), axis=-1)


@_abs_sum.defjvp
def _abs_sum_jvp(primals, tangents):
    (theta,), (dtheta,) = primals, tangents
    return _abs_sum(theta), jnp.sum(jnp.sign(theta) * dtheta, axis=-1)


def l1(net: DAGNetwork) -> Float[Array, "..."]:
    """`sum_e |theta_e|`; its gradient is `sign(theta)`, `0` at `theta_e = 0`."""
    return _abs_sum(net.edge_weights())


def l2(net: DAGNetwork) -> Float[Array, "..."]:
    """`(1/2) sum_e theta_e^2`, so that strength `lambda` adds `lambda theta` to the
    gradient (weight decay)."""
    return 0.5 * jnp.sum(net.edge_weights() ** 2, axis=-1)


REGULARIZERS: dict[str, Callable[[DAGNetwork], Array]] = {
    "nuclear": nuclear_norm,
    "l1": l1,
    "l2": l2,
}


def get_regularizer(reg: str | Callable) -> Callable[[DAGNetwork], Array]:
    """A regularizer by name (`"nuclear"`, `"l1"`, `"l2"`) or a callable `net -> scalar`.
    `"none"` is not a regularizer: pass `None` (or strength 0) where a function takes one."""
    if callable(reg):
        return reg
    if not isinstance(reg, str) or reg not in REGULARIZERS:
        raise ValueError(f"Unknown regularizer {reg!r}; choose one of {sorted(REGULARIZERS)} or pass a callable.")
    return REGULARIZERS[reg]
