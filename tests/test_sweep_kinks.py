"""Kink-aware sweeps: each trajectory equals `kink_aware_flow` run alone (to round-off
amplified by adaptive stepping: two compiled programs), keeps its own pattern state
under vmap, and persists its event counts."""

import equinox as eqx
import jax
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.kinks import kink_aware_flow
from invariant_jax.sweep import BatchOptions, SweepConfig, load_sweep, run_sweep, summarize_sweep
from tolerances import assert_within_tolerance, tolerance_bound

OPTS = dict(solver="tsit5", rtol=1e-8, atol=1e-8, saveat=ij.SaveTimes(n_save=5))


@pytest.fixture(scope="module")
def problem():
    g = ij.mlp([3, 6, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.PRNGKey(1))
    keys = jax.random.split(jax.random.PRNGKey(5), 5)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    run = eqx.filter_jit(lambda n: kink_aware_flow(n, X, Y, 1.0, **OPTS))
    alone = [run(jax.tree.map(lambda a: a[i] if a.ndim == 3 else a, nets)) for i in range(5)]
    return X, Y, nets, alone


def _bound(kf, rtol=1e-8, atol=1e-8):
    """Each solver step and each located event (restart) is controlled to the tolerance."""
    steps = int(kf.flow.stats["num_steps"]) + int(kf.num_events)
    return dict(rtol=rtol, atol=atol, scale=float(np.abs(kf.flow.theta_final).max()), num_steps=steps)


def _greedy_makespan(work, slots):
    """Loop iterations of continuous batching: each slot takes the next trajectory in
    queue order as soon as it is free (one unit of work per iteration)."""
    free_at = [0] * slots
    for w in work:
        k = int(np.argmin(free_at))
        free_at[k] += int(w)
    return max(free_at)


@pytest.mark.exactness
def test_exact_sweep_equals_kink_aware_flow_alone(problem):
    X, Y, nets, alone = problem
    r = ij.sweep_flows(nets, X, Y, 1.0, kinks=True, batch=BatchOptions(slots=2, steps_per_call=1), **OPTS)
    # continuous batching: a slot refills as soon as its trajectory ends, so with one
    # segment per call the calls equal the greedy schedule of the segment counts (whole
    # batches of 2 would take sum over batches of the longer one)
    segments = r.kink["num_events"] + 1
    assert r.stats["calls"] == _greedy_makespan(segments, 2)
    assert r.stats["useful_steps"] == int(segments.sum())
    assert list(r.status) == [0] * 5
    assert sum(int(kf.num_crossings) for kf in alone) >= 5  # the batch has crossings
    for i, kf in enumerate(alone):
        b = _bound(kf)
        assert_within_tolerance(r.theta_final[i], kf.flow.theta_final, **b)
        # c = B~ theta^2: |dc_v| <= 2 |theta| |dtheta| per incident edge (4 per node here)
        dc = 2 * b["scale"] * 4 * tolerance_bound(**b)
        np.testing.assert_allclose(r.drift[i], kf.flow.drift, rtol=0, atol=dc)
        # a crossing is transversal: two trajectories this close cross the same surfaces
        assert r.kink["num_events"][i] == int(kf.num_events)
        assert r.kink["num_sliding_entries"][i] == int(kf.num_sliding_entries)


@pytest.mark.slow
def test_vmapped_sweep_keeps_pattern_state_per_trajectory(problem):
    X, Y, nets, alone = problem
    r = ij.sweep_flows(nets, X, Y, 1.0, kinks=True, batch=BatchOptions(slots=8, exact=False), **OPTS)
    for i, kf in enumerate(alone):
        assert r.kink["num_events"][i] == int(kf.num_events)
        assert_within_tolerance(r.theta_final[i], kf.flow.theta_final, **_bound(kf))


@pytest.mark.slow
def test_run_sweep_persists_event_counts(tmp_path):
    cfg = SweepConfig(
        graph="mlp",
        widths=(3, 6, 1),
        n_inits=3,
        t1=0.5,
        n_samples=10,
        saveat=ij.SaveTimes(n_save=5),
        kinks=True,
        solver=ij.SolverOptions(rtol=1e-7, atol=1e-7),
    )
    r = run_sweep(cfg, tmp_path / "k", batch=BatchOptions(slots=2, progress=False))
    _, back = load_sweep(tmp_path / "k")
    for k, v in r.kink.items():
        np.testing.assert_array_equal(back.kink[k], v)
    net = ij.DAGNetwork(cfg.build_graph(), "relu", edge_weights=r.theta0[1])
    X, Y = cfg.build_data(cfg.build_graph())
    kf = kink_aware_flow(net, X, Y, 0.5, solver="tsit5", rtol=1e-7, atol=1e-7, saveat=ij.SaveTimes(n_save=5))
    assert_within_tolerance(back.theta_final[1], kf.flow.theta_final, **_bound(kf, 1e-7, 1e-7))
    agg = summarize_sweep(cfg, back).aggregate
    assert agg["kink_crossings_total"] == int(np.sum(back.kink["num_crossings"]))


def test_kink_aware_is_the_default_for_relu():
    from invariant_jax.cli import build_parser
    from invariant_jax.cli._sweep import config_from_args

    assert SweepConfig().kink_aware is True  # relu
    assert SweepConfig(activation="leaky_relu").kink_aware is True
    assert SweepConfig(activation="softplus").kink_aware is False
    assert SweepConfig(activation="linear").kink_aware is False  # no kink
    assert SweepConfig(kink_aware=False).kink_aware is False  # the opt-out
    # options the kink-aware integrator lacks turn the default off; asked for, they raise
    assert SweepConfig(grad_norm_tol=1e-6).kink_aware is False
    assert SweepConfig(weight_decay=0.1).kink_aware is False
    parse = build_parser().parse_args
    assert config_from_args(parse(["sweep"]))[0].kink_aware is True
    assert config_from_args(parse(["sweep", "--no-kink-aware"]))[0].kink_aware is False
    assert config_from_args(parse(["sweep", "--activation", "erf"]))[0].kink_aware is False
    assert parse(["demo", "--no-kink-aware"]).kink_aware is False
    # a stored config keeps what it was run with
    assert SweepConfig.from_dict(SweepConfig(kink_aware=False).to_dict()).kink_aware is False


def test_bad_kink_sweep_options(problem):
    X, Y, nets, _ = problem
    with pytest.raises(ValueError, match="piecewise-linear.*softplus.*kink_aware = false"):
        SweepConfig(activation="softplus", kink_aware=True)
    with pytest.raises(ValueError, match="does not support grad_norm_tol"):
        SweepConfig(kink_aware=True, grad_norm_tol=1e-6)
    with pytest.raises(ValueError, match="does not support weight_decay"):
        ij.sweep_flows(nets, X, Y, 1.0, kinks=True, loss=ij.Objective(weight_decay=0.1))


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["tsit5", "gauss4"])
def test_event_counts_unchanged_on_the_kink_sweep_workload(solver):
    # counts recorded with the code before the kinks package and the segment engine
    # (tests/data/kink_event_counts.json); a crossing is transversal, so a rearranged
    # program (round-off apart) crosses the same surfaces and slides on the same ones
    import dataclasses
    import json
    from pathlib import Path

    from invariant_jax.sweep._kink import KinkEngine

    ref = json.loads((Path(__file__).parent / "data" / "kink_event_counts.json").read_text())[solver]
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(1234))
    thetas = jax.numpy.stack([ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(s)).edge_weights() for s in range(40)])
    template = ij.DAGNetwork(g, "relu", edge_weights=thetas[0])
    for reselect in (False, True):
        eng = KinkEngine(
            template,
            X,
            Y,
            1.0,
            lambda i: thetas[i],
            slots=8,
            options=ij.SolverOptions(solver, rtol=ref["tol"], atol=ref["tol"], max_steps=10_000),
            saveat=ij.SaveTimes(n_save=11),
        )
        eng.integrator = dataclasses.replace(eng.integrator, reselect_step=reselect)
        parts = []
        eng.run(np.arange(40), on_results=parts.append)
        rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(rec["index"])
        for k in ("num_crossings", "num_sliding_entries", "num_sliding_exits", "num_ambiguous", "max_sliding_pairs"):
            assert rec[k][order].tolist() == ref[k], k
        steps, events = int(rec["num_steps"].sum()), int(rec["num_events"].sum())
        split = np.abs(rec["num_events"][order] - np.asarray(ref["num_events"]))
        if reselect:  # the rule the counts were recorded with: the same events, and the same
            # steps up to an accept/reject flip per segment
            assert split.max() == 0
            assert abs(steps - sum(ref["num_steps"])) <= 2 * events
        else:  # each segment starts with the step proposed at the event: fewer steps. Init 12
            # has two pairs reach their surfaces together (at t = 0.63245): one simultaneous
            # event in the recorded run and at rtol 1e-10 and 1e-12, but two events, with the
            # same crossings and slides, at b781332 (before the checks inside each step); one
            # again at 4f5ab98 on the AVX-512 machine here. One such split is allowed
            assert split.sum() <= 1
            assert steps < sum(ref["num_steps"])


def test_kink_options_are_one_validated_object_everywhere(problem):
    X, Y, nets, _ = problem
    from invariant_jax.cli import build_parser
    from invariant_jax.cli._sweep import config_from_args

    # validated once, on construction, with the words of the other option objects
    with pytest.raises(ValueError, match="max_events must be a positive integer"):
        ij.KinkOptions(max_events=0)
    with pytest.raises(TypeError, match="max_sliding must be an integer >= 0"):
        ij.KinkOptions(max_sliding=2.0)
    with pytest.raises(ValueError, match="surface_tol must be a positive finite number"):
        SweepConfig(surface_tol=-1.0)
    assert ij.KinkOptions() == ij.KinkOptions(max_events=1000, max_sliding=16, event_tol=1e-13, surface_tol=1e-9)
    # SweepConfig and the CLI carry the same four fields
    cfg = SweepConfig(max_events=7, event_tol=1e-12)
    assert cfg.kink_options == ij.KinkOptions(max_events=7, event_tol=1e-12)
    assert SweepConfig.from_dict(cfg.to_dict()) == cfg
    args = build_parser().parse_args(["sweep", "--max-events", "7", "--event-tol", "1e-12"])
    assert config_from_args(args)[0].kink_options == cfg.kink_options
    # at their defaults they stay out of the stored config, so older folders' hashes hold
    assert not {"max_events", "max_sliding", "event_tol", "surface_tol"} & set(SweepConfig().to_dict())
    assert cfg.to_dict()["max_events"] == 7 and "max_sliding" not in cfg.to_dict()
    # they only mean something for kink-aware sweeps
    with pytest.raises(ValueError, match="max_events only apply to kink-aware sweeps"):
        SweepConfig(kink_aware=False, max_events=7)
    with pytest.raises(ValueError, match="only applies to kink-aware sweeps"):
        ij.sweep_flows(nets, X, Y, 1.0, kink_aware=False, kinks=ij.KinkOptions(), **OPTS)  # the old keyword


def test_sweep_passes_kink_options_to_every_trajectory(problem):
    # max_events=1 stops every trajectory that has an event (kink_aware_flow alone, with
    # the defaults, says which do) at its first one, with max_events_reached
    X, Y, nets, alone = problem
    r = ij.sweep_flows(nets, X, Y, 1.0, kinks=ij.KinkOptions(max_events=1), batch=BatchOptions(slots=2), **OPTS)
    had_events = np.array([int(kf.num_events) > 0 for kf in alone])
    assert had_events.sum() >= 3
    np.testing.assert_array_equal(r.kink["num_events"], had_events.astype(int))
    names = ij.result_name(r.result)
    assert [n == "max_events_reached" for n in names] == had_events.tolist()
    assert np.all(r.t_final[had_events] < 1.0)


def test_vmap_mode_with_sliding_lanes_matches_exact_mode():
    """Vmap mode runs the Filippov field, the restarts' mode searches and a node's exit
    from its origin for the lanes that need them only (`kinks.lane_cond`, gathered from
    the batch). Three of these 16 trajectories slide; each must be the exact mode's, to
    round-off amplified by adaptive stepping, with the same events."""
    g = ij.mlp([4, 8, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 12, key=jax.random.PRNGKey(3))
    keys = jax.random.split(jax.random.PRNGKey(0), 16)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    runs = {
        exact: ij.sweep_flows(nets, X, Y, 1.0, kinks=True, batch=BatchOptions(slots=16, exact=exact), **OPTS)
        for exact in (True, False)
    }
    ex, vm = runs[True], runs[False]
    assert int(np.sum(ex.kink["num_sliding_entries"] > 0)) == 3
    assert list(vm.status) == [0] * 16
    for k in ("num_events", "num_crossings", "num_sliding_entries", "num_sliding_exits", "max_sliding_pairs"):
        np.testing.assert_array_equal(vm.kink[k], ex.kink[k], err_msg=k)
    for i in range(16):
        steps = int(ex.num_steps[i]) + int(ex.kink["num_events"][i])
        scale = float(np.abs(ex.theta_final[i]).max())
        assert_within_tolerance(
            vm.theta_final[i], ex.theta_final[i], rtol=1e-8, atol=1e-8, scale=scale, num_steps=steps
        )


def test_vmap_mode_names_its_lanes_and_exact_mode_does_not(problem):
    """The wiring of the test above: only vmap mode's integrator gathers by lane (exact
    mode keeps the unbatched programs of `kink_aware_flow`)."""
    from invariant_jax.kinks import LANES
    from invariant_jax.sweep import KinkEngine

    X, Y, nets, _ = problem
    one = jax.tree.map(lambda a: a[0] if a.ndim == 3 else a, nets)
    table = np.asarray(nets.edge_weights())
    for exact, lanes in ((True, None), (False, LANES)):
        eng = KinkEngine(one, X, Y, 1.0, init_table=table, slots=4, exact=exact)
        assert eng.integrator.prob.lanes == lanes
        assert eng.integrator.one_site is exact


def test_an_engines_replaced_integrator_is_the_one_run(problem):
    # `KinkEngine.integrator` set before the first run is what every slot runs (the
    # benchmarks' side-by-side arms): with `reselect_step` each trajectory takes the
    # steps of that integrator run alone, which differ from the default's.
    import dataclasses

    from invariant_jax.sweep import KinkEngine

    X, Y, nets, alone = problem
    one = jax.tree.map(lambda a: a[0] if a.ndim == 3 else a, nets)
    table = np.asarray(nets.edge_weights())
    options = ij.SolverOptions("tsit5", rtol=1e-8, atol=1e-8, max_steps=10_000)
    eng = KinkEngine(one, X, Y, 1.0, init_table=table, slots=2, options=options, saveat=OPTS["saveat"])
    eng.integrator = dataclasses.replace(eng.integrator, reselect_step=True)
    parts = []
    eng.run(np.arange(5), on_results=parts.append)
    steps = dict(zip(np.concatenate([p["index"] for p in parts]), np.concatenate([p["num_steps"] for p in parts])))
    run = eqx.filter_jit(eng.integrator.run)
    want = [int(run(jax.numpy.asarray(table[i])).steps) for i in range(5)]
    assert [int(steps[i]) for i in range(5)] == want
    assert want != [int(kf.flow.stats["num_steps"]) for kf in alone]
    # after the first run its programs are compiled: other options are refused, not ignored
    with pytest.raises(ValueError, match="only be set before the first run"):
        eng.integrator = dataclasses.replace(eng.integrator, reselect_step=False)
