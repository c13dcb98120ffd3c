"""Stopping rules of gradient_flow used for long channel flows; Kvaerno5 on a stiff channel."""

import time

import jax.numpy as jnp
import jax.random as jr
import pytest

import invariant_jax as ij
from invariant_jax.channels import toy_data, toy_network


@pytest.fixture(scope="module")
def problem():
    g = ij.mlp([2, 3, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 20, key=jr.key(0), activation="softplus")
    return ij.DAGNetwork(g, "softplus", key=jr.key(1)), X, Y


def test_loss_floor_and_norm_ceiling_stop(problem):
    # Both flows share one StopRules (its numbers are part of the compiled program) and one
    # save-time count, so they run one compiled program: the data and t1 are arrays.
    net, X, Y = problem
    net = ij.DAGNetwork(net.graph, "softplus", key=jr.key(2), scale=0.1)  # small init
    ceiling = 2.0 * float(jnp.linalg.norm(net.edge_weights()))
    rules = ij.StopRules(loss_floor=1e-3, max_param_norm=ceiling)
    # the loss floor: a target 0.1 above the net's own output (initial loss 5e-3), reached
    # long before t1 by moving the output bias a little, far below the norm ceiling
    f = ij.gradient_flow(net, X, net.forward(X) + 0.1, 1e4, saveat=ij.SaveTimes(n_save=21, spacing="log"), stop=rules)
    assert bool(f.result == ij.RESULTS.stopped_loss_floor) and float(f.t_final) < 1e4
    assert float(f.loss_final) < 1e-3 and float(f.losses[1]) > 1e-3
    # the norm ceiling: fitting the teacher from the small init, the norm grows past twice
    # its start while the loss is still far above the floor
    f2 = ij.gradient_flow(net, X, Y, 1e2, saveat=ij.SaveTimes(n_save=21), stop=rules)
    assert bool(f2.result == ij.RESULTS.stopped_param_norm)
    assert float(f2.t_final) < 1e2 and float(jnp.linalg.norm(f2.theta_final)) > ceiling
    assert float(jnp.linalg.norm(f2.thetas[1])) <= ceiling  # it did not stop at once


def test_wall_time_stop_excludes_compilation(problem):
    import diffrax

    net, X, Y = problem
    t = time.monotonic()
    opts = ij.SolverOptions("euler", dt0=1e-3, stepsize_controller=diffrax.ConstantStepSize(), max_steps=10**9)
    f = ij.gradient_flow(
        net, X, Y, 1e9, solver=opts, saveat=ij.SaveTimes(n_save=3), stop=ij.StopRules(max_wall_time=0.5)
    )
    assert bool(f.result == ij.RESULTS.stopped_wall_time)
    assert float(f.t_final) > 0.01  # it integrated for a while: compilation was not counted
    assert time.monotonic() - t < 120


def test_stopping_rule_bad_values(problem):
    net, X, Y = problem
    for name in ("loss_floor", "max_param_norm", "max_wall_time"):
        with pytest.raises(ValueError, match=f"{name} must be a positive finite number"):
            ij.StopRules(**{name: -1.0})


@pytest.mark.slow
def test_kvaerno5_reaches_t_1e6_on_a_stiff_channel():
    X, Y, loss = toy_data(201)
    net = toy_network(0.55, 0.7, 3.0, -2.5, convention="erf")
    f = ij.gradient_flow(
        net,
        X,
        Y,
        1e6,
        loss=loss,
        saveat=ij.SaveTimes(n_save=31, spacing="log"),
        solver=ij.SolverOptions("kvaerno5", max_steps=20_000, rtol=1e-8, atol=1e-8),
    )
    assert bool(f.success) and float(f.t_final) == 1e6
    assert bool(jnp.all(jnp.diff(f.losses) <= 1e-12))  # the loss never rises along the flow
    assert int(f.num_steps) < 20_000
