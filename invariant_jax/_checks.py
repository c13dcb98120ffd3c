"""Finite-value checks that hold eagerly and under `jit` alike: a concrete array that
fails raises `ValueError`; a traced one gets `eqx.error_if` with the same words, so a
jitted call stops with the message the eager call would give (eagerly it also names the
first bad entry, which a traced check cannot know). The scalar checks and the wording of
deprecated keywords live in the NumPy-only `_scalar_checks` and are re-exported here, so
`from ._checks import ...` gives every check."""

from __future__ import annotations

from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from ._scalar_checks import check_integer, check_positive, check_time_span, take_deprecated

__all__ = ["check_finite", "check_positive", "check_integer", "check_time_span", "take_deprecated"]

_A = TypeVar("_A", bound=ArrayLike)


def check_finite(x: _A, message: str, *, where: str = "") -> _A:
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
