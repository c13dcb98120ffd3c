"""Kink-aware sweeps: each trajectory equals `kink_aware_flow` run alone (bit for bit in
exact mode), keeps its own pattern state under vmap, and persists its event counts."""

import equinox as eqx
import jax
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.kinks import kink_aware_flow
from invariant_jax.sweep import SweepConfig, load_sweep, run_sweep, summarize_sweep

OPTS = dict(solver="tsit5", rtol=1e-8, atol=1e-8, n_save=5)


@pytest.fixture(scope="module")
def problem():
    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
    keys = jax.random.split(jax.random.PRNGKey(5), 5)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    run = eqx.filter_jit(lambda n: kink_aware_flow(n, X, Y, 1.0, **OPTS))
    alone = [run(jax.tree.map(lambda a: a[i] if a.ndim == 3 else a, nets)) for i in range(5)]
    return X, Y, nets, alone


def test_exact_sweep_equals_kink_aware_flow_alone(problem):
    X, Y, nets, alone = problem
    r = ij.sweep_flows(nets, X, Y, 1.0, kink_aware=True, slots=2, **OPTS)
    assert list(r.status) == [0] * 5
    assert sum(int(kf.num_crossings) for kf in alone) >= 5  # the batch has crossings
    for i, kf in enumerate(alone):
        np.testing.assert_array_equal(r.theta_final[i], np.asarray(kf.flow.theta_final))
        assert r.drift[i] == float(kf.flow.drift)
        assert r.kink["num_events"][i] == int(kf.num_events)
        assert r.kink["num_sliding_entries"][i] == int(kf.num_sliding_entries)


@pytest.mark.slow
def test_vmapped_sweep_keeps_pattern_state_per_trajectory(problem):
    X, Y, nets, alone = problem
    r = ij.sweep_flows(nets, X, Y, 1.0, kink_aware=True, slots=8, exact=False, **OPTS)
    for i, kf in enumerate(alone):
        assert r.kink["num_events"][i] == int(kf.num_events)
        np.testing.assert_allclose(r.theta_final[i], np.asarray(kf.flow.theta_final), atol=1e-9)


@pytest.mark.slow
def test_run_sweep_persists_event_counts(tmp_path):
    cfg = SweepConfig(graph="mlp", widths=(3, 6, 1), n_inits=3, t1=0.5, n_samples=10, n_save=5,
                      kink_aware=True, rtol=1e-7, atol=1e-7)
    r = run_sweep(cfg, tmp_path / "k", slots=2, progress=False)
    _, back = load_sweep(tmp_path / "k")
    for k, v in r.kink.items():
        np.testing.assert_array_equal(back.kink[k], v)
    net = ij.DAGNetwork(cfg.build_graph(), "relu", edge_weights=r.theta0[1])
    X, Y = cfg.build_data(cfg.build_graph())
    kf = kink_aware_flow(net, X, Y, 0.5, solver="tsit5", rtol=1e-7, atol=1e-7, n_save=5)
    np.testing.assert_allclose(back.theta_final[1], np.asarray(kf.flow.theta_final), atol=1e-12)
    agg = summarize_sweep(cfg, back).aggregate
    assert agg["kink crossings total"] == int(np.sum(back.kink["num_crossings"]))


def test_bad_kink_sweep_options(problem):
    X, Y, nets, _ = problem
    with pytest.raises(ValueError, match="piecewise-linear.*softplus.*kink_aware = false"):
        SweepConfig(activation="softplus", kink_aware=True)
    with pytest.raises(ValueError, match="does not support grad_norm_tol"):
        SweepConfig(kink_aware=True, grad_norm_tol=1e-6)
    with pytest.raises(ValueError, match="does not support weight_decay"):
        ij.sweep_flows(nets, X, Y, 1.0, kink_aware=True, weight_decay=0.1)
