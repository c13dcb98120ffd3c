"""The paper's loss-levels pipeline: the regular grid, the convergence phase, the study's
criteria (Wilson intervals, loss-level clustering, channel confirmation) and the
frequency study's status codes."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax import channels as ch
from invariant_jax.sweep import STATUSES


def test_frequency_vmap_status_names_nonfinite_and_max_steps_apart():
    # before the fix every vmap failure was labelled max_steps (status = np.where(ok, 0, 2))
    from invariant_jax.channels._frequency import _vmapped_flows

    g = ij.mlp([1, 2, 1], bias=False)
    X = jnp.linspace(-1, 1, 8)[:, None]
    Y = jnp.sin(3 * X)
    thetas = jnp.stack([jnp.array([0.5, -0.3, 1.0, 0.7]),           # reaches t1
                        jnp.array([0.5, -0.3, 1.0, 0.7]) * 1e200])  # loss overflows to inf
    nets = eqx.filter_vmap(ij.DAGNetwork(g, "erf", edge_weights=thetas[0]).with_edge_weights)(thetas)
    b = _vmapped_flows(nets, X, Y, 1.0, solver="tsit5", rtol=1e-6, atol=1e-6, max_steps=200)
    assert STATUSES[b.status[0]] == "ok"
    assert not np.isfinite(b.loss_final[1]) and STATUSES[b.status[1]] == "nonfinite"
    b2 = _vmapped_flows(eqx.filter_vmap(nets.with_edge_weights)(thetas[:1]), X, Y, 1e3,
                        solver="tsit5", rtol=1e-10, atol=1e-10, max_steps=3)
    assert STATUSES[b2.status[0]] == "max_steps"
