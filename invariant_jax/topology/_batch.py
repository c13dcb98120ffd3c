"""Frozen edges for many `c` at once (sweeps over initializations).

For each balance condition the family of closed sets depends on the graph only. When
that family is small (a bottleneck with few pure ancestors/descendants, as in layered
networks, where it is usually the bottleneck alone), all its sums are one matrix
product over the whole batch. Otherwise the exact min cut of `connectivity` runs per
row. Both give the same verdict as `connectivity` (tested).
"""

from __future__ import annotations

import functools

import numpy as np
from jaxtyping import Bool, Float
from tqdm import tqdm

from .._checks import check_positive
from ..graph import DAG
from ._closure import closed_sets, exact_scale
from ._conditions import evaluate, regions

__all__ = ["frozen_mask", "check_tol"]


def check_tol(tol) -> None:
    """Raise unless `tol` (a number, or an array of one per network) is positive and finite,
    in the words of `check_positive` (naming the smallest or largest entry, whichever fails)."""
    if np.ndim(tol) == 0:
        check_positive("tol", tol if isinstance(tol, int | float) else np.asarray(tol).item())
        return
    arr = np.asarray(tol, dtype=np.float64)
    if arr.size:
        for v in (np.min(arr), np.max(arr)):  # NaN propagates to both
            check_positive("tol", float(v))


def _indicator_rows(sets: list[frozenset], index: dict, n: int) -> np.ndarray:
    """One row of 0/1 per set, over the `n` nodes numbered by `index`."""
    M = np.zeros((len(sets), n))
    for i, S in enumerate(sets):
        for x in S:
            M[i, index[x]] = 1.0
    return M


@functools.lru_cache(maxsize=256)
def _closed_matrix(g: DAG, r, max_sets: int) -> np.ndarray | None:
    """The nonempty closed sets of one region as rows of 0/1 over `g.hidden` (graph only,
    cached), or `None` when there are more than `max_sets`."""
    sets = closed_sets(r.nodes, r.requires, max_sets)
    if sets is None:
        return None
    return _indicator_rows([S for S in sets if S], {v: i for i, v in enumerate(g.hidden)}, len(g.hidden))


def frozen_mask(
    g: DAG,
    cs: Float[np.ndarray, "N H"],
    *,
    tol: float | Float[np.ndarray, " N"] | None = None,
    max_sets: int = 256,
    progress: bool = False,
) -> Bool[np.ndarray, "N E"]:
    """Which edges are frozen, for each row of a batch of conserved values.

    **Arguments:**

    - `g`: the `DAG`.
    - `cs`: conserved values, shape `(N, H)` (rows ordered as `g.hidden`), e.g.
        `ij.conserved_quantities(nets)` for a batch of networks.
    - `tol`: as in `connectivity` (a scalar or one per row); default
        `1e-10 * sum_v |c_v|` per row.
    - `max_sets`: use the vectorised path for a condition whose closed sets number at
        most this; otherwise run the min cut per row (slow, with a progress bar when
        `progress=True`).

    **Returns:** a boolean array `(N, E)`; `mask.sum(1)` is the number of frozen edges,
    so `2 ** mask.sum(1)` components and `~mask.any(1)` connected.
    """
    cs = np.asarray(cs, dtype=np.float64)
    H = len(g.hidden)
    if cs.ndim != 2 or cs.shape[1] != H:
        raise ValueError(f"cs has shape {cs.shape}; expected (N, {H}), one row of c per initialization.")
    if not np.all(np.isfinite(cs)):
        i, j = np.argwhere(~np.isfinite(cs))[0]
        raise ValueError(f"cs[{i}, {j}] (hidden node {g.hidden[j]!r}) is not finite; every c_v must be finite.")
    N = cs.shape[0]
    if tol is not None:
        check_tol(tol)
    if tol is None:
        tol = 1e-10 * np.maximum(np.sum(np.abs(cs), axis=1), 1e-290)
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), (N,))
    mask = np.zeros((N, len(g.edges)), dtype=bool)
    for r in regions(g):
        M = _closed_matrix(g, r, max_sets)
        if M is not None:
            sums = cs @ M.T
            if r.side == "out":
                viol = np.min(sums, axis=1, initial=np.inf) < -tol
            else:
                viol = np.max(sums, axis=1, initial=-np.inf) > tol
            mask[:, r.edge_index] |= viol
            continue
        for i in tqdm(range(N), disable=not progress, desc=f"min cuts for {r.bottleneck!s}"):
            ints, D = exact_scale(cs[i])
            cd = evaluate(g, r, dict(zip(g.hidden, ints)), D, float(tol[i]))
            mask[i, r.edge_index] |= cd.violated
    return mask
