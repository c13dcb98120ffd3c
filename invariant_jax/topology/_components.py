"""Which connected component of `H_G(c)` a network lies in, and whether two networks
share one: the signs of the frozen edges, batched over many networks.

`H_G(c)` has `2 ** F` components for `F` frozen edges (edges with `theta_e^2 > 0` on
all of `H_G(c)`), and a component is fixed by the sign of `theta_e` on every frozen
edge. So the component of a network is that sign vector, with the edges named.
"""

from __future__ import annotations

import functools

import equinox as eqx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Bool, Float, Int

from .._checks import check_positive
from .._results import RESULTS
from ..graph import DAG
from ..network import DAGNetwork
from ._batch import check_tol, frozen_mask

__all__ = ["Component", "ComponentComparison", "component_of", "same_component", "edge_weights_of", "network_c_and_tol"]


def edge_weights_of(obj, theta=None) -> tuple[DAG, np.ndarray, float]:
    """The graph, the float64 edge weights `(..., E)` and the machine epsilon of the
    weights' own dtype, from a `DAGNetwork` (any batch shape) or a `DAG` and `theta`
    (e.g. a sweep's `theta0` / `theta_final` records)."""
    if isinstance(obj, DAGNetwork):
        if theta is not None:
            raise TypeError("Pass either a network, or a graph and theta; not a network and theta.")
        th = np.asarray(obj.edge_weights())
        g = obj.graph
    elif isinstance(obj, DAG):
        if theta is None:
            raise TypeError(
                "Give the edge weights theta (shape (..., E), graph.edges order) with a DAG, or pass a DAGNetwork."
            )
        th = np.asarray(theta)
        g = obj
    else:
        raise TypeError(f"Expected a DAGNetwork, or a DAG and theta; got {type(obj).__name__}.")
    if not np.issubdtype(th.dtype, np.floating):
        th = th.astype(np.float64)
    eps = float(np.finfo(th.dtype).eps)
    E = len(g.edges)
    if th.ndim == 0 or th.shape[-1] != E:
        raise ValueError(f"theta has shape {th.shape}; expected (..., {E}), one weight per edge in graph.edges order.")
    bad = ~np.isfinite(th)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"theta{list(idx)} (edge {g.edges[idx[-1]]!r}) is not finite; the component of a "
            "network needs finite weights."
        )
    return g, th.astype(np.float64), eps


@functools.lru_cache(maxsize=32)
def _sparse_incidence(g: DAG) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """`B~^T` and `|B~|^T` as sparse `(E, H)` matrices (two entries per hidden-hidden edge)."""
    hid = {v: i for i, v in enumerate(g.hidden)}
    r, c, val = [], [], []
    for k, (u, v) in enumerate(g.edges):
        if v in hid:
            r.append(k)
            c.append(hid[v])
            val.append(1.0)
        if u in hid:
            r.append(k)
            c.append(hid[u])
            val.append(-1.0)
    Bt = sp.csr_matrix((val, (r, c)), shape=(len(g.edges), len(hid)))
    return Bt, abs(Bt)


def network_c_and_tol(g: DAG, th: np.ndarray, eps: float):
    """`c = B~ theta^2` `(..., H)` and the default balance tolerance of a network,
    `max(1e-10, 64 eps) * H * conservation_scale`, per network (sparse: linear in `E`)."""
    Bt, absBt = _sparse_incidence(g)
    q = th**2
    flat = q.reshape(-1, q.shape[-1])
    c = np.asarray(flat @ Bt).reshape(q.shape[:-1] + (Bt.shape[1],))
    scale = np.max(np.asarray(flat @ absBt), axis=-1, initial=0.0).reshape(q.shape[:-1])
    tol = max(1e-10, 64 * eps) * np.maximum(scale * len(g.hidden), 1e-290)
    return c, tol


class Component(eqx.Module):
    """The component of `H_G(c)` that a network (or each of a batch) lies in, from
    `component_of`.

    **Fields** (leading axes `...` are the batch shape, `()` for one network):

    - `c`: `(..., H)` conserved values, `graph.hidden` order; `tol`: `(...)` the
        tolerance used for the balance conditions (as `connectivity` for a network).
    - `frozen`: `(..., E)` bool, the frozen edges of `H_G(c)`.
    - `signs`: `(..., E)` int8, `sign(theta_e)` on frozen edges and 0 elsewhere: this
        vector *is* the component.
    - `graph`: the `DAG`; `result`: `RESULTS.successful`.

    **Properties:** `n_components`, `connected`, `labels` (a string per network naming
    each frozen edge and its sign, e.g. `"k->y:+"`, or `"connected"`), and for one
    network `label`, `frozen_edges` and `frozen_signs`.
    """

    c: Float[np.ndarray, "... H"]
    tol: Float[np.ndarray, "..."]
    frozen: Bool[np.ndarray, "... E"]
    signs: Int[np.ndarray, "... E"]
    graph: DAG = eqx.field(static=True)
    result: RESULTS

    @property
    def success(self) -> bool:
        return bool(self.result == RESULTS.successful)

    @property
    def shape(self) -> tuple:
        """The batch shape (`()` for one network)."""
        return self.c.shape[:-1]

    @property
    def n_components(self):
        """`2 ** (number of frozen edges)`, per network."""
        return 2 ** self.frozen.sum(-1)

    @property
    def connected(self):
        return ~self.frozen.any(-1)

    @property
    def labels(self) -> np.ndarray:
        """The component label of each network as a string array of the batch shape."""
        flat_f = self.frozen.reshape(-1, self.frozen.shape[-1])
        flat_s = self.signs.reshape(flat_f.shape)
        names = [f"{u!s}->{v!s}" for u, v in self.graph.edges]
        out = np.array([_label(names, f, s) for f, s in zip(flat_f, flat_s)], dtype=object)
        return out.reshape(self.shape)

    def _one(self, what: str):
        if self.shape != ():
            raise ValueError(
                f"{what} is defined for one network; this Component holds a batch of shape "
                f"{self.shape}: use .labels / .frozen / .signs, or index it with [i]."
            )

    @property
    def label(self) -> str:
        self._one("label")
        return str(self.labels[()])

    @property
    def frozen_edges(self) -> tuple:
        self._one("frozen_edges")
        return tuple(e for e, f in zip(self.graph.edges, self.frozen) if f)

    @property
    def frozen_signs(self) -> dict:
        """`{edge: +1 or -1}` over the frozen edges (one network)."""
        self._one("frozen_signs")
        return {e: int(s) for e, f, s in zip(self.graph.edges, self.frozen, self.signs) if f}

    def __getitem__(self, i) -> Component:
        return Component(
            c=self.c[i],
            tol=self.tol[i],
            frozen=self.frozen[i],
            signs=self.signs[i],
            graph=self.graph,
            result=self.result,
        )

    def __len__(self) -> int:
        if self.shape == ():
            raise TypeError("A Component of one network has no len().")
        return self.shape[0]


def _label(names, frozen, signs) -> str:
    parts = [f"{n}:{'+' if s > 0 else '-'}" for n, f, s in zip(names, frozen, signs) if f]
    return " ".join(parts) if parts else "connected"


def component_of(net: DAGNetwork | DAG, theta=None, *, tol=None) -> Component:
    """The connected component of `H_G(c(net))` that `net` lies in: the signs of its
    frozen edges, which gradient flow can never change.

    Works on one network or a batch (leading axes of `net.weights`, or of `theta`):
    the frozen edges of all rows come from one vectorised `frozen_mask` call, so a
    sweep's 10^5 records take one matrix product on layered graphs.

    **Arguments:**

    - `net`: a `DAGNetwork` (any batch shape), or a `DAG` with `theta`.
    - `theta`: edge weights `(..., E)` in `graph.edges` order, with a `DAG` (e.g. a
        sweep's `theta0` or `theta_final` records).
    - `tol`: as in `connectivity` (sums within `tol` of 0 count as 0: not frozen);
        default per network `max(1e-10, 64 eps) * H * conservation_scale`.

    **Returns:** a `Component` (`.label`, `.frozen_edges`, `.frozen_signs` for one
    network; `.labels`, `.frozen`, `.signs` for a batch).
    """
    g, th, eps = edge_weights_of(net, theta)
    c, auto_tol = network_c_and_tol(g, th, eps)
    batch = th.shape[:-1]
    if tol is not None:
        check_tol(tol)
        auto_tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), batch)
    H, E = len(g.hidden), len(g.edges)
    frozen = frozen_mask(g, c.reshape(-1, H), tol=np.reshape(auto_tol, -1)).reshape(batch + (E,))
    signs = np.where(frozen, np.sign(th), 0).astype(np.int8)
    return Component(
        c=c, tol=np.asarray(auto_tol, dtype=np.float64), frozen=frozen, signs=signs, graph=g, result=RESULTS.successful
    )


class ComponentComparison(eqx.Module):
    """Whether two networks (or two batches, row by row) lie in the same component of
    `H_G(c)`, from `same_component`.

    **Fields:** `same` (bool, batch shape), `a`, `b` (their `Component`s, both on the
    frozen edges of `c(a)`), `differing` (`(..., E)` bool: frozen edges whose signs
    differ), `max_c_difference` (`max_v |c_a - c_b|`, per pair), `result`.
    For one pair, `bool(comparison)` is `same` and `differing_edges` names the edges.
    """

    same: Bool[np.ndarray, "..."]
    differing: Bool[np.ndarray, "... E"]
    max_c_difference: Float[np.ndarray, "..."]
    a: Component
    b: Component
    result: RESULTS

    @property
    def success(self) -> bool:
        return bool(self.result == RESULTS.successful)

    @property
    def differing_edges(self) -> tuple:
        self.a._one("differing_edges")
        return tuple(e for e, d in zip(self.a.graph.edges, self.differing) if d)

    def __bool__(self) -> bool:
        self.a._one("bool(comparison)")
        return bool(self.same)


def same_component(net_a, net_b, *, rtol: float = 1e-8, tol=None) -> ComponentComparison:
    """Whether `net_a` and `net_b` lie in the same connected component of `H_G(c)`.

    Both must be on the same graph and have the same `c = B~ theta^2` up to
    `rtol * conservation_scale` (e.g. an initialization and the end of its gradient
    flow, whose `c` drifts by the solver tolerance); otherwise a `ValueError` names
    the hidden node with the largest difference. The frozen edges are those of
    `H_G(c(net_a))`; the two are in the same component iff every frozen edge has the
    same sign in both.

    **Arguments:**

    - `net_a`, `net_b`: `DAGNetwork`s of one graph, one network each or batches of
        one shape (compared row by row).
    - `rtol`: how far apart `c` may be, relative to the larger conservation scale
        `max_v (sum in^2 + sum out^2)`.
    - `tol`: the balance-condition tolerance, as in `component_of`.

    **Returns:** a `ComponentComparison` (truthy for one pair in one component).
    """
    if not (isinstance(net_a, DAGNetwork) and isinstance(net_b, DAGNetwork)):
        raise TypeError(
            f"same_component compares two DAGNetworks; got {type(net_a).__name__} and {type(net_b).__name__}."
        )
    if net_a.graph != net_b.graph:
        raise ValueError(
            f"The networks are on different graphs ({net_a.graph!r} and {net_b.graph!r}); "
            "components of H_G(c) are compared on one graph."
        )
    check_positive("rtol", rtol)
    g, tha, eps = edge_weights_of(net_a)
    _, thb, _ = edge_weights_of(net_b)
    if tha.shape != thb.shape:
        raise ValueError(
            f"The batches have shapes {tha.shape[:-1]} and {thb.shape[:-1]}; compare one network "
            "with one, or two batches of one shape."
        )
    a = component_of(g, tha, tol=tol)
    B = g.incidence()
    cb = thb**2 @ B.T
    scale = np.maximum(
        np.max(tha**2 @ np.abs(B).T, axis=-1, initial=0.0), np.max(thb**2 @ np.abs(B).T, axis=-1, initial=0.0)
    )
    diff = np.max(np.abs(a.c - cb), axis=-1, initial=0.0)
    bad = diff > rtol * np.maximum(scale, 1e-300)
    if np.any(bad):
        i = tuple(int(x) for x in np.argwhere(np.atleast_1d(bad))[0])[: bad.ndim]
        v = int(np.argmax(np.abs(a.c[i] - cb[i])))
        where = f" (pair {list(i)})" if bad.ndim else ""
        raise ValueError(
            f"The networks have different conserved values{where}: at hidden node {g.hidden[v]!r}, "
            f"c_a = {a.c[i][v]:.17g} and c_b = {cb[i][v]:.17g} (difference {abs(a.c[i][v] - cb[i][v]):.3g}, "
            f"allowed rtol * scale = {rtol * scale[i]:.3g}). They lie on different invariant sets, so no "
            "gradient flow joins them; pass a larger rtol if the difference is solver drift."
        )
    signs_b = np.where(a.frozen, np.sign(thb), 0).astype(np.int8)
    b = Component(c=cb, tol=a.tol, frozen=a.frozen, signs=signs_b, graph=g, result=RESULTS.successful)
    differing = a.frozen & (a.signs != signs_b)
    return ComponentComparison(
        same=~differing.any(-1), differing=differing, max_c_difference=diff, a=a, b=b, result=RESULTS.successful
    )
