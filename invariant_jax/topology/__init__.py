"""Topology of the invariant sets `H_G(c) = {theta : B~ theta^2 = c}`: connectivity,
frozen edges and the balance conditions that freeze them, with an exact LP cross-check.

See `docs/topology.md` for the mathematics and the tolerance conventions.
"""

from ._batch import frozen_mask
from ._conditions import BalanceCondition
from ._connectivity import LP_MODES, Connectivity, connectivity, lp_min_q

__all__ = ["Connectivity", "BalanceCondition", "connectivity", "lp_min_q", "frozen_mask", "LP_MODES"]
