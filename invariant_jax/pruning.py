"""Pruning: remove the hidden neurons that (near-)zero weights disconnect, and check
that the function does not change; magnitude pruning as the baseline.

`prune(net, tol)` removes, and says why:

1. `"cut off"`: each group of `ij.singular_subnetworks(net, tol)`: hidden neurons that
   the edges with `|theta_e| <= tol` separate from every input and output. With
   `tol = 0` removing them is exact: every edge between the group and the rest is zero.
2. `"no output"`: neurons whose outgoing weights to the kept neurons are all
   `<= tol` in absolute value (exact at `tol = 0`).
3. `"no input"`: neurons whose incoming weights from the kept neurons are all `<= tol`:
   they emit the constant `sigma(0)`. When `sigma(0) != 0` (softplus, ...) the constant
   is folded into a bias edge of each successor (adding a constant node `"_one"` if
   the graph has none), so the removal stays exact at `tol = 0`.
4. `"never fires"` (only with `dead_on_data=True` and data `X`): neurons whose
   pre-activation is `<= 0` on every sample, for activations that vanish on
   `z <= 0` (ReLU). Exact on `X`, not off it.

Rules 2-4 are applied until nothing changes, since each removal can expose others.
Everything is reported in a `PruneReport`, including `max |f_pruned(x) - f(x)|` over the
data when `X` is given. The pruned network lives on a new `DAG` with the surviving node
labels, the same inputs (data and constants) and the same outputs, so it takes the
same `X`.

`magnitude_prune(net, n_keep)` keeps the `n_keep` hidden neurons with the largest
`||w_in|| ||w_out||` (a score invariant under the ReLU rescaling `w_in -> a w_in`,
`w_out -> w_out / a`), the usual baseline.
"""

from __future__ import annotations

from collections.abc import Hashable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from ._checks import check_integer, check_positive
from ._results import RESULTS, is_success
from .activations import Activation
from .graph import DAG
from .invariants import conserved_quantities, singular_subnetworks
from .losses import check_data
from .network import DAGNetwork

__all__ = ["PruneReport", "prune", "magnitude_prune", "neuron_scores"]

_ONE = "_one"


class PruneReport(eqx.Module):
    """What `prune` or `magnitude_prune` removed, and why.

    **Fields:**

    - `removed`: `((node, reason), ...)` in removal order; reasons are `"cut off"`,
        `"no output"`, `"no input"`, `"never fires"`, `"magnitude"`.
    - `groups`: the cut-off groups (`singular_subnetworks(net, tol)`).
    - `group_sums`: `sum_{v in W} c_v` per group (0 for an exactly cut-off group).
    - `folded`: `((node, successor, value), ...)`: constants `sigma(0) theta` moved into
        bias edges.
    - `n_hidden_before`, `n_hidden_after`, `n_edges_before`, `n_edges_after`.
    - `max_abs_change`: `max |f_pruned(x) - f(x)|` over `X` (`nan` without data).
    - `n_samples`: rows of `X` (0 without data).
    - `tol`, `method` (`"singular"` or `"magnitude"`).
    - `result`: an `ij.RESULTS` item, as every result type carries: `successful` (bad
        input is refused before any work, so a report is always of a finished pruning);
        `success` is read off it.
    """

    removed: tuple
    groups: tuple
    group_sums: tuple
    folded: tuple
    n_hidden_before: int
    n_hidden_after: int
    n_edges_before: int
    n_edges_after: int
    max_abs_change: float
    n_samples: int
    tol: float
    method: str
    result: RESULTS

    @property
    def success(self) -> bool:
        """True: the pruning finished (`is_success(result)`)."""
        return bool(is_success(self.result))

    @property
    def n_removed(self) -> int:
        return len(self.removed)

    def counts(self) -> dict[str, int]:
        """Number of removed neurons per reason."""
        out: dict[str, int] = {}
        for _, r in self.removed:
            out[r] = out.get(r, 0) + 1
        return out

    def summary(self) -> str:
        """A human-readable account of the pruning."""
        lines = [
            f"pruning ({self.method}, tol={self.tol:g}): hidden {self.n_hidden_before} -> "
            f"{self.n_hidden_after}, edges {self.n_edges_before} -> {self.n_edges_after}"
        ]
        for r, k in self.counts().items():
            lines.append(f"  {k:4d} removed: {r}")
        for W, s in list(zip(self.groups, self.group_sums))[:5]:
            lines.append(
                f"  cut-off group of {len(W)}: {sorted(map(str, W))[:6]}{' ...' if len(W) > 6 else ''}  sum c = {s:.2e}"
            )
        if len(self.groups) > 5:
            sizes = [len(W) for W in self.groups[5:]]
            worst = max(abs(s) for s in self.group_sums[5:])
            lines.append(f"  ... {len(sizes)} more cut-off groups ({sum(sizes)} neurons, max |sum c| = {worst:.2e})")
        if self.folded:
            lines.append(f"  {len(self.folded)} constant contributions folded into bias edges")
        if self.n_samples:
            lines.append(f"  max |f_pruned - f| over {self.n_samples} samples: {self.max_abs_change:.3e}")
        return "\n".join(lines)


def _vanishes_below_zero(act) -> bool:
    z = jnp.asarray([-3.0, -1.0, -1e-3, 0.0])
    return bool(jnp.all(act(z) == 0))


def _rebuild(net: DAGNetwork, removed: dict, tol: float, *, drop_small_edges: bool):
    """Fixpoint of rules 2-3 on top of `removed` (node -> reason), then build the new
    network. Returns `(network, removed, folded)`."""
    g = net.graph
    theta = np.asarray(net.edge_weights(), dtype=float)
    hidden = list(g.hidden)
    hidx = {v: k for k, v in enumerate(hidden)}
    sig0 = {v: float(net.activation_of(hidx[v])(jnp.zeros(()))) for v in hidden}
    # extra[(c, w)] = weight added to a bias edge from a constant node c into w
    extra: dict = {}
    folded = []
    const = g.constants[0] if g.constants else _ONE
    changed = True
    while changed:
        changed = False
        for v in hidden:
            if v in removed:
                continue
            outs = [k for k in g.out_edges(v) if g.edges[k][1] not in removed]
            if all(abs(theta[k]) <= tol for k in outs):
                removed[v] = "no output"
                changed = True
                continue
            ins = [k for k in g.in_edges(v) if g.edges[k][0] not in removed]
            has_bias = any(abs(w) > tol for (c, t), w in extra.items() if t == v)
            if not has_bias and all(abs(theta[k]) <= tol for k in ins):
                removed[v] = "no input"
                changed = True
                if sig0[v] != 0.0:
                    for k in outs:
                        w = g.edges[k][1]
                        val = sig0[v] * theta[k]
                        extra[(const, w)] = extra.get((const, w), 0.0) + val
                        folded.append((v, w, val))
    keep = [v for v in g.nodes if v not in removed]
    keep_set = set(keep)
    edges, weights = [], []
    for k, (u, v) in enumerate(g.edges):
        if u in keep_set and v in keep_set:
            if drop_small_edges and abs(theta[k]) <= tol and (u, v) not in extra:
                continue
            edges.append((u, v))
            weights.append(theta[k] + extra.pop((u, v), 0.0))
    for (c, w), val in extra.items():
        if w in keep_set:
            edges.append((c, w))
            weights.append(val)
    constants = list(g.constants)
    inputs = list(g.inputs)
    if any(c == _ONE for (c, _w) in extra) and _ONE not in constants:
        constants.append(_ONE)
        inputs.append(_ONE)
    kept_hidden = [v for v in hidden if v not in removed]
    new_g = DAG.from_edges(edges, inputs=inputs, outputs=list(g.outputs), constants=constants, hidden=kept_hidden)
    pos = {e: i for i, e in enumerate(edges)}
    theta_new = np.array([weights[pos[e]] for e in new_g.edges])
    act: Activation | tuple[Activation, ...]
    if isinstance(net.activation, tuple):
        act = tuple(net.activation_of(hidx[v]) for v in new_g.hidden)
        if not act:
            act = net.activation[0]
    else:
        act = net.activation
    new = DAGNetwork(new_g, act, edge_weights=jnp.asarray(theta_new, dtype=net.weights.dtype))
    return new, removed, tuple(folded)


def _max_change(net, new, X):
    if X is None:
        return float("nan"), 0
    return float(jnp.max(jnp.abs(new.forward(X) - net.forward(X)))), int(X.shape[0])


def _check_net(net):
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    if net.weights.ndim != 2:
        raise ValueError(
            "Pruning takes one network; index a batch of networks first (jax.tree.map(lambda a: a[i], nets))."
        )


def _data(net, X):
    if X is None:
        return None
    Xc, _ = check_data(net.graph, X, np.zeros((np.shape(X)[0], net.graph.n_out)))
    return Xc


def prune(
    net: DAGNetwork,
    tol: float = 0.0,
    *,
    X: ArrayLike | None = None,
    dead_on_data: bool = False,
    drop_small_edges: bool = False,
) -> tuple[DAGNetwork, PruneReport]:
    """Remove the hidden neurons that (near-)zero weights disconnect (module docstring).

    **Arguments:**

    - `net`: one `DAGNetwork`.
    - `tol`: weights with `|theta_e| <= tol` count as zero (`>= 0`; `0` = exact zeros
        only, where pruning never changes the function beyond round-off).
    - `X`: optional data `(N, d_in)`: the report then gives `max |f_pruned - f|` on it.
    - `dead_on_data`: also remove neurons that never fire on `X` (needs `X`).
    - `drop_small_edges`: also drop the remaining edges with `|theta_e| <= tol`.

    **Returns:** `(pruned_network, report)`: a `DAGNetwork` on a new `DAG`, and a
    `PruneReport`.
    """
    _check_net(net)
    check_positive("tol", tol, allow_zero=True)
    if dead_on_data and X is None:
        raise ValueError("dead_on_data=True needs the data X on which neurons never fire.")
    Xc = _data(net, X)
    groups = singular_subnetworks(net, float(tol))
    c = np.asarray(conserved_quantities(net))
    hidx = {v: k for k, v in enumerate(net.graph.hidden)}
    sums = tuple(float(sum(c[hidx[v]] for v in W)) for W in groups)
    removed: dict[Hashable, str] = {}
    for W in groups:
        for v in sorted(W, key=lambda v: hidx[v]):
            removed[v] = "cut off"
    if dead_on_data:
        Z = np.asarray(net.preactivations(Xc))
        for v, k in hidx.items():
            if v not in removed and _vanishes_below_zero(net.activation_of(k)) and np.all(Z[:, k] <= 0):
                removed[v] = "never fires"
    new, removed, folded = _rebuild(net, removed, float(tol), drop_small_edges=drop_small_edges)
    change, n = _max_change(net, new, Xc)
    rep = PruneReport(
        removed=tuple(removed.items()),
        groups=tuple(groups),
        group_sums=sums,
        folded=folded,
        n_hidden_before=len(net.graph.hidden),
        n_hidden_after=len(new.graph.hidden),
        n_edges_before=len(net.graph.edges),
        n_edges_after=len(new.graph.edges),
        max_abs_change=change,
        n_samples=n,
        tol=float(tol),
        method="singular",
        result=RESULTS.successful,
    )
    return new, rep


def neuron_scores(net: DAGNetwork, score: str = "in_out") -> np.ndarray:
    """Magnitude score per hidden neuron (in `graph.hidden` order): `"in_out"`
    `||w_in|| ||w_out||` (invariant under ReLU rescaling), `"out"` `||w_out||`, or
    `"in"` `||w_in||` (Euclidean norms over incoming/outgoing edges, biases included)."""
    _check_net(net)
    theta2 = np.asarray(net.edge_weights(), dtype=float) ** 2
    B = np.asarray(net.graph.incidence())
    inn = np.sqrt((B > 0).astype(float) @ theta2)
    out = np.sqrt((B < 0).astype(float) @ theta2)
    if score == "in_out":
        return inn * out
    if score == "out":
        return out
    if score == "in":
        return inn
    raise ValueError(f"Unknown score {score!r}; choose 'in_out', 'out' or 'in'.")


def magnitude_prune(
    net: DAGNetwork,
    n_keep: int,
    *,
    X: ArrayLike | None = None,
    score: str = "in_out",
) -> tuple[DAGNetwork, PruneReport]:
    """The baseline: keep the `n_keep` hidden neurons with the largest `neuron_scores`
    and remove the rest (then whatever that leaves without input or output, as in
    `prune` with `tol = 0`).

    **Arguments:**

    - `net`: one `DAGNetwork`.
    - `n_keep`: how many hidden neurons to keep, `0 <= n_keep <= len(graph.hidden)`.
    - `X`: optional data for `max |f_pruned - f|`.
    - `score`: see `neuron_scores`.

    **Returns:** `(pruned_network, report)`.
    """
    _check_net(net)
    H = len(net.graph.hidden)
    check_integer("n_keep", n_keep, minimum=0)
    if n_keep > H:
        raise ValueError(f"n_keep must be an integer in [0, {H}] (the number of hidden neurons); got {n_keep!r}.")
    Xc = _data(net, X)
    s = neuron_scores(net, score)
    order = np.argsort(-s, kind="stable")
    removed = {net.graph.hidden[k]: "magnitude" for k in order[n_keep:]}
    new, removed, folded = _rebuild(net, removed, 0.0, drop_small_edges=False)
    change, n = _max_change(net, new, Xc)
    rep = PruneReport(
        removed=tuple(removed.items()),
        groups=(),
        group_sums=(),
        folded=folded,
        n_hidden_before=H,
        n_hidden_after=len(new.graph.hidden),
        n_edges_before=len(net.graph.edges),
        n_edges_after=len(new.graph.edges),
        max_abs_change=change,
        n_samples=n,
        tol=0.0,
        method="magnitude",
        result=RESULTS.successful,
    )
    return new, rep
