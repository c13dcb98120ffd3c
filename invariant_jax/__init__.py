"""invariant_jax: exact gradient flow on DAG networks, its conservation laws, the
topology of the invariant sets, and the singularities and channels of training.

Conventions shared by every module:

- `key` is a JAX PRNG key wherever randomness enters the library (`seed`, an integer,
  appears only in `SweepConfig` and on the command line).
- `graph` (or `g`) is a `DAG`, `net` a `DAGNetwork`.
- `tol` always means an absolute threshold below which a quantity counts as zero: a
  weight (`singular_subnetworks`), a singular value (`jacobian_rank`), a sum of conserved
  values (`connectivity`) or a residual (`singular_point`) with `|x| <= tol` is zero.
  Solver tolerances are `rtol`/`atol` (`SolverOptions`).
- Counts are `n_*` (`n_inputs`, `n_components`, ...); the step statistics that mirror
  diffrax's keep diffrax's `num_*` names (`num_steps`, `num_accepted_steps`, ...).
- Every result carries `result: RESULTS` and `.success`; `result_message` says the fix.
"""

import ast as _ast
import importlib as _importlib
from pathlib import Path as _Path
from typing import TYPE_CHECKING

from ._version import __version__

# The public names and the modules they come from: the import block below, which type
# checkers and IDEs read. At run time each name is imported on first use (PEP 562), so
# `import invariant_jax` (and so the CLI's `--help`) does not import JAX.
if TYPE_CHECKING:
    # `sweep` for ij.sweep.BatchOptions, ij.sweep.Engine, ...: reachable, not listed in __all__
    from . import channels, sweep
    from ._results import RESULTS, is_success, result_code, result_from_code, result_message, result_name
    from ._version import __version__
    from .activations import ACTIVATIONS, Activation, get_activation, leaky_relu, smoothed_relu
    from .channels import (
        ChannelPair,
        ChannelReport,
        ConvergeResult,
        FlowPhaseOptions,
        NewtonOptions,
        channel_coordinates,
        channel_frequency,
        collapse_channel,
        detect_channels,
        duplicate_neuron,
        flow_then_newton,
        glu_limit,
        jump_procedure,
        newton_phase,
        saddle_line,
        weightnorm,
    )
    from .datasets import (
        TabularData,
        breast_cancer,
        gp_data,
        gp_sample,
        load_csv,
        matern32_kernel,
        modified_rosenbrock,
        regular_grid,
        rosenbrock_data,
        rosenbrock_grid,
        teacher_student,
    )
    from .flow import (
        ConservationReport,
        Flow,
        NoConservationLaw,
        check_conservation,
        flow_field,
        flow_potential,
        gradient_flow,
        trajectory_record,
    )
    from .graph import DAG, example_dag, from_networkx, mlp, to_networkx
    from .invariants import (
        SingularPoint,
        conservation_scale,
        conserved_quantities,
        identity_residual,
        is_singular_value,
        jacobian,
        jacobian_rank,
        singular_point,
        singular_subnetworks,
    )
    from .kinks import KinkFlow, kink_aware_flow
    from .losses import (
        bce,
        check_data,
        edge_loss_fn,
        gauss_hermite,
        get_loss,
        hessian,
        hessian_spectrum,
        loss_gradient,
        mse,
        network_loss,
        population_loss,
        weighted_mse,
    )
    from .network import DAGNetwork, init_edge_weights, random_dag
    from .options import KinkOptions, Objective, SaveTimes, SolverOptions, StopRules, log_times
    from .pruning import PruneReport, magnitude_prune, neuron_scores, prune
    from .regularizers import (
        WorkingSet,
        get_regularizer,
        group_lasso,
        has_hidden_to_hidden_edges,
        l1,
        l2,
        matrix_nuclear_norm,
        nuclear_norm,
        nuclear_upper_bound,
        nuclear_working_set,
    )
    from .solvers import (
        SOLVERS,
        FilteredError,
        GaussLegendre,
        GradientFlowTerm,
        Projected,
        RecoveringPIDController,
        StageNewton,
        StageTolerance,
        StepRecovery,
        get_solver,
        hessian_kvaerno5,
        newton_kvaerno5,
        rescale_to_conserved,
    )
    from .sweep import (
        SweepConfig,
        SweepResult,
        SweepSummary,
        load_sweep,
        run_sweep,
        summarize_sweep,
        sweep_flows,
        sweep_network,
    )
    from .topology import (
        BalanceCondition,
        Component,
        ComponentComparison,
        Connectivity,
        InvariantPath,
        Reachability,
        component_of,
        connectivity,
        frozen_mask,
        invariant_path,
        lp_min_q,
        plot_invariant_set,
        reachability,
        rescale_onto,
        same_component,
        sample_invariant_set,
        twin_classes,
    )
    from .training import (
        OPTIMIZERS,
        TrainLog,
        TrainOptions,
        TrainResult,
        cut_off_mask,
        fit,
        get_optimizer,
        n_cut_off_groups,
    )

__all__ = [
    # graphs and networks
    "DAG",
    "mlp",
    "random_dag",
    "example_dag",
    "from_networkx",
    "to_networkx",
    "Activation",
    "ACTIVATIONS",
    "get_activation",
    "leaky_relu",
    "smoothed_relu",
    "DAGNetwork",
    "init_edge_weights",
    # losses and data
    "mse",
    "bce",
    "get_loss",
    "network_loss",
    "edge_loss_fn",
    "check_data",
    "loss_gradient",
    "hessian",
    "hessian_spectrum",
    "gauss_hermite",
    "weighted_mse",
    "population_loss",
    "teacher_student",
    "TabularData",
    "breast_cancer",
    "load_csv",
    "gp_data",
    "gp_sample",
    "matern32_kernel",
    "modified_rosenbrock",
    "rosenbrock_data",
    "rosenbrock_grid",
    "regular_grid",
    # conserved quantities, singular points, topology
    "conserved_quantities",
    "conservation_scale",
    "identity_residual",
    "jacobian",
    "jacobian_rank",
    "singular_subnetworks",
    "SingularPoint",
    "singular_point",
    "is_singular_value",
    "Connectivity",
    "BalanceCondition",
    "connectivity",
    "frozen_mask",
    "lp_min_q",
    "Component",
    "ComponentComparison",
    "component_of",
    "same_component",
    "InvariantPath",
    "invariant_path",
    "Reachability",
    "reachability",
    "rescale_onto",
    "twin_classes",
    "sample_invariant_set",
    "plot_invariant_set",
    # statuses and options
    "RESULTS",
    "result_code",
    "result_from_code",
    "result_name",
    "result_message",
    "is_success",
    "SolverOptions",
    "SaveTimes",
    "StopRules",
    "KinkOptions",
    "Objective",
    "log_times",
    # flows
    "SOLVERS",
    "get_solver",
    "GaussLegendre",
    "FilteredError",
    "Projected",
    "StageNewton",
    "StageTolerance",
    "RecoveringPIDController",
    "StepRecovery",
    "GradientFlowTerm",
    "hessian_kvaerno5",
    "newton_kvaerno5",
    "rescale_to_conserved",
    "Flow",
    "gradient_flow",
    "flow_field",
    "flow_potential",
    "trajectory_record",
    "ConservationReport",
    "check_conservation",
    "NoConservationLaw",
    "KinkFlow",
    "kink_aware_flow",
    "ConvergeResult",
    "NewtonOptions",
    "FlowPhaseOptions",
    "newton_phase",
    "flow_then_newton",
    "weightnorm",
    # training and pruning
    "get_regularizer",
    "l1",
    "l2",
    "nuclear_norm",
    "matrix_nuclear_norm",
    "has_hidden_to_hidden_edges",
    "group_lasso",
    "nuclear_upper_bound",
    "nuclear_working_set",
    "WorkingSet",
    "OPTIMIZERS",
    "get_optimizer",
    "fit",
    "TrainOptions",
    "TrainResult",
    "TrainLog",
    "cut_off_mask",
    "n_cut_off_groups",
    "prune",
    "magnitude_prune",
    "neuron_scores",
    "PruneReport",
    # sweeps
    "SweepConfig",
    "SweepResult",
    "SweepSummary",
    "sweep_flows",
    "run_sweep",
    "load_sweep",
    "summarize_sweep",
    "sweep_network",
    # flat channels
    "channels",
    "ChannelPair",
    "ChannelReport",
    "channel_coordinates",
    "channel_frequency",
    "collapse_channel",
    "detect_channels",
    "duplicate_neuron",
    "glu_limit",
    "jump_procedure",
    "saddle_line",
    "__version__",
]


def _exported() -> dict[str, str]:
    """`{public name: submodule}`, read from the `TYPE_CHECKING` import block above."""
    tree = _ast.parse(_Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, _ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    out = {}
    for node in (n for n in block.body if isinstance(n, _ast.ImportFrom)):
        for alias in node.names:
            out[alias.asname or alias.name] = alias.name if node.module is None else node.module
    return out


_EXPORTED = _exported()


def __getattr__(name: str):
    module = _EXPORTED.get(name)
    if module is None:
        raise AttributeError(f"module 'invariant_jax' has no attribute {name!r}")
    mod = _importlib.import_module(f".{module}", __name__)
    value = mod if module == name else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTED))
