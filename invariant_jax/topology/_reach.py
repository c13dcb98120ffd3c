"""Reachability of a target network's function from an initialization, by topology.

Gradient flow from `init` stays in `init`'s component of `H_G(c0)`, `c0 = c(init)`. For a
positively homogeneous activation the function is unchanged by rescaling each hidden
neuron `v` by `lambda_v > 0` (incoming weights times `lambda_v`, outgoing divided by it)
and by permuting *twin* hidden neurons (same predecessors and same successors: the
neurons of one layer of an MLP). So the target's function is available in the
component iff some rescaled, permuted copy of the target lies on `H_G(c0)` with the
init's signs on every frozen edge.

Rescaling: with `mu_v = lambda_v^2 = exp(y_v)` (and `y = 0` on inputs and outputs) the
edge `e = (u -> v)` gets `q_e exp((B~^T y)_e)`, and
`F(y) = sum_e q_e exp((B~^T y)_e) - c0 . y` is convex with gradient
`B~ q(y) - c0`: the rescaling onto `c0` is the minimiser of `F`, found by Newton's
method (Hessian `B~ diag(q(y)) B~^T`). When every target weight is non-zero, `F` is
coercive and strictly convex, so the rescaling exists and is unique for every `c0`.

Permutations: a frozen edge never joins two neurons of twin classes of size > 1 (its
bottleneck would have two out- or in-edges), so each class is an independent bipartite
matching of positions to target neurons on the signs of the frozen edges.
"""

from __future__ import annotations

from collections import Counter

import equinox as eqx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Float
from scipy.sparse.csgraph import maximum_bipartite_matching

from .._results import RESULTS
from ..activations import Activation
from ..graph import DAG
from ..invariants import singular_subnetworks
from ..network import DAGNetwork
from ._components import component_of
from ._connectivity import connectivity

__all__ = ["Reachability", "reachability", "rescale_onto", "twin_classes"]


class Reachability(eqx.Module):
    """The answer of `reachability(init, target)`.

    **Fields:**

    - `reachable`: whether a rescaled (and twin-permuted) copy of the target lies in
        `init`'s component of `H_G(c0)`.
    - `theta`: `(E,)` that copy's edge weights (`graph.edges` order) when one was found
        on `H_G(c0)`, else `None`; `scales`: `(H,)` the `lambda_v`; `permutation`:
        `{position: target neuron}` for the moved twin neurons.
    - `residual`: `max_v |B~ theta^2 - c0|_v / conservation_scale(theta)`.
    - `init_label`, `target_label`: the component labels (signs of the frozen edges of
        `H_G(c0)`) of `init` and of the copy.
    - `reason`: why it is unreachable (the frozen edge, the signs and the balance
        condition), or `""`; `result`: `successful` or `unreachable`.
    """

    theta: Float[np.ndarray, " E"] | None
    scales: Float[np.ndarray, " H"] | None
    residual: float = eqx.field(static=True)
    reachable: bool = eqx.field(static=True)
    permutation: dict = eqx.field(static=True)
    init_label: str = eqx.field(static=True)
    target_label: str = eqx.field(static=True)
    reason: str = eqx.field(static=True)
    graph: DAG = eqx.field(static=True)
    result: RESULTS

    @property
    def success(self) -> bool:
        return bool(self.result == RESULTS.successful)

    def __bool__(self) -> bool:
        return self.reachable

    def network(self, like: DAGNetwork) -> DAGNetwork:
        """The rescaled, permuted target as a network (with `like`'s activation)."""
        if self.theta is None:
            raise ValueError(f"No copy of the target lies on H_G(c0): {self.reason}")
        return like.with_edge_weights(self.theta)


def twin_classes(g: DAG) -> list[tuple]:
    """Classes (size >= 2) of hidden nodes with equal predecessor and successor sets:
    swapping two of them is an automorphism of `g`, so it keeps the function."""
    groups: dict = {}
    for v in g.hidden:
        groups.setdefault((frozenset(g.predecessors(v)), frozenset(g.successors(v))), []).append(v)
    return [tuple(c) for c in groups.values() if len(c) > 1]


def rescale_onto(g: DAG, theta, c0, *, max_iter: int = 200, rtol: float = 1e-12):
    """Positive per-neuron rescalings `lambda` that move `theta` onto `H_G(c0)`.

    Newton's method with backtracking on the convex `F(y)` of the module docstring.

    **Returns:** `(theta_scaled, lambda, residual)`: the residual is
    `max_v |B~ theta_scaled^2 - c0|_v / conservation_scale(theta_scaled)`; it is above
    `rtol` when no rescaling reaches `c0` (then `y` diverges).
    """
    B = g.incidence().astype(np.float64)
    q = np.asarray(theta, np.float64) ** 2
    c0 = np.asarray(c0, np.float64)
    s = max(float(np.max(q, initial=0.0)), float(np.max(np.abs(c0), initial=0.0)), 1e-300)
    q, c = q / s, c0 / s
    y = np.zeros(len(g.hidden))
    last = np.inf

    def F(y):
        z = np.clip(B.T @ y, -700, 700)
        return float(q @ np.exp(z) - c @ y)

    for _ in range(max_iter):
        qy = q * np.exp(np.clip(B.T @ y, -700, 700))
        grad = B @ qy - c
        scale = max(float(np.max(np.abs(B) @ qy, initial=0.0)), 1e-300)
        gmax = float(np.max(np.abs(grad), initial=0.0))
        if gmax <= 4 * np.finfo(np.float64).eps * scale or (gmax <= rtol * scale and gmax >= 0.5 * last):
            break  # at round-off, or converged and no longer improving
        last = gmax
        Hs = (B * qy) @ B.T
        step = -np.linalg.lstsq(Hs, grad, rcond=None)[0]
        f0, t, slope = F(y), 1.0, float(grad @ step)
        # backtracking far from the optimum; near it F changes below its own round-off
        while gmax > 1e-6 * scale and t > 1e-12 and F(y + t * step) > f0 + 1e-4 * t * slope:
            t *= 0.5
        y = y + t * step
    lam = np.exp(y / 2)
    full = np.ones(g.n_nodes)
    full[[g.index[v] for v in g.hidden]] = lam
    rows, cols = g.edge_index
    th = np.asarray(theta, np.float64) * full[cols] / full[rows]
    qq = th**2
    resid = float(np.max(np.abs(B @ qq - c0), initial=0.0) / max(float(np.max(np.abs(B) @ qq, initial=0.0)), 1e-300))
    return th, lam, resid


def _check_nets(init, target):
    for name, n in (("init", init), ("target", target)):
        if not isinstance(n, DAGNetwork):
            raise TypeError(f"{name} must be a DAGNetwork; got {type(n).__name__}.")
        if n.weights.ndim != 2:
            raise ValueError(
                f"{name} is a batch of networks; reachability takes one init and one target (loop over a batch)."
            )
        acts = n.activation if isinstance(n.activation, tuple) else (n.activation,)
        bad = [a for a in acts if not (isinstance(a, Activation) and a.positively_homogeneous)]
        if bad:
            raise ValueError(
                f"{name} uses the activation {bad[0]!r}, which is not positively homogeneous: "
                "neither the conservation law nor the rescaling symmetry holds. Use relu, "
                "leaky_relu or linear."
            )
    if init.graph != target.graph:
        raise ValueError(
            f"init and target are on different graphs ({init.graph!r}, {target.graph!r}); "
            "reachability compares networks of one graph."
        )
    if init.activation != target.activation:
        raise ValueError(
            f"init and target have different activations ({init.activation!r}, "
            f"{target.activation!r}), so they compute different functions."
        )


def _pattern(g: DAG, v, frozen_idx, signs) -> tuple:
    """The frozen edges at `v` as `(other endpoint, direction, sign)`, sorted."""
    out = []
    for k in frozen_idx:
        a, b = g.edges[k]
        if a == v:
            out.append((str(b), b, "out", int(signs[k])))
        elif b == v:
            out.append((str(a), a, "in", int(signs[k])))
    return tuple(sorted(out, key=lambda t: (t[0], t[2])))


def _fits(g: DAG, eidx: dict, j, pattern, theta) -> bool:
    for _, w, d, s in pattern:
        e = (j, w) if d == "out" else (w, j)
        if int(np.sign(theta[eidx[e]])) != s:
            return False
    return True


def _describe(p) -> str:
    return ", ".join(f"{'->' if d == 'out' else '<-'}{w!s} {'+' if s > 0 else '-'}" for _, w, d, s in p) or "free"


def _match_twins(g: DAG, frozen, signs, theta_t) -> tuple[dict, str]:
    """A permutation of twin neurons giving the target the init's frozen-edge signs, as
    `{position: target neuron}`, or `({}, reason)` when none exists."""
    eidx = {e: k for k, e in enumerate(g.edges)}
    frozen_idx = np.flatnonzero(frozen)
    sigma: dict = {}
    for cls in twin_classes(g):
        pats = [_pattern(g, v, frozen_idx, signs) for v in cls]
        if not any(pats):
            continue
        compat = np.array([[_fits(g, eidx, j, p, theta_t) for j in cls] for p in pats])
        match = maximum_bipartite_matching(sp.csr_matrix(compat.astype(np.int8)), perm_type="column")
        if np.any(match < 0):
            need = Counter(_describe(p) for p in pats)
            have = {
                d: int(sum(any(compat[i, j] for i, p in enumerate(pats) if _describe(p) == d) for j in range(len(cls))))
                for d in need
            }
            lines = "; ".join(
                f"{n} with frozen edges [{d}] (the target has {have[d]} neuron(s) that fit)" for d, n in need.items()
            )
            return {}, (
                f"No permutation of the twin neurons {list(map(str, cls))} matches the frozen-edge "
                f"signs: the initialization needs {lines}."
            )
        sigma.update({v: cls[int(j)] for v, j in zip(cls, match) if cls[int(j)] != v})
    return sigma, ""


def _permuted(g: DAG, theta, sigma: dict) -> np.ndarray:
    eidx = {e: k for k, e in enumerate(g.edges)}
    return np.array([theta[eidx[(sigma.get(a, a), sigma.get(b, b))]] for a, b in g.edges])


def reachability(
    init: DAGNetwork, target: DAGNetwork, *, permute: bool = True, tol: float | None = None, rtol: float = 1e-11
) -> Reachability:
    """Whether a network with `target`'s function lies in `init`'s component of
    `H_G(c0)`, `c0 = c(init)`: the topological condition for gradient flow from `init` to
    reach the target's function (necessary, not sufficient: the flow may still stop
    elsewhere).

    Searched over the positive rescalings of each hidden neuron and (with `permute`)
    the permutations of twin neurons; other function-preserving changes (dead neurons,
    the `GL` symmetry of linear networks) are not searched, so *unreachable* means no
    copy in that orbit.

    **Arguments:**

    - `init`, `target`: one `DAGNetwork` each, on one graph, with one positively
        homogeneous activation (relu, leaky_relu, linear).
    - `permute`: also permute twin neurons (same predecessors and successors).
    - `tol`: the balance-condition tolerance, as in `component_of`.
    - `rtol`: the relative residual below which the rescaled target counts as on
        `H_G(c0)`.

    **Returns:** a `Reachability` (truthy when reachable) with the copy on `H_G(c0)`,
    the scales and permutation, or the reason.
    """
    _check_nets(init, target)
    g = init.graph
    comp0 = component_of(init, tol=tol)
    tht = np.asarray(target.edge_weights(), np.float64)
    if not np.all(np.isfinite(tht)):
        raise ValueError("target has non-finite weights; reachability needs finite ones.")
    sigma, why = _match_twins(g, comp0.frozen, comp0.signs, tht) if permute else ({}, "")
    if why:
        return _unreachable(g, comp0, why)
    th, lam, resid = rescale_onto(g, _permuted(g, tht, sigma), comp0.c)
    if not resid <= rtol:
        groups = singular_subnetworks(target)
        sums = [f"{sorted(map(str, W))} (sum c0 = {sum(comp0.c[g.hidden.index(v)] for v in W):.4g})" for W in groups]
        return _unreachable(
            g,
            comp0,
            (
                f"No positive rescaling of the target lies on H_G(c0) (best residual {resid:.3g}). Its zero "
                f"weights cut off the groups {sums or 'none'}; a cut-off group keeps sum c = 0 under every "
                "rescaling, and a neuron with all incoming (outgoing) weights zero keeps c_v <= 0 (>= 0)."
            ),
            theta=th,
            scales=lam,
            resid=resid,
        )
    signs = np.where(comp0.frozen, np.sign(th), 0).astype(np.int8)
    differing = comp0.frozen & (signs != comp0.signs)
    label_t = component_of(g, th, tol=comp0.tol).label if not differing.any() else _label_of(g, comp0, signs)
    if differing.any():
        return _unreachable(
            g,
            comp0,
            _frozen_reason(g, comp0, signs, differing, tol),
            theta=th,
            scales=lam,
            resid=resid,
            sigma=sigma,
            target_label=label_t,
        )
    return Reachability(
        theta=th,
        scales=lam,
        residual=resid,
        reachable=True,
        permutation=sigma,
        init_label=comp0.label,
        target_label=label_t,
        reason="",
        graph=g,
        result=RESULTS.successful,
    )


def _label_of(g, comp0, signs) -> str:
    parts = [
        f"{u!s}->{v!s}:{'+' if s > 0 else ('-' if s < 0 else '0')}"
        for (u, v), f, s in zip(g.edges, comp0.frozen, signs)
        if f
    ]
    return " ".join(parts) or "connected"


def _frozen_reason(g, comp0, signs, differing, tol) -> str:
    conn = connectivity(g, comp0.c, tol=float(comp0.tol) if tol is None else tol, lp="none")
    idx = set(np.flatnonzero(differing).tolist())
    parts = [
        f"edge {g.edges[k][0]!s} -> {g.edges[k][1]!s} is frozen with sign "
        f"{'+' if comp0.signs[k] > 0 else '-'} at init but the target needs "
        f"{'+' if signs[k] > 0 else ('-' if signs[k] < 0 else '0')}"
        for k in sorted(idx)
    ]
    why = " ".join(cd.explain() for cd in conn.reasons if cd.edge_index in idx)
    return "; ".join(parts) + ". Why: " + why


def _unreachable(
    g, comp0, reason, *, theta=None, scales=None, resid=float("nan"), sigma=None, target_label=""
) -> Reachability:
    return Reachability(
        theta=theta,
        scales=scales,
        residual=resid,
        reachable=False,
        permutation=sigma or {},
        init_label=comp0.label,
        target_label=target_label,
        reason=reason,
        graph=g,
        result=RESULTS.unreachable,
    )
