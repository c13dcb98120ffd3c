"""The one wording of the scalar checks every option object and entry point uses
(`check_positive`, `check_integer`, `check_time_span`) and of deprecated keywords
(`take_deprecated`). NumPy only, so that `graph` (which never reaches JAX) uses them too;
`_checks` re-exports them beside its array check."""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["check_positive", "check_integer", "check_time_span", "take_deprecated"]


def _is_real(v) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)


def check_positive(
    name: str, v, *, allow_none: bool = False, allow_zero: bool = False, allow_inf: bool = False
) -> None:
    """Raise `ValueError`/`TypeError` unless `v` is a finite real number `> 0` (`>= 0`
    with `allow_zero`; `None` allowed with `allow_none`; `+inf`, "no limit", allowed with
    `allow_inf`). The one wording of this check."""
    if (v is None and allow_none) or (allow_inf and _is_real(v) and v == np.inf):
        return
    alt = " (or None)" if allow_none else " (or inf)" if allow_inf else ""
    if not _is_real(v):
        raise TypeError(f"{name} must be a real number{alt}; got {v!r}.")
    if not (np.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        what = "a finite number >= 0" if allow_zero else "a positive finite number"
        raise ValueError(f"{name} must be {what}{alt}; got {v!r}.")


def check_integer(name: str, v, *, minimum: int) -> None:
    """Raise `TypeError`/`ValueError` unless `v` is an integer (not a bool) `>= minimum`."""
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
        raise TypeError(f"{name} must be {what}; got {v!r}.")
    if v < minimum:
        raise ValueError(f"{name} must be {what}; got {v!r}.")


def check_time_span(t0, t1) -> None:
    """Raise `ValueError` unless `t0 < t1` are finite."""
    if not (np.isfinite(t0) and np.isfinite(t1) and t1 > t0):
        raise ValueError(f"Need finite t0 < t1; got t0={t0!r}, t1={t1!r}.")


def take_deprecated(where: str, kwargs: dict, replacements: dict[str, str]) -> dict:
    """The deprecated keywords of an entry point, each with a `DeprecationWarning` that
    names its replacement. `kwargs` is the entry point's `**deprecated`; `replacements`
    maps each old keyword to the words that say what to write instead. Any other keyword
    raises the `TypeError` Python would give (naming the entry point)."""
    unknown = sorted(set(kwargs) - set(replacements))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}.")
    for name in kwargs:
        warnings.warn(f"{where}({name}=...) is deprecated; {replacements[name]}.", DeprecationWarning, stacklevel=3)
    return dict(kwargs)
