"""The glue between the tools (issue 32): graphs from files, batch evaluation, a sweep's
row back to objects, honest conservation, and one tidy results table (the Parquet
chunks, `load_sweep(...).to_pandas()`, DuckDB and `table.csv` carry the same columns, and
agree with `summary.json` and with independent references: per-row `ij.connectivity`
with its LP, NumPy's matrix rank). One sweep, run by the CLI, serves every test."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import invariant_jax as ij

SWEEP_ARGS = [
    "--graph",
    "example",
    "--n-inits",
    "12",
    "--t1",
    "0.5",
    "--n-samples",
    "8",
    "--slots",
    "4",
    "--no-figures",
    "--no-progress",
    "--rows",
    "0",
]

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
    assert ij.DAG.from_file(tmp_path / "h.txt") == ij.DAG.from_edges(
        [("a", "h"), ("h", "o")], inputs=["a"], outputs=["o"]
    )


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
    """One sweep for every test of this file: the CLI's default method (kink-aware ReLU on the
    example DAG, which has bottlenecks and disconnected H_G(c0))."""
    from invariant_jax.cli import main

    out = tmp_path_factory.mktemp("glue") / "run"
    assert main(["sweep", *SWEEP_ARGS, "--out", str(out)]) == 0
    cfg, res = ij.load_sweep(out)
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
        direct = ij.DAGNetwork(
            cfg.build_graph(),
            cfg.activation,
            init=cfg.init,
            scale=cfg.scale,
            key=jax.random.fold_in(jax.random.key(cfg.seed), i),
        )
        np.testing.assert_array_equal(np.asarray(direct.edge_weights()), res.theta0[row])
    net1 = ij.sweep_network(out, 4, final=True)
    np.testing.assert_array_equal(
        np.asarray(net1.edge_weights()), res.theta_final[int(np.flatnonzero(res.index == 4)[0])]
    )
    # the row's c0 is the network's conserved quantities
    np.testing.assert_allclose(
        ij.conserved_quantities(ij.sweep_network(out, 2)), res.c0[res.index == 2][0], rtol=0, atol=1e-15
    )


def test_sweep_network_errors(swept):
    cfg, out, _ = swept
    with pytest.raises(ValueError, match="outside the sweep's initializations 0 .. 11"):
        ij.sweep_network(cfg, 12)
    with pytest.raises(ValueError, match="results folder"):
        ij.sweep_network(cfg, 0, final=True)
    with pytest.raises(TypeError, match="integer"):
        ij.sweep_network(out, 1.0)
    with pytest.raises(TypeError, match="SweepConfig or a results folder"):
        ij.sweep_network(3, 0)


def test_flow_says_whether_a_law_applies():
    """Traced with jax.eval_shape: the field is static and the warning comes from Python, so
    nothing needs compiling."""
    import warnings

    from invariant_jax import flow as flow_module

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(1))
    flow_module._WARNED_NO_LAW.clear()
    tanh = ij.DAGNetwork(g, "tanh", key=jax.random.key(0))
    relu = ij.DAGNetwork(g, "relu", key=jax.random.key(0))
    with pytest.warns(ij.NoConservationLaw, match=r"\['tanh'\] are not positively homogeneous"):
        f = jax.eval_shape(lambda: ij.gradient_flow(tanh, X, Y, 0.2, saveat=ij.SaveTimes(n_save=5)))
    assert isinstance(f, ij.Flow) and f.conservation_law is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", ij.NoConservationLaw)  # once per activation
        jax.eval_shape(lambda: ij.gradient_flow(tanh, X, Y, 0.2, saveat=ij.SaveTimes(n_save=5)))
        assert (
            jax.eval_shape(lambda: ij.gradient_flow(relu, X, Y, 0.2, saveat=ij.SaveTimes(n_save=5))).conservation_law
            is True
        )
        # weight decay keeps a law: c(t) = c(0) exp(-2 lambda t)
        assert (
            jax.eval_shape(
                lambda: ij.gradient_flow(relu, X, Y, 0.2, loss=ij.Objective(weight_decay=0.1))
            ).conservation_law
            is True
        )
    with pytest.warns(ij.NoConservationLaw, match="regularizer"):
        f = jax.eval_shape(lambda: ij.gradient_flow(relu, X, Y, 0.2, loss=ij.Objective(regularizer="l2", strength=0.1)))
    assert f.conservation_law is False


@pytest.mark.slow  # compiles a vmapped flow
def test_check_conservation_says_no_law():
    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jax.random.key(1))
    tanh = ij.DAGNetwork(g, "tanh", key=jax.random.key(0))
    rep = ij.check_conservation(tanh, X, Y, t1=0.2, force=True)  # reports drift without judging it
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
    assert main(["connectivity", "--from-sweep", str(out), "--index", "12"]) == 2
    assert "outside the sweep's initializations 0 .. 11" in capsys.readouterr().err


# ------------------------------------------------------------ one tidy table


def test_chunks_carry_every_per_trajectory_column(swept):
    _, folder, res = swept
    frame = res.to_pandas()
    chunks = pd.read_parquet(folder / "chunks").drop_duplicates("index").sort_values("index").reset_index(drop=True)
    # the chunks add only the store's config_hash column
    assert set(chunks.columns) - set(frame.columns) == {"config_hash"}
    assert set(frame.columns) - set(chunks.columns) == set()
    for name in (
        "connected",
        "n_components",
        "component",
        "rank_start",
        "rank_end",
        "num_events",
        "sliding_time",
        "status_name",
        "result_name",
        "bottleneck_sign_changes",
        "frozen_sign_changes",
        "drift_in_tol",
    ):
        np.testing.assert_array_equal(chunks[name].to_numpy(), frame[name].to_numpy(), err_msg=name)
    np.testing.assert_array_equal(np.stack(chunks["frozen"]), np.stack(frame["frozen"]))
    np.testing.assert_array_equal(np.stack(chunks["theta0"]), np.stack(frame["theta0"]))


def test_columns_against_independent_references(swept):
    _, folder, res = swept
    frame = res.to_pandas()
    cfg, _ = ij.load_sweep(folder)
    g = cfg.build_graph()
    B = g.incidence()
    for _, row in frame.iterrows():
        con = ij.connectivity(g, np.asarray(row["c0"]))  # combinatorial verdict + LP cross-check
        assert bool(row["connected"]) == con.connected
        assert row["n_components"] == con.n_components
        assert np.flatnonzero(row["frozen"]).tolist() == sorted(con.frozen_index)
        th0, th1 = np.asarray(row["theta0"]), np.asarray(row["theta_final"])
        assert row["rank_start"] == np.linalg.matrix_rank(2 * B * th0)
        assert row["rank_end"] == np.linalg.matrix_rank(2 * B * th1)
        signs = [f"{u}->{v}:{'+' if th0[e] > 0 else '-'}" for e, (u, v) in enumerate(g.edges) if row["frozen"][e]]
        assert row["component"] == (" ".join(signs) or "connected")
        assert row["frozen_sign_changes"] == int(np.sum((np.sign(th0) != np.sign(th1)) & row["frozen"]))
        assert row["status_name"] == ij.sweep.STATUSES[row["status"]]
        assert row["result_name"] == ij.result_name(row["result"])
    np.testing.assert_allclose(
        frame["drift_in_tol"], frame["drift"] / (cfg.atol + cfg.rtol * frame["scale"]), rtol=1e-15
    )


def test_table_csv_is_a_view_and_summary_agrees(swept):
    _, folder, res = swept
    frame = res.to_pandas()
    with (folder / "table.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(frame)
    for name in table[0]:
        assert name in frame.columns, name
        for got, want in zip((r[name] for r in table), frame[name]):
            if isinstance(want, (bool, np.bool_)):
                want = int(want)
            if isinstance(want, (float, np.floating)):
                assert float(got) == float(want), name  # written exactly (repr)
            else:
                assert got == str(want), name
    summary = json.loads((folder / "summary.json").read_text())
    ok = frame["status"] <= 1
    assert summary["initializations"] == len(frame)
    assert summary["fraction_disconnected"] == pytest.approx(float(np.mean(~frame["connected"])), abs=0)
    assert summary["max_components"] == frame["n_components"].max()
    assert summary["rank_changed"] == int(np.sum((frame["rank_start"] != frame["rank_end"]) & ok))
    assert summary["bottleneck_sign_changes"] == frame["bottleneck_sign_changes"].sum()
    assert summary["frozen_sign_changes"] == frame["frozen_sign_changes"].sum() == 0
    assert summary["kink_events_total"] == frame["num_events"].sum()
    assert summary["drift_tol_max"] == pytest.approx(frame["drift_in_tol"][ok].max(), rel=1e-15)
    for name in ij.sweep.STATUSES:
        assert summary[f"status_{name}"] == int(np.sum(frame["status_name"] == name))
    assert summary["connectivity_mismatches"] == 0


def test_duckdb_reads_the_chunks_directly(swept):
    _, folder, res = swept
    frame = res.to_pandas()
    duckdb = pytest.importorskip("duckdb")
    q = (
        f"SELECT connected, count(DISTINCT index) AS n, max(rank_start) AS r FROM '{folder}/chunks/*.parquet' "
        "GROUP BY connected ORDER BY connected"
    )
    got = duckdb.sql(q).df()
    want = frame.groupby("connected").agg(n=("index", "nunique"), r=("rank_start", "max")).reset_index()
    np.testing.assert_array_equal(got[["n", "r"]].to_numpy(), want[["n", "r"]].to_numpy())


def test_old_folders_get_the_columns_on_load(swept):
    """Records written before the derived columns existed: load_sweep derives them."""
    from invariant_jax.sweep import with_columns
    from invariant_jax.sweep._columns import DERIVED

    cfg, _, res = swept
    base = {k: getattr(res, k) for k in ("index", "theta0", "theta_final", "c0", "drift", "scale", "result", "status")}
    again = with_columns(cfg, cfg.build_graph(), base)
    for k in DERIVED:
        want = res.drift_in_tol if k == "drift_in_tol" else res.columns[k]
        np.testing.assert_array_equal(again[k], want, err_msg=k)
