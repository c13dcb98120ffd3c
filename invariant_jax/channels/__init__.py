"""Flat channels to infinity in smooth networks: channel coordinates and the GLU limit,
saddle lines from neuron duplication, channel detection, the jump procedure, the
two-neuron toy model, the frequency study, and the studies' second-order convergence
phase (a flow with MLPGradientFlow's maxnorm penalty, then trust-region Newton:
`flow_then_newton`, `newton_phase`, their options and results)."""

from ._converge import (
    FLOW_ENGINES,
    FLOW_KEYWORDS,
    FLOW_STOPS,
    NEWTON_KEYWORDS,
    NEWTON_RESULTS,
    ConvergeResult,
    FlowPhaseOptions,
    FlowPhaseResult,
    NewtonOptions,
    flow_phase,
    flow_then_newton,
    newton_phase,
    newton_reason,
    newton_result,
    with_fields,
    with_flow_fields,
)
from ._detect import CLASSIFICATIONS, MAXNORM, PAIR_TOL, ChannelReport, detect_channels
from ._duplicate import Escape, SaddleLine, duplicate_neuron, escape_saddle, refine_critical_point, saddle_line
from ._eos import ChannelGDTrace, gd_channel_trace
from ._figures import channel_figure, channel_title, pair_trajectory
from ._flow_phase import (
    PENALTY_FORMS,
    MaxnormPenalty,
    TrajectoryRecord,
    closest_pair_distance,
    maxnorm_penalty,
    min_hessian_eigenvalue,
    penalty_strength,
    weightnorm,
)
from ._frequency import FREQUENCY_SOLVER, FrequencyGrid, FrequencyStudy, channel_frequency
from ._glu import (
    ChannelPair,
    CollapsedNetwork,
    PairClass,
    channel_coordinates,
    collapse_channel,
    glu_limit,
    hidden_position,
    pair_output,
    pair_structure,
    predecessor_values,
    set_channel_coordinates,
)
from ._group import ChannelGroup, group_coordinates, group_limit, group_output
from ._jump import GLUConvergence, JumpResult, PowerLaw, glu_convergence, jump_procedure, power_law_fit
from ._levels import (
    STUDY_FLOW,
    Confirmation,
    ConvergenceStudy,
    StudyGrid,
    cluster_loss_levels,
    confirm_channel,
    convergence_study,
    first_layer_distances,
    mlpgf_glorot,
    sharpened_neuron,
    study_inits,
    wilson_interval,
)
from ._solutions import (
    JUMP_MAX_COS,
    count_unique_solutions,
    jump_distance,
    neuron_vectors,
    solution_distance,
    solution_distances,
)
from ._toy import (
    SIGMOID2,
    ToyCriticalPoints,
    toy_activation,
    toy_critical_points,
    toy_data,
    toy_limit_loss,
    toy_network,
    toy_target,
)
