"""Pictures of `H_G(c)`: points sampled on it, projected on three edge weights and
coloured by component, with gradient-flow trajectories drawn inside.

Sampling: `P(c) = {q >= 0 : B~ q = c}` is a polyhedron, the sum of the convex hull of
its vertices and the cone of its rays. Vertices come from LPs with random objectives; the
rays of the cone `{q >= 0 : B~ q = 0}` include every input-to-output path. A sample is a
random convex combination of vertices plus random non-negative multiples of random paths,
and `theta = s * sqrt(q)` with random signs `s`, so every component is visited.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float
from scipy.optimize import linprog

from .._checks import check_integer
from ..graph import DAG
from ..invariants import as_conserved
from ._components import component_of
from ._path import polish_onto

__all__ = ["sample_invariant_set", "plot_invariant_set"]


def _random_path(g: DAG, rng: np.random.Generator) -> list[int]:
    """Edge indices of a random input-to-output path (a ray of P(c)); the graph's inputs
    all lead to an output only through edges, so walk forward from a random input."""
    rows, cols = g.edge_index
    v = g.index[g.inputs[rng.integers(len(g.inputs))]]
    outs = {g.index[y] for y in g.outputs}
    path = []
    while v not in outs:
        ks = np.flatnonzero(rows == v)
        if ks.size == 0:  # pragma: no cover - every hidden node has an out-edge
            return []
        k = int(ks[rng.integers(ks.size)])
        path.append(k)
        v = int(cols[k])
    return path


def sample_invariant_set(
    graph: DAG, c, n: int = 2000, *, seed: int = 0, n_vertices: int = 16, spread: float = 1.0
) -> Float[np.ndarray, "n E"]:
    """`n` points of `H_G(c)` (edge weights, `graph.edges` order), every one with
    `B~ theta^2 = c` to round-off.

    **Arguments:**

    - `graph`, `c`: the graph and conserved values (array in `graph.hidden` order or a
        `{label: value}` dict).
    - `n`: how many points; `seed`: NumPy seed.
    - `n_vertices`: random-objective LPs for vertices of `P(c)`.
    - `spread`: scale of the random multiples of paths (in units of `max(1, max |c|)`).

    **Returns:** an `(n, E)` array.
    """
    g = graph
    c = as_conserved(g, c)
    check_integer("n", n, minimum=1)
    rng = np.random.default_rng(seed)
    B = g.incidence().astype(np.float64)
    E = B.shape[1]
    verts = []
    for _ in range(n_vertices):
        res = linprog(rng.uniform(0.1, 1.0, E), A_eq=B, b_eq=c, bounds=(0, None), method="highs")
        if res.status == 0:
            verts.append(polish_onto(B, c, res.x))
    V = np.array(verts)
    scale = spread * max(1.0, float(np.max(np.abs(c), initial=0.0)))
    q = rng.dirichlet(np.ones(len(V)), size=n) @ V
    n_paths = 2 * len(g.inputs) + 2
    for i in range(n):  # several paths with continuous weights fill the cone, not only its edges
        w = scale * rng.uniform(0.0, 1.0) ** 2
        for _ in range(n_paths):
            q[i, _random_path(g, rng)] += w * rng.exponential(1.0 / n_paths)
    signs = rng.choice([-1.0, 1.0], size=(n, E))
    return signs * np.sqrt(np.maximum(q, 0.0))


def plot_invariant_set(
    graph: DAG, c, *, edges=None, trajectories=None, n: int = 3000, seed: int = 0, ax=None, title: str | None = None
):
    """Scatter of `H_G(c)` on three edge weights, coloured by component (the signs of the
    frozen edges), with trajectories (e.g. `flow.thetas`) drawn as lines.

    **Arguments:**

    - `graph`, `c`: the graph and conserved values.
    - `edges`: three edges `(u, v)` for the axes; default the frozen or bottleneck edges
        first, then the first edges of `graph.edges`.
    - `trajectories`: a list of `(T, E)` arrays of edge weights (each drawn as a line
        from a circle to a cross).
    - `n`, `seed`: sample size and seed (`sample_invariant_set`).
    - `ax`: a matplotlib 3-D axes (default: a new figure).
    - `title`: the axes title (default: the component count and `c`).

    **Returns:** the axes.
    """
    import matplotlib.pyplot as plt

    g = graph
    c = as_conserved(g, c)
    th = sample_invariant_set(g, c, n, seed=seed)
    comp = component_of(g, th)
    idx = _axes_edges(g, comp, edges)
    if ax is None:
        ax = plt.figure(figsize=(5.5, 5)).add_subplot(projection="3d")
    labels = comp.labels
    for j, lab in enumerate(sorted(set(labels))):
        sel = labels == lab
        ax.scatter(*(th[sel][:, k] for k in idx), s=2, alpha=0.25, color=f"C{j}", label=lab)
    for t in trajectories or []:
        t = np.asarray(t)
        ax.plot(*(t[:, k] for k in idx), color="k", lw=1.5)
        ax.scatter(*(t[:1, k] for k in idx), color="k", marker="o", s=18)
        ax.scatter(*(t[-1:, k] for k in idx), color="k", marker="x", s=30)
    for setter, k in zip((ax.set_xlabel, ax.set_ylabel, ax.set_zlabel), idx):
        setter(f"{g.edges[k][0]!s}->{g.edges[k][1]!s}")
    n_comp = int(comp.n_components.max())
    cs = ", ".join(f"c_{v!s} = {x:.3g}" for v, x in zip(g.hidden[:4], c[:4]))
    ax.set_title(title or f"H_G(c): {n_comp} component{'s' if n_comp > 1 else ''} ({cs})", fontsize=9)
    ax.legend(loc="upper left", fontsize=7, markerscale=4)
    return ax


def _axes_edges(g: DAG, comp, edges) -> list[int]:
    E = len(g.edges)
    if edges is not None:
        idx = []
        for e in edges:
            e = tuple(e)
            if e not in g.edges:
                raise ValueError(f"{e!r} is not an edge of the graph; pick three of graph.edges.")
            idx.append(g.edges.index(e))
        if len(idx) != 3:
            raise ValueError(f"edges must name three edges; got {len(idx)}.")
        return idx
    bottleneck = [k for v in g.out_bottlenecks for k in g.out_edges(v)] + [
        k for v in g.in_bottlenecks for k in g.in_edges(v)
    ]
    first = [int(k) for k in np.flatnonzero(comp.frozen.any(0))] + bottleneck
    idx = list(dict.fromkeys(first + list(range(E))))
    if E < 3:
        raise ValueError(f"The graph has {E} edges; a 3-D picture needs at least 3.")
    return idx[:3]
