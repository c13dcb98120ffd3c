"""The only module that touches private names of diffrax and equinox. Each import says
why the public API does not suffice; when diffrax or equinox change, only this file
needs looking at. The rest of the package calls the functions below, never the private
names themselves:

| private name                                   | behind                 | used by                      |
|------------------------------------------------|------------------------|------------------------------|
| `diffrax._term.WrapTerm`                       | `wrap_term`            | sweep engine, kink segments  |
| `diffrax._root_finder.use_stepsize_tol`        | `with_controller_tols` | sweep engine, kink segments  |
| `equinox.internal.prevbefore`                  | `t1_clip_floor`        | sweep engine, kink segments  |
| `equinox._errors.EQX_ON_ERROR`                 | `cacheable_checks`     | kink-aware driver            |
| `equinox._enum.Enumeration._index_to_message`, |                        |                              |
| `equinox._enum.Enumeration._name_to_item`      | `enumeration_table`    | `_results` (`RESULTS` table) |

each read in the versions of `CHECKED_AGAINST`."""

from __future__ import annotations

import contextlib

import diffrax
import equinox as eqx

# Equinox's runtime-error mode (`EQX_ON_ERROR`: "raise", "breakpoint", "nan" or "off"),
# a module-level setting read when `eqx.error_if` is traced. It is public only as an
# environment variable read once at import; `cacheable_checks` below switches it for
# one trace, which needs the module attribute.
import equinox._errors as _eqx_errors
import jax
import jax.numpy as jnp

# Sentinel that an implicit solver's root finder leaves in its rtol / atol / norm fields
# to say "take them from the step-size controller". `diffeqsolve` substitutes them; the
# sweep engine and kink-aware segments do the same substitution (`with_controller_tols`),
# so they need to recognise the sentinel.
from diffrax._root_finder import use_stepsize_tol

# `diffeqsolve` wraps the user's terms in `WrapTerm(term, direction)` before stepping.
# The sweep engine and kink-aware segments step diffrax solvers themselves (solver.init /
# solver.step, as `diffeqsolve`'s loop does), and must hand them the same wrapped term to
# reproduce `diffeqsolve`'s numbers bit for bit (`wrap_term` below).
from diffrax._term import WrapTerm

# `prevbefore(x)`: the largest float below `x`, as diffrax clips its last step to `t1`
# (used by `t1_clip_floor` below).
from equinox.internal import prevbefore

# the private names above stay module attributes (importable) but are not exported: the
# package calls the functions
__all__ = [
    "wrap_term",
    "t1_clip_floor",
    "with_controller_tols",
    "enumeration_table",
    "cacheable_checks",
    "INTERNALS",
    "CHECKED_AGAINST",
]

CHECKED_AGAINST = {"diffrax": "0.7.2", "equinox": "0.13.8", "jax": "0.10.2"}
"""The versions whose internals were read for this module (constraints.txt pins them);
`make test-latest` runs the suite, `tests/test_packaging.py` included, on the newest."""

INTERNALS = (
    "equinox._errors.EQX_ON_ERROR",
    "equinox.internal.prevbefore",
    "equinox._enum.Enumeration._index_to_message",
    "equinox._enum.Enumeration._name_to_item",
    "diffrax._term.WrapTerm",
    "diffrax._root_finder.use_stepsize_tol",
)
"""Every private name of equinox and diffrax the package uses, as `module.attribute`, each
read in the versions of `CHECKED_AGAINST`; tests/test_packaging.py checks that each still
resolves in the installed versions, and that no module but this one uses a private name
of diffrax or equinox. `t1_clip_floor` and `with_controller_tols` also copy what
`diffrax/_integrate.py` does before its loop: re-read it there on a new diffrax."""


def enumeration_table(enumeration) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(names, messages)` of an `eqx.Enumeration`, indexed by the members' integer codes.

    Equinox has no public way to list an enumeration's members or to look up a
    message by integer code (`Enumeration[item]` needs an item, and formats arrays as
    one string); both live in the private `_name_to_item` / `_index_to_message`.
    """
    messages = tuple(enumeration._index_to_message)
    names = [""] * len(messages)
    for name, item in enumeration._name_to_item.items():
        names[int(item._value)] = name
    return tuple(names), messages


@contextlib.contextmanager
def cacheable_checks():
    """Trace `diffeqsolve`'s input checks without host callbacks.

    `diffeqsolve` checks with `eqx.error_if` that `SaveAt` times lie in `[t0, t1]` and
    increase. With a traced `t0` (a kink-aware segment starts where the last event was)
    each check becomes a host callback, and JAX's persistent compilation cache refuses
    programs with host callbacks. The kink-aware driver clips and sorts a segment's save
    times into `[t, t1]` by construction, so these checks cannot fire there; it traces
    them with equinox's `on_error="off"` (the module-level `EQX_ON_ERROR` of
    `equinox._errors`, read at trace time; there is no public per-call switch). Only
    for code whose checks cannot fire: the solve itself runs with `throw=False`, so its
    failures are data either way."""
    old = _eqx_errors.EQX_ON_ERROR
    _eqx_errors.EQX_ON_ERROR = "off"
    try:
        yield
    finally:
        _eqx_errors.EQX_ON_ERROR = old


@jax.jit  # (one program per dtype: called eagerly, a fresh fori_loop would compile per call)
def t1_clip_floor(t1):
    """`t1` less 100 ULPs (100 steps of `equinox.internal.prevbefore`): the threshold above
    which `diffeqsolve`'s loop rounds the end of the next step up to `t1`
    (`diffrax/_integrate.py`, `t1_clip_floor`). Code that steps diffrax solvers itself (the
    sweep engine, kink-aware segments) uses it to take `diffeqsolve`'s last step bit for bit."""
    # (a loop: unrolled, the 100 steps were inlined into every program that holds a segment)
    return jax.lax.fori_loop(0, 100, lambda _, floor: prevbefore(floor), jnp.asarray(t1))


def with_controller_tols(solver, controller):
    """As `diffeqsolve` does before stepping: an implicit solver's root finder takes the
    step-size controller's rtol / atol / norm wherever it was left at `use_stepsize_tol`.
    Used by the code that steps diffrax solvers itself (the sweep engine, kink-aware
    segments)."""
    if not isinstance(solver, diffrax.AbstractImplicitSolver):
        return solver
    attrs = [a for a in ("rtol", "atol", "norm") if getattr(solver.root_finder, a) is use_stepsize_tol]
    if not attrs:
        return solver
    return eqx.tree_at(
        lambda s: tuple(getattr(s.root_finder, a) for a in attrs), solver, tuple(getattr(controller, a) for a in attrs)
    )


def wrap_term(term, direction):
    """`term` as `diffeqsolve` hands it to the solver: `WrapTerm(term, direction)`. Code that
    steps diffrax solvers itself (the sweep engine, kink-aware segments) needs the same wrapped term to
    reproduce `diffeqsolve`'s numbers bit for bit."""
    return WrapTerm(term, direction)
