"""Saddle lines (Fukumizu and Amari): duplicating a neuron of a critical point of a
narrower network gives a line of critical points of the wider one; the Hessian along
the line tells where it is a saddle, and a push along the most negative eigenvector
lets gradient flow escape."""

from __future__ import annotations

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._checks import check_finite, check_positive
from .._results import RESULTS, is_success, result_where
from ..activations import Activation
from ..flow import Flow, gradient_flow
from ..graph import DAG
from ..losses import check_data, edge_loss_fn, hessian, loss_gradient, require_smooth
from ..network import DAGNetwork
from ._glu import hidden_position

__all__ = ["duplicate_neuron", "SaddleLine", "saddle_line", "Escape", "escape_saddle", "refine_critical_point"]


def _copy_label(g: DAG, v):
    m = re.fullmatch(r"(.*_)(\d+)", v) if isinstance(v, str) else None
    if m:  # mlp-style "h1_3": next free index in that layer
        k = 0
        while f"{m.group(1)}{k}" in g.index:
            k += 1
        return f"{m.group(1)}{k}"
    new = f"{v}'" if isinstance(v, str) else (v, "copy")
    while new in g.index:
        new = f"{new}'" if isinstance(new, str) else (new, "copy")
    return new


def _duplicate_graph(g: DAG, i: int):
    v = g.hidden[i]
    new = _copy_label(g, v)
    edges = list(g.edges)
    edges += [(u, new) for u in g.predecessors(v)] + [(new, s) for s in g.successors(v)]
    hidden = list(g.hidden) + [new]
    g2 = DAG.from_edges(
        edges, inputs=list(g.inputs), outputs=list(g.outputs), constants=list(g.constants), hidden=hidden
    )
    # where each new edge takes its weight from, and which ones scale by gamma / 1 - gamma
    old = {e: k for k, e in enumerate(g.edges)}
    src = np.array([old[e] if e in old else old[(v, e[1]) if e[0] == new else (e[0], v)] for e in g2.edges])
    out_i = np.array([e[0] == v for e in g2.edges])
    out_new = np.array([e[0] == new for e in g2.edges])
    return g2, new, src, out_i, out_new


def _check_gamma(gamma):
    try:
        gf = float(gamma)
    except (TypeError, ValueError):
        raise TypeError(f"gamma must be a real number; got {gamma!r}.") from None
    check_finite(
        np.asarray(gf),
        f"gamma must be finite; got {gamma!r}. The copies get output weights gamma a and "
        "(1 - gamma) a, so any finite real gamma gives a point on the saddle line.",
    )


def duplicate_neuron(net: DAGNetwork, i, gamma: Float[ArrayLike, ""]) -> DAGNetwork:
    """Split hidden neuron `i` into two copies: a width-`r` net becomes width `r + 1`.

    Input weights (bias included) are copied; the output weights become `gamma a_i` and
    `(1 - gamma) a_i`. The function, hence the loss, is the same for every `gamma`, and
    a critical point stays critical.

    **Arguments:** `net`; `i`, a position in `graph.hidden` (or a hidden label); `gamma`,
    any finite real number.

    **Returns:** the wider `DAGNetwork`; the copy is labelled like its layer (`"h1_3"` ->
    next free `"h1_k"`) or with a trailing `'`.
    """
    g = net.graph
    i = hidden_position(g, i)
    if not isinstance(gamma, jax.core.Tracer):
        _check_gamma(gamma)
    g2, new, src, out_i, out_new = _duplicate_graph(g, i)
    theta = net.edge_weights()[src]
    gamma = jnp.asarray(gamma, theta.dtype)
    theta = jnp.where(out_i, gamma * theta, jnp.where(out_new, (1 - gamma) * theta, theta))
    act: Activation | tuple[Activation, ...]
    if isinstance(net.activation, tuple):
        acts = dict(zip(g.hidden, net.activation))
        acts[new] = net.activation[i]
        act = tuple(acts[v] for v in g2.hidden)
    else:
        act = net.activation
    return DAGNetwork(g2, act, edge_weights=theta)


class SaddleLine(eqx.Module):
    """Loss, gradient and Hessian spectrum along `gamma -> duplicate_neuron(net, i, gamma)`.

    **Fields:** `gammas` `(G,)`, `losses` `(G,)`, `grad_norms` `(G,)`, `eigenvalues`
    `(G, E)` (ascending), `min_eigenvalue` `(G,)`, `is_saddle` `(G,)` (min eigenvalue
    below `-tol`), `tol`. `result` (per `gamma`): `successful`, or `nonfinite_state`
    where the loss or the spectrum is not finite; `success` says which.
    """

    gammas: Float[Array, " G"]
    losses: Float[Array, " G"]
    grad_norms: Float[Array, " G"]
    eigenvalues: Float[Array, "G E"]
    min_eigenvalue: Float[Array, " G"]
    is_saddle: Array
    tol: float = eqx.field(static=True)

    @property
    def result(self) -> RESULTS:
        ok = np.isfinite(np.asarray(self.losses)) & np.all(np.isfinite(np.asarray(self.eigenvalues)), axis=-1)
        return result_where(ok, RESULTS.successful, RESULTS.nonfinite_state)

    @property
    def success(self) -> np.ndarray:
        return np.asarray(is_success(self.result))


def saddle_line(net: DAGNetwork, i, X, Y, gammas: ArrayLike, *, loss="mse", tol: float = 1e-9) -> SaddleLine:
    """Evaluate the saddle line through hidden neuron `i` of `net` at each `gamma`.

    **Arguments:** `net` (ideally a critical point, see `refine_critical_point`); `i`;
    data `X`, `Y`; `gammas`; `loss`; `tol` for calling an eigenvalue negative.

    **Returns:** a `SaddleLine`.
    """
    require_smooth(net, "saddle_line")
    X, Y = check_data(net.graph, X, Y)
    gammas = jnp.asarray(gammas, dtype=net.weights.dtype)
    if gammas.ndim != 1 or not bool(jnp.all(jnp.isfinite(gammas))):
        raise ValueError("gammas must be a 1-D array of finite numbers.")
    i = hidden_position(net.graph, i)

    def at(gm):
        n2 = duplicate_neuron(net, i, gm)
        L, gr = loss_gradient(n2, X, Y, loss=loss)
        return L, jnp.linalg.norm(gr), jnp.linalg.eigvalsh(hessian(n2, X, Y, loss=loss))

    Ls, gn, ev = jax.vmap(at)(gammas)
    return SaddleLine(
        gammas=gammas,
        losses=Ls,
        grad_norms=gn,
        eigenvalues=ev,
        min_eigenvalue=ev[:, 0],
        is_saddle=ev[:, 0] < -tol,
        tol=float(tol),
    )


class Escape(eqx.Module):
    """The escape from a saddle along its most negative Hessian direction.

    **Fields:** `min_eigenvalue`, `direction` (unit eigenvector, edge order),
    `start` (the perturbed network), `flow` (the `Flow` from `start`), `loss_saddle`,
    `loss_final`. `result` and `success` are the flow's.
    """

    min_eigenvalue: Float[Array, ""]
    direction: Float[Array, " E"]
    start: DAGNetwork
    flow: Flow
    loss_saddle: Float[Array, ""]
    loss_final: Float[Array, ""]

    @property
    def result(self) -> RESULTS:
        return self.flow.result

    @property
    def success(self):
        return self.flow.success


def escape_saddle(net: DAGNetwork, X, Y, *, size: float = 1e-3, t1: float = 1e3, loss="mse", **flow_kwargs) -> Escape:
    """Perturb `net` by `size` along the Hessian's most negative eigenvector and run
    gradient flow (`flow_kwargs` go to `gradient_flow`). At a strict saddle the loss then
    drops below the saddle's.

    **Returns:** an `Escape`.
    """
    check_positive("size", size)
    X, Y = check_data(net.graph, X, Y)
    ev, vecs = jnp.linalg.eigh(hessian(net, X, Y, loss=loss))
    d = vecs[:, 0]
    start = net.with_edge_weights(net.edge_weights() + size * d)
    flow = gradient_flow(start, X, Y, t1, loss=loss, **flow_kwargs)
    return Escape(
        min_eigenvalue=ev[0],
        direction=d,
        start=start,
        flow=flow,
        loss_saddle=edge_loss_fn(net, X, Y, loss)(net.edge_weights()),
        loss_final=flow.loss_final,
    )


def refine_critical_point(
    net: DAGNetwork, X, Y, *, loss="mse", max_iter: int = 50, tol: float = 1e-13, rcond: float = 1e-10
) -> DAGNetwork:
    """Newton's method on `grad L = 0` with a pseudo-inverse Hessian (eigenvalues below
    `rcond * max|eigenvalue|` are dropped, so symmetry directions are left alone). Start
    it near a critical point, e.g. at the end of a gradient flow.

    **Returns:** the refined network; stops when `|grad| < tol` or after `max_iter` steps.
    """
    require_smooth(net, "refine_critical_point")
    X, Y = check_data(net.graph, X, Y)
    L = edge_loss_fn(net, X, Y, loss)
    grad, hess = jax.jit(jax.grad(L)), jax.jit(jax.hessian(L))
    theta = net.edge_weights()
    for _ in range(max_iter):
        gr = grad(theta)
        if float(jnp.linalg.norm(gr)) < tol:
            break
        ev, V = jnp.linalg.eigh(0.5 * (hess(theta) + hess(theta).T))
        keep = jnp.abs(ev) > rcond * jnp.max(jnp.abs(ev))
        step = V @ jnp.where(keep, (V.T @ gr) / jnp.where(keep, ev, 1.0), 0.0)
        theta = theta - step
    return net.with_edge_weights(theta)
