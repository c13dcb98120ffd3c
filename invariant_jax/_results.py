"""`RESULTS`: the one status enumeration of the package.

Every result type (`Flow`, `KinkFlow`, `SweepResult`, `Connectivity`, `SingularPoint`,
`TrainResult`, `ConservationReport`, study results) carries `result: RESULTS` and a
`.success` property. `RESULTS` extends `diffrax.RESULTS` (which extends optimistix's
and lineax's), so a diffrax solve's result is promoted without renumbering:
`RESULTS.promote(sol.result)`, and diffrax's integer codes are ours.

Each message says what happened and how to fix it. The helpers below turn results (one
item, or a batch of them as returned by `vmap`) into integer codes, names, messages
and success flags, for tables, results stores and the command line; nothing outside this
module needs the enumeration's private fields.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int

from ._diffrax_compat import enumeration_table

__all__ = [
    "RESULTS",
    "SUCCESS_RESULTS",
    "STOP_RESULTS",
    "NEWTON_STOP_RESULTS",
    "FLOW_PHASE_STOP_RESULTS",
    "STATUSES",
    "result_code",
    "result_from_code",
    "result_where",
    "result_name",
    "result_message",
    "is_success",
    "status_code",
    "status_is",
    "status_is_success",
]


class RESULTS(diffrax.RESULTS):  # pyright: ignore[reportGeneralTypeIssues]
    # ---------------------------------------------- stopping rules (successes)
    stopped_grad_norm = (
        "Stopped early by `StopRules(grad_norm_tol=...)`: the gradient norm fell below "
        "it (a critical point is near). Not a failure; lower `grad_norm_tol` or drop it "
        "to integrate on to `t1`."
    )
    stopped_loss_floor = (
        "Stopped early by `StopRules(loss_floor=...)`: the data loss fell below it. Not a "
        "failure; lower `loss_floor` or drop it to integrate on to `t1`."
    )
    stopped_param_norm = (
        "Stopped early by `StopRules(max_param_norm=...)`: `||theta||` exceeded it (e.g. "
        "the flow runs off into a flat channel). Not a failure; raise `max_param_norm` "
        "or drop it to integrate on to `t1`."
    )
    stopped_wall_time = (
        "Stopped early by `StopRules(max_wall_time=...)`: the solve ran for longer than "
        "that many seconds. Not a failure; raise `max_wall_time` or drop it to integrate "
        "on to `t1`."
    )
    # ---------------------------------------------- failures
    nonfinite_state = (
        "The final weights, loss or gradient are not finite: the flow diverged. Lower "
        "`t1`, stop earlier with `StopRules(max_param_norm=...)`, rescale the data or the "
        "initialization, or use float64."
    )
    max_events_reached = (
        "The kink-aware flow located `max_events` events before reaching `t1`. Increase `max_events`, or lower `t1`."
    )
    training_diverged = (
        "The weights became non-finite during training (the step diverged). Lower "
        "`learning_rate` or the regularizer `strength`."
    )
    drift_exceeded = (
        "The conserved quantities `c = B~ theta^2` drifted by more than 100 tolerance "
        "units (`atol + rtol * scale`). Tighten `rtol`/`atol`, use float64, or a "
        "conserving solver such as `solver='gauss4'`; with a non-homogeneous activation "
        "the law does not hold at all."
    )
    lp_disagrees = (
        "The exact linear program and the combinatorial balance conditions disagree on "
        "which edges are frozen. This is a bug unless `c` sits within `tol` of a "
        "balance threshold: pass a larger `tol`, or report the graph and `c`."
    )
    undecided = (
        "The search for a singular point gave up before deciding. Increase "
        "`max_candidates` or `time_limit`, or loosen `tol`."
    )
    different_components = (
        "The two networks lie in different connected components of `H_G(c)`: a frozen "
        "edge has opposite signs, so no path inside `H_G(c)` (and no gradient flow) joins "
        "them. `certificate` names the edge and the balance condition that freezes it."
    )
    unreachable = (
        "No positive rescaling (or twin-neuron permutation) of the target lies in the "
        "initialization's component of `H_G(c0)`: gradient flow from this initialization "
        "cannot reach a network with the target's function this way. `reason` says why."
    )
    # ---------------------------------------------- the Newton phase (`ij.newton_phase`)
    stopped_patience = (
        "Stopped by `NewtonOptions(patience=...)`: the best loss did not improve (by more "
        "than `rel_improve`, relative) for that many Newton iterations; the run returns its "
        "best point. Not a failure; raise `patience` or lower `rel_improve` to go on."
    )
    stopped_weightnorm = (
        "Stopped by `NewtonOptions(maxnorm=...)`: `weightnorm(theta) = sum(theta^2)/(2E)` "
        "reached `maxnorm` (the flat-channels paper counts such a run infinite). Not a "
        "failure; raise `maxnorm` to follow the channel further."
    )
    newton_unfinished = (
        "The Newton phase had not stopped when its results were read (no stopping rule "
        "held). Raise `max_steps` or `max_time` of `NewtonOptions`."
    )
    stopped_g_tol = (
        "Stopped by `NewtonOptions(g_tol=...)`: `max |grad L|` fell to `g_tol`, a critical "
        "point to float precision (`ConvergeResult.min_eig` tells a minimum from a saddle). "
        "Not a failure; lower `g_tol` to polish further."
    )
    newton_max_time = (
        "The Newton phase ran out of its wall-clock budget `NewtonOptions(max_time=...)` "
        "before a stopping rule held (runs not started by then did not run). Raise "
        "`max_time`, or run fewer networks per call."
    )
    # ---------------------------------------------- the flow phase (`ij.channels.flow_phase`)
    stopped_hover = (
        "The penalized flow passed `maxnorm` and then hovered there, on MLPGradientFlow's soft "
        "penalty, for `FlowPhaseOptions(hover_steps=...)` solver steps (the flat-channels "
        "paper counts such a run infinite). Not a failure; raise `hover_steps` to hover longer."
    )


_NAMES, _MESSAGES = enumeration_table(RESULTS)

STOP_RESULTS = (
    RESULTS.stopped_grad_norm,
    RESULTS.stopped_loss_floor,
    RESULTS.stopped_param_norm,
    RESULTS.stopped_wall_time,
)
"""The members that a stopping rule sets, in the order of `StopRules`' fields."""

NEWTON_STOP_RESULTS = (RESULTS.stopped_patience, RESULTS.stopped_weightnorm, RESULTS.stopped_g_tol)
"""The members that the Newton phase's stopping rules set (successes). Its budgets end a
run with `max_steps_reached` or `newton_max_time`, failures."""

FLOW_PHASE_STOP_RESULTS = (RESULTS.stopped_hover,)
"""The member that ends a penalized flow phase's hover past `maxnorm` (a success)."""

SUCCESS_RESULTS = (
    (RESULTS.successful, RESULTS.event_occurred) + STOP_RESULTS + NEWTON_STOP_RESULTS + FLOW_PHASE_STOP_RESULTS
)
"""The members that count as success: reached the end, or stopped by a rule."""


def result_code(result) -> Int[Array | np.ndarray, "..."]:
    """The integer code(s) of a `RESULTS` item (any batch shape), as an int32 array
    (a NumPy array when the item is concrete, e.g. `RESULTS.successful`, so
    `int(result_code(RESULTS.successful))` works under `jit`). Accepts items of
    `diffrax.RESULTS` (promoted) and integer codes (passed through). Works under `jit`."""
    if isinstance(result, jax.Array | np.ndarray | int | np.integer):
        return jnp.asarray(result, jnp.int32)
    if not isinstance(result, RESULTS):
        result = RESULTS.promote(result)  # a diffrax / optimistix / lineax item
    (leaf,) = jax.tree.leaves(result)
    return np.asarray(leaf, np.int32) if isinstance(leaf, np.ndarray | np.integer) else jnp.asarray(leaf, jnp.int32)


def result_from_code(code: Int[ArrayLike, "..."]) -> RESULTS:
    """The `RESULTS` item (any batch shape) with these integer codes."""
    code = jnp.asarray(code, jnp.int32)
    return jax.tree.map(lambda _: code, RESULTS.successful)


def result_where(pred: Bool[ArrayLike, "..."], if_true: RESULTS, if_false: RESULTS) -> RESULTS:
    """Elementwise `if_true` where `pred` holds, else `if_false` (any batch shape; equinox's
    `RESULTS.where` takes a scalar predicate only). Works under `jit`."""
    xp = np if isinstance(pred, np.ndarray | np.bool_ | bool) else jnp
    return result_from_code(xp.where(pred, result_code(if_true), result_code(if_false)))


def _codes_np(result) -> np.ndarray:
    code = np.asarray(result_code(result))
    if np.any((code < 0) | (code >= len(_NAMES))):
        raise ValueError(f"Invalid RESULTS code(s) {np.unique(code[(code < 0) | (code >= len(_NAMES))])}.")
    return code


def result_name(result) -> str | np.ndarray:
    """The member name(s), e.g. `"max_steps_reached"`: a `str` for one result, an array
    of `str` for a batch. For tables and results-store columns. Not under `jit`."""
    code = _codes_np(result)
    names = np.asarray(_NAMES, dtype=object)[code]
    return str(names) if code.ndim == 0 else names.astype(str)


def result_message(result) -> str | np.ndarray:
    """The message(s) telling what happened and the fix (`""` for `successful`): a `str`
    for one result, an array of `str` for a batch. Not under `jit`."""
    code = _codes_np(result)
    msgs = np.asarray(_MESSAGES, dtype=object)[code]
    return str(msgs) if code.ndim == 0 else msgs.astype(str)


_SUCCESS_CODES = np.asarray([int(result_code(r)) for r in SUCCESS_RESULTS], np.int32)


def is_success(result) -> Bool[Array, "..."]:
    """Whether each result counts as a success (reached `t1`, or stopped by a rule).
    Works under `jit`."""
    code = result_code(result)
    return jnp.any(code[..., None] == jnp.asarray(_SUCCESS_CODES), axis=-1)


STATUSES = ("ok", "stopped", "max_steps", "nonfinite", "failed")
"""Coarse per-trajectory categories of a sweep, indexed by `status_code`: `ok` reached
`t1`; `stopped` met a stopping rule; `max_steps` ran out of steps (or events);
`nonfinite` has a non-finite weight, loss or gradient at its final state; `failed` is any
other failure (the exact reason is the `RESULTS` code)."""

_STOP_CODES = np.asarray(
    [
        int(result_code(r))
        for r in (RESULTS.event_occurred,) + STOP_RESULTS + NEWTON_STOP_RESULTS + FLOW_PHASE_STOP_RESULTS
    ],
    np.int32,
)
_MAX_CODES = np.asarray(
    [int(result_code(r)) for r in (RESULTS.max_steps_reached, RESULTS.max_events_reached)], np.int32
)


def status_code(result) -> Int[Array, "..."]:
    """Index into `STATUSES` of each result. Works under `jit`."""
    code = result_code(result)
    status = jnp.where(
        code == int(result_code(RESULTS.successful)),
        0,
        jnp.where(
            jnp.any(code[..., None] == jnp.asarray(_STOP_CODES), axis=-1),
            1,
            jnp.where(jnp.any(code[..., None] == jnp.asarray(_MAX_CODES), axis=-1), 2, 4),
        ),
    )
    return jnp.where(code == int(result_code(RESULTS.nonfinite_state)), 3, status).astype(jnp.int32)


_SUCCESS_STATUSES = np.asarray([STATUSES.index("ok"), STATUSES.index("stopped")], np.int32)


def _check_status(status):
    if not isinstance(status, jax.Array):  # concrete: check the range (under jit, trust status_code)
        status = np.asarray(status)
        bad = status[(status < 0) | (status >= len(STATUSES))]
        if bad.size:
            raise ValueError(f"Invalid STATUSES index(es) {np.unique(bad)}; expected 0..{len(STATUSES) - 1}.")


def status_is_success(status: Int[ArrayLike, "..."]) -> Bool[Array | np.ndarray, "..."]:
    """Whether each `STATUSES` index (as `status_code` returns and sweeps record) counts as
    a success: `ok` or `stopped`. It agrees with `is_success` on the result the status came
    from: `status_is_success(status_code(r)) == is_success(r)`. A NumPy bool array for NumPy
    input; works under `jit`. Its negation counts failures (`max_steps`, `nonfinite`,
    `failed`). Use it instead of comparing status integers."""
    _check_status(status)
    if isinstance(status, jax.Array):
        return jnp.any(status[..., None] == jnp.asarray(_SUCCESS_STATUSES), axis=-1)
    return np.isin(np.asarray(status), _SUCCESS_STATUSES)


def status_is(status: Int[ArrayLike, "..."], name: str) -> Bool[Array | np.ndarray, "..."]:
    """Whether each `STATUSES` index is the status called `name` (one of `STATUSES`), e.g.
    `status_is(rec["status"], "ok")` for the trajectories that reached `t1`. A NumPy bool
    array for NumPy input; works under `jit`."""
    if name not in STATUSES:
        raise ValueError(f"Unknown status {name!r}; choose one of {STATUSES}.")
    _check_status(status)
    k = STATUSES.index(name)
    return status == k if isinstance(status, jax.Array) else np.asarray(status) == k
