"""Components of points, paths inside H_G(c) and reachability of a target, against
independent references: brute force over sign orthants with SciPy's LP on the toy graph,
the identity B~ theta^2 = c along paths, linprog for points of P(c), a hand-solved
rescaling, and forward passes (the function of a rescaled / permuted target)."""

import itertools

import jax
import jax.random as jr
import numpy as np
import pytest
from scipy.optimize import linprog

import invariant_jax as ij


def _toy():
    return ij.DAG.from_edges([("x0", "k"), ("x1", "k"), ("k", "y"), ("x0", "y")], inputs=["x0", "x1"], outputs=["y"])


def _net(g, d, act="relu"):
    return ij.DAGNetwork(g, act, edge_weights=np.array([d[e] for e in g.edges], dtype=np.float64))


def _toy_net(g, a, b, d, s, act="relu"):
    return _net(g, {("x0", "k"): a, ("x1", "k"): b, ("k", "y"): d, ("x0", "y"): s}, act)


def _forward(net, X):
    """The network's function in NumPy, node by node (independent of the library's pass)."""
    g = net.graph
    th = np.asarray(net.edge_weights())
    a = {v: X[:, i] for i, v in enumerate(g.data_inputs)}
    a.update({v: np.ones(len(X)) for v in g.inputs if v not in a})
    for v in g.nodes:
        if v in a:
            continue
        z = sum(th[k] * a[g.edges[k][0]] for k in g.in_edges(v))
        a[v] = z if v in g.outputs else np.maximum(z, 0.0)
    return np.stack([a[v] for v in g.outputs], axis=1)


def _min_q(B, c, k):
    """min q_e over P(c) by linprog, independent of the library."""
    obj = np.zeros(B.shape[1])
    obj[k] = 1.0
    res = linprog(obj, A_eq=B, b_eq=c, bounds=(0, None), method="highs")
    assert res.status == 0
    return res.fun


def _orthant_components(B, c, E):
    """Brute force: the orthants of theta-space, joined across edge e iff some q in P(c)
    has q_e = 0 (each orthant's piece of H_G(c) is a copy of the convex P(c))."""
    free = [_min_q(B, c, k) <= 1e-9 * np.abs(c).sum() for k in range(E)]
    signs = list(itertools.product([1, -1], repeat=E))
    parent = {s: s for s in signs}

    def find(s):
        while parent[s] != s:
            s = parent[s]
        return s

    for s in signs:
        for k in range(E):
            if free[k]:
                t = list(s)
                t[k] = -t[k]
                parent[find(s)] = find(tuple(t))
    return {s: find(s) for s in signs}


@pytest.mark.parametrize("seed", range(6))
def test_component_of_toy_matches_orthant_brute_force(seed):
    g = _toy()
    rng = np.random.default_rng(seed)
    mag = np.abs(rng.normal(size=4)) + 0.1
    if seed % 2:  # make k's out-weight dominate: frozen
        mag[g.edges.index(("k", "y"))] = 2.0 * np.linalg.norm(
            mag[[g.edges.index(("x0", "k")), g.edges.index(("x1", "k"))]]
        )
    B = g.incidence().astype(float)
    c = B @ mag**2
    comp = _orthant_components(B, c, 4)
    signs = np.array(list(itertools.product([1, -1], repeat=4)), dtype=float)
    nets = ij.DAGNetwork(g, "relu", edge_weights=np.array([1.0, 1, 1, 1])).with_edge_weights(signs * mag)
    labels = ij.component_of(nets).labels
    for i, j in itertools.combinations(range(16), 2):
        same_bf = comp[tuple(signs[i].astype(int))] == comp[tuple(signs[j].astype(int))]
        assert (labels[i] == labels[j]) == same_bf
    n_bf = len(set(comp.values()))
    assert len(set(labels)) == n_bf
    assert np.all(ij.component_of(nets).n_components == n_bf)


def test_component_of_batch_matches_connectivity():
    g = ij.example_dag()
    nets = ij.DAGNetwork(g, "relu", key=jr.key(0)).with_edge_weights(
        np.asarray(jax.vmap(lambda k: ij.init_edge_weights(g, k, "glorot"))(jr.split(jr.key(1), 12))) * 1.0
    )
    th = np.array(nets.edge_weights())
    th[::3, g.edges.index(("k", "y0"))] *= 4.0  # some rows with k -> y0 frozen
    th[1::4, g.edges.index(("a0", "k"))] *= 5.0  # some with a0 -> k frozen
    nets = nets.with_edge_weights(th)
    comp = ij.component_of(nets)
    assert comp.shape == (12,)
    assert 0 < comp.frozen.any(1).sum() < 12
    for i in range(12):
        one = ij.connectivity(nets.with_edge_weights(th[i]), lp="all")
        assert set(np.flatnonzero(comp.frozen[i])) == set(one.frozen_index)
        assert comp[i].frozen_edges == one.frozen_edges
        assert comp[i].label == comp.labels[i]
        assert all(np.sign(th[i, g.edges.index(e)]) == s for e, s in comp[i].frozen_signs.items())
    # records: a DAG and theta give the same as the network batch
    np.testing.assert_array_equal(ij.component_of(g, th).signs, comp.signs)


def test_same_component_and_bad_input():
    g = _toy()
    a = _toy_net(g, 1.0, 0.5, 2.0, 0.3)  # c_k < 0: k -> y frozen
    assert ij.same_component(a, _toy_net(g, -1.0, 0.5, 2.0, -0.3))
    cmp = ij.same_component(a, _toy_net(g, 1.0, 0.5, -2.0, 0.3))
    assert not cmp and cmp.differing_edges == (("k", "y"),)
    with pytest.raises(ValueError, match="hidden node 'k'.*c_a = "):
        ij.same_component(a, _toy_net(g, 1.0, 0.5, 1.0, 0.3))
    with pytest.raises(ValueError, match="different graphs"):
        ij.same_component(a, ij.DAGNetwork(ij.example_dag(), "relu", key=jr.key(0)))
    with pytest.raises(TypeError, match="DAGNetwork"):
        ij.same_component(a, np.ones(4))
    with pytest.raises(ValueError, match="not finite"):
        ij.component_of(g, np.array([1.0, np.nan, 1.0, 1.0]))
    with pytest.raises(ValueError, match="expected"):
        ij.component_of(g, np.ones(5))
    with pytest.raises(ValueError, match="batch"):
        _ = ij.component_of(g, np.ones((2, 4))).label


def _check_path(g, p, tha, thb, c):
    B = g.incidence().astype(float)
    assert p.success and len(p) >= 2
    np.testing.assert_array_equal(p.thetas[0], tha)
    np.testing.assert_array_equal(p.thetas[-1], thb)
    scale = np.max(np.abs(B) @ tha**2)
    assert np.max(np.abs(p.thetas**2 @ B.T - c)) <= 1e-12 * scale  # on H_G(c) to 1e-12 relative
    prod = p.thetas[:-1] * p.thetas[1:]
    assert np.all(prod >= 0)  # a sign changes only through an exact zero
    for q in p.waypoints:  # every waypoint is a point of P(c)
        assert np.all(q >= 0) and np.max(np.abs(B @ q - c)) <= 1e-12 * scale


def test_invariant_path_toy_brute_force_and_certificate():
    g = _toy()
    B = g.incidence().astype(float)
    a = _toy_net(g, 2.0, 0.5, 1.0, 0.3)  # connected: every sign pattern reachable
    b = _toy_net(g, -0.5, -2.0, -1.0, -0.3)
    p = ij.invariant_path(a, b)
    _check_path(g, p, np.asarray(a.edge_weights()), np.asarray(b.edge_weights()), B @ np.asarray(a.edge_weights()) ** 2)
    assert p.max_step <= 1e-2 * np.linalg.norm(np.asarray(a.edge_weights())) + 1e-15
    for q, flipped in zip(p.waypoints, p.flips):  # linprog agrees: those edges can be 0
        for e in flipped:
            assert q[g.edges.index(e)] == 0.0
            assert _min_q(B, B @ np.asarray(a.edge_weights()) ** 2, g.edges.index(e)) <= 1e-12
    frozen = _toy_net(g, 1.0, 0.5, 2.0, 0.3)
    other = _toy_net(g, 1.0, 0.5, -2.0, -0.3)
    with pytest.raises(ValueError, match="different components.*k -> y.*out-bottleneck"):
        ij.invariant_path(frozen, other)
    r = ij.invariant_path(frozen, other, throw=False)
    assert r.result == ij.RESULTS.different_components and not r.success and len(r) == 0
    (cd,) = r.certificate
    assert cd.edge == ("k", "y") and cd.violated and cd.total == pytest.approx(1.25 - 4.0)


@pytest.mark.parametrize("seed", range(3))
def test_invariant_path_random_dags(seed):
    g = ij.random_dag(3, 8, 2, 0.4, key=jr.key(seed))
    a = ij.DAGNetwork(g, "relu", key=jr.key(100 + seed))
    tha = np.asarray(a.edge_weights())
    comp = ij.component_of(a)
    rng = np.random.default_rng(seed)
    # another point of the same H_G(c) and component: new signs off the frozen edges,
    # magnitudes from a point of P(c) found by linprog (a different q)
    B = g.incidence().astype(float)
    c = B @ tha**2
    res = linprog(rng.uniform(0.5, 1.5, len(g.edges)), A_eq=B, b_eq=c, bounds=(0, None), method="highs")
    qb = ij.topology._path.polish_onto(B, c, res.x)
    sb = np.where(comp.frozen, np.sign(tha), rng.choice([-1.0, 1.0], len(g.edges)))
    thb = sb * np.sqrt(qb)
    b = a.with_edge_weights(thb)
    p = ij.invariant_path(a, b, max_step=0.05)
    _check_path(g, p, tha, thb, c)
    assert p.max_step <= 0.05


def test_rescale_onto_hand_solved_toy():
    g = _toy()
    target = _toy_net(g, 1.0, 0.5, -1.0, 0.3)
    for c0 in (-0.51, 0.0, 0.7):
        th, lam, resid = ij.rescale_onto(g, np.asarray(target.edge_weights()), [c0])
        # lambda^2 (a^2 + b^2) - d^2 / lambda^2 = c0 with a^2 + b^2 = 1.25, d^2 = 1
        mu = (c0 + np.sqrt(c0**2 + 4 * 1.25 * 1.0)) / (2 * 1.25)
        assert lam[0] == pytest.approx(np.sqrt(mu), rel=1e-13)
        assert resid <= 1e-14
        assert th[g.edges.index(("x0", "y"))] == 0.3


def test_reachability_toy_rule():
    g = _toy()
    teacher = _toy_net(g, 1.0, 0.5, -1.0, 0.3)
    X = np.asarray(jr.normal(jr.key(0), (7, 2)))
    rng = np.random.default_rng(3)
    for _ in range(12):
        a, b, s = rng.normal(size=3)
        d = rng.normal() * 2
        init = _toy_net(g, a, b, d, s)
        ck = a**2 + b**2 - d**2
        r = ij.reachability(init, teacher)
        assert r.reachable == (ck >= 0 or d < 0)  # frozen and positive: unreachable
        assert r.residual <= 1e-13
        np.testing.assert_allclose(_forward(r.network(teacher), X), _forward(teacher, X), atol=1e-13)
        if not r.reachable:
            assert r.result == ij.RESULTS.unreachable and "k -> y" in r.reason


def test_reachability_twin_permutation_mlp():
    g = ij.mlp([2, 3, 1])
    out = [g.edges.index((f"h1_{j}", "y0")) for j in range(3)]
    ins = [k for k in range(len(g.edges)) if k not in out]
    th0 = np.full(len(g.edges), 0.1)
    th0[out] = [1.0, 1.0, -1.0]  # all three out-edges frozen: signs + + -
    init = ij.DAGNetwork(g, "relu", edge_weights=th0)
    rng = np.random.default_rng(0)
    tht = rng.normal(size=len(g.edges))
    tht[out] = [-0.7, 0.4, 0.9]  # the target offers - + +: a permutation is needed
    target = ij.DAGNetwork(g, "relu", edge_weights=tht)
    r = ij.reachability(init, target)
    assert r.reachable and r.permutation
    assert not ij.reachability(init, target, permute=False)
    X = np.asarray(jr.normal(jr.key(1), (9, 2)))
    np.testing.assert_allclose(_forward(r.network(target), X), _forward(target, X), atol=1e-12)
    c0 = np.asarray(ij.conserved_quantities(init))
    np.testing.assert_allclose(np.asarray(ij.conserved_quantities(r.network(target))), c0, atol=1e-13)
    assert ij.same_component(init, r.network(target))
    tht[out] = [-0.7, -0.4, 0.9]  # two negatives, one positive: no permutation fits
    r = ij.reachability(init, ij.DAGNetwork(g, "relu", edge_weights=tht))
    assert not r and "twin neurons" in r.reason and r.theta is None
    del ins


def test_reachability_deep_dag_and_bad_input():
    g = ij.random_dag(3, 12, 2, 0.4, key=jr.key(7))
    init = ij.DAGNetwork(g, "relu", key=jr.key(1))
    target = ij.DAGNetwork(g, "relu", key=jr.key(2), scale=2.0)
    r = ij.reachability(init, target, permute=False)
    X = np.asarray(jr.normal(jr.key(3), (6, 3)))
    assert r.residual <= 1e-12
    net = r.network(target)
    np.testing.assert_allclose(_forward(net, X), _forward(target, X), rtol=1e-11, atol=1e-12)
    assert r.reachable == bool(ij.same_component(init, net))
    with pytest.raises(ValueError, match="positively homogeneous"):
        ij.reachability(ij.DAGNetwork(g, "softplus", key=jr.key(1)), ij.DAGNetwork(g, "softplus", key=jr.key(2)))
    with pytest.raises(ValueError, match="different graphs"):
        ij.reachability(init, ij.DAGNetwork(ij.example_dag(), "relu", key=jr.key(0)))
    with pytest.raises(ValueError, match="different activations"):
        ij.reachability(init, ij.DAGNetwork(g, "linear", key=jr.key(0)))


def _brute_singular(g, c):
    """Some nonempty W whose boundary edges at 0 leave {q >= 0 : B~ q = c} feasible."""
    B = g.incidence().astype(float)
    for r in range(1, len(g.hidden) + 1):
        for W in itertools.combinations(g.hidden, r):
            W = set(W)
            bounds = [(0, 0) if (u in W) != (v in W) else (0, None) for u, v in g.edges]
            if linprog(np.zeros(len(g.edges)), A_eq=B, b_eq=c, bounds=bounds, method="highs").status == 0:
                return True
    return False


def test_zero_sum_groups_match_enumeration():
    from invariant_jax.invariants import hidden_components, zero_sum_groups

    g = ij.mlp([2, 3, 4, 1])
    rng = np.random.default_rng(0)
    c = rng.integers(-3, 4, size=7).astype(float)
    tol = 1e-9
    got = set(zero_sum_groups(g, c, tol, limit=10_000))
    (comp,) = hidden_components(g)
    want = {
        frozenset(g.hidden[i] for i in S)
        for r in range(1, 8)
        for S in itertools.combinations(comp, r)
        if abs(sum(c[i] for i in S)) <= 7 * tol
    }
    assert got == want and len(want) > 5
    assert zero_sum_groups(g, c, tol, limit=3) is None  # too many: the MILP decides


@pytest.mark.parametrize("widths", [[2, 3, 3, 1], [1, 2, 3, 2]])
def test_singular_point_matches_brute_force(widths):
    g = ij.mlp(widths)
    rng = np.random.default_rng(len(widths) + widths[0])
    for _ in range(8):
        c = rng.integers(-2, 3, size=len(g.hidden)).astype(float)
        sp = ij.singular_point(g, c)
        assert sp.success and sp.found == _brute_singular(g, c), c
        if sp.found:
            np.testing.assert_allclose((sp.theta**2) @ g.incidence().T, c, atol=1e-9)


def test_singular_point_30_hidden_is_decided_fast():
    """Issue 30 item 6: `connectivity --singular` hung at 30 hidden nodes (edge prob 0.2)."""
    import time

    g = ij.random_dag(3, 30, 1, 0.2, key=0)
    c = (np.random.default_rng(0).normal(size=len(g.edges)) ** 2) @ g.incidence().T
    t = time.perf_counter()
    sp = ij.singular_point(g, c)
    assert sp.success and not sp.found
    assert time.perf_counter() - t < 10.0
    c2 = c.copy()  # now cut a node off: a point with its edges at 0 exists iff c_v = 0
    v = g.hidden.index(next(v for v in g.hidden if g.predecessors(v) and g.successors(v)))
    c2[v] = 0.0
    assert ij.singular_point(g, c2).found
    sp = ij.singular_point(g, c, max_subset_size=4, time_limit=0.5)  # bounded MILP search
    assert sp.result in (ij.RESULTS.successful, ij.RESULTS.undecided)
    with pytest.raises(ValueError, match="time_limit"):
        ij.singular_point(g, c, time_limit=-1.0)


def test_component_labels_equal_the_sweep_store_column():
    """`component_of(g, theta0).labels` is the sweep store's `component` column."""
    from invariant_jax.sweep import trajectory_columns

    g = ij.mlp([2, 3, 1])
    rng = np.random.default_rng(1)
    th0 = rng.normal(size=(40, len(g.edges)))
    th0[:, [g.edges.index((f"h1_{j}", "y0")) for j in range(3)]] *= 3.0  # many frozen rows
    c0 = th0**2 @ g.incidence().T
    n = len(th0)
    rec = {
        "theta0": th0,
        "theta_final": th0,
        "c0": c0,
        "drift": np.zeros(n),
        "scale": np.ones(n),
        "result": np.zeros(n, np.int32),
        "status": np.zeros(n, np.int64),
    }
    col = trajectory_columns(g, rec, rtol=1e-6, atol=1e-6)["component"]
    labels = ij.component_of(g, th0, tol=1e-10 * np.abs(c0).sum(1)).labels
    assert list(col) == list(labels) and len(set(labels)) > 3


def test_sample_invariant_set_lies_on_it():
    g = ij.example_dag()
    c = np.asarray(ij.conserved_quantities(ij.DAGNetwork(g, "relu", key=jr.key(3))))
    th = ij.sample_invariant_set(g, c, 300, seed=1)
    np.testing.assert_allclose(th**2 @ g.incidence().T, np.broadcast_to(c, (300, len(c))), atol=1e-12 * np.abs(c).sum())
    assert len(set(ij.component_of(g, th).labels)) == int(ij.connectivity(g, c).n_components)


def test_cli_connectivity_plot(tmp_path, capsys):
    from invariant_jax.cli import main

    png = tmp_path / "h.png"
    args = ["connectivity", "--graph", "mlp", "--widths", "2,3,1", "--seed", "1", "--plot", str(png)]
    assert main(args) == 0
    assert png.stat().st_size > 1000 and "wrote" in capsys.readouterr().out
    assert main(args) == 2  # an existing file is refused before any work
    assert "--overwrite" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 0
    assert main(["connectivity", "--graph", "mlp", "--widths", "2,3,1", "--plot", str(tmp_path / "h.pdf")]) == 2
    assert ".png" in capsys.readouterr().err
