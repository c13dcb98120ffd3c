"""Figures of a sweep that answer its research questions: the overview of every
trajectory (drift in tolerance units, final loss by connectivity verdict, components,
rank, steps, kink events, status), example trajectories over time (loss, `c(t) - c(0)`
in tolerance units, the bottleneck weights whose sign is frozen), and the graph with
its bottlenecks and frozen edges marked.

Panels with nothing to show are dropped and said in one sentence instead (a rank that
no flow changed, a sweep whose `H_G(c0)` is always connected, a single status)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import networkx as nx
import numpy as np

from .._results import STATUSES, status_is, status_is_success
from ..activations import ACTIVATIONS
from ..flow import gradient_flow
from ..graph import DAG
from ..kinks import kink_aware_flow
from ..network import DAGNetwork
from ..options import SaveTimes
from ._columns import bottleneck_edges
from ._config import SweepConfig


def config_title(config: SweepConfig | None, n: int) -> str:
    """One line naming a sweep's configuration: graph, activation, t1, n and method."""
    if config is None:
        return f"sweep: {n} initializations"
    g = config.build_graph()
    graph = {
        "mlp": f"mlp {list(config.widths)}",
        "example": "example DAG",
        "random": f"random DAG (p={config.edge_prob:g})",
    }.get(config.graph, "DAG from edge list")
    method = "kink-aware" if config.kink_aware else config.solver.solver
    return (
        f"{graph}: {len(g.hidden)} hidden, {len(g.edges)} edges | {config.activation} | t1={config.t1:g} | "
        f"n={n} | {method}, rtol={config.rtol:g}"
    )


# ------------------------------------------------------------------ overview panels


def _counts_axis(ax, *, log_x: bool = False) -> None:
    """Integer ticks on a count axis; on a log x axis, labels at the decades only."""
    from matplotlib.ticker import MaxNLocator, NullFormatter

    if ax.get_yscale() == "linear":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if log_x:
        ax.xaxis.set_minor_formatter(NullFormatter())


def _drift_panel(ax, r):
    v = np.asarray(r["drift_in_tol"], float)
    v = np.maximum(v[np.isfinite(v)], 1e-6)
    bins = np.logspace(np.log10(v.min()), np.log10(max(v.max(), 1e-5)) + 0.1, 30)
    ax.hist(v, bins=bins, color="C0")
    ax.set_xscale("log")
    ax.set_xlabel("max_v |c_v(t) - c_v(0)| / (atol + rtol scale)")
    ax.set_ylabel("initializations")
    ax.set_title("conservation drift in tolerance units")
    _counts_axis(ax, log_x=True)


def _loss_panel(ax, r):
    L = np.asarray(r["loss_final"], float)
    ok = np.isfinite(L) & (L > 0)
    conn = np.asarray(r["connected"], bool)
    data = [L[ok & conn], L[ok & ~conn]]
    lo = min(d.min() for d in data if d.size)
    hi = max(d.max() for d in data if d.size)
    bins = np.logspace(np.log10(lo), np.log10(hi) + 1e-9, 30)
    for d, lab, col in zip(data, ("connected H_G(c0)", "disconnected H_G(c0)"), ("C2", "C3")):
        if d.size:
            ax.hist(d, bins=bins, alpha=0.6, label=f"{lab} ({d.size})", color=col)
    ax.set_xscale("log")
    ax.set_xlabel("final loss")
    ax.set_ylabel("initializations")
    ax.legend(fontsize=8)
    ax.set_title("final loss by connectivity verdict")
    _counts_axis(ax, log_x=True)


def _components_panel(ax, r):
    comps = np.asarray(r["n_components"])
    vals, counts = np.unique(comps, return_counts=True)
    ax.bar([str(v) for v in vals], counts / len(comps), color="C4")
    frac = float(np.mean(~np.asarray(r["connected"], bool)))
    ax.set_xlabel("components of H_G(c0) (2^frozen edges)")
    ax.set_ylabel("fraction of initializations")
    ax.set_title(f"disconnected: {frac:.1%}")


def _rank_panel(ax, r):
    r0, r1 = np.asarray(r["rank_start"]), np.asarray(r["rank_end"])
    changed = r0 != r1
    ks = np.arange(min(r0.min(), r1.min()), max(r0.max(), r1.max()) + 1)
    ax.bar(ks - 0.2, [np.sum(r0[changed] == k) for k in ks], 0.4, label="start", color="C0")
    ax.bar(ks + 0.2, [np.sum(r1[changed] == k) for k in ks], 0.4, label="end", color="C1")
    ax.set_xticks(ks)
    ax.set_xlabel("rank of J_G(theta)")
    ax.set_ylabel("initializations whose rank changed")
    ax.legend(fontsize=8)
    ax.set_title(f"rank changed along {int(changed.sum())} of {len(r0)} flows")
    _counts_axis(ax)


def _steps_panel(ax, r):
    s = np.maximum(np.asarray(r["steps"], float), 1)
    ax.hist(s, bins=np.logspace(0, np.log10(s.max()) + 0.05, 30), color="C5")
    ax.set_xscale("log")
    ax.set_xlabel("solver steps (accepted + rejected)")
    ax.set_ylabel("initializations")
    ax.set_title(f"steps: median {np.median(s):.0f}, max {s.max():.0f}")
    _counts_axis(ax, log_x=True)


def _kink_panel(ax, r):
    """Events per trajectory, runs with and without sliding side by side on a log count
    axis (a handful of sliding runs stays visible next to hundreds without)."""
    from matplotlib.ticker import MaxNLocator

    ev = np.asarray(r["events"])
    slide = np.asarray(r["sliding_time"], float) > 0
    edges: np.ndarray
    if ev.max() < 40:
        edges = np.arange(ev.max() + 2) - 0.5
    else:
        edges = np.unique(np.round(np.logspace(0, np.log10(ev.max() + 1), 25))) - 0.5
        edges = np.concatenate([[-0.5], edges])
        ax.set_xscale("symlog", linthresh=1)
    groups = [(ev[~slide], "no sliding", "C0"), (ev[slide], "with sliding", "C1")]
    groups = [g for g in groups if g[0].size]
    ax.hist(
        [g[0] for g in groups],
        bins=edges,
        label=[f"{lab} ({d.size})" for d, lab, _ in groups],
        color=[c for *_, c in groups],
        log=True,
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("kink events per trajectory (crossings, sliding entries and exits)")
    ax.set_ylabel("initializations (log)")
    ax.legend(fontsize=8)
    t = np.asarray(r["sliding_time"], float)
    ax.set_title(
        f"kink events: median {np.median(ev):.0f}; sliding in {int(slide.sum())} runs (time max {t.max():.2g})",
        fontsize=9,
    )


def _status_panel(ax, r):
    from matplotlib.ticker import MaxNLocator

    st = np.asarray(r["status"])
    present = [name for name in STATUSES if np.any(status_is(st, name))]
    counts = [int(np.sum(status_is(st, name))) for name in present]
    ax.barh(range(len(present)), counts, color="C7")
    ax.set_yticks(range(len(present)), present)
    ax.invert_yaxis()
    ax.set_xlabel("initializations")
    ax.set_title("status")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def overview_panels(rows: Mapping, *, activation: str | None = None) -> tuple[list[tuple], list[str]]:
    """Decide which overview panels have something to show.

    **Arguments:**

    - `rows`: `SweepSummary.rows`.
    - `activation`: the sweep's activation; without a conservation law (not positively
        homogeneous) the drift panel is dropped.

    **Returns:** `(panels, notes)`: `panels` a list of `(name, draw(ax, rows))`, `notes`
    one sentence per dropped panel, saying what it would have shown.
    """
    n = len(rows["index"])
    panels, notes = [], []
    law = activation is None or ACTIVATIONS[activation].positively_homogeneous
    drift = np.asarray(rows["drift_in_tol"], float)
    if not law:
        notes.append(f"No conservation law for {activation}: drift of c not shown.")
    elif np.isfinite(drift).any():
        panels.append(("drift_tol", _drift_panel))
    L = np.asarray(rows["loss_final"], float)
    if np.any(np.isfinite(L) & (L > 0)):
        panels.append(("loss_by_connectivity", _loss_panel))
    if np.all(rows["connected"]):
        notes.append(f"H_G(c0) connected for all {n} initializations (no frozen edge).")
    else:
        panels.append(("disconnected", _components_panel))
    r0, r1 = np.asarray(rows["rank_start"]), np.asarray(rows["rank_end"])
    if np.any(r0 != r1):
        panels.append(("rank", _rank_panel))
    else:
        lo, hi = int(r0.min()), int(r0.max())
        notes.append(
            f"Rank of J_G unchanged along all {n} flows ({lo} to {hi} at start)."
            if lo != hi
            else f"Rank of J_G unchanged along all {n} flows (rank {lo})."
        )
    panels.append(("steps", _steps_panel))
    if "events" in rows:
        panels.append(("kink_events", _kink_panel))
    st = np.asarray(rows["status"])
    if len(np.unique(st)) > 1:
        panels.append(("status", _status_panel))
    else:
        notes.append(f"Status {STATUSES[int(st[0])]} for all {n} initializations.")
    return panels, notes


def overview_figure(rows: Mapping, *, title: str, activation: str | None = None):
    """All overview panels in one figure, the configuration in its title and the dropped
    panels' sentences in a text panel. **Returns:** a matplotlib `Figure`."""
    import matplotlib.pyplot as plt

    panels, notes = overview_panels(rows, activation=activation)
    cells = len(panels) + bool(notes)
    cols = min(3, cells)
    nrows = -(-cells // cols)
    fig, axs = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.7 * nrows), layout="constrained", squeeze=False)
    for ax, (_, draw) in zip(axs.flat, panels):
        draw(ax, rows)
    rest = list(axs.flat[len(panels) :])
    if notes:
        ax = rest.pop(0)
        ax.axis("off")
        ax.text(0.0, 1.0, "\n\n".join(notes), va="top", ha="left", wrap=True, fontsize=10, transform=ax.transAxes)
        ax.set_title("not drawn (nothing to show)", fontsize=10)
    for ax in rest:
        fig.delaxes(ax)
    fig.suptitle(title)
    return fig


def save_overview(rows: Mapping, folder: str | Path, *, title: str, activation: str | None = None) -> list[Path]:
    """One PNG per drawn panel and `overview.png`. **Returns:** the paths written."""
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    panels, _ = overview_panels(rows, activation=activation)
    paths = []
    for name, draw in panels:
        fig, ax = plt.subplots(figsize=(4.6, 3.5), layout="constrained")
        draw(ax, rows)
        paths.append(folder / f"{name}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    fig = overview_figure(rows, title=title, activation=activation)
    paths.append(folder / "overview.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


# ------------------------------------------------------------------ example trajectories


def pick_examples(rows: Mapping, k: int = 3) -> list[int]:
    """Positions (into `rows`) of up to `k` successful trajectories worth looking at:
    the disconnected one with most frozen edges, a connected one whose bottleneck weight
    changed sign, the longest sliding time, the largest drift in tolerance units, then
    the first ones. **Returns:** a list of distinct positions."""
    ok = status_is_success(np.asarray(rows["status"]))
    if not ok.any() or k <= 0:
        return []
    frozen = np.asarray(rows["frozen"], bool).sum(axis=1)
    conn = np.asarray(rows["connected"], bool)
    cands = []
    if np.any(ok & ~conn):
        cands.append(int(np.argmax(np.where(ok & ~conn, frozen, -1))))
    flips = ok & conn & (np.asarray(rows["bottleneck_sign_changes"]) > 0)
    if flips.any():
        cands.append(int(np.flatnonzero(flips)[0]))
    if "sliding_time" in rows and np.any(ok & (np.asarray(rows["sliding_time"]) > 0)):
        cands.append(int(np.argmax(np.where(ok, rows["sliding_time"], -1.0))))
    drift = np.where(ok & np.isfinite(rows["drift_in_tol"]), rows["drift_in_tol"], -np.inf)
    cands.append(int(np.argmax(drift)))
    cands += [int(i) for i in np.flatnonzero(ok)]
    return list(dict.fromkeys(cands))[:k]


def reintegrate(config: SweepConfig, theta0: np.ndarray, *, n_save: int = 201):
    """Integrate one sweep initialization again, saving `n_save` times, with the sweep's
    own method: `ij.kink_aware_flow` for kink-aware sweeps, else `ij.gradient_flow`
    (its solver, tolerances, stopping rules, loss and weight decay), on
    `config.build_data()`. The sweep stores only end points; this is how a trajectory
    over time is recovered (`theta0` is the row's, as `ij.sweep_network(folder, i)`).

    **Returns:** the `Flow` (for kink-aware sweeps, `KinkFlow.flow`).
    """
    g = config.build_graph()
    X, Y = config.build_data(g)
    net = DAGNetwork(g, config.activation, edge_weights=np.asarray(theta0))
    save = SaveTimes(n_save=n_save)
    if config.kink_aware:
        return kink_aware_flow(
            net,
            X,
            Y,
            config.t1,
            solver=config.solver_options,
            saveat=save,
            kinks=config.kink_options,
            loss=config.loss.loss,
        ).flow
    return gradient_flow(
        net, X, Y, config.t1, solver=config.solver_options, saveat=save, stop=config.stop_rules, loss=config.loss
    )


def _finite(flow):
    ts = np.asarray(flow.ts)
    keep = np.isfinite(ts)
    return ts[keep], np.asarray(flow.thetas)[keep], np.asarray(flow.losses)[keep], np.asarray(flow.conserved)[keep]


def _trajectory_row(axs, flow, row: dict, g: DAG, bn: np.ndarray, rtol: float, atol: float):
    """Loss, `max_v |c(t) - c(0)|` in tolerance units, and (with a third axis) the
    bottleneck weights of one trajectory (frozen ones solid, free ones dashed)."""
    ts, thetas, losses, cs = _finite(flow)
    i = int(row["index"])
    axs[0].plot(ts, losses, color="C0")
    axs[0].set_yscale("log")
    axs[0].set_ylabel("loss")
    axs[0].set_title(
        f"init {i}: {'connected' if row['connected'] else 'disconnected'} H_G(c0), final loss {losses[-1]:.3g}",
        fontsize=9,
    )
    scale = np.max(thetas[0] ** 2 @ np.abs(g.incidence()).T)
    dev = np.max(np.abs(cs - cs[0]), axis=1) / (atol + rtol * scale)
    axs[1].plot(ts[1:], np.maximum(dev[1:], 1e-3), color="C2")
    axs[1].set_yscale("log")
    axs[1].axhline(1.0, color="0.5", lw=0.8, ls=":")
    axs[1].set_ylabel("|c(t) - c(0)| / tol")
    axs[1].set_title("drift of c in tolerance units (max over nodes)", fontsize=9)
    for ax in axs:
        ax.set_xlabel("t (loss = (1/2N) sum ||f - y||^2)")
    if len(axs) < 3:
        return
    frozen = np.asarray(row["frozen"], bool)
    for j, e in enumerate(bn):
        style = "-" if frozen[e] else "--"
        axs[2].plot(
            ts,
            thetas[:, e],
            style,
            color=f"C{j % 10}",
            label=f"{g.edges[e][0]}->{g.edges[e][1]}" + (" (frozen)" if frozen[e] else ""),
        )
    axs[2].axhline(0.0, color="0.3", lw=0.8)
    axs[2].set_ylabel("weight")
    axs[2].set_title("bottleneck edges: solid = sign frozen", fontsize=9)
    if len(bn) <= 8:
        axs[2].legend(fontsize=7)


def trajectory_figure(config: SweepConfig, rows: Mapping, theta0, *, k: int = 3, n_save: int = 201):
    """Example trajectories of a sweep over time, re-integrated from their rows
    (`pick_examples`, `reintegrate`): per trajectory, the loss, `c(t) - c(0)` in
    tolerance units and the bottleneck weights (frozen ones solid).

    **Arguments:**

    - `config`: the sweep's `SweepConfig`.
    - `rows`: `SweepSummary.rows`.
    - `theta0`: the initial weights, one row per entry of `rows` (`SweepResult.theta0`),
        or a function of an array of positions into `rows` giving their rows.
    - `k`: how many trajectories.
    - `n_save`: saved times per trajectory.

    **Returns:** a matplotlib `Figure`, or `None` when no trajectory succeeded.
    """
    import matplotlib.pyplot as plt

    picks = pick_examples(rows, k)
    if not picks:
        return None
    g = config.build_graph()
    bn = bottleneck_edges(g)
    ncol = 3 if len(bn) else 2
    fig, axs = plt.subplots(
        len(picks), ncol, figsize=(4.6 * ncol, 3.0 * len(picks)), layout="constrained", squeeze=False
    )
    starts = theta0(np.asarray(picks)) if callable(theta0) else np.asarray(theta0)[picks]
    for ax_row, p, start in zip(axs, picks, starts):
        flow = reintegrate(config, start, n_save=n_save)
        row = {key: np.asarray(v)[p] for key, v in rows.items()}
        _trajectory_row(list(ax_row), flow, row, g, bn, config.rtol, config.atol)
    fig.suptitle("example trajectories (re-integrated) | " + config_title(config, len(rows["index"])), fontsize=10)
    return fig


# ------------------------------------------------------------------ the graph


def graph_layout(g: DAG) -> dict:
    """Node positions: columns by topological level (inputs left, outputs right),
    `networkx.multipartite_layout`."""

    last = max((g.level_of(v) for v in g.hidden), default=0) + 1
    nxg = nx.DiGraph()
    for v in g.nodes:
        nxg.add_node(v, layer=0 if v in g.inputs else last if v in g.outputs else g.level_of(v))
    nxg.add_edges_from(g.edges)
    return nx.multipartite_layout(nxg, subset_key="layer")


def graph_panel(ax, g: DAG, frozen_fraction: np.ndarray) -> None:
    """Draw `g`: bottleneck nodes as squares, bottleneck edges coloured by the fraction of
    initializations in which they are frozen (their sign cannot change), other edges grey."""
    import matplotlib as mpl

    pos = graph_layout(g)
    bn = set(bottleneck_edges(g).tolist())
    bn_nodes = set(g.in_bottlenecks) | set(g.out_bottlenecks)
    cmap = mpl.colormaps["plasma_r"]
    others = [e for i, e in enumerate(g.edges) if i not in bn]
    nx.draw_networkx_edges(
        nx.DiGraph(g.edges), pos, edgelist=others, ax=ax, edge_color="0.75", width=0.8, arrows=True, arrowsize=6
    )
    bl = sorted(bn)
    if bl:
        nx.draw_networkx_edges(
            nx.DiGraph(g.edges),
            pos,
            edgelist=[g.edges[e] for e in bl],
            ax=ax,
            edge_color=[cmap(float(frozen_fraction[e])) for e in bl],
            width=2.5,
            arrowsize=10,
        )
        sm = mpl.cm.ScalarMappable(cmap=cmap, norm=mpl.colors.Normalize(0, 1))
        ax.figure.colorbar(sm, ax=ax, label="fraction of inits where the edge is frozen", shrink=0.8)
    for nodes, shape, col in ((set(g.nodes) - bn_nodes, "o", "C0"), (bn_nodes, "s", "C3")):
        nx.draw_networkx_nodes(
            nx.DiGraph(g.edges),
            pos,
            nodelist=[v for v in g.nodes if v in nodes],
            ax=ax,
            node_shape=shape,
            node_color=col,
            node_size=120 if len(g.nodes) < 60 else 30,
        )
    if len(g.nodes) <= 40:
        nx.draw_networkx_labels(nx.DiGraph(g.edges), pos, ax=ax, font_size=7)
    ax.set_title(f"{len(bn_nodes)} bottleneck nodes (squares), {len(bl)} bottleneck edges", fontsize=9)
    ax.axis("off")


def graph_figure(config: SweepConfig, rows: Mapping):
    """The sweep's graph with bottlenecks and frozen edges marked (`graph_panel`),
    titled with the configuration. **Returns:** a matplotlib `Figure`."""
    import matplotlib.pyplot as plt

    g = config.build_graph()
    frac = np.asarray(rows["frozen"], bool).mean(axis=0) if len(rows["index"]) else np.zeros(len(g.edges))
    fig, ax = plt.subplots(figsize=(7.5, 5.0), layout="constrained")
    graph_panel(ax, g, frac)
    fig.suptitle(config_title(config, len(rows["index"])), fontsize=10)
    return fig
