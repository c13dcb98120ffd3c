"""Deprecated alias, kept for one release: the second-order convergence phase (the flow
phase with MLPGradientFlow's `maxnorm` penalty, then trust-region Newton) moved into the
flat-channels package, whose studies it serves. Import its names from
`invariant_jax.channels` (`ij.channels.flow_then_newton`, ...) or, for the common ones,
from `invariant_jax` (`ij.flow_then_newton`, `ij.NewtonOptions`, ...): the same objects.
Importing this module warns (`DeprecationWarning`); `STOP_REASONS` keeps its own warning."""

import warnings

from .channels import (
    FLOW_ENGINES,
    FLOW_KEYWORDS,
    FLOW_STOPS,
    NEWTON_KEYWORDS,
    NEWTON_RESULTS,
    ConvergeResult,
    FlowPhaseOptions,
    FlowPhaseResult,
    MaxnormPenalty,
    NewtonOptions,
    TrajectoryRecord,
    closest_pair_distance,
    flow_phase,
    flow_then_newton,
    maxnorm_penalty,
    min_hessian_eigenvalue,
    newton_phase,
    newton_reason,
    newton_result,
    weightnorm,
    with_fields,
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
    "weightnorm",
    "maxnorm_penalty",
    "MaxnormPenalty",
    "closest_pair_distance",
    "min_hessian_eigenvalue",
    "TrajectoryRecord",
]


# stacklevel=2: `warnings.warn` skips the import machinery's frames, so the warning names the
# line that imported this module (and the default filters show it from `__main__`).
warnings.warn(
    "invariant_jax.converge is deprecated and goes in the next release: its names moved to "
    "invariant_jax.channels (ij.channels.flow_then_newton, ij.channels.NewtonOptions, ...; the common "
    "ones also as ij.flow_then_newton, ...), the same objects.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    if name == "STOP_REASONS":
        warnings.warn(
            "invariant_jax.converge.STOP_REASONS is deprecated: a Newton run's outcome is its `result` "
            "(an ij.RESULTS member); the old names are the keys of NEWTON_RESULTS.",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(NEWTON_RESULTS)  # the old names, in their old order
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
