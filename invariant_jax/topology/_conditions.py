"""Balance conditions of bottlenecks: the combinatorial criterion for frozen edges.

Edge `e = (v -> w)` is frozen (`q_e > 0` on all of `P(c) = {q >= 0 : B~ q = c}`) iff

- `v` is an out-bottleneck and some `S` with `v in S`, `S` contained in `{v}` plus the
  *pure ancestors* of `v` and closed under successors once `e` is deleted, has
  `sum_S c < 0`; or
- `w` is an in-bottleneck and some `S` with `w in S`, `S` contained in `{w}` plus the
  *pure descendants* of `w` and closed under predecessors once `e` is deleted, has
  `sum_S c > 0`.

Moreover `min_{q in P(c)} q_e = max(0, max over such S of -sum_S c (out) or sum_S c (in))`,
which the LP verdict reproduces. Each extremum is one maximum-weight closure (one min
cut), never an enumeration of subsets.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from ..graph import DAG
from ._closure import max_weight_closure

__all__ = ["BalanceCondition", "Region", "regions", "evaluate"]


@dataclasses.dataclass(frozen=True)
class Region:
    """Graph-only data of one balance condition (independent of `c`)."""

    edge_index: int
    edge: tuple
    side: str  # "out": v is an out-bottleneck; "in": w is an in-bottleneck
    bottleneck: Hashable
    nodes: tuple  # the bottleneck first, then its pure ancestors/descendants
    requires: tuple  # closure pairs (x, y): x in S implies y in S


@dataclasses.dataclass(frozen=True)
class BalanceCondition:
    """One balance condition, evaluated at a given `c`.

    **Fields:** `edge`, `edge_index`, `side` (`"out"` or `"in"`), `bottleneck` (the node),
    `region` (the bottleneck and its pure ancestors (`out`) or pure descendants (`in`)),
    `subset` (the extremal closed set `S`), `total` (`sum_S c`, a float; `exact` holds the
    exact rational), `violated` (whether it freezes the edge), `tol`.
    """

    edge: tuple
    edge_index: int
    side: str
    bottleneck: Hashable
    region: frozenset
    subset: frozenset
    total: float
    exact: Fraction
    violated: bool
    tol: float

    @property
    def required(self) -> str:
        """The inequality the balance condition requires of every closed `S`."""
        return "sum_S c >= 0" if self.side == "out" else "sum_S c <= 0"

    @property
    def inequality(self) -> str:
        """The inequality the extremal `S` satisfies (the violated one when `violated`)."""
        bad = -self.total if self.side == "out" else self.total
        if not self.violated and bad > 0:
            return f"sum_S c = {self.total:.6g}, within tol = {self.tol:.3g} of 0 (a boundary value)"
        if self.side == "out":
            return f"sum_S c = {self.total:.6g} {'<' if self.violated else '>='} 0"
        return f"sum_S c = {self.total:.6g} {'>' if self.violated else '<='} 0"

    @property
    def margin(self) -> float:
        """`max(0, -sum_S c)` (out) or `max(0, sum_S c)` (in): the smallest `q_e = theta_e^2`
        on `H_G(c)` that this condition forces."""
        v = -self.total if self.side == "out" else self.total
        return max(0.0, v)

    def explain(self) -> str:
        kind = "out-bottleneck" if self.side == "out" else "in-bottleneck"
        fam = "pure ancestors" if self.side == "out" else "pure descendants"
        S = sorted(map(str, self.subset))
        others = sorted(map(str, self.region - {self.bottleneck}))
        listed = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
        head = (
            f"edge {self.edge[0]!s} -> {self.edge[1]!s}: {self.bottleneck!s} is an {kind} ({fam}: {listed or 'none'}); "
        )
        if self.violated:
            verb = "supply" if self.side == "out" else "absorb"
            return head + (
                f"S = {{{', '.join(S)}}} has {self.inequality}, violating "
                f"{self.required}: the nodes of S must {verb} through this edge alone, so "
                f"theta_e^2 >= {self.margin:.6g} and its sign can never change (frozen)."
            )
        if self.margin > 0:
            return head + (
                f"S = {{{', '.join(S)}}} has {self.inequality}: not frozen; where "
                "theta_e = 0 every other boundary edge of S is 0 too, so S is cut off "
                "and H_G(c) contains a singular point."
            )
        return head + (
            f"the balance condition {self.required} holds for every closed S "
            f"(S = {{{', '.join(S)}}} has {self.inequality}): the edge is free to change sign."
        )


def _augmented(g: DAG, side: str) -> sp.csr_matrix:
    """The adjacency matrix with one extra node `n` joined to every output (`out`: edges
    reversed, so a search from `n` finds the nodes that reach an output) or from every
    input (`in`)."""
    n = g.n_nodes
    rows, cols = g.edge_index
    ends = [g.index[y] for y in (g.outputs if side == "out" else g.inputs)]
    if side == "out":
        r, c = np.concatenate([cols, np.full(len(ends), n)]), np.concatenate([rows, ends])
    else:
        r, c = np.concatenate([rows, np.full(len(ends), n)]), np.concatenate([cols, ends])
    return sp.csr_matrix((np.ones(len(r), dtype=np.int8), (r, c)), shape=(n + 1, n + 1))


def _pure(M: sp.csr_matrix, g: DAG, v, side: str) -> list:
    """Hidden nodes all of whose paths to the outputs (`out`) or from the inputs (`in`)
    pass through `v`: those the search from the extra node misses once `v` is removed.
    One breadth-first search (SciPy, linear time)."""
    iv = g.index[v]
    keep = np.ones(M.shape[0])
    keep[iv] = 0
    D = sp.diags(keep)
    seen = np.zeros(M.shape[0], dtype=bool)
    seen[breadth_first_order(D @ M @ D, M.shape[0] - 1, directed=True, return_predecessors=False)] = True
    cand = g.ancestors(v) if side == "out" else g.descendants(v)
    return [x for x in g.hidden if x in cand and not seen[g.index[x]]]


@functools.lru_cache(maxsize=32)
def regions(g: DAG) -> tuple[Region, ...]:
    """The balance conditions of `g` (graph only): one per out-bottleneck and one per
    in-bottleneck, in edge order. Cached per graph (a `DAG` is immutable)."""
    out: list[Region] = []
    if g.out_bottlenecks:
        M = _augmented(g, "out")
    for v in g.out_bottlenecks:
        (k,) = g.out_edges(v)
        nodes = [v] + _pure(M, g, v, "out")
        ns = set(nodes)
        req = tuple((x, y) for x in nodes for y in g.successors(x) if y in ns and (x, y) != g.edges[k])
        out.append(Region(k, g.edges[k], "out", v, tuple(nodes), req))
    if g.in_bottlenecks:
        M = _augmented(g, "in")
    for w in g.in_bottlenecks:
        (k,) = g.in_edges(w)
        nodes = [w] + _pure(M, g, w, "in")
        ns = set(nodes)
        req = tuple((x, y) for x in nodes for y in g.predecessors(x) if y in ns and (y, x) != g.edges[k])
        out.append(Region(k, g.edges[k], "in", w, tuple(nodes), req))
    return tuple(sorted(out, key=lambda r: (r.edge_index, r.side != "out")))


def evaluate(g: DAG, r: Region, cint: dict, D: int, tol: float) -> BalanceCondition:
    """Evaluate one condition at exact integer values `cint` (c = cint / D)."""
    sign = -1 if r.side == "out" else 1  # maximise -sum (out) or +sum (in)
    weight = {x: sign * cint[x] for x in r.nodes}
    best, S = max_weight_closure(r.nodes, weight, r.requires)
    if not S:  # the optimum is the empty set; {bottleneck} is closed too: report it
        S = frozenset([r.bottleneck])
    total = Fraction(sum(cint[x] for x in S), D)
    violated = Fraction(best, D) > Fraction(tol)
    return BalanceCondition(
        edge=r.edge,
        edge_index=r.edge_index,
        side=r.side,
        bottleneck=r.bottleneck,
        region=frozenset(r.nodes),
        subset=S,
        total=float(total),
        exact=total,
        violated=bool(violated),
        tol=tol,
    )
