"""The sweep benchmarks' evaluation counter (`benchmarks/_bare.py`) against an exact
identity: on a flow that crosses no kink and rejects no step, Tsit5 (7 stages, first
same as last) makes one evaluation at the start and 6 per step, and the event condition
is evaluated once at the start and once per step, and its crossing part at
`INTERIOR_POINTS` inside each step."""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import invariant_jax as ij
from invariant_jax.kinks._segment import INTERIOR_POINTS
from invariant_jax.sweep import KinkEngine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from _bare import count_kink_work  # noqa: E402


def test_counts_are_the_stages_of_each_step():
    g = ij.mlp([2, 3, 1], bias=False)
    X = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (8, 2)))
    Y = 0.7 * X.sum(1, keepdims=True)  # positive data and weights: every unit stays active
    theta = 0.5 * (1 + 0.1 * jnp.arange(len(g.edges)))
    net = ij.DAGNetwork(g, "relu", edge_weights=theta)
    options = ij.SolverOptions("tsit5", rtol=1e-8, atol=1e-8)

    def make():
        return KinkEngine(net, X, Y, 1.0, lambda i: theta * (1 + 0.01 * i), slots=1, exact=True, options=options)

    per = count_kink_work(make, range(2))
    recs = []
    make().run(np.arange(2), on_results=recs.append)
    rec = {k: np.concatenate([r[k] for r in recs]) for k in recs[0]}
    order = np.argsort(rec["index"])
    assert np.all(rec["num_events"] == 0) and np.all(rec["num_rejected_steps"] == 0)
    steps = rec["num_steps"][order]
    np.testing.assert_array_equal(per[:, 2], steps)
    np.testing.assert_array_equal(per[:, 0], 6 * steps + 1)
    np.testing.assert_array_equal(per[:, 1], (1 + INTERIOR_POINTS) * steps + 1)
