"""Per-trajectory statistics of a sweep, aggregate numbers, and its figures (drawn by `_figures`)."""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .._defaults import DRIFT_TOL_UNITS
from .._results import STATUSES, is_success, result_code, result_message, result_name, status_is_success
from ..topology import connectivity
from ._columns import DERIVED, trajectory_columns
from ._config import SweepConfig
from ._figures import config_title, graph_figure, save_overview, trajectory_figure
from ._kink import KINK_FIELDS
from ._result import SweepResult
from ._store import ResultsStore
from ._stream import SummaryStream

COLUMNS = (
    "index",
    "status_name",
    "result_name",
    "num_steps",
    "drift",
    "drift_in_tol",
    "rank_start",
    "rank_end",
    "connected",
    "n_components",
    "component",
    "bottleneck_sign_changes",
    "frozen_sign_changes",
    "loss_initial",
    "loss_final",
)
"""The columns of `table.csv`: a view of the tidy table (`SweepResult.to_pandas()`, the
Parquet chunks), under the same names; kink-aware sweeps add `num_events` and
`sliding_time`."""

_ROW_OF = {"num_steps": "steps", "num_events": "events"}  # SweepSummary.rows keys of table columns


class SweepSummary:
    """What a sweep found, per trajectory and in aggregate.

    **Attributes:**

    - `rows`: a mapping of equal-length NumPy arrays (a dict; a folder summary's is read
        from the chunks when first used, so that a summary itself holds no per-trajectory
        columns): `index`, `status` (the `STATUSES`
        code), `result` (the `ij.RESULTS` code), `steps` (`num_steps`), `drift`,
        `loss_initial`, `loss_final`, and the
        derived columns of the tidy table (`ij.sweep.trajectory_columns`, the same
        values the chunks store): `drift_in_tol = drift / (atol + rtol *
        conservation_scale)`; `rank_start`, `rank_end`: the rank of `J_G` at `theta0`
        and `theta_final` (threshold of `ij.jacobian_rank`; equal along exact flow);
        `connected`, `n_components`, `frozen`, `component`: the topology of `H_G(c0)`
        (`frozen_mask`, the combinatorial verdict) and the component `theta0` lies in;
        `bottleneck_sign_changes`: bottleneck edges (unique out-edge of an
        out-bottleneck, unique in-edge of an in-bottleneck) whose weight changed sign;
        `frozen_sign_changes`: those among frozen edges (0 when the topology is right: a
        frozen edge cannot change sign); `result_name`, `status_name`. Kink-aware
        sweeps add `events` (`num_events`) and `sliding_time`.
    - `aggregate`: a dict of sweep-level numbers (counts per status, fraction
        disconnected, drift/tol quantiles, steps quantiles, work efficiency, ...).
    - `failures`: one dict per trajectory that did not succeed (the first
        `FAILURES_LISTED` by index): `index`, `result` (the `ij.RESULTS` name),
        `t_final`, `num_steps`, and for kink-aware sweeps `num_events`, `num_ambiguous`,
        `num_two_folds`, `num_sliding_entries`, `max_sliding_pairs`, `sliding_time`:
        what a cause is read from. `summary.json` holds them under `"failures"`.
    - `flagged`: the same for kink-aware trajectories that succeeded with an ambiguous
        event (the flow went on, but its answer is not certified there);
        `summary.json`'s `"flagged"`, and their count its `trajectories_flagged`. The
        aggregate splits them by cause: `trajectories_flagged_at_a_two_fold` (a slide
        turned repelling, `num_two_folds > 0`) and
        `trajectories_flagged_without_consistent_modes` (no consistent modes were found,
        neither by the pivots nor by the enumeration; `num_ambiguous > num_two_folds`).
        A trajectory can have both.
    - `config`, `theta0`: the sweep's `SweepConfig` and the rows' initial weights (for
        the figures' titles and re-integrated trajectories; `None` when not known): an
        array with one row per row, or a function of an array of positions into `rows`
        giving their weights (a folder summary reads them from the chunks).
    """

    def __init__(
        self,
        rows: Mapping[str, np.ndarray],
        aggregate: dict,
        *,
        config: SweepConfig | None = None,
        theta0: np.ndarray | Callable | None = None,
        failures: list[dict] | None = None,
        flagged: list[dict] | None = None,
        first: dict[str, np.ndarray] | None = None,
        failure_counts: list[tuple[int, int]] | None = None,
    ):
        self.rows = rows
        self._first = first  # the leading rows by index (what `table` shows), when known
        self._counts = failure_counts  # (code, count) of each failure result, when known
        self.aggregate = aggregate
        self.config = config
        self.theta0 = theta0
        self.failures = [] if failures is None else failures
        self.flagged = [] if flagged is None else flagged

    def failure_kinds(self) -> list[str]:
        """One line per failure kind: count, `ij.RESULTS` name and the message that says
        the fix (stops by a rule are successes and are not listed)."""
        return [
            f"{n} trajector{'y' if n == 1 else 'ies'} {result_name(code)}: {result_message(code)}"
            for code, n in (_failure_counts(self.rows["result"]) if self._counts is None else self._counts)
        ]

    def failure_lines(self, max_lines: int = 5) -> list[str]:
        """The first `max_lines` failures, one line each, with what their records say
        (time reached, steps; events, ambiguous events and sliding pairs when kink-aware)."""
        lines: list[str] = []
        for f in self.failures[:max_lines]:
            line = f"init {f['index']}: {f['result']} at t = {f['t_final']:.4g} after {f['num_steps']} steps"
            if "num_events" in f:
                line += (
                    f", {f['num_events']} kink events ({f['num_ambiguous']} ambiguous), "
                    f"up to {f['max_sliding_pairs']} pairs sliding at once"
                )
            lines.append(line)
        n_failed = self._n_failed()
        if n_failed > len(lines):
            listed = f"the first {len(self.failures)}" if n_failed > len(self.failures) else "all"
            lines.append(f'... {n_failed - len(lines)} more ({listed} in summary.json, "failures")')
        return lines

    def flagged_lines(self, max_inits: int = 5) -> list[str]:
        """One line naming the trajectories that ended `ok` with an ambiguous event (the
        first `max_inits`), or none."""
        n = int(self.aggregate.get("trajectories_flagged", 0))
        if not n:
            return []
        inits = ", ".join(str(f["index"]) for f in self.flagged[:max_inits])
        more = ", ..." if n > min(len(self.flagged), max_inits) else ""
        a = self.aggregate
        causes = (
            f" ({a['trajectories_flagged_at_a_two_fold']} at a two-fold, where the slide turns repelling; "
            f"{a['trajectories_flagged_without_consistent_modes']} without consistent modes)"
            if "trajectories_flagged_at_a_two_fold" in a
            else ""
        )
        return [
            f"{n} trajector{'y' if n == 1 else 'ies'} ended ok with an ambiguous kink event, not certified "
            f'there{causes}: init{"" if n == 1 else "s"} {inits}{more} (summary.json, "flagged")'
        ]

    def _n_failed(self) -> int:
        failing = [f"status_{name}" for i, name in enumerate(STATUSES) if not status_is_success(np.asarray([i]))[0]]
        if all(k in self.aggregate for k in failing):
            return sum(int(self.aggregate[k]) for k in failing)
        return int(np.sum(~status_is_success(self.rows["status"])))

    def _head(self, k: int) -> dict[str, np.ndarray]:
        """The first `k` rows (by index where the summary kept them, else of `rows`)."""
        total = self.aggregate.get("initializations")
        if self._first is not None and (len(self._first["index"]) >= k or len(self._first["index"]) == total):
            return {c: v[:k] for c, v in _rows(self._first).items()}
        return {c: np.asarray(v)[:k] for c, v in self.rows.items()}

    def _total(self) -> int:
        n = self.aggregate.get("initializations")
        return int(n) if n is not None else len(self.rows["index"])

    def table(self, max_rows: int = 20) -> str:
        """The per-trajectory table (first `max_rows` rows) as text."""
        r = self._head(max_rows)
        head = (
            f"{'init':>6} {'status':>9} {'steps':>7} {'drift':>9} {'drift/tol':>9} {'rank0':>5} "
            f"{'rank1':>5} {'conn':>5} {'comps':>5} {'bn_flip':>7} {'fz_flip':>7} {'loss1':>10}"
        )
        lines = [head, "-" * len(head)]
        for i in range(min(len(r["index"]), max_rows)):
            lines.append(
                f"{r['index'][i]:>6d} {STATUSES[r['status'][i]]:>9} {r['steps'][i]:>7d} {r['drift'][i]:>9.1e} "
                f"{r['drift_in_tol'][i]:>9.2f} {r['rank_start'][i]:>5d} {r['rank_end'][i]:>5d} "
                f"{'yes' if r['connected'][i] else 'no':>5} {r['n_components'][i]:>5d} "
                f"{r['bottleneck_sign_changes'][i]:>7d} {r['frozen_sign_changes'][i]:>7d} {r['loss_final'][i]:>10.3e}"
            )
        if self._total() > max_rows:
            lines.append(f"... {self._total() - max_rows} more rows in table.csv")
        return "\n".join(lines)

    def aggregate_table(self) -> str:
        """Aggregate statistics as `name: value` lines."""
        width = max((len(k) for k in self.aggregate), default=0)
        out = []
        for k, v in self.aggregate.items():
            if isinstance(v, float):
                v = f"{v:.4g}"
            out.append(f"{k:>{width}}: {v}")
        return "\n".join(out)

    def to_csv(self, path: str | Path) -> Path:
        """Write the per-trajectory table as CSV to `path`, as the CLI's `table.csv`: the
        columns `COLUMNS` (plus `num_events`, `sliding_time` for kink-aware sweeps) of
        the tidy table, under its names, floats written exactly (`repr`), booleans as
        1/0. Returns the path."""
        path = Path(path)
        blocks = self.rows.blocks() if isinstance(self.rows, _FolderRows) else _slices(self.rows, CSV_BLOCK)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            names = None
            for rows in blocks:  # (the cells of a block at a time)
                if names is None:
                    names = _csv_names(rows)
                    w.writerow(names)
                for a in range(0, len(rows["index"]), CSV_BLOCK):
                    w.writerows(zip(*(_cells(np.asarray(rows[_ROW_OF.get(c, c)])[a : a + CSV_BLOCK]) for c in names)))
            if names is None:
                w.writerow(_csv_names(self.rows))
        return path

    def save_figures(self, folder: str | Path, *, trajectories: int = 3) -> list[Path]:
        """Write the PNG figures: one per overview panel that has something to show,
        `overview.png` with all of them (the configuration in its title, dropped panels
        said in a sentence), and, when the summary knows its config and initial weights
        (`summarize_sweep` gives both), `trajectories.png` (`trajectories` example
        flows re-integrated over time: loss, `c(t) - c(0)` in tolerance units,
        bottleneck weights) and `graph.png` (bottlenecks and frozen edges).

        **Arguments:**

        - `folder`: where to write (created).
        - `trajectories`: how many example trajectories to re-integrate (0: none).

        **Returns:** the paths written.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        folder = Path(folder)
        title = config_title(self.config, self._total())
        activation = None if self.config is None else self.config.activation
        paths = save_overview(self.rows, folder, title=title, activation=activation)
        if self.config is None:
            return paths
        figs = [("graph.png", graph_figure(self.config, self.rows))]
        if trajectories and self.theta0 is not None:
            figs.append(("trajectories.png", trajectory_figure(self.config, self.rows, self.theta0, k=trajectories)))
        for name, fig in figs:
            if fig is not None:
                paths.append(folder / name)
                fig.savefig(paths[-1], dpi=110)
                plt.close(fig)
        return paths


CSV_BLOCK = 1024
"""Rows of `table.csv` converted to cells at a time: a column at a time is fast, and a
block at a time keeps the cells' memory from growing with the sweep."""

FOLDER_BLOCK = 1 << 13
"""Consecutive indices a folder summary reads at a time to write `table.csv` in index
order (a few MB)."""


def _csv_names(rows) -> list[str]:
    return list(COLUMNS) + [c for c in ("num_events", "sliding_time") if _ROW_OF.get(c, c) in rows]


def _slices(rows: Mapping, size: int):
    n = len(rows["index"])
    for a in range(0, n, size):
        yield {k: np.asarray(v)[a : a + size] for k, v in rows.items()}


def _cells(col: np.ndarray) -> list:
    """A column's CSV cells, as `_cell` gives them, converted a column at a time."""
    if col.dtype.kind == "f":
        return [repr(x) for x in col.astype(np.float64).tolist()]
    if col.dtype.kind in "iub":
        return col.astype(np.int64).tolist()
    return [_cell(v) for v in col]


def _cell(v):
    if isinstance(v, (np.floating, float)):
        return repr(float(v))
    if isinstance(v, (np.integer, np.bool_, bool, int)):
        return int(v)
    return str(v)


def summarize_sweep(
    config: SweepConfig, result: SweepResult | str | os.PathLike, *, check_rows: int = 32, stats: dict | None = None
) -> SweepSummary:
    """Per-trajectory statistics and aggregates of a sweep.

    **Arguments:**

    - `config`: the sweep's `SweepConfig` (graph and activation).
    - `result`: its `SweepResult`, or its results folder. From a folder the records are
        read a chunk at a time, and the summary keeps none of their columns: its medians
        are exact by radix selection over more passes (`sweep/_stream.py`), `to_csv`
        reads blocks of consecutive indices, and `rows` (with the initial weights of the
        figures' example trajectories) is read from the chunks when first used.
    - `check_rows`: re-derive the connectivity verdict of this many rows with the
        per-trajectory `ij.connectivity` (combinatorial + LP) and count disagreements
        with the batched `frozen_mask` in `aggregate["connectivity_mismatches"]`.
    - `stats`: the engine's statistics (`SweepResult.stats`: seconds, slots, work
        efficiency, ...) for the `engine_*` aggregates; default: the result's own (none
        for a folder).

    **Returns:** a `SweepSummary`.
    """
    g = config.build_graph()
    if isinstance(result, SweepResult):
        rec = {**_result_columns(g, result), "c0": np.asarray(result.c0, np.float64)}
        rows: dict | _FolderRows = _rows(rec)
        theta0: np.ndarray | Callable | None = np.asarray(result.theta0, np.float64)
        stats = stats or result.stats
        chunks: Callable = lambda: [rec]  # noqa: E731
    elif isinstance(result, (str, os.PathLike)):
        store = ResultsStore(Path(result), cache_bytes=0)  # one chunk at a time: keep no records
        rows = _FolderRows(store, config, g)
        chunks = rows.chunks
        theta0 = partial(_folder_theta0, store, rows)
    else:
        raise TypeError(f"result must be a SweepResult or a results folder; got {type(result).__name__}.")
    stream = SummaryStream(
        head=max(int(check_rows), TABLE_ROWS),
        listed=FAILURES_LISTED,
        fields=_FAILURE_FIELDS,
        drift_tol_units=DRIFT_TOL_UNITS,
    )
    for c in chunks():
        stream.add(c)
    if not stream.n and isinstance(rows, _FolderRows):
        raise ValueError(f"{str(rows.store.folder)!r} holds no finished trajectories yet; run it with --resume.")
    found = stream.finish(chunks)
    agg, first = found.aggregate, found.first
    n_check = min(int(check_rows), agg["initializations"])
    checked = 0 if first is None else _connectivity_mismatches(g, first["c0"], first["frozen"], n_check)
    agg.update(connectivity_checked=n_check, connectivity_mismatches=checked)
    agg.update(found.kink or {})
    keys = ("work_efficiency", "useful_steps", "slot_iterations", "seconds", "slots", "devices", "host_seconds")
    engine = stats or {}
    agg.update({f"engine_{k}": engine[k] for k in keys if k in engine})
    agg.update({f"result_{result_name(code)}": n for code, n in found.failure_counts})
    agg.update(found.flags or {})
    return SweepSummary(
        rows,
        {_identifier(k): v for k, v in agg.items()},
        config=config,
        theta0=theta0,
        failures=_listed(found.failures),
        flagged=_listed(found.flagged),
        first=first,
        failure_counts=found.failure_counts,
    )


TABLE_ROWS = 20
"""The rows a summary keeps for `SweepSummary.table` (its default), or `check_rows` if more."""


FAILURES_LISTED = 100
"""How many trajectories a summary lists in `SweepSummary.failures` (and in `flagged`), by index."""

_FAILURE_FIELDS = (
    "t_final",
    "num_steps",
    "num_events",
    "num_ambiguous",
    "num_two_folds",
    "num_sliding_entries",
    "max_sliding_pairs",
    "sliding_time",
)


def _failure_counts(codes: np.ndarray) -> list[tuple[int, int]]:
    """`(code, count)` of each `ij.RESULTS` member that is not a success among `codes`."""
    codes = np.asarray(codes)
    failed, counts = np.unique(codes[~np.asarray(is_success(codes))], return_counts=True)
    return [(int(c), int(n)) for c, n in zip(failed, counts)]


def _listed(rows: dict | None) -> list[dict]:
    """`SweepSummary.failures` (or `flagged`) from the summary's fields of those rows (the
    first `FAILURES_LISTED` by index)."""
    if rows is None:
        return []
    keys = [k for k in _FAILURE_FIELDS if k in rows]
    return [
        {
            "index": int(rows["index"][i]),
            "result": str(result_name(int(rows["result"][i]))),
            **{k: np.asarray(rows[k][i]).item() for k in keys},
        }
        for i in range(len(rows["index"]))
    ]


_SUMMARY_FIELDS = (
    "status",
    "t_final",
    "result",
    "num_steps",
    "drift",
    "scale",
    "loss_initial",
    "loss_final",
    *(k for k in DERIVED if k not in ("result_name", "status_name")),
    *KINK_FIELDS,
)
"""The record fields a summary reads from a folder."""


def _result_columns(g, result: SweepResult) -> dict:
    """The summary's fields of a `SweepResult` (its derived columns computed when missing)."""
    own = ("index", "status", "t_final", "num_steps", "drift", "scale", "loss_initial", "loss_final")
    rec = {k: getattr(result, k) for k in own}
    rec["result"] = np.asarray(result_code(result.result))
    rec["drift_in_tol"] = result.drift_in_tol
    if result.columns is not None and all(k in result.columns for k in DERIVED if k != "drift_in_tol"):
        rec.update(result.columns)
    else:
        fields = ("theta0", "theta_final", "c0", "drift", "scale", "result", "status")
        rec.update(trajectory_columns(g, {k: getattr(result, k) for k in fields}, rtol=result.rtol, atol=result.atol))
    return {**rec, **(result.kink or {})}


def _folder_columns(store: ResultsStore, config: SweepConfig, g) -> dict:
    """The summary's fields of a results folder, sorted by index. Folders written before
    the derived columns existed are loaded whole and the columns computed."""
    if not store.scan():
        raise ValueError(f"{str(store.folder)!r} holds no finished trajectories yet; run it with --resume.")
    keys = _summary_keys(store)
    if keys is not None:
        return _load(store, keys=keys)
    rec = _load(store)
    return {**rec, **trajectory_columns(g, rec, rtol=config.rtol, atol=config.atol)}


def _summary_keys(store: ResultsStore) -> list[str] | None:
    """The summary's fields that every chunk of the folder has, or None where some chunk
    lacks a derived column (written before it existed: read every field)."""
    found = store.scan()
    have = set.intersection(*(set(c.fields) for c in found.values())) if found else set()
    if any(k not in have for k in _SUMMARY_FIELDS if k not in KINK_FIELDS):
        return None
    return [k for k in _SUMMARY_FIELDS if k in have]


class _FolderRows(Mapping):
    """`SweepSummary.rows` of a folder summary: read from the chunks when first used (by
    the figures, or a user), not by the summary itself. `chunks()` and `blocks()` give
    the summary's fields a chunk, or `FOLDER_BLOCK` consecutive indices (as rows), at a
    time; chunks written before the derived columns existed get them computed there."""

    def __init__(self, store: ResultsStore, config: SweepConfig, g):
        self.store, self.config, self.g = store, config, g
        self._loaded: dict | None = None

    def _fields(self, rec: dict) -> dict:
        if not all(k in rec for k in _SUMMARY_FIELDS if k not in KINK_FIELDS):
            rec = {**rec, **trajectory_columns(self.g, rec, rtol=self.config.rtol, atol=self.config.atol)}
        return {k: rec[k] for k in ("index", "c0", *_SUMMARY_FIELDS) if k in rec}

    def chunks(self):
        return (self._fields(r) for r in self.store.iter_records())

    def blocks(self):
        keys = _summary_keys(self.store)
        return (_rows(self._fields(r)) for r in self.store.iter_index_blocks(FOLDER_BLOCK, keys=keys))

    def _all(self) -> dict:
        if self._loaded is None:
            self._loaded = _rows(_folder_columns(self.store, self.config, self.g))
        return self._loaded

    def __getitem__(self, key):
        return self._all()[key]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


def _load(store: ResultsStore, **kw) -> dict[str, np.ndarray]:
    rec = store.load_records(**kw)
    if rec is None:  # the chunks went away after the scan
        raise ValueError(f"{str(store.folder)!r} holds no finished trajectories any more.")
    return rec


def _folder_theta0(store: ResultsStore, rows, positions) -> np.ndarray:
    """`theta0` of the rows at `positions` of a folder summary (read from its chunks)."""
    wanted = np.asarray(rows["index"])[np.asarray(positions, np.int64)]
    rec = _load(store, keys=["theta0"], indices=wanted)
    return np.asarray(rec["theta0"], np.float64)[np.searchsorted(rec["index"], wanted)]


def _connectivity_mismatches(g, c0: np.ndarray, frozen: np.ndarray, n_check: int) -> int:
    """How many of the first `n_check` rows' frozen edges `ij.connectivity` disagrees on."""
    return sum(
        set(connectivity(g, c0[i], lp="none").frozen_index) != set(np.flatnonzero(frozen[i]).tolist())
        for i in range(n_check)
    )


def _rows(rec: dict) -> dict[str, Any]:
    """`SweepSummary.rows` of the summary's fields."""
    status = np.asarray(rec["status"], np.int64)
    result = np.asarray(rec["result"], np.int32)
    drift = np.asarray(rec["drift"], float)
    rows = dict(
        index=np.asarray(rec["index"], np.int64),
        status=status,
        result=result,
        steps=np.asarray(rec["num_steps"], np.int64),
        drift=drift,
        **{k: np.asarray(rec[k]) for k in DERIVED if k not in ("result_name", "status_name")},
        result_name=_names(result),
        status_name=np.asarray(STATUSES, object)[status],
        loss_initial=np.asarray(rec["loss_initial"], float),
        loss_final=np.asarray(rec["loss_final"], float),
    )
    if "num_events" in rec:  # kink-aware sweeps: events and time on sliding modes
        rows["events"] = np.asarray(rec["num_events"], np.int64)
        rows["sliding_time"] = np.asarray(rec["sliding_time"], float)
    return rows


def _names(codes: np.ndarray) -> np.ndarray:
    """`result_name` of each code, as an object array (one `str` per distinct code)."""
    distinct, inverse = np.unique(codes, return_inverse=True)
    return np.asarray(result_name(distinct), object)[inverse.reshape(codes.shape)]


def _identifier(key: str) -> str:
    """`summary.json` keys are identifiers (`"kink events median"` -> `"kink_events_median"`)."""
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")
