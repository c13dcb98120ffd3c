"""The pieces of the flat-channels flow phase that MLPGradientFlow.jl defines: its
`weightnorm`, its soft `maxnorm` penalty, and the per-run record (a log-spaced
trajectory of loss, weightnorm, gradient norm and closest-pair distance; the minimum
Hessian eigenvalue at the end) that decides whether a run ended at a minimum, a saddle
or in a channel. Used by the convergence phase (`_converge`); public names, re-exported by
`ij.channels`.

The penalty, as MLPGradientFlow.jl (`src/MLPGradientFlow.jl`, `_loss`) writes it:

    if nx > maxnorm
        res += (nx - maxnorm)^3/3 * n_samples(net)
    end

with `nx = weightnorm(x) = sum(abs2, x)/(2*length(x))`, added to its loss
`sum((net(x) - target).^2)` (a sum over the samples, no 1/2). This package's loss is
`L = (1/2N) sum ||f - y||^2`, i.e. MLPGradientFlow's divided by `2N`, so the same
landscape in our units is `L + maxnorm_penalty(theta, maxnorm)` with

    maxnorm_penalty = (weightnorm - maxnorm)^3 / 6   if weightnorm > maxnorm, else 0

(MLPGradientFlow's penalty divided by `2N`). Gradient flow on it is MLPGradientFlow's ODE
with time rescaled: `t_ours = 2N t_MLPGradientFlow` (unit sample weights).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._checks import check_positive
from ..network import DAGNetwork

__all__ = [
    "weightnorm",
    "maxnorm_penalty",
    "MaxnormPenalty",
    "PENALTY_FORMS",
    "penalty_strength",
    "closest_pair_distance",
    "min_hessian_eigenvalue",
    "TrajectoryRecord",
]


def weightnorm(theta: Float[ArrayLike, "... E"]) -> Float[Array, "..."]:
    """MLPGradientFlow's `weightnorm(x) = sum(x^2) / (2 length(x))` (half the mean
    square, not the Euclidean norm). The paper counts a run infinite when it is >= 1e3."""
    theta = jnp.asarray(theta)
    return jnp.sum(theta**2, axis=-1) / (2 * theta.shape[-1])


def maxnorm_penalty(theta: Float[Array, "... E"], maxnorm: float) -> Float[Array, "..."]:
    """MLPGradientFlow.jl's soft `maxnorm` penalty in this package's loss units:
    `(weightnorm(theta) - maxnorm)^3 / 6` where `weightnorm(theta) > maxnorm`, else 0
    (theirs, `(nx - maxnorm)^3/3 * n_samples`, added to `sum (f - y)^2`, divided by `2N`;
    see the module docstring). Twice continuously differentiable.

    **Arguments:** `theta`: edge weights (any leading batch axes); `maxnorm`: the threshold.

    **Returns:** the penalty, one value per leading index.
    """
    excess = jnp.maximum(weightnorm(theta) - maxnorm, 0.0)
    return excess**3 / 6


PENALTY_FORMS = ("n_samples", "unscaled")
"""The two versions of MLPGradientFlow.jl's penalty: `"n_samples"`, its `_loss` since
2be60bf (`(nx - maxnorm)^3/3 * n_samples(net)`), and `"unscaled"`, the form before it
(without `n_samples`), which the authors' committed Fig. 2(c, d) runs follow
(`benchmarks/channels_saddle_split.py` finds it from their data)."""


def penalty_strength(form: str, n_samples: int) -> float:
    """The `Objective` strength of `MaxnormPenalty` that is MLPGradientFlow's penalty
    `form` (`PENALTY_FORMS`) on `n_samples` samples, in this package's loss units (theirs
    divided by `2N`): 1 for `"n_samples"`, `1 / n_samples` for `"unscaled"`."""
    if form not in PENALTY_FORMS:
        raise ValueError(f"penalty form must be one of {PENALTY_FORMS}; got {form!r}.")
    check_positive("n_samples", n_samples)
    return 1.0 if form == "n_samples" else 1.0 / n_samples


class MaxnormPenalty(eqx.Module):
    """`net -> maxnorm_penalty(net.edge_weights(), maxnorm)`: the penalty as a regularizer
    for `ij.gradient_flow(..., loss=ij.Objective(loss, regularizer=MaxnormPenalty(maxnorm), strength=1.0))`.
    Hashable, so a flow with the same `maxnorm` reuses its compiled program."""

    maxnorm: float = eqx.field(static=True)

    def __check_init__(self):
        check_positive("maxnorm", self.maxnorm)

    def __call__(self, net: DAGNetwork) -> Float[Array, ""]:
        return maxnorm_penalty(net.edge_weights(), self.maxnorm)


def _twin_mask(net: DAGNetwork) -> np.ndarray:
    """Pairs (i < j) of hidden nodes with the same incoming edges (same predecessors)."""
    g = net.graph
    hid = np.asarray([g.index[v] for v in g.hidden], int)
    cols = np.asarray(g.mask)[:, hid].T  # (H, n): predecessors of each hidden node
    same = np.all(cols[:, None, :] == cols[None, :, :], axis=-1)
    return np.triu(same, k=1)


def closest_pair_distance(net: DAGNetwork, theta: Float[Array, "... E"]) -> Float[Array, "..."]:
    """The smallest Euclidean distance between the incoming weight vectors (bias
    included) of two hidden neurons with the same predecessors (e.g. one layer of an
    MLP): the distance that goes to 0 as two neurons merge into a channel. `inf` when no
    two hidden neurons share their predecessors.

    **Arguments:** `net` (its graph), `theta`: edge weights (any leading batch axes).

    **Returns:** the distance, one per leading index.
    """
    pairs = _twin_mask(net)
    hid = np.asarray([net.graph.index[v] for v in net.graph.hidden], int)
    theta = jnp.asarray(theta)
    if not pairs.any():
        return jnp.full(theta.shape[:-1], jnp.inf, theta.dtype)
    ii, jj = np.nonzero(pairs)

    def one(th):
        W = net.with_edge_weights(th).weights[:, hid]  # (n, H): column h = incoming weights of hidden h
        return jnp.min(jnp.linalg.norm(W[:, ii] - W[:, jj], axis=0))

    flat = theta.reshape(-1, theta.shape[-1])
    return jax.vmap(one)(flat).reshape(theta.shape[:-1])


def min_hessian_eigenvalue(hessian: Float[Array, "... E E"]) -> Float[Array, "..."]:
    """The smallest eigenvalue of a symmetric matrix (`jnp.linalg.eigvalsh`): negative at
    a saddle, about 0 along a flat direction, positive at a strict minimum."""
    return jnp.linalg.eigvalsh(hessian)[..., 0]


class TrajectoryRecord(eqx.Module):
    """A log-spaced record of one flow (or a batch of flows: leading axis `B`).

    **Fields** (shape `(..., K)`; rows past the end of a flow stopped early are NaN):
    `t` (gradient-flow time of `L = (1/2N) sum ||f - y||^2`: the first row is `t0`, the
    others geometric up to `t1`), `loss` (data loss, no penalty), `weightnorm`,
    `grad_norm` (`max |grad L|` of the data loss), `pair_distance`
    (`closest_pair_distance`).
    """

    t: Float[Array, "... K"]
    loss: Float[Array, "... K"]
    weightnorm: Float[Array, "... K"]
    grad_norm: Float[Array, "... K"]
    pair_distance: Float[Array, "... K"]

    @staticmethod
    def from_flow(
        net: DAGNetwork, ts: Float[Array, " K"], thetas: Float[Array, "K E"], losses: Float[Array, " K"], loss_fn
    ) -> TrajectoryRecord:
        """The record of one flow from its saved times `ts`, weights `thetas` and data
        losses (`Flow.ts`, `Flow.thetas`, `Flow.losses`); `loss_fn`: `theta -> L`.
        Traceable (use under `vmap`)."""
        done = jnp.isfinite(ts)  # diffrax marks the rows after an early stop with inf
        safe = jnp.where(done[:, None], thetas, 0.0)
        gmax = jnp.max(jnp.abs(jax.vmap(jax.grad(loss_fn))(safe)), axis=-1)
        nan = jnp.asarray(jnp.nan, thetas.dtype)
        keep = lambda v: jnp.where(done, v, nan)  # noqa: E731
        return TrajectoryRecord(
            t=keep(ts),
            loss=keep(losses),
            weightnorm=keep(weightnorm(safe)),
            grad_norm=keep(gmax),
            pair_distance=keep(closest_pair_distance(net, safe)),
        )

    @staticmethod
    def empty(batch: int, k: int, dtype=float) -> TrajectoryRecord:
        """An all-NaN record (`batch` runs, `k` rows): a run without a flow phase."""
        nan = jnp.full((batch, k), jnp.nan, dtype)
        return TrajectoryRecord(t=nan, loss=nan, weightnorm=nan, grad_norm=nan, pair_distance=nan)

    def to_dict(self) -> dict:
        """Plain nested lists (NaN kept as NaN), for JSON."""
        return {
            k: np.asarray(getattr(self, k)).tolist() for k in ("t", "loss", "weightnorm", "grad_norm", "pair_distance")
        }
