"""Discrete training with optax (SGD, Adam) and an optional regularizer: what gradient
flow is not.

`fit` runs a jitted loop: a loop over epochs, and within an epoch over minibatches
(or one full batch). Every `log_every` epochs it logs the data loss, the objective
(loss + strength * R), train/test accuracy, the rank of `J_G`, its nuclear norm, the
number of hidden neurons cut off by (near-)zero weights, and the conserved quantities
`c = B~ theta^2` with their drift from `c(0)`. Under SGD with a small step `c` drifts by
O(lr^2) per step; under Adam, momentum or a regularizer it drifts at first order, and the
log shows it.

*One compiled program per structure.* The loop is compiled once per graph, loss,
regularizer, optimizer kind, `proximal`, `batch_size`, accuracy flag, batched or not, and
dtypes and shapes. The numbers (`epochs`, `log_every`, `learning_rate`, `strength`, `tol`,
`working_tol`) are arguments of the program: a pilot of 30 epochs and a run of 3000 epochs
at another learning rate share it. A named optimizer takes its learning rate through
`optax.inject_hyperparams`; a user's optax transformation keeps its own hyperparameters. Each
call of the program runs up to 32 log blocks; `fit` loops over the calls in Python.

*Cut off.* A hidden neuron is cut off when the edges with `|theta_e| > tol` do not
connect it (ignoring direction) to any input or output node; `rank J_G = H - (number of
cut-off groups)` at that threshold (`invariants.singular_subnetworks` is the
non-jittable reference). Plain (sub)gradient steps make weights hover around zero rather
than reach it, so either use `TrainOptions(proximal=True)` (exact zeros) or a `tol` that
matches the scale the weights hover at.

*Proximal steps* (`TrainOptions(proximal=True)`) replace the regularizer's gradient by its proximal map
with step `learning_rate * strength`, applied after each optimizer update:
soft-thresholding for `"l1"`, shrinking by `1 / (1 + step)` for `"l2"`, group
soft-thresholding of each hidden node's fan-in for `"group_lasso"`, and for `"nuclear"`:

- no edge joins two hidden nodes (one hidden layer): group soft-thresholding of the edges
  of each hidden node, the exact proximal map (`||J_G||_* = 2 sum_v ||theta_{edges(v)}||`);
- any other DAG: the *working-set* forward-backward step. At the current weights, take
  the groups `W` of `regularizers.nuclear_working_set(net, working_tol)` (hidden nodes that
  the edges with `|theta| > working_tol` leave cut off, merged along edges joining them)
  and the projector `P` onto their indicators. `||J_G||_*` is bounded above by
  `sum_W (2/sqrt|W|) ||theta_{dW}|| + ||(I - P) J_G||_*`, with equality wherever the
  boundaries `dW` are zero (`regularizers` module docstring). The step is a forward
  (optimizer) step on `loss + strength ||(I - P) J_G||_*`, the part that is smooth near
  those cut-off sets, then the exact proximal map of the group norms: group
  soft-thresholding of each boundary `theta_{dW}` with threshold `2 step / sqrt(|W|)`,
  which sets whole boundaries to exactly zero. Finally the edges joining two hidden nodes
  that exact zeros cut off are set to 0: nothing but their own `||J_W||_*` depends on
  them, and its minimum is at 0 (an exact block-coordinate step). The groups are
  re-chosen at every step; `working_tol` only chooses which cut-off sets are targeted
  (the bound holds for any choice). Default `working_tol = 20 * learning_rate * strength`,
  ten times the largest threshold of the group step.
  This is forward-backward splitting (Combettes and Wajs, 2005) on a bound that is tight
  exactly on the manifold where the groups are cut off, where the nuclear norm's
  non-smoothness is that of the group norms (the partial-smoothness structure of Lewis,
  2002); for such regularisers forward-backward reaches the manifold in finitely many steps
  under non-degeneracy conditions (Liang, Fadili and Peyre, 2017). The bound changes with
  the working set, so this motivates the step rather than proves it; `docs/pruning.md`
  has the evidence. The smooth part costs one `H x H`
  `eigh` per step (`regularizers.gram_nuclear_norm`).

With SGD these are proximal gradient steps. With `TrainOptions(optimizer="adam")` the proximal step is
taken in Adam's metric: the threshold of coordinate `e` is multiplied by Adam's step factor
`1 / (sqrt(v_hat_e) + eps)` (a group's by the smallest factor over its edges), as in ProxGen
(Yun, Lozano and Yang, "Adaptive proximal gradient methods for structured neural
networks", NeurIPS 2021). With momentum or a user's optax transformation the proximal step
uses `learning_rate` alone (a heuristic).

References: P. L. Combettes, V. R. Wajs, "Signal recovery by proximal forward-backward
splitting", Multiscale Model. Simul. 4 (2005). A. S. Lewis, "Active sets, nonsmoothness,
and sensitivity", SIAM J. Optim. 13 (2002). J. Liang, J. Fadili, G. Peyre, "Activity
identification and local linear convergence of forward-backward-type methods", SIAM J.
Optim. 27 (2017). M. Yuan, Y. Lin, "Model selection and estimation in regression with
grouped variables", JRSS B 68 (2006) (group soft-thresholding).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache, partial
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray
from tqdm.auto import tqdm

from ._checks import check_integer, check_positive, take_deprecated
from ._results import RESULTS, is_success, result_code, result_from_code
from .graph import DAG
from .invariants import conserved_quantities
from .losses import check_data, get_loss
from .network import DAGNetwork
from .options import OBJECTIVE_KEYWORDS, Objective, as_objective
from .regularizers import (
    get_regularizer,
    gram_nuclear_norm,
    group_boundary_norms,
    has_hidden_to_hidden_edges,
    nuclear_norm,
    nuclear_working_set,
)

__all__ = [
    "OPTIMIZERS",
    "TrainOptions",
    "TrainLog",
    "TrainResult",
    "fit",
    "cut_off_mask",
    "n_cut_off_groups",
    "get_optimizer",
]

OPTIMIZERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "sgd": optax.sgd,
    "momentum": lambda lr: optax.sgd(lr, momentum=0.9),
    "adam": optax.adam,
}


def get_optimizer(optimizer: str | optax.GradientTransformation, learning_rate: float) -> optax.GradientTransformation:
    """An optax transformation by name (`"sgd"`, `"momentum"`, `"adam"`) with the
    given learning rate, or an optax `GradientTransformation` passed through."""
    if isinstance(optimizer, optax.GradientTransformation):
        return optimizer
    if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS:
        hint = " (plain gradient descent is 'sgd')" if isinstance(optimizer, str) and optimizer.lower() == "gd" else ""
        raise ValueError(
            f"Unknown optimizer {optimizer!r}{hint}; choose one of {sorted(OPTIMIZERS)} or pass an "
            "optax.GradientTransformation."
        )
    return OPTIMIZERS[optimizer.lower()](learning_rate)


class TrainOptions(eqx.Module):
    """How `fit` trains: the optimizer and its schedule, as an optax user sets them up.

    **Fields:**

    - `optimizer`: `"sgd"`, `"momentum"`, `"adam"` (`ij.OPTIMIZERS`), or an optax
        `GradientTransformation` (then `learning_rate` only scales the proximal step and
        the default `working_tol`).
    - `learning_rate`: the step size (positive).
    - `epochs`: passes over the data (a positive integer, a multiple of `log_every`).
    - `batch_size`: minibatch size (a positive integer, at most the number of samples), or
        `None` for full batch. Each epoch draws a fresh permutation and drops the last
        `N mod batch_size` samples.
    - `log_every`: log every this many epochs (epoch 0 is always logged).
    - `proximal`: use the regularizer's proximal map instead of its gradient (module
        docstring); gives exact zeros for `"l1"`, `"group_lasso"` and `"nuclear"` (on any
        DAG: the working-set step).
    - `working_tol`: for `regularizer="nuclear"` with `proximal=True` on a graph with
        hidden-to-hidden edges, the weight size below which edges may delimit a targeted
        cut-off group (`>= 0`); `None`: `20 * learning_rate * strength`.
    - `tol`: the zero threshold (`>= 0`) of the logged `rank` and `n_cut_off`: a neuron
        counts as cut off when every edge joining it to the rest has `|theta| <= tol`.
        Default 1e-6, at which weights that plain (sub)gradient steps leave hovering near
        zero count; `tol=0` with `proximal=True` (exact zeros).
    """

    optimizer: str | optax.GradientTransformation = "adam"
    learning_rate: float = 1e-2
    epochs: int = 1000
    batch_size: int | None = None
    log_every: int = 10
    proximal: bool = False
    working_tol: float | None = None
    tol: float = 1e-6

    def __check_init__(self):
        check_positive("learning_rate", self.learning_rate)
        get_optimizer(self.optimizer, self.learning_rate)  # an unknown name fails here, with the choices
        check_integer("epochs", self.epochs, minimum=1)
        check_integer("log_every", self.log_every, minimum=1)
        if self.epochs % self.log_every:
            raise ValueError(f"epochs ({self.epochs}) must be a multiple of log_every ({self.log_every}).")
        if self.batch_size is not None:
            check_integer("batch_size", self.batch_size, minimum=1)
        if not isinstance(self.proximal, bool | np.bool_):
            raise TypeError(f"proximal must be True or False; got {self.proximal!r}.")
        check_positive("working_tol", self.working_tol, allow_none=True, allow_zero=True)
        check_positive("tol", self.tol, allow_zero=True)


FIT_KEYWORDS = {
    **{
        name: f"pass options=ij.TrainOptions({name}=...) instead"
        for name in (
            "optimizer",
            "learning_rate",
            "epochs",
            "batch_size",
            "log_every",
            "proximal",
            "working_tol",
            "tol",
        )
    },
    "regularizer": OBJECTIVE_KEYWORDS["regularizer"],
    "strength": OBJECTIVE_KEYWORDS["strength"],
}
"""The deprecated keywords of `fit`, with their replacements."""


# ---------------------------------------------------------------- cut-off neurons (jittable)


def _active_adjacency(graph: DAG, theta, tol):
    rows, cols = graph.edge_index
    n = graph.n_nodes
    on = (jnp.abs(theta) > tol).astype(theta.dtype)
    A = jnp.zeros(theta.shape[:-1] + (n, n), theta.dtype).at[..., rows, cols].add(on)
    return A + jnp.swapaxes(A, -1, -2)


@partial(jax.jit, static_argnums=0)
def _cut_off_and_groups(graph: DAG, theta, tol):
    """`(cut, n_groups)` at threshold `tol` (an argument of the program, not compiled in:
    a new `tol` compiles nothing; it is compared in `theta`'s dtype, as a Python number is)."""
    n = graph.n_nodes
    H = len(graph.hidden)
    A = _active_adjacency(graph, theta, jnp.asarray(tol, theta.dtype)) > 0
    grounded = np.zeros(n, bool)
    grounded[[graph.index[v] for v in graph.inputs + graph.outputs]] = True
    r0 = jnp.broadcast_to(jnp.asarray(grounded), theta.shape[:-1] + (n,))

    def spread(_, r):
        return r | jnp.any(A & r[..., None, :], axis=-1)

    reach = jax.lax.fori_loop(0, max(H, 1), spread, r0)
    cut = ~reach
    big = n
    lab0 = jnp.where(cut, jnp.arange(n), big)

    def relabel(_, lab):
        nb = jnp.min(jnp.where(A, lab[..., None, :], big), axis=-1)
        return jnp.where(cut, jnp.minimum(lab, nb), big)

    lab = jax.lax.fori_loop(0, max(H, 1), relabel, lab0)
    n_groups = jnp.sum(cut & (lab == jnp.arange(n)), axis=-1)
    hid = slice(len(graph.inputs), len(graph.inputs) + H)
    return cut[..., hid], n_groups


def cut_off_mask(net: DAGNetwork, tol: float = 0.0) -> Bool[Array, "... H"]:
    """Which hidden neurons (in `graph.hidden` order) the edges with `|theta_e| <= tol`
    cut off from every input and output. Jittable; agrees with
    `ij.singular_subnetworks(net, tol)` (the union of its groups)."""
    check_positive("tol", tol, allow_zero=True)
    return _cut_off_and_groups(net.graph, net.edge_weights(), tol)[0]


def n_cut_off_groups(net: DAGNetwork, tol: float = 0.0) -> Int[Array, "..."]:
    """The number of groups in `ij.singular_subnetworks(net, tol)`, jittable, so that
    `rank J_G = len(graph.hidden) - n_cut_off_groups(net, tol)` at threshold `tol`."""
    check_positive("tol", tol, allow_zero=True)
    return _cut_off_and_groups(net.graph, net.edge_weights(), tol)[1]


# ---------------------------------------------------------------- results


class TrainLog(eqx.Module):
    """What `fit` logs every `log_every` epochs (and at epoch 0). Each field has a leading
    axis `T` (number of logs); after a batch of networks, a leading batch axis first.

    **Fields:** `epochs` `(T,)`, `loss` (data loss on the whole training set), `objective`
    (loss + strength * R), `train_accuracy`, `test_accuracy` (`nan` when not computed),
    `rank` (`H - n_cut_off_groups` at `tol`), `nuclear_norm` (`||J_G||_*`),
    `n_cut_off` (cut-off hidden neurons at `tol`), `conserved` `(T, H)`
    (`c = B~ theta^2`), `drift` (`max_v |c(t) - c(0)|`), `thetas` `(T, E)`.
    """

    epochs: Int[Array, " T"]
    loss: Float[Array, " T"]
    objective: Float[Array, " T"]
    train_accuracy: Float[Array, " T"]
    test_accuracy: Float[Array, " T"]
    rank: Int[Array, " T"]
    nuclear_norm: Float[Array, " T"]
    n_cut_off: Int[Array, " T"]
    conserved: Float[Array, "T H"]
    drift: Float[Array, " T"]
    thetas: Float[Array, "T E"]


class TrainResult(eqx.Module):
    """The result of `fit`.

    **Fields:** `network` (the trained `DAGNetwork`), `initial` (the starting one), `log`
    (a `TrainLog`), `result` (a `RESULTS` item, batched like the networks:
    `RESULTS.successful` where the weights stayed finite, `RESULTS.training_diverged`
    where the step diverged; its message says the fix), and the settings `optimizer`,
    `learning_rate`, `regularizer`, `strength`, `proximal`, `tol`, `batch_size`, `epochs`.

    `success` (as `Flow.success`) is read off `result`; `finite`, the flag that said the
    same, is deprecated.
    """

    network: DAGNetwork
    initial: DAGNetwork
    log: TrainLog
    result: RESULTS
    strength: Float[Array, ""]
    optimizer: str = eqx.field(static=True)
    learning_rate: float = eqx.field(static=True)
    regularizer: str = eqx.field(static=True)
    proximal: bool = eqx.field(static=True)
    tol: float = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    epochs: int = eqx.field(static=True)

    @property
    def success(self) -> Bool[Array, "..."]:
        """True where training ended with finite weights (`is_success(result)`)."""
        return is_success(self.result)

    @property
    def finite(self) -> Bool[Array, "..."]:
        """Deprecated: ask `success` (or `result == ij.RESULTS.training_diverged`)."""
        warnings.warn(
            "TrainResult.finite is deprecated; ask `res.success` (False where "
            "`res.result == ij.RESULTS.training_diverged`).",
            DeprecationWarning,
            stacklevel=2,
        )
        return ~(self.result == RESULTS.training_diverged)


# ---------------------------------------------------------------- the loop


class _Config(NamedTuple):
    """The structure of the training loop: one compiled program per value (and per
    batched-or-not, dtypes and shapes). The numbers are not in it: they are `_Numbers`,
    arrays of the program, so another learning rate, strength, `tol`, `working_tol`,
    `log_every` or number of epochs compiles nothing."""

    graph: DAG
    loss: str | Callable
    optimizer_spec: str | optax.GradientTransformation
    regularizer: Callable | None
    regularizer_name: str
    proximal: bool
    batch_size: int
    n_batches: int
    accuracy: bool


class _Numbers(NamedTuple):
    """The numeric settings, traced arguments of the compiled loop: `learning_rate`
    (the proximal step's scale; a named optimizer's own rate travels in its state, see
    `_optimizer`), `strength`, `tol`, `working_tol` (in the weights' dtype) and `log_every`
    (int32)."""

    learning_rate: Array
    strength: Array
    tol: Array
    working_tol: Array
    log_every: Array


_LOG_BLOCK = 32
"""Logs per compiled call: a fixed size (not one that depends on the number of epochs), so
that every run of a configuration reuses one program; the last call of a run fills part of it."""


def _is_working_set(cfg) -> bool:
    return cfg.proximal and cfg.regularizer_name == "nuclear" and has_hidden_to_hidden_edges(cfg.graph)


_PROXIMAL = ("l1", "l2", "nuclear", "group_lasso")
_DEFAULT_WORKING_FACTOR = 20.0


def _group_shrink(theta, norms, thresholds, edge_group, scale=None):
    """Multiply the edges of group `k` (`edge_group == k`; `-1`: none) by
    `max(0, 1 - thresholds_k / norms_k)` (0 for a zero group): group soft-thresholding.
    With a per-edge metric `scale` (Adam's `1 / (sqrt(v_hat) + eps)`), group `k`'s threshold
    is multiplied by the smallest `scale` over its edges (see `_adam_scale`)."""
    if scale is not None:
        smin = jax.ops.segment_min(
            jnp.where(edge_group >= 0, scale, jnp.inf), jnp.maximum(edge_group, 0), num_segments=norms.shape[-1]
        )
        thresholds = thresholds * jnp.where(jnp.isfinite(smin), smin, 1.0)
    factor = jnp.where(norms > thresholds, 1.0 - thresholds / jnp.where(norms > 0, norms, 1.0), 0.0)
    f_e = jnp.where(edge_group >= 0, factor[jnp.maximum(edge_group, 0)], 1.0)
    return theta * f_e


def _adam_scale(cfg, opt_state):
    """For `optimizer="adam"`: Adam's per-coordinate step factor `1 / (sqrt(v_hat) + eps)`,
    so that the proximal step is taken in the metric of Adam's own step (as ProxGen does:
    Yun, Lozano and Yang, "Adaptive proximal gradient methods for structured neural
    networks", NeurIPS 2021): exact for L1 and L2 (diagonal metric); for a group, the
    group's largest metric entry (a scalar metric that dominates the diagonal one, so the
    step is a majorised proximal step). `None` for other optimizers."""
    if cfg.optimizer_spec != "adam":
        return None
    st = opt_state.inner_state[0]  # inside optax.inject_hyperparams (`_optimizer`)
    b2, eps = 0.999, 1e-8  # optax.adam's defaults, which OPTIMIZERS["adam"] uses
    v_hat = st.nu / (1.0 - b2 ** st.count.astype(st.nu.dtype))
    return 1.0 / (jnp.sqrt(v_hat) + eps)


def _zero_inside_cut_off(graph: DAG, theta):
    """Set to 0 the edges joining two hidden nodes that the exact zeros cut off. Neither the
    loss nor any other term depends on them (no path to an output), only `||J_W||_*` of the
    group's own Jacobian, whose minimum is at 0: this is the exact minimisation over those
    coordinates (a block-coordinate step). Without it they would hover near 0 under the
    smooth part's constant-size gradient and blur the rank of `J_G`."""
    cut = _cut_off_and_groups(graph, theta, 0.0)[0]
    H = len(graph.hidden)
    n_in = len(graph.inputs)
    rows, cols = graph.edge_index
    cut_n = jnp.zeros(theta.shape[:-1] + (graph.n_nodes,), bool).at[..., n_in : n_in + H].set(cut)
    inside = cut_n[..., rows] & cut_n[..., cols]
    return jnp.where(inside, 0.0, theta)


def _prox(name, graph: DAG, theta, step, ws=None, scale=None):
    if name == "l1":
        t = step if scale is None else step * scale
        return jnp.sign(theta) * jnp.maximum(jnp.abs(theta) - t, 0.0)
    if name == "l2":
        return theta / (1.0 + (step if scale is None else step * scale))
    if name == "group_lasso":  # fan-in groups: edge e belongs to the group of its head, if hidden
        Bin = graph.incidence() > 0
        heads = jnp.asarray(np.where(Bin.any(axis=0), np.argmax(Bin, axis=0), -1))
        norms = jnp.sqrt(jnp.asarray(Bin, theta.dtype) @ theta**2)
        return _group_shrink(theta, norms, jnp.full(norms.shape, step, theta.dtype), heads, scale)
    if ws is not None:  # nuclear, any DAG: the working-set groups, threshold 2 step / sqrt|W|
        thr = 2.0 * step / jnp.sqrt(jnp.maximum(ws.size, 1.0))
        return _group_shrink(theta, group_boundary_norms(ws, theta), thr, ws.edge_group, scale)
    # nuclear, no hidden-hidden edges: each edge touches at most one hidden node, its group;
    # group soft-thresholding with threshold 2 step
    Babs = np.abs(graph.incidence()) > 0
    owner = jnp.asarray(np.where(Babs.any(axis=0), np.argmax(Babs, axis=0), -1))
    norms = jnp.sqrt(jnp.asarray(Babs, theta.dtype) @ theta**2)
    return _group_shrink(theta, norms, jnp.full(norms.shape, 2.0 * step, theta.dtype), owner, scale)


def _metrics(cfg: _Config, net: DAGNetwork, theta, nums: _Numbers, data, c0):
    X, Y, Xt, Yt = data
    n = net.with_edge_weights(theta)
    lossfn = get_loss(cfg.loss)
    pred = n.forward(X)
    L = lossfn(pred, Y)
    R = cfg.regularizer(n) if cfg.regularizer is not None else jnp.zeros((), theta.dtype)
    nan = jnp.asarray(jnp.nan, theta.dtype)
    if cfg.accuracy:
        tr = jnp.mean((pred > 0) == (Y > 0.5))
        te = jnp.mean((n.forward(Xt) > 0) == (Yt > 0.5)) if Xt is not None else nan
    else:
        tr = te = nan
    cut, groups = _cut_off_and_groups(cfg.graph, theta, nums.tol)
    c = conserved_quantities(n)
    return dict(
        loss=L,
        objective=L + nums.strength * R,
        train_accuracy=tr.astype(theta.dtype),
        test_accuracy=jnp.asarray(te, theta.dtype),
        rank=len(cfg.graph.hidden) - groups,
        nuclear_norm=nuclear_norm(n),
        n_cut_off=jnp.sum(cut),
        conserved=c,
        drift=jnp.max(jnp.abs(c - c0), initial=0.0),
        thetas=theta,
    )


@lru_cache(maxsize=64)
def _compiled(cfg: _Config, batched: bool):
    seg = _make_segment(cfg)
    if batched:
        seg = jax.vmap(seg, in_axes=(None, 0, 0, 0, None, None, None, 0))
    return eqx.filter_jit(seg)


def _optimizer(spec: str | optax.GradientTransformation, learning_rate) -> optax.GradientTransformation:
    """The optax transformation of `spec`. A named one (`OPTIMIZERS`) is wrapped in
    `optax.inject_hyperparams`, so that its learning rate is a number in its state (set by
    `init`, read by `update`) rather than a constant of the compiled program; its other
    settings stay as `OPTIMIZERS` builds them. A user's transformation passes through."""
    if isinstance(spec, optax.GradientTransformation):
        return spec
    make = OPTIMIZERS[spec]
    return optax.inject_hyperparams(lambda learning_rate: make(learning_rate))(learning_rate=learning_rate)


def _make_segment(cfg: _Config):
    lossfn = get_loss(cfg.loss)
    working = _is_working_set(cfg)

    def segment(net, theta, opt_state, key, nums: _Numbers, n_logs, data, c0):
        """`n_logs` (at most `_LOG_BLOCK`) blocks of `nums.log_every` epochs from `theta`,
        logged after each block into the rows of a `_LOG_BLOCK`-row buffer."""
        start = _metrics(cfg, net, theta, nums, data, c0)  # cheap; saves a second compile
        X, Y = data[0], data[1]
        N = X.shape[0]
        opt = _optimizer(cfg.optimizer_spec, nums.learning_rate)  # its update reads the rate off its state
        B = jnp.asarray(cfg.graph.incidence(), X.dtype)

        def objective(th, Xb, Yb, proj):
            n = net.with_edge_weights(th)
            L = lossfn(n.forward(Xb), Yb)
            if cfg.regularizer is not None and not cfg.proximal:
                L = L + nums.strength * cfg.regularizer(n)
            if working:  # ||(I - P) J_G||_*: the part of the working-set bound smooth near the groups
                L = L + nums.strength * gram_nuclear_norm(proj, th)
            return L

        grad = jax.grad(objective)

        def step(carry, batch):
            th, st = carry
            ws = nuclear_working_set(net.with_edge_weights(th), nums.working_tol) if working else None
            g = grad(th, *batch, None if ws is None else B - ws.projector @ B)
            upd, st = opt.update(g, st, th)
            th = optax.apply_updates(th, upd)
            if cfg.proximal:
                step_size = nums.learning_rate * nums.strength
                th = _prox(cfg.regularizer_name, cfg.graph, th, step_size, ws, _adam_scale(cfg, st))
            if working:
                th = _zero_inside_cut_off(cfg.graph, th)
            return (th, st), None

        def epoch(_, carry):
            th, st, k = carry
            if cfg.n_batches == 1 and cfg.batch_size == N:
                (th, st), _ = step((th, st), (X, Y))
            else:
                k, sub = jr.split(k)
                perm = jr.permutation(sub, N)[: cfg.n_batches * cfg.batch_size]
                perm = perm.reshape(cfg.n_batches, cfg.batch_size)
                (th, st), _ = jax.lax.scan(step, (th, st), (X[perm], Y[perm]))
            return th, st, k

        def log_block(i, carry):
            th, st, k, logs = carry
            th, st, k = jax.lax.fori_loop(0, nums.log_every, epoch, (th, st, k))  # a dynamic trip count
            row = _metrics(cfg, net, th, nums, data, c0)
            return th, st, k, jax.tree.map(lambda buf, x: buf.at[i].set(x), logs, row)

        logs = jax.tree.map(lambda x: jnp.zeros((_LOG_BLOCK,) + x.shape, x.dtype), start)
        theta, opt_state, key, logs = jax.lax.fori_loop(0, n_logs, log_block, (theta, opt_state, key, logs))
        return theta, opt_state, key, logs, start

    return segment


def fit(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    X_test: ArrayLike | None = None,
    Y_test: ArrayLike | None = None,
    loss: str | Callable | Objective = "bce",
    options: TrainOptions | None = None,
    accuracy: bool | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
    **deprecated,
) -> TrainResult:
    """Train `net` with an optax optimizer and an optional regularizer.

    **Arguments:**

    - `net`: the initial `DAGNetwork`, or a batch of them of one graph (leading axis on
        `weights`, as made by `eqx.filter_vmap`); a batch trains in one vmapped loop.
    - `X`, `Y`: training data, `(N, d_in)` and `(N, d_out)` (1-D `Y` for one output).
    - `X_test`, `Y_test`: optional test data for `test_accuracy`.
    - `loss`: what training minimizes: `"bce"` (default, logits), `"mse"`, a callable
        `(pred, Y) -> scalar`, or an `ij.Objective` with a regularizer: `strength * R(net)`
        with `R` one of `"nuclear"`, `"l1"`, `"l2"`, `"group_lasso"` or a callable (an
        `Objective`'s own default loss is `"mse"`). Weight decay is refused: use
        `regularizer="l2"`, the same penalty `(lambda / 2) ||theta||^2`.
    - `options`: an `ij.TrainOptions` (optimizer, learning rate, epochs, batch size,
        logging, proximal steps, zero threshold); default `TrainOptions()`.
    - `accuracy`: log accuracy (outputs > 0 vs labels > 0.5); default: when the loss is
        `"bce"`.
    - `key`: PRNG key for minibatch order (default `jr.key(0)`); one per network for a
        batch is derived from it.
    - `progress`: show a tqdm progress bar.

    Deprecated keywords (they warn, and train the same): the fields of `TrainOptions`
    (`optimizer`, `learning_rate`, `epochs`, `batch_size`, `log_every`, `proximal`,
    `working_tol`, `tol`), and `regularizer`, `strength` (pass `loss=ij.Objective(loss,
    regularizer=..., strength=...)`).

    **Returns:** a `TrainResult`.
    """
    kw = take_deprecated("fit", deprecated, FIT_KEYWORDS)
    obj = _fit_objective(loss, kw)
    opts = _train_options(options, kw)
    X, Y, X_test, Y_test = _fit_data(net, X, Y, X_test, Y_test)
    cfg = _fit_config(net.graph, X.shape[0], obj, opts, accuracy)
    theta0 = net.edge_weights()
    dtype = jnp.result_type(theta0.dtype, X.dtype)
    theta0 = theta0.astype(dtype)
    data = (
        X.astype(dtype),
        Y.astype(dtype),
        None if X_test is None else X_test.astype(dtype),
        None if Y_test is None else Y_test.astype(dtype),
    )
    nums = _fit_numbers(obj, opts, dtype)
    theta, log = _train(
        cfg, net, theta0, data, nums, epochs=opts.epochs, key=jr.key(0) if key is None else key, progress=progress
    )
    return TrainResult(
        network=net.with_edge_weights(theta),
        initial=net.with_edge_weights(theta0),
        log=log,
        result=_training_result(theta),
        strength=nums.strength,
        optimizer=opts.optimizer if isinstance(opts.optimizer, str) else type(opts.optimizer).__name__,
        learning_rate=float(opts.learning_rate),
        regularizer=cfg.regularizer_name,
        proximal=cfg.proximal,
        tol=float(opts.tol),
        batch_size=cfg.batch_size,
        epochs=int(opts.epochs),
    )


def _fit_objective(loss, kw: dict) -> Objective:
    """`loss` as an `Objective`, with the deprecated keywords `regularizer` and `strength`
    (taken out of `kw`) folded in."""
    reg_kw = {name: kw.pop(name) for name in ("regularizer", "strength") if name in kw}
    if not isinstance(loss, Objective) and reg_kw.get("regularizer") in (None, "none"):
        reg_kw = {}  # the old spelling of no regularizer (its strength had no effect)
    return as_objective(loss, **reg_kw)


def _training_result(theta) -> RESULTS:
    """Per network: `successful`, or `training_diverged` where a trained weight is not finite."""
    finite = jnp.all(jnp.isfinite(theta), axis=-1)
    return result_from_code(
        jnp.where(finite, int(result_code(RESULTS.successful)), int(result_code(RESULTS.training_diverged)))
    )


def _train_options(options: TrainOptions | None, kw: dict) -> TrainOptions:
    """`options`, or the `TrainOptions` of the deprecated keywords `kw`."""
    if options is None:
        return TrainOptions(**kw)
    if not isinstance(options, TrainOptions):
        raise TypeError(f"options must be an ij.TrainOptions(...); got {options!r}.")
    if kw:
        raise ValueError(f"Pass {', '.join(sorted(kw))} inside TrainOptions(...), not as keywords as well.")
    return options


def _fit_data(net, X, Y, X_test, Y_test) -> tuple[Array, Array, Array | None, Array | None]:
    """The checked training data and test data (`None` without test data)."""
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    X, Y = check_data(net.graph, X, Y)
    if (X_test is None) != (Y_test is None):
        raise ValueError("Pass both X_test and Y_test, or neither.")
    if X_test is not None:
        X_test, Y_test = check_data(net.graph, X_test, Y_test)
    return X, Y, X_test, Y_test


def _fit_config(graph: DAG, N: int, obj: Objective, opts: TrainOptions, accuracy: bool | None) -> _Config:
    """The structure of the training loop (one compiled program per value; the numbers
    are `_fit_numbers`), after the checks that need the objective and the options
    together, or the data."""
    if obj.weight_decay != 0:
        raise ValueError(
            f"fit takes no weight_decay (got {obj.weight_decay!r}); pass regularizer='l2', "
            "strength=weight_decay in the Objective: the same penalty (lambda / 2) ||theta||^2."
        )
    reg, reg_name = None, "none"
    if obj.regularizer is not None:
        reg = get_regularizer(obj.regularizer)
        reg_name = (
            obj.regularizer if isinstance(obj.regularizer, str) else getattr(obj.regularizer, "__name__", "custom")
        )
    if opts.proximal and reg_name not in _PROXIMAL:
        raise ValueError(
            f"proximal=True needs regularizer {', '.join(map(repr, _PROXIMAL[:-1]))} or {_PROXIMAL[-1]!r}; "
            f"got {obj.regularizer!r}. Use proximal=False for other regularizers."
        )
    batch_size = N if opts.batch_size is None else opts.batch_size
    if not 1 <= batch_size <= N:
        raise ValueError(f"batch_size must be an integer in [1, N={N}] or None (full batch); got {batch_size!r}.")
    optimizer = opts.optimizer if isinstance(opts.optimizer, optax.GradientTransformation) else opts.optimizer.lower()
    return _Config(
        graph,
        obj.loss,
        optimizer,
        reg,
        reg_name,
        bool(opts.proximal),
        int(batch_size),
        N // int(batch_size),
        bool(obj.loss == "bce" if accuracy is None else accuracy),
    )


def _fit_numbers(obj: Objective, opts: TrainOptions, dtype) -> _Numbers:
    """The numeric settings as arrays (in the weights' `dtype`, the dtype a Python number
    takes against them), arguments of the compiled loop rather than constants in it.
    The default `working_tol` is `20 * learning_rate * strength`, computed here."""
    working_tol = opts.working_tol
    if working_tol is None:
        working_tol = _DEFAULT_WORKING_FACTOR * float(opts.learning_rate) * float(obj.strength)
    return _Numbers(
        learning_rate=jnp.asarray(float(opts.learning_rate), dtype),
        strength=jnp.asarray(obj.strength, dtype),
        tol=jnp.asarray(float(opts.tol), dtype),
        working_tol=jnp.asarray(float(working_tol), dtype),
        log_every=jnp.asarray(int(opts.log_every), jnp.int32),
    )


def _train(cfg: _Config, net: DAGNetwork, theta0, data, nums: _Numbers, *, epochs: int, key, progress: bool):
    """Run the compiled training loop from `theta0` (one network, or a batch: `(B, E)`):
    calls of at most `_LOG_BLOCK` logs each (about 20 calls with a progress bar, more where
    a call would exceed the block). The logs come back to the host once, after the last call,
    and are put together with NumPy, so that no glue program depends on the number of logs.
    **Returns:** `(theta, TrainLog)`."""
    batched = theta0.ndim == 2
    base = net.with_edge_weights(theta0[0] if batched else theta0)
    log_every = int(nums.log_every)
    n_logs = epochs // log_every
    per_call = min(_LOG_BLOCK, -(-n_logs // 20)) if progress else _LOG_BLOCK
    k = jr.split(key, theta0.shape[0]) if batched else key
    c0 = conserved_quantities(net.with_edge_weights(theta0))
    opt = _optimizer(cfg.optimizer_spec, nums.learning_rate)
    opt_state = (jax.vmap(opt.init) if batched else opt.init)(theta0)
    run_seg = _compiled(cfg, batched)
    theta = theta0
    ax = 1 if batched else 0
    pieces: list[tuple[dict, int | None]] = []  # the first log, then each call's logs and how many
    bar = tqdm(total=epochs, desc=f"fit ({cfg.regularizer_name})", unit="epoch") if progress else None
    done = 0
    while done < n_logs:
        m = min(per_call, n_logs - done)
        theta, opt_state, k, logs, start = run_seg(base, theta, opt_state, k, nums, jnp.asarray(m, jnp.int32), data, c0)
        if not pieces:
            pieces.append((start, None))
        pieces.append((logs, m))
        done += m
        if bar is not None:
            bar.update(m * log_every)
    if bar is not None:
        bar.close()
    host = jax.device_get([p for p, _ in pieces])  # one transfer, after the last call
    rows = [{f: np.expand_dims(v, ax) for f, v in host[0].items()}]
    rows += [
        {f: v[(slice(None),) * ax + (slice(0, m),)] for f, v in p.items()} for p, (_, m) in zip(host[1:], pieces[1:])
    ]
    # device_put, not jnp.asarray: on a NumPy array the latter compiles a program per shape
    cat = {f: jax.device_put(np.concatenate([r[f] for r in rows], axis=ax)) for f in rows[0]}
    epochs_arr = np.arange(n_logs + 1) * log_every
    if batched:
        epochs_arr = np.broadcast_to(epochs_arr, (theta0.shape[0], n_logs + 1))
    return theta, TrainLog(epochs=jax.device_put(epochs_arr), **cat)
