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
import numpy as np

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


def closed_sets(nodes: Sequence[Hashable], requires: Iterable[tuple[Hashable, Hashable]],
                limit: int) -> list[frozenset] | None:
    """All closed subsets of `nodes` (including the empty set), or `None` when there are
    more than `limit`. Used only by the batched sweep path for tiny regions."""
    req: dict = {x: set() for x in nodes}
    for x, y in requires:
        req[x].add(y)
    order = list(nodes)
    out: list[frozenset] = []

    def rec(i, chosen, excluded):
        # decide nodes in order; prune a choice that already breaks a requirement between
        # decided nodes, and filter the survivors at the end
        if len(out) > limit:
            return
        if i == len(order):
            out.append(frozenset(chosen))
            return
        x = order[i]
        if not any(x in req[z] for z in chosen):  # leave x out
            rec(i + 1, chosen, excluded | {x})
        if not (req[x] & excluded):  # take x
            rec(i + 1, chosen | {x}, excluded)

    rec(0, frozenset(), frozenset())
    if len(out) > limit:
        return None
    return [S for S in out if all(req[x] <= S for x in S)]


def _as_array(sets: list[frozenset], index: dict, n: int) -> np.ndarray:
    M = np.zeros((len(sets), n))
    for i, S in enumerate(sets):
        for x in S:
            M[i, index[x]] = 1.0
    return M
