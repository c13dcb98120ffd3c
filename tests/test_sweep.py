"""The sweep engine against `gradient_flow` run one trajectory at a time, determinism,
failures as data, persistence, resume, summary statistics and bad input."""

import json
import os

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pyarrow.parquet as pq
import pytest

import invariant_jax as ij
from invariant_jax.sweep import (
    STATUSES,
    BatchOptions,
    StoreOptions,
    SweepConfig,
    init_theta,
    load_sweep,
    run_sweep,
    summarize_sweep,
)
from tolerances import assert_step_counts_close, assert_within_tolerance, tolerance_bound

TOL = dict(rtol=1e-8, atol=1e-8)  # the defaults of sweep_flows and gradient_flow

SMALL = dict(n_inits=10, t1=0.5, n_samples=10, n_save=11, kink_aware=False)  # the plain engine


@pytest.fixture(scope="module")
def problem():
    g = ij.example_dag()
    X, Y, _ = ij.teacher_student(g, 10, key=jr.key(1))
    keys = jax.vmap(lambda i: jr.fold_in(jr.key(3), i))(np.arange(6))
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    return g, X, Y, nets


def _one(nets, i):
    return jax.tree.map(lambda a: a[i] if getattr(a, "ndim", 0) == 3 else a, nets)


@eqx.filter_jit
def _flow(net, X, Y, t1, **kw):
    """`gradient_flow` of one network, the reference of every comparison here. The data
    are arguments (t1 and the options are static), so the tests that share a problem
    shape and options share one compilation."""
    return ij.gradient_flow(net, X, Y, t1, saveat=ij.SaveTimes(n_save=11), **kw)


def _flows(nets, X, Y, t1, **kw):
    """gradient_flow run one trajectory at a time (one compilation, n calls)."""
    return [_flow(_one(nets, i), X, Y, t1, **kw) for i in range(nets.weights.shape[0])]


@pytest.fixture(scope="module")
def exact(problem):
    g, X, Y, nets = problem
    return ij.sweep_flows(
        nets, X, Y, 0.5, kinks=False, saveat=ij.SaveTimes(n_save=11), batch=BatchOptions(slots=4, steps_per_call=8)
    )


def _bound(f):
    """Tolerance bound for the flow `f`: weights of size max|theta|, over its steps."""
    return dict(TOL, scale=np.abs(f.theta_final).max(), num_steps=f.stats["num_steps"])


@pytest.mark.exactness
def test_matches_gradient_flow_one_at_a_time(problem, exact):
    # two separately compiled programs: equal to round-off amplified by adaptive
    # stepping (tests/tolerances.py), not bit for bit
    g, X, Y, nets = problem
    res = exact
    assert list(res.index) == list(range(6))
    for i, f in enumerate(_flows(nets, X, Y, 0.5)):
        assert_step_counts_close(res.num_steps[i], f.stats["num_steps"])
        assert_step_counts_close(res.num_accepted_steps[i], f.stats["num_accepted_steps"])
        assert int(ij.result_code(res.result)[i]) == int(ij.result_code(f.result))
        b = _bound(f)
        assert_within_tolerance(res.theta_final[i], f.theta_final, **b)
        # c = B~ theta^2 moves by at most 2 |theta| |dtheta| per weight and node degree
        dc = 2 * b["scale"] * int(np.abs(g.incidence()).sum(1).max()) * tolerance_bound(**b)
        np.testing.assert_allclose(res.drift[i], f.drift, rtol=0, atol=dc)
        # to first order |dL| <= sum_e |dL/dtheta_e| |dtheta_e| (twice that for the second order)
        _, grad = ij.loss_gradient(f.final, X, Y)
        dl = 2 * float(np.abs(grad).sum()) * tolerance_bound(**b) + 1e-15
        np.testing.assert_allclose(res.loss_final[i], f.loss_final, rtol=0, atol=dl)
        assert float(res.t_final[i]) == float(f.t_final) == 0.5  # both reach t1 exactly
    assert res.stats["useful_steps"] == int(res.num_steps.sum())
    assert 0 < res.stats["work_efficiency"] <= 1


def test_vmap_mode_agrees_to_tolerance(problem, exact):
    # vmap over slots (the GPU mode) rounds batched kernels differently: equal to
    # gradient_flow up to about the tolerance, not bit for bit
    g, X, Y, nets = problem
    ex = exact
    # 6 trajectories in 16 slots: the batch starts at width 8 (the narrowest slots / 2^j
    # that holds them: a vmapped step costs every slot, and no width depends on n) and
    # narrows to width 1 once one trajectory is left
    vm = ij.sweep_flows(
        nets,
        X,
        Y,
        0.5,
        kinks=False,
        saveat=ij.SaveTimes(n_save=11),
        batch=BatchOptions(slots=16, steps_per_call=8, exact=False),
    )
    np.testing.assert_array_equal(vm.index, np.arange(6))
    np.testing.assert_allclose(vm.theta_final, ex.theta_final, rtol=0, atol=1e-5)
    np.testing.assert_allclose(vm.num_steps, ex.num_steps, rtol=0.05)
    assert np.all(vm.status == 0) and np.all(vm.drift_in_tol < 100)
    # 16 slots stepped until the slowest finishes would be 16 x its steps; here 8 slots
    # are stepped while more than two trajectories run, then at most 2, then the last one alone
    steps = np.sort(vm.num_steps)
    assert vm.stats["slot_iterations"] <= 8 * steps[-3] + 2 * steps[-2] + steps[-1]


@pytest.mark.exactness
def test_failures_are_data(problem):
    g, X, Y, nets = problem
    theta = np.array(nets.edge_weights())
    theta[2] = 1e160  # the forward pass overflows: non-finite loss
    nets = nets.with_edge_weights(theta)
    res = ij.sweep_flows(
        nets,
        X,
        Y,
        0.5,
        kinks=False,
        solver=ij.SolverOptions(max_steps=12),
        saveat=ij.SaveTimes(n_save=11),
        batch=BatchOptions(slots=3, steps_per_call=4),
    )
    names = res.status_names
    assert names[2] == "nonfinite"
    for i, f in enumerate(_flows(nets, X, Y, 0.5, solver=ij.SolverOptions(max_steps=12))):
        if i == 2:
            continue
        want = "ok" if bool(f.success) else "max_steps"
        assert names[i] == want
        assert int(ij.result_code(res.result)[i]) == int(ij.result_code(f.result))
        b = _bound(f)
        assert_within_tolerance(res.theta_final[i], f.theta_final, **b)
        # t_final after a spent budget is a sum of controller-chosen steps; each step
        # size follows the state, so it inherits the same per-step bound (scale ~ t)
        assert_within_tolerance(res.t_final[i], f.t_final, **dict(b, scale=0.5))
    assert "max_steps" in names  # the sweep went on past failures
    assert res.n_failed == sum(n in ("max_steps", "nonfinite") for n in names)


@pytest.mark.slow
def test_stopping_rule_matches_gradient_flow(problem):
    g, X, Y, nets = problem
    res = ij.sweep_flows(
        nets,
        X,
        Y,
        0.5,
        kinks=False,
        stop=ij.StopRules(loss_floor=0.05),
        saveat=ij.SaveTimes(n_save=11),
        batch=BatchOptions(slots=2, steps_per_call=16),
    )
    for i, f in enumerate(_flows(nets, X, Y, 0.5, stop=ij.StopRules(loss_floor=0.05))):
        stopped = bool(f.result == ij.RESULTS.stopped_loss_floor)
        assert res.status_names[i] == ("stopped" if stopped else "ok")
        b = _bound(f)
        # the event time is located by a root finder on the interpolant: its error
        # follows the state's (the loss has slope |grad L|^2 <= the weights' scale)
        assert_within_tolerance(res.t_final[i], f.t_final, **dict(b, scale=0.5))
        assert_within_tolerance(res.theta_final[i], f.theta_final, **b)
    assert "stopped" in res.status_names


@pytest.mark.exactness
def test_run_sweep_equals_gradient_flow_and_fold_in_keys():
    cfg = SweepConfig.from_dict(SMALL)
    a = run_sweep(cfg, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    g = cfg.build_graph()
    X, Y = cfg.build_data(g)
    assert cfg.saveat == ij.SaveTimes(n_save=11)  # _flow's: the program test_matches_... compiled
    flow = lambda n: _flow(n, X, Y, cfg.t1)  # noqa: E731
    for i in (0, 3, 7):  # the key of init i is fold_in(key(seed), i): independent of the split
        net = ij.DAGNetwork(g, cfg.activation, key=jr.fold_in(jr.key(cfg.seed), i), init=cfg.init)
        np.testing.assert_array_equal(a.theta0[i], net.edge_weights())
        np.testing.assert_array_equal(init_theta(cfg, g, i), net.edge_weights())
        f = flow(net)
        # two compiled programs: within the tolerance bound, not bit for bit
        assert_within_tolerance(
            a.theta_final[i],
            f.theta_final,
            rtol=cfg.rtol,
            atol=cfg.atol,
            scale=np.abs(f.theta_final).max(),
            num_steps=f.stats["num_steps"],
        )
        assert_step_counts_close(a.num_steps[i], f.stats["num_steps"])


@pytest.mark.slow
@pytest.mark.exactness
def test_results_independent_of_slots_and_chunking():
    # one compiled step program run again: bit for bit on any machine
    cfg = SweepConfig.from_dict(SMALL)
    a = run_sweep(cfg, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    b = run_sweep(cfg, batch=BatchOptions(slots=7, steps_per_call=64, progress=False))
    for k in ("theta_final", "loss_final", "drift", "num_steps", "status", "t_final"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))


@pytest.mark.exactness
def test_persistence_manifest_and_resume(tmp_path):
    cfg = SweepConfig.from_dict(SMALL)
    out = tmp_path / "run"
    full = run_sweep(
        cfg, out, batch=BatchOptions(slots=2, steps_per_call=8, progress=False), store=StoreOptions(flush_seconds=0.0)
    )
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"] == cfg.to_dict() and man["version"] == ij.__version__
    chunks = sorted((out / "chunks").glob("*.parquet"))
    assert len(chunks) >= 2 and not list(out.rglob("*.tmp"))
    cfg2, loaded = load_sweep(out)
    assert cfg2 == cfg
    np.testing.assert_array_equal(loaded.theta_final, full.theta_final)
    # a finished sweep resumes with no work at all
    again = run_sweep(cfg, out, resume=True, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    assert again.stats["useful_steps"] == 0
    # lose one chunk: resume recomputes exactly those trajectories, with equal results
    lost = set(pq.read_table(chunks[0], columns=["index"]).column("index").to_pylist())
    chunks[0].unlink()
    resumed = run_sweep(cfg, out, resume=True, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    assert resumed.stats["useful_steps"] == int(full.num_steps[sorted(lost)].sum())
    for k in ("theta_final", "loss_final", "drift", "num_steps", "status"):
        np.testing.assert_array_equal(getattr(resumed, k), getattr(full, k))


def test_summary_against_independent_references(tmp_path):
    cfg = SweepConfig.from_dict(SMALL)
    res = run_sweep(cfg, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    s = summarize_sweep(cfg, res)
    g = cfg.build_graph()
    B = g.incidence()
    bn = {e for v in g.out_bottlenecks for e in g.out_edges(v)} | {e for v in g.in_bottlenecks for e in g.in_edges(v)}
    for i in range(len(res)):
        th0, th1 = res.theta0[i], res.theta_final[i]
        assert s.rows["rank_start"][i] == np.linalg.matrix_rank(2 * B * th0)
        assert s.rows["rank_end"][i] == np.linalg.matrix_rank(2 * B * th1)
        con = ij.connectivity(g, B @ th0**2)
        assert bool(s.rows["connected"][i]) == con.connected
        assert s.rows["n_components"][i] == con.n_components
        assert s.rows["bottleneck_sign_changes"][i] == sum(np.sign(th0[e]) != np.sign(th1[e]) for e in bn)
        assert s.rows["frozen_sign_changes"][i] == 0  # a frozen edge cannot change sign
        np.testing.assert_allclose(s.rows["drift_in_tol"][i], res.drift[i] / (cfg.atol + cfg.rtol * res.scale[i]))
    assert s.aggregate["status_ok"] == len(res)
    assert s.aggregate["fraction_disconnected"] == pytest.approx(np.mean(~s.rows["connected"]))
    # no re-integrated example trajectories (a compilation of their own): the figures of the
    # summary itself; tests/test_figures.py checks trajectories.png and its curves
    paths = s.save_figures(tmp_path / "fig", trajectories=0)
    assert paths and all(p.stat().st_size > 1000 for p in paths)
    s.to_csv(tmp_path / "t.csv")
    assert len((tmp_path / "t.csv").read_text().splitlines()) == len(res) + 1


def test_summary_lists_each_failure_with_its_record(tmp_path):
    """Trajectories cut off by `max_steps` are listed in `SweepSummary.failures` (and
    `summary.json`), each with its own record, and counted per `ij.RESULTS` member."""
    from invariant_jax.sweep import run_in_folder

    cfg = SweepConfig.from_dict({**SMALL, "n_inits": 8, "max_steps": 6})
    _, stats = run_in_folder(cfg, tmp_path / "run", batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    s = summarize_sweep(cfg, tmp_path / "run", stats=stats)
    _, res = load_sweep(tmp_path / "run")
    names = ij.result_name(res.result)
    bad = np.flatnonzero(~ij.is_success(res.result))
    assert 0 < bad.size < len(res)  # some, not all, ran out of steps
    assert [f["index"] for f in s.failures] == res.index[bad].tolist()
    for f, i in zip(s.failures, bad):
        assert f["result"] == names[i] == "max_steps_reached"
        assert f["num_steps"] == res.num_steps[i] == 6 and f["t_final"] == res.t_final[i] < cfg.t1
    assert s.aggregate["result_max_steps_reached"] == bad.size
    assert s.failure_lines()[0].startswith(f"init {res.index[bad[0]]}: max_steps_reached at t = ")


def test_failure_counts_cover_failures_beyond_the_listed_ones(tmp_path, monkeypatch):
    """`result_<name>` and the kind lines count every failed row, not only the
    `FAILURES_LISTED` that `failures` lists."""
    import invariant_jax.sweep._summary as summary_module

    monkeypatch.setattr(summary_module, "FAILURES_LISTED", 1)
    cfg = SweepConfig.from_dict({**SMALL, "n_inits": 8, "max_steps": 6})
    res = run_sweep(cfg, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    s = summarize_sweep(cfg, res)
    n_bad = int(np.sum(~ij.is_success(res.result)))
    assert n_bad > 1 and len(s.failures) == 1
    assert s.aggregate["result_max_steps_reached"] == n_bad
    assert s.failure_kinds() == [
        f"{n_bad} trajectories max_steps_reached: {ij.result_message(ij.RESULTS.max_steps_reached)}"
    ]


# ------------------------------------------------------------------ bad input


def test_bad_config_values():
    with pytest.raises(ValueError, match="Unknown graph builder 'ladder'"):
        SweepConfig(graph="ladder")
    with pytest.raises(ValueError, match="Unknown activation 'relux'"):
        SweepConfig(activation="relux")
    for n in (0, -3):
        with pytest.raises(ValueError, match="n_inits must be a positive integer"):
            SweepConfig(n_inits=n)
    with pytest.raises(ValueError, match="Unknown sweep config key"):
        SweepConfig.from_dict({"n_init": 3})


def test_folder_with_other_config_is_refused(tmp_path):
    out = tmp_path / "run"
    kw = dict(batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    run_sweep(SweepConfig.from_dict({**SMALL, "n_inits": 2}), out, **kw)
    other = SweepConfig.from_dict({**SMALL, "n_inits": 3})
    with pytest.raises(ValueError, match=r"different config \(differs in \['n_inits'\]\).*--overwrite"):
        run_sweep(other, out, **kw)
    with pytest.raises(ValueError, match="already holds this sweep. Pass --resume"):
        run_sweep(SweepConfig.from_dict({**SMALL, "n_inits": 2}), out, **kw)
    res = run_sweep(other, out, overwrite=True, **kw)
    assert len(res) == 3 and json.loads((out / "manifest.json").read_text())["config"]["n_inits"] == 3


def test_unwritable_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="is not writable"):
        run_sweep(SweepConfig.from_dict(SMALL), blocker / "run", batch=BatchOptions(progress=False))
    if os.name == "posix" and os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(ValueError, match="is not writable"):
                run_sweep(SweepConfig.from_dict(SMALL), ro / "run", batch=BatchOptions(progress=False))
        finally:
            ro.chmod(0o700)


def test_statuses_names():
    assert STATUSES[:3] == ("ok", "stopped", "max_steps")


@pytest.mark.exactness
def test_implicit_solver_matches_gradient_flow():
    """Kvaerno5 (root finder takes the controller's tolerances, as in diffeqsolve). t1 = 1:
    tens of implicit steps per trajectory, each compared within its step-count bound."""
    g = ij.mlp([2, 3, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 10, key=jax.random.key(0), activation="tanh")
    keys = jax.random.split(jax.random.key(1), 3)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "softplus", key=k))(keys)
    r = ij.sweep_flows(
        nets,
        X,
        Y,
        1.0,
        kinks=False,
        solver="kvaerno5",
        rtol=1e-8,
        atol=1e-8,
        saveat=ij.SaveTimes(n_save=11),
        batch=BatchOptions(slots=2),
    )
    alone = eqx.filter_jit(
        lambda n: ij.gradient_flow(
            n, X, Y, 1.0, solver="kvaerno5", rtol=1e-8, atol=1e-8, saveat=ij.SaveTimes(n_save=11)
        )
    )  # traced and compiled once for the 3 inits
    for i, k in enumerate(keys):
        f = alone(ij.DAGNetwork(g, "softplus", key=k))
        assert_step_counts_close(r.num_steps[i], f.stats["num_steps"])
        # two compiled programs; the Newton solves stop at their own tolerance, which
        # the controller's tolerance bounds as well
        assert_within_tolerance(
            r.theta_final[i],
            f.theta_final,
            rtol=1e-8,
            atol=1e-8,
            scale=np.abs(f.theta_final).max(),
            num_steps=f.stats["num_steps"],
        )


def test_summary_flags_successes_with_ambiguous_events():
    """`SweepSummary.flagged` lists the trajectories that succeeded with an ambiguous
    event (a failure with one is in `failures`), each with its record; the aggregate
    counts them. The ambiguous counts are set by hand (every other row)."""
    import dataclasses

    cfg = SweepConfig.from_dict({**SMALL, "n_inits": 8, "kink_aware": True})
    res = run_sweep(cfg, batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
    amb = np.arange(len(res)) % 2
    folds = (np.arange(len(res)) % 4 == 1).astype(int)  # every other flagged row: its one event a two-fold
    res = dataclasses.replace(res, kink={**res.kink, "num_ambiguous": amb, "num_two_folds": folds})
    s = summarize_sweep(cfg, res)
    ok = np.asarray(ij.is_success(res.result))
    assert [f["index"] for f in s.flagged] == res.index[ok & (amb > 0)].tolist() != []
    assert all(f["num_ambiguous"] == 1 and f["result"] == "successful" for f in s.flagged)
    assert s.aggregate["trajectories_with_ambiguous_events"] == 4
    assert s.aggregate["ambiguous_events"] == 4
    assert s.aggregate["ambiguous_events_at_two_folds"] == 2
    assert s.aggregate["trajectories_flagged"] == int(np.sum(ok & (amb > 0)))
    n_fold, n_modes = int(np.sum(ok & (folds > 0))), int(np.sum(ok & (amb > folds)))
    assert s.aggregate["trajectories_flagged_at_a_two_fold"] == n_fold
    assert s.aggregate["trajectories_flagged_without_consistent_modes"] == n_modes
    inits = ", ".join(str(i) for i in res.index[ok & (amb > 0)][:2])
    n = int(np.sum(ok & (amb > 0)))
    assert (
        n > 2
        and n_fold + n_modes == n
        and s.flagged_lines(max_inits=2)
        == [
            f"{n} trajectories ended ok with an ambiguous kink event, not certified there ({n_fold} at a two-fold, "
            f"where the slide turns repelling; {n_modes} without consistent modes): inits {inits}, ... "
            '(summary.json, "flagged")'
        ]
    )
    # a store written before the causes were recorded: no split, no cause in the line
    old = {k: v for k, v in res.kink.items() if k != "num_two_folds"}
    s_old = summarize_sweep(cfg, dataclasses.replace(res, kink=old))
    assert "trajectories_flagged_at_a_two_fold" not in s_old.aggregate
    assert s_old.flagged_lines(max_inits=2)[0].startswith(
        f"{n} trajectories ended ok with an ambiguous kink event, not certified there: "
    )
    assert (
        summarize_sweep(cfg, dataclasses.replace(res, kink={**res.kink, "num_ambiguous": 0 * amb})).flagged_lines()
        == []
    )
