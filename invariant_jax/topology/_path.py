"""`invariant_path(net_a, net_b)`: a path of networks inside `H_G(c)` from `a` to `b`.

In `q = theta^2` space, `P(c) = {q >= 0 : B~ q = c}` is a convex polyhedron, and
`theta = s * sqrt(q)` with a sign vector `s`. A straight segment between two points of
`P(c)` stays in `P(c)`; along it `theta(t) = s * sqrt(q(t))` is continuous and exactly on
`H_G(c)` (up to the rounding of `sqrt` and of the convex combination). The sign of an
edge can change only where `q_e = 0`, so the path goes `q_a -> q* -> q_b`, with `q*` a
point of `P(c)` where every edge that must change sign is 0 (the `L1`-nearest such point
to `q_a`, one LP). When no single such point exists it visits one point per edge
(greedily grouping edges that can be 0 together; each non-frozen edge has
`min q_e = 0` over `P(c)`). A frozen edge has `q_e > 0` on all of
`P(c)`: if its signs differ, the networks are in different components and the violated
balance condition is the certificate.
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Float
from scipy.optimize import linprog

from .._checks import check_positive
from .._results import RESULTS
from ..graph import DAG
from ..network import DAGNetwork
from ._components import same_component
from ._conditions import BalanceCondition
from ._connectivity import connectivity

__all__ = ["InvariantPath", "invariant_path", "polish_onto"]

_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


class InvariantPath(eqx.Module):
    """A path inside `H_G(c)`, from `invariant_path`.

    **Fields:**

    - `thetas`: `(n, E)` edge weights, `thetas[0]` is `net_a`'s and `thetas[-1]` is
        `net_b`'s (empty `(0, E)` when the networks are in different components).
    - `waypoints`: `(k, E)` the points `q = theta^2` of `P(c)` the path turns at
        (`q_a`, the sign-change points, `q_b`).
    - `flips`: per waypoint, the edges whose sign changes there (where `q_e = 0`).
    - `residual`: `(n,)` `max_v |B~ theta^2 - c|_v / conservation_scale`, with `c` that
        of `net_a`.
    - `max_step`: the largest `||theta_{i+1} - theta_i||`.
    - `c`, `graph`; `certificate`: the violated `BalanceCondition`s of the frozen edges
        whose signs differ (empty when the path exists); `result`, `message`.

    `networks(net)` returns the path as one batched `DAGNetwork`.
    """

    thetas: Float[np.ndarray, "n E"]
    waypoints: Float[np.ndarray, "k E"]
    residual: Float[np.ndarray, " n"]
    c: Float[np.ndarray, " H"]
    max_step: float = eqx.field(static=True)
    flips: tuple = eqx.field(static=True)
    graph: DAG = eqx.field(static=True)
    certificate: tuple = eqx.field(static=True)
    result: RESULTS
    message: str = eqx.field(static=True, default="")

    @property
    def success(self) -> bool:
        return bool(self.result == RESULTS.successful)

    def __len__(self) -> int:
        return self.thetas.shape[0]

    def networks(self, net: DAGNetwork) -> DAGNetwork:
        """The path as a batched `DAGNetwork` (leading axis: the points), with `net`'s
        graph and activation."""
        return net.with_edge_weights(self.thetas)


def polish_onto(B: np.ndarray, c: np.ndarray, q: np.ndarray, zero=()) -> np.ndarray:
    """Move an approximate point `q >= 0` of `{B~ q = c}` (an LP solution, accurate to
    the solver's tolerance) onto it to round-off, keeping `q >= 0` and `q[zero] = 0`:
    a minimum-norm correction supported on the positive entries, repeated if an entry
    turns negative."""
    q = np.maximum(np.asarray(q, dtype=np.float64), 0.0)
    q[list(zero)] = 0.0
    for _ in range(10):
        S = np.flatnonzero(q > 0)
        r = c - B @ q
        if S.size:
            q[S] += np.linalg.lstsq(B[:, S], r, rcond=None)[0]
        if np.all(q >= 0):
            break
        q = np.maximum(q, 0.0)
    return q


def _nearest_zero(B, c, q_ref, zero):
    """The point of `P(c)` with `q[zero] = 0` nearest to `q_ref` in L1 (an LP), or None."""
    H, E = B.shape
    s = max(float(np.max(np.abs(q_ref), initial=0.0)), float(np.max(np.abs(c), initial=0.0)), 1e-300)
    # variables [q, u]: minimise sum u, u >= |q - q_ref|
    I = np.eye(E)
    A_ub = np.block([[I, -I], [-I, -I]])
    b_ub = np.concatenate([q_ref, -q_ref]) / s
    A_eq = np.hstack([B, np.zeros((H, E))])
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * (2 * E)
    for k in zero:
        bounds[k] = (0.0, 0.0)
    res = linprog(
        np.concatenate([np.zeros(E), np.ones(E)]),
        A_ub=A_ub,
        b_ub=b_ub,
        A_eq=A_eq,
        b_eq=c / s,
        bounds=bounds,
        method="highs",
        options=_HIGHS,
    )
    if res.status != 0:
        return None
    return polish_onto(B, c, res.x[:E] * s, zero)


def _feasible_zero(B, c, zero) -> bool:
    """Whether some `q` in `P(c)` has `q[zero] = 0` (an LP feasibility problem)."""
    H, E = B.shape
    s = max(float(np.max(np.abs(c), initial=0.0)), 1e-300)
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * E
    for k in zero:
        bounds[k] = (0.0, 0.0)
    res = linprog(np.zeros(E), A_eq=B, b_eq=c / s, bounds=bounds, method="highs", options=_HIGHS)
    return res.status == 0


def _segment(q0, q1, sign, max_step, max_points):
    """Points `sign * sqrt((1-t) q0 + t q1)` for t in [0, 1], refined by bisection until
    consecutive points are within `max_step`."""
    ts = np.linspace(0.0, 1.0, 9)
    while True:
        th = sign * np.sqrt(np.maximum((1 - ts)[:, None] * q0 + ts[:, None] * q1, 0.0))
        gaps = np.linalg.norm(np.diff(th, axis=0), axis=1)
        far = np.flatnonzero(gaps > max_step)
        if far.size == 0:
            return th
        if ts.size + far.size > max_points:
            raise ValueError(
                f"invariant_path would need more than max_points={max_points} points to keep "
                f"consecutive networks within max_step={max_step:.3g}; pass a larger max_step "
                "or max_points."
            )
        ts = np.sort(np.concatenate([ts, 0.5 * (ts[far] + ts[far + 1])]))


def _waypoints(B, c, qa, qb, flip):
    """Waypoints from q_a to q_b and the edges flipped at each."""
    if not flip:
        return [qa, qb], [(), ()]
    q = _nearest_zero(B, c, qa, flip)
    if q is not None:
        return [qa, q, qb], [(), tuple(flip), ()]
    pts, flips, prev, pending = [qa], [()], qa, list(flip)
    while pending:  # greedily the largest group of edges that can be 0 together, then the rest
        group = [pending[0]]
        for k in pending[1:]:
            if _feasible_zero(B, c, group + [k]):
                group.append(k)
        q = _nearest_zero(B, c, prev, group)
        if q is None:  # pragma: no cover - each non-frozen edge has min q_e = 0 on P(c)
            raise RuntimeError(f"No point of P(c) with q = 0 on edges {group}; please report.")
        pts.append(q)
        flips.append(tuple(group))
        pending = [k for k in pending if k not in group]
        prev = q
    return pts + [qb], flips + [()]


def invariant_path(
    net_a: DAGNetwork,
    net_b: DAGNetwork,
    *,
    max_step: float | None = None,
    max_points: int = 100_000,
    rtol: float = 1e-10,
    tol: float | None = None,
    throw: bool = True,
) -> InvariantPath:
    """A sequence of networks from `net_a` to `net_b`, every one on `H_G(c)`.

    **Arguments:**

    - `net_a`, `net_b`: one network each, on one graph, with equal `c = B~ theta^2`
        (to `rtol * conservation_scale`; else `ValueError` naming the largest difference).
    - `max_step`: the largest allowed `||theta_{i+1} - theta_i||` (Euclidean); default
        `1e-2 * max(||theta_a||, ||theta_b||)`.
    - `max_points`: refuse (ValueError) a path that would need more points.
    - `rtol`: passed to `same_component`; `tol`: the balance-condition tolerance.
    - `throw`: when the networks are in different components, raise `ValueError` with
        the certificate (default), or return an `InvariantPath` with
        `result = RESULTS.different_components`, no points and the `certificate`.

    **Returns:** an `InvariantPath`. Every point satisfies `B~ theta^2 = c(net_a)` to
    round-off relative to `conservation_scale` (the last point is `net_b` itself, off by
    its own `c` difference).
    """
    for name, n in (("net_a", net_a), ("net_b", net_b)):
        if isinstance(n, DAGNetwork) and n.weights.ndim != 2:
            raise ValueError(f"{name} is a batch of networks; invariant_path joins one network to one.")
    cmp = same_component(net_a, net_b, rtol=rtol, tol=tol)
    g = net_a.graph
    B = g.incidence().astype(np.float64)
    tha, thb = np.asarray(net_a.edge_weights(), np.float64), np.asarray(net_b.edge_weights(), np.float64)
    c = cmp.a.c
    E = len(g.edges)
    if not cmp.same:
        return _different(g, c, cmp, tol, throw)
    if max_step is None:
        max_step = 1e-2 * max(float(np.linalg.norm(tha)), float(np.linalg.norm(thb)), 1e-300)
    check_positive("max_step", max_step)
    flip = [k for k in range(E) if tha[k] * thb[k] < 0]
    pts, flips = _waypoints(B, c, tha**2, thb**2, flip)
    sign = np.where(tha != 0, np.sign(tha), np.where(thb != 0, np.sign(thb), 1.0))
    pieces = []
    for i in range(len(pts) - 1):
        for k in flips[i]:
            sign[k] = np.sign(thb[k])
        seg = _segment(pts[i], pts[i + 1], sign, max_step, max_points)
        pieces.append(seg if i == 0 else seg[1:])
    thetas = np.concatenate(pieces)
    thetas[0], thetas[-1] = tha, thb  # exactly the given endpoints
    scale = max(float(np.max(tha**2 @ np.abs(B).T, initial=0.0)), 1e-300)
    residual = np.max(np.abs(thetas**2 @ B.T - c), axis=1, initial=0.0) / scale
    steps = np.linalg.norm(np.diff(thetas, axis=0), axis=1)
    return InvariantPath(
        thetas=thetas,
        waypoints=np.array(pts),
        residual=residual,
        c=c,
        max_step=float(np.max(steps, initial=0.0)),
        flips=tuple(tuple(g.edges[k] for k in f) for f in flips),
        graph=g,
        certificate=(),
        result=RESULTS.successful,
    )


def _different(g, c, cmp, tol, throw) -> InvariantPath:
    conn = connectivity(g, c, tol=float(cmp.a.tol) if tol is None else tol, lp="none")
    idx = set(np.flatnonzero(cmp.differing).tolist())
    cert: tuple[BalanceCondition, ...] = tuple(cd for cd in conn.reasons if cd.edge_index in idx)
    lines = [
        f"edge {g.edges[k][0]!s} -> {g.edges[k][1]!s} is frozen with sign "
        f"{'+' if cmp.a.signs[k] > 0 else '-'} in net_a and {'+' if cmp.b.signs[k] > 0 else '-'} in net_b"
        for k in sorted(idx)
    ]
    msg = (
        "net_a and net_b lie in different components of H_G(c): "
        + "; ".join(lines)
        + ". Why: "
        + " ".join(cd.explain() for cd in cert)
    )
    if throw:
        raise ValueError(msg + " (pass throw=False to get the certificate as data.)")
    E = len(g.edges)
    return InvariantPath(
        thetas=np.zeros((0, E)),
        waypoints=np.zeros((0, E)),
        residual=np.zeros(0),
        c=c,
        max_step=float("nan"),
        flips=(),
        graph=g,
        certificate=cert,
        result=RESULTS.different_components,
        message=msg,
    )
