"""Sweep figures checked on the artists matplotlib holds (not pixels): every drawn panel
has data, degenerate panels are dropped for a sentence, the trajectories start where the
sweep's initializations start and follow the flow, and the graph marks the bottlenecks
and frozen edges that `ij.connectivity` finds."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax.sweep import SweepConfig  # noqa: E402
from invariant_jax.sweep._columns import bottleneck_edges  # noqa: E402
from invariant_jax.sweep._figures import (  # noqa: E402
    graph_figure,
    overview_figure,
    overview_panels,
    pick_examples,
    trajectory_figure,
)
from invariant_jax.sweep._summary import SweepSummary  # noqa: E402


def _rows(n=40, *, degenerate=False, kink=True, seed=0):
    rng = np.random.default_rng(seed)
    g = ij.example_dag()
    frozen = np.zeros((n, len(g.edges)), bool)
    if not degenerate:
        frozen[: n // 2, bottleneck_edges(g)[0]] = True
    rank0 = np.full(n, 5)
    rank1 = rank0.copy()
    if not degenerate:
        rank1[:3] = 4
    rows = dict(
        index=np.arange(n),
        status=np.zeros(n, np.int64) if degenerate else np.r_[np.zeros(n - 2), [2, 3]].astype(int),
        steps=rng.integers(10, 500, n),
        drift=rng.uniform(1e-10, 1e-8, n),
        drift_in_tol=rng.uniform(1e-2, 10, n),
        rank_start=rank0,
        rank_end=rank1,
        connected=~frozen.any(1),
        n_components=2 ** frozen.sum(1),
        frozen=frozen,
        bottleneck_sign_changes=np.zeros(n, np.int64),
        loss_initial=rng.uniform(0.1, 1, n),
        loss_final=10 ** rng.uniform(-6, -1, n),
    )
    if kink:
        ev = rng.integers(0, 30, n)
        rows["events"], rows["sliding_time"] = ev, np.where(np.arange(n) < 2, 0.5, 0.0)  # 2 sliding runs of 40
    return rows


def _hist_total(ax):
    return sum(p.get_height() for p in ax.patches if isinstance(p, Rectangle))


def test_overview_panels_have_data():
    rows = _rows()
    fig = overview_figure(rows, title="T", activation="relu")
    names = [n for n, _ in overview_panels(rows, activation="relu")[0]]
    assert names == ["drift_tol", "loss_by_connectivity", "disconnected", "rank", "steps", "kink_events", "status"]
    axs = {ax.get_title(): ax for ax in fig.axes}
    assert len(fig.axes) == len(names)  # no notes panel: nothing was dropped
    n = len(rows["index"])
    for title, ax in axs.items():
        if title.startswith(("conservation", "steps")):
            assert _hist_total(ax) == n, title
    loss_ax = next(a for t, a in axs.items() if t.startswith("final loss"))
    assert _hist_total(loss_ax) == n
    rank_ax = next(a for t, a in axs.items() if t.startswith("rank changed"))
    assert _hist_total(rank_ax) == 2 * 3  # only the 3 flows whose rank changed, at start and at end
    kink_ax = next(a for t, a in axs.items() if t.startswith("kink events"))
    assert kink_ax.get_yscale() == "log"
    assert np.allclose(kink_ax.get_xticks(), np.round(kink_ax.get_xticks()))  # integer ticks
    bars = [p for p in kink_ax.patches if isinstance(p, Rectangle)]
    sliding = [p for p in bars if p.get_facecolor()[:3] == matplotlib.colors.to_rgb("C1")]
    assert sum(p.get_height() for p in sliding) == 2  # the 2 sliding runs are drawn
    status_ax = axs["status"]
    labels = [t.get_text() for t in status_ax.get_yticklabels()]
    assert len(labels) == 3 and sum(p.get_width() for p in status_ax.patches) == n  # horizontal: no overlap
    assert "n=" not in fig.get_suptitle() and fig.get_suptitle() == "T"
    plt.close(fig)


def test_degenerate_sweep_drops_panels():
    rows = _rows(degenerate=True, kink=False)
    panels, notes = overview_panels(rows, activation="relu")
    names = [n for n, _ in panels]
    assert "rank" not in names and "disconnected" not in names and "status" not in names
    assert any("Rank of J_G unchanged along all 40 flows (rank 5)" in s for s in notes)
    assert any("connected for all 40" in s for s in notes)
    fig = overview_figure(rows, title="T", activation="relu")
    assert len(fig.axes) == len(names) + 1
    text = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "Rank of J_G unchanged" in text
    plt.close(fig)
    _, notes = overview_panels(rows, activation="tanh")
    assert any("No conservation law for tanh" in s for s in notes)


def test_pick_examples():
    rows = _rows()
    picks = pick_examples(rows, 3)
    assert len(picks) == 3 and len(set(picks)) == 3
    assert not rows["connected"][picks[0]]  # a disconnected one first
    assert all(rows["status"][p] <= 1 for p in picks)
    rows["status"][:] = 3
    assert pick_examples(rows, 3) == []


@pytest.fixture(scope="module")
def tiny():
    cfg = SweepConfig(graph="example", activation="relu", kinks=False, n_inits=6, t1=2.0, n_samples=16)
    g = cfg.build_graph()
    theta0 = np.stack([ij.sweep_network(cfg, i).edge_weights() for i in range(cfg.n_inits)])
    B = g.incidence()
    frozen = np.zeros((cfg.n_inits, len(g.edges)), bool)
    for i in range(cfg.n_inits):  # the reference verdict, per row
        frozen[i, list(ij.connectivity(g, B @ theta0[i] ** 2).frozen_index)] = True
    n = cfg.n_inits
    rows = dict(
        index=np.arange(n),
        status=np.zeros(n, np.int64),
        connected=~frozen.any(1),
        frozen=frozen,
        bottleneck_sign_changes=np.zeros(n, np.int64),
        drift_in_tol=np.arange(n, dtype=float),
    )
    return cfg, g, theta0, rows


def test_trajectories_start_at_the_rows(tiny):
    cfg, g, theta0, rows = tiny
    fig = trajectory_figure(cfg, rows, theta0, k=2)  # n_save 201, as save_figures: one compilation
    picks = pick_examples(rows, 2)
    X, Y = cfg.build_data(g)
    bn = bottleneck_edges(g)
    axs = np.asarray(fig.axes).reshape(len(picks), 3)
    for (ax_loss, ax_c, ax_w), p in zip(axs, picks):
        t, L = ax_loss.lines[0].get_data()
        assert t[0] == 0 and t[-1] == pytest.approx(cfg.t1) and len(t) == 201
        net = ij.sweep_network(cfg, int(rows["index"][p]))
        ref = 0.5 * np.mean(np.sum((np.asarray(net(X)) - np.asarray(Y)) ** 2, axis=1))  # (1/2N) sum ||f - y||^2
        assert L[0] == pytest.approx(ref, rel=1e-12)
        assert np.all(np.diff(L) <= 1e-12)  # gradient flow decreases the loss
        _, dev = ax_c.lines[0].get_data()
        assert np.all(dev < 1e3)  # tolerance units: plain Tsit5 across kinks stays near tolerance
        weights = [ln for ln in ax_w.lines if len(ln.get_xdata()) == 201]
        assert len(weights) == len(bn)
        for ln, e in zip(weights, bn):
            assert ln.get_ydata()[0] == theta0[p, e]
            assert (ln.get_linestyle() == "-") == bool(rows["frozen"][p, e])
            if rows["frozen"][p, e]:  # a frozen edge keeps its sign
                assert np.all(np.sign(ln.get_ydata()) == np.sign(theta0[p, e]))
    plt.close(fig)


def test_graph_marks_bottlenecks_and_frozen_edges(tiny):
    cfg, g, theta0, rows = tiny
    fig = graph_figure(cfg, rows)
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == len(g.edges)
    nodes = [c for c in ax.collections if isinstance(c, PathCollection)]
    bn_nodes = set(g.in_bottlenecks) | set(g.out_bottlenecks)
    assert sorted(len(c.get_offsets()) for c in nodes) == sorted([len(bn_nodes), len(g.nodes) - len(bn_nodes)])
    assert "n=6" in fig.get_suptitle() and "relu" in fig.get_suptitle() and "t1=2" in fig.get_suptitle()
    plt.close(fig)


def test_summary_writes_every_figure(tiny, tmp_path):
    cfg, g, theta0, rows = tiny
    full = _rows(n=6, kink=False)
    full.update(rows)
    s = SweepSummary(full, {}, config=cfg, theta0=theta0)
    names = {p.name for p in s.save_figures(tmp_path, trajectories=1)}
    assert {"overview.png", "graph.png", "trajectories.png"} <= names
    assert "rank.png" in names  # _rows changed 3 ranks


def test_prune_figure_plots_the_log():
    from types import SimpleNamespace

    from invariant_jax.cli._prune import prune_figure

    ep = np.arange(0, 110, 10)
    cut = np.minimum(ep // 20, 4)
    log = SimpleNamespace(
        epochs=ep,
        loss=np.exp(-ep / 50),
        test_accuracy=np.linspace(0.5, 0.9, len(ep)),
        n_cut_off=cut,
        rank=6 - np.minimum(ep // 30, 3),
    )
    fig = prune_figure(log, n_hidden=6, title="breast cancer")
    loss_ax, cut_ax, rank_ax = fig.axes[:3]
    np.testing.assert_array_equal(cut_ax.lines[0].get_ydata(), cut)
    np.testing.assert_array_equal(rank_ax.lines[0].get_ydata(), log.rank)
    np.testing.assert_array_equal(loss_ax.lines[0].get_xdata(), ep)
    assert fig.axes[3].lines[0].get_ydata()[-1] == pytest.approx(0.9)  # test accuracy on the twin axis
    assert "4 of 6" in cut_ax.get_title() and "6 -> 3" in rank_ax.get_title()
    assert fig.get_suptitle() == "breast cancer"
    plt.close(fig)
