"""The flat-channels authors' post-processing of a convergence study, read from their
public code (flavio-martinelli/channels-to-infinity):

- **Unique solutions** (`src/helper_analyse.jl`, `weight_distance_matrix` and
  `compute_unique_solutions`, used by `scripts/data_process/loss_levels_plots.jl`): the
  distance between two trained networks of one width is the optimal matching of their
  hidden neurons (Hungarian algorithm) under the Euclidean distance of the per-neuron
  vectors `[input weights (bias included); output weight]`, i.e. the distance up to a
  permutation of the hidden neurons; the solutions are clustered hierarchically (average
  linkage) and the tree is cut in the middle of its largest gap in `log10(height)`.
- **The flow-to-Newton jump filter** (`scripts/data_process/scaling_plots.jl`): a run is
  kept when the cosine distance between its final point and the last point of its ODE
  (gradient-flow) trajectory is below `1e-2` ("It avoids considering simulations that
  jumped too far when switching from ode solvers to optimizer"); on the kept runs, the
  paper's "% channels" counts `weightnorm(ODE end) > maxnorm` and a closest first-layer
  pair at cosine distance below `1e-2` (of the final point).

The Hungarian step is SciPy's `linear_sum_assignment`; the clustering is SciPy's
`linkage(method="average")` / `fcluster(criterion="distance")` (the same UPGMA as
Clustering.jl's `hclust(linkage=:average)` / `cutree(h=)`).
"""

from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import squareform

from ..network import DAGNetwork

__all__ = [
    "neuron_vectors",
    "solution_distance",
    "solution_distances",
    "count_unique_solutions",
    "jump_distance",
    "JUMP_MAX_COS",
]

JUMP_MAX_COS = 1e-2
"""The authors' jump filter: keep a run when `cos_dist(final, ODE end) < 1e-2`."""


def neuron_vectors(net: DAGNetwork, theta=None) -> np.ndarray:
    """Per hidden neuron of a one-hidden-layer network: its input weights (over
    `graph.inputs`, bias included when the graph has one) followed by its output
    weights (over `graph.outputs`). `theta` (edge weights) replaces the network's own.

    **Returns:** an array of shape `(hidden, inputs + outputs)`.
    """
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    if theta is not None:
        net = net.with_edge_weights(np.asarray(theta))
    g = net.graph
    W = np.asarray(net.weights)
    if W.ndim != 2:
        raise ValueError(
            f"neuron_vectors takes one network, not a batch (weights of shape {W.shape}); pass theta= for each member."
        )
    P = [g.index[u] for u in g.inputs]
    O = [g.index[u] for u in g.outputs]
    H = [g.index[v] for v in g.hidden]
    if any(not set(g.predecessors(v)) <= set(g.inputs) for v in g.hidden) or any(
        set(g.predecessors(o)) - set(g.hidden) - set(g.inputs) for o in g.outputs
    ):
        raise ValueError("neuron_vectors needs a one-hidden-layer network (e.g. ij.mlp([d, r, 1])).")
    return np.stack([np.concatenate([W[P, h], W[h, O]]) for h in H])


def _matched(A: np.ndarray, B: np.ndarray) -> float:
    C = np.linalg.norm(A[:, None, :] - B[None, :, :], axis=-1)
    i, j = linear_sum_assignment(C)
    return float(C[i, j].sum())


def solution_distance(net_a: DAGNetwork, net_b: DAGNetwork) -> float:
    """The authors' `weight_distance_matrix` cost: the smallest sum, over a one-to-one
    matching of the hidden neurons of `net_a` and `net_b`, of the Euclidean distances
    between matched `neuron_vectors` (Hungarian algorithm,
    `scipy.optimize.linear_sum_assignment`). Zero exactly when the two networks are
    equal up to a permutation of their hidden neurons."""
    A, B = neuron_vectors(net_a), neuron_vectors(net_b)
    if A.shape != B.shape:
        raise ValueError(f"Networks of different sizes: {A.shape} vs {B.shape} neuron vectors.")
    return _matched(A, B)


def solution_distances(net: DAGNetwork, thetas) -> np.ndarray:
    """Pairwise `solution_distance` between the networks `net.with_edge_weights(theta)`
    for each row of `thetas` (shape `(B, E)`). **Returns:** a symmetric `(B, B)` array."""
    thetas = np.asarray(thetas)
    if thetas.ndim != 2:
        raise ValueError(f"thetas must have shape (B, E); got {thetas.shape}.")
    V = [neuron_vectors(net, th) for th in thetas]
    B = len(V)
    D = np.zeros((B, B))
    for i in range(B):
        for j in range(i + 1, B):
            D[i, j] = D[j, i] = _matched(V[i], V[j])
    return D


def count_unique_solutions(D) -> int:
    """The authors' `compute_unique_solutions` on a distance matrix `D` (from
    `solution_distances`): average-linkage hierarchical clustering, cut at the midpoint
    of the largest step of `log10(height + eps + 1e-8)` between consecutive merge
    heights; the number of clusters. Their rule needs at least 3 solutions (2 merge
    heights); for 1 solution this returns 1 and for 2 it returns 1 when they are within
    1e-8 of each other and 2 otherwise. Like theirs, the rule always cuts somewhere, so a
    set of identical solutions (all heights ~ 0) is split at its largest round-off
    step: read the count together with the heights when all distances are tiny.
    """
    D = np.asarray(D, dtype=float)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"D must be a square distance matrix; got shape {D.shape}.")
    n = D.shape[0]
    if n == 0:
        return 0
    if n == 1:
        return 1
    if n == 2:
        return 1 if D[0, 1] < 1e-8 else 2
    if not np.all(np.isfinite(D)):
        raise ValueError("D has non-finite entries; drop the runs whose weights are not finite.")
    Z = linkage(squareform(0.5 * (D + D.T), checks=False), method="average")
    h = Z[:, 2]
    steps = np.diff(np.log10(h + np.finfo(float).eps + 1e-8))
    k = int(np.argmax(steps))
    cut = 0.5 * (h[k] + h[k + 1])
    return int(np.unique(fcluster(Z, t=cut, criterion="distance")).size)


def jump_distance(theta_flow, theta) -> np.ndarray:
    """Cosine distance `1 - <a, b> / (|a| |b|)` between the end of the flow phase and
    the final point of each run (rows of `theta_flow`, `theta`), the quantity of the
    authors' jump filter (`angle_x_x_trj`; keep a run when it is below `JUMP_MAX_COS`)."""
    a, b = np.atleast_2d(np.asarray(theta_flow, float)), np.atleast_2d(np.asarray(theta, float))
    if a.shape != b.shape:
        raise ValueError(f"theta_flow and theta differ in shape: {a.shape} vs {b.shape}.")
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1.0 - np.sum(a * b, axis=-1) / (na * nb)
