"""Option objects shared by every flow entry point (`gradient_flow`, `kink_aware_flow`,
`sweep_flows`, `SweepConfig`, the CLI), each validated once, on construction (in
`__check_init__`, as diffrax's `SaveAt` and `PIDController` are):

- `SolverOptions`: the solver, its tolerances, step budget and first step;
- `SaveTimes`: the times at which a flow is saved;
- `StopRules`: the early-stopping rules, with the one condition (`StopRules.hits`) that
  both the diffrax `Event` of `gradient_flow` and the sweep engine evaluate;
- `KinkOptions`: how the kink-aware flow locates and resolves kink events;
- `Objective`: what a flow or a training run minimizes (the data loss, weight decay and
  a regularizer), for `gradient_flow`, `sweep_flows` and `fit` alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._checks import check_integer, check_positive, check_time_span
from ._defaults import MAX_STEPS
from ._results import STOP_RESULTS, result_code
from .losses import get_loss
from .regularizers import get_regularizer
from .solvers import SOLVERS, StepRecovery, as_step_recovery, get_solver

__all__ = [
    "SolverOptions",
    "SaveTimes",
    "StopRules",
    "KinkOptions",
    "Objective",
    "as_objective",
    "as_solver_options",
    "as_save_times",
    "check_positive",
    "check_integer",
    "check_time_span",
    "log_times",
]


# ------------------------------------------------------------------ solver


class SolverOptions(eqx.Module):
    """How to integrate: solver, tolerances, step budget.

    **Fields:**

    - `solver`: a name in `ij.SOLVERS` (e.g. `"tsit5"`, `"gauss4"`) or a diffrax solver.
    - `rtol`, `atol`: tolerances of the step-size controller (positive; `rtol < 1`,
        since a relative tolerance of 1 accepts any error, and at least 10 machine
        epsilons of the state's dtype, checked by `check_dtype` when the data is known).
    - `max_steps`: diffrax's step budget (an integer >= 1).
    - `dt0`: the first step (`None`: chosen by diffrax).
    - `recovery`: None (default) for `diffrax.PIDController(rtol, atol)`; an
        `ij.StepRecovery(growth, horizon)`, or a number above 1 for `ij.StepRecovery(number)`,
        for `ij.RecoveringPIDController`, whose step size grows back by at most `growth` per
        accepted step after a failed step (an implicit stage solve that did not converge,
        or a non-finite error estimate). The flat-channels flow phase uses 1.5
        (`ij.FlowPhaseOptions`); on the authors' saddle-split runs at 1e-8, which grow
        their steps by decades to `t ~ 1e300`, it cost steps unless given a `horizon`
        (docs/solvers.md, "Steps after a failed stage solve").
    - `stepsize_controller`: replaces the default controller (the fields above).
    """

    solver: str | diffrax.AbstractSolver = "tsit5"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = MAX_STEPS
    dt0: float | None = None
    recovery: StepRecovery | None = eqx.field(default=None, converter=as_step_recovery)
    stepsize_controller: diffrax.AbstractStepSizeController | None = None

    def __check_init__(self):
        if isinstance(self.solver, str):
            if self.solver.lower() not in SOLVERS:
                raise ValueError(
                    f"Unknown solver {self.solver!r}; choose one of {sorted(SOLVERS)} or pass a diffrax solver."
                )
        elif not isinstance(self.solver, diffrax.AbstractSolver):
            raise TypeError(f"solver must be a name in ij.SOLVERS or a diffrax solver; got {self.solver!r}.")
        check_positive("rtol", self.rtol)
        if self.rtol >= 1:
            raise ValueError(
                f"rtol must be < 1 (a relative tolerance of 1 or more accepts any error, so every "
                f"step passes); got {self.rtol!r}. Use e.g. rtol=1e-8."
            )
        check_positive("atol", self.atol)
        check_integer("max_steps", self.max_steps, minimum=1)
        check_positive("dt0", self.dt0, allow_none=True)
        if self.stepsize_controller is not None and not isinstance(
            self.stepsize_controller, diffrax.AbstractStepSizeController
        ):
            raise TypeError(
                f"stepsize_controller must be a diffrax step-size controller; got {self.stepsize_controller!r}."
            )

    def check_dtype(self, dtype) -> None:
        """Raise `ValueError` if `rtol` is tighter than `dtype` can honour (10 eps)."""
        eps = float(jnp.finfo(dtype).eps)
        if self.rtol < 10 * eps:
            hint = " Enable float64 with jax.config.update('jax_enable_x64', True)." if eps > 1e-10 else ""
            raise ValueError(
                f"rtol={self.rtol:g} is tighter than {np.dtype(dtype).name} can honour (10 eps = "
                f"{10 * eps:.1e}). Loosen rtol.{hint}"
            )

    def get_solver(self) -> diffrax.AbstractSolver:
        """A fresh diffrax solver instance."""
        return get_solver(self.solver)

    def get_controller(self, dtype=None) -> diffrax.AbstractStepSizeController:
        """`stepsize_controller`, or `diffrax.PIDController(rtol, atol)`, or with a
        `recovery` `ij.RecoveringPIDController(rtol, atol)` with its settings. Given a `dtype`, the
        tolerances are arrays of it, so that a new tolerance compiles nothing."""
        if self.stepsize_controller is not None:
            return self.stepsize_controller
        rtol, atol = (
            (self.rtol, self.atol) if dtype is None else (jnp.asarray(self.rtol, dtype), jnp.asarray(self.atol, dtype))
        )
        if self.recovery is None:
            return diffrax.PIDController(rtol=rtol, atol=atol)
        return self.recovery.controller(rtol, atol)


# ------------------------------------------------------------------ save times


def log_times(t0: float, t1: float, n: int, *, first: float | None = None) -> np.ndarray:
    """`n` save times: `t0`, then `n - 1` log-spaced times from `t0 + first` to `t1`
    (`first` defaults to `(t1 - t0) * 1e-6`)."""
    if n < 2:
        raise ValueError(f"log_times needs n >= 2; got {n}.")
    first = (t1 - t0) * 1e-6 if first is None else first
    return np.concatenate([[t0], t0 + np.geomspace(first, t1 - t0, n - 1)])


def _traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


class SaveTimes(eqx.Module):
    """When a flow is saved.

    **Fields:**

    - `ts`: explicit save times (non-empty, 1-D, finite, non-decreasing; they must lie in
        `[t0, t1]` of the flow), or `None`. They may be a traced JAX array (under `jit` or
        `vmap`, e.g. times that depend on a run's own start); then only the shape is checked;
    - `n_save`: otherwise, the number of save times (an integer >= 2), from `t0` to `t1`,
    - `spacing`: spaced `"linear"` or `"log"` (see `log_times`).
    """

    ts: np.ndarray | Array | None = None
    n_save: int = 101
    spacing: str = "linear"

    def __init__(self, ts: ArrayLike | None = None, *, n_save: int = 101, spacing: str = "linear"):
        if ts is None or isinstance(ts, jax.core.Tracer):  # (isinstance: mypy narrows it)
            self.ts = ts
        else:
            self.ts = np.asarray(ts, dtype=float)
        self.n_save = n_save
        self.spacing = spacing

    def __check_init__(self):
        if self.ts is not None:
            if self.ts.ndim != 1 or self.ts.size == 0:
                raise ValueError(f"Save times must be a non-empty 1-D array; got shape {self.ts.shape}.")
            if not _traced(self.ts) and (not np.all(np.isfinite(self.ts)) or np.any(np.diff(self.ts) < 0)):
                raise ValueError("Save times must be finite and non-decreasing.")
        check_integer("n_save", self.n_save, minimum=2)
        if self.spacing not in ("linear", "log"):
            raise ValueError(f"spacing must be 'linear' or 'log'; got {self.spacing!r}.")

    def times(self, t0: float | Array, t1: float | Array) -> np.ndarray | Array:
        """The save times of a flow over `[t0, t1]` (float64 NumPy). Where `t0`, `t1` or
        `ts` are traced (under `jit` or `vmap`), a JAX array, unchecked (diffrax checks
        `t0 <= t1` at run time); log spacing then needs concrete `t0` and `t1`."""
        if _traced(t0) or _traced(t1) or _traced(self.ts):
            if self.ts is not None:
                return self.ts
            if self.spacing == "log":
                raise ValueError("Log-spaced save times need concrete t0 and t1; pass explicit ts instead.")
            return jnp.linspace(t0, t1, self.n_save)
        t0, t1 = float(t0), float(t1)
        check_time_span(t0, t1)
        if self.ts is None:
            return np.linspace(t0, t1, self.n_save) if self.spacing == "linear" else log_times(t0, t1, self.n_save)
        if self.ts.min() < t0 or self.ts.max() > t1:
            raise ValueError(f"Save times must lie within [t0, t1] = [{t0}, {t1}].")
        return self.ts


# ------------------------------------------------------------------ stopping rules

_CLOCK0 = time.monotonic()


def _clock() -> float:
    return time.monotonic() - _CLOCK0


class StopRules(eqx.Module):
    """Early-stopping rules (any one stops the flow; `None` disables a rule). A stop is a
    success, reported by its own `RESULTS` member (`stopped_grad_norm`, ...), and
    `t_final` is the end of the step at which the rule first held.

    **Fields:**

    - `grad_norm_tol`: stop once `||grad|| < grad_norm_tol` (the gradient of the loss and
        any regularizer, without weight decay).
    - `loss_floor`: stop once the data loss falls below it.
    - `max_param_norm`: stop once `||theta|| > max_param_norm` (e.g. a flow running off
        into a flat channel).
    - `max_wall_time`: stop after this many seconds of wall-clock time since the solve
        started, checked at every step by a host callback (`jax.pure_callback`), so it
        works under `jit` and `vmap` too.
    """

    grad_norm_tol: float | None = None
    loss_floor: float | None = None
    max_param_norm: float | None = None
    max_wall_time: float | None = None

    def __check_init__(self):
        for name in ("grad_norm_tol", "loss_floor", "max_param_norm", "max_wall_time"):
            check_positive(name, getattr(self, name), allow_none=True)

    @property
    def enabled(self) -> bool:
        """Whether any rule is set."""
        return any(v is not None for v in self._values())

    def _values(self):
        return (self.grad_norm_tol, self.loss_floor, self.max_param_norm, self.max_wall_time)

    def start_clock(self) -> Float[Array, ""] | None:
        """The clock reading at the start of a solve (a host callback, so it is read at
        run time, also under `jit`), for `hits`; `None` when `max_wall_time` is unset."""
        if self.max_wall_time is None:
            return None
        fdt = jnp.zeros(()).dtype  # float64 when x64 is on
        return jax.pure_callback(
            lambda: np.asarray(_clock(), fdt), jax.ShapeDtypeStruct((), fdt), vmap_method="broadcast_all"
        )

    def hits(
        self,
        t: Float[ArrayLike, ""],
        theta: Float[Array, " E"],
        *,
        gradient: Callable[[Array], Array],
        loss: Callable[[Array], Array],
        clock_start: Float[Array, ""] | None = None,
    ) -> Bool[Array, " 4"]:
        """Which rule holds at `(t, theta)`: one bool per field, in field order (`False`
        for unset rules, which are not evaluated). The one stopping condition: the
        diffrax `Event` of `gradient_flow` stops on `any(hits)`, and so does the sweep
        engine after each step.

        **Arguments:**

        - `t`, `theta`: time and edge weights.
        - `gradient`: `theta -> ` the gradient whose norm `grad_norm_tol` bounds.
        - `loss`: `theta -> ` the data loss that `loss_floor` bounds.
        - `clock_start`: from `start_clock()`; `None` leaves the wall-time rule `False`.
        """
        f = jnp.asarray(False)
        hit = [f, f, f, f]
        if self.grad_norm_tol is not None:
            hit[0] = jnp.linalg.norm(gradient(theta)) < self.grad_norm_tol
        if self.loss_floor is not None:
            hit[1] = loss(theta) < self.loss_floor
        if self.max_param_norm is not None:
            hit[2] = jnp.linalg.norm(theta) > self.max_param_norm
        if self.max_wall_time is not None and clock_start is not None:
            limit = self.max_wall_time

            def over(t_, s):
                return np.asarray(_clock() - np.asarray(s) > limit)

            # `t` is an operand so that the callback is not hoisted out of the step loop
            hit[3] = jax.pure_callback(
                over, jax.ShapeDtypeStruct(jnp.shape(t), jnp.bool_), t, clock_start, vmap_method="broadcast_all"
            )
        return jnp.stack([jnp.asarray(h, bool) for h in hit])

    @staticmethod
    def result_code(hits: Bool[Array, " 4"], otherwise: Int[ArrayLike, ""]) -> Int[Array, ""]:
        """The `RESULTS` code of the first rule that holds in `hits`, else `otherwise`."""
        codes = jnp.asarray([int(result_code(r)) for r in STOP_RESULTS], jnp.int32)
        return jnp.where(jnp.any(hits), codes[jnp.argmax(hits)], jnp.asarray(otherwise, jnp.int32))


# ------------------------------------------------------------------ kink events


class KinkOptions(eqx.Module):
    """How `kink_aware_flow` (and a kink-aware sweep) locates and resolves the events
    where an activation pattern changes.

    **Fields:**

    - `max_events`: cap on located events per trajectory (an integer >= 1; each restart
        is one); hitting it sets the `KinkFlow`'s `result` to
        `RESULTS.max_events_reached`.
    - `max_sliding`: most (sample, node) pairs that may slide at once (an integer >= 0;
        static: the size of the slot arrays). Each pair *actually* sliding costs one
        gradient and one JVP of the pre-activations per field evaluation (coupled pairs,
        one upstream of the other on one sample, about twice that per Newton step);
        empty slots cost nothing. 0 disables sliding (the trajectory then crosses back
        and forth, counted as ambiguous events).
    - `event_tol`: absolute tolerance, in time, of the root finder that locates events
        (positive).
    - `surface_tol`: pre-activations (relative to `max |z|`) and sliding weights within
        this of 0 at an event count as on their surface (positive).
    """

    max_events: int = 1_000
    max_sliding: int = 16
    event_tol: float = 1e-13
    surface_tol: float = 1e-9

    def __check_init__(self):
        check_integer("max_events", self.max_events, minimum=1)
        check_integer("max_sliding", self.max_sliding, minimum=0)
        check_positive("event_tol", self.event_tol)
        check_positive("surface_tol", self.surface_tol)


# ------------------------------------------------------------------ objective


class Objective(eqx.Module):
    """What a flow or a training run minimizes:
    `L(theta) + (weight_decay / 2) ||theta||^2 + strength * R(net)`.

    **Fields:**

    - `loss`: the data loss `L`, a name (`"mse"`, `"bce"`) or a callable
        `(pred, Y) -> scalar`.
    - `weight_decay`: `lambda >= 0` of the penalty `(lambda / 2) ||theta||^2`. With it
        the conserved quantities decay exactly as `c(t) = c(0) exp(-2 lambda t)`.
    - `regularizer`: an extra penalty `R(net)`, a name in `ij.regularizers.REGULARIZERS`
        (`"nuclear"`, `"l1"`, `"l2"`, `"group_lasso"`) or a callable `net -> scalar`;
        `None` for none. With one (and `strength > 0`) no conservation law holds.
    - `strength`: the weight `>= 0` of `regularizer`.

    Entry points take `loss=` as a name, a callable or an `Objective`; a name or callable
    means `Objective(loss)`.
    """

    loss: str | Callable = "mse"
    weight_decay: float = 0.0
    regularizer: str | Callable | None = None
    strength: float = 0.0

    def __check_init__(self):
        get_loss(self.loss)
        check_positive("weight_decay", self.weight_decay, allow_zero=True)
        check_positive("strength", self.strength, allow_zero=True)
        if self.regularizer is not None:
            get_regularizer(self.regularizer)
        elif self.strength != 0:
            raise ValueError(
                f"Objective(strength={self.strength!r}) needs a regularizer; pass "
                "regularizer='nuclear' (or another name, or a callable), or strength=0."
            )

    @property
    def regularized(self) -> bool:
        """Whether a regularizer term is present (`regularizer` given and `strength > 0`)."""
        return self.regularizer is not None and self.strength != 0


# ------------------------------------------------------------------ thin keywords


def as_objective(loss: str | Callable | Objective, **deprecated) -> Objective:
    """The `Objective` of an entry point's `loss` keyword (a name, a callable or an
    `Objective`), with the deprecated `weight_decay`, `regularizer` and `strength`
    keywords (already warned about by `take_deprecated`) folded in. They go only with a
    loss name or callable."""
    if isinstance(loss, Objective):
        if deprecated:
            raise ValueError(f"Pass {', '.join(sorted(deprecated))} inside Objective(...), not as keywords as well.")
        return loss
    return Objective(loss, **deprecated)


OBJECTIVE_KEYWORDS = {
    name: f"pass loss=ij.Objective(loss, {name}=...) instead" for name in ("weight_decay", "regularizer", "strength")
}
"""The `take_deprecated` replacements of the objective's old thin keywords."""


def as_solver_options(
    solver: str | diffrax.AbstractSolver | SolverOptions,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = MAX_STEPS,
) -> SolverOptions:
    """The `SolverOptions` of an entry point's `solver`, `rtol`, `atol` keywords: a
    `SolverOptions` is used as is (then `rtol`/`atol` must be `None`); a solver name or
    instance gets `rtol`/`atol` (default 1e-8) and `max_steps`."""
    if isinstance(solver, SolverOptions):
        if rtol is not None or atol is not None:
            raise ValueError("Pass rtol/atol inside SolverOptions(...) or as keywords next to a solver name, not both.")
        return solver
    return SolverOptions(
        solver, rtol=1e-8 if rtol is None else rtol, atol=1e-8 if atol is None else atol, max_steps=max_steps
    )


def as_save_times(saveat: SaveTimes | ArrayLike | None = None, n_save: int | None = None) -> SaveTimes:
    """The `SaveTimes` of an entry point's `saveat`, `n_save` keywords: a `SaveTimes` is
    used as is; an array is explicit save times; otherwise `n_save` (default 101)
    linearly spaced times. `n_save` only goes with `saveat=None`."""
    if saveat is None:
        return SaveTimes(n_save=101 if n_save is None else n_save)
    if n_save is not None:
        raise ValueError("Pass either saveat or n_save, not both (SaveTimes(n_save=...) holds both).")
    return saveat if isinstance(saveat, SaveTimes) else SaveTimes(saveat)
