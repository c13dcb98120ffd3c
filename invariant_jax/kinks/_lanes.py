"""Branches that only some lanes of a `vmap` take.

Under `jax.vmap` a `lax.cond` whose predicate differs between lanes becomes a select: every
lane computes both branches. The Filippov field of sliding pairs is such a branch: a few
trajectories of a wide batch slide at any time, and under a select all of them paid for
it at every evaluation of the field.
`lane_cond` runs the branch for the lanes that take it only: it gathers them into a
narrow batch (a quarter of the lanes, in rounds while more take it), runs the branch
there, and hands each lane its own result. A batch where no lane takes it skips it.

The lanes are a named `vmap` axis, `LANES`, which the sweep engine's vmap mode names
(`KinkProblem.lanes`). Unbatched, or with no axis named, `lane_cond` is `lax.cond`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

LANES = "lanes"
"""The `vmap` axis name of the sweep engine's lanes (slots) in vmap mode."""

ROUNDS = 4
"""The narrow batch holds `1 / ROUNDS` of the lanes: up to `ROUNDS` rounds run the branch
for all of them."""


def lane_cond(axis: str | None, pred, true_fn: Callable, false_fn: Callable, *operands):
    """`lax.cond(pred, true_fn, false_fn, *operands)` for one lane of a `vmap` over the
    named axis `axis`, with `true_fn` evaluated only for the lanes where `pred` holds
    (`false_fn` is evaluated for every lane: the cheap branch). Both branches must
    return the same structure, shapes and dtypes, and take every value that differs
    between lanes as an operand (`true_fn` runs on other lanes' operands: a closed-over
    batched value would not be its lane's). With `axis=None`, or outside a
    `vmap` that names `axis` (one slot run unbatched), it is `lax.cond`."""
    n = _size(axis)
    if n is None:
        # (plain functions: `lax.cond` hashes its branches, and a bound method of a module hashes its arrays)
        return jax.lax.cond(pred, lambda *a: true_fn(*a), lambda *a: false_fn(*a), *operands)
    width = -(-n // ROUNDS)
    base = false_fn(*operands)
    # the gathered values are the same in every lane (not batched): what follows runs once
    takes = jax.lax.all_gather(pred, axis)
    rank = jnp.cumsum(takes) - 1  # a taking lane's place among the taking lanes
    every = jtu.tree_map(lambda a: jax.lax.all_gather(a, axis), operands)
    blank = jtu.tree_map(lambda a: jnp.zeros((n,) + a.shape, a.dtype), base)

    def one_round(r, acc):
        pick = jnp.nonzero(takes & (rank // width == r), size=width, fill_value=n)[0]
        # (named as the lanes: a `lane_cond` inside `true_fn` gathers within this narrow batch)
        out = jax.vmap(true_fn, axis_name=axis)(*jtu.tree_map(lambda a: a[jnp.minimum(pick, n - 1)], every))
        return jtu.tree_map(lambda A, b: A.at[pick].set(b, mode="drop"), acc, out)

    rounds = -(-jnp.sum(takes) // width)
    acc = jax.lax.fori_loop(0, rounds, one_round, blank)
    lane = jax.lax.axis_index(axis)
    return jtu.tree_map(lambda a, b: jnp.where(pred, a[lane], b), acc, base)


def _size(axis: str | None) -> int | None:
    # the size of the named axis, or None when no `vmap` in scope names it
    if axis is None:
        return None
    try:
        return jax.lax.axis_size(axis)
    except NameError:
        return None


def lane_while(axis: str | None, cond_fun: Callable, body_fun: Callable, init, *args):
    """`lax.while_loop(cond_fun, lambda s: body_fun(s, *args), init)` for one lane of a
    `vmap` over the named axis `axis`, whose iterations run for the lanes still going
    only (`lane_cond`; `args`: the loop's constants that differ between lanes): a batched
    loop otherwise runs every lane until the slowest is done. With `axis=None`, or
    outside a `vmap` that names `axis`, it is `lax.while_loop`."""
    if _size(axis) is None:
        return jax.lax.while_loop(cond_fun, lambda s: body_fun(s, *args), init)

    def step(s):
        return lane_cond(axis, cond_fun(s), body_fun, lambda s, *a: s, s, *args)

    return jax.lax.while_loop(cond_fun, step, init)
