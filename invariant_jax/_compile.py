"""How the single-flow programs (`gradient_flow`, `kink_aware_flow`) are compiled: with
XLA options chosen for the time a user waits on a first call. On CPU that is XLA's loop
emitters instead of its fusion emitters: the same mathematics, and a first call that is
never longer and often shorter (docs/solvers.md, "Compiler options", from
`benchmarks/results/first_calls.json`, `first_calls_one_cpu.json` and
`first_calls_busy.json`). The options are chosen at the first call, when the backend is
known, so importing the package initialises no backend."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = ["CPU_COMPILER_OPTIONS", "compiler_options", "quick_compile"]

CPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False}
"""XLA options of the single-flow programs on CPU. An option that `XLA_FLAGS` sets is
left to it, and one that this jaxlib does not know is left out."""


@functools.cache
def _known(name: str, value: Any) -> bool:
    # (an unknown option fails the compile: probe it once on a tiny program)
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(jnp.zeros(())).compile()
    except Exception:
        return False
    return True


def compiler_options() -> dict[str, Any]:
    """The options `quick_compile` programs get now: `CPU_COMPILER_OPTIONS` on a CPU
    backend, less those that `XLA_FLAGS` sets or this jaxlib does not know; none on
    other backends."""
    if jax.default_backend() != "cpu":
        return {}
    flags = os.environ.get("XLA_FLAGS", "")
    return {k: v for k, v in CPU_COMPILER_OPTIONS.items() if k not in flags and _known(k, v)}


def quick_compile(fn: Callable) -> Callable:
    """`eqx.filter_jit(fn)`, compiled with `compiler_options()` as they are at each call
    (one program per set of options). Like a filter-jitted function, it has `lower`.
    Called inside another trace (`jit`, `vmap`, a loop), it is part of that program,
    whose own options rule: JAX takes options at the top level only."""

    def jitted() -> Callable:
        return _jitted(fn, tuple(compiler_options().items()))

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
            return _jitted(fn, ())(*args, **kwargs)
        try:
            return jitted()(*args, **kwargs)
        except ValueError as e:  # (traced inside a program, on closed-over constants only)
            if "compiler_options" not in str(e):
                raise
            return _jitted(fn, ())(*args, **kwargs)

    call.lower = lambda *args, **kwargs: jitted().lower(*args, **kwargs)  # type: ignore[attr-defined]
    return call


@functools.cache
def _jitted(fn: Callable, options: tuple) -> Callable:
    # (filter_jit passes jax.jit's keywords on; its type stubs name `donate` only)
    return eqx.filter_jit(fn, compiler_options=dict(options) or None)  # type: ignore[call-overload]
