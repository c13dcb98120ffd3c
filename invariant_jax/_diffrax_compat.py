"""The only module that touches private names of diffrax and equinox. Each import says
why the public API does not suffice; when diffrax or equinox change, only this file
needs looking at."""

from __future__ import annotations

# `diffeqsolve` wraps the user's terms in `WrapTerm(term, direction)` before stepping.
# The sweep engine steps diffrax solvers itself (solver.init / solver.step, as
# `diffeqsolve`'s loop does), and must hand them the same wrapped term to reproduce
# `diffeqsolve`'s numbers bit for bit.
from diffrax._term import WrapTerm

# Sentinel that an implicit solver's root finder leaves in its rtol / atol / norm fields
# to say "take them from the step-size controller". `diffeqsolve` substitutes them; the
# sweep engine does the same substitution, so it needs to recognise the sentinel.
from diffrax._root_finder import use_stepsize_tol

__all__ = ["WrapTerm", "use_stepsize_tol", "enumeration_table"]


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
