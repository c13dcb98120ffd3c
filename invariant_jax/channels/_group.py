"""Channels of more than two neurons: the coordinates of a merging group and its limit.

`k >= 2` hidden neurons of one layer (the same predecessors, successors and activation)
with input weights `w_i` (over the predecessors, bias included) and output weights `a_i`
(over the successors) send `sum_i a_i sigma(w_i.u)` on. With `w` the mean of the `w_i`,
Taylor's theorem gives

    sum_i a_i sigma(w_i.u) = c sigma(w.u) + (V u) sigma'(w.u) + R,
    c = sum_i a_i,  V = sum_i a_i (w_i - w)^T  (successors x predecessors),
    R = 1/2 sum_i a_i ((w_i - w).u)^2 sigma''(xi_i).

Along a channel the input weights merge (`w_i - w = O(eps)`) while the output weights
diverge (`a_i = O(1/eps)`) with `c` and `V` finite, so `R = O(eps)` and the group tends to
the gated linear unit `c sigma(w.u) + (V u) sigma'(w.u)`. For a pair, `V = a Delta^T` and
this is `glu_limit`; for three or more neurons `V` may have rank above one (one gate, and
successors that see different linear directions; a pair shows them all the one direction
`Delta`).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..activations import Activation
from ..graph import DAG
from ..network import DAGNetwork
from ._glu import gated_linear_limit, hidden_position, pair_structure, predecessor_values

__all__ = ["ChannelGroup", "group_coordinates", "group_output", "group_limit"]


class ChannelGroup(eqx.Module):
    """A group of `k >= 2` hidden neurons of one layer (see the module docstring).

    **Fields:** `W_in` `(k, p)`: each neuron's input weights over `predecessors`; `A_out`
    `(k, s)`: its output weights over `successors`; static: `neurons` (positions in
    `graph.hidden`), `graph`, `activation`, `predecessors`, `successors` (node labels).

    **Properties:** `w` (the mean input weights), `c` (`sum_i a_i`), `V` (`sum_i a_i
    (w_i - w)^T`, `(s, p)`), `spread` (`max_i ||w_i - w||`, the group's `eps`), `nodes`.
    """

    W_in: Float[Array, "k p"]
    A_out: Float[Array, "k s"]
    neurons: tuple[int, ...] = eqx.field(static=True)
    graph: DAG = eqx.field(static=True)
    activation: Activation = eqx.field(static=True)
    predecessors: tuple = eqx.field(static=True)
    successors: tuple = eqx.field(static=True)

    @property
    def nodes(self) -> tuple:
        return tuple(self.graph.hidden[k] for k in self.neurons)

    @property
    def w(self) -> Float[Array, " p"]:
        return jnp.mean(self.W_in, axis=0)

    @property
    def c(self) -> Float[Array, " s"]:
        return jnp.sum(self.A_out, axis=0)

    @property
    def V(self) -> Float[Array, "s p"]:
        return self.A_out.T @ (self.W_in - self.w[None, :])

    @property
    def spread(self) -> Float[Array, ""]:
        return jnp.max(jnp.linalg.norm(self.W_in - self.w[None, :], axis=1))

    def limit(self, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N s"]:
        """`group_limit(self, X, net=net)`."""
        return group_limit(self, X, net=net)


def group_coordinates(net: DAGNetwork, neurons) -> ChannelGroup:
    """The `ChannelGroup` of hidden neurons `neurons` (positions in `graph.hidden` or
    labels; at least two, distinct) of `net`: they must share predecessors, successors and
    the activation (the neurons of one layer of an MLP do; `detect_channels` reports
    `groups` of merging neurons as positions)."""
    g = net.graph
    if isinstance(neurons, (str, int, np.integer)):
        raise ValueError(f"neurons must be a sequence of two or more hidden neurons; got {neurons!r}.")
    ks = [hidden_position(g, v) for v in neurons]
    if len(ks) < 2 or len(set(ks)) != len(ks):
        raise ValueError(f"A channel group needs two or more different hidden neurons; got positions {ks}.")
    P, S = pair_structure(g, ks[0], ks[1])[2:]
    for k in ks[2:]:
        pair_structure(g, ks[0], k)  # (raises unless they share predecessors and successors)
    act = net.activation_of(ks[0])
    if any(net.activation_of(k) != act for k in ks):
        raise ValueError(f"Neurons {[g.hidden[k] for k in ks]} use different activations; a channel needs one.")
    idx = lambda vs: np.array([g.index[u] for u in vs])  # noqa: E731
    cols = idx([g.hidden[k] for k in ks])
    W = net.weights
    return ChannelGroup(
        W_in=W[idx(P)][:, cols].T,
        A_out=W[cols][:, idx(S)],
        neurons=tuple(ks),
        graph=g,
        activation=act,
        predecessors=P,
        successors=S,
    )


def group_output(group: ChannelGroup, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N s"]:
    """What the group sends to its successors: `sum_i a_i sigma(w_i.u)`, one column per
    successor (`net` when the predecessors are hidden)."""
    U = predecessor_values(group, X, net=net)
    return group.activation(U @ group.W_in.T) @ group.A_out


def group_limit(group: ChannelGroup, X: ArrayLike, *, net: DAGNetwork | None = None) -> Float[Array, "N s"]:
    """The gated linear unit the group tends to as its input weights merge:
    `c sigma(w.u) + (V u) sigma'(w.u)`, one column per successor (for a pair, `glu_limit`).

    **Arguments:** `group`; inputs `X` `(N, d_in)`; `net` when the predecessors are hidden.

    **Returns:** `(N, s)`.
    """
    return gated_linear_limit(group, X, net=net, caller="group_limit")
