"""The per-trajectory columns of the tidy results table that are derived from a record
(topology of `H_G(c0)`, ranks of `J_G`, sign changes, readable names): one function,
used where chunks are written, where folders are loaded and by `summarize_sweep`."""

from __future__ import annotations

import numpy as np

from .._results import STATUSES, result_name
from ..graph import DAG
from ..topology import frozen_mask

DERIVED = (
    "drift_in_tol",
    "rank_start",
    "rank_end",
    "connected",
    "n_components",
    "frozen",
    "component",
    "bottleneck_sign_changes",
    "frozen_sign_changes",
    "result_name",
    "status_name",
)
"""The columns `trajectory_columns` adds to a record (see its docstring)."""


def bottleneck_edges(g: DAG) -> np.ndarray:
    """Positions in `g.edges` of the unique out-edge of each out-bottleneck and the unique
    in-edge of each in-bottleneck (the only edges that can be frozen), sorted."""
    idx = {e for v in g.out_bottlenecks for e in g.out_edges(v)}
    idx |= {e for v in g.in_bottlenecks for e in g.in_edges(v)}
    return np.array(sorted(idx), dtype=np.int64)


def jacobian_ranks(g: DAG, thetas: np.ndarray) -> np.ndarray:
    """`rank J_G(theta)` for each row of `thetas` `(N, E)`, in NumPy with the threshold
    of `ij.jacobian_rank` (`max(H, E) * eps * s_max`); `-1` for a row that is not finite.
    NumPy, so that the number of rows compiles nothing."""
    thetas = np.asarray(thetas, dtype=np.float64)
    B = g.incidence()
    out = np.full(len(thetas), -1, np.int64)
    ok = np.all(np.isfinite(thetas), axis=1)
    if B.shape[0] == 0 or not ok.any():
        return np.where(ok, 0, -1).astype(np.int64)
    s = np.linalg.svd(2.0 * B[None] * thetas[ok][:, None, :], compute_uv=False)
    thr = max(B.shape) * np.finfo(np.float64).eps * s.max(axis=-1, keepdims=True)
    out[ok] = np.sum(s > thr, axis=-1)
    return out


def component_labels(g: DAG, frozen: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """One label per row: each frozen edge `u->v` with the sign of its weight (`:+` or
    `:-`), space-separated in edge order, or `"connected"` when no edge is frozen."""
    names = [f"{u!s}->{v!s}" for u, v in g.edges]
    labels = np.full(len(thetas), "connected", dtype=object)
    for r in np.flatnonzero(np.any(frozen, axis=1)):  # (most rows: none frozen)
        labels[r] = " ".join(f"{names[e]}:{'+' if thetas[r][e] > 0 else '-'}" for e in np.flatnonzero(frozen[r]))
    return labels.astype(str).reshape(len(thetas))


def trajectory_columns(g: DAG, rec: dict[str, np.ndarray], *, rtol: float, atol: float) -> dict[str, np.ndarray]:
    """The derived columns of a batch of sweep records (one row per trajectory).

    **Arguments:**

    - `g`: the sweep's graph.
    - `rec`: records with at least `theta0`, `theta_final`, `c0`, `drift`, `scale`,
        `result`, `status` (as the engine harvests them).
    - `rtol`, `atol`: the sweep's solver tolerances.

    **Returns:** a dict with the names in `DERIVED`:

    - `drift_in_tol`: `drift / (atol + rtol * scale)`.
    - `rank_start`, `rank_end`: rank of `J_G` at `theta0` and `theta_final` (`-1` if
        not finite); equal along exact flow.
    - `connected`, `n_components`: `H_G(c0)` connected, and its `2^(frozen edges)`
        components (the combinatorial verdict, `ij.frozen_mask(g, c0)` with its
        default tolerance).
    - `frozen`: `(N, E)` bool, the frozen edges (in `g.edges` order).
    - `component`: the component of `H_G(c0)` that `theta0` (and so the whole flow)
        lies in: each frozen edge and its sign, e.g. `"k->y0:+"`, space-separated, or
        `"connected"`.
    - `bottleneck_sign_changes`, `frozen_sign_changes`: bottleneck edges, and frozen
        edges, whose sign differs between `theta0` and `theta_final` (the second is 0
        when the topology is right).
    - `result_name`, `status_name`: the `ij.RESULTS` member and the `STATUSES` name.
    """
    th0 = np.asarray(rec["theta0"], np.float64)
    th1 = np.asarray(rec["theta_final"], np.float64)
    frozen = frozen_mask(g, np.asarray(rec["c0"], np.float64)) if len(th0) else np.zeros(th0.shape, bool)
    flipped = np.sign(th0) != np.sign(th1)
    bn = bottleneck_edges(g)
    status = np.asarray(rec["status"], np.int64)
    return {
        "drift_in_tol": np.asarray(rec["drift"], np.float64) / (atol + rtol * np.asarray(rec["scale"], np.float64)),
        "rank_start": jacobian_ranks(g, th0),
        "rank_end": jacobian_ranks(g, th1),
        "connected": ~frozen.any(axis=1),
        "n_components": (2 ** frozen.sum(axis=1)).astype(np.int64),
        "frozen": frozen,
        "component": component_labels(g, frozen, th0),
        "bottleneck_sign_changes": flipped[:, bn].sum(axis=1).astype(np.int64),
        "frozen_sign_changes": (flipped & frozen).sum(axis=1).astype(np.int64),
        "result_name": np.asarray(result_name(rec["result"]), dtype=str).reshape(len(th0)),
        "status_name": np.asarray(STATUSES, dtype=str)[status],
    }


VECTORS = ("theta0", "theta_final", "c0", "frozen")
"""Per-trajectory vectors: list columns in Parquet and pandas."""


def records_frame(columns: dict[str, np.ndarray]):
    """A `pandas.DataFrame` of per-trajectory columns (one row per trajectory, `index`
    first): 1-D columns as they are, `(N, k)` columns (`VECTORS`) as one NumPy vector
    per cell, as `pd.read_parquet` gives the chunks' list columns."""
    import pandas as pd

    data = {}
    for name in ("index", *sorted(k for k in columns if k != "index")):
        v = np.asarray(columns[name])
        data[name] = list(v) if v.ndim == 2 else v
    return pd.DataFrame(data)
