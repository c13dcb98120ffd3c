"""Connectivity of H_G(c): combinatorial verdict (bottlenecks + min-cut closures) against
an exact LP (HiGHS), closed forms, the batched path, and bad input."""

import itertools
import time

import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax.network import init_edge_weights
from invariant_jax.topology import connectivity, frozen_mask, lp_min_q


def _c_from_theta(g, theta):
    return (np.asarray(theta, dtype=np.float64) ** 2) @ g.incidence().T


def _init_np(g, init, rng):
    """The initializers of `ij.init_edge_weights` in NumPy (no JAX compile per graph)."""
    rows, cols = g.edge_index
    if init == "glorot":
        std = np.sqrt(2.0 / (g.in_degree[cols] + g.out_degree[rows]))
    elif init == "kaiming":
        std = np.sqrt(2.0 / g.in_degree[cols])
    else:
        std = np.ones(len(g.edges))
    return rng.normal(size=len(g.edges)) * std


def test_init_np_matches_library():
    g = ij.example_dag()
    for init in ("glorot", "kaiming", "normal"):
        th = np.asarray(init_edge_weights(g, jr.key(0), init))
        z = np.asarray(init_edge_weights(g, jr.key(0), "normal"))
        ratio = th / z
        np.testing.assert_allclose(
            ratio,
            _init_np(g, init, np.random.default_rng(0)) / _init_np(g, "normal", np.random.default_rng(0)),
            rtol=1e-12,
        )


def _adversarial_c(g, rng):
    """Random c with bottleneck values skewed towards violating their balance condition."""
    c = rng.normal(size=len(g.hidden))
    for v in g.out_bottlenecks:
        if rng.random() < 0.6:
            c[g.hidden.index(v)] = -abs(c[g.hidden.index(v)]) * rng.uniform(1, 6)
    for v in g.in_bottlenecks:
        if rng.random() < 0.6:
            c[g.hidden.index(v)] = abs(c[g.hidden.index(v)]) * rng.uniform(1, 6)
    return c


def _brute_margin(g, c):
    """min q_e forced by closed sets, by enumerating every subset of hidden nodes
    (tiny graphs only): out-type S (only e leaves S) and in-type S (only e enters S)."""
    H = list(g.hidden)
    E = len(g.edges)
    m = np.zeros(E)
    for r in range(1, len(H) + 1):
        for S in itertools.combinations(H, r):
            S = set(S)
            leaving = [k for k, (u, v) in enumerate(g.edges) if u in S and v not in S]
            entering = [k for k, (u, v) in enumerate(g.edges) if v in S and u not in S]
            s = sum(c[H.index(v)] for v in S)
            if len(leaving) == 1:  # q_e = inflow - sum_S c >= -sum_S c
                m[leaving[0]] = max(m[leaving[0]], -s)
            if len(entering) == 1:  # q_e = sum_S c + outflow >= sum_S c
                m[entering[0]] = max(m[entering[0]], s)
    return m


def _reference_lp(problems):
    """Independent reference: min q_e over {q >= 0 : B~ q = c} for many (g, c, e) at once,
    as one block-diagonal HiGHS LP (blocks are independent, so each block is optimal)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    blocks, obj, rhs, scales, offs = [], [], [], [], []
    off = 0
    for g, c, k in problems:
        s = max(np.abs(c).max(), 1e-300)
        B = g.incidence()
        blocks.append(sp.csr_matrix(B))
        o = np.zeros(B.shape[1])
        o[k] = 1.0
        obj.append(o)
        rhs.append(c / s)
        scales.append(s)
        offs.append(off + k)
        off += B.shape[1]
    res = linprog(
        np.concatenate(obj),
        A_eq=sp.block_diag(blocks, format="csr"),
        b_eq=np.concatenate(rhs),
        bounds=(0, None),
        method="highs",
    )
    assert res.status == 0
    return res.x[np.array(offs)] * np.array(scales)


# 600 DAGs in the default run; the full 2000 (the same stream, extended) are slow
@pytest.mark.parametrize("n", [600, pytest.param(2000, marks=pytest.mark.slow)])
def test_agreement_on_random_dags(n):
    """Combinatorial verdict (min cuts) == exact LP verdict, and the combinatorial margin
    (min theta_e^2) equals the LP optimum, on `n` random DAGs with c from
    initializations, adversarially skewed c, and integer c (boundary values)."""
    rng = np.random.default_rng(2024)
    t = time.perf_counter()
    n_dis = n_boundary = 0
    batch = []

    def flush():
        lp = _reference_lp([(g, c, k) for g, c, k, _ in batch])
        for (g, c, k, r), q in zip(batch, lp):
            frozen_lp = q > r.tol
            assert frozen_lp == (k in r.frozen_index), (g.edges, c, k, q, r.margin[k])
            assert abs(q - r.margin[k]) <= 1e-8 * max(1.0, np.abs(c).max())
        batch.clear()

    for i in range(n):
        g = ij.random_dag(
            int(rng.integers(1, 4)),
            int(rng.integers(1, 6)),
            int(rng.integers(1, 3)),
            float(rng.uniform(0.15, 0.7)),
            int(rng.integers(2**31)),
            bias=bool(rng.random() < 0.2),
        )
        kind = i % 3
        if kind == 0:  # from an initialization
            c = _c_from_theta(g, _init_np(g, ("glorot", "kaiming", "normal")[i % 9 // 3], rng))
        elif kind == 1:
            c = _adversarial_c(g, rng)
        else:  # integers in {-2..2}: many sums exactly 0 (boundary values)
            c = rng.integers(-2, 3, size=len(g.hidden)).astype(float)
        r = connectivity(g, c, lp="candidates" if i < 150 else "none")
        if i < 150:
            assert r.lp_agrees and r.success
        for k in sorted({cd.edge_index for cd in r.conditions}):
            batch.append((g, c, k, r))
        if len(batch) > 300:
            flush()
        n_dis += not r.connected
        n_boundary += any(cd.total == 0 for cd in r.conditions)
        assert r.n_components == 2 ** len(r.frozen_edges)
    flush()
    elapsed = time.perf_counter() - t
    # the sample exercises both verdicts and the boundary
    # (bounds scaled from 2000 DAGs: 300 < n_dis < 1900, n_boundary > 100)
    assert 0.15 * n < n_dis < 0.95 * n and n_boundary > 0.05 * n, (n_dis, n_boundary)
    print(f"{n} DAGs: {n_dis} disconnected, {n_boundary} with a boundary sum, {elapsed:.1f}s")


def test_lp_all_edges_and_brute_force_small():
    """On tiny graphs: no non-bottleneck edge is ever frozen (LP on every edge), and the
    min-cut closure equals the brute-force enumeration of all subsets."""
    rng = np.random.default_rng(7)
    for i in range(150):
        g = ij.random_dag(
            int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 3)), float(rng.uniform(0.2, 0.6)), i
        )
        c = _adversarial_c(g, rng) if i % 2 else rng.integers(-2, 3, size=len(g.hidden)).astype(float)
        r = connectivity(g, c, lp="all")
        assert r.lp_agrees
        np.testing.assert_allclose(r.lp_min_q, r.margin, atol=1e-9 * max(1, np.abs(c).max()))
        np.testing.assert_allclose(r.margin, _brute_margin(g, c), atol=1e-12)


@pytest.mark.parametrize("ch,n", [(0.7, 2), (-0.3, 2), (0.0, 1)])
def test_path_graph(ch, n):
    g = ij.DAG.from_edges([("x", "h"), ("h", "y")], inputs=["x"], outputs=["y"])
    r = connectivity(g, [ch])
    assert r.n_components == n and r.connected == (ch == 0)
    if ch > 0:  # in-edge frozen: h must absorb c_h through x->h alone
        assert r.frozen_edges == (("x", "h"),) and r.reasons[0].side == "in"
        assert r.margin[0] == pytest.approx(ch)
    if ch < 0:
        assert r.frozen_edges == (("h", "y"),) and r.reasons[0].side == "out"
        assert r.reasons[0].total == pytest.approx(ch) and r.reasons[0].subset == {"h"}
    # exact boundary from weights: theta = (a, a) gives c_h = 0 exactly -> connected
    net = ij.DAGNetwork(g, edge_weights=[1.3, 1.3])
    assert connectivity(net).connected


@pytest.mark.parametrize("d_in,width", [(2, 4), (3, 6)])
def test_shallow_single_output(d_in, width):
    g = ij.mlp([d_in, width, 1])
    rng = np.random.default_rng(d_in)
    for _ in range(20):
        c = rng.normal(size=width)
        r = connectivity(g, c)
        assert r.n_components == 2 ** int(np.sum(c < 0))
        frozen_nodes = {e[0] for e in r.frozen_edges}
        assert frozen_nodes == {v for v, cv in zip(g.hidden, c) if cv < 0}
        assert r.lp_agrees


def test_no_bottleneck_always_connected():
    # every hidden node has >= 2 in- and >= 2 out-edges
    g = ij.mlp([2, 3, 2])
    assert not g.in_bottlenecks and not g.out_bottlenecks
    rng = np.random.default_rng(0)
    for _ in range(50):
        c = rng.normal(size=len(g.hidden)) * rng.uniform(0.1, 100)
        r = connectivity(g, c, lp="all")
        assert r.connected and not r.conditions
        assert np.all(r.lp_min_q <= r.tol)  # LP: every edge can reach 0


@pytest.mark.parametrize("widths", [[2, 2, 2], [3, 2, 4, 2], [2, 3, 3, 2], [4, 2, 2, 3]])
def test_mlp_widths_ge_2_connected(widths):
    g = ij.mlp(widths)
    cs = np.random.default_rng(1).normal(size=(500, len(g.hidden))) * 10
    assert not frozen_mask(g, cs).any()
    for c in cs[:10]:
        r = connectivity(g, c)
        assert r.connected and r.lp_agrees


def test_single_input_or_output_makes_bottlenecks():
    g = ij.mlp([1, 3, 3, 1])
    assert set(g.in_bottlenecks) == {f"h1_{j}" for j in range(3)}
    assert set(g.out_bottlenecks) == {f"h2_{j}" for j in range(3)}
    c = np.array([1.0, -1, -1, 1, -1, 1])  # h1_0 absorbs > 0 -> frozen; h2_1 supplies -> frozen
    r = connectivity(g, c)
    assert set(r.frozen_edges) == {("x0", "h1_0"), ("h2_1", "y0")}


def test_mlp_2331_vs_2332_frequency():
    """c ~ N(0, I) (independent symmetric c_v): 2-3-3-1 is disconnected with probability
    1 - 2^-3 = 87.5% (the issue quotes 91% for its own c law), 2-3-3-2 never."""
    rng = np.random.default_rng(3)
    g1, g2 = ij.mlp([2, 3, 3, 1]), ij.mlp([2, 3, 3, 2])
    cs = rng.normal(size=(20000, 6))
    f1 = frozen_mask(g1, cs).any(1).mean()
    f2 = frozen_mask(g2, cs).any(1).mean()
    assert abs(f1 - 0.875) < 0.015 and f2 == 0.0
    # the LP verdict on a subsample agrees
    lp1 = [np.any(lp_min_q(g1, c) > 1e-10) for c in cs[:150]]
    assert np.mean(lp1) == pytest.approx(frozen_mask(g1, cs[:150]).any(1).mean())
    assert not any(np.any(lp_min_q(g2, c) > 1e-10) for c in cs[:50])


def test_frozen_mask_matches_connectivity():
    rng = np.random.default_rng(11)
    for i in range(40):
        g = ij.random_dag(2, int(rng.integers(2, 8)), int(rng.integers(1, 3)), 0.3, 100 + i)
        cs = np.stack([_adversarial_c(g, rng) for _ in range(6)])
        ref = np.zeros((6, len(g.edges)), bool)
        for j, c in enumerate(cs):
            ref[j, list(connectivity(g, c, lp="none").frozen_index)] = True
        assert np.array_equal(frozen_mask(g, cs), ref)
        assert np.array_equal(frozen_mask(g, cs, max_sets=0), ref)  # min-cut path


def test_pure_ancestors_sum():
    """example_dag: k's pure ancestors are a0, a1 (they feed only k); the condition on
    k -> y0 sums c over closed subsets of {k, a0, a1}."""
    g = ij.example_dag()
    c = {"a0": -0.1, "a1": -0.1, "a2": 1.0, "a3": 1.0, "k": 0.3}  # closed sums .3, .2, .2, .1
    r = connectivity(g, c)
    cd = [cd for cd in r.conditions if cd.bottleneck == "k"][0]
    assert cd.region == {"k", "a0", "a1"} and not cd.violated
    c["a1"] = -0.25  # {k, a0, a1} sums to -0.05 < 0 (the only violating closed set)
    r = connectivity(g, c)
    cd = [cd for cd in r.reasons if cd.bottleneck == "k"][0]
    assert cd.subset == {"k", "a0", "a1"} and cd.total == pytest.approx(-0.05)
    assert set(r.frozen_edges) == {("a0", "k"), ("a1", "k"), ("k", "y0")} and r.lp_agrees
    assert "violating sum_S c >= 0" in r.explain()


def test_boundary_within_tol_not_frozen_and_singular():
    g = ij.DAG.from_edges([("x", "h"), ("h", "y")], inputs=["x"], outputs=["y"])
    r = connectivity(g, [-1e-13], tol=1e-12)
    assert r.connected and r.lp_agrees
    r = connectivity(g, [-1e-11], tol=1e-12)
    assert not r.connected
    # a boundary value contains a singular point
    assert ij.is_singular_value(g, [0.0]) and not ij.is_singular_value(g, [0.5])


def test_scalar_checks_have_the_one_wording():
    """tol (a number or one per network), rtol, max_step and n are checked by
    `_checks.check_positive` / `check_integer`, in their words."""
    g = ij.mlp([2, 3, 1])
    net = ij.DAGNetwork(g, "relu", edge_weights=np.linspace(0.5, 1.5, len(g.edges)))
    th = np.stack([np.asarray(net.edge_weights())] * 2)
    with pytest.raises(ValueError, match="tol must be a positive finite number; got 0.0"):
        ij.component_of(g, th, tol=np.array([1e-9, 0.0]))
    with pytest.raises(ValueError, match="tol must be a positive finite number; got nan"):
        ij.component_of(g, th, tol=np.array([1e-9, np.nan]))
    with pytest.raises(ValueError, match="tol must be a positive finite number; got inf"):
        frozen_mask(g, _c_from_theta(g, th), tol=np.array([1e-9, np.inf]))
    with pytest.raises(TypeError, match="tol must be a real number; got True"):
        ij.component_of(net, tol=True)
    assert ij.component_of(g, th, tol=np.array([1e-9, 1e-8])).frozen.shape == th.shape
    with pytest.raises(ValueError, match="rtol must be a positive finite number; got 0.0"):
        ij.same_component(net, net, rtol=0.0)
    with pytest.raises(ValueError, match="max_step must be a positive finite number; got -1.0"):
        ij.invariant_path(net, net, max_step=-1.0)
    with pytest.raises(TypeError, match="n must be a positive integer; got 2.5"):
        ij.sample_invariant_set(g, _c_from_theta(g, th[0]), n=2.5)


def test_bad_input():
    g = ij.mlp([2, 3, 1])
    with pytest.raises(ValueError, match=r"c has shape \(2,\); expected \(3,\)"):
        connectivity(g, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"c\[1\] \(hidden node 'h1_1'\) is nan"):
        connectivity(g, [1.0, np.nan, 0.0])
    with pytest.raises(ValueError, match="is inf"):
        connectivity(g, [1.0, 0.0, np.inf])
    with pytest.raises(ValueError, match=r"differ from graph.hidden: missing \['h1_2'\], unknown \['h9'\]"):
        connectivity(g, {"h1_0": 1.0, "h1_1": 1.0, "h9": 1.0})
    with pytest.raises(ValueError, match="tol must be a positive finite number; got 0"):
        connectivity(g, [1.0, 2.0, 3.0], tol=0)
    with pytest.raises(ValueError, match="tol must be a positive finite number; got -1"):
        connectivity(g, [1.0, 2.0, 3.0], tol=-1e-9)
    with pytest.raises(ValueError, match="lp must be one of"):
        connectivity(g, [1.0, 2.0, 3.0], lp="yes")
    with pytest.raises(TypeError, match="give the conserved values c"):
        connectivity(g)
    with pytest.raises(ValueError, match=r"cs has shape \(4, 2\); expected \(N, 3\)"):
        frozen_mask(g, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="tol must be a positive finite number; got 0.0"):
        frozen_mask(g, np.zeros((4, 3)), tol=0.0)
    # a labelled c from a different graph is rejected by label
    other = ij.mlp([2, 4, 1])
    c_other = dict(zip(other.hidden, np.ones(4)))
    with pytest.raises(ValueError, match="unknown \\['h1_3'\\]"):
        connectivity(g, c_other)


def test_labelled_c_equals_array():
    g = ij.example_dag()
    c = np.random.default_rng(0).normal(size=len(g.hidden))
    a = connectivity(g, c)
    b = connectivity(g, dict(zip(reversed(g.hidden), c[::-1])))
    assert a.frozen_edges == b.frozen_edges and np.array_equal(a.c, b.c)


def test_cli_connectivity(tmp_path, capsys):
    from invariant_jax.cli import main

    f = tmp_path / "c.txt"
    f.write_text("a0 0.2\na1 0.3\na2 1\na3 1\nk -0.6  # k supplies 0.6 through k -> y0 alone\n")
    assert main(["connectivity", "--c", str(f), "--lp", "all"]) == 0
    out = capsys.readouterr().out
    assert "2 connected components" in out and "S = {k} has sum_S c = -0.6 < 0" in out
    assert "pure ancestors: a0, a1" in out and "agrees" in out
    f.write_text('{"h1_0": 1.0, "h1_1": -1.0, "h1_2": 0.5}')
    assert main(["connectivity", "--graph", "mlp", "--widths", "2,3,1", "--c", str(f), "--singular"]) == 0
    out = capsys.readouterr().out
    assert "2 connected components" in out and "no singular point" in out
    assert main(["connectivity", "--graph", "mlp", "--widths", "2,3,2", "--seed", "3"]) == 0
    assert "connected (1 component)" in capsys.readouterr().out
    f.write_text("[1.0, 2.0]")
    assert main(["connectivity", "--c", str(f)]) == 2
    assert "expected (5,)" in capsys.readouterr().err


def test_boundary_bottleneck_gives_singular_point():
    """A bottleneck condition met with equality (a closed S with sum_S c = 0, edge not
    frozen) means H_G(c) contains a singular point (S is cut off where theta_e = 0)."""
    rng = np.random.default_rng(5)
    n = 0
    for i in range(60):
        g = ij.random_dag(2, int(rng.integers(2, 6)), 1, 0.4, 500 + i)
        if not g.out_bottlenecks and not g.in_bottlenecks:
            continue
        c = np.abs(rng.integers(1, 4, size=len(g.hidden))).astype(float)
        v = (g.out_bottlenecks + g.in_bottlenecks)[0]
        c[g.hidden.index(v)] = 0.0  # S = {v} sits exactly on the boundary
        r = connectivity(g, c)
        k = [cd for cd in r.conditions if cd.bottleneck == v][0]
        if k.edge_index not in r.frozen_index:  # (the other side may still freeze it)
            assert ij.is_singular_value(g, c)
            n += 1
    assert n >= 10
