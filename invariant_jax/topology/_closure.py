"""Exact extremal closed sets by one minimum cut (networkx), on integer weights.

A set `S` of nodes is *closed* under a list of requirements `x -> y` when `x in S`
implies `y in S`. The maximum of `sum_S w` over closed sets is the classical
maximum-weight-closure problem (Picard 1976): with a source `s -> x` of capacity `w_x`
for `w_x > 0`, `x -> t` of capacity `-w_x` for `w_x < 0` and an infinite arc `x -> y`
per requirement, the best value is `sum(w_x > 0) - mincut`, and the source side of the
minimum cut is an optimal set.

Floats are turned into exact integers first (every float64 is a dyadic rational, so one
power of two makes all of them integers) so that the cut, the optimum and the
comparison with a tolerance are exact.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction

import networkx as nx

__all__ = ["exact_scale", "max_weight_closure", "closed_sets"]


class _Terminal:
    def __init__(self, name):
        self.name = name

    def __repr__(self):  # pragma: no cover
        return self.name


def exact_scale(values: Sequence[float]) -> tuple[list[int], int]:
    """Integers `n_i` and a power of two `D` with `values[i] == n_i / D` exactly."""
    fr = [Fraction(float(x)) for x in values]
    D = max((f.denominator for f in fr), default=1)  # all denominators are powers of 2
    return [int(f * D) for f in fr], D


def max_weight_closure(
    nodes: Sequence[Hashable],
    weight: dict,
    requires: Iterable[tuple[Hashable, Hashable]],
) -> tuple[int, frozenset]:
    """The maximum of `sum_{x in S} weight[x]` over sets `S` of `nodes` closed under
    `requires` (pairs `(x, y)`: `x in S` implies `y in S`), and a smallest optimal `S`.
    Weights must be Python integers (exact); the empty set (value 0) is allowed."""
    s, t = _Terminal("s"), _Terminal("t")
    G = nx.DiGraph()
    G.add_node(s)
    G.add_node(t)
    G.add_nodes_from(nodes)
    positive = 0
    for x in nodes:
        w = weight[x]
        if w > 0:
            G.add_edge(s, x, capacity=w)
            positive += w
        elif w < 0:
            G.add_edge(x, t, capacity=-w)
    for x, y in requires:
        G.add_edge(x, y)  # no capacity attribute: infinite
    if positive == 0:
        return 0, frozenset()
    cut, (source_side, _) = nx.minimum_cut(G, s, t)
    S = frozenset(source_side) - {s}
    value = sum(weight[x] for x in S)
    if value != positive - cut:  # pragma: no cover - exact integers
        raise RuntimeError("min-cut closure value mismatch")
    return value, S


def closed_sets(
    nodes: Sequence[Hashable], requires: Iterable[tuple[Hashable, Hashable]], limit: int
) -> list[frozenset] | None:
    """All closed subsets of `nodes` (including the empty set), or `None` when there are
    more than `limit`. Used by the batched path for small families.

    Nodes are decided in an order where every required node comes first (requirements
    follow DAG edges, so they are acyclic): leaving a node out is always allowed, and
    taking it is allowed iff everything it requires is taken. No branch dead-ends, so the
    cost is `O(limit * len(nodes))` whatever the region's size."""
    req: dict = {x: set() for x in nodes}
    for x, y in requires:
        req[x].add(y)
    order = _required_first(list(nodes), req)
    out: list[frozenset] = []
    stack: list[tuple[int, frozenset]] = [(0, frozenset())]
    while stack:
        i, chosen = stack.pop()
        if i == len(order):
            out.append(chosen)
            if len(out) > limit:
                return None
            continue
        x = order[i]
        if req[x] <= chosen:
            stack.append((i + 1, chosen | {x}))
        stack.append((i + 1, chosen))
    return out


def _required_first(nodes: list, req: dict) -> list:
    """A topological order of `nodes` in which each node follows everything it requires."""
    indeg = {x: len(req[x]) for x in nodes}
    users: dict = {x: [] for x in nodes}
    for x in nodes:
        for y in req[x]:
            users[y].append(x)
    ready = [x for x in nodes if indeg[x] == 0]
    order = []
    while ready:
        y = ready.pop()
        order.append(y)
        for x in users[y]:
            indeg[x] -= 1
            if indeg[x] == 0:
                ready.append(x)
    if len(order) != len(nodes):  # pragma: no cover - requirements follow DAG edges
        raise RuntimeError("cyclic closure requirements; please report.")
    return order
