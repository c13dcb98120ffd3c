"""Channel coordinates of a neuron pair, the gated-linear-unit limit, and collapsing a
pair into its limit.

A pair of hidden neurons `i, j` with the same predecessors and successors has input
weights `w_i, w_j` (over the shared predecessors, bias included) and output weights
`a_i, a_j` (over the shared successors). The channel coordinates are
`w = (w_i + w_j)/2`, `eps = ||w_i - w_j||/2`, `Delta = (w_i - w_j)/||w_i - w_j||`,
`c = a_i + a_j`, `a = eps (a_i - a_j)`; as `eps -> 0` at fixed `(w, Delta, c, a)` the pair
computes `c sigma(w.u) + a (Delta.u) sigma'(w.u)`, with `u` the predecessors' values.
"""

from __future__ import annotations

import enum
from typing import Protocol

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..activations import Activation
from ..graph import DAG
from ..losses import require_smooth
from ..network import DAGNetwork

__all__ = [
    "PairClass",
    "hidden_position",
    "pair_structure",
    "ChannelPair",
    "channel_coordinates",
    "set_channel_coordinates",
    "pair_output",
    "glu_limit",
    "predecessor_values",
    "collapse_channel",
    "CollapsedNetwork",
]


class PairClass(enum.StrEnum):
    """What a `ChannelPair` is: `constructed` (built by `channel_coordinates`, not
    classified), or what `detect_channels` decided: `channel` (all the paper's criteria
    hold), `candidate` (merging, with opposite diverging output weights, but the norm or
    late-update test fails) or `merging` (input weights merged only, e.g. a saddle line).

    A `str` enumeration: each member equals, prints and serialises as its readable value
    (`PairClass.channel == "channel"`), so tables and JSON keep the words; code compares
    with the members, which a typo cannot silently miss."""

    constructed = "constructed"
    channel = "channel"
    candidate = "candidate"
    merging = "merging"


def _pair_class(value) -> PairClass:
    try:
        return PairClass(value)
    except ValueError:
        raise ValueError(f"classification must be one of {[c.value for c in PairClass]}; got {value!r}.") from None


def hidden_position(g: DAG, v) -> int:
    """The position in `g.hidden` of hidden neuron `v`, given as that position or as its
    label; `ValueError` (naming the valid range) otherwise. Every channel function takes
    neurons this way."""
    H = len(g.hidden)
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if not 0 <= int(v) < H:
            raise ValueError(
                f"Hidden index {v} is out of range: the network has {H} hidden neurons "
                f"(indices 0..{H - 1} in graph.hidden order)."
            )
        return int(v)
    if v in g.hidden:
        return g.hidden.index(v)
    raise ValueError(f"{v!r} is neither a hidden index (0..{H - 1}) nor a hidden node label of the graph.")


class ChannelPair(eqx.Module):
    """Channel coordinates of a pair of hidden neurons `i, j` (see the module docstring).

    **Fields:** `w`, `Delta` (shape `(p,)`, over `predecessors`), `eps` (scalar), `c`, `a`
    (shape `(k,)`, over `successors`); static: `i`, `j` (positions in `graph.hidden`),
    `graph`, `activation`, `predecessors`, `successors` (node labels), and
    `classification` (a `PairClass`: `constructed`, or what `detect_channels` decided).
    """

    w: Float[Array, " p"]
    eps: Float[Array, ""]
    Delta: Float[Array, " p"]
    c: Float[Array, " k"]
    a: Float[Array, " k"]
    i: int = eqx.field(static=True)
    j: int = eqx.field(static=True)
    graph: DAG = eqx.field(static=True)
    activation: Activation = eqx.field(static=True)
    predecessors: tuple = eqx.field(static=True)
    successors: tuple = eqx.field(static=True)
    classification: PairClass = eqx.field(static=True, default=PairClass.constructed, converter=_pair_class)

    @property
    def nodes(self) -> tuple:
        return (self.graph.hidden[self.i], self.graph.hidden[self.j])

    @property
    def V(self) -> Float[Array, "k p"]:
        """The limit's linear part `a Delta^T` (successors x predecessors), as a
        `ChannelGroup`'s `V`."""
        return jnp.outer(self.a, self.Delta)

    def limit(self, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N k"]:
        """`glu_limit(self, X, net=net)` (a `ChannelGroup` answers the same call)."""
        return glu_limit(self, X, net=net)

    def with_eps(self, eps) -> ChannelPair:
        """The same `(w, Delta, c, a)` at another `eps` (a jump along the channel)."""
        return eqx.tree_at(lambda p: p.eps, self, jnp.asarray(eps, dtype=self.eps.dtype))

    def weights(self):
        """Map back: `(w_i, w_j, a_i, a_j)` with `w_i = w + eps Delta`, `w_j = w - eps Delta`,
        `a_i = (c + a/eps)/2`, `a_j = (c - a/eps)/2`."""
        d = self.eps * self.Delta
        return self.w + d, self.w - d, 0.5 * (self.c + self.a / self.eps), 0.5 * (self.c - self.a / self.eps)


def pair_structure(g: DAG, i: int, j: int) -> tuple:
    """`(vi, vj, predecessors, successors)` of the hidden neurons at positions `i != j`:
    their labels and their shared predecessors and successors (in `g.index` order).
    `ValueError` unless they share both, i.e. can merge into one unit."""
    vi, vj = g.hidden[i], g.hidden[j]
    if i == j:
        raise ValueError(f"A channel pair needs two different neurons; got i = j = {i}.")
    P, S = g.predecessors(vi), g.successors(vi)
    if set(P) != set(g.predecessors(vj)) or set(S) != set(g.successors(vj)):
        raise ValueError(
            f"Neurons {vi!r} and {vj!r} do not share predecessors and successors, so they "
            "cannot merge into one unit; pick two neurons of the same layer."
        )
    P = tuple(sorted(P, key=g.index.__getitem__))
    S = tuple(sorted(S, key=g.index.__getitem__))
    return vi, vj, P, S


def _rows_cols(g, P, v):
    return np.array([g.index[u] for u in P]), np.full(len(P), g.index[v])


def channel_coordinates(net: DAGNetwork, i, j) -> ChannelPair:
    """The channel coordinates of hidden neurons `i`, `j` (positions in `graph.hidden`, or
    labels) of `net`. They must share predecessors and successors and the activation.

    **Returns:** a `ChannelPair`. Inverse: `set_channel_coordinates`.
    """
    g = net.graph
    i, j = hidden_position(g, i), hidden_position(g, j)
    vi, vj, P, S = pair_structure(g, i, j)
    act = net.activation_of(i)
    if net.activation_of(j) != act:
        raise ValueError(f"Neurons {vi!r} and {vj!r} use different activations; a channel needs one.")
    W = net.weights
    idx = lambda vs: np.array([g.index[u] for u in vs])  # noqa: E731
    wi, wj = W[idx(P), g.index[vi]], W[idx(P), g.index[vj]]
    ai, aj = W[g.index[vi], idx(S)], W[g.index[vj], idx(S)]
    diff = wi - wj
    eps = 0.5 * jnp.linalg.norm(diff)
    Delta = diff / jnp.where(eps > 0, 2 * eps, 1.0)
    return ChannelPair(
        w=0.5 * (wi + wj),
        eps=eps,
        Delta=Delta,
        c=ai + aj,
        a=eps * (ai - aj),
        i=i,
        j=j,
        graph=g,
        activation=act,
        predecessors=P,
        successors=S,
    )


def set_channel_coordinates(net: DAGNetwork, pair: ChannelPair) -> DAGNetwork:
    """`net` with the pair's weights replaced by those of `pair`'s coordinates (map back)."""
    g = net.graph
    if g != pair.graph:
        raise ValueError("The pair belongs to another graph; compute it with channel_coordinates(net, i, j).")
    if not bool(pair.eps > 0):
        raise ValueError(f"eps must be > 0 to map back (a_i - a_j = a/eps); got {pair.eps}.")
    wi, wj, ai, aj = pair.weights()
    vi, vj = pair.nodes
    idx = lambda vs: np.array([g.index[u] for u in vs])  # noqa: E731
    P, S = idx(pair.predecessors), idx(pair.successors)
    W = net.weights
    W = W.at[P, g.index[vi]].set(wi).at[P, g.index[vj]].set(wj)
    W = W.at[g.index[vi], S].set(ai).at[g.index[vj], S].set(aj)
    return eqx.tree_at(lambda n: n.weights, net, W)


def _node_values(net: DAGNetwork, X) -> Float[Array, "N m"]:
    """Values of all input and hidden nodes, columns in `graph.nodes` order."""
    g = net.graph
    X = jnp.asarray(X)
    Z = net.preactivations(X)
    H = len(g.hidden)
    acts = jnp.stack([net.activation_of(k)(Z[:, k]) for k in range(H)], axis=1) if H else Z
    cols, k = [], 0
    for v in g.inputs:
        if v in g.constants:
            cols.append(jnp.ones((X.shape[0],), Z.dtype))
        else:
            cols.append(X[:, k].astype(Z.dtype))
            k += 1
    return jnp.concatenate([jnp.stack(cols, axis=1), acts], axis=1)


class _Merging(Protocol):
    """A pair or a group of neurons (`ChannelPair`, `ChannelGroup`): what
    `predecessor_values` and `gated_linear_limit` read."""

    @property
    def graph(self) -> DAG: ...

    @property
    def predecessors(self) -> tuple: ...

    @property
    def activation(self) -> Activation: ...

    @property
    def w(self) -> Array: ...

    @property
    def c(self) -> Array: ...

    @property
    def V(self) -> Array: ...


def predecessor_values(pair: _Merging, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N p"]:
    """The values `u` of the predecessors of a pair (or a `ChannelGroup`) on inputs `X`
    (`(N, d_in)`). When every predecessor is an input (or bias) node, `net` is not needed."""
    g = pair.graph
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[1] != g.n_in:
        raise ValueError(f"X has shape {X.shape}; expected (N, {g.n_in}).")
    if net is None:
        inputs = set(g.inputs)
        if not all(u in inputs for u in pair.predecessors):
            raise ValueError(
                "The pair's predecessors include hidden neurons; pass net= so their values can be computed."
            )
        data = [v for v in g.inputs if v not in g.constants]
        cols = [
            jnp.ones((X.shape[0],), X.dtype) if u in g.constants else X[:, data.index(u)] for u in pair.predecessors
        ]
        return jnp.stack(cols, axis=1)
    V = _node_values(net, X)
    return V[:, np.array([g.index[u] for u in pair.predecessors])]


def _sigma_prime(act: Activation):
    return act.derivative


def glu_limit(pair: ChannelPair, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N k"]:
    """The gated linear unit the pair tends to as `eps -> 0`:
    `c sigma(w.u) + a (Delta.u) sigma'(w.u)`, one column per successor. `sigma'` is the
    activation's exact derivative (the logistic sigmoid for softplus).

    **Arguments:** `pair`; inputs `X` `(N, d_in)`; `net` when the predecessors are hidden.

    **Returns:** `(N, k)`.
    """
    return gated_linear_limit(pair, X, net=net, caller="glu_limit")


def gated_linear_limit(unit: _Merging, X: ArrayLike, *, net=None, caller: str) -> Array:
    """`c sigma(w.u) + (V u) sigma'(w.u)` of a pair (`V = a Delta^T`) or a group: the one
    formula of `glu_limit` and `group_limit` (`caller` names it in the error)."""
    if not unit.activation.smooth:
        raise ValueError(
            f"{caller} needs a smooth activation; {unit.activation.name!r} is not smooth "
            "(piecewise linear): sigma' jumps at 0, so there is no gated-linear limit. "
            "Use softplus, erf, g, tanh or gelu."
        )
    U = predecessor_values(unit, X, net=net)
    z = U @ unit.w
    return unit.activation(z)[:, None] * unit.c[None, :] + _sigma_prime(unit.activation)(z)[:, None] * (U @ unit.V.T)


def pair_output(pair: ChannelPair, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N k"]:
    """What the two neurons send to their successors at finite `eps`:
    `a_i sigma(w_i.u) + a_j sigma(w_j.u)`, one column per successor."""
    U = predecessor_values(pair, X, net=net)
    wi, wj, ai, aj = pair.weights()
    s = pair.activation
    return s(U @ wi)[:, None] * ai[None, :] + s(U @ wj)[:, None] * aj[None, :]


class CollapsedNetwork(eqx.Module):
    """A network whose channel pair (or group) is replaced by its GLU limit (see
    `collapse_channel`), in any layer.

    **Fields:** `base`: the network with the merged neurons rewired to carry the limit's
    signals: the first (the gate, position `gate`) has input weights `w`, output weights
    `c` and its activation, `sigma(w.u)`; the others (positions `linear`) have input
    weights `d_m`, output weights `s_m o_m` (the SVD `V = sum_m s_m o_m d_m^T` of the
    limit's linear part) and the activation `(d_m.u) sigma'(w.u)`; `pair` (a
    `ChannelPair`, or a `ChannelGroup`). Evaluate with `forward(X)` or `__call__(x)`,
    like a `DAGNetwork`.
    """

    base: DAGNetwork
    pair: ChannelPair  # or a ChannelGroup: anything with `graph`, `nodes`, `w`, `c`, `V`, `limit`
    gate: int = eqx.field(static=True)
    linear: tuple[int, ...] = eqx.field(static=True)

    @property
    def graph(self) -> DAG:
        return self.base.graph

    def _activate(self, z, k0, k1):
        out = self.base._apply(z, k0, k1)
        if not k0 <= self.gate < k1:
            return out
        dsigma = self.pair.activation.derivative(z[:, self.gate - k0])
        for m in self.linear:
            out = out.at[:, m - k0].set(z[:, m - k0] * dsigma)
        return out

    def forward(self, X: Float[Array, "N d_in"]) -> Float[Array, "N d_out"]:
        return self.base.evaluate(X, activate=self._activate)[0]

    def __call__(self, x: Float[Array, " d_in"]) -> Float[Array, " d_out"]:
        return self.forward(jnp.asarray(x)[None])[0]


def collapse_channel(net: DAGNetwork, pair: ChannelPair) -> CollapsedNetwork:
    """Replace the pair by its limit `c sigma(w.u) + a (Delta.u) sigma'(w.u)` (a group by
    `c sigma(w.u) + (V u) sigma'(w.u)`, `group_limit`), in any hidden layer: the limit
    feeds the pair's successors, output or hidden.

    **Arguments:** `net`; `pair` (from `channel_coordinates` or `detect_channels`), or a
    `ChannelGroup` (from `group_coordinates`).

    **Returns:** a `CollapsedNetwork`; its loss is the limit loss `L0`.
    """
    require_smooth(net, "collapse_channel")
    g = net.graph
    if g != pair.graph:
        raise ValueError(
            "The pair belongs to another graph; compute it with channel_coordinates(net, i, j) "
            "(a group with group_coordinates(net, neurons))."
        )
    # the limit's linear part V (successors x predecessors) has rank <= k - 1 for k neurons
    # (its rows are combinations of the k centred input weights, which sum to 0)
    o, sv, d = jnp.linalg.svd(pair.V, full_matrices=False)
    gate, *linear = (g.index[v] for v in pair.nodes)
    P = np.array([g.index[u] for u in pair.predecessors])
    S = np.array([g.index[u] for u in pair.successors])
    W = net.weights.at[P, gate].set(pair.w).at[gate, S].set(pair.c)
    for m, col in enumerate(linear):
        keep = m < sv.shape[0]
        W = W.at[P, col].set(d[m] if keep else 0.0).at[col, S].set(sv[m] * o[:, m] if keep else 0.0)
    pos = [g.hidden.index(v) for v in pair.nodes]
    return CollapsedNetwork(
        base=eqx.tree_at(lambda n: n.weights, net, W), pair=pair, gate=pos[0], linear=tuple(pos[1:])
    )
