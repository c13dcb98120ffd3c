"""Conserved quantities `c = B~ theta^2`, the identity behind them, `J_G` and its rank,
and the singular sub-networks that zero weights cut off."""

from __future__ import annotations

from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from ._results import RESULTS
from .losses import check_data, edge_loss_fn
from .network import DAGNetwork

__all__ = [
    "conserved_quantities",
    "identity_residual",
    "jacobian",
    "jacobian_rank",
    "singular_subnetworks",
    "conservation_scale",
    "is_singular_value",
    "singular_point",
    "SingularPoint",
    "as_conserved",
    "conserved_tol",
]


def _B(net: DAGNetwork, dtype):
    return jnp.asarray(net.graph.incidence(), dtype=dtype)


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

    With `relative=True` it is divided by `|theta| |grad L|` (Euclidean norms; a zero
    gradient gives a zero residual).
    """
    X, Y = check_data(net.graph, X, Y)
    theta = net.edge_weights()
    g = jax.grad(edge_loss_fn(net, X, Y, loss))(theta)
    r = _B(net, theta.dtype) @ (theta * g)
    if relative:
        denom = jnp.linalg.norm(theta) * jnp.linalg.norm(g)
        r = jnp.where(denom > 0, r / jnp.where(denom > 0, denom, 1.0), r)
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


# ------------------------------------------------- conserved values c given by the user


def as_conserved(graph, c) -> np.ndarray:
    """Validate a vector of conserved values for the DAG `graph` and return it as a
    float64 NumPy array ordered as `graph.hidden`. `c` is an array (ordered as
    `graph.hidden`) or a mapping `{hidden label: value}` naming every hidden node once."""
    g = graph
    H = len(g.hidden)
    if isinstance(c, DAGNetwork):
        raise TypeError("Pass the conserved values c (e.g. ij.conserved_quantities(net)), not a network.")
    if isinstance(c, Mapping):
        keys = set(c)
        missing = [v for v in g.hidden if v not in keys]
        extra = [k for k in c if k not in set(g.hidden)]
        if missing or extra:
            raise ValueError(
                f"c is keyed by hidden-node labels, but they differ from graph.hidden: missing "
                f"{missing[:5]!r}, unknown {extra[:5]!r}. Give one value per hidden node of this "
                f"graph (graph.hidden = {list(g.hidden)[:8]!r}{' ...' if H > 8 else ''})."
            )
        c = [c[v] for v in g.hidden]
    try:
        arr = np.asarray(c, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"c must be an array of numbers or a {{label: value}} mapping; got {type(c).__name__}.") from None
    if arr.ndim != 1 or arr.shape[0] != H:
        raise ValueError(
            f"c has shape {arr.shape}; expected ({H},), one value per hidden node in graph.hidden "
            "order (or pass a {label: value} dict)."
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"c[{k}] (hidden node {g.hidden[k]!r}) is {float(arr[k])!r}; every c_v must be finite.")
    return arr


def conserved_tol(tol, c: np.ndarray) -> float:
    """The comparison tolerance: `tol` if given (must be > 0), else `1e-10 * max(1e-300,
    sum |c_v|)`, a few hundred float64 rounding units of the terms of `c`."""
    if tol is None:
        return 1e-10 * max(float(np.sum(np.abs(c))), 1e-290)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)):
        raise TypeError(f"tol must be a positive number; got {type(tol).__name__}.")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number; got {tol!r}. Use e.g. tol=1e-10 * sum(|c|).")
    return float(tol)


class SingularPoint(eqx.Module):
    """The answer of `singular_point`.

    **Fields:**

    - `found`: whether `H_G(c)` contains a singular point (up to `tol`).
    - `group`: a cut-off group `W` of hidden nodes (a frozenset), or `None`.
    - `theta`: a witness point (edge weights in `graph.edges` order) whose edges on the
        boundary of `W` are zero and with `max |B~ theta^2 - c| <= tol`, or `None`.
    - `residual`: that `max |B~ theta^2 - c|` (`nan` when nothing was found).
    - `candidates`: how many candidate groups the MILP proposed (each checked by an LP).
    - `tol`: the tolerance used.
    - `result`: `RESULTS.successful` when decided, `RESULTS.undecided` when the search gave
        up (then `found` is `False` and means "not found", not "absent").
    - `message`: `""`, or what stopped the search and what to do.
    """

    found: bool = eqx.field(static=True)
    group: frozenset | None = eqx.field(static=True)
    theta: np.ndarray | None
    residual: float = eqx.field(static=True)
    candidates: int = eqx.field(static=True)
    tol: float = eqx.field(static=True)
    result: RESULTS
    message: str = eqx.field(static=True, default="")

    @property
    def success(self) -> bool:
        """Whether the search decided (found a point, or proved there is none)."""
        return bool(self.result == RESULTS.successful)

    def __bool__(self) -> bool:
        return self.found


def _boundary_edges(g, W) -> np.ndarray:
    """Edge indices with exactly one endpoint in `W` (inputs/outputs are never in `W`)."""
    return np.array([k for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)], dtype=np.int64)


def _cutoff_residual(g, c: np.ndarray, W) -> tuple[float, np.ndarray]:
    """Exact LP: min over q >= 0 with q = 0 on W's boundary of max_v |(B~ q - c)_v|.
    Returns (residual, q)."""
    B = g.incidence()
    H, E = B.shape
    s = max(float(np.max(np.abs(c))), 1e-300) if H else 1.0
    cs = c / s
    # variables [q (E), t]; minimise t subject to -t <= B q - c <= t
    obj = np.zeros(E + 1)
    obj[-1] = 1.0
    A = np.block([[B, -np.ones((H, 1))], [-B, -np.ones((H, 1))]])
    b = np.concatenate([cs, -cs])
    bounds = [(0.0, None)] * E + [(0.0, None)]
    for k in _boundary_edges(g, W):
        bounds[k] = (0.0, 0.0)
    res = linprog(obj, A_ub=A, b_ub=b, bounds=bounds, method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:  # pragma: no cover - the LP is always feasible and bounded
        raise RuntimeError(f"HiGHS failed on the cut-off LP: {res.message}")
    q = np.maximum(res.x[:E], 0.0) * s
    return float(np.max(np.abs(B @ q - c), initial=0.0)), q


def singular_point(graph, c, *, tol: float | None = None, max_candidates: int = 64) -> SingularPoint:
    """Decide whether `H_G(c) = {theta : B~ theta^2 = c}` contains a singular point: a
    `theta` whose zero edges cut a group `W` of hidden nodes off every input and output.

    `sum_{v in W} c_v = 0` is necessary, not sufficient: the flow `q = theta^2` must also
    be feasible inside `W` and outside it with `W`'s boundary edges at zero.

    How candidates are found: one mixed-integer LP (`scipy.optimize.milp`, HiGHS) with a
    binary `x_v` per hidden node (`v in W`), `q >= 0`, `|B~ q - c| <= tol`, and big-M rows
    `q_e <= M (1 - |x_u - x_v|)` forcing boundary edges to zero (`M = sum |c| + H tol`
    bounds `q` at a vertex, since `B~` is totally unimodular). Each proposed `W` is then
    decided exactly by an LP with `W`'s boundary edges fixed at 0 that minimises
    `max |B~ q - c|`; a `W` it rejects (a MILP tolerance artefact) is excluded by a
    no-good cut and the MILP re-solved.

    Cost: one MILP with `E + H` variables and about `2E + 2H` rows per candidate (the
    problem contains subset-sum, so the worst case is exponential in `H`; for the graphs
    of this toolkit, up to a few dozen hidden nodes, it takes milliseconds), plus one LP
    with `E + 1` variables per candidate.

    **Arguments:**

    - `graph`: the `DAG`.
    - `c`: conserved values, an array ordered as `g.hidden` or a `{label: value}` dict.
    - `tol`: `c` counts as singular when some cut-off point has `max |B~ theta^2 - c| <=
        tol`. Default `1e-10 * sum |c_v|`.
    - `max_candidates`: give up (with a `result` message) after this many rejected MILP
        proposals.

    **Returns:** a `SingularPoint` (truthy when found).
    """
    g = graph
    c = as_conserved(g, c)
    tol = conserved_tol(tol, c)
    B = g.incidence()
    H, E = B.shape
    if H == 0:
        return SingularPoint(False, None, None, float("nan"), 0, tol, RESULTS.successful)
    s = max(float(np.max(np.abs(c))), tol)
    cs, ts = c / s, tol / s
    M = (float(np.sum(np.abs(cs))) + H * ts) * (1 + 1e-9) + 1e-12
    hid = {v: i for i, v in enumerate(g.hidden)}
    rows = []  # big-M rows forcing q_e = 0 when e crosses the boundary of W
    for k, (u, v) in enumerate(g.edges):
        ends = [hid[w] for w in (u, v) if w in hid]
        signs = [(1.0, -1.0), (-1.0, 1.0)] if len(ends) == 2 else [(1.0,)] * len(ends[:1])
        for sg in signs:
            r = np.zeros(E + H)
            r[k] = 1.0
            for i, sgn in zip(ends, sg):
                r[E + i] += M * sgn
            rows.append(r)
    cons = [LinearConstraint(np.hstack([B, np.zeros((H, H))]), cs - ts, cs + ts),
            LinearConstraint(np.concatenate([np.zeros(E), np.ones(H)])[None], 1, np.inf)]
    if rows:
        cons.append(LinearConstraint(np.array(rows), -np.inf, M))
    integrality = np.concatenate([np.zeros(E), np.ones(H)])
    bounds = Bounds(np.zeros(E + H), np.concatenate([np.full(E, np.inf), np.ones(H)]))
    obj = np.concatenate([np.zeros(E), np.ones(H)])  # smallest group first
    for n in range(1, max_candidates + 1):
        res = milp(obj, constraints=cons, integrality=integrality, bounds=bounds)
        if res.status == 2 or res.x is None:  # infeasible
            return SingularPoint(False, None, None, float("nan"), n - 1, tol, RESULTS.successful)
        x = np.round(res.x[E:]).astype(bool)
        W = frozenset(v for v, xi in zip(g.hidden, x) if xi)
        resid, q = _cutoff_residual(g, c, W)
        if resid <= tol:
            return SingularPoint(True, W, np.sqrt(q), resid, n, tol, RESULTS.successful)
        cut = np.concatenate([np.zeros(E), np.where(x, -1.0, 1.0)])
        cons.append(LinearConstraint(cut[None], 1 - x.sum(), np.inf))
    return SingularPoint(False, None, None, float("nan"), max_candidates, tol, RESULTS.undecided,
                         f"Undecided: {max_candidates} MILP candidates were rejected by the exact LP; "
                         "pass a larger max_candidates or a larger tol.")


def is_singular_value(graph, c, *, tol: float | None = None) -> bool:
    """Whether `H_G(c)` contains a singular point (a point where zero edges cut some group
    of hidden nodes off every input and output). See `singular_point` for the method,
    its cost and the witness. Raises if the search was undecided."""
    sp = singular_point(graph, c, tol=tol)
    if not sp.success:
        raise RuntimeError(sp.message)
    return sp.found
