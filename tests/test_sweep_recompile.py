"""`sweep_flows` compiles once per problem shape: a second data set (and new initial
weights, a new t1) of the same shapes reuses the compiled programs. Before the fix the
data and the initial weights were closed-over constants of per-call programs, so every
call compiled again (25-40 s for Kvaerno5 on the channels studies)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from compile_count import CountCompiles
from invariant_jax.sweep import BatchOptions
from tolerances import assert_within_tolerance

jax.config.update("jax_enable_x64", True)


def _data(seed, n=12):
    X = jr.normal(jr.key(seed), (n, 2))
    return X, jnp.sin(2 * X[:, :1]) + 0.3 * X[:, 1:]


def _nets(seed, B=3):
    g = ij.mlp([2, 3, 1], bias=True)
    return eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "softplus", key=k))(jr.split(jr.key(seed), B))


def test_second_data_set_reuses_the_compiled_sweep():
    counter = CountCompiles()
    opts = dict(solver="tsit5", rtol=1e-7, atol=1e-7, saveat=ij.SaveTimes(n_save=4), batch=BatchOptions(slots=2))
    X1, Y1 = _data(0)
    X2, Y2 = _data(1)
    nets1, nets2 = _nets(10), _nets(11)
    with counter:
        r1 = ij.sweep_flows(nets1, X1, Y1, 0.5, **opts)
    first = counter.n
    assert first > 0
    with counter:
        r2 = ij.sweep_flows(nets2, X2, Y2, 0.7, **opts)  # new data, inits and t1, same shapes
    assert counter.n == 0, f"the second data set compiled {counter.n} programs (first: {first})"
    # ...and it integrated the new problem, not the old one: it agrees with gradient_flow
    # on (X2, Y2) to round-off amplified by adaptive stepping (two compiled programs)
    theta2 = nets2.edge_weights()
    one = ij.DAGNetwork(nets2.graph, "softplus", edge_weights=theta2[0])
    for i in range(3):
        f = ij.gradient_flow(
            one.with_edge_weights(theta2[i]),
            X2,
            Y2,
            0.7,
            solver="tsit5",
            rtol=1e-7,
            atol=1e-7,
            saveat=ij.SaveTimes(n_save=4),
        )
        assert float(r2.t_final[i]) == 0.7
        assert_within_tolerance(
            r2.theta_final[i],
            f.theta_final,
            rtol=1e-7,
            atol=1e-7,
            scale=float(np.abs(f.theta_final).max()),
            num_steps=f.stats["num_steps"],
        )
    # the first problem again: the same compiled program run again, bit for bit
    with counter:
        r1b = ij.sweep_flows(nets1, X1, Y1, 0.5, **opts)
    assert counter.n == 0
    assert np.array_equal(np.asarray(r1b.theta_final), np.asarray(r1.theta_final))
    assert np.array_equal(np.asarray(r1b.loss_final), np.asarray(r1.loss_final))


def test_with_data_refuses_other_shapes():
    from invariant_jax.sweep._engine import Engine, make_problem

    X1, Y1 = _data(0)
    nets = _nets(0)
    template = jax.tree.map(lambda a: a[0] if a.ndim == 3 else a, nets)
    p1 = make_problem(template, X1, Y1, 0.5)
    engine = Engine(p1, init_table=nets.edge_weights(), slots=2)
    X2, Y2 = _data(1, n=13)
    with pytest.raises(ValueError, match="same structure, shapes"):
        engine.with_data(make_problem(template, X2, Y2, 0.5), nets.edge_weights())
    with pytest.raises(ValueError, match="exactly one"):
        Engine(p1, slots=2)


def test_kink_aware_sweep_reuses_its_engine_for_new_data():
    # relu: sweep_flows is kink-aware by default; t1 and the options are compiled in,
    # the data set and the initial weights are arguments of the programs
    counter = CountCompiles()
    g = ij.mlp([2, 3, 1])
    nets = lambda s: eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(jr.split(jr.key(s), 3))  # noqa: E731
    opts = dict(solver="tsit5", rtol=1e-7, atol=1e-7, saveat=ij.SaveTimes(n_save=3), batch=BatchOptions(slots=2))
    (X1, Y1), (X2, Y2) = _data(0), _data(1)
    nets1, nets2 = nets(20), nets(21)
    with counter:
        r1 = ij.sweep_flows(nets1, X1, Y1, 0.5, **opts)
    assert counter.n > 0 and r1.kink is not None
    with counter:
        r2 = ij.sweep_flows(nets2, X2, Y2, 0.5, **opts)
    assert counter.n == 0, f"the second data set compiled {counter.n} programs"
    # it integrated the new problem: the recorded losses are the losses of the recorded
    # weights on (X2, Y2) (an independent evaluation), not on (X1, Y1)
    for i in range(3):
        th0, th1 = nets2.edge_weights()[i], r2.theta_final[i]
        loss = lambda th, X, Y: float(ij.network_loss(ij.DAGNetwork(g, "relu", edge_weights=th), X, Y))  # noqa: E731
        assert np.isclose(float(r2.loss_initial[i]), loss(th0, X2, Y2), rtol=1e-12)
        assert np.isclose(float(r2.loss_final[i]), loss(th1, X2, Y2), rtol=1e-12)
        assert not np.isclose(float(r2.loss_final[i]), loss(th1, X1, Y1), rtol=1e-6)
        assert float(r2.loss_final[i]) < float(r2.loss_initial[i])
    with counter:
        r1b = ij.sweep_flows(nets1, X1, Y1, 0.5, **opts)
    assert counter.n == 0
    assert np.array_equal(np.asarray(r1b.theta_final), np.asarray(r1.theta_final))
    assert np.array_equal(np.asarray(r1b.kink["num_events"]), np.asarray(r1.kink["num_events"]))


# --- one compiled program per configuration, whatever the number of initializations ---

_NS = (1, 37, 64, 200)  # 200: many refills of the 8 (plain) or 2 (kink) slots; no size is special


def _relu_batches(ns, E_seed=5):
    """Batches of relu networks of mlp([2, 3, 1]) whose first rows agree: batch n holds
    the first n of 1000 initial weight vectors (built before any counting)."""
    g = ij.mlp([2, 3, 1])
    base = ij.DAGNetwork(g, "relu", key=jr.key(0))
    # always the same 1000 rows (test_kink_cascade.py names rows of them), whatever ns
    table = np.asarray(jr.normal(jr.key(E_seed), (max(1000, *ns), len(g.edges)))) * 0.8
    return {n: base.with_edge_weights(table[:n]) for n in ns}, table


@pytest.mark.parametrize("kink_aware", [False, True], ids=["plain", "kink"])
def test_no_batch_size_compiles_again(kink_aware):
    """After a first call, sweeps of 1, 37, 64 and 200 networks compile nothing, and a
    trajectory's record does not depend on the batch it was in (one program run again)."""
    counter = CountCompiles()
    batches, table = _relu_batches(_NS)
    X, Y = _data(0)
    # the kink-aware configuration of the test above (its engine, if compiled, is reused)
    # (plain: 8 slots, fewer host round trips for the 200)
    opts = dict(
        solver="tsit5",
        rtol=1e-7,
        atol=1e-7,
        saveat=ij.SaveTimes(n_save=3),
        batch=BatchOptions(slots=2 if kink_aware else 8),
        kinks=kink_aware,
    )
    # the first call compiles; it fills fewer slots than there are (no refill from the
    # queue), and still compiles every program a larger batch needs
    ij.sweep_flows(batches[1], X, Y, 0.5, **opts)
    out = {}
    for n in _NS:
        with counter:
            out[n] = ij.sweep_flows(batches[n], X, Y, 0.5, **opts)
        assert counter.n == 0, f"n = {n} compiled {counter.n} programs"
        assert len(out[n]) == n and (out[n].kink is not None) == kink_aware
        np.testing.assert_array_equal(out[n].theta0, table[:n])
    big = out[max(_NS)]
    # (kink-aware: rows 325 and 714 of the 1000 of _relu_batches, which reach a node's
    # origin, are test_kink_cascade.py's; none of the first 200 failed even before its fix)
    assert np.mean(big.success) > 0.99
    for n in (1, 37, 64):
        for k in ("theta_final", "loss_final", "t_final", "num_steps", "drift"):
            np.testing.assert_array_equal(getattr(out[n], k), getattr(big, k)[:n], err_msg=f"{k}, n = {n}")
    # an independent check of the integrated problem: the loss decreased along the flow,
    # and the recorded loss is the loss of the recorded weights
    g = batches[1].graph
    for i in (0, 100, 199):
        net = ij.DAGNetwork(g, "relu", edge_weights=big.theta_final[i])
        assert np.isclose(float(ij.network_loss(net, X, Y)), big.loss_final[i], rtol=1e-12)
        assert big.loss_final[i] <= big.loss_initial[i]


@pytest.mark.parametrize("kink_aware", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["plain", "kink"])
def test_resume_compiles_nothing(tmp_path, kink_aware):
    """`run_sweep` resuming a folder with a lost chunk (fewer trajectories to run than the
    first call) reuses the compiled engine and recomputes the same records bit for bit."""
    import pyarrow.parquet as pq

    from invariant_jax.sweep import StoreOptions, SweepConfig, run_sweep

    counter = CountCompiles()
    cfg = SweepConfig(
        graph="mlp",
        widths=(2, 3, 1),
        n_samples=8,
        n_inits=13,
        t1=0.3,
        solver=ij.SolverOptions("tsit5", rtol=1e-6, atol=1e-6),
        saveat=ij.SaveTimes(n_save=3),
        kinks=kink_aware,
    )
    out = tmp_path / "run"
    kw = dict(batch=BatchOptions(slots=4, progress=False), store=StoreOptions(flush_seconds=0.0, chunk_size=4))
    with counter:
        full = run_sweep(cfg, out, **kw)
    assert counter.n > 0
    chunk = sorted((out / "chunks").glob("*.parquet"))[1]
    lost = pq.read_table(chunk, columns=["index"]).column("index").to_pylist()
    chunk.unlink()
    with counter:
        resumed = run_sweep(cfg, out, resume=True, **kw)
    assert counter.n == 0, f"the resume compiled {counter.n} programs"
    assert 0 < len(lost) < 13 and resumed.stats["useful_steps"] > 0
    for k in ("theta_final", "loss_final", "num_steps", "result_codes"):
        np.testing.assert_array_equal(getattr(resumed, k), getattr(full, k), err_msg=k)
    # a pilot with fewer initializations than slots, or a larger run: the same engine
    for n in (3, 30):
        with counter:
            other = run_sweep(dataclasses.replace(cfg, n_inits=n), batch=kw["batch"])
        assert counter.n == 0, f"n_inits = {n} compiled {counter.n} programs"
        m = min(n, 13)
        np.testing.assert_array_equal(other.theta_final[:m], full.theta_final[:m])
