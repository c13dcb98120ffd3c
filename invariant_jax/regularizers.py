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

- `group_lasso`: `sum_v ||theta_{in(v)}||_2` over hidden nodes `v`, the fan-in of each
  neuron (bias edge included). Fan-ins are disjoint, so its proximal map is exact group
  soft-thresholding on any DAG; a neuron with zero fan-in emits `sigma(0)` (0 for ReLU)
  and `prune` removes it losslessly ("no input"), but it stays connected to the output
  through its outgoing edges, so `rank J_G` does not drop.

On networks without hidden-to-hidden edges (one hidden layer, with or without bias) the
rows of `J_G` have disjoint supports, so `||J_G||_* = 2 sum_v ||theta_{edges(v)}||_2`:
a group lasso over the edges of each hidden node. `training.fit` uses this to take an
exact proximal step that sets whole neurons to zero.

*Any DAG: the working-set bound.* Let `W_1, ..., W_m` be disjoint sets of hidden nodes,
no edge joining two of them, `e_W = 1_W / sqrt(|W|)` and `P` the orthogonal projector onto
their span. Row `W` of `P J_G` is `e_W^T J_G`; its entries vanish on edges inside `W`
(`+1 - 1`) and outside it, and are `+-2 theta_e / sqrt(|W|)` on the boundary `dW` (edges
with one end in `W`). These rows have disjoint supports, so the triangle inequality gives,
for every `theta`,

    ||J_G||_* <= ||P J_G||_* + ||(I - P) J_G||_*
              =  sum_W (2 / sqrt(|W|)) ||theta_{dW}||_2 + ||(I - P) J_G||_*,

with equality wherever every `theta_{dW}` is zero (then `P J_G = 0`): exactly on the set of
weights where the groups `W` are cut off, which is where `||J_G||_*` is not differentiable
(`rank J_G = H - #groups`). Near that set the gap is second order in `theta_{dW}` (the
smallest singular value of `J_G` is `2 ||theta_{dW}|| / sqrt(|W|) + O(||theta_{dW}||^2)`), so
the bound splits the nuclear norm into the group norms that carry its non-smoothness
(proximal map: group soft-thresholding, exact zeros) and a part that is smooth there
(`nuclear_upper_bound`). `nuclear_working_set` picks the groups from the current weights:
the hidden nodes that the edges with `|theta_e| > tol` leave cut off, merged along every
edge joining two of them (so boundaries are disjoint). This is the partial-smoothness
structure of Lewis (2002), under which forward-backward steps identify the non-smooth
manifold in finitely many iterations under non-degeneracy conditions (Liang, Fadili and
Peyre, 2017); see `training.fit`.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._checks import check_positive
from .invariants import jacobian
from .network import DAGNetwork

__all__ = [
    "nuclear_norm",
    "has_hidden_to_hidden_edges",
    "l1",
    "l2",
    "group_lasso",
    "REGULARIZERS",
    "get_regularizer",
    "matrix_nuclear_norm",
    "WorkingSet",
    "nuclear_working_set",
    "nuclear_upper_bound",
    "group_boundary_norms",
    "gram_nuclear_norm",
]


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
        Babs = jnp.asarray(np.abs(net.graph.incidence()), theta.dtype)
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


def group_lasso(net: DAGNetwork) -> Float[Array, "..."]:
    """`sum_v ||theta_{in(v)}||_2` over hidden nodes `v` (fan-in groups, bias edges
    included); gradient `theta_e / ||theta_{in(v)}||` on the fan-in of `v`, `0` on a
    zero group (minimum-norm subgradient) and on edges into output nodes."""
    theta = net.edge_weights()
    Bin = jnp.asarray(net.graph.incidence() > 0, theta.dtype)
    return jnp.sum(_safe_sqrt(theta**2 @ Bin.T), axis=-1)


# ----------------------------------------------------- any DAG: the working-set bound


class WorkingSet(eqx.Module):
    """Disjoint, pairwise non-adjacent groups of hidden nodes (module docstring), as
    returned by `nuclear_working_set`. Leading batch axes as for `theta`.

    **Fields:**

    - `node_group`: `(H,)` int, the group of each hidden node (the index, in
        `graph.hidden`, of its first member), `-1` outside every group.
    - `edge_group`: `(E,)` int, the group whose boundary holds the edge, `-1` for none
        (each edge is on at most one boundary).
    - `size`: `(H,)` the number of members of group `k` at index `k` (0 elsewhere).
    - `projector`: `(H, H)`, `P = sum_W e_W e_W^T` with `e_W = 1_W / sqrt(|W|)`.
    """

    node_group: Int[Array, "... H"]
    edge_group: Int[Array, "... E"]
    size: Float[Array, "... H"]
    projector: Float[Array, "... H H"]

    @property
    def n_groups(self) -> Int[Array, "..."]:
        return jnp.sum(self.size > 0, axis=-1)


def _working_set(graph, theta, tol) -> WorkingSet:
    n, H = graph.n_nodes, len(graph.hidden)
    n_in = len(graph.inputs)
    rows, cols = graph.edge_index
    S = np.zeros((n, n), bool)  # structure, undirected
    S[rows, cols] = S[cols, rows] = True
    grounded = np.zeros(n, bool)
    grounded[[graph.index[v] for v in graph.inputs + graph.outputs]] = True
    batch = theta.shape[:-1]
    on = jnp.abs(theta) > tol
    A = jnp.zeros(batch + (n, n), bool).at[..., rows, cols].set(on)
    A = A | jnp.swapaxes(A, -1, -2)
    r0 = jnp.broadcast_to(jnp.asarray(grounded), batch + (n,))
    reach = jax.lax.fori_loop(0, max(H, 1), lambda _, r: r | jnp.any(A & r[..., None, :], axis=-1), r0)
    cut = ~reach
    big = n
    S_j = jnp.asarray(S)

    def relabel(_, lab):  # merge cut nodes along every structural edge between them
        nb = jnp.min(jnp.where(S_j & cut[..., None, :], lab[..., None, :], big), axis=-1)
        return jnp.where(cut, jnp.minimum(lab, nb), big)

    lab = jax.lax.fori_loop(0, max(H, 1), relabel, jnp.where(cut, jnp.arange(n), big))
    node_group = jnp.where(cut, lab - n_in, -1)[..., n_in : n_in + H]
    lab_r, lab_c = lab[..., rows], lab[..., cols]
    cut_r, cut_c = cut[..., rows], cut[..., cols]
    edge_group = jnp.where(cut_r & ~cut_c, lab_r - n_in, jnp.where(cut_c & ~cut_r, lab_c - n_in, -1))
    member = node_group[..., :, None] == jnp.arange(H)  # (H, H): node v in group k
    size = jnp.sum(member, axis=-2).astype(theta.dtype)
    same = (node_group[..., :, None] == node_group[..., None, :]) & (node_group[..., :, None] >= 0)
    sz = jnp.take_along_axis(size, jnp.maximum(node_group, 0), axis=-1)
    proj = jnp.where(same, 1.0 / jnp.maximum(sz, 1.0)[..., :, None], 0.0).astype(theta.dtype)
    return WorkingSet(node_group, edge_group, size, proj)


def nuclear_working_set(net: DAGNetwork, tol: float | Float[Array, ""]) -> WorkingSet:
    """The groups of the working-set bound (module docstring): hidden nodes that the edges
    with `|theta_e| > tol` leave cut off from every input and output, merged along every
    edge joining two of them. Jittable and vmappable: `tol` is a number (checked) or a
    scalar array, traced too (a compiled loop's argument, e.g. in `training.fit`; compared
    in the weights' dtype, as a number is). At `tol = 0` these are the cut-off groups of
    `ij.singular_subnetworks(net, 0)`, merged where a (zero) edge joins two of them."""
    theta = net.edge_weights()
    if isinstance(tol, jax.Array):
        return _working_set(net.graph, theta, tol.astype(theta.dtype))
    check_positive("tol", tol, allow_zero=True)
    return _working_set(net.graph, theta, float(tol))


def group_boundary_norms(ws: WorkingSet, theta: Float[Array, "... E"]) -> Float[Array, "... H"]:
    """`||theta_{dW}||_2` for each group `W` of `ws` (at the group's index; 0 elsewhere)."""
    H = ws.size.shape[-1]
    onehot = (ws.edge_group[..., :, None] == jnp.arange(H)).astype(theta.dtype)  # (E, H)
    return _safe_sqrt(jnp.einsum("...e,...eh->...h", theta**2, onehot))


def nuclear_upper_bound(net: DAGNetwork, tol: float) -> Float[Array, "..."]:
    """`sum_W (2 / sqrt(|W|)) ||theta_{dW}|| + ||(I - P) J_G||_*` for the groups of
    `nuclear_working_set(net, tol)`: an upper bound of `nuclear_norm(net)` for every
    `theta`, equal to it where every boundary `theta_{dW}` is zero (module docstring)."""
    ws = nuclear_working_set(net, tol)
    theta = net.edge_weights()
    groups = jnp.sum(2.0 / jnp.sqrt(jnp.maximum(ws.size, 1.0)) * group_boundary_norms(ws, theta), axis=-1)
    J = jacobian(net)
    eye = jnp.eye(J.shape[-2], dtype=J.dtype)
    return groups + matrix_nuclear_norm((eye - ws.projector) @ J)


@jax.custom_jvp
def gram_nuclear_norm(Bt: Float[Array, "... H E"], theta: Float[Array, "... E"]) -> Float[Array, "..."]:
    """`||2 Bt diag(theta)||_*` computed from the `H x H` Gram matrix
    `K = Bt diag(theta^2) Bt^T` as `2 tr K^(1/2)` (one `H x H` `eigh` instead of an
    `H x E` SVD: the cost the working-set step pays per iteration). Differentiable in
    `theta` only (`Bt` is a constant): `d/dtheta_e = 2 theta_e (Bt^T K^(+1/2)^{-1} Bt)_ee`,
    over the eigenvalues above `8 H eps lambda_max` (the others count as zero: the
    minimum-norm subgradient, as in `matrix_nuclear_norm`, with a threshold of
    `sqrt(8 H eps) s_max` on the singular values, since `K` squares them)."""
    return _gram_parts(Bt, theta)[0]


def _gram_parts(Bt, theta):
    K = jnp.einsum("...he,...e,...ke->...hk", Bt, theta**2, Bt)
    lam, U = jnp.linalg.eigh(K)
    H = K.shape[-1]
    thr = 8 * H * jnp.finfo(K.dtype).eps * jnp.max(lam, axis=-1, keepdims=True)
    keep = lam > thr
    root = jnp.sqrt(jnp.where(keep, lam, 0.0))
    inv = jnp.where(keep, 1.0 / jnp.where(keep, root, 1.0), 0.0)
    C = jnp.einsum("...hi,...i,...ki->...hk", U, inv, U)
    w = jnp.einsum("...he,...hk,...ke->...e", Bt, C, Bt)
    return 2.0 * jnp.sum(root, axis=-1), 2.0 * theta * w


@gram_nuclear_norm.defjvp
def _gram_nuclear_norm_jvp(primals, tangents):
    Bt, theta = primals
    _, dtheta = tangents
    value, grad = _gram_parts(Bt, theta)
    return value, jnp.sum(grad * dtheta, axis=-1)


REGULARIZERS: dict[str, Callable[[DAGNetwork], Array]] = {
    "nuclear": nuclear_norm,
    "l1": l1,
    "l2": l2,
    "group_lasso": group_lasso,
}


def get_regularizer(reg: str | Callable) -> Callable[[DAGNetwork], Array]:
    """A regularizer by name (`"nuclear"`, `"l1"`, `"l2"`, `"group_lasso"`) or a callable `net -> scalar`.
    `"none"` is not a regularizer: pass `None` (or strength 0) where a function takes one."""
    if callable(reg):
        return reg
    if not isinstance(reg, str) or reg not in REGULARIZERS:
        raise ValueError(f"Unknown regularizer {reg!r}; choose one of {sorted(REGULARIZERS)} or pass a callable.")
    return REGULARIZERS[reg]
