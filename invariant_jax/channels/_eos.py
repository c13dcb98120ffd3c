"""Full-batch gradient descent inside a flat channel: the edge of stability.

GD with step `lr` is stable at a minimum only while the top Hessian eigenvalue stays
below `2/lr`. Along a channel the sharpness grows like `1/eps^2`, so GD walking down a
channel must stall where the sharpness reaches `2/lr` (it oscillates across the
channel and keeps drifting slowly). `gd_channel_trace` runs GD from one network at
several learning rates at once and records, every `record_every` updates, the loss,
the pair's `eps`, the top Hessian eigenvalue and the gradient norm.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._checks import check_integer
from .._results import RESULTS, is_success, result_where
from ..losses import check_data, edge_loss_fn, require_smooth
from ..network import DAGNetwork
from ._glu import hidden_position, pair_structure

__all__ = ["ChannelGDTrace", "gd_channel_trace"]


class ChannelGDTrace(eqx.Module):
    """Result of `gd_channel_trace`; arrays have shape `(n_lrs, n_records)`.

    **Fields:** `lrs`, `steps` (`(n_records,)` update counts), `loss`, `eps`, `sharpness`
    (top Hessian eigenvalue), `grad_norm`, `theta_final` (`(n_lrs, E)`). `result` (per
    learning rate): `successful`, or `training_diverged` where a recorded loss or the
    final weights are not finite; `success` says which.
    """

    lrs: Float[Array, " K"]
    steps: np.ndarray
    loss: Float[Array, "K T"]
    eps: Float[Array, "K T"]
    sharpness: Float[Array, "K T"]
    grad_norm: Float[Array, "K T"]
    theta_final: Float[Array, "K E"]

    @property
    def result(self) -> RESULTS:
        ok = np.all(np.isfinite(np.asarray(self.loss)), axis=-1) & np.all(
            np.isfinite(np.asarray(self.theta_final)), axis=-1
        )
        return result_where(ok, RESULTS.successful, RESULTS.training_diverged)

    @property
    def success(self) -> np.ndarray:
        return np.asarray(is_success(self.result))


def gd_channel_trace(
    net: DAGNetwork, pair, X, Y, lrs, *, n_steps: int, record_every: int = 100, loss="mse"
) -> ChannelGDTrace:
    """Full-batch GD `theta <- theta - lr grad L` from `net` for every `lr` in `lrs`
    (vmapped), recording loss, the channel pair's `eps = ||w_i - w_j|| / 2`, the top
    Hessian eigenvalue (`jnp.linalg.eigvalsh` of the exact Hessian) and `||grad L||`
    every `record_every` updates (the first record is before any update).

    **Arguments:** `net` (smooth activation), `pair = (i, j)` hidden positions or labels,
    data `X`, `Y`, `lrs` (positive), `n_steps` (a multiple of `record_every`), `loss`.

    **Returns:** a `ChannelGDTrace`.
    """
    require_smooth(net, "gd_channel_trace")
    X, Y = check_data(net.graph, X, Y)
    lrs = jnp.asarray(lrs, dtype=net.edge_weights().dtype).reshape(-1)
    if not bool(jnp.all(lrs > 0)):
        raise ValueError(f"Every learning rate must be positive; got {np.asarray(lrs).tolist()}.")
    check_integer("n_steps", n_steps, minimum=1)
    check_integer("record_every", record_every, minimum=1)
    if n_steps % record_every:
        raise ValueError(f"n_steps must be a positive multiple of record_every; got {n_steps!r}, {record_every!r}.")
    g = net.graph
    i, j = (hidden_position(g, v) for v in pair)
    vi, vj, P, _ = pair_structure(g, i, j)
    e = {edge: n for n, edge in enumerate(g.edges)}
    idx_i = jnp.array([e[(u, vi)] for u in P])
    idx_j = jnp.array([e[(u, vj)] for u in P])
    L = edge_loss_fn(net, X, Y, loss)
    vg = jax.value_and_grad(L)

    def record(th):
        f, gr = vg(th)
        lam = jnp.linalg.eigvalsh(jax.hessian(L)(th))[-1]
        return f, 0.5 * jnp.linalg.norm(th[idx_i] - th[idx_j]), lam, jnp.linalg.norm(gr)

    @jax.jit
    def run(theta0, lrs):
        def one(lr):
            def block(th, _):
                out = record(th)
                th = jax.lax.fori_loop(0, record_every, lambda _, t: t - lr * jax.grad(L)(t), th)
                return th, out

            th, recs = jax.lax.scan(block, theta0, None, length=n_steps // record_every)
            last = record(th)
            recs = tuple(jnp.concatenate([r, l[None]]) for r, l in zip(recs, last))
            return th, recs

        return jax.vmap(one)(lrs)

    th, (f, eps, lam, gn) = run(net.edge_weights(), lrs)
    steps = np.arange(n_steps // record_every + 1) * record_every
    return ChannelGDTrace(lrs=lrs, steps=steps, loss=f, eps=eps, sharpness=lam, grad_norm=gn, theta_final=th)
