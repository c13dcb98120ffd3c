"""The paper's loss-levels pipeline: the regular grid, the convergence phase, the study's
criteria (Wilson intervals, loss-level clustering, channel confirmation) and the
frequency study's status codes."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax import channels as ch
from invariant_jax.sweep import STATUSES


def test_frequency_vmap_status_names_nonfinite_and_max_steps_apart():
    # before the fix every vmap failure was labelled max_steps (status = np.where(ok, 0, 2))
    from invariant_jax.channels._frequency import _vmapped_flows

    g = ij.mlp([1, 2, 1], bias=False)
    X = jnp.linspace(-1, 1, 8)[:, None]
    Y = jnp.sin(3 * X)
    thetas = jnp.stack(
        [
            jnp.array([0.5, -0.3, 1.0, 0.7]),  # reaches t1
            jnp.array([0.5, -0.3, 1.0, 0.7]) * 1e200,  # loss overflows to inf
            jnp.array([0.5, -0.3, 3e3, 2e3]),
        ]
    )  # stiff (curvature ~ a^2): runs out of steps
    nets = eqx.filter_vmap(ij.DAGNetwork(g, "erf", edge_weights=thetas[0]).with_edge_weights)(thetas)
    b = _vmapped_flows(nets, X, Y, 1.0, ij.SolverOptions("tsit5", rtol=1e-6, atol=1e-6, max_steps=200))
    assert list(ij.result_name(ij.result_from_code(b.result))) == ["successful", "nonfinite_state", "max_steps_reached"]
    assert STATUSES[b.status[0]] == "ok"
    assert not np.isfinite(b.loss_final[1]) and STATUSES[b.status[1]] == "nonfinite"
    assert np.isfinite(b.loss_final[2]) and STATUSES[b.status[2]] == "max_steps"


def test_frequency_grid_checks():
    assert ch.FrequencyGrid(widths=[2, 3]).widths == (2, 3) and ch.FrequencyGrid().shape == (2, 4, 2, 8)
    for kw, word in (
        (dict(roughness=(0.5, 0.0)), "roughness"),
        (dict(roughness=()), "roughness"),
        (dict(widths=(1,)), "two neurons"),
        (dict(n_inits=0), "n_inits"),
        (dict(dim=1.0), "dim"),
    ):
        with pytest.raises((ValueError, TypeError), match=word):
            ch.FrequencyGrid(**kw)
    with pytest.raises(TypeError, match="FrequencyGrid"):
        ch.channel_frequency(grid=dict(n_inits=2))
    with pytest.raises(ValueError, match="inside SolverOptions"):
        ch.channel_frequency(solver=ij.SolverOptions("kvaerno5"), rtol=1e-6)
    with pytest.raises(ValueError, match="engine"):
        ch.channel_frequency(engine="gpu")


@pytest.mark.slow
def test_channel_frequency_old_keywords_give_the_same_study():
    grid = ch.FrequencyGrid(activations=("softplus",), roughness=(0.5,), widths=(2,), n_inits=2, n_samples=12)
    new = ch.channel_frequency(
        grid=grid, t1=10.0, solver=ij.SolverOptions("kvaerno5", rtol=1e-7, atol=1e-7, max_steps=20_000), progress=False
    )
    with pytest.warns(DeprecationWarning, match="FrequencyGrid"):
        old = ch.channel_frequency(
            activations=("softplus",),
            roughness=(0.5,),
            widths=(2,),
            n_inits=2,
            n_samples=12,
            t1=10.0,
            rtol=1e-7,
            progress=False,
        )
    assert old.settings == new.settings and old.to_dict() == new.to_dict()
    assert new.success.shape == (1, 1, 1, 2) and list(new.to_dict()["result"][0][0][0]) == list(
        ij.result_name(ij.result_from_code(ij.result_code(new.result)[0, 0, 0]))
    )


def test_regular_grid_is_the_papers_101_by_101_grid():
    X = np.asarray(ij.regular_grid(10**4))
    assert X.shape == (10201, 2)
    x = np.linspace(-np.sqrt(3), np.sqrt(3), 101)  # independent construction
    assert np.allclose(X[:101, 0], x, atol=1e-14) and np.allclose(X[:101, 1], -np.sqrt(3), atol=1e-14)
    assert np.allclose(X[::101, 1], x, atol=1e-14)  # first coordinate varies fastest (Julia's product order)
    X2, Y = ij.rosenbrock_grid(10**4)
    y = np.asarray(Y[:, 0])
    raw = np.log10(3 * (X[:, 1] + 1 - X[:, 0] ** 2) ** 2 + (1 - X[:, 0]) ** 2 + 0.1)
    assert np.allclose(y, (raw - raw.mean()) / raw.std(ddof=1), atol=1e-12)  # corrected std, as Julia's std
    with pytest.raises(ValueError, match="n_samples"):
        ij.regular_grid(0)


def test_weightnorm_is_half_the_mean_square():
    th = jnp.array([[3.0, 4.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    assert np.allclose(np.asarray(ij.weightnorm(th)), [26 / 8, 4 / 8])


def test_wilson_interval_matches_the_closed_form():
    z = 1.959963984540054
    for k, n in ((0, 10), (3, 10), (50, 100), (100, 100)):
        p = k / n
        c = (p + z**2 / (2 * n)) / (1 + z**2 / n)
        h = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
        assert np.allclose(ch.wilson_interval(k, n), (c - h, c + h), atol=1e-12)
    assert all(np.isnan(ch.wilson_interval(0, 0)))


def test_cluster_loss_levels_is_the_authors_greedy_rule():
    levels, members = ch.cluster_loss_levels([1.0, 1.0005, 0.5, np.nan, 0.9999, 0.5004, 0.2], rtol=1e-3)
    assert np.allclose(levels, [1.0, 0.5, 0.2])
    assert members == [[0, 1, 4], [2, 5], [6]]


def _teacher_problem():
    g = ij.mlp([1, 2, 1], bias=True)
    X = jnp.linspace(-2, 2, 40)[:, None]
    teacher = jnp.array([1.2, -0.8, 0.3, 0.5, 0.1, 1.5, -1.0])  # edge order of mlp([1,2,1], bias=True)
    net = ij.DAGNetwork(g, "softplus", edge_weights=teacher)
    return net, X, net.forward(X), teacher


def test_newton_phase_converges_like_scipy_trust_exact():
    from scipy.optimize import minimize

    from invariant_jax.losses import edge_loss_fn

    net, X, Y, teacher = _teacher_problem()
    starts = jnp.stack(
        [teacher + 0.05 * jnp.array([1, -1, 1, 1, -1, 1, -1.0]), teacher + 0.05 * jnp.array([-1, 1, 1, -1, 1, 1, 1.0])]
    )
    nets = eqx.filter_vmap(net.with_edge_weights)(starts)
    r = ij.newton_phase(nets, X, Y, options=ij.NewtonOptions(g_tol=1e-11, max_steps=200))
    assert list(ij.result_name(r.result)) == ["stopped_g_tol"] * 2 and bool(jnp.all(r.success))
    L = edge_loss_fn(net, X, Y)
    dL, d2L, L = jax.jit(jax.grad(L)), jax.jit(jax.hessian(L)), jax.jit(L)
    for k in range(2):  # independent reference: SciPy's exact trust-region Newton
        ref = minimize(
            lambda t: float(L(jnp.asarray(t))),
            np.asarray(starts[k]),
            method="trust-exact",
            jac=lambda t: np.asarray(dL(jnp.asarray(t))),
            hess=lambda t: np.asarray(d2L(jnp.asarray(t))),
            options=dict(gtol=1e-11),
        )
        assert np.allclose(np.asarray(r.theta[k]), ref.x, atol=1e-6)
    assert float(jnp.max(r.grad_norm)) <= 1e-11 and float(jnp.max(r.loss)) < 1e-18


def test_newton_phase_walks_down_a_channel_to_maxnorm():
    # a pair in the toy channel: Newton runs along it until weightnorm reaches maxnorm,
    # and the end point is a confirmed channel (merging pair, opposite diverging output weights, GLU fit)
    X = jnp.linspace(-3, 3, 61)[:, None]
    Y = ch.toy_target(X)
    net = ch.toy_network(1.10, 0.57, 3.83, -2.21)  # gradient flow from (0.55 s2, 0.7 s2, 3, -2.5) at t ~ 2600
    r = ij.newton_phase(net, X, Y, options=ij.NewtonOptions(maxnorm=20.0, max_steps=300))
    assert list(ij.result_name(r.result)) == ["stopped_weightnorm"]
    with pytest.warns(DeprecationWarning, match=r"NewtonOptions\(maxnorm=") as rec:  # the old spelling
        old = ij.newton_phase(net, X, Y, maxnorm=20.0, max_steps=300)
    assert len(rec) == 2 and np.array_equal(np.asarray(old.theta), np.asarray(r.theta))
    assert list(ij.result_name(old.result)) == ["stopped_weightnorm"] and old.settings == r.settings
    assert float(r.weightnorm[0]) >= 20.0 and float(r.loss[0]) < float(ij.losses.network_loss(net, X, Y))
    end = net.with_edge_weights(r.theta[0])
    conf = ch.confirm_channel(end, X, Y, maxnorm=20.0, pair_tol=1.0)
    ok, err, pairs = conf
    assert conf.success
    assert ok and len(pairs) == 1 and err < 1e-2
    (p,) = pairs  # the confirmed pair itself: its GLU limit is the pair's output to that error
    lim, out = np.asarray(ch.glu_limit(p, X, net=end)), np.asarray(ch.pair_output(p, X))
    assert np.max(np.abs(out - lim)) / np.max(np.abs(lim)) == pytest.approx(err, rel=1e-12)


def test_newton_phase_bad_input():
    net, X, Y, _ = _teacher_problem()
    with pytest.raises(ValueError, match="smooth"):
        ij.newton_phase(ij.DAGNetwork(net.graph, "relu", edge_weights=net.edge_weights()), X, Y)
    for kw in (dict(patience=0), dict(maxnorm=-1.0), dict(max_steps=1.5)):
        with pytest.raises((ValueError, TypeError), match=next(iter(kw))):
            ij.newton_phase(net, X, Y, options=ij.NewtonOptions(**kw))
        with pytest.raises((ValueError, TypeError), match=next(iter(kw))):
            ij.newton_phase(net, X, Y, **kw)
    with pytest.raises(TypeError, match="NewtonOptions"):
        ij.newton_phase(net, X, Y, options=dict(patience=3))


@pytest.mark.slow
def test_convergence_study_tiny_records_follow_the_criteria():
    X, Y = ij.rosenbrock_grid(16)
    st = ch.convergence_study(
        X,
        Y,
        grid=ch.StudyGrid(widths=(2,), activations=("g",), biases=(True,), n_seeds=3),
        flow=ij.FlowPhaseOptions(max_flow_steps=200, flow_stop="stop", n_record=0, engine="sweep"),
        newton=ij.NewtonOptions(max_steps=200),
        progress=False,
    )
    rec = st.records
    assert np.array_equal(st.success, np.isin(rec["stopped_by"], ["gradient", "patience", "maxnorm"]))
    assert list(ij.result_name(st.result)) == list(ij.result_name(ch.newton_result(list(rec["stopped_by"]))))
    with pytest.warns(DeprecationWarning, match="StudyGrid"):  # the old spelling: the same study
        old = ch.convergence_study(
            X,
            Y,
            widths=(2,),
            activations=("g",),
            biases=(True,),
            n_seeds=3,
            max_flow_steps=200,
            max_steps=200,
            progress=False,
        )
    assert old.settings == st.settings and list(old.records) == list(rec)
    for k in ("loss", "weightnorm", "stopped_by", "min_cos", "t_flow"):
        np.testing.assert_array_equal(old.records[k], rec[k])
    assert len(rec["loss"]) == 3
    assert np.array_equal(rec["infinite"], rec["weightnorm"] >= 1e3)
    assert np.allclose(rec["mse"], 2 * rec["loss"])
    assert np.array_equal(rec["duplicate"], rec["min_l2"] < 1e-6)
    assert not np.any(rec["confirmed"] & ~rec["infinite"])
    row = st.summary()[0]
    assert row["n"] == 3 and row["infinite"] == int(rec["infinite"].sum())
    budget = np.isin(rec["stopped_by"], ["max_steps", "max_time", "nonfinite"]) & ~rec["infinite"]
    assert row["undecided"] == int(budget.sum())
    assert "undec." in st.table()


def test_study_inits_depend_on_the_seed_alone():
    """Parts of a study (`first_seed`) draw the inits of the whole one, each from
    `mlpgf_glorot(fold_in(key(seed), n))`, with the MLPGradientFlow Glorot std per layer."""
    g = ij.mlp([2, 3, 1], bias=True)
    # two study sizes only (each size runs its own eager ops): the whole study is the
    # 4000-run one whose first-layer spread is checked below
    big = np.asarray(ch.study_inits(g, 4000, seed=4))
    whole = big[:6]
    part = np.asarray(ch.study_inits(g, 2, first_seed=3, seed=4))
    np.testing.assert_allclose(part, whole[3:5], rtol=1e-12, atol=0)
    one = np.asarray(ch.mlpgf_glorot(g, jr.fold_in(jr.key(4), 5)))
    np.testing.assert_allclose(whole[5], one, rtol=1e-12, atol=0)
    assert not np.allclose(whole[0], np.asarray(ch.study_inits(g, 2, seed=5))[0])
    layer1 = [n for n, (u, v) in enumerate(g.edges) if u in g.inputs and u not in g.constants]
    assert abs(big[:, layer1].std() - np.sqrt(2 / (2 + 3))) < 0.02


def test_sharpened_neuron_against_the_softplus_relu_gap():
    # one softplus neuron with input weights lam * w and output weight a / lam: its output
    # a softplus(lam z) / lam differs from the ReLU limit a relu(z) by a softplus(-lam |z|) / lam
    X, Y = ij.rosenbrock_grid(100)
    g = ij.mlp([2, 2, 1], bias=True)
    net = ij.DAGNetwork(g, "softplus", key=jr.key(0))
    for lam, want in ((1.0, False), (200.0, True)):
        W = np.asarray(net.weights).copy()
        h = g.index[g.hidden[0]]
        for u in g.inputs:
            W[g.index[u], h] *= lam
        W[h, g.index[g.outputs[0]]] /= lam
        n = net.with_edge_weights(jnp.asarray([W[g.index[a], g.index[b]] for a, b in g.edges]))
        ok, share, err = ch.sharpened_neuron(n, X)
        z = np.asarray(n.preactivations(X))[:, 0]
        ref = np.max(np.logaddexp(0.0, -np.abs(z))) / np.max(np.maximum(z, 0.0))
        np.testing.assert_allclose(err, ref, rtol=1e-9)
        th = np.asarray(n.edge_weights())
        assert share == pytest.approx(sum(W[g.index[u], h] ** 2 for u in g.inputs) / np.sum(th**2), rel=1e-12)
        assert ok is want


def _synthetic_study(seeds, **settings):
    rng = np.random.default_rng(seeds[0])
    n = 2 * len(seeds)
    rec = dict(
        activation=np.array(["g"] * n),
        bias=np.array([True] * n),
        r=np.repeat([2, 3], len(seeds)),
        seed=np.tile(seeds, 2),
        label=np.array(["rosenbrock"] * n),
        loss=rng.uniform(0.1, 1, n),
        infinite=rng.uniform(size=n) < 0.4,
        duplicate=rng.uniform(size=n) < 0.1,
        confirmed=np.zeros(n, bool),
        channel_paper=np.zeros(n, bool),
        stopped_by=np.array(["gradient"] * n),
    )
    rec["mse"] = 2 * rec["loss"]
    rec["theta"] = ch._levels._column([rng.normal(size=3) for _ in range(n)])
    base = dict(seed=0, maxnorm=1e3, rtol=1e-3, max_steps=2000, n_inputs=2, widths=[2, 3], n_seeds=len(seeds))
    return ch.ConvergenceStudy(records=rec, settings=dict(base, **settings), seconds=1.0)


def test_study_grid_checks():
    assert ch.StudyGrid(widths=[2, 3]).widths == (2, 3)
    for kw, word in (
        (dict(widths=()), "widths"),
        (dict(widths=(0,)), "width"),
        (dict(n_seeds=0), "n_seeds"),
        (dict(first_seed=-1), "first_seed"),
        (dict(activations=[]), "activations"),
    ):
        with pytest.raises((ValueError, TypeError), match=word):
            ch.StudyGrid(**kw)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ch.convergence_study(np.zeros((2, 2)), np.zeros(2), n_seedz=3)


def test_study_parts_merge_like_one_study_and_refuse_overlaps():
    a, b = _synthetic_study([0, 1, 2]), _synthetic_study([3, 4])
    back = ch.ConvergenceStudy.from_dict(a.to_dict())  # the JSON round trip
    assert back.records["theta"].dtype == object
    np.testing.assert_array_equal(np.stack(back.records["theta"]), np.stack(a.records["theta"]))
    m = ch.ConvergenceStudy.merge([back, b])
    assert m.settings["n_seeds"] == 5 and m.settings["widths"] == [2, 3]
    for row in m.summary(unique=False):  # counts against a direct count over both parts
        sel = lambda s: s.records["r"] == row["r"]  # noqa: E731
        assert row["n"] == sum(int(sel(s).sum()) for s in (a, b))
        assert row["infinite"] == sum(int(s.records["infinite"][sel(s)].sum()) for s in (a, b))
        assert row["infinite_ci"] == ch.wilson_interval(row["infinite"], row["n"])
    with pytest.raises(ValueError, match="appear in more than one"):
        ch.ConvergenceStudy.merge([a, _synthetic_study([2, 5])])
    with pytest.raises(ValueError, match=r"\['maxnorm'\] differ"):
        ch.ConvergenceStudy.merge([a, _synthetic_study([3], maxnorm=1e4)])


def test_gd_channel_trace_records_match_direct_computation():
    X = jnp.linspace(-3, 3, 41)[:, None]
    Y = ch.toy_target(X)
    net = ch.toy_network(1.10, 0.57, 3.83, -2.21)
    tr = ch.gd_channel_trace(net, (0, 1), X, Y, [0.05, 0.2], n_steps=20, record_every=10)
    assert tr.loss.shape == (2, 3) and list(tr.steps) == [0, 10, 20]
    for k, lr in enumerate((0.05, 0.2)):
        th = net.edge_weights()
        for _ in range(20):  # plain GD, step by step (independent of the scan)
            th = th - lr * ij.loss_gradient(net.with_edge_weights(th), X, Y)[1]
        assert np.allclose(np.asarray(tr.theta_final[k]), np.asarray(th), rtol=1e-10, atol=1e-12)
        end = net.with_edge_weights(th)
        lam = np.linalg.eigvalsh(np.asarray(ij.hessian(end, X, Y)))[-1]
        assert np.isclose(float(tr.sharpness[k, -1]), lam, rtol=1e-9)
        assert np.isclose(float(tr.eps[k, -1]), float(ch.channel_coordinates(end, 0, 1).eps), rtol=1e-12)
        assert np.isclose(float(tr.loss[k, -1]), float(ij.loss_gradient(end, X, Y)[0]), rtol=1e-12)
    assert tr.success.tolist() == [True, True] and list(ij.result_name(tr.result)) == ["successful"] * 2
    with pytest.raises(ValueError, match="multiple"):
        ch.gd_channel_trace(net, (0, 1), X, Y, [0.1], n_steps=30, record_every=20)
    with pytest.raises(TypeError, match="record_every"):
        ch.gd_channel_trace(net, (0, 1), X, Y, [0.1], n_steps=30, record_every=2.5)


def test_roughness_parts_merge_to_the_whole_study(tmp_path, monkeypatch):
    """benchmarks/channels_roughness.py --merge: the committed reduced study split by
    scaling into two parts merges back to the same summary; per-teacher counts match a
    direct count and the teacher bootstrap interval holds the observed fraction."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    import channels_roughness as cr

    whole = json.loads((root / "benchmarks/results/channels_roughness_reduced_cpu_newton2000.json").read_text())
    labels = np.array(whole["records"]["label"])
    paths = []
    for part, keep in (("a", ("s=0.1", "s=0.5")), ("b", ("s=2", "s=10"))):
        m = np.isin(labels, keep)
        doc = dict(whole, records={k: [v for v, k_ in zip(col, m) if k_] for k, col in whole["records"].items()})
        paths.append(tmp_path / f"{part}.json")
        paths[-1].write_text(json.dumps(doc))
    out = tmp_path / "merged.json"
    cr.merge([str(p) for p in paths], out)
    merged = json.loads(out.read_text())
    assert out.with_suffix(".png").exists()
    key = lambda rows: {r["label"]: (r["n"], r["infinite"], r["channel_paper"], r["confirmed"]) for r in rows}  # noqa: E731
    assert key(merged["summary"]) == key(whole["summary"])
    rec = {k: np.array(v, dtype=object if k == "theta" else None) for k, v in merged["records"].items()}
    inits = whole["settings"]["n_seeds"]
    for label, row in merged["teacher_spread"].items():
        m = rec["label"] == label
        counts = rec["confirmed"][m].astype(int).reshape(-1, inits).sum(1)  # teacher-major, `inits` runs each
        assert row["confirmed_per_teacher"] == counts.tolist()
        lo, hi = row["confirmed_ci_teacher_bootstrap"]
        assert lo <= counts.sum() / m.sum() <= hi
    with pytest.raises(ValueError, match="more than one part"):
        cr.merge([str(paths[0]), str(paths[0])], tmp_path / "twice.json")


def test_newton_phase_slots_take_the_next_run_and_change_no_result():
    # continuous batching: in 3 slots, 7 runs of different lengths give what each run gives
    # alone (batch_size=1), and the batch pays fewer slot iterations than groups of 3 run to
    # their slowest would have
    net, X, Y, teacher = _teacher_problem()
    sizes = jnp.array([0.01, 0.3, 0.02, 0.5, 0.05, 0.8, 0.03])
    signs = jnp.array([1, -1, 1, 1, -1, 1, -1.0])
    starts = jnp.stack([teacher + sizes[k] * jnp.roll(signs, k) for k in range(7)])
    nets = eqx.filter_vmap(net.with_edge_weights)(starts)
    opts = ij.NewtonOptions(g_tol=1e-11, max_steps=200, chunk=5)
    alone = ij.newton_phase(nets, X, Y, options=dataclasses.replace(opts, batch_size=1))
    pooled = ij.newton_phase(nets, X, Y, options=dataclasses.replace(opts, batch_size=3))
    assert np.array_equal(np.asarray(alone.n_steps), np.asarray(pooled.n_steps))
    assert list(ij.result_name(alone.result)) == list(ij.result_name(pooled.result))
    # equal to rounding (a batch of 3 vectorizes the linear algebra differently from 1):
    # 1e-13 where runs converged, up to ~1e-8 where 200 iterations crawled a flat valley
    diff = np.max(np.abs(np.asarray(alone.theta) - np.asarray(pooled.theta)), axis=1)
    converged = np.asarray(alone.result == ij.RESULTS.stopped_g_tol)
    assert converged.sum() >= 4 and diff[converged].max() < 1e-10 and diff.max() < 1e-7
    k = np.asarray(alone.n_steps)
    assert len(set(k.tolist())) > 1  # the runs differ in length
    groups = sum(3 * 5 * int(np.ceil(k[s : s + 3].max() / 5)) for s in range(0, 7, 3))
    assert pooled.settings["slot_iterations"] < groups
    late = ij.newton_phase(nets, X, Y, options=ij.NewtonOptions(max_time=1e-9, batch_size=3))
    assert set(ij.result_name(late.result)) == {"newton_max_time"}
    assert np.array_equal(np.asarray(late.theta), np.asarray(starts)) and int(late.n_steps.sum()) == 0
