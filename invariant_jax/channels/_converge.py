"""The second-order convergence phase after a flow: trust-region Newton with the exact
Hessian, batched over many initializations; and `flow_then_newton`, MLPGradientFlow.jl's
`train` (the tool the flat-channels paper used): an ODE phase, then the Newton phase.

The ODE phase follows MLPGradientFlow by default (`flow_stop="penalty"`): gradient flow
on the loss plus MLPGradientFlow's soft, cubic `maxnorm` penalty
(`ij.channels.maxnorm_penalty`: theirs is `(nx - maxnorm)^3/3 * n_samples(net)` added
to `sum (f - y)^2`, with `nx = weightnorm`), so a flow can reach `maxnorm` and hover
there, under a budget in flow time (`t1`) and wall time (`flow_wall_time`) rather than
in steps. The hover is a separate solve from the first step past `maxnorm`, with its own
budget of `hover_steps` solver steps: there the implicit stages converge slowly (see
`FlowPhaseOptions`). Every run records whether the ODE
phase alone passed `maxnorm` (the paper's Fig. 4 criterion reads the ODE phase's end),
a log-spaced `TrajectoryRecord` of the flow, and at its final point the converged
gradient inf-norm and the minimum Hessian eigenvalue (a minimum has it >= 0, a saddle
< 0). `flow_stop="stop"` is the earlier scheme: no penalty, the flow stops where
`weightnorm` reaches `maxnorm`.

The Newton phase is optimistix's (`ClassicalTrustRegion` search, `DampedNewtonDescent`:
`(H + lambda I) p = -g` with `lambda = 1/radius`, i.e. Levenberg-Marquardt-damped
Newton), fed the exact Hessian of the loss from `ij.losses.hessian_fn` (assembled from
the network's structure for one-hidden-layer MSE networks, `jax.hessian` otherwise),
with its eigenvalues replaced by their absolute values (a convex model, so every
accepted step descends; the paper's optimiser, Optim.jl's `Newton`, likewise makes the
Hessian positive definite before each step). Its options are one `NewtonOptions`, the
flow phase's one `FlowPhaseOptions`. Nothing of the optimiser is hand-written here, only
the stopping rules, each an `ij.RESULTS` member (`ConvergeResult.result`; the old names
that study records store, the keys of `NEWTON_RESULTS`, map to them by `newton_result`):

- `stopped_g_tol` (`"gradient"`): `max |grad L| <= g_tol` (default 1e-12; the paper's
  MLPGradientFlow default `min_gnorm` is 1e-15);
- `stopped_patience` (`"patience"`): the best loss has not improved for `patience`
  iterations;
- `stopped_weightnorm` (`"maxnorm"`): `weightnorm(theta) = sum(theta^2) / (2 len(theta))
  >= maxnorm` (MLPGradientFlow's definition; the paper counts such a run "infinite").
  MLPGradientFlow keeps the penalty in its Newton phase instead of stopping there;
- `max_steps_reached` (`"max_steps"`), `newton_max_time` (`"max_time"`; wall clock,
  checked between chunks of iterations): budgets, failures;
- `nonfinite_state` (`"nonfinite"`): a non-finite loss or gradient.

Every run returns its best point (lowest loss seen), as MLPGradientFlow does. Losses
use this package's convention `L = (1/2N) sum ||f - y||^2`; MLPGradientFlow reports
`(1/N) sum ||f - y||^2 = 2 L`, and its ODE time is ours divided by `2N`.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import Array, Bool, Float, Int

from .._checks import check_integer, check_positive, take_deprecated
from .._defaults import MAX_STEPS
from .._results import RESULTS, is_success, result_code, result_from_code, result_name, result_where, status_code
from ..flow import gradient_flow
from ..losses import check_data, edge_loss_fn, hessian_fn
from ..network import DAGNetwork
from ..options import Objective, SaveTimes, SolverOptions, StopRules, log_times
from ..solvers import SOLVERS, StepRecovery, as_step_recovery
from ..sweep import BatchOptions, sweep_flows
from ._flow_phase import (
    MaxnormPenalty,
    TrajectoryRecord,
    closest_pair_distance,
    maxnorm_penalty,
    min_hessian_eigenvalue,
    penalty_strength,
    weightnorm,
)

__all__ = [
    "NewtonOptions",
    "FlowPhaseOptions",
    "ConvergeResult",
    "FlowPhaseResult",
    "newton_phase",
    "flow_phase",
    "flow_then_newton",
    "NEWTON_RESULTS",
    "newton_result",
    "newton_reason",
    "FLOW_STOPS",
    "FLOW_ENGINES",
    "NEWTON_KEYWORDS",
    "FLOW_KEYWORDS",
    "with_fields",
    "with_flow_fields",
    "weightnorm",
    "maxnorm_penalty",
    "MaxnormPenalty",
    "closest_pair_distance",
    "min_hessian_eigenvalue",
    "TrajectoryRecord",
]

# The names study records (`ConvergenceStudy.records["stopped_by"]`) and older JSON files
# store; `ConvergeResult.result` (an `ij.RESULTS` item per run) is the record of truth,
# `newton_result` maps these names to it and `newton_reason` back. `STOP_REASONS`, the
# public tuple of them, is deprecated (served, with a warning, only by the alias module
# `invariant_jax.converge`).
_STOP_NAMES = ("running", "gradient", "patience", "maxnorm", "max_steps", "max_time", "nonfinite")
_RUNNING, _GRAD, _PATIENCE, _MAXNORM, _MAXSTEPS, _MAXTIME, _NONFINITE = range(7)

NEWTON_RESULTS = {
    "running": RESULTS.newton_unfinished,
    "gradient": RESULTS.stopped_g_tol,
    "patience": RESULTS.stopped_patience,
    "maxnorm": RESULTS.stopped_weightnorm,
    "max_steps": RESULTS.max_steps_reached,
    "max_time": RESULTS.newton_max_time,
    "nonfinite": RESULTS.nonfinite_state,
}
"""The `ij.RESULTS` member of each old stop-reason name (as study records store them): `stopped_g_tol`,
`stopped_patience` and `stopped_weightnorm` are successes (a converged finite point, a run
stuck at its best loss, a run counted infinite); `max_steps_reached` and
`newton_max_time` are budgets (failures: raise `max_steps` / `max_time`),
`nonfinite_state` a failure; `newton_unfinished` never ends a run (a run still running
when read)."""
_REASON_CODES = np.asarray([int(result_code(NEWTON_RESULTS[r])) for r in _STOP_NAMES], np.int32)


FLOW_STOPS = ("penalty", "unscaled_penalty", "stop")
"""How `flow_then_newton`'s ODE phase treats `maxnorm`: `"penalty"` (MLPGradientFlow's
soft cubic penalty, its current form with `n_samples`; the flow goes on),
`"unscaled_penalty"` (its earlier form, without `n_samples`, which the authors' committed
Fig. 2(c, d) runs follow: `penalty_strength`) or `"stop"` (no penalty; stop at `maxnorm`)."""

FLOW_ENGINES = ("loop", "vmap", "sweep")
"""How the ODE phase runs its batch (`FlowPhaseOptions.engine`)."""


def newton_result(names) -> RESULTS:
    """The `ij.RESULTS` item(s) of old stop-reason names (a name, or a sequence of them, as
    `ConvergenceStudy.records["stopped_by"]` and older study JSON files store them)."""
    arr = np.asarray(names, dtype=object)
    bad = sorted({str(n) for n in arr.ravel() if n not in NEWTON_RESULTS})
    if bad:
        raise ValueError(f"Unknown Newton stop reason(s) {bad}; expected names from {list(NEWTON_RESULTS)}.")
    table = {k: int(result_code(v)) for k, v in NEWTON_RESULTS.items()}
    return result_from_code(np.vectorize(table.__getitem__, otypes=[np.int32])(arr) if arr.ndim else table[arr.item()])


def _reason_index(result) -> np.ndarray:
    code = np.asarray(result_code(result))
    idx = np.argmax(code[..., None] == _REASON_CODES, axis=-1)
    if not np.all(_REASON_CODES[idx] == code):
        raise ValueError(f"Not a Newton-phase result: {sorted(set(np.atleast_1d(result_name(result)).tolist()))}.")
    return idx


def newton_reason(result) -> tuple[str, ...]:
    """The old stop-reason names (the keys of `NEWTON_RESULTS`) of a batch of Newton-phase results (the
    inverse of `newton_result`), as study records store them."""
    return tuple(_STOP_NAMES[int(k)] for k in np.atleast_1d(_reason_index(result)))


class NewtonOptions(eqx.Module):
    """Options of the Newton phase (`newton_phase`, `flow_then_newton`, the studies),
    validated once.

    **Fields:**

    - `maxnorm`: stop a run once `weightnorm(theta) >= maxnorm` (default 1e3, the paper's;
        `inf`: never). `flow_then_newton`'s ODE phase uses the same `maxnorm`.
    - `g_tol`: stop once `max |grad L| <= g_tol` (default 1e-12; MLPGradientFlow's
        `min_gnorm` is 1e-15, below what float64 Hessian solves reach on these nets).
    - `patience`: stop once the best loss has not improved (by more than `rel_improve`,
        relative) for this many iterations (default 100; MLPGradientFlow counts loss
        evaluations, default 10^6 in `train`).
    - `rel_improve`: default 1e-12.
    - `max_steps`: Newton iterations per run (default 2000).
    - `max_time`: wall-clock seconds for the whole batch (default inf), checked every
        `chunk` iterations (default 50); runs not finished or not started by then stop
        with `RESULTS.newton_max_time`.
    - `batch_size`: runs advanced together (one vmapped program of `batch_size` slots);
        a slot whose run stops takes the next run (continuous batching), so no run waits
        for a slower one. `None`: 1 on CPU, all runs on an accelerator.
    """

    maxnorm: float = 1e3
    g_tol: float = 1e-12
    patience: int = 100
    rel_improve: float = 1e-12
    max_steps: int = 2000
    max_time: float = np.inf
    chunk: int = 50
    batch_size: int | None = None

    def __check_init__(self):
        check_positive("maxnorm", self.maxnorm, allow_inf=True)
        check_positive("g_tol", self.g_tol)
        check_positive("rel_improve", self.rel_improve)
        check_positive("max_time", self.max_time, allow_inf=True)
        for name in ("patience", "max_steps", "chunk"):
            check_integer(name, getattr(self, name), minimum=1)
        if self.batch_size is not None:
            check_integer("batch_size", self.batch_size, minimum=1)

    def settings(self) -> dict:
        """The options as plain numbers (for `ConvergeResult.settings` and JSON)."""
        return dict(
            maxnorm=float(self.maxnorm),
            g_tol=float(self.g_tol),
            patience=int(self.patience),
            rel_improve=float(self.rel_improve),
            max_steps=int(self.max_steps),
            max_time=float(self.max_time),
            chunk=int(self.chunk),
        )


class FlowPhaseOptions(eqx.Module):
    """Options of `flow_then_newton`'s gradient-flow ("ODE") phase, validated once.

    **Fields:**

    - `t1`: the flow-time budget (gradient-flow time of `L = (1/2N) sum (f - y)^2`;
        default 1e12: an implicit solver's steps grow geometrically near a minimum or
        along a channel, so a large `t1` costs few steps).
    - `solver`, `rtol`, `atol`: the solver (a name in `ij.SOLVERS`; default
        `"kvaerno5_newton"`, Kvaerno5 with a Newton stage solve: diffrax's default chord
        solve fails on many steps along a channel and crawls, see
        `ij.newton_kvaerno5`; the paper used KenCarp58) and its tolerances
        (default 1e-3, 1e-6, the paper's).
    - `recovery`: how the step size grows back after a failed step
        (`ij.StepRecovery(growth, horizon)`, or a number for its `growth`, for
        `ij.RecoveringPIDController`; default `StepRecovery(1.5)`, no horizon; None:
        `diffrax.PIDController`, the default of `ij.SolverOptions`). Along a channel the
        step size is bounded by where the stage solves converge; growing back by
        `PIDController`'s 10 at once, 88 of the 164 steps of study run r = 5, seed 2 failed
        (docs/solvers.md, "Steps after a failed stage solve").
    - `max_flow_steps`: solver steps per run, a backstop (default 100 000).
    - `flow_wall_time`: wall-clock seconds per run (default inf; the paper gives up to 2 h).
    - `flow_stop`: `"penalty"` (default, the paper's way: MLPGradientFlow's soft `maxnorm`
        penalty, `maxnorm_penalty`, is added to the loss and the flow goes on, so it can
        reach `maxnorm` and hover there), `"unscaled_penalty"` (the penalty's earlier form,
        without `n_samples`: `1/N` of it, so the flow hovers higher above `maxnorm`; the
        form of the authors' committed Fig. 2(c, d) runs) or `"stop"` (no penalty; the flow stops once
        `weightnorm >= maxnorm`).
    - `hover_steps`: with a penalty (`flow_stop` not `"stop"`), the solver steps the flow goes on for
        after the first step that ends past `maxnorm` (default 100; 0: none, the flow
        ends there). `t1` still bounds it; `flow_wall_time` bounds the flow before the
        passage only. Why a separate budget: the penalty's gradient vanishes
        quadratically at `maxnorm`, so where the flow hovers (just above it) Newton's
        iteration on an implicit stage halves its step instead of converging
        quadratically. With diffrax's stage solves (10 iterations, `atol` in `f`) about
        half the steps were rejected and a hover with no budget of its own spent the
        whole flow budget there. `"kvaerno5_newton"` (stages to the step's tolerance in
        `y`, up to 30 iterations) reached `t1 = 1e12` within 16 to 39 hover steps on the
        four runs measured (docs/channels.md, "Hovering at maxnorm";
        `benchmarks/channels_hover.py`).
    - `n_record`: rows of the log-spaced `TrajectoryRecord` (0: none, else >= 2; default
        41). The `"sweep"` engine records none.
    - `engine`: `"loop"` runs one compiled program of batch 1 on one run at a time (each
        run pays for itself: the fastest on a CPU); `"vmap"` runs one `eqx.filter_vmap` of
        `gradient_flow` (every run pays for the slowest: suits an accelerator); `"sweep"`
        flows through `ij.sweep_flows` (continuous batching; `flow_stop="stop"` only).
        `None` (default): `"loop"` on a CPU, `"vmap"` on an accelerator.
    - `batch`: the `"sweep"` engine's `ij.sweep.BatchOptions` (slots, exact or vmap mode,
        devices, progress; default `None`: `ij.sweep.BatchOptions()`). Its `slots=None` means as
        many slots as runs, at most 256.
    """

    t1: float = 1e12
    solver: str = "kvaerno5_newton"
    rtol: float = 1e-3
    atol: float = 1e-6
    recovery: StepRecovery | None = eqx.field(default=StepRecovery(1.5), converter=as_step_recovery)
    max_flow_steps: int = MAX_STEPS
    flow_wall_time: float = np.inf
    flow_stop: str = "penalty"
    hover_steps: int = 100
    n_record: int = 41
    batch: BatchOptions | None = None
    engine: str | None = None

    def __check_init__(self):
        check_positive("t1", self.t1)
        if not isinstance(self.solver, str) or self.solver.lower() not in SOLVERS:
            raise ValueError(f"solver must be a name in ij.SOLVERS, e.g. 'kvaerno5'; got {self.solver!r}.")
        check_positive("rtol", self.rtol)
        check_positive("atol", self.atol)
        check_integer("max_flow_steps", self.max_flow_steps, minimum=1)
        check_positive("flow_wall_time", self.flow_wall_time, allow_inf=True)
        if self.flow_stop not in FLOW_STOPS:
            raise ValueError(f"flow_stop must be one of {FLOW_STOPS}; got {self.flow_stop!r}.")
        check_integer("hover_steps", self.hover_steps, minimum=0)
        check_integer("n_record", self.n_record, minimum=0)
        if self.n_record == 1:
            raise ValueError("n_record must be 0 (no record) or an integer >= 2; got 1.")
        if self.batch is not None and not isinstance(self.batch, BatchOptions):
            raise TypeError(f"batch must be an ij.sweep.BatchOptions or None; got {type(self.batch).__name__}.")
        if self.engine is not None and self.engine not in FLOW_ENGINES:
            raise ValueError(f"engine must be one of {FLOW_ENGINES} or None; got {self.engine!r}.")
        if self.engine == "sweep" and self.flow_stop != "stop":
            raise ValueError(
                "engine='sweep' cannot add the maxnorm penalty (ij.sweep_flows takes no regularizer); "
                "use engine='loop' or 'vmap', or flow_stop='stop'."
            )

    def resolved_engine(self) -> str:
        """`engine`, with `None` resolved for the default backend."""
        return self.engine or ("loop" if jax.default_backend() == "cpu" else "vmap")


_NEWTON_FIELDS = tuple(f.name for f in dataclasses.fields(NewtonOptions))
_FLOW_FIELDS = tuple(f.name for f in dataclasses.fields(FlowPhaseOptions))


NEWTON_KEYWORDS = {k: f"pass options=ij.NewtonOptions({k}=...) instead" for k in _NEWTON_FIELDS}
"""The `take_deprecated` replacements of `newton_phase`'s old thin keywords."""

_BATCH_KEYWORDS = ("slots", "exact")
FLOW_KEYWORDS = {
    **{k: f"pass flow=ij.FlowPhaseOptions({k}=...) instead" for k in _FLOW_FIELDS if k != "batch"},
    **{k: f"pass flow=ij.FlowPhaseOptions(batch=ij.sweep.BatchOptions({k}=...)) instead" for k in _BATCH_KEYWORDS},
}
"""The `take_deprecated` replacements of the old flow-phase keywords (`flow_then_newton`, the
studies)."""


def with_flow_fields(flow: FlowPhaseOptions | None, given: dict) -> FlowPhaseOptions:
    """`with_fields` for `FlowPhaseOptions`, where the old keywords `slots` and `exact`
    (`slots=None`: not given) go into its `batch`."""
    given = dict(given)
    old = {k: given.pop(k) for k in _BATCH_KEYWORDS if k in given}
    old = {k: v for k, v in old.items() if v is not None or k == "exact"}
    flow = with_fields(flow, FlowPhaseOptions, given, "flow")
    if not old:
        return flow
    batch = BatchOptions() if flow.batch is None else flow.batch
    return dataclasses.replace(flow, batch=dataclasses.replace(batch, **old))


def with_fields(options, cls, given: dict, name: str):
    """`options` (a `cls`, or None for `cls()`) with the fields in `given` (old keywords,
    already warned about by `take_deprecated`) replaced; a `None` value means "not given",
    except for the fields whose default is `None` (`engine`, `batch`, `batch_size`)."""
    if options is None:
        options = cls()
    elif not isinstance(options, cls):
        raise TypeError(f"{name} must be a {cls.__name__}; got {type(options).__name__}.")
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    given = {k: v for k, v in given.items() if v is not None or defaults[k] is None}
    return dataclasses.replace(options, **given) if given else options


class ConvergeResult(eqx.Module):
    """Result of `newton_phase` / `flow_then_newton`; arrays have a leading batch axis.

    **Fields:**

    - `theta`: the best point of each run (edge weights, `graph.edges` order);
    - `loss`: `L(theta)` (`(1/2N) sum ||f - y||^2`); `grad_norm`: `max |grad L|`;
    - `weightnorm`: `sum(theta^2) / (2 E)`; `n_steps`: Newton iterations;
    - `result`: why each run stopped, an `ij.RESULTS` item per run (`ij.result_name`
      names them, `ij.result_message` says the fix): `stopped_g_tol`, `stopped_patience`,
      `stopped_weightnorm` (successes), `max_steps_reached`, `newton_max_time`,
      `nonfinite_state` (failures); `success` tells them apart;
    - `theta_flow`, `loss_flow`, `t_flow`, `flow_status` (sweep status codes, see
      `ij.sweep.STATUSES`): the state after the flow phase (equal to the start of the
      Newton phase; NaN / -1 when there was no flow phase);
    - `min_eig`: the smallest eigenvalue of the data loss's Hessian at `theta` (< 0: a
      saddle; about 0 or above: a minimum, or a point along a channel);
    - `weightnorm_flow_max`: the largest `weightnorm` the ODE phase reached (over its
      saved times, its first step end past `maxnorm` and its end; NaN without a flow
      phase); `passed_maxnorm_ode`: whether it reached `maxnorm` (the ODE phase alone,
      before Newton);
    - `trajectory`: a `TrajectoryRecord` of the ODE phase (`(B, K)` arrays, log-spaced
      in time; all NaN without a flow phase); `flow_steps`: the ODE phase's solver steps
      (-1 when not known: no flow phase, or the sweep engine);
    - `wall_time`: seconds of the Newton phase (all runs together, compilation
      included); `settings`: the options used.
    """

    theta: Float[Array, "B E"]
    loss: Float[Array, " B"]
    grad_norm: Float[Array, " B"]
    weightnorm: Float[Array, " B"]
    n_steps: Int[Array, " B"]
    result: RESULTS
    theta_flow: Float[Array, "B E"]
    loss_flow: Float[Array, " B"]
    t_flow: Float[Array, " B"]
    flow_status: Int[Array, " B"]
    min_eig: Float[Array, " B"]
    weightnorm_flow_max: Float[Array, " B"]
    passed_maxnorm_ode: Bool[Array, " B"]
    trajectory: TrajectoryRecord
    flow_steps: Int[Array, " B"]
    wall_time: float
    settings: dict = eqx.field(static=True)

    @property
    def success(self) -> Bool[Array, " B"]:
        """Per run: stopped by a rule (gradient, patience, `maxnorm`), not by a budget
        (`max_steps`, `max_time`) or a non-finite state."""
        return is_success(self.result)

    @property
    def stopped_by(self) -> Int[Array, " B"]:
        """Deprecated: the index of each run's reason in the keys of `NEWTON_RESULTS`; use `result`."""
        warnings.warn(
            "ConvergeResult.stopped_by is deprecated; use .result (ij.RESULTS items, named by ij.result_name).",
            DeprecationWarning,
            stacklevel=2,
        )
        return jnp.asarray(_reason_index(self.result))

    @property
    def reason(self) -> tuple[str, ...]:
        """Deprecated: the old stop-reason names (the keys of `NEWTON_RESULTS`); use `result`."""
        warnings.warn(
            "ConvergeResult.reason is deprecated; use .result (ij.result_name(res.result) names it).",
            DeprecationWarning,
            stacklevel=2,
        )
        return newton_reason(self.result)

    @property
    def infinite_ode(self) -> Bool[Array, " B"]:
        """The authors' Fig. 4 norm criterion: the ODE phase alone reached `maxnorm`."""
        return self.passed_maxnorm_ode

    @property
    def infinite(self) -> Bool[Array, " B"]:
        """The paper's criterion: `weightnorm >= maxnorm`."""
        return self.weightnorm >= self.settings["maxnorm"]

    def table(self) -> str:
        names = np.asarray(result_name(self.result)).reshape(-1)
        rows = [f"{'result':>18} {'runs':>5} {'median loss':>12} {'median steps':>12}"]
        for r in dict.fromkeys(result_name(NEWTON_RESULTS[k]) for k in _STOP_NAMES):
            m = names == r
            if m.any():
                rows.append(
                    f"{r:>18} {int(m.sum()):>5} {np.median(np.asarray(self.loss)[m]):>12.4e} "
                    f"{np.median(np.asarray(self.n_steps)[m]):>12.0f}"
                )
        return "\n".join(rows)


class _ExactNewton(optx.AbstractQuasiNewton):
    """optimistix's quasi-Newton machinery with the quasi-Newton update replaced by the
    exact Hessian (`hess_fn`)."""

    # optimistix's abstract fields; mypy reads a default into the parent's `AbstractVar`s
    rtol: float
    atol: float
    norm: Callable
    descent: optx.DampedNewtonDescent  # type: ignore[misc]
    search: optx.ClassicalTrustRegion  # type: ignore[misc]
    verbose: Callable  # type: ignore[misc]
    hess_fn: Callable  # type: ignore[misc]
    use_inverse: bool = False

    def init_hessian(self, y, f, grad):
        H = lx.MatrixLinearOperator(jnp.zeros((y.size, y.size), y.dtype), lx.positive_semidefinite_tag)
        return optx.FunctionInfo.EvalGradHessian(f, grad, H), None

    def update_hessian(self, y, y_eval, f_info, f_eval_info, hessian_update_state):
        # as Optim.jl's Newton (PositiveFactorizations) in MLPGradientFlow, make the model
        # convex: |eigenvalues| ("saddle-free Newton"), so every step is a descent step
        lam, V = jnp.linalg.eigh(self.hess_fn(y_eval))
        H = lx.MatrixLinearOperator((V * jnp.abs(lam)) @ V.T, lx.positive_semidefinite_tag)
        return optx.FunctionInfo.EvalGradHessian(f_eval_info.f, f_eval_info.grad, H), None


def _solver(hess_fn):
    return _ExactNewton(
        rtol=0.0,
        atol=0.0,
        norm=optx.max_norm,
        verbose=lambda **kw: None,
        hess_fn=hess_fn,
        descent=optx.DampedNewtonDescent(linear_solver=lx.AutoLinearSolver(well_posed=False)),
        search=optx.ClassicalTrustRegion(),
    )


class _Run(eqx.Module):
    y: Array
    state: eqx.Module
    best_y: Array
    best_f: Array
    best_k: Array
    k: Array
    reason: Array


def _problem(net, X, Y, loss):
    L = edge_loss_fn(net, X, Y, loss)
    return (lambda y, args: (L(y), None)), hessian_fn(net, X, Y, loss)


@eqx.filter_jit
def _start(net, X, Y, theta0, loss):
    fn, hess = _problem(net, X, Y, loss)
    solver = _solver(hess)
    f_struct = jax.ShapeDtypeStruct((), theta0.dtype)

    def one(y0):
        state = solver.init(fn, y0, None, {}, f_struct, None, frozenset())
        return _Run(
            y=y0,
            state=state,
            best_y=y0,
            best_f=jnp.asarray(jnp.inf, y0.dtype),
            best_k=jnp.array(0),
            k=jnp.array(0),
            reason=jnp.array(_RUNNING),
        )

    return jax.vmap(one)(theta0)


@eqx.filter_jit
def _advance(net, X, Y, runs, n_iter, loss, g_tol, patience, maxnorm, max_steps, rel_improve):
    fn, hess = _problem(net, X, Y, loss)
    solver = _solver(hess)

    def one(run):
        def cond(c):
            r, i = c
            return (i < n_iter) & (r.reason == _RUNNING)

        def body(c):
            r, i = c
            y, state, _ = solver.step(fn, r.y, None, {}, r.state, frozenset())
            info = state.f_info  # at the last accepted point y
            f, g = info.f, info.grad
            k = r.k + 1
            finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(g)) & jnp.all(jnp.isfinite(y))
            better = finite & ((r.k == 0) | (f < r.best_f - rel_improve * jnp.abs(r.best_f)))
            best_y = jnp.where(better, y, r.best_y)
            best_f = jnp.where(better, f, r.best_f)
            best_k = jnp.where(better, k, r.best_k)
            wn = jnp.sum(y**2) / (2 * y.size)
            gmax = jnp.max(jnp.abs(g))
            reason = jnp.where(
                ~finite,
                _NONFINITE,
                jnp.where(
                    wn >= maxnorm,
                    _MAXNORM,
                    jnp.where(
                        (k > 1) & (gmax <= g_tol),
                        _GRAD,
                        jnp.where(k - best_k > patience, _PATIENCE, jnp.where(k >= max_steps, _MAXSTEPS, _RUNNING)),
                    ),
                ),
            )
            # a run that leaves through maxnorm keeps its last point (it is past the norm)
            best_y = jnp.where(reason == _MAXNORM, y, best_y)
            best_f = jnp.where(reason == _MAXNORM, f, best_f)
            return _Run(y=y, state=state, best_y=best_y, best_f=best_f, best_k=best_k, k=k, reason=reason), i + 1

        return jax.lax.while_loop(cond, body, (run, jnp.array(0)))[0]

    return jax.vmap(one)(runs)


@eqx.filter_jit
def _measure(net, X, Y, theta, loss):
    L = edge_loss_fn(net, X, Y, loss)
    f, g = jax.vmap(jax.value_and_grad(L))(theta)
    lam = min_hessian_eigenvalue(jax.vmap(hessian_fn(net, X, Y, loss))(theta))
    return f, jnp.max(jnp.abs(g), axis=-1), lam


def newton_phase(
    nets: DAGNetwork,
    X,
    Y,
    *,
    loss="mse",
    options: NewtonOptions | None = None,
    progress: bool = False,
    **deprecated,
) -> ConvergeResult:
    """Trust-region Newton with the exact Hessian from every network of a batch.

    **Arguments:**

    - `nets`: a batch of `DAGNetwork`s of one graph (leading axis on `weights`, e.g.
        from `eqx.filter_vmap`), or one network. Smooth activations only (the Hessian).
    - `X`, `Y`: the data; `loss`: `"mse"` (default) or a callable `(pred, Y) -> scalar`.
    - `options`: a `NewtonOptions` (stopping rules, budgets, `batch_size`; default
        `NewtonOptions()`). The old thin keywords (`maxnorm=`, `g_tol=`, `patience=`,
        `rel_improve=`, `max_steps=`, `max_time=`, `chunk=`, `batch_size=`) still override
        its fields, with a `DeprecationWarning`.
    - `progress`: print one line per chunk.

    **Returns:** a `ConvergeResult` (its `theta_flow` is the start; no flow record).
    """
    opts = with_fields(options, NewtonOptions, take_deprecated("newton_phase", deprecated, NEWTON_KEYWORDS), "options")
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    if nets.is_positively_homogeneous or any(a.kinked for a in nets.activations):
        names = sorted({a.name for a in nets.activations})
        raise ValueError(
            f"newton_phase needs a smooth activation (exact Hessian); got {names}. Use softplus, erf, g, tanh or gelu."
        )
    X, Y = check_data(nets.graph, X, Y)
    theta0 = nets.edge_weights()
    theta0 = theta0[None] if theta0.ndim == 1 else theta0
    if not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError("Some initial weights are not finite; re-initialize those networks.")
    net = _one_net(nets)
    B = theta0.shape[0]
    bs = opts.batch_size if opts.batch_size is not None else (1 if jax.default_backend() == "cpu" else B)
    bs = int(min(bs, B))
    t = time.monotonic()
    theta, n_steps, reason, slot_iterations = _run_pool(net, X, Y, theta0, bs, loss, opts, t, progress)
    wall = time.monotonic() - t
    f, gmax, lam = _measure(net, X, Y, theta, loss)
    nan = jnp.full((B,), jnp.nan, theta.dtype)
    settings = dict(
        opts.settings(),
        batch_size=bs,
        slot_iterations=slot_iterations,
        optimiser="optimistix ClassicalTrustRegion + DampedNewtonDescent, exact Hessian (ij.losses.hessian_fn)",
    )
    result = result_from_code(jnp.asarray(_REASON_CODES)[reason])
    return ConvergeResult(
        theta=theta,
        loss=f,
        grad_norm=gmax,
        weightnorm=weightnorm(theta),
        n_steps=n_steps,
        result=result,
        theta_flow=theta0,
        loss_flow=nan,
        t_flow=nan,
        flow_status=jnp.full((B,), -1),
        min_eig=lam,
        weightnorm_flow_max=nan,
        passed_maxnorm_ode=jnp.zeros((B,), bool),
        trajectory=TrajectoryRecord.empty(B, 1, theta.dtype),
        flow_steps=jnp.full((B,), -1),
        wall_time=wall,
        settings=settings,
    )


@eqx.filter_jit
def _refill(runs: _Run, fresh: _Run, take: Array) -> _Run:
    """`runs` with the slots where `take` is True replaced by `fresh`'s."""
    pick = lambda a, b: jnp.where(take.reshape(take.shape + (1,) * (a.ndim - 1)), b, a)  # noqa: E731
    dyn, static = eqx.partition(runs, eqx.is_array)
    return eqx.combine(jax.tree.map(pick, dyn, eqx.filter(fresh, eqx.is_array)), static)


def _run_pool(net, X, Y, theta0, bs, loss, opts: NewtonOptions, t_start, progress):
    """Advance the runs in `bs` slots, `chunk` iterations at a time, until all stop or
    `max_time` has passed. A slot whose run stops takes the next run of the queue
    (continuous batching), so no run waits for a slower one. Every call has `bs` slots
    (one compiled program); an empty slot holds a stopped run and does no iterations.
    Runs still going at `max_time` and runs not started stop with
    `RESULTS.newton_max_time` (a run not started keeps its initial weights).

    **Returns:** `(best weights, iterations, reason index, slot iterations)` per run; slot
    iterations = `bs * chunk` per advance (what the batch paid for, busy or idle)."""
    B = theta0.shape[0]
    best, steps, reasons = theta0, np.zeros(B, int), np.full(B, _MAXTIME)
    owner = np.full(bs, -1)  # the run in each slot (-1: empty)
    queue = 0

    def fill(runs, free):
        nonlocal queue
        n = min(int(free.sum()), B - queue)
        if n == 0:
            return runs
        new = np.flatnonzero(free)[:n]
        idx = np.full(bs, B - 1)
        idx[new] = np.arange(queue, queue + n)
        owner[new] = idx[new]
        queue += n
        fresh = _start(net, X, Y, theta0[idx], loss)
        take = np.zeros(bs, bool)
        take[new] = True
        return fresh if runs is None else _refill(runs, fresh, jnp.asarray(take))

    args = (loss, float(opts.g_tol), int(opts.patience), float(opts.maxnorm), int(opts.max_steps))
    runs, slot_iterations = None, 0
    if time.monotonic() - t_start <= opts.max_time:
        runs = fill(None, np.ones(bs, bool))
        for slot in np.flatnonzero(owner < 0):  # fewer runs than slots: the padding never runs
            runs = eqx.tree_at(lambda r: r.reason, runs, runs.reason.at[slot].set(_MAXSTEPS))
    while runs is not None and (owner >= 0).any() and time.monotonic() - t_start <= opts.max_time:
        runs = _advance(net, X, Y, runs, int(opts.chunk), *args, float(opts.rel_improve))
        slot_iterations += bs * int(opts.chunk)
        reason = np.asarray(runs.reason)
        done = (owner >= 0) & (reason != _RUNNING)
        if done.any():
            who = owner[done]
            best = best.at[who].set(runs.best_y[np.flatnonzero(done)])
            steps[who] = np.asarray(runs.k)[done]
            reasons[who] = reason[done]
            owner[done] = -1
            runs = fill(runs, done)
        if progress:
            print(
                f"newton: {int((owner >= 0).sum())} running, {B - queue} queued, {int((reasons != _MAXTIME).sum())} "
                f"of {B} done, {time.monotonic() - t_start:.1f} s"
            )
    if runs is not None and (owner >= 0).any():  # out of time: the runs still going keep their best point
        going = np.flatnonzero(owner >= 0)
        best = best.at[owner[going]].set(runs.best_y[going])
        steps[owner[going]] = np.asarray(runs.k)[going]
    return best, jnp.asarray(steps), reasons, slot_iterations


def _one_net(nets: DAGNetwork) -> DAGNetwork:
    theta = nets.edge_weights()
    return nets.with_edge_weights(theta[0]) if theta.ndim == 2 else nets


class FlowPhaseResult(eqx.Module):
    """The end of `flow_phase`'s flows, one row per network (in the order given).

    **Fields:** `theta_final` `(B, E)`, `loss_final`, `t_final`, `result` (each flow's
    `ij.RESULTS` item; `success` per flow: reached `t1` or stopped by a rule), `status` (its
    `ij.STATUSES` index), `record` (a `TrajectoryRecord`, or None when none was asked for),
    `n_steps` (solver steps, the hover's included; None from the `"sweep"` engine),
    `weightnorm_max` (the largest `weightnorm` seen: at the record's rows, the first step
    end past `maxnorm`, and the end; so `weightnorm_max >= maxnorm` says whether the flow
    passed `maxnorm`).
    """

    theta_final: Array
    loss_final: Array
    t_final: Array
    result: RESULTS
    status: Array
    weightnorm_max: Array
    record: TrajectoryRecord | None = None
    n_steps: Array | None = None

    @property
    def success(self) -> Bool[Array, " B"]:
        return is_success(self.result)


def _pieces(nets, X, Y, t1, loss, maxnorm, strength, n_record):
    """What a batch's flow and its hover share: the objective (with `MaxnormPenalty(maxnorm)`
    at `strength` unless `maxnorm` is None), the record's times (0, then geometric from 1e-2 or t1/10 to
    t1; None without a record) and `flow -> TrajectoryRecord`."""
    objective = Objective(loss, regularizer=MaxnormPenalty(maxnorm), strength=strength) if maxnorm is not None else loss
    grid = log_times(0.0, t1, n_record, first=min(1e-2, t1 / 10)) if n_record else None
    one_net = _one_net(nets)
    loss_fn = edge_loss_fn(one_net, X, Y, loss)
    record = lambda f: TrajectoryRecord.from_flow(one_net, f.ts, f.thetas, f.losses, loss_fn)  # noqa: E731
    return objective, grid, record


def _with_record_max(res: FlowPhaseResult) -> FlowPhaseResult:
    if res.record is None:
        return res
    wn = jnp.max(jnp.nan_to_num(res.record.weightnorm, nan=-jnp.inf), axis=-1)
    return dataclasses.replace(res, weightnorm_max=jnp.fmax(res.weightnorm_max, wn))


@eqx.filter_jit
def _vmapped_flow(
    nets,
    X,
    Y,
    t1,
    solver,
    rtol,
    atol,
    max_steps,
    ceiling,
    loss,
    *,
    maxnorm=None,
    strength=1.0,
    n_record=0,
    wall_time=None,
    recovery=1.5,
):
    """The flow phase of a batch, vmapped, up to its hover. `t1` is a Python float
    (static). `ceiling`: the hard stop on `||theta||` (None: none); `maxnorm`: the flow runs
    on the loss plus `MaxnormPenalty(maxnorm)` (at `strength`) and stops at the first step end past
    `maxnorm` (None: no penalty); `n_record`: rows of the log-spaced `TrajectoryRecord` (0:
    none); `wall_time`: seconds per call."""
    opts = SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_steps, recovery=recovery)
    if maxnorm is not None:
        ceiling = float(np.sqrt(2 * maxnorm * nets.edge_weights().shape[-1]))  # weightnorm > maxnorm
    stop = StopRules(max_param_norm=ceiling, max_wall_time=wall_time)
    objective, grid, record = _pieces(nets, X, Y, t1, loss, maxnorm, strength, n_record)

    def one(n):
        f = gradient_flow(
            n,
            X,
            Y,
            t1,
            saveat=SaveTimes(grid) if n_record else SaveTimes(n_save=2),
            solver=opts,
            stop=stop,
            loss=objective,
        )
        return FlowPhaseResult(
            theta_final=f.theta_final,
            loss_final=f.loss_final,
            t_final=f.t_final,
            result=f.result,
            status=status_code(f.result),
            record=record(f) if n_record else None,
            n_steps=f.stats["num_steps"],
            weightnorm_max=weightnorm(f.theta_final),
        )

    return _with_record_max(eqx.filter_vmap(one)(nets))


@eqx.filter_jit
def _vmapped_hover(
    nets,
    X,
    Y,
    res: FlowPhaseResult,
    t1,
    solver,
    rtol,
    atol,
    hover_steps,
    loss,
    *,
    maxnorm,
    strength,
    n_record,
    recovery,
):
    """The hover of a batch after `_vmapped_flow` (`res`), vmapped: compiled only when a run
    passed `maxnorm`."""
    opts = SolverOptions(solver, rtol=rtol, atol=atol, max_steps=hover_steps, recovery=recovery)
    objective, grid, record = _pieces(nets, X, Y, t1, loss, maxnorm, strength, n_record)
    hovered = eqx.filter_vmap(lambda n, out: _hover(n, X, Y, t1, opts, objective, grid, record, out))(nets, res)
    return _with_record_max(hovered)


def _passed(res: FlowPhaseResult) -> bool:
    """Whether any run of a batch stopped at its first step end past `maxnorm` (concrete)."""
    return bool(np.any(np.asarray(result_code(res.result)) == int(result_code(RESULTS.stopped_param_norm))))


def _hover(n, X, Y, t1, opts, objective, grid, record, out: FlowPhaseResult) -> FlowPhaseResult:
    """The penalized flow on from its first step end past `maxnorm` (`out`, one run), for
    `opts.max_steps` steps at most; a run that did not pass takes no step (`t0 = t1`)."""
    passed = result_code(out.result) == result_code(RESULTS.stopped_param_norm)
    t0 = jnp.where(passed, out.t_final, t1)
    save = SaveTimes(jnp.clip(jnp.asarray(grid, t0.dtype), t0, t1)) if grid is not None else SaveTimes(n_save=2)
    h = gradient_flow(
        n.with_edge_weights(out.theta_final),
        X,
        Y,
        t1,
        t0=t0,
        saveat=save,
        solver=opts,
        loss=objective,
    )
    # the hover's step budget ends it as `stopped_hover` (a success); its failures stand
    budget = result_code(h.result) == result_code(RESULTS.max_steps_reached)
    hover_result = result_where(budget, RESULTS.stopped_hover, h.result)
    pick = lambda a, b: jnp.where(passed, a, b)  # noqa: E731
    rec = out.record
    if rec is not None:  # rows after the passage come from the hover
        later = jnp.asarray(grid) > out.t_final
        rec = jax.tree.map(lambda a, b: jnp.where(passed & later, a, b), record(h), rec)
    return FlowPhaseResult(
        theta_final=pick(h.theta_final, out.theta_final),
        loss_final=pick(h.loss_final, out.loss_final),
        t_final=pick(h.t_final, out.t_final),
        result=result_where(passed, hover_result, out.result),
        status=status_code(result_where(passed, hover_result, out.result)),
        record=rec,
        n_steps=jnp.asarray(out.n_steps) + jnp.where(passed, h.stats["num_steps"], 0),
        weightnorm_max=jnp.fmax(out.weightnorm_max, weightnorm(h.theta_final)),
    )


def flow_phase(
    nets: DAGNetwork, X, Y, flow: FlowPhaseOptions | None = None, *, maxnorm: float = 1e3, loss="mse"
) -> FlowPhaseResult:
    """The gradient-flow ("ODE") phase of `flow_then_newton` alone, on a batch of networks.

    **Arguments:** `nets` (a batched `DAGNetwork`, or one network), data `X`, `Y`; `flow`: a
    `FlowPhaseOptions` (default `FlowPhaseOptions()`); `maxnorm`: where the penalty starts
    (`flow_stop="penalty"`) or the flow stops (`"stop"`); `loss`.

    **Returns:** a `FlowPhaseResult` in the order of `nets`. Compiled once per graph,
    activation, options and data shape.
    """
    flow = with_fields(flow, FlowPhaseOptions, {}, "flow")
    check_positive("maxnorm", maxnorm)
    engine = flow.resolved_engine()
    E = nets.edge_weights().shape[-1]
    ceiling = float(np.sqrt(2 * maxnorm * E)) if flow.flow_stop == "stop" else None
    pen = float(maxnorm) if flow.flow_stop != "stop" else None
    wall = None if flow.flow_wall_time == np.inf else float(flow.flow_wall_time)
    theta = nets.edge_weights()
    theta = theta[None] if theta.ndim == 1 else theta
    if engine == "sweep":
        batch = BatchOptions() if flow.batch is None else flow.batch
        batch = dataclasses.replace(
            batch,
            slots=batch.slots or min(theta.shape[0], 256),
            exact=jax.default_backend() == "cpu" if batch.exact is None else batch.exact,
        )
        solver = SolverOptions(
            flow.solver, rtol=flow.rtol, atol=flow.atol, max_steps=flow.max_flow_steps, recovery=flow.recovery
        )
        res = sweep_flows(
            nets,
            X,
            Y,
            flow.t1,
            solver=solver,
            saveat=SaveTimes(n_save=2),
            loss=loss,
            batch=batch,
            stop=StopRules(max_param_norm=ceiling, max_wall_time=wall),
        )
        order = np.argsort(np.asarray(res.index))
        pick = lambda v: jnp.asarray(np.asarray(v)[order])  # noqa: E731
        return FlowPhaseResult(
            weightnorm_max=weightnorm(pick(res.theta_final)),
            theta_final=pick(res.theta_final),
            loss_final=pick(res.loss_final),
            t_final=pick(res.t_final),
            result=result_from_code(pick(result_code(res.result))),
            status=pick(res.status),
        )
    X, Y = check_data(nets.graph, X, Y)
    one_net = _one_net(nets)
    kw = dict(
        maxnorm=pen,
        strength=penalty_strength(_penalty_form(flow), X.shape[0]),
        n_record=int(flow.n_record),
        recovery=flow.recovery,
    )
    t1, name, rtol, atol = float(flow.t1), flow.solver, float(flow.rtol), float(flow.atol)
    hover = (t1, name, rtol, atol, int(flow.hover_steps), loss)

    def run(batch: Array) -> FlowPhaseResult:
        nets_b = eqx.filter_vmap(one_net.with_edge_weights)(batch)
        res = _vmapped_flow(
            nets_b, X, Y, t1, name, rtol, atol, int(flow.max_flow_steps), ceiling, loss, wall_time=wall, **kw
        )
        if pen is not None and flow.hover_steps > 0 and _passed(res):
            res = _vmapped_hover(nets_b, X, Y, res, *hover, **kw)
        return res

    if engine == "vmap":
        return run(theta)
    # one run at a time through one compiled program of batch 1 (each run its own wall clock)
    return jax.tree.map(lambda *a: jnp.concatenate(a), *[run(theta[n : n + 1]) for n in range(theta.shape[0])])


def flow_then_newton(
    nets: DAGNetwork,
    X,
    Y,
    *,
    flow: FlowPhaseOptions | None = None,
    newton: NewtonOptions | None = None,
    loss="mse",
    **deprecated,
) -> ConvergeResult:
    """MLPGradientFlow's `train`: a gradient-flow ("ODE") phase, then `newton_phase`.

    **Arguments:**

    - `nets` (a batched `DAGNetwork`, or one network), data `X`, `Y`, `loss`.
    - `flow`: a `FlowPhaseOptions` (default `FlowPhaseOptions()`): the flow runs with an
        implicit solver (the paper: KenCarp58 at reltol 1e-3; here Kvaerno5 with a Newton
        stage solve at the same tolerances) to `t1`, under a wall-time budget
        `flow_wall_time` per run, with `max_flow_steps` only as a backstop. With `flow_stop="penalty"` (default, the
        paper's way) the loss gets MLPGradientFlow's soft `maxnorm` penalty
        (`maxnorm_penalty`) and the flow goes on; with `"stop"` it stops at `maxnorm`.
    - `newton`: a `NewtonOptions` (default `NewtonOptions()`); its `maxnorm` is shared with
        the flow phase. The Newton phase starts from the flow's final state.

    The old keywords (`t1=`, `solver=`, `rtol=`, `atol=`, `max_flow_steps=`,
    `flow_wall_time=`, `flow_stop=`, `n_record=`, `engine=`, `slots=` and `exact=` (now
    `flow.batch`'s), and `maxnorm=`, `g_tol=`, `patience=`, `max_steps=`, ... of
    `NewtonOptions`) still work, with a `DeprecationWarning`, overriding the fields of
    `flow` / `newton`.

    Every run records the largest `weightnorm` of its ODE phase and whether it reached
    `maxnorm` (`passed_maxnorm_ode`), and, for the loop and vmap engines, a
    `TrajectoryRecord` at `n_record` log-spaced times.

    **Returns:** a `ConvergeResult` with the flow's state in `theta_flow`, `loss_flow`,
    `t_flow`, `flow_status`, `weightnorm_flow_max`, `passed_maxnorm_ode`, `trajectory`.
    """
    old = take_deprecated(
        "flow_then_newton",
        deprecated,
        {**FLOW_KEYWORDS, **{k: f"pass newton=ij.NewtonOptions({k}=...) instead" for k in _NEWTON_FIELDS}},
    )
    flow = with_flow_fields(flow, {k: v for k, v in old.items() if k in FLOW_KEYWORDS})
    opts = with_fields(newton, NewtonOptions, {k: v for k, v in old.items() if k in _NEWTON_FIELDS}, "newton")
    if not isinstance(nets, DAGNetwork):
        raise TypeError(f"nets must be a (batched) DAGNetwork; got {type(nets).__name__}.")
    check_positive("maxnorm", opts.maxnorm)
    res = flow_phase(nets, X, Y, flow, maxnorm=opts.maxnorm, loss=loss)
    out = newton_phase(
        eqx.filter_vmap(_one_net(nets).with_edge_weights)(res.theta_final), X, Y, loss=loss, options=opts
    )
    return _with_flow(out, res, flow, opts.maxnorm)


def _penalty_form(flow: FlowPhaseOptions) -> str:
    """The `PENALTY_FORMS` member of a penalized flow phase."""
    return "unscaled" if flow.flow_stop == "unscaled_penalty" else "n_samples"


def _with_flow(out: ConvergeResult, res: FlowPhaseResult, flow: FlowPhaseOptions, maxnorm: float) -> ConvergeResult:
    """The Newton phase's result with the flow phase's state and settings added."""
    B = res.theta_final.shape[0]
    rec = res.record if res.record is not None else TrajectoryRecord.empty(B, 1, res.theta_final.dtype)
    wn_max = res.weightnorm_max
    penalty = flow.flow_stop != "stop"
    settings = dict(
        out.settings,
        t1=float(flow.t1),
        solver=flow.solver,
        rtol=float(flow.rtol),
        atol=float(flow.atol),
        max_flow_steps=int(flow.max_flow_steps),
        flow_wall_time=float(flow.flow_wall_time),
        flow_stop=flow.flow_stop,
        hover_steps=int(flow.hover_steps),
        engine=flow.resolved_engine(),
        n_record=int(flow.n_record),
        flow_maxnorm=(
            f"MLPGradientFlow penalty (weightnorm - maxnorm)^3/{'6' if _penalty_form(flow) == 'n_samples' else '(6N)'} "
            "in L = (1/2N) sum (f-y)^2 units"
            if penalty
            else "stop at weightnorm >= maxnorm (StopRules.max_param_norm)"
        ),
    )
    return dataclasses.replace(
        out,
        theta_flow=res.theta_final,
        loss_flow=res.loss_final,
        t_flow=res.t_final,
        flow_status=res.status,
        weightnorm_flow_max=wn_max,
        passed_maxnorm_ode=jnp.asarray(wn_max >= maxnorm),
        trajectory=rec,
        settings=settings,
        flow_steps=res.n_steps if res.n_steps is not None else jnp.full((B,), -1),
    )
