"""Finite-value checks that hold eagerly and under `jit` alike: a concrete array that
fails raises `ValueError`; a traced one gets `eqx.error_if` with the same words, so a
jitted call stops with the message the eager call would give (eagerly it also names the
first bad entry, which a traced check cannot know)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

__all__ = ["check_finite"]


def check_finite(x: ArrayLike, message: str, *, where: str = "") -> Array:
    """Return `x` if every entry is finite; else raise `ValueError(message)` (concrete
    `x`) or fail at run time with `message` (traced `x`, via `eqx.error_if`).

    **Arguments:**

    - `x`: the array to check.
    - `message`: what is wrong and the fix.
    - `where`: a format string with `{index}`, e.g. `"X[{index}] "`, prepended to
        `message`: eagerly `{index}` is the first bad entry (`X[2, 1] `), traced `...`.
    """
    if isinstance(x, jax.core.Tracer):
        return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), (where.format(index="...") if where else "") + message)
    arr = np.asarray(x)
    bad = ~np.isfinite(arr)
    if bad.any():
        index = ", ".join(str(int(i)) for i in np.argwhere(bad)[0])
        raise ValueError((where.format(index=index) if where else "") + message)
    return x
