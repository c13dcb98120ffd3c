"""The channel figure: a neuron pair's channel coordinates `eps`, `c`, `a` and the loss
along a saved flow, against flow time on a log axis."""

from __future__ import annotations

import jax
import numpy as np

from ..flow import Flow
from ._glu import ChannelPair, channel_coordinates, hidden_position


def pair_trajectory(flow: Flow, pair) -> dict:
    """The channel coordinates of `pair` at every finite saved state of `flow` with `t > 0`
    (the states a log time axis can show).

    **Arguments:**

    - `flow`: one `Flow` from `ij.gradient_flow` (not a batch: index a batched flow first),
        saved at several times, e.g. `saveat=ij.SaveTimes(spacing="log")`.
    - `pair`: `(i, j)`, positions in `graph.hidden` or labels, or a `ChannelPair` (from
        `detect_channels` or `confirm_channel`).

    **Returns:** a dict of NumPy arrays: `ts` `(T,)`, `eps` `(T,)`, `c` and `a` `(T, k)`
    (one column per successor), `loss` `(T,)`, `nodes` (the pair's labels) and `successors`.
    """
    if not isinstance(flow, Flow):
        raise TypeError(f"channel_figure needs a Flow from ij.gradient_flow; got {type(flow).__name__}.")
    if np.ndim(flow.ts) != 1:
        raise ValueError(
            f"channel_figure draws one flow; this one is a batch of shape {np.shape(flow.ts)[:-1]}: "
            "pick one with jax.tree.map(lambda x: x[k], flow) or run gradient_flow on one network."
        )
    g = flow.network.graph
    i, j = (pair.i, pair.j) if isinstance(pair, ChannelPair) else pair
    i, j = hidden_position(g, i), hidden_position(g, j)
    ts = np.asarray(flow.ts)
    thetas = np.asarray(flow.thetas)
    keep = np.isfinite(ts) & (ts > 0) & np.all(np.isfinite(thetas), axis=1)
    if not keep.any():
        raise ValueError(
            "The flow has no finite saved state at t > 0 to draw; save more times (saveat=ij.SaveTimes(spacing='log'))."
        )
    net = flow.network

    def coords(theta):
        p = channel_coordinates(net.with_edge_weights(theta), i, j)
        return p.eps, p.c, p.a

    eps, c, a = jax.vmap(coords)(thetas[keep])
    return dict(
        ts=ts[keep],
        eps=np.asarray(eps),
        c=np.asarray(c),
        a=np.asarray(a),
        loss=np.asarray(flow.losses)[keep],
        nodes=(g.hidden[i], g.hidden[j]),
        successors=channel_coordinates(net, i, j).successors,
    )


def channel_title(flow: Flow, nodes) -> str:
    """One line naming the configuration: the graph, the activation, the pair, the final
    time and the tolerances."""
    g = flow.network.graph
    acts = "/".join(a.name for a in flow.network.activations)
    return (
        f"pair {nodes[0]}, {nodes[1]} | {len(g.hidden)} hidden, {len(g.edges)} edges | {acts} | "
        f"t_final={float(flow.t_final):.3g} | rtol={flow.rtol:g}, atol={flow.atol:g}"
    )


def channel_figure(flow: Flow, pair, *, title: str | None = None):
    """A neuron pair along a flow: `eps` (half the distance of the input weights), `c`
    (sum of the output weights), `a = eps (a_i - a_j)` and the loss, against flow time on a
    log axis (MSE time: `L = (1/2N) sum ||f - y||^2`). The coordinates are
    `channel_coordinates` of each saved state; in a channel `eps -> 0` while `c` and `a`
    settle (the pair tends to its GLU limit) and the loss keeps falling.

    **Arguments:**

    - `flow`: one `Flow` saved at several times (`saveat=ij.SaveTimes(spacing="log")`).
    - `pair`: `(i, j)` (positions in `graph.hidden` or labels) or a `ChannelPair`.
    - `title`: a prefix for the figure's title, which names the configuration
        (`channel_title`).

    **Returns:** a matplotlib `Figure` with four axes (`eps`, `c`, `a`, loss), one line per
    successor in the `c` and `a` axes.
    """
    import matplotlib.pyplot as plt

    tr = pair_trajectory(flow, pair)
    ts = tr["ts"]
    fig, axs = plt.subplots(2, 2, figsize=(9.5, 6.5), layout="constrained")
    ax_eps, ax_c, ax_a, ax_loss = axs.ravel()
    k = tr["c"].shape[1]
    labels = [f"successor {s}" for s in tr["successors"]]
    ax_eps.plot(ts, tr["eps"], color="C0")
    ax_eps.set_ylabel("eps = ||w_i - w_j|| / 2")
    ax_eps.set_title("input-weight distance", fontsize=9)
    if np.all(tr["eps"] > 0):
        ax_eps.set_yscale("log")
    for m in range(k):
        ax_c.plot(ts, tr["c"][:, m], color=f"C{m % 10}", label=labels[m])
        ax_a.plot(ts, tr["a"][:, m], color=f"C{m % 10}", label=labels[m])
    ax_c.set_ylabel("c = a_i + a_j")
    ax_c.set_title("sum of the output weights", fontsize=9)
    ax_a.set_ylabel("a = eps (a_i - a_j)")
    ax_a.set_title("GLU coefficient (finite in a channel)", fontsize=9)
    if k > 1:
        ax_c.legend(fontsize=7)
        ax_a.legend(fontsize=7)
    ax_loss.plot(ts, tr["loss"], color="C3")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("loss along the flow", fontsize=9)
    if np.all(tr["loss"] > 0):
        ax_loss.set_yscale("log")
    for ax in axs.ravel():
        ax.set_xscale("log")
        ax.set_xlabel("t (loss = (1/2N) sum ||f - y||^2)")
    head = channel_title(flow, tr["nodes"])
    fig.suptitle(f"{title} | {head}" if title else head, fontsize=10)
    return fig
