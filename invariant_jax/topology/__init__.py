"""Topology of the invariant sets `H_G(c) = {theta : B~ theta^2 = c}`: connectivity,
frozen edges and the balance conditions that freeze them, with an exact LP cross-check;
which component a network lies in, paths inside `H_G(c)`, and reachability of a target.

See `docs/topology.md` for the mathematics and the tolerance conventions.
"""

from ._batch import frozen_mask
from ._components import Component, ComponentComparison, component_of, same_component
from ._conditions import BalanceCondition
from ._connectivity import LP_MODES, Connectivity, connectivity, lp_min_q
from ._path import InvariantPath, invariant_path
from ._plot import plot_invariant_set, sample_invariant_set
from ._reach import Reachability, reachability, rescale_onto, twin_classes

__all__ = [
    "Connectivity",
    "BalanceCondition",
    "connectivity",
    "lp_min_q",
    "frozen_mask",
    "LP_MODES",
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
]
