"""Pruning: exact removal of cut-off sub-networks, the magnitude baseline, the report,
tabular data (Breast Cancer, CSV) and the `invariant-jax prune` command."""

import json

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.cli import main


def _zero_boundary(g, theta, group):
    theta = np.array(theta)
    for k, (u, v) in enumerate(g.edges):
        if (u in group) != (v in group):
            theta[k] = 0.0
    return theta


@pytest.fixture(scope="module")
def deep():
    g = ij.mlp([4, 6, 5, 2], bias=True)
    net = ij.DAGNetwork(g, key=jr.key(0))
    X = jr.normal(jr.key(1), (200, 4))
    return g, net, X


def test_exactly_cut_off_group_is_removed_without_changing_the_function(deep):
    g, net, X = deep
    group = {"h1_0", "h2_0"}  # connected to each other, cut off from the rest
    cut = net.with_edge_weights(_zero_boundary(g, net.edge_weights(), group))
    assert ij.singular_subnetworks(cut) == [frozenset(group)]
    pruned, rep = ij.prune(cut, 0.0, X=X)
    assert len(pruned.graph.hidden) == len(g.hidden) - len(group)
    assert set(g.hidden) - set(pruned.graph.hidden) == group
    assert rep.counts() == {"cut off": 2}
    # one outcome vocabulary: the report carries `result` and `success`, as TrainResult does
    assert ij.result_name(rep.result) == "successful" and rep.success
    diff = float(jnp.max(jnp.abs(pruned.forward(X) - cut.forward(X))))
    assert diff <= 1e-12 and rep.max_abs_change == pytest.approx(diff, abs=1e-15)
    assert rep.group_sums[0] == pytest.approx(0.0, abs=1e-12)  # sum of c over a cut-off group
    assert pruned.graph.inputs == g.inputs and pruned.graph.outputs == g.outputs
    # the surviving edges keep their weights
    old = dict(zip(g.edges, np.asarray(cut.edge_weights())))
    for e, w in zip(pruned.graph.edges, np.asarray(pruned.edge_weights())):
        assert w == old[e]


@pytest.mark.slow
def test_random_dags_cut_off_groups_removed_exactly():
    rng = np.random.default_rng(2)
    checked = 0
    for seed in range(2):
        g = ij.random_dag(3, 8, 2, 0.5, seed, bias=True)
        net = ij.DAGNetwork(g, key=jr.key(seed))
        theta = np.asarray(net.edge_weights()).copy()
        theta[rng.random(theta.size) < 0.35] = 0.0
        net = net.with_edge_weights(theta)
        X = jr.normal(jr.key(10 + seed), (64, 3))
        pruned, rep = ij.prune(net, 0.0, X=X)
        removed_cut = {v for v, r in rep.removed if r == "cut off"}
        assert removed_cut == set().union(*ij.singular_subnetworks(net)) if rep.groups else not removed_cut
        assert float(jnp.max(jnp.abs(pruned.forward(X) - net.forward(X)))) <= 1e-12
        checked += len(rep.removed)
    assert checked > 0


def test_magnitude_pruning_l2_trained_net_to_same_size_changes_outputs(deep):
    g, net, X = deep
    Y = jnp.sin(X[:, :2])
    res = ij.fit(
        net,
        X,
        Y,
        loss=ij.Objective("mse", regularizer="l2", strength=1e-3),
        options=ij.TrainOptions(optimizer="sgd", learning_rate=0.05, epochs=100, log_every=100),
    )
    trained = res.network
    assert int(res.log.n_cut_off[-1]) == 0
    n_keep = len(g.hidden) - 2
    pruned, rep = ij.magnitude_prune(trained, n_keep, X=X)
    assert len(pruned.graph.hidden) == n_keep
    assert rep.counts() == {"magnitude": 2}
    change = float(jnp.max(jnp.abs(pruned.forward(X) - trained.forward(X))))
    assert change > 1e-2 and rep.max_abs_change == pytest.approx(change)
    # the two removed neurons are the lowest ||w_in|| ||w_out||
    s = ij.neuron_scores(trained)
    low = {g.hidden[k] for k in np.argsort(s)[:2]}
    assert {v for v, _ in rep.removed} == low


def test_no_input_neuron_with_nonzero_sigma0_is_folded_exactly(deep):
    g, net, X = deep
    theta = np.array(net.edge_weights())
    for k, (_u, v) in enumerate(g.edges):
        if v == "h2_3":
            theta[k] = 0.0  # h2_3 emits softplus(0) = log 2, a constant
    for act in ("softplus", "relu"):
        n = ij.DAGNetwork(g, act, edge_weights=theta)
        pruned, rep = ij.prune(n, 0.0, X=X)
        assert dict(rep.removed) == {"h2_3": "no input"}
        assert len(rep.folded) == (2 if act == "softplus" else 0)  # two outputs get the constant
        assert float(jnp.max(jnp.abs(pruned.forward(X) - n.forward(X)))) <= 1e-12


def test_no_bias_graph_gets_a_constant_node_for_the_folded_constant():
    g = ij.mlp([2, 3, 1])
    theta = np.array(ij.DAGNetwork(g, key=jr.key(0)).edge_weights())
    for k, (_u, v) in enumerate(g.edges):
        if v == "h1_1":
            theta[k] = 0.0
    n = ij.DAGNetwork(g, "softplus", edge_weights=theta)
    X = jr.normal(jr.key(1), (20, 2))
    pruned, rep = ij.prune(n, 0.0, X=X)
    assert "_one" in pruned.graph.constants and pruned.graph.n_in == 2
    assert float(jnp.max(jnp.abs(pruned.forward(X) - n.forward(X)))) <= 1e-12


def test_neurons_that_never_fire_on_the_data(deep):
    g, net, X = deep
    theta = np.array(net.edge_weights())
    k = g.edges.index(("b", "h1_2"))
    theta[k] = -100.0  # h1_2 never fires on N(0, 1) data
    n = net.with_edge_weights(theta)
    same, rep0 = ij.prune(n, 0.0, X=X)
    assert rep0.n_removed == 0 and len(same.graph.hidden) == len(g.hidden)
    pruned, rep = ij.prune(n, 0.0, X=X, dead_on_data=True)
    Z = np.asarray(n.preactivations(X))
    dead = {v for k, v in enumerate(g.hidden) if np.all(Z[:, k] <= 0)}  # brute force
    assert "h1_2" in dead
    assert dict(rep.removed) == {v: "never fires" for v in dead}
    assert rep.max_abs_change == 0.0
    assert "never fires" in rep.summary()


def test_tolerance_removes_near_zero_outputs_and_reports_the_change(deep):
    g, net, X = deep
    theta = np.array(net.edge_weights())
    outs = [k for k, (u, v) in enumerate(g.edges) if u == "h1_4"]
    theta[outs] = 0.0
    theta[outs[0]] = 1e-9  # h1_4 still reaches an output, through a tiny weight
    n = net.with_edge_weights(theta)
    _, rep0 = ij.prune(n, 0.0, X=X)
    assert rep0.n_removed == 0 and rep0.max_abs_change == 0.0
    pruned, rep = ij.prune(n, 1e-8, X=X)
    assert dict(rep.removed) == {"h1_4": "no output"}
    # the pruned net computes exactly the net with the tiny weight set to zero
    theta[outs[0]] = 0.0
    ref = net.with_edge_weights(theta).forward(X)
    assert float(jnp.max(jnp.abs(pruned.forward(X) - ref))) <= 1e-12
    assert 1e-12 < rep.max_abs_change < 1e-7  # and the report shows the small change


def test_bad_pruning_input(deep):
    g, net, X = deep
    _, mrep = ij.magnitude_prune(net, 3)
    assert ij.result_name(mrep.result) == "successful" and mrep.success
    with pytest.raises(TypeError, match="n_keep must be an integer >= 0; got 2.5"):
        ij.magnitude_prune(net, 2.5)
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0.*got -0.1"):
        ij.prune(net, -0.1)
    with pytest.raises(ValueError, match="n_keep must be an integer in \\[0, 11\\]"):
        ij.magnitude_prune(net, 12)
    with pytest.raises(ValueError, match="dead_on_data=True needs the data X"):
        ij.prune(net, 0.0, dead_on_data=True)
    with pytest.raises(ValueError, match="Unknown score"):
        ij.neuron_scores(net, "l0")
    nets = jax.tree.map(lambda a: jnp.stack([a, a]), net)
    with pytest.raises(ValueError, match="Pruning takes one network"):
        ij.prune(nets, 0.0)


# ------------------------------------------------------------------ data


def test_breast_cancer_split_is_stratified_and_standardised():
    from sklearn.datasets import load_breast_cancer

    d = ij.breast_cancer()
    raw = load_breast_cancer()
    assert d.X_train.shape == (426, 30) and d.X_test.shape == (143, 30)
    assert abs(d.Y_train.mean() - raw.target.mean()) < 0.01 and abs(d.Y_test.mean() - raw.target.mean()) < 0.01
    np.testing.assert_allclose(d.X_train.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(d.X_train.std(0), 1, atol=1e-12)
    again = ij.breast_cancer()
    np.testing.assert_array_equal(d.X_test, again.X_test)  # fixed split
    # the standardisation is the train-set one, applied to both parts
    Xr = (raw.data - d.mean) / d.std
    assert any(np.allclose(Xr[i], d.X_test[0]) for i in range(len(Xr)))


def test_csv_loader_reads_and_names_bad_cells(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    p = tmp_path / "ok.csv"
    lines = ["a,b,label,c"] + [f"{r[0]},{r[1]},{t},{r[2]}" for r, t in zip(X, y)]
    p.write_text("\n".join(lines))
    d = ij.load_csv(p, target="label")
    assert d.feature_names == ("a", "b", "c") and d.X_train.shape[1] == 3
    assert d.X_train.shape[0] + d.X_test.shape[0] == 40
    bad = list(lines)
    bad[7] = bad[7].replace(bad[7].split(",")[1], "oops", 1)
    (tmp_path / "text.csv").write_text("\n".join(bad))
    with pytest.raises(ValueError, match=r"column 'b', row 8: 'oops' is not a number"):
        ij.load_csv(tmp_path / "text.csv", target="label")
    nan = list(lines)
    nan[12] = ",".join(nan[12].split(",")[:3] + ["nan"])
    (tmp_path / "nan.csv").write_text("\n".join(nan))
    with pytest.raises(ValueError, match=r"column 'c', row 13 is 'nan' \(not finite\)"):
        ij.load_csv(tmp_path / "nan.csv", target="label")
    empty = list(lines)
    empty[3] = ",".join(empty[3].split(",")[:3] + [""])
    (tmp_path / "empty.csv").write_text("\n".join(empty))
    with pytest.raises(ValueError, match=r"column 'c', row 4: '' is not a number"):
        ij.load_csv(tmp_path / "empty.csv", target="label")
    with pytest.raises(ValueError, match="no column named 'target'"):
        ij.load_csv(p, target="target")


# ------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def deep_csv(tmp_path_factory):
    """One data set and one training configuration (a 3-5-4-1 MLP, the nuclear norm, 150
    epochs) for both CLI runs below, so the second reuses the first's compiled training loop."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3))
    y = (X[:, 0] - X[:, 2] > 0).astype(int)
    p = tmp_path_factory.mktemp("prune-csv") / "d.csv"
    p.write_text("\n".join(["f0,f1,f2,y"] + [",".join(map(str, r)) + f",{t}" for r, t in zip(X, y)]))
    return p


def _prune_cli(data, out, *extra):
    return main(
        [
            "prune",
            "--data",
            str(data),
            "--hidden",
            "5,4",
            "--epochs",
            "150",
            "--regularizer",
            "nuclear",
            "--strength",
            "0.05",
            *extra,
            "--json",
            str(out),
        ]
    )


def test_cli_prune_on_csv(deep_csv, tmp_path, capsys):
    """A CSV in, the report out: lossless pruning of the cut-off neurons and the magnitude
    baseline (the unregularized net from the same seed, magnitude-pruned to the same size)."""
    out = tmp_path / "r.json"
    rc = _prune_cli(deep_csv, out)
    assert rc == 0, capsys.readouterr().err
    rep = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert "max |f_pruned - f|" in text
    assert rep["hidden_before"] == 9 and rep["hidden_after"] < 9
    assert rep["max_abs_change_test"] <= 1e-12
    assert rep["test_accuracy_pruned"] == rep["test_accuracy"]
    assert 0 <= rep["baseline_test_accuracy_magnitude_pruned"] <= 1
    assert "baseline (none, same seed)" in text


def test_cli_prune_nuclear_deep_mlp(deep_csv, tmp_path, capsys):
    """The nuclear norm's proximal step on two hidden layers (the working-set step) is run,
    not refused, and pruning its cut-off neurons leaves the function unchanged; with
    `--baseline off` no baseline is trained or reported."""
    out = tmp_path / "r.json"
    rc = _prune_cli(deep_csv, out, "--baseline", "off")
    assert rc == 0, capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert rep["proximal"] and rep["widths"] == [3, 5, 4, 1]
    assert rep["hidden_before"] == 9 and rep["hidden_after"] < 9
    assert rep["max_abs_change_test"] <= 1e-12
    assert rep["baseline"] == "off" and rep["baseline_test_accuracy"] is None
    assert "baseline (" not in capsys.readouterr().out


def test_cli_prune_bad_input(capsys):
    assert main(["prune", "--regularizer", "l3"]) == 2
    assert "Unknown regularizer 'l3'" in capsys.readouterr().err
    assert main(["prune", "--tol", "-1"]) == 2
    assert "--tol must be a finite number in [0, inf)" in capsys.readouterr().err
    assert main(["prune", "--optimizer", "rmsprop", "--epochs", "20"]) == 2
    assert "Unknown optimizer 'rmsprop'" in capsys.readouterr().err
    assert main(["prune", "--strength", "-1", "--epochs", "20"]) == 2
    assert "--strength must be a finite number in [0, inf)" in capsys.readouterr().err
