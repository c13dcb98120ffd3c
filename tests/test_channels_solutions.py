"""The authors' post-processing (channels-to-infinity/src/helper_analyse.jl and
scripts/data_process/scaling_plots.jl): the Hungarian distance between solutions against
brute force over permutations, the unique-solution count against a known number of
distinct solutions, and the flow-to-Newton jump filter against its formula."""

import itertools

import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax import channels as ch


def _net(r, bias, theta):
    return ij.DAGNetwork(ij.mlp([2, r, 1], bias=bias), "softplus", edge_weights=np.asarray(theta))


def _brute(A, B):
    # independent reference: the minimum over every permutation of B's rows
    r = A.shape[0]
    return min(sum(np.linalg.norm(A[i] - B[p[i]]) for i in range(r)) for p in itertools.permutations(range(r)))


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("bias", [False, True])
def test_solution_distance_is_the_best_permutation(r, bias):
    rng = np.random.default_rng(10 * r + bias)
    g = ij.mlp([2, r, 1], bias=bias)
    for _ in range(3):
        a, b = rng.normal(size=(2, len(g.edges)))
        na, nb = _net(r, bias, a), _net(r, bias, b)
        A, B = ch.neuron_vectors(na), ch.neuron_vectors(nb)
        assert A.shape == (r, (3 if bias else 2) + 1)
        assert ch.solution_distance(na, nb) == pytest.approx(_brute(A, B), rel=1e-12, abs=1e-12)


def test_neuron_vectors_are_input_row_bias_and_output_weight():
    g = ij.mlp([2, 2, 1], bias=True)
    theta = np.arange(1.0, len(g.edges) + 1)
    V = ch.neuron_vectors(_net(2, True, theta))
    w = dict(zip(g.edges, theta))
    for k, h in enumerate(g.hidden):
        assert np.array_equal(V[k], [w[("x0", h)], w[("x1", h)], w[("b", h)], w[(h, "y0")]])


def test_permuted_network_is_at_distance_zero_and_computes_the_same():
    rng = np.random.default_rng(0)
    g = ij.mlp([2, 4, 1], bias=True)
    net = _net(4, True, rng.normal(size=len(g.edges)))
    perm = [2, 0, 3, 1]
    w = dict(zip(g.edges, np.asarray(net.edge_weights())))
    H = list(g.hidden)
    inv = {H[perm[i]]: H[i] for i in range(4)}  # new neuron perm[i] is old neuron i
    theta_p = np.array([w[(inv.get(u, u), inv.get(v, v))] for u, v in g.edges])
    net_p = _net(4, True, theta_p)
    X = rng.normal(size=(16, 2))
    assert np.allclose(net.forward(X), net_p.forward(X), rtol=1e-12, atol=1e-12)  # the same function
    assert not np.allclose(theta_p, net.edge_weights())
    assert ch.solution_distance(net, net_p) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("K", [2, 3, 5])
def test_unique_solutions_counts_distinct_solutions_up_to_permutation(K):
    # K distinct solutions, each found by several runs in permuted neuron order and with
    # a 1e-9 spread (converged to round-off): the authors' rule must count K
    rng = np.random.default_rng(K)
    r, g = 3, ij.mlp([2, 3, 1], bias=True)
    net0 = _net(r, True, np.zeros(len(g.edges)))
    bases = [rng.normal(size=len(g.edges)) for _ in range(K)]
    thetas, truth = [], []
    H = list(g.hidden)
    for k, base in enumerate(bases):
        w = dict(zip(g.edges, base))
        for _ in range(int(rng.integers(3, 7))):
            p = rng.permutation(r)
            inv = {H[p[i]]: H[i] for i in range(r)}
            th = np.array([w[(inv.get(u, u), inv.get(v, v))] for u, v in g.edges])
            thetas.append(th + 1e-9 * rng.normal(size=th.shape))
            truth.append(k)
    D = ch.solution_distances(net0, np.array(thetas))
    assert np.allclose(D, D.T) and np.all(np.diag(D) == 0)
    same = np.equal.outer(truth, truth)
    assert D[same].max() < 1e-7 < D[~same].min()
    assert ch.count_unique_solutions(D) == K
    # a non-Hungarian distance (neurons in stored order) does not see the permutations
    V = [ch.neuron_vectors(net0, th) for th in thetas]
    D_naive = np.array([[np.linalg.norm(a - b, axis=1).sum() for b in V] for a in V])
    assert D_naive[same].max() > 1e-3


def test_unique_solutions_small_cases_and_errors():
    assert ch.count_unique_solutions(np.zeros((1, 1))) == 1
    assert ch.count_unique_solutions(np.array([[0, 1e-12], [1e-12, 0]])) == 1
    assert ch.count_unique_solutions(np.array([[0, 1.0], [1.0, 0]])) == 2
    with pytest.raises(ValueError, match="square"):
        ch.count_unique_solutions(np.zeros((2, 3)))


def test_jump_distance_is_the_cosine_distance():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 5, 7))
    d = ch.jump_distance(a, b)
    ref = [1 - np.dot(x, y) / np.sqrt(np.dot(x, x) * np.dot(y, y)) for x, y in zip(a, b)]
    assert np.allclose(d, ref, rtol=1e-13, atol=1e-15)
    assert np.allclose(ch.jump_distance(a, 3.0 * a), 0.0, atol=1e-15)  # scale-free
    assert np.allclose(ch.jump_distance(a, -a), 2.0)


def test_study_summary_applies_the_authors_filter_and_unique_count():
    # a hand-made study (no training): two distinct r = 2 solutions found by 3 and 2 runs
    # (neurons swapped in some), one run that jumped far from its flow end
    from invariant_jax.channels._levels import _column

    rng = np.random.default_rng(3)
    g = ij.mlp([2, 2, 1], bias=False)
    E = len(g.edges)
    a, b = rng.normal(size=(2, E))
    ren = {"h1_0": "h1_1", "h1_1": "h1_0"}

    def swap(th):  # the same network with its two hidden neurons swapped
        w = dict(zip(g.edges, th))
        return np.array([w[(ren.get(u, u), ren.get(v, v))] for u, v in g.edges])

    theta = [a, swap(a), a, b, swap(b)]
    theta_flow = [t * 1.01 for t in theta]  # moved along itself: cosine distance 0
    theta_flow[4] = rng.normal(size=E)  # jumped: cosine distance ~ 1
    wn_flow = np.array([2e3, 2e3, 10.0, 2e3, 2e3])
    min_cos = np.array([1e-3, 1e-3, 1e-3, 0.5, 1e-3])
    n = 5
    rec = dict(
        activation=np.array(["g"] * n),
        bias=np.zeros(n, bool),
        r=np.full(n, 2),
        label=np.array(["d"] * n),
        loss=np.ones(n),
        mse=2 * np.ones(n),
        infinite=np.array([1, 1, 0, 1, 1], bool),
        duplicate=np.zeros(n, bool),
        confirmed=np.zeros(n, bool),
        channel_paper=np.zeros(n, bool),
        min_cos=min_cos,
        weightnorm_flow=wn_flow,
        stopped_by=np.array(["maxnorm"] * n),
        jump_cos=ch.jump_distance(theta_flow, theta),
        theta=_column(theta),
        theta_flow=_column(theta_flow),
    )
    st = ch.ConvergenceStudy(records=rec, settings=dict(maxnorm=1e3, channel_cos=1e-2, n_inputs=2), seconds=0.0)
    row = st.summary()[0]
    assert row["kept"] == 4  # run 4 jumped
    assert row["authors_channel"] == 2  # kept, flow-end weightnorm > 1e3, closest pair < 1e-2
    assert row["authors_channel_fraction"] == pytest.approx(2 / 4)
    assert row["infinite_kept"] == 3
    assert row["n_unique"] == 2
    d = st.to_dict()["records"]
    assert np.allclose(d["theta"][1], theta[1])  # JSON-ready lists
