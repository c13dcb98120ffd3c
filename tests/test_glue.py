"""From a sweep's row back to objects, graphs from files, batch evaluation: the glue
between the tools (issue 32)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij

EDGES = [("x1", "h2"), ("x2", "h1"), ("b", "h1"), ("h1", "y"), ("h2", "y"), ("x1", "y")]


def _graph():
    # hidden given in an order the edge list alone would not produce (h2 is met first)
    return ij.DAG.from_edges(EDGES, inputs=["x1", "x2"], outputs=["y"], constants=["b"], hidden=["h1", "h2"])


def test_to_file_from_file_round_trip(tmp_path):
    g = _graph()
    path = g.to_file(tmp_path / "g.txt")
    back = ij.DAG.from_file(path)
    assert back == g
    assert back.edges == g.edges and back.hidden == g.hidden and back.constants == g.constants
    np.testing.assert_array_equal(back.incidence(), g.incidence())
    # a file written by hand, without a hidden: line, reads as DAG.from_edges does
    (tmp_path / "h.txt").write_text("inputs: a\noutputs: o  # the output\na h\nh o\n")
    assert ij.DAG.from_file(tmp_path / "h.txt") == ij.DAG.from_edges([("a", "h"), ("h", "o")], inputs=["a"],
                                                                       outputs=["o"])


def test_file_errors_name_the_file_and_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        ij.DAG.from_file(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_text("inputs: a\noutputs: o\na b c\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: expected 'u v'"):
        ij.DAG.from_file(tmp_path / "bad.txt")
    (tmp_path / "noout.txt").write_text("inputs: a\na o\n")
    with pytest.raises(ValueError, match="outputs: ..."):
        ij.DAG.from_file(tmp_path / "noout.txt")
    g = ij.DAG.from_edges([("in put", "o")], inputs=["in put"], outputs=["o"])
    with pytest.raises(ValueError, match="'in put' cannot be written"):
        g.to_file(tmp_path / "x.txt")


def test_sweep_config_takes_a_file_or_a_dag(tmp_path):
    g = _graph()
    path = g.to_file(tmp_path / "g.txt")
    a = ij.SweepConfig(graph=str(path), n_inits=3)
    b = ij.SweepConfig(graph=path, n_inits=3)
    c = ij.SweepConfig(graph=g, n_inits=3)
    assert a == b == c
    assert a.graph == "edges" and a.build_graph() == g
    # the TOML form gives the same config
    (tmp_path / "s.toml").write_text(f'graph = "{path}"\nn_inits = 3\n')
    assert ij.SweepConfig.from_toml(tmp_path / "s.toml") == a
    # round trip through the manifest's dict
    assert ij.SweepConfig.from_dict(a.to_dict()) == a
    # a graph whose hidden order follows from its edges keeps the old config dict (and hash)
    plain = ij.SweepConfig(graph=ij.example_dag(), n_inits=3)
    assert "hidden" not in plain.to_dict() and plain.build_graph() == ij.example_dag()
    with pytest.raises(ValueError, match="drop edges="):
        ij.SweepConfig(graph=g, edges=[("a", "b")])
    with pytest.raises(ValueError, match="edge-list file"):
        ij.SweepConfig(graph="nonsense")


def test_net_call_on_a_batch_equals_vmap():
    g = _graph()
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(0))
    X = jax.random.normal(jax.random.key(1), (7, g.n_in))
    np.testing.assert_allclose(net(X), jax.vmap(net)(X), rtol=1e-14, atol=1e-14)
    assert net(X[0]).shape == (1,)
    with pytest.raises(ValueError, match=r"reshape\(-1, 2\)"):
        net(jnp.zeros((2, 3, 2)))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    cfg = ij.SweepConfig(graph="mlp", widths=(2, 3, 1), n_inits=6, t1=0.5, n_samples=8, kink_aware=False)
    res = ij.run_sweep(cfg, out, progress=False, slots=4)
    return cfg, out, res


def test_sweep_network_is_the_engine_start_bit_for_bit(swept):
    cfg, out, res = swept
    for i in range(cfg.n_inits):
        row = int(np.flatnonzero(res.index == i)[0])
        from_config = np.asarray(ij.sweep_network(cfg, i).edge_weights())
        from_folder = np.asarray(ij.sweep_network(out, i).edge_weights())
        np.testing.assert_array_equal(from_config, res.theta0[row])
        np.testing.assert_array_equal(from_folder, res.theta0[row])
        # the same network as DAGNetwork with the documented key
        direct = ij.DAGNetwork(cfg.build_graph(), cfg.activation, init=cfg.init, scale=cfg.scale,
                               key=jax.random.fold_in(jax.random.key(cfg.seed), i))
        np.testing.assert_array_equal(np.asarray(direct.edge_weights()), res.theta0[row])
    net1 = ij.sweep_network(out, 4, final=True)
    np.testing.assert_array_equal(np.asarray(net1.edge_weights()), res.theta_final[int(np.flatnonzero(res.index == 4)[0])])
    # the row's c0 is the network's conserved quantities
    np.testing.assert_allclose(ij.conserved_quantities(ij.sweep_network(out, 2)), res.c0[res.index == 2][0],
                               rtol=0, atol=1e-15)


def test_sweep_network_errors(swept):
    cfg, out, _ = swept
    with pytest.raises(ValueError, match="outside the sweep's initializations 0 .. 5"):
        ij.sweep_network(cfg, 6)
    with pytest.raises(ValueError, match="results folder"):
        ij.sweep_network(cfg, 0, final=True)
    with pytest.raises(TypeError, match="integer"):
        ij.sweep_network(out, 1.0)
    with pytest.raises(TypeError, match="SweepConfig or a results folder"):
        ij.sweep_network(3, 0)


def test_flow_says_whether_a_law_applies():
    import warnings

    from invariant_jax import flow as flow_module

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(1))
    flow_module._WARNED_NO_LAW.clear()
    tanh = ij.DAGNetwork(g, "tanh", key=jax.random.key(0))
    with pytest.warns(ij.NoConservationLaw, match=r"\['tanh'\] are not positively homogeneous"):
        f = ij.gradient_flow(tanh, X, Y, 0.2, n_save=5)
    assert f.conservation_law is False and float(f.drift) > 0  # measured, but no law
    with warnings.catch_warnings():
        warnings.simplefilter("error", ij.NoConservationLaw)  # once per activation
        ij.gradient_flow(tanh, X, Y, 0.2, n_save=5)
    relu = ij.DAGNetwork(g, "relu", key=jax.random.key(0))
    assert ij.gradient_flow(relu, X, Y, 0.2, n_save=5).conservation_law is True


@pytest.mark.slow  # two more compiled programs
def test_regularizer_has_no_law_and_check_conservation_says_no_law():
    from invariant_jax import flow as flow_module

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(1))
    flow_module._WARNED_NO_LAW.clear()
    relu = ij.DAGNetwork(g, "relu", key=jax.random.key(0))
    with pytest.warns(ij.NoConservationLaw, match="regularizer"):
        assert ij.gradient_flow(relu, X, Y, 0.2, n_save=5, regularizer="l2", strength=0.1).conservation_law is False
    # check_conservation(force=True) reports drift without judging it
    tanh = ij.DAGNetwork(g, "tanh", key=jax.random.key(0))
    rep = ij.check_conservation(tanh, X, Y, t1=0.2, force=True)
    assert rep.passed and not rep.homogeneous and "no law" in rep.table() and "FAILED" not in rep.table()


def test_cli_check_names_its_flags(capsys):
    from invariant_jax.cli import main

    assert main(["check", "--activation", "tanh"]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "force=True" not in err


def test_cli_connectivity_explains_a_sweep_row(swept, capsys):
    from invariant_jax.cli import main

    cfg, out, res = swept
    df = res.to_pandas()
    for i in (0, 5):
        assert main(["connectivity", "--from-sweep", str(out), "--index", str(i)]) == 0
        text = capsys.readouterr().out
        row = df[df["index"] == i].iloc[0]
        assert f"initialization {i} of the sweep" in text
        want = "connected (1 component)" if row["connected"] else f"{row['n_components']} connected components"
        assert want in text, text
    assert main(["connectivity", "--from-sweep", str(out), "--index", "6"]) == 2
    assert "outside the sweep's initializations 0 .. 5" in capsys.readouterr().err
