import networkx as nx
import numpy as np
import pytest

import invariant_jax as ij


def small():
    # x0, x1 -> h -> y ; x1 -> k -> y ; h -> k
    return ij.DAG.from_edges(
        [("x0", "h"), ("x1", "h"), ("h", "k"), ("x1", "k"), ("h", "y"), ("k", "y")],
        inputs=["x0", "x1"],
        outputs=["y"],
    )


def test_canonical_orders_and_mask():
    g = small()
    assert g.nodes == ("x0", "x1", "h", "k", "y")
    assert g.hidden == ("h", "k")
    assert g.levels == (("h",), ("k",))
    assert g.edges == (("x0", "h"), ("x1", "h"), ("x1", "k"), ("h", "k"), ("h", "y"), ("k", "y"))
    for u, v in g.edges:
        assert g.mask[g.index[u], g.index[v]]
    assert g.mask.sum() == len(g.edges)


def test_incidence_hand_computed():
    g = small()
    #            x0h x1h x1k hk  hy  ky
    expected = [
        [1, 1, 0, -1, -1, 0],  # h
        [0, 0, 1, 1, 0, -1],
    ]  # k
    np.testing.assert_array_equal(g.incidence(), expected)


def test_bottlenecks_and_ancestry():
    g = ij.DAG.from_edges([("x", "a"), ("a", "b"), ("x", "b"), ("b", "y")], inputs=["x"], outputs=["y"])
    assert g.in_bottlenecks == ("a",)
    assert g.out_bottlenecks == ("a", "b")
    assert g.ancestors("b") == {"x", "a"}
    assert g.descendants("a") == {"b", "y"}


@pytest.mark.parametrize("seed", range(5))
def test_random_dag_structure_matches_networkx(seed):
    g = ij.random_dag(3, 12, 2, 0.3, seed, bias=seed % 2 == 0)
    gx = g.to_networkx()
    assert nx.is_directed_acyclic_graph(gx)
    for v in g.hidden:  # every hidden node is on an input-to-output path
        assert set(g.inputs) & nx.ancestors(gx, v)
        assert set(g.outputs) & nx.descendants(gx, v)
        assert g.ancestors(v) == nx.ancestors(gx, v)
        assert g.descendants(v) == nx.descendants(gx, v)
    order = {v: i for i, v in enumerate(g.nodes)}
    assert all(order[u] < order[v] for u, v in g.edges)  # topological
    # canonical: determinism and round trip
    assert g == ij.random_dag(3, 12, 2, 0.3, seed, bias=seed % 2 == 0)
    g2 = ij.from_networkx(gx)
    assert g2 == g and hash(g2) == hash(g)


def test_mlp_builder_with_bias():
    g = ij.mlp([3, 4, 2], bias=True)
    assert g.constants == ("b",) and g.n_in == 3 and g.n_out == 2
    assert len(g.edges) == 3 * 4 + 4 * 2 + 4 + 2
    assert g.in_bottlenecks == () and g.out_bottlenecks == ()
    assert ij.mlp([2, 3, 1]).out_bottlenecks == ("h1_0", "h1_1", "h1_2")


def test_random_dag_accepts_jax_key():
    import jax

    g1 = ij.random_dag(2, 5, 1, 0.5, jax.random.key(3))
    g2 = ij.random_dag(2, 5, 1, 0.5, jax.random.key(3))
    assert g1 == g2


@pytest.mark.parametrize(
    "edges, kwargs, match",
    [
        ([("x", "a"), ("a", "b"), ("b", "a"), ("b", "y")], {}, r"cycle: '(a|b)' -> '(a|b)' -> '(a|b)'"),
        ([("x", "a"), ("a", "a"), ("a", "y")], {}, "Self-loop on node 'a'"),
        ([("x", "a"), ("x", "a"), ("a", "y")], {}, r"Duplicate edge \('x', 'a'\)"),
        ([("x", "a"), ("a", "zz"), ("a", "y")], {"hidden": ["a"]}, "unknown node 'zz'"),
        ([("x", "a"), ("a", "x"), ("a", "y")], {}, "Input node 'x' has an incoming edge"),
        ([("x", "a"), ("a", "y"), ("y", "b")], {}, "Output node 'y' has an outgoing edge"),
        ([("x", "a"), ("a", "y"), ("c", "y")], {}, "Hidden node 'c' cannot be reached from any input"),
        ([("x", "a"), ("a", "y"), ("x", "d")], {}, "Hidden node 'd' cannot reach any output"),
    ],
)
def test_bad_graphs_name_the_culprit(edges, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ij.DAG.from_edges(edges, inputs=["x"], outputs=["y"], **kwargs)


def test_bad_builder_arguments():
    with pytest.raises(ValueError, match="positive integer"):
        ij.mlp([3, 0, 1])
    with pytest.raises(ValueError, match="edge_prob"):
        ij.random_dag(2, 3, 1, 1.5, 0)
    with pytest.raises(TypeError, match="from_edges"):
        ij.DAG()


def test_unused_inputs_are_features_unused_outputs_are_errors(tmp_path):
    """An input that feeds nothing is a feature the network ignores (random_dag and
    magnitude pruning make them), and survives a file round trip; an output that nothing
    feeds is refused, naming it."""
    g = ij.DAG.from_edges([("x", "a"), ("a", "y")], inputs=["x", "z"], outputs=["y"])
    assert g.inputs == ("x", "z") or list(g.inputs) == ["x", "z"]
    assert ij.DAG.from_file(g.to_file(tmp_path / "g.txt")).edges == g.edges
    with pytest.raises(ValueError, match=r"Output node\(s\) \['w'\] appear in no edge"):
        ij.DAG.from_edges([("x", "a"), ("a", "y")], inputs=["x"], outputs=["y", "w"])
