"""Conserved quantities `c = B~ theta^2`, the identity behind them, `J_G` and its rank,
and the singular sub-networks that zero weights cut off."""

from __future__ import annotations

import time
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jaxtyping import Array, Float
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse.csgraph import connected_components
from tqdm import tqdm

from ._checks import check_finite, check_positive
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
    "zero_sum_groups",
    "hidden_components",
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
    check_positive("tol", tol, allow_none=True)


def jacobian_rank(net: DAGNetwork, tol: float | None = None, *, method: str = "svd"):
    """Rank of `J_G = 2 B~ diag(theta)` (`H x E`), by one of two methods.

    **Arguments:**

    - `net`: a network, or a batch of networks (leading axes of `weights`).
    - `tol`: a threshold whose meaning depends on `method` (see below).
    - `method`:
        - `"svd"` (default): the numerical rank, the number of singular values of `J_G`
          above `tol` (absolute). With `tol=None` the threshold is
          `max(H, E) * eps * s_max`, as in `numpy.linalg.matrix_rank`. Jit- and
          vmap-compatible; returns an integer JAX array. Cost: a dense SVD, cubic
          (8-27 s at 10^3 hidden nodes and 10^4 edges on a shared 2-core CPU).
        - `"graph"`: the exact rank of `J_G` with the edges `|theta_e| <= tol` set to 0
          (`tol=None` means 0: only exactly-zero weights count as 0). Scaling the
          columns of `B~` by nonzero numbers does not change its rank, and the rank of the
          grounded incidence matrix of the remaining edges is `H` minus the number of
          connected components of hidden nodes with no path to an input or output, so
          this is `len(graph.hidden) - len(singular_subnetworks(net, tol))`, computed by
          `scipy.sparse.csgraph.connected_components` (linear in `E`; milliseconds at
          10^3 hidden nodes). NumPy, not jittable (use `"svd"`, or
          `ij.n_cut_off_groups` for a jittable count); returns a NumPy integer array.

    **The two thresholds differ.** `"svd"`'s `tol` bounds singular values of `J_G`;
    `"graph"`'s bounds edge weights. They agree whenever the weights that are not zero
    are not tiny next to the largest one: then `rank_svd == rank_graph` at the defaults.
    They differ where a weight is nonzero but below the SVD's rounding threshold (e.g.
    `theta_e = 1e-300` next to weights of order 1: `"svd"` counts it as 0, `"graph"` at
    `tol=None` does not), and where a group is held on only by weights just above an edge
    threshold. `"graph"` has no rounding at all: it is the rank of the matrix with exactly
    those zeros, which is what gradient flow preserves (a cut-off edge stays exactly 0).
    """
    if method == "graph":
        return _jacobian_rank_graph(net, 0.0 if tol is None else tol)
    if method != "svd":
        raise ValueError(f"method must be 'svd' or 'graph'; got {method!r}.")
    _check_tol(tol)
    J = jacobian(net)
    s = jnp.linalg.svd(J, compute_uv=False)
    thr: Array | float
    if tol is None:
        thr = max(J.shape[-2:]) * jnp.finfo(J.dtype).eps * jnp.max(s, axis=-1, keepdims=True)
    else:
        thr = tol
    return jnp.sum(s > thr, axis=-1)


def _jacobian_rank_graph(net: DAGNetwork, tol: float) -> np.ndarray:
    check_positive("tol", tol, allow_zero=True)  # an edge threshold
    weights = net.edge_weights()
    if isinstance(weights, jax.core.Tracer):
        raise ValueError(
            "jacobian_rank(..., method='graph') needs concrete weights (it runs in NumPy/SciPy), "
            "not traced ones under jit or vmap; use method='svd', or ij.n_cut_off_groups for a "
            "jittable count of cut-off groups."
        )
    theta = np.asarray(
        check_finite(
            np.asarray(weights),
            "is not finite; jacobian_rank(..., method='graph') needs finite edge weights.",
            where="edge weight theta[{index}] ",
        )
    )
    g = net.graph
    H = len(g.hidden)
    rows, cols = (np.asarray(a) for a in g.edge_index)
    ground = np.asarray([g.index[v] for v in g.inputs + g.outputs], dtype=np.int64)
    # every input and output joined to the first of them: the grounded nodes form one component
    g_rows = np.full(len(ground) - 1, ground[0]) if len(ground) else np.zeros(0, np.int64)
    g_cols = ground[1:]
    n = g.n_nodes
    flat = theta.reshape(-1, theta.shape[-1])
    out = np.empty(len(flat), dtype=np.int64)
    for i, th in enumerate(flat):
        on = np.abs(th) > tol
        r = np.concatenate([rows[on], g_rows])
        c = np.concatenate([cols[on], g_cols])
        A = sp.coo_matrix((np.ones(len(r), np.int8), (r, c)), shape=(n, n))
        n_comp = connected_components(A, directed=False, return_labels=False)
        # components: the grounded one (if the graph has inputs/outputs) and the cut-off groups
        out[i] = H - (n_comp - (1 if len(ground) else 0))
    return out.reshape(theta.shape[:-1])


def singular_subnetworks(net: DAGNetwork, tol: float = 0.0) -> list[frozenset]:
    """Groups of hidden nodes that the edges with `|theta_e| <= tol` cut off from every
    input and output node: the connected components (ignoring direction) of the graph
    of the remaining edges that contain no input or output. `rank J_G = len(hidden) -
    len(groups)`. Each group `W` has `sum_{v in W} c_v = 0` exactly when `tol = 0`.

    Needs concrete weights (not under `jit`); see `n_cut_off_groups` for a jittable count.
    """
    check_positive("tol", tol, allow_zero=True)
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
        raise TypeError(
            f"c must be an array of numbers or a {{label: value}} mapping; got {type(c).__name__}."
        ) from None
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
    check_positive("tol", tol)
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
    Bs, one = sp.csr_matrix(B.astype(np.float64)), sp.csr_matrix(np.ones((H, 1)))
    A = sp.vstack([sp.hstack([Bs, -one]), sp.hstack([-Bs, -one])]).tocsr()
    b = np.concatenate([cs, -cs])
    bounds: list[tuple[float, float | None]] = [(0.0, None) for _ in range(E + 1)]
    for k in _boundary_edges(g, W):
        bounds[k] = (0.0, 0.0)
    res = linprog(
        obj,
        A_ub=A,
        b_ub=b,
        bounds=bounds,
        method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    if res.status != 0:  # pragma: no cover - the LP is always feasible and bounded
        raise RuntimeError(f"HiGHS failed on the cut-off LP: {res.message}")
    q = np.maximum(res.x[:E], 0.0) * s
    return float(np.max(np.abs(B @ q - c), initial=0.0)), q


def _all_subset_sums(x: np.ndarray) -> np.ndarray:
    """The `2^n` subset sums of `x`, the empty set first."""
    s = np.zeros(1)
    for v in x:
        s = np.concatenate([s, s + v])
    return s


def _near_zero_subsets(x: np.ndarray, bound: float, limit: int) -> list[np.ndarray] | None:
    """Every nonempty subset of `x` with `|sum| <= bound`, as boolean masks (meet in the
    middle: two halves of `2^(n/2)` sums, one sort, two binary searches), or `None` when
    there are more than `limit`."""
    n = len(x)
    h = n // 2
    A, Bs = _all_subset_sums(x[:h]), _all_subset_sums(x[h:])
    order = np.argsort(Bs, kind="stable")
    Bsorted = Bs[order]
    lo = np.searchsorted(Bsorted, -A - bound, side="left")
    hi = np.searchsorted(Bsorted, -A + bound, side="right")
    count = int(np.sum(hi - lo)) - 1  # the empty set pairs with itself
    if count > limit:
        return None
    out = []
    for i in np.flatnonzero(hi > lo):
        for j in order[lo[i] : hi[i]]:
            if i == 0 and j == 0:
                continue
            bits = np.concatenate([(i >> np.arange(h)) & 1, (int(j) >> np.arange(n - h)) & 1]).astype(bool)
            out.append(bits)
    return out


def hidden_components(graph) -> list[list[int]]:
    """The connected components (ignoring direction) of the graph restricted to hidden
    nodes, as lists of positions in `graph.hidden`. A cut-off group may be taken inside
    one of them: each connected piece of a cut-off group is cut off by itself."""
    g = graph
    hid = {v: i for i, v in enumerate(g.hidden)}
    parent = list(range(len(hid)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for u, v in g.edges:
        if u in hid and v in hid:
            parent[find(hid[u])] = find(hid[v])
    comps: dict[int, list[int]] = {}
    for i in range(len(hid)):
        comps.setdefault(find(i), []).append(i)
    return list(comps.values())


def zero_sum_groups(
    graph, c: np.ndarray, tol: float, *, max_size: int = 40, limit: int = 256
) -> list[frozenset] | None:
    """Every set `W` of hidden nodes inside one hidden component with
    `|sum_W c| <= H tol`: the candidates for a cut-off group (whose flow cancels in the
    sum, so `|sum_W c| <= |W| tol`), smallest first; `None` when a component has more than
    `max_size` nodes or there are more than `limit` candidates. Cost `2^(n/2)` per
    component of `n` nodes (meet in the middle)."""
    c = np.asarray(c, dtype=np.float64)
    H = len(c)
    bound = H * tol + 64 * np.finfo(np.float64).eps * float(np.sum(np.abs(c)))
    out: list[frozenset] = []
    for comp in hidden_components(graph):
        if len(comp) > max_size:
            return None
        masks = _near_zero_subsets(c[comp], bound, limit - len(out))
        if masks is None:
            return None
        out += [frozenset(graph.hidden[comp[k]] for k in np.flatnonzero(m)) for m in masks]
    return sorted(out, key=len)


def singular_point(
    graph,
    c,
    *,
    tol: float | None = None,
    max_candidates: int = 64,
    time_limit: float | None = None,
    max_subset_size: int = 40,
    progress: bool = False,
) -> SingularPoint:
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

    First, without any MILP: a cut-off group `W` has `|sum_W c| <= |W| tol` (the flow
    inside `W` cancels in the sum), and `W` may be taken inside one connected component
    of the hidden nodes (each connected piece of a cut-off group is cut off by itself).
    `zero_sum_groups` lists every subset of a component with `|sum_W c| <= H tol` by
    meet in the middle (`2^(n/2)` sums per component of `n <= max_subset_size` nodes), and
    each is decided by the exact LP above. This is exact, and for a generic `c` (any
    random initialization) the list is empty or a handful: milliseconds up to 40 hidden
    nodes per component. The MILP runs only when a component is larger or there are more
    than `max_candidates` near-zero subsets.

    Cost: the question contains subset-sum (a layer of nodes with `c_v < 0` feeding a
    layer with `c_v > 0` is cut off exactly when some of them sum to 0), so no method is
    polynomial in general (unless P = NP). The MILP (`E + H` variables, about `2E + 2H`
    rows, one per candidate) is therefore bounded: `time_limit` seconds in all and
    `max_candidates` proposals, after which `result` is `RESULTS.undecided`. For a
    given network, `singular_subnetworks` (which groups *are* cut off) is linear time.

    **Arguments:**

    - `graph`: the `DAG`.
    - `c`: conserved values, an array ordered as `g.hidden` or a `{label: value}` dict.
    - `tol`: `c` counts as singular when some cut-off point has `max |B~ theta^2 - c| <=
        tol`. Default `1e-10 * sum |c_v|`.
    - `max_candidates`: give up (with a `result` message) after this many rejected MILP
        proposals.
    - `time_limit`: give up after this many seconds of MILP search (default: no limit).
    - `max_subset_size`: the largest hidden component for the subset-sum enumeration.
    - `progress`: show a progress bar over MILP candidates.

    **Returns:** a `SingularPoint` (truthy when found).
    """
    g = graph
    c = as_conserved(g, c)
    tol = conserved_tol(tol, c)
    check_positive("time_limit", time_limit, allow_none=True)  # seconds
    if len(g.hidden) == 0:
        return SingularPoint(False, None, None, float("nan"), 0, tol, RESULTS.successful)
    cands = zero_sum_groups(g, c, tol, max_size=max_subset_size, limit=max_candidates)
    if cands is None:
        return _milp_search(g, c, tol, max_candidates, time_limit, progress)
    for n, W in enumerate(tqdm(cands, disable=not progress, desc="singular point: zero-sum groups"), start=1):
        resid, q = _cutoff_residual(g, c, W)
        if resid <= tol:
            return SingularPoint(True, W, np.sqrt(q), resid, n, tol, RESULTS.successful)
    return SingularPoint(False, None, None, float("nan"), len(cands), tol, RESULTS.successful)


def _milp_problem(g, c: np.ndarray, tol: float):
    """The MILP of `singular_point`: (objective, constraints, integrality, bounds)."""
    B = g.incidence()
    H, E = B.shape
    s = max(float(np.max(np.abs(c))), tol)
    cs, ts = c / s, tol / s
    M = (float(np.sum(np.abs(cs))) + H * ts) * (1 + 1e-9) + 1e-12
    hid = {v: i for i, v in enumerate(g.hidden)}
    # big-M rows forcing q_e = 0 when e crosses the boundary of W (sparse)
    r: list[int] = []
    col: list[int] = []
    val: list[float] = []
    for k, (u, v) in enumerate(g.edges):
        ends = [hid[w] for w in (u, v) if w in hid]
        signs = [(1.0, -1.0), (-1.0, 1.0)] if len(ends) == 2 else [(1.0,)] * len(ends[:1])
        for sg in signs:
            i = len(r) and r[-1] + 1
            r.append(i)
            col.append(k)
            val.append(1.0)
            for j, sgn in zip(ends, sg):
                r.append(i)
                col.append(E + j)
                val.append(M * sgn)
    Bs = sp.csr_matrix(B.astype(np.float64))
    cons = [
        LinearConstraint(sp.hstack([Bs, sp.csr_matrix((H, H))]).tocsr(), cs - ts, cs + ts),
        LinearConstraint(np.concatenate([np.zeros(E), np.ones(H)])[None], 1, np.inf),
    ]
    if r:
        rows = sp.csr_matrix((val, (r, col)), shape=(r[-1] + 1, E + H))
        cons.append(LinearConstraint(rows, -np.inf, M))
    integrality = np.concatenate([np.zeros(E), np.ones(H)])
    bounds = Bounds(np.zeros(E + H), np.concatenate([np.full(E, np.inf), np.ones(H)]))
    obj = np.concatenate([np.zeros(E), np.ones(H)])  # smallest group first
    return obj, cons, integrality, bounds


def _milp_search(g, c, tol, max_candidates, time_limit, progress) -> SingularPoint:
    obj, cons, integrality, bounds = _milp_problem(g, c, tol)
    E = len(g.edges)
    start = time.perf_counter()
    bar = tqdm(total=max_candidates, disable=not progress, desc="singular point: MILP candidates")
    try:
        for n in range(1, max_candidates + 1):
            opts = {}
            if time_limit is not None:
                left = time_limit - (time.perf_counter() - start)
                if left <= 0:
                    break
                opts["time_limit"] = left
            res = milp(obj, constraints=cons, integrality=integrality, bounds=bounds, options=opts)
            bar.update(1)
            if res.status == 2:  # infeasible: proven
                return SingularPoint(False, None, None, float("nan"), n - 1, tol, RESULTS.successful)
            if res.x is None:  # time limit (status 1) or another failure: undecided
                break
            x = np.round(res.x[E:]).astype(bool)
            W = frozenset(v for v, xi in zip(g.hidden, x) if xi)
            resid, q = _cutoff_residual(g, c, W)
            if resid <= tol:
                return SingularPoint(True, W, np.sqrt(q), resid, n, tol, RESULTS.successful)
            cut = np.concatenate([np.zeros(E), np.where(x, -1.0, 1.0)])
            cons.append(LinearConstraint(cut[None], 1 - x.sum(), np.inf))
        else:
            return SingularPoint(
                False,
                None,
                None,
                float("nan"),
                max_candidates,
                tol,
                RESULTS.undecided,
                f"Undecided: {max_candidates} MILP candidates were rejected by the exact LP; "
                "pass a larger max_candidates or a larger tol.",
            )
    finally:
        bar.close()
    return SingularPoint(
        False,
        None,
        None,
        float("nan"),
        n - 1,
        tol,
        RESULTS.undecided,
        f"Undecided: the MILP search stopped at time_limit = {time_limit:g} s (some subset of "
        "hidden nodes has a near-zero sum of c, so the subset-sum pre-check could not decide); "
        "pass a larger time_limit.",
    )


def is_singular_value(graph, c, *, tol: float | None = None, time_limit: float | None = None) -> bool:
    """Whether `H_G(c)` contains a singular point (a point where zero edges cut some group
    of hidden nodes off every input and output). See `singular_point` for the method,
    its cost and the witness. Raises if the search was undecided."""
    sp = singular_point(graph, c, tol=tol, time_limit=time_limit)
    if not sp.success:
        raise RuntimeError(sp.message)
    return sp.found
