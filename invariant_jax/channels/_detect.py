"""Channel detection with the criteria of "Flat Channels to Infinity in Neural Loss
Landscapes": a large parameter norm, merging input weights, output weights diverging
with opposite signs, and late updates pointing along the channel.

One definition of "channel" serves `detect_channels`, `confirm_channel` and
`flow_then_newton`: the norm test is the paper's `weightnorm(theta) = sum(theta^2) / (2E)
>= maxnorm` (`ij.weightnorm`; default 1e3, where `flow_then_newton` stops and counts a run
infinite), and input weights merge below cosine distance `pair_tol` (default 1e-2, the
paper's)."""

from __future__ import annotations

from itertools import combinations

import equinox as eqx
import numpy as np

from .._checks import check_positive
from .._results import RESULTS, is_success
from ..flow import Flow
from ..losses import check_data, loss_gradient
from ..network import DAGNetwork
from ._flow_phase import weightnorm
from ._glu import ChannelPair, PairClass, channel_coordinates

__all__ = ["ChannelReport", "detect_channels", "CLASSIFICATIONS", "MAXNORM", "PAIR_TOL"]

MAXNORM = 1e3
"""The paper's norm criterion: `weightnorm(theta) >= MAXNORM` (as `flow_then_newton`)."""

PAIR_TOL = 1e-2
"""The paper's merging criterion: cosine distance between input weights below `PAIR_TOL`."""

CLASSIFICATIONS = (PairClass.channel, PairClass.candidate, PairClass.merging)
"""The classes `detect_channels` assigns (`PairClass` members, equal to their names)."""


class ChannelReport(eqx.Module):
    """What `detect_channels` found.

    **Fields:**

    - `pairs`: a `ChannelPair` per pair of neurons whose input weights merged (cosine
        distance below `pair_tol`), each with its `classification`, a `PairClass`:
        `channel` (all criteria hold), `candidate` (merging with opposite, diverging
        output weights, but the norm or late-update criterion fails) or `merging`
        (input weights merged, output weights not diverging: e.g. a saddle line).
    - `cosine_distances`, `opposite`, `diverging`, `late_fractions`: per pair, the
        criteria values (`late_fractions` is NaN when no update direction was available).
    - `groups`: tuples of 3 or more hidden positions whose input weights lie within
        cosine distance `group_tol` of each other (connected components).
    - `param_norm`: `||theta||`; `weightnorm`: `sum(theta^2) / (2E)`, the quantity the
        norm criterion tests; `in_channel`: whether any pair is a `channel`;
        `thresholds`: the criteria settings used.

    `result` is `RESULTS.successful`, or `nonfinite_state` when the weights are not finite
    (then no criterion means anything); `success` says which.
    """

    pairs: tuple[ChannelPair, ...]
    cosine_distances: np.ndarray
    opposite: np.ndarray
    diverging: np.ndarray
    late_fractions: np.ndarray
    groups: tuple[tuple[int, ...], ...]
    param_norm: float
    weightnorm: float
    in_channel: bool
    thresholds: dict

    @property
    def result(self) -> RESULTS:
        return RESULTS.successful if np.isfinite(self.param_norm) else RESULTS.nonfinite_state

    @property
    def success(self) -> bool:
        return bool(is_success(self.result))

    @property
    def channels(self) -> tuple[ChannelPair, ...]:
        return tuple(p for p in self.pairs if p.classification is PairClass.channel)

    def table(self) -> str:
        head = f"{'pair':>14} {'class':>10} {'cos dist':>9} {'eps':>9} {'|c|':>9} {'|a|':>9} {'late':>6}"
        lines = [
            f"||theta|| = {self.param_norm:.3e}, weightnorm = {self.weightnorm:.3e} (channel: >= "
            f"{self.thresholds['maxnorm']:g})",
            head,
            "-" * len(head),
        ]
        for p, cd, lf in zip(self.pairs, self.cosine_distances, self.late_fractions):
            lines.append(
                f"{str(p.nodes):>14} {p.classification:>10} {cd:>9.1e} {float(p.eps):>9.2e} "
                f"{float(np.linalg.norm(p.c)):>9.3f} {float(np.linalg.norm(p.a)):>9.3f} {lf:>6.2f}"
            )
        return "\n".join(lines)


def _cosine_distance(u, v) -> float:
    nu, nv = np.linalg.norm(u), np.linalg.norm(v)
    if nu == 0 or nv == 0:
        return 1.0
    return float(1.0 - np.dot(u, v) / (nu * nv))


def _in_out(net: DAGNetwork, W, k: int):
    g = net.graph
    v = g.hidden[k]
    P = sorted(g.predecessors(v), key=g.index.__getitem__)
    S = sorted(g.successors(v), key=g.index.__getitem__)
    return (tuple(P), tuple(S)), W[[g.index[u] for u in P], g.index[v]], W[g.index[v], [g.index[s] for s in S]]


def _tangent(net: DAGNetwork, pair: ChannelPair) -> np.ndarray:
    """d theta / d eps at fixed (w, Delta, c, a), unit length, in edge order."""
    g = net.graph
    eps = float(pair.eps)
    t = np.zeros(len(g.edges))
    vi, vj = pair.nodes
    e = {edge: n for n, edge in enumerate(g.edges)}
    for u, d in zip(pair.predecessors, np.asarray(pair.Delta)):
        t[e[(u, vi)]], t[e[(u, vj)]] = d, -d
    for s, a in zip(pair.successors, np.asarray(pair.a)):
        t[e[(vi, s)]], t[e[(vj, s)]] = -a / (2 * eps**2), a / (2 * eps**2)
    n = np.linalg.norm(t)
    return t / n if n > 0 else t


def detect_channels(
    net_or_flow: DAGNetwork | Flow,
    X=None,
    Y=None,
    *,
    maxnorm: float = MAXNORM,
    pair_tol: float = PAIR_TOL,
    group_tol: float = 1e-2,
    late_fraction: float = 0.5,
    late_window: float = 0.1,
    loss="mse",
) -> ChannelReport:
    """Find neuron pairs (and groups) in flat channels.

    **Arguments:**

    - `net_or_flow`: a `DAGNetwork`, or a `Flow` (a single trajectory). The criteria are
        evaluated at the final state.
    - `X`, `Y`: data. For a network they give the update direction `-grad L`; a `Flow`
        uses its own late displacement instead. Without either, the late-update criterion
        is skipped.
    - `maxnorm`: the norm criterion, `weightnorm(theta) = sum(theta^2) / (2E) >= maxnorm`
        (paper: 1e3; the same test as `flow_then_newton`'s `maxnorm`, so its end points
        counted infinite pass it).
    - `pair_tol`, `group_tol`: cosine-distance thresholds between input weights for pairs
        (paper: 1e-2) and groups (1e-2).
    - `late_fraction`: the share of the late update's squared norm that must lie along
        the pairs' channel directions `d theta / d eps` (default 0.5, "most").
    - `late_window`: for a `Flow`, the late update is `theta_final` minus the state at
        the last `late_window` fraction of the finite saved times.

    Output weights "diverge" when they have opposite signs (`a_i . a_j < 0`) and, for a
    `Flow`, `||a_i - a_j||` grew over the late window; for a single network, when
    `||a_i - a_j|| > (2 maxnorm E)^(1/4)`, the square root of the Euclidean norm at
    `weightnorm = maxnorm`.

    **Returns:** a `ChannelReport`.
    """
    for name, v in (("maxnorm", maxnorm), ("pair_tol", pair_tol), ("group_tol", group_tol)):
        check_positive(name, v)
    if not 0 < late_fraction <= 1 or not 0 < late_window < 1:
        raise ValueError(
            f"Need 0 < late_fraction <= 1 and 0 < late_window < 1; got {late_fraction!r}, {late_window!r}."
        )
    net, update, earlier = _end_state(net_or_flow, X, Y, loss=loss, late_window=late_window)
    theta = np.asarray(net.edge_weights())
    norm = float(np.linalg.norm(theta))
    # weightnorm >= maxnorm, written as ||theta|| > sqrt(2 maxnorm E) with a relative slack of
    # 1e-9 so that an end point stopped at weightnorm = maxnorm passes despite round-off
    norm_threshold = float(np.sqrt(2 * maxnorm * theta.size)) * (1 - 1e-9)
    W = np.asarray(net.weights)
    info = [_in_out(net, W, k) for k in range(len(net.graph.hidden))]
    close_pairs, groups = _close_pairs(net, info, pair_tol=pair_tol, group_tol=group_tol)
    W_early = None if earlier is None else np.asarray(net.with_edge_weights(earlier).weights)
    pairs, cds, opp, div, tangents = _pair_criteria(net, info, close_pairs, W_early, np.sqrt(norm_threshold))
    lfs = [
        np.nan if update is None or not np.any(update) else float(np.dot(update, t) ** 2 / np.dot(update, update))
        for t in tangents
    ]
    out = _classified(pairs, div, lfs, update, late_fraction=late_fraction, far=norm > norm_threshold)
    return ChannelReport(
        pairs=tuple(out),
        cosine_distances=np.asarray(cds, dtype=float),
        opposite=np.asarray(opp, dtype=bool),
        diverging=np.asarray(div, dtype=bool),
        late_fractions=np.asarray(lfs, dtype=float),
        groups=groups,
        param_norm=norm,
        weightnorm=float(weightnorm(theta)),
        in_channel=any(p.classification is PairClass.channel for p in out),
        thresholds=dict(
            maxnorm=maxnorm,
            pair_tol=pair_tol,
            group_tol=group_tol,
            late_fraction=late_fraction,
            late_window=late_window,
        ),
    )


def _pair_criteria(net: DAGNetwork, info, close_pairs, W_early, spread_threshold):
    """Per close pair: its `ChannelPair`, cosine distance, whether its output weights are
    opposite and diverging (grew since `W_early`, or beyond `spread_threshold` without
    one), and its unit channel direction `d theta / d eps`."""
    pairs, cds, opp, div, tangents = [], [], [], [], []
    for i, j, cd in close_pairs:
        ai, aj = info[i][2], info[j][2]
        if ai.size and ai[0] < 0:  # convention: a_i -> +inf, a_j -> -inf
            i, j, ai, aj = j, i, aj, ai
        opposite = bool(np.dot(ai, aj) < 0)
        spread = float(np.linalg.norm(ai - aj))
        if W_early is not None:
            _, _, ai0 = _in_out(net, W_early, i)
            _, _, aj0 = _in_out(net, W_early, j)
            diverging = opposite and spread > float(np.linalg.norm(ai0 - aj0))
        else:
            diverging = opposite and spread > spread_threshold
        pair = channel_coordinates(net, i, j)
        pairs.append(pair)
        cds.append(cd)
        opp.append(opposite)
        div.append(diverging)
        tangents.append(_tangent(net, pair) if float(pair.eps) > 0 else np.zeros(len(net.graph.edges)))
    return pairs, cds, opp, div, tangents


def _end_state(net_or_flow, X, Y, *, loss, late_window):
    """`(network at the end, late update or None, the earlier state the update starts
    from or None)`: a `Flow`'s own late displacement, or `-grad L` of a network with data."""
    if isinstance(net_or_flow, Flow):
        flow = net_or_flow
        if flow.thetas.ndim != 2:
            raise ValueError(
                "detect_channels takes one trajectory; index a batched Flow first (jax.tree.map(lambda x: x[k], flow))."
            )
        thetas = np.asarray(flow.thetas)
        ok = np.flatnonzero(np.isfinite(np.asarray(flow.ts)) & np.all(np.isfinite(thetas), axis=1))
        if ok.size < 2:
            return flow.final, None, None
        earlier = thetas[ok[min(int(np.floor((1 - late_window) * ok.size)), ok.size - 2)]]
        return flow.final, np.asarray(flow.theta_final) - earlier, earlier
    if isinstance(net_or_flow, DAGNetwork):
        net = net_or_flow
        if X is None or Y is None:
            return net, None, None
        X, Y = check_data(net.graph, X, Y)
        return net, -np.asarray(loss_gradient(net, X, Y, loss=loss)[1]), None
    raise TypeError(f"detect_channels takes a DAGNetwork or a Flow; got {type(net_or_flow).__name__}.")


def _close_pairs(net: DAGNetwork, info, *, pair_tol, group_tol):
    """`(pairs (i, j, cosine distance) below pair_tol, groups)`: hidden neurons with the same
    predecessors and activation whose input weights are close; groups are the connected
    components of 3 or more of the `group_tol` graph."""
    H = len(info)
    close_pairs, group_edges = [], []
    for i, j in combinations(range(H), 2):
        if info[i][0] != info[j][0] or net.activation_of(i) != net.activation_of(j):
            continue
        cd = _cosine_distance(info[i][1], info[j][1])
        if cd < group_tol:
            group_edges.append((i, j))
        if cd < pair_tol:
            close_pairs.append((i, j, cd))
    parent = list(range(H))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in group_edges:
        parent[find(i)] = find(j)
    comps: dict[int, list[int]] = {}
    for k in range(H):
        comps.setdefault(find(k), []).append(k)
    return close_pairs, tuple(tuple(c) for c in comps.values() if len(c) >= 3)


def _classified(pairs, div, lfs, update, *, late_fraction, far) -> list[ChannelPair]:
    """Each pair with its `PairClass`. The late criterion is judged over all diverging
    pairs together (their tangents have disjoint supports)."""
    late_total = np.nansum([lf for lf, d in zip(lfs, div) if d]) if update is not None else np.nan
    out = []
    for p, d, lf in zip(pairs, div, lfs):
        late_ok = np.isnan(lf) or late_total >= late_fraction
        if d and far and late_ok:
            cls = PairClass.channel
        elif d:
            cls = PairClass.candidate
        else:
            cls = PairClass.merging
        out.append(_with_class(p, cls))
    return out


def _with_class(p: ChannelPair, cls: PairClass) -> ChannelPair:
    fields = {
        f: getattr(p, f)
        for f in ("w", "eps", "Delta", "c", "a", "i", "j", "graph", "activation", "predecessors", "successors")
    }
    return ChannelPair(**fields, classification=cls)
