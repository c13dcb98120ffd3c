"""The sweep entry points' option objects (`BatchOptions`, `StoreOptions`, `kinks=`,
`loss=Objective`): validation that names the problem and the fix, equal options that hash
equal (so engines are shared), and the old keywords, which warn and give the same result."""

import warnings

import equinox as eqx
import jax
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.sweep import BatchOptions, StoreOptions, SweepConfig, resolve_kinks, run_sweep

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(slots=0), ValueError, "slots must be a positive integer; got 0"),
        (dict(slots=True), TypeError, "slots must be a positive integer"),
        (dict(slots=2.0), TypeError, "slots must be a positive integer"),
        (dict(slots=2**31), ValueError, "slots must be at most 2147483647"),
        (dict(steps_per_call=0), ValueError, "steps_per_call must be a positive integer"),
        (dict(exact=1), TypeError, "exact must be True, False or None"),
        (dict(progress="yes"), TypeError, "progress must be True, False or None"),
        (dict(devices=[]), ValueError, "devices is empty; pass None"),
    ],
)
def test_batch_options_refuse_bad_values(bad, err, match):
    with pytest.raises(err, match=match):
        BatchOptions(**bad)


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(flush_seconds=-1.0), ValueError, "flush_seconds must be a finite number >= 0"),
        (dict(flush_seconds=float("inf")), ValueError, "flush_seconds must be a finite number >= 0"),
        (dict(chunk_size=0), ValueError, "chunk_size must be a positive integer"),
        (dict(stale_seconds=0.0), ValueError, "stale_seconds must be a positive finite number"),
    ],
)
def test_store_options_refuse_bad_values(bad, err, match):
    with pytest.raises(err, match=match):
        StoreOptions(**bad)


def test_equal_options_are_equal_and_hash_equal():
    devices = jax.devices()
    a, b = BatchOptions(slots=4, devices=devices), BatchOptions(slots=4, devices=list(devices))
    assert a == b and hash(a) == hash(b) and a.devices == tuple(devices)
    assert hash(StoreOptions(chunk_size=3)) == hash(StoreOptions(chunk_size=3))
    assert BatchOptions().show_progress(True) and not BatchOptions(progress=False).show_progress(True)


def test_resolve_kinks_is_the_one_rule():
    opts, stop = ij.SolverOptions(), ij.StopRules()
    kw = dict(options=opts, stop=stop, weight_decay=0.0)
    assert resolve_kinks(None, kinked=True, **kw) == ij.KinkOptions()
    assert resolve_kinks(None, kinked=False, **kw) is None
    assert resolve_kinks(False, kinked=True, **kw) is None
    assert resolve_kinks(True, kinked=True, **kw) == ij.KinkOptions()
    assert resolve_kinks(ij.KinkOptions(max_events=3), kinked=True, **kw).max_events == 3
    # auto turns off for what the kink-aware integrator does not support; explicit refuses it
    for unsupported in (
        dict(weight_decay=0.1),
        dict(stop=ij.StopRules(loss_floor=1e-3)),
        dict(options=ij.SolverOptions(dt0=0.1)),
    ):
        assert resolve_kinks(None, kinked=True, **{**kw, **unsupported}) is None
        with pytest.raises(ValueError, match="kink-aware integrator does not support"):
            resolve_kinks(True, kinked=True, **{**kw, **unsupported})
    with pytest.raises(TypeError, match="kinks must be an ij.KinkOptions, True, False or None"):
        resolve_kinks("on", kinked=True, **kw)
    # SweepConfig asks the same function
    assert SweepConfig(activation="relu").kink_aware and not SweepConfig(activation="relu", weight_decay=0.1).kink_aware


@pytest.fixture(scope="module")
def batch():
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(1), activation="softplus")
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "softplus", key=k))(jax.random.split(jax.random.key(0), 3))
    return nets, X, Y


def _same(a, b):
    for k in ("index", "theta_final", "loss_final", "num_steps", "status", "drift"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    np.testing.assert_array_equal(a.result_codes, b.result_codes)


def test_sweep_flows_old_keywords_warn_and_give_the_same_result(batch):
    nets, X, Y = batch
    new = ij.sweep_flows(
        nets,
        X,
        Y,
        0.3,
        saveat=ij.SaveTimes(n_save=5),
        loss=ij.Objective("mse", weight_decay=0.1),
        batch=BatchOptions(slots=2, steps_per_call=8),
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = ij.sweep_flows(nets, X, Y, 0.3, n_save=5, weight_decay=0.1, slots=2, steps_per_call=8, kink_aware=False)
    said = " ".join(str(w.message) for w in caught)
    for words in (
        "sweep_flows(n_save=...) is deprecated; pass saveat=ij.SaveTimes(n_save=...)",
        "sweep_flows(weight_decay=...) is deprecated; pass loss=ij.Objective(loss, weight_decay=...)",
        "sweep_flows(slots=...) is deprecated; pass batch=ij.sweep.BatchOptions(slots=...)",
        "sweep_flows(kink_aware=...) is deprecated; pass kinks=True / kinks=False",
    ):
        assert words in said
    _same(new, old)
    # the outcome vocabulary: RESULTS items, with the codes the store keeps
    assert isinstance(new.result, ij.RESULTS)
    assert list(ij.result_name(new.result)) == ["successful"] * 3
    assert np.all(new.result == ij.RESULTS.successful) and new.success.all()
    frame = new.to_pandas()
    np.testing.assert_array_equal(frame["result"].to_numpy(), ij.result_code(new.result))


def test_sweep_flows_refuses_mixed_and_unsupported_spellings(batch):
    nets, X, Y = batch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match="pass slots inside BatchOptions"):
            ij.sweep_flows(nets, X, Y, 0.3, batch=BatchOptions(), slots=2)
        with pytest.raises(ValueError, match="inside Objective"):
            ij.sweep_flows(nets, X, Y, 0.3, loss=ij.Objective("mse"), weight_decay=0.1)
        with pytest.raises(ValueError, match="only applies to kink-aware sweeps"):
            ij.sweep_flows(nets, X, Y, 0.3, kink_aware=False, kinks=ij.KinkOptions())
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        ij.sweep_flows(nets, X, Y, 0.3, slot=2)
    with pytest.raises(TypeError, match="expected a BatchOptions"):
        ij.sweep_flows(nets, X, Y, 0.3, batch=dict(slots=2))
    with pytest.raises(ValueError, match="loss and weight decay only; got regularizer='l1'"):
        ij.sweep_flows(nets, X, Y, 0.3, loss=ij.Objective("mse", regularizer="l1", strength=0.1))


def test_run_sweep_old_keywords_warn_and_give_the_same_result(tmp_path):
    cfg = SweepConfig(n_inits=3, t1=0.3, n_samples=8, n_save=5, kink_aware=False)
    new = run_sweep(
        cfg,
        tmp_path / "new",
        batch=BatchOptions(slots=2, steps_per_call=8, progress=False),
        store=StoreOptions(flush_seconds=0.0, chunk_size=2, stale_seconds=60.0),
    )
    with pytest.warns(
        DeprecationWarning,
        match=r"run_sweep\(chunk_size=...\) is deprecated; pass "
        r"store=ij.sweep.StoreOptions\(chunk_size=...\)",
    ):
        old = run_sweep(
            cfg,
            tmp_path / "old",
            slots=2,
            steps_per_call=8,
            progress=False,
            flush_seconds=0.0,
            chunk_size=2,
            stale_seconds=60.0,
        )
    _same(new, old)
    assert len(list((tmp_path / "new" / "chunks").glob("chunk-*"))) >= 2  # chunk_size=2: 3 records, 2+ chunks
    with pytest.raises(ValueError, match="pass chunk_size inside StoreOptions"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        run_sweep(cfg, None, store=StoreOptions(), chunk_size=2)


# ------------------------------------------------------------ SweepConfig holds the option objects


def test_sweep_config_holds_the_option_objects_and_old_keywords_build_them():
    new = SweepConfig(
        solver=ij.SolverOptions("gauss4", rtol=1e-6, atol=1e-7, max_steps=500),
        saveat=ij.SaveTimes(n_save=11),
        loss=ij.Objective("mse"),
        kinks=ij.KinkOptions(max_events=7),
    )
    assert isinstance(new.solver, ij.SolverOptions) and isinstance(new.kinks, ij.KinkOptions)
    with pytest.warns(
        DeprecationWarning,
        match=r"SweepConfig\(rtol=...\) is deprecated; pass "
        r"solver=ij.SolverOptions\(rtol=...\)",
    ):
        old = SweepConfig(
            solver="gauss4", rtol=1e-6, atol=1e-7, max_steps=500, n_save=11, max_events=7, kink_aware=True
        )
    assert old == new and hash(old) == hash(new) and old.to_dict() == new.to_dict()
    # the flat names stay readable, and the stored form stays flat (old folders' hashes hold)
    assert (new.rtol, new.n_save, new.max_events, new.kink_aware, new.solver_name) == (1e-6, 11, 7, True, "gauss4")
    d = new.to_dict()
    assert d["rtol"] == 1e-6 and d["kink_aware"] is True and d["max_events"] == 7 and "max_sliding" not in d
    assert SweepConfig.from_dict(d) == new
    # auto: one rule (resolve_kinks); the config holds its verdict
    assert SweepConfig().kinks == ij.KinkOptions() and SweepConfig(activation="tanh").kinks is False
    assert SweepConfig(loss=ij.Objective("mse", weight_decay=0.1)).kinks is False


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(solver=ij.SolverOptions(dt0=0.1)), ValueError, "cannot hold dt0; use ij.sweep_flows"),
        (dict(stop=ij.StopRules(max_wall_time=5.0)), ValueError, "cannot hold max_wall_time"),
        (dict(saveat=ij.SaveTimes([0.0, 0.5])), ValueError, "cannot hold explicit save times"),
        (dict(loss=ij.Objective("mse", regularizer="l1", strength=0.1)), ValueError, "cannot hold a regularizer"),
        (dict(solver=3), TypeError, "solver must be an ij.SolverOptions"),
        (dict(kinks="on"), TypeError, "kinks must be an ij.KinkOptions, True, False or None"),
        (dict(kinks=True, activation="softplus"), ValueError, "kink_aware needs a piecewise-linear activation"),
        (dict(kinks=True, stop=ij.StopRules(grad_norm_tol=1e-6)), ValueError, "does not support grad_norm_tol"),
        (dict(solver=ij.SolverOptions(), rtol=1e-6), ValueError, "Pass rtol inside solver=SolverOptions"),
        (dict(kinks=ij.KinkOptions(), max_events=3), ValueError, "inside kinks=KinkOptions"),
    ],
)
def test_sweep_config_refuses_what_it_cannot_store(bad, err, match):
    with pytest.raises(err, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        SweepConfig(**bad)


def test_toml_nests_the_option_objects_and_reads_the_old_flat_form(tmp_path, capsys):
    from invariant_jax.cli._common import read_config_file

    cfg = SweepConfig(
        graph="mlp",
        widths=(3, 4, 1),
        solver=ij.SolverOptions("gauss4", rtol=1e-6, atol=1e-6),
        saveat=ij.SaveTimes(n_save=11),
        kinks=ij.KinkOptions(max_events=7),
    )
    text = cfg.to_toml()
    assert '[solver]\nsolver = "gauss4"\nrtol = 1e-06' in text and "[kinks]\nkink_aware = true\nmax_events = 7" in text
    (tmp_path / "new.toml").write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new form is not deprecated
        assert SweepConfig.from_toml(tmp_path / "new.toml") == cfg
    (tmp_path / "sub.toml").write_text("[sweep]\nn_inits = 4\n[sweep.solver]\nrtol = 1e-6\n")
    assert SweepConfig.from_toml(tmp_path / "sub.toml").rtol == 1e-6
    flat = tmp_path / "flat.toml"
    flat.write_text(
        'graph = "mlp"\nwidths = [3, 4, 1]\nsolver = "gauss4"\nrtol = 1e-6\natol = 1e-6\nn_save = 11\nmax_events = 7\n'
    )
    with pytest.warns(
        DeprecationWarning,
        match=r"flat option keys \['solver', 'rtol', 'atol', 'n_save', "
        r"'max_events'\] are deprecated; write them in their tables "
        r"instead: \[solver\] solver = ..., rtol = ..., atol = ...; "
        r"\[save\] n_save = ...; \[kinks\] max_events = ...",
    ):
        assert SweepConfig.from_toml(flat) == cfg
    assert read_config_file(flat)["rtol"] == 1e-6  # the command line prints the message
    assert "are deprecated; write them in their tables" in capsys.readouterr().err
    for content, match in (
        ("[solver]\nrtl = 1e-6\n", r"unknown key\(s\) \['rtl'\] in \[solver\]"),
        ("rtol = 1e-6\n[solver]\nrtol = 1e-7\n", "given twice"),
    ):
        (tmp_path / "bad.toml").write_text(content)
        with pytest.raises(ValueError, match=match), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            read_config_file(tmp_path / "bad.toml")
