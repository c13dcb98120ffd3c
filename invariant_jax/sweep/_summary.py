"""Per-trajectory statistics of a sweep, aggregate numbers, and figures."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np

from ..topology import connectivity
from ._columns import DERIVED, trajectory_columns
from ._config import SweepConfig
from ._engine import STATUSES
from ._run import SweepResult

COLUMNS = ("index", "status_name", "result_name", "num_steps", "drift", "drift_in_tol", "rank_start", "rank_end",
           "connected", "n_components", "component", "bottleneck_sign_changes", "frozen_sign_changes",
           "loss_initial", "loss_final")
"""The columns of `table.csv`: a view of the tidy table (`SweepResult.to_pandas()`, the
Parquet chunks), under the same names; kink-aware sweeps add `num_events` and
`sliding_time`."""

_ROW_OF = {"num_steps": "steps", "num_events": "events"}  # SweepSummary.rows keys of table columns


class SweepSummary:
    """What a sweep found, per trajectory and in aggregate.

    **Attributes:**

    - `rows`: a dict of equal-length NumPy arrays: `index`, `status` (the `STATUSES`
        code), `steps` (`num_steps`), `drift`, `loss_initial`, `loss_final`, and the
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
    """

    def __init__(self, rows: dict[str, np.ndarray], aggregate: dict):
        self.rows = rows
        self.aggregate = aggregate

    def table(self, max_rows: int = 20) -> str:
        """The per-trajectory table (first `max_rows` rows) as text."""
        r = self.rows
        head = (f"{'init':>6} {'status':>9} {'steps':>7} {'drift':>9} {'drift/tol':>9} {'rank0':>5} "
                f"{'rank1':>5} {'conn':>5} {'comps':>5} {'bn_flip':>7} {'fz_flip':>7} {'loss1':>10}")
        lines = [head, "-" * len(head)]
        for i in range(min(len(r["index"]), max_rows)):
            lines.append(
                f"{r['index'][i]:>6d} {STATUSES[r['status'][i]]:>9} {r['steps'][i]:>7d} {r['drift'][i]:>9.1e} "
                f"{r['drift_in_tol'][i]:>9.2f} {r['rank_start'][i]:>5d} {r['rank_end'][i]:>5d} "
                f"{'yes' if r['connected'][i] else 'no':>5} {r['n_components'][i]:>5d} "
                f"{r['bottleneck_sign_changes'][i]:>7d} {r['frozen_sign_changes'][i]:>7d} {r['loss_final'][i]:>10.3e}")
        if len(r["index"]) > max_rows:
            lines.append(f"... {len(r['index']) - max_rows} more rows in table.csv")
        return "\n".join(lines)

    def aggregate_table(self) -> str:
        """Aggregate statistics as `name: value` lines."""
        out = []
        for k, v in self.aggregate.items():
            if isinstance(v, float):
                v = f"{v:.4g}"
            out.append(f"{k:>28}: {v}")
        return "\n".join(out)

    def to_csv(self, path: str | Path) -> Path:
        """Write the per-trajectory table as CSV to `path`, as the CLI's `table.csv`: the
        columns `COLUMNS` (plus `num_events`, `sliding_time` for kink-aware sweeps) of
        the tidy table, under its names, floats written exactly (`repr`), booleans as
        1/0. Returns the path."""
        path = Path(path)
        names = list(COLUMNS) + [c for c in ("num_events", "sliding_time") if _ROW_OF.get(c, c) in self.rows]
        cols = [np.asarray(self.rows[_ROW_OF.get(c, c)]) for c in names]
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(names)
            for i in range(len(self.rows["index"])):
                w.writerow([_cell(col[i]) for col in cols])
        return path

    def save_figures(self, folder: str | Path) -> list[Path]:
        """Write the PNG figures (one per panel, and `overview.png` with all of them)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        panels = [("drift_tol", _drift_panel), ("loss_by_connectivity", _loss_panel),
                  ("disconnected", _disconnected_panel), ("rank", _rank_panel), ("steps", _steps_panel)]
        if "events" in self.rows:
            panels.append(("kink_events", _kink_panel))
        paths = []
        for name, fn in panels:
            fig, ax = plt.subplots(figsize=(4.5, 3.4), layout="constrained")
            fn(ax, self.rows)
            paths.append(folder / f"{name}.png")
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
        cols = -(-(len(panels) + 1) // 2)
        fig, axs = plt.subplots(2, cols, figsize=(4.4 * cols, 7.5), layout="constrained")
        for ax, (_, fn) in zip(axs.flat, panels):
            fn(ax, self.rows)
        _status_panel(axs.flat[-1], self.rows)
        fig.suptitle(f"sweep: {len(self.rows['index'])} initializations")
        paths.append(folder / "overview.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
        return paths


def _cell(v):
    if isinstance(v, (np.floating, float)):
        return repr(float(v))
    if isinstance(v, (np.integer, np.bool_, bool, int)):
        return int(v)
    return str(v)


def _drift_panel(ax, r):
    v = np.asarray(r["drift_in_tol"], float)
    v = v[np.isfinite(v)]
    bins = np.logspace(np.log10(max(v.min(), 1e-6)), np.log10(max(v.max(), 1e-5)) + 0.1, 30) if v.size else 10
    ax.hist(np.maximum(v, 1e-6), bins=bins, color="C0")
    ax.set_xscale("log")
    ax.set_xlabel("drift of c / (atol + rtol scale)")
    ax.set_ylabel("initializations")
    ax.set_title("conservation drift in tolerance units")


def _loss_panel(ax, r):
    L = np.asarray(r["loss_final"], float)
    ok = np.isfinite(L) & (L > 0)
    conn = np.asarray(r["connected"], bool)
    data = [L[ok & conn], L[ok & ~conn]]
    lo = min((d.min() for d in data if d.size), default=1e-12)
    hi = max((d.max() for d in data if d.size), default=1.0)
    bins = np.logspace(np.log10(lo), np.log10(hi) + 1e-9, 30)
    for d, lab, col in zip(data, ("connected H_G(c0)", "disconnected H_G(c0)"), ("C2", "C3")):
        if d.size:
            ax.hist(d, bins=bins, alpha=0.6, label=f"{lab} ({d.size})", color=col)
    ax.set_xscale("log")
    ax.set_xlabel("final loss")
    ax.set_ylabel("initializations")
    ax.legend(fontsize=8)
    ax.set_title("final loss by connectivity verdict")


def _disconnected_panel(ax, r):
    comps = np.asarray(r["n_components"])
    vals, counts = np.unique(comps, return_counts=True)
    ax.bar([str(v) for v in vals], counts / max(len(comps), 1), color="C4")
    frac = float(np.mean(~np.asarray(r["connected"], bool))) if len(comps) else 0.0
    ax.set_xlabel("components of H_G(c0)")
    ax.set_ylabel("fraction of initializations")
    ax.set_title(f"disconnected: {frac:.1%}")


def _rank_panel(ax, r):
    r0, r1 = np.asarray(r["rank_start"]), np.asarray(r["rank_end"])
    ks = np.arange(min(r0.min(), r1.min()), max(r0.max(), r1.max()) + 1) if len(r0) else np.arange(1)
    w = 0.4
    ax.bar(ks - w / 2, [np.sum(r0 == k) for k in ks], w, label="start", color="C0")
    ax.bar(ks + w / 2, [np.sum(r1 == k) for k in ks], w, label="end", color="C1")
    ax.set_xticks(ks)
    ax.set_xlabel("rank of J_G(theta)")
    ax.set_ylabel("initializations")
    ax.legend(fontsize=8)
    ax.set_title(f"rank start vs end (changed: {int(np.sum(r0 != r1))})")


def _steps_panel(ax, r):
    s = np.maximum(np.asarray(r["steps"], float), 1)
    ax.hist(s, bins=np.logspace(0, np.log10(s.max()) + 0.05, 30) if len(s) else 10, color="C5")
    ax.set_xscale("log")
    ax.set_xlabel("solver steps (accepted + rejected)")
    ax.set_ylabel("initializations")
    if len(s):
        ax.set_title(f"steps: median {np.median(s):.0f}, max {s.max():.0f}")


def _kink_panel(ax, r):
    ev = np.asarray(r["events"])
    slide = np.asarray(r["sliding_time"], float) > 0
    bins = np.arange(ev.max() + 2) - 0.5 if len(ev) and ev.max() < 40 else 30
    for sel, lab, col in ((~slide, "no sliding", "C0"), (slide, "with sliding", "C1")):
        if sel.any():
            ax.hist(ev[sel], bins=bins, alpha=0.7, label=f"{lab} ({int(sel.sum())})", color=col)
    ax.set_xlabel("kink events (crossings, sliding entries and exits)")
    ax.set_ylabel("initializations")
    ax.legend(fontsize=8)
    if len(ev):
        t = np.asarray(r["sliding_time"], float)
        ax.set_title(f"events: median {np.median(ev):.0f}; sliding time median {np.median(t):.2g}, max {t.max():.2g}", fontsize=9)


def _status_panel(ax, r):
    st = np.asarray(r["status"])
    ax.bar(STATUSES, [np.sum(st == k) for k in range(len(STATUSES))], color="C7")
    ax.set_ylabel("initializations")
    ax.set_title("status")


def summarize_sweep(config: SweepConfig, result: SweepResult, *, check_rows: int = 32) -> SweepSummary:
    """Per-trajectory statistics and aggregates of a sweep.

    **Arguments:**

    - `config`: the sweep's `SweepConfig` (graph and activation).
    - `result`: its `SweepResult`.
    - `check_rows`: re-derive the connectivity verdict of this many rows with the
        per-trajectory `ij.connectivity` (combinatorial + LP) and count disagreements
        with the batched `frozen_mask` in `aggregate["connectivity_mismatches"]`.

    **Returns:** a `SweepSummary`.
    """
    g = config.build_graph()
    c0 = np.asarray(result.c0, dtype=np.float64)
    derived = result.columns if result.columns is not None and all(
        k in result.columns for k in DERIVED if k != "drift_in_tol") else trajectory_columns(
        g, {k: getattr(result, k) for k in ("theta0", "theta_final", "c0", "drift", "scale", "result", "status")},
        rtol=result.rtol, atol=result.atol)
    frozen = np.asarray(derived["frozen"], bool)
    n_check = min(int(check_rows), len(c0))
    mismatches = sum(
        set(connectivity(g, c0[i], lp="none").frozen_index) != set(np.flatnonzero(frozen[i]).tolist())
        for i in range(n_check))
    rows = dict(
        index=np.asarray(result.index, np.int64), status=np.asarray(result.status, np.int64),
        steps=np.asarray(result.num_steps, np.int64), drift=np.asarray(result.drift, float),
        drift_in_tol=np.asarray(result.drift_in_tol, float),
        **{k: np.asarray(derived[k]) for k in DERIVED if k != "drift_in_tol"},
        loss_initial=np.asarray(result.loss_initial, float), loss_final=np.asarray(result.loss_final, float),
    )
    if result.kink is not None:  # kink-aware sweeps: events and time on sliding modes
        rows["events"] = np.asarray(result.kink["num_events"], np.int64)
        rows["sliding_time"] = np.asarray(result.kink["sliding_time"], float)
    st = rows["status"]
    ok = st <= 1
    dt = rows["drift_in_tol"][ok]
    agg = {
        "initializations": int(len(st)),
        **{f"status_{name}": int(np.sum(st == k)) for k, name in enumerate(STATUSES)},
        "fraction_disconnected": float(np.mean(~rows["connected"])) if len(st) else 0.0,
        "max_components": int(rows["n_components"].max()) if len(st) else 0,
        "drift_tol_median": float(np.median(dt)) if dt.size else float("nan"),
        "drift_tol_max": float(np.max(dt)) if dt.size else float("nan"),
        "fraction_within_100_tol": float(np.mean(dt <= 100)) if dt.size else float("nan"),
        "rank_changed": int(np.sum((rows["rank_start"] != rows["rank_end"]) & ok)),
        "bottleneck_sign_changes": int(rows["bottleneck_sign_changes"].sum()),
        "frozen_sign_changes": int(rows["frozen_sign_changes"].sum()),
        "loss_final_median": float(np.median(rows["loss_final"][ok])) if ok.any() else float("nan"),
        "loss_final_median_connected": _median(rows["loss_final"][ok & rows["connected"]]),
        "loss_final_median_disconnected": _median(rows["loss_final"][ok & ~rows["connected"]]),
        "steps_min": int(rows["steps"].min()) if len(st) else 0,
        "steps_median": float(np.median(rows["steps"])) if len(st) else 0.0,
        "steps_max": int(rows["steps"].max()) if len(st) else 0,
        "connectivity_checked": n_check,
        "connectivity_mismatches": int(mismatches),
    }
    if result.kink is not None:
        kk = result.kink
        agg.update({
            "kink events median": float(np.median(kk["num_events"])) if len(st) else 0.0,
            "kink crossings total": int(np.sum(kk["num_crossings"])),
            "trajectories sliding": int(np.sum(kk["num_sliding_entries"] > 0)),
            "max pairs sliding at once": int(np.max(kk["max_sliding_pairs"])) if len(st) else 0,
            "ambiguous events": int(np.sum(kk["num_ambiguous"])),
            "kink events total": int(np.sum(kk["num_events"])),
            "sliding time median": float(np.median(kk["sliding_time"])) if len(st) else 0.0,
            "sliding time max": float(np.max(kk["sliding_time"])) if len(st) else 0.0,
        })
    for k in ("work_efficiency", "useful_steps", "slot_iterations", "seconds", "slots", "devices"):
        if k in result.stats:
            agg[f"engine_{k}"] = result.stats[k]
    return SweepSummary(rows, {_identifier(k): v for k, v in agg.items()})


def _identifier(key: str) -> str:
    """`summary.json` keys are identifiers (`"kink events median"` -> `"kink_events_median"`)."""
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")


def _median(a):
    return float(np.median(a)) if np.size(a) else float("nan")
