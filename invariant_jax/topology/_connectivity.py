"""`connectivity(g, c)`: the connected components of `H_G(c) = {theta : B~ theta^2 = c}`,
the frozen edges that separate them and why each is frozen; with an exact LP cross-check."""

from __future__ import annotations

from collections.abc import Mapping

import equinox as eqx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Float
from scipy.optimize import linprog

from .._results import RESULTS
from ..graph import DAG
from ..invariants import as_conserved, conserved_tol
from ..network import DAGNetwork
from ._closure import exact_scale
from ._components import edge_weights_of, network_c_and_tol
from ._conditions import BalanceCondition, evaluate, regions

__all__ = ["Connectivity", "connectivity", "lp_min_q", "LP_MODES"]

LP_MODES = ("candidates", "all", "none")


class Connectivity(eqx.Module):
    """The topology of `H_G(c)`, as returned by `connectivity`.

    **Fields:**

    - `graph`: the `DAG`; `c`: the conserved values (float64, `graph.hidden` order);
        `tol`: the tolerance used (sums within `tol` of 0 count as 0: not frozen).
    - `connected`: whether `H_G(c)` is connected (no frozen edge).
    - `n_components`: `2 ** len(frozen_edges)`, a Python int.
    - `frozen_edges`, `frozen_index`: the frozen edges (labels) and their positions in
        `graph.edges`.
    - `conditions`: every balance condition (one per out-bottleneck and per
        in-bottleneck), each a `BalanceCondition` with the extremal closed set `S`,
        `sum_S c` and whether it is violated. `reasons` keeps the violated ones.
    - `margin`: per edge, the combinatorial `min theta_e^2` over `H_G(c)` (0 when not
        frozen), shape `(E,)`.
    - `lp_min_q`: per edge, the LP value `min q_e` over `{q >= 0 : B~ q = c}`
        (HiGHS), `nan` where not solved. `lp_frozen_edges`: edges with `lp_min_q > tol`.
    - `result`: `RESULTS.successful` when the two verdicts agree (or the LP was skipped),
        else `RESULTS.lp_disagrees`; `message` then names the edges and values.
    """

    c: Float[np.ndarray, " H"]
    margin: Float[np.ndarray, " E"]
    lp_min_q: Float[np.ndarray, " E"]
    graph: DAG = eqx.field(static=True)
    tol: float = eqx.field(static=True)
    connected: bool = eqx.field(static=True)
    n_components: int = eqx.field(static=True)
    frozen_edges: tuple = eqx.field(static=True)
    frozen_index: tuple = eqx.field(static=True)
    conditions: tuple = eqx.field(static=True)
    lp_frozen_edges: tuple | None = eqx.field(static=True)
    result: RESULTS
    message: str = eqx.field(static=True, default="")

    @property
    def success(self) -> bool:
        """Whether the verdict is certain: the LP agrees (or was skipped)."""
        return bool(self.result == RESULTS.successful)

    @property
    def reasons(self) -> tuple[BalanceCondition, ...]:
        """The violated balance conditions: why each frozen edge is frozen."""
        return tuple(cd for cd in self.conditions if cd.violated)

    @property
    def lp_agrees(self) -> bool | None:
        """Whether the LP verdict equals the combinatorial one (`None` if LP skipped)."""
        if self.lp_frozen_edges is None:
            return None
        checked = set(np.flatnonzero(~np.isnan(self.lp_min_q)).tolist())
        return {k for k in self.frozen_index if k in checked} == {
            self.graph.edges.index(e) for e in self.lp_frozen_edges
        }

    def explain(self) -> str:
        """A plain-words account of the verdict, one line per bottleneck condition."""
        g = self.graph
        lines = [
            f"H_G(c) for {g!r}: "
            + (
                "connected (1 component)."
                if self.connected
                else f"{self.n_components} connected components ({len(self.frozen_edges)} frozen "
                f"edge{'s' if len(self.frozen_edges) != 1 else ''}: each keeps its sign for ever)."
            )
        ]
        if not self.conditions:
            lines.append(
                "The graph has no bottleneck (every hidden node has >= 2 incoming and >= 2 "
                "outgoing edges), so no edge can be frozen, whatever c."
            )
        for cd in self.conditions:
            lines.append("  - " + cd.explain())
        if self.lp_frozen_edges is not None:
            n = int(np.sum(~np.isnan(self.lp_min_q)))
            lines.append(
                f"LP check (HiGHS, min theta_e^2 over H_G(c) for {n} edges): "
                + ("agrees." if self.lp_agrees else f"DISAGREES. {self.message}")
            )
        lines.append(f"Sums within tol = {self.tol:.3g} of 0 count as 0 (boundary: not frozen).")
        return "\n".join(lines)


def lp_min_q(graph: DAG, c, edges=None) -> np.ndarray:
    """Exact LP: for each edge index in `edges` (default all), `min q_e` over
    `{q >= 0 : B~ q = c}`, with `scipy.optimize.linprog` (HiGHS). `c` is scaled to
    `max |c| = 1` first; the result is in the units of `c`. Other entries are `nan`.

    The LPs of the different edges are independent, so they are solved as one
    block-diagonal LP (one HiGHS call): its optimum is the sum of theirs and each
    block of its solution is optimal for its own edge.
    """
    g = graph
    c = as_conserved(g, c)
    B = g.incidence()
    H, E = B.shape
    out = np.full(E, np.nan)
    idx = list(range(E)) if edges is None else [int(k) for k in edges]
    if not idx:
        return out
    s = float(np.max(np.abs(c), initial=0.0))
    if s == 0.0 or H == 0:
        out[idx] = 0.0
        return out
    n = len(idx)
    r, k = np.nonzero(B)
    A = sp.csr_matrix(
        (
            np.tile(B[r, k], n),
            (np.concatenate([r + i * H for i in range(n)]), np.concatenate([k + i * E for i in range(n)])),
        ),
        shape=(n * H, n * E),
    )  # block-diagonal: n copies of B~
    obj = np.zeros(n * E)
    obj[np.arange(n) * E + np.asarray(idx)] = 1.0
    res = linprog(obj, A_eq=A, b_eq=np.tile(c / s, n), bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - P(c) is never empty (see docs/topology.md)
        raise RuntimeError(f"HiGHS failed on the frozen-edge LP: {res.message}")
    q = res.x.reshape(n, E)
    out[idx] = np.maximum(q[np.arange(n), idx], 0.0) * s
    return out


def _resolve(graph, c, tol):
    if isinstance(graph, DAGNetwork):
        net = graph
        if net.weights.ndim != 2:
            raise ValueError(
                "connectivity takes one network; index or loop over a batch (or use ij.frozen_mask for many c at once)."
            )
        if c is not None:
            raise TypeError("Pass either a network, or a graph and c; not a network and c.")
        g, th, eps = edge_weights_of(net)
        cv, auto_tol = network_c_and_tol(g, th, eps)
        cv = as_conserved(g, cv)
        if tol is None:
            tol = float(auto_tol)
        return g, cv, conserved_tol(tol, cv)
    if not isinstance(graph, DAG):
        raise TypeError(f"connectivity needs a DAG (and c) or a DAGNetwork; got {type(graph).__name__}.")
    if c is None:
        raise TypeError(
            "connectivity(g, c): give the conserved values c (array in g.hidden order "
            "or a {label: value} dict), or pass a DAGNetwork instead of g."
        )
    cv = as_conserved(graph, c)
    return graph, cv, conserved_tol(tol, cv)


def connectivity(
    graph: DAG | DAGNetwork,
    c: Float[np.ndarray, " H"] | Mapping | None = None,
    *,
    tol: float | None = None,
    lp: str = "candidates",
) -> Connectivity:
    """The connected components of `H_G(c) = {theta : B~ theta^2 = c}`.

    An edge is frozen when `theta_e^2 > 0` on all of `H_G(c)`; then `H_G(c)` has
    `2 ** (number of frozen edges)` components. Frozen edges are found combinatorially:
    only the unique out-edge of an out-bottleneck or the unique in-edge of an
    in-bottleneck can be frozen, and the balance condition on sums of `c` over closed
    sets of pure ancestors / pure descendants decides which are (one exact min cut per
    bottleneck, networkx). The LP verdict minimises `q_e` over
    `{q >= 0 : B~ q = c}` with HiGHS and must agree.

    **Arguments:**

    - `graph`: a `DAG` (then pass `c`) or a `DAGNetwork` (then `c` is its
        `conserved_quantities`, in float64).
    - `c`: conserved values, an array ordered as `g.hidden` or a dict
        `{hidden label: value}` naming every hidden node.
    - `tol`: a sum `s` counts as 0 when `|s| <= tol` (a boundary value: not frozen).
        Default: `1e-10 * sum_v |c_v|` for a given `c`; for a network,
        `max(1e-10, 64 eps) * H * conservation_scale(net)`, which covers rounding in
        `theta^2` even when `c` itself is near 0.
    - `lp`: `"candidates"` (LP on bottleneck edges, the default), `"all"` (every edge;
        also confirms that no other edge is frozen) or `"none"`.

    **Returns:** a `Connectivity`.
    """
    if lp not in LP_MODES:
        raise ValueError(f"lp must be one of {list(LP_MODES)}; got {lp!r}.")
    g, cv, tol = _resolve(graph, c, tol)
    ints, D = exact_scale(cv)
    cint = dict(zip(g.hidden, ints))
    conds = tuple(evaluate(g, r, cint, D, tol) for r in regions(g))
    E = len(g.edges)
    margin = np.zeros(E)
    for cd in conds:
        margin[cd.edge_index] = max(margin[cd.edge_index], cd.margin)
    frozen = tuple(sorted({cd.edge_index for cd in conds if cd.violated}))
    lpq = np.full(E, np.nan)
    lp_frozen = None
    message = ""
    if lp != "none":
        cand = sorted({cd.edge_index for cd in conds}) if lp == "candidates" else list(range(E))
        lpq = lp_min_q(g, cv, cand)
        lp_idx = [k for k in cand if lpq[k] > tol]
        lp_frozen = tuple(g.edges[k] for k in lp_idx)
        if set(lp_idx) != set(frozen):
            diff = sorted(set(lp_idx) ^ set(frozen))
            message = (
                f"LP and combinatorial verdicts differ on edges {[g.edges[k] for k in diff]}: "
                f"LP min theta_e^2 = {[float(lpq[k]) for k in diff]}, combinatorial "
                f"{[float(margin[k]) for k in diff]}, tol = {tol:.3g}. A margin within the "
                "LP's accuracy (about 1e-9 max|c|) of tol: pass a larger tol."
            )
    return Connectivity(
        c=cv,
        margin=margin,
        lp_min_q=lpq,
        graph=g,
        tol=tol,
        connected=not frozen,
        n_components=2 ** len(frozen),
        frozen_edges=tuple(g.edges[k] for k in frozen),
        frozen_index=frozen,
        conditions=conds,
        lp_frozen_edges=lp_frozen,
        result=RESULTS.lp_disagrees if message else RESULTS.successful,
        message=message,
    )
