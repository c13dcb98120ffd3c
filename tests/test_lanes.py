"""`lane_cond` and `lane_while` (kinks/_lanes.py): under a `vmap` that names the lanes
they give exactly what `lax.cond` and `lax.while_loop` give, lane by lane, while the
expensive branch runs only for the lanes that take it; unbatched they are those
primitives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from invariant_jax.kinks import LANES, lane_cond
from invariant_jax.kinks._lanes import lane_while

jax.config.update("jax_enable_x64", True)


def _true(x, y):
    return jnp.sin(x) * y, x + 1


def _false(x, y):
    return jnp.zeros_like(x), x - 1


@pytest.mark.parametrize("n", [1, 3, 8, 13])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_lane_cond_is_cond_lane_by_lane(n, fraction):
    # fraction 1.0 of 13 lanes takes 4 rounds of the narrow batch (width 4)
    take = jnp.asarray(np.random.default_rng(n).random(n) < fraction)
    x, y = jnp.arange(n, dtype=float), jnp.linspace(1.0, 2.0, n)
    got = jax.jit(jax.vmap(lambda p, a, b: lane_cond(LANES, p, _true, _false, a, b), axis_name=LANES))(take, x, y)
    ref = jax.vmap(lambda p, a, b: jax.lax.cond(p, _true, _false, a, b))(take, x, y)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_the_branch_runs_for_the_taking_lanes_only():
    seen = []

    def true_fn(x):
        jax.debug.callback(lambda v: seen.append(np.asarray(v).copy()), x)
        return x * 2

    take = jnp.asarray([False, True, False, False, True, False, False, False])
    x = jnp.arange(8.0)
    out = jax.vmap(lambda p, a: lane_cond(LANES, p, true_fn, lambda a: -a, a), axis_name=LANES)(take, x)
    np.testing.assert_array_equal(out, jnp.where(take, 2 * x, -x))
    # one round of a narrow batch of 2 (8 lanes / 4), holding lanes 1 and 4
    assert sorted(float(s) for s in seen) == [1.0, 4.0]
    seen.clear()
    jax.vmap(lambda p, a: lane_cond(LANES, p, true_fn, lambda a: -a, a), axis_name=LANES)(jnp.zeros(8, bool), x)
    assert seen == []


def test_nested_lane_cond_gathers_within_the_narrow_batch():
    inner = lambda x: lane_cond(LANES, x > 4, lambda v: jnp.sin(v) + 10, lambda v: v, x)  # noqa: E731
    outer_t = lambda x, y: (inner(x) * y, x + 1)  # noqa: E731
    ref_t = lambda x, y: (jax.lax.cond(x > 4, lambda v: jnp.sin(v) + 10, lambda v: v, x) * y, x + 1)  # noqa: E731
    take = jnp.asarray(np.random.default_rng(0).random(13) < 0.6)
    x, y = jnp.arange(13.0), jnp.full(13, 2.0)
    got = jax.vmap(lambda p, a, b: lane_cond(LANES, p, outer_t, _false, a, b), axis_name=LANES)(take, x, y)
    ref = jax.vmap(lambda p, a, b: jax.lax.cond(p, ref_t, _false, a, b))(take, x, y)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_lane_while_is_while_loop_lane_by_lane():
    # Collatz steps: trip counts from 0 to 111 across the lanes
    def body(s, k):
        x, n = s
        return jnp.where(x % 2 == 0, x // 2, 3 * x + k), n + 1

    going = lambda s: s[0] > 1  # noqa: E731
    x0 = jnp.arange(1, 30)
    k = jnp.ones_like(x0)
    got = jax.vmap(lambda a, b: lane_while(LANES, going, body, (a, 0), b), axis_name=LANES)(x0, k)
    ref = jax.vmap(lambda a, b: jax.lax.while_loop(going, lambda s: body(s, b), (a, 0)))(x0, k)
    np.testing.assert_array_equal(got[1], ref[1])
    assert int(ref[1].max()) == 111


def test_unbatched_or_unnamed_it_is_the_plain_primitive():
    # no vmap names the axis (one slot run unbatched): lax.cond / lax.while_loop
    assert float(lane_cond(LANES, jnp.asarray(True), _true, _false, 1.0, 2.0)[0]) == 2 * np.sin(1.0)
    out = jax.vmap(lambda p, a: lane_cond(LANES, p, lambda v: v + 1, lambda v: v - 1, a))(
        jnp.asarray([True, False]), jnp.zeros(2)
    )
    np.testing.assert_array_equal(out, [1.0, -1.0])
    assert int(lane_while(LANES, lambda s: s < 5, lambda s, d: s + d, 0, 2)) == 6
