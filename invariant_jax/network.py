"""`DAGNetwork`: a neural network on a DAG, as an Equinox module with masked dense weights."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from . import graph as _graph
from ._checks import check_finite, check_positive
from .activations import Activation, get_activation
from .graph import DAG

__all__ = ["DAGNetwork", "INITIALIZERS", "init_edge_weights", "random_dag"]

INITIALIZERS = ("glorot", "kaiming", "normal")


def init_edge_weights(
    graph: DAG, key: PRNGKeyArray, init: str = "glorot", *, scale: float = 1.0, dtype=None
) -> Float[Array, " E"]:
    """Random edge weights `theta`, ordered as `graph.edges`.

    - `"glorot"` (Glorot/Xavier normal): edge u->v has std `sqrt(2 / (indeg(v) + outdeg(u)))`,
      which is Glorot's `sqrt(2 / (fan_in + fan_out))` on a layered MLP;
    - `"kaiming"` (Kaiming/He normal): std `sqrt(2 / indeg(v))`;
    - `"normal"`: std `scale`.

    Bias edges are ordinary edges and count in the degrees. `scale` multiplies every std.
    """
    if init not in INITIALIZERS:
        raise ValueError(f"Unknown init {init!r}; choose one of {list(INITIALIZERS)}.")
    check_positive("scale", scale)
    rows, cols = graph.edge_index
    indeg = graph.in_degree[cols].astype(float)
    outdeg = graph.out_degree[rows].astype(float)
    if init == "glorot":
        std = np.sqrt(2.0 / (indeg + outdeg))
    elif init == "kaiming":
        std = np.sqrt(2.0 / indeg)
    else:
        std = np.ones(len(graph.edges))
    dtype = jnp.zeros(()).dtype if dtype is None else dtype
    z = jr.normal(key, (len(graph.edges),), dtype=dtype)
    return z * jnp.asarray(scale * std, dtype=dtype)


def random_dag(
    n_inputs: int,
    n_hidden: int,
    n_outputs: int,
    edge_prob: float,
    key: PRNGKeyArray | int | np.random.Generator = 0,
    *,
    bias: bool = False,
    allow_input_output: bool = True,
) -> DAG:
    """A random DAG on `n_hidden` hidden nodes: `graph.random_dag` (which describes the
    construction), with `key` also a typed JAX PRNG key (`jax.random.key`). The key's raw
    data seeds NumPy's generator, so this module, not `graph`, is where JAX meets the builder.

    **Arguments:**

    - `n_inputs`, `n_hidden`, `n_outputs`: node counts (`n_hidden` may be 0).
    - `edge_prob`: probability in `[0, 1]` of each forward edge.
    - `key`: a JAX PRNG key (typed or raw), an int seed, or a `numpy.random.Generator`.
    - `bias`: add a constant node `"b"` with an edge to every hidden and output node.
    - `allow_input_output`: allow direct input -> output edges.

    **Returns:** a `DAG` with nodes `"x{i}"`, `"h{j}"`, `"y{k}"` (and `"b"`).
    """
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jr.key_data(key)
    return _graph.random_dag(
        n_inputs, n_hidden, n_outputs, edge_prob, key, bias=bias, allow_input_output=allow_input_output
    )


class _Plan(NamedTuple):
    """Static evaluation plan for a graph: per level, (predecessor indices, slice)."""

    levels: tuple
    out_preds: np.ndarray
    input_perm: np.ndarray
    n_const: int


@lru_cache(maxsize=256)
def _plan(graph: DAG) -> _Plan:
    mask = graph.mask
    n_in = len(graph.inputs)
    start = n_in
    levels = []
    for lv in graph.levels:
        s, e = start, start + len(lv)
        preds = np.flatnonzero(mask[:, s:e].any(axis=1))
        levels.append((preds, s, e))
        start = e
    out_preds = np.flatnonzero(mask[:, start:].any(axis=1))
    const = set(graph.constants)
    data_pos = [i for i, v in enumerate(graph.inputs) if v not in const]
    const_pos = [i for i, v in enumerate(graph.inputs) if v in const]
    # column j of [X, ones] goes to input position perm_src: we need inverse order
    src = data_pos + const_pos
    perm = np.argsort(np.asarray(src, dtype=np.int64))
    return _Plan(tuple(levels), out_preds, perm, len(const_pos))


class DAGNetwork(eqx.Module):
    """A neural network on a `DAG`: one weight per edge, stored in an `(n, n)` matrix
    that is zero off `graph.mask`. Hidden nodes apply the activation, outputs are linear.

    Evaluation goes level by level, so a layered MLP costs one matmul per layer.
    """

    weights: Float[Array, "n n"]
    graph: DAG = eqx.field(static=True)
    activation: Activation | tuple[Activation, ...] = eqx.field(static=True)

    def __init__(
        self,
        graph: DAG,
        activation: str | Activation | Sequence[str | Activation] = "relu",
        *,
        key: PRNGKeyArray | None = None,
        init: str = "glorot",
        scale: float = 1.0,
        edge_weights: ArrayLike | None = None,
        dtype=None,
    ):
        """**Arguments:**

        - `graph`: the `DAG`.
        - `activation`: a name or `Activation` for every hidden node, or a sequence with
            one per hidden node (in `graph.hidden` order).
        - `key`: PRNG key for the initializer (keyword only). Not needed when
            `edge_weights` is given.
        - `init`: `"glorot"`, `"kaiming"` or `"normal"`; see
            `init_edge_weights`.
        - `scale`: multiplies the initializer's standard deviation.
        - `edge_weights`: explicit `theta` in `graph.edges` order, instead of `key`.
        - `dtype`: floating dtype; default is JAX's default float.
        """
        if not isinstance(graph, DAG):
            raise TypeError(
                f"graph must be a DAG; got {type(graph).__name__}. Build one with ij.mlp or ij.DAG.from_edges."
            )
        if isinstance(activation, (str, Activation)):
            act: Activation | tuple = get_activation(activation)
        else:
            act = tuple(get_activation(a) for a in activation)
            if len(act) != len(graph.hidden):
                raise ValueError(
                    f"Got {len(act)} activations for {len(graph.hidden)} hidden nodes; give "
                    "one name, or one per hidden node in graph.hidden order."
                )
            if len(set(act)) == 1:
                act = act[0]
        if edge_weights is None:
            if key is None:
                raise ValueError("DAGNetwork needs `key=` (a PRNG key) or `edge_weights=`.")
            theta = init_edge_weights(graph, key, init, scale=scale, dtype=dtype)
        else:
            theta = jnp.asarray(edge_weights, dtype=dtype)
            if theta.shape != (len(graph.edges),):
                raise ValueError(
                    f"edge_weights has shape {theta.shape}; expected ({len(graph.edges)},), "
                    "one weight per edge in graph.edges order."
                )
            theta = check_finite(
                theta, "is not finite; pass finite weights (ordered as graph.edges).", where="edge_weights[{index}] "
            )
        self.graph = graph
        self.activation = act
        self.weights = _scatter(graph, theta)

    def __check_init__(self):
        n = self.graph.n_nodes
        if self.weights.shape[-2:] != (n, n):
            raise ValueError(f"weights must have shape (..., {n}, {n}); got {self.weights.shape}.")

    # ----------------------------------------------------------------- weights

    @property
    def n_edges(self) -> int:
        return len(self.graph.edges)

    def edge_weights(self) -> Float[Array, " E"]:
        """`theta`, ordered as `graph.edges`."""
        rows, cols = self.graph.edge_index
        return self.weights[..., rows, cols]

    def with_edge_weights(self, theta: ArrayLike) -> DAGNetwork:
        """A new network with edge weights `theta` (ordered as `graph.edges`)."""
        theta = jnp.asarray(theta)
        if theta.shape[-1:] != (self.n_edges,):
            raise ValueError(
                f"theta has shape {theta.shape}; expected (..., {self.n_edges}), one weight "
                "per edge in graph.edges order."
            )
        return eqx.tree_at(lambda n: n.weights, self, _scatter(self.graph, theta))

    @property
    def is_positively_homogeneous(self) -> bool:
        acts = self.activation if isinstance(self.activation, tuple) else (self.activation,)
        return all(a.positively_homogeneous for a in acts)

    def activation_of(self, k: int) -> Activation:
        """Activation of hidden node `graph.hidden[k]`."""
        return self.activation[k] if isinstance(self.activation, tuple) else self.activation

    @property
    def activations(self) -> tuple[Activation, ...]:
        """Distinct activations used by this network."""
        acts = self.activation if isinstance(self.activation, tuple) else (self.activation,)
        return tuple(dict.fromkeys(acts))

    # ----------------------------------------------------------------- forward

    def __call__(self, x: Float[Array, "*N d_in"]) -> Float[Array, "*N d_out"]:
        """Evaluate on one input vector `x` of shape `(d_in,)` (constants excluded), or
        on a batch `X` of shape `(N, d_in)` (then the same as `net.forward(X)`, one
        matrix product per level; `jax.vmap(net)(X)` gives the same values).

        **Returns:** `(d_out,)` for one input, `(N, d_out)` for a batch.
        """
        x = jnp.asarray(x)
        if x.ndim == 2:
            return self.forward(x)
        if x.ndim != 1:
            raise ValueError(
                f"net(x) takes one input of shape ({self.graph.n_in},) or a batch of shape "
                f"(N, {self.graph.n_in}); got shape {x.shape}. Reshape it, e.g. "
                f"net(x.reshape(-1, {self.graph.n_in}))."
            )
        return self.forward(x[None])[0]

    def forward(self, X: Float[Array, "N d_in"]) -> Float[Array, "N d_out"]:
        """Evaluate on a batch `X` of shape `(N, d_in)`."""
        return self.evaluate(X)[0]

    def preactivations(self, X: Float[Array, "N d_in"]) -> Float[Array, "N H"]:
        """Hidden pre-activations `z_v` on a batch, columns ordered as `graph.hidden`."""
        return self.evaluate(X)[1]

    def evaluate(
        self, X: Float[Array, "N d_in"], *, activate: Callable | None = None
    ) -> tuple[Float[Array, "N d_out"], Float[Array, "N H"]]:
        """`(outputs, hidden pre-activations)` on a batch `X`, pre-activation columns
        ordered as `graph.hidden`.

        **Arguments:**

        - `X`: inputs, `(N, d_in)`.
        - `activate`: evaluate with another activation pattern: `activate(z, k0, k1)`
            returns the activations of hidden nodes `k0:k1` (positions in `graph.hidden`)
            from their pre-activations `z`, shape `(N, k1 - k0)`; e.g. a frozen ReLU
            pattern `lambda z, k0, k1: D[:, k0:k1] * z`. Default: the network's own.
        """
        activate = self._apply if activate is None else activate
        g = self.graph
        X = jnp.asarray(X)
        if X.ndim != 2 or X.shape[1] != g.n_in:
            raise ValueError(f"X has shape {X.shape}; expected (N, {g.n_in}) for a graph with {g.n_in} data inputs.")
        plan = _plan(g)
        W = self.weights * jnp.asarray(g.mask, dtype=self.weights.dtype)
        dtype = jnp.result_type(W.dtype, X.dtype)
        W, X = W.astype(dtype), X.astype(dtype)
        N = X.shape[0]
        A0 = _take(jnp.concatenate([X, jnp.ones((N, plan.n_const), dtype)], axis=1), plan.input_perm, 1)
        blocks = [A0]
        zs = []
        k = 0
        for preds, s, e in plan.levels:
            A = jnp.concatenate(blocks, axis=1)
            z = _take(A, preds, 1) @ _take(W[:, s:e], preds, 0)
            zs.append(z)
            blocks.append(activate(z, k, k + (e - s)))
            k += e - s
        A = jnp.concatenate(blocks, axis=1)
        start = A.shape[1]
        out = _take(A, plan.out_preds, 1) @ _take(W[:, start:], plan.out_preds, 0)
        Z = jnp.concatenate(zs, axis=1) if zs else jnp.zeros((N, 0), dtype)
        return out, Z

    def _apply(self, z, k0, k1):
        if not isinstance(self.activation, tuple):
            return self.activation(z)
        acts = self.activation[k0:k1]
        distinct = list(dict.fromkeys(acts))
        if len(distinct) == 1:
            return distinct[0](z)
        out = jnp.zeros_like(z)
        for a in distinct:
            sel = np.array([b == a for b in acts])
            out = jnp.where(sel, a(z), out)
        return out


def _take(a, idx: np.ndarray, axis: int):
    # `a` at the static indices `idx` along `axis`: a slice where they are a range (no
    # gather to compile, nor its derivatives)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return jax.lax.slice_in_dim(a, int(idx[0]), int(idx[0]) + idx.size, axis=axis)
    return a.at[(slice(None),) * axis + (idx,)].get(mode="promise_in_bounds")


def _scatter(graph: DAG, theta):
    # (`unique_indices`: a DAG's edges are distinct, and the scatter's derivatives compile
    # smaller. A gather from `theta` padded with a zero compiled smaller still, but the
    # sweep engine's initial weights, sampled in the same program, came out a bit off the
    # same sample taken alone: `test_glue.py`'s bit-for-bit start)
    rows, cols = graph.edge_index
    n = graph.n_nodes
    W = jnp.zeros(theta.shape[:-1] + (n, n), dtype=theta.dtype)
    return W.at[..., rows, cols].set(theta, unique_indices=True)
