"""Conserved quantities `c = B~ theta^2`, the identity behind them, `J_G` and its rank,
and the singular sub-networks that zero weights cut off."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .losses import check_data, edge_loss_fn
from .network import DAGNetwork

__all__ = [
    "conserved_quantities",
    "identity_residual",
    "jacobian",
    "jacobian_rank",
    "singular_subnetworks",
    "conservation_scale",
]


def _B(net: DAGNetwork, dtype):
    return jnp.asarray(net.graph._incidence, dtype=dtype)


def conserved_quantities(net: DAGNetwork) -> Float[Array, "... H"]:
    """`c = B~ theta^2`, ordered as `graph.hidden`: for each hidden node, the sum of its
    squared incoming weights minus the sum of its squared outgoing weights. Works on a
    batch of networks (leading axes of `weights`)."""
    theta = net.edge_weights()
    return (theta**2) @ _B(net, theta.dtype).T


def conservation_scale(net: DAGNetwork) -> Float[Array, "..."]:
    """`max_v (sum in^2 + sum out^2)` = `max |B~| theta^2`: the natural size of the terms
    of `c`. Relative drifts are measured against it."""
    theta = net.edge_weights()
    return jnp.max((theta**2) @ jnp.abs(_B(net, theta.dtype)).T, axis=-1)


def identity_residual(net: DAGNetwork, X, Y, *, loss="mse", relative: bool = False):
    """`B~ (theta * grad L(theta))`, per hidden node. It vanishes exactly for positively
    homogeneous activations (any data, any theta), which is why `c` is conserved.

    With `relative=True` it is divided by `|theta| |grad L|` (Euclidean norms).
    """
    X, Y = check_data(net.graph, X, Y)
    theta = net.edge_weights()
    g = jax.grad(edge_loss_fn(net, X, Y, loss))(theta)
    r = _B(net, theta.dtype) @ (theta * g)
    if relative:
        r = r / (jnp.linalg.norm(theta) * jnp.linalg.norm(g))
    return r


def jacobian(net: DAGNetwork) -> Float[Array, "H E"]:
    """`J_G(theta) = 2 B~ diag(theta)`, the Jacobian of `theta -> B~ theta^2`."""
    theta = net.edge_weights()
    return 2.0 * _B(net, theta.dtype) * theta[..., None, :]


def _check_tol(tol):
    if tol is not None and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number; got {tol!r}.")


def jacobian_rank(net: DAGNetwork, tol: float | None = None):
    """Numerical rank of `J_G`: singular values above `tol` (absolute). With `tol=None`
    the threshold is `max(H, E) * eps * s_max`, as in `numpy.linalg.matrix_rank`.
    Jit- and vmap-compatible; returns an integer array."""
    _check_tol(tol)
    J = jacobian(net)
    s = jnp.linalg.svd(J, compute_uv=False)
    if tol is None:
        thr = max(J.shape[-2:]) * jnp.finfo(J.dtype).eps * jnp.max(s, axis=-1, keepdims=True)
    else:
        thr = tol
    return jnp.sum(s > thr, axis=-1)


def singular_subnetworks(net: DAGNetwork, tol: float = 0.0) -> list[frozenset]:
    """Groups of hidden nodes that the edges with `|theta_e| <= tol` cut off from every
    input and output node: the connected components (ignoring direction) of the graph
    of the remaining edges that contain no input or output. `rank J_G = len(hidden) -
    len(groups)`. Each group `W` has `sum_{v in W} c_v = 0` exactly when `tol = 0`.

    Needs concrete weights (not under `jit`); see `n_cut_off_groups` for a jittable count.
    """
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0; got {tol!r}.")
    g = net.graph
    theta = np.asarray(net.edge_weights())
    if theta.ndim != 1:
        raise ValueError("singular_subnetworks takes one network; index or loop over a batch.")
    parent = list(range(g.n_nodes))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    rows, cols = g.edge_index
    for k in np.flatnonzero(np.abs(theta) > tol):
        a, b = find(rows[k]), find(cols[k])
        if a != b:
            parent[a] = b
    grounded = {find(g.index[v]) for v in g.inputs + g.outputs}
    groups: dict[int, list] = {}
    for v in g.hidden:
        r = find(g.index[v])
        if r not in grounded:
            groups.setdefault(r, []).append(v)
    return [frozenset(w) for w in groups.values()]
