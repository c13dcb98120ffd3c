"""invariant_jax: exact gradient flow on DAG networks, its conservation laws, the
topology of the invariant sets, and the singularities and channels of training."""

from ._version import __version__

from .activations import ACTIVATIONS, Activation, get_activation, leaky_relu
from .graph import DAG, example_dag, from_networkx, mlp, random_dag, to_networkx
from .network import DAGNetwork, init_edge_weights
from .losses import bce, check_data, edge_loss_fn, get_loss, mse, network_loss
from .invariants import (
    conservation_scale,
    conserved_quantities,
    identity_residual,
    jacobian,
    jacobian_rank,
    singular_subnetworks,
)
from .regularizers import get_regularizer, l1, l2, nuclear_norm
from ._results import RESULTS, is_success, result_code, result_from_code, result_message, result_name
from .options import SaveTimes, SolverOptions, StopRules, log_times
from .flow import ConservationReport, Flow, check_conservation, flow_field, gradient_flow, trajectory_record
from .datasets import teacher_student
from .invariants import SingularPoint, is_singular_value, singular_point
from .topology import BalanceCondition, Connectivity, connectivity, frozen_mask, lp_min_q
from .regularizers import has_hidden_to_hidden_edges, matrix_nuclear_norm
from .regularizers import WorkingSet, group_lasso, nuclear_upper_bound, nuclear_working_set
from .training import OPTIMIZERS, TrainLog, TrainResult, cut_off_mask, fit, get_optimizer, n_cut_off_groups
from .pruning import PruneReport, magnitude_prune, neuron_scores, prune
from .datasets import TabularData, breast_cancer, load_csv
from .sweep import SweepConfig, SweepResult, SweepSummary, load_sweep, run_sweep, summarize_sweep, sweep_flows
from .losses import gauss_hermite, hessian, hessian_spectrum, loss_gradient, population_loss, weighted_mse
from .datasets import gp_data, gp_sample, matern32_kernel, modified_rosenbrock, rosenbrock_data, regular_grid, rosenbrock_grid
from .converge import STOP_REASONS, ConvergeResult, flow_then_newton, newton_phase, weightnorm
from . import channels
from .channels import (
    ChannelPair,
    ChannelReport,
    channel_coordinates,
    channel_frequency,
    collapse_channel,
    detect_channels,
    duplicate_neuron,
    glu_limit,
    jump_procedure,
    saddle_line,
)
from .solvers import SOLVERS, GaussLegendre, Projected, get_solver, hessian_kvaerno5, rescale_to_conserved
from .kinks import KinkFlow, kink_aware_flow
