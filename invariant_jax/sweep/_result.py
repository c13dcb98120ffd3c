"""`SweepResult`: the per-trajectory records of a sweep, in memory."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._results import RESULTS, STATUSES, is_success, result_code, status_is_success
from ._columns import DERIVED, records_frame, trajectory_columns
from ._config import SweepConfig
from ._engine import EngineStats
from ._kink import KINK_FIELDS

FIELDS = (
    "index",
    "theta0",
    "theta_final",
    "t_final",
    "c0",
    "loss_initial",
    "loss_final",
    "drift",
    "drift_relative",
    "scale",
    "num_steps",
    "num_accepted_steps",
    "num_rejected_steps",
    "result",
    "status",
)
"""The per-trajectory records every sweep harvests (the engine's record), in table order."""


class SweepResult(eqx.Module):
    """Per-trajectory records of a sweep, sorted by initialization index.

    **Fields** (leading axis: trajectories):

    - `index`: initialization index `i` (key `fold_in(key(seed), i)` in `run_sweep`).
    - `theta0`, `theta_final`: edge weights at `t0` and where integration stopped.
    - `t_final`: where it stopped (`t1`, the stopping rule's time, or the last state).
    - `c0`: `c = B~ theta0^2`.
    - `loss_initial`, `loss_final`: data loss.
    - `drift`, `drift_relative`: as `Flow.drift` (max over the save times and the end).
    - `drift_in_tol`: `drift / (atol + rtol * scale)`, `scale = conservation_scale(net0)`.
    - `num_steps`, `num_accepted_steps`, `num_rejected_steps`: diffrax's counts.
    - `result`: the outcome of each trajectory, an `ij.RESULTS` item with one entry per
        trajectory (as `jax.vmap` of `gradient_flow` gives it): `ij.is_success`,
        `ij.result_name`, `ij.result_message` and `res.result == ij.RESULTS.max_steps_reached`
        work on it; `ij.result_code(res.result)` gives the integer codes the results store
        keeps (its `result` column, beside the readable `result_name`).
    - `status`: the coarse `STATUSES` index derived from it (`ij.sweep.status_code`; ask
        `ij.sweep.status_is` / `status_is_success`, never compare the integers).
    - `stats`: `useful_steps`, `slot_iterations`, `work_efficiency`, `seconds`, `calls`,
        `slots`, `devices` and `host_seconds` (`EngineStats`) of the engine run that
        produced them (summed over resumptions in this process).
    - `rtol`, `atol`.
    - `kink`: for kink-aware sweeps, a dict of per-trajectory event counts
        (`num_events`, `num_crossings`, `num_sliding_entries`, `num_sliding_exits`,
        `num_ambiguous`, `max_sliding_pairs`, `sliding_time`); otherwise `None`.
    - `columns`: for sweeps of a `SweepConfig` (`run_sweep`, `load_sweep`), the derived
        per-trajectory columns of the tidy table (`rank_start`, `rank_end`, `connected`,
        `n_components`, `frozen`, `component`, sign changes, `result_name`,
        `status_name`; see `ij.sweep.trajectory_columns`), as the chunks store them;
        otherwise `None`.

    `to_pandas()` gives all of it as one data frame, one row per trajectory.
    """

    index: np.ndarray
    theta0: np.ndarray
    theta_final: np.ndarray
    t_final: np.ndarray
    c0: np.ndarray
    loss_initial: np.ndarray
    loss_final: np.ndarray
    drift: np.ndarray
    drift_relative: np.ndarray
    drift_in_tol: np.ndarray
    scale: np.ndarray
    num_steps: np.ndarray
    num_accepted_steps: np.ndarray
    num_rejected_steps: np.ndarray
    result: RESULTS
    status: np.ndarray
    stats: dict = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    kink: dict | None = None
    columns: dict | None = None

    def to_pandas(self):
        """The tidy table: one row per trajectory, `index` first, every per-trajectory
        field (`theta0`, `theta_final`, `c0`, `frozen` as one vector per cell; `result` as
        its integer code, beside `result_name`), the kink counts and the derived
        `columns`: the same columns `pd.read_parquet(folder + "/chunks")` reads
        (deduplicated and sorted by `index`). Needs pandas."""
        cols = {k: getattr(self, k) for k in FIELDS}
        cols["result"] = self.result_codes
        cols["drift_in_tol"] = self.drift_in_tol
        return records_frame({**cols, **(self.kink or {}), **(self.columns or {})})

    @property
    def result_codes(self) -> np.ndarray:
        """`ij.result_code(self.result)` as a NumPy int32 array (the results store's column)."""
        return np.asarray(result_code(self.result), np.int32)

    @property
    def status_names(self) -> tuple[str, ...]:
        return tuple(STATUSES[int(s)] for s in self.status)

    @property
    def success(self) -> np.ndarray:
        """Per trajectory: reached `t1` or stopped by a stopping rule."""
        return np.asarray(is_success(self.result))

    @property
    def n_failed(self) -> int:
        return int(np.sum(~status_is_success(self.status)))

    def __len__(self) -> int:
        return len(self.index)


def results_of_codes(codes) -> RESULTS:
    """The `RESULTS` item holding the integer `codes` (a NumPy int32 array inside)."""
    codes = np.asarray(codes, np.int32)
    return jax.tree.map(lambda _: codes, RESULTS.successful)


def result_from_records(rec: dict[str, np.ndarray], stats: dict, rtol: float, atol: float) -> SweepResult:
    """A `SweepResult` of harvested (or loaded) records, sorted by `index`."""
    index = np.asarray(rec["index"])
    order = slice(None) if np.all(index[1:] >= index[:-1]) else np.argsort(index, kind="stable")  # loaded: sorted
    kink = {k: np.asarray(rec[k])[order] for k in KINK_FIELDS if k in rec} or None
    columns = {k: np.asarray(rec[k])[order] for k in DERIVED if k in rec and k != "drift_in_tol"} or None
    fields: dict[str, Any] = {k: np.asarray(v)[order] for k, v in rec.items() if k in FIELDS}
    fields["result"] = results_of_codes(fields["result"])
    tol = atol + rtol * fields["scale"]
    return SweepResult(
        **fields,
        drift_in_tol=fields["drift"] / tol,
        stats=dict(stats),
        rtol=float(rtol),
        atol=float(atol),
        kink=kink,
        columns=columns,
    )


def with_columns(config: SweepConfig, graph, rec: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`rec` with the derived columns of the tidy table (`trajectory_columns`) added
    where they are missing (records of folders written before they existed)."""
    if all(k in rec for k in DERIVED):
        return rec
    return {**rec, **trajectory_columns(graph, rec, rtol=config.rtol, atol=config.atol)}


def stats_dict(st: EngineStats | None, engine) -> dict[str, Any]:
    """The `SweepResult.stats` of an engine run (`None`: no run)."""
    st = st or EngineStats(0, 0, 0, 0.0, 0)
    return dict(
        useful_steps=st.useful_steps,
        slot_iterations=st.slot_iterations,
        work_efficiency=st.work_efficiency,
        seconds=st.seconds,
        calls=st.calls,
        slots=engine.slots,
        devices=st.devices,
        host_seconds=st.host_seconds,
    )
