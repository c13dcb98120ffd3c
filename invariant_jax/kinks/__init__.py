"""Kink-aware gradient flow for piecewise-linear activations (relu, leaky_relu).

Inside one activation pattern the loss is a polynomial in `theta`, so the flow is
smooth and a high-order solver takes long steps. The pattern changes where a
pre-activation `z_{i,v}(theta)` (sample `i`, hidden node `v`) crosses zero; there the
vector field jumps. `kink_aware_flow`:

1. integrates the *pattern-frozen* field `f_D(theta) = -grad L_D(theta)`, where every
   (sample, node) pair uses the fixed slope `D_{i,v}` (1 on the active side, the
   negative slope on the other) in the forward and the backward pass (`_filippov.py`);
2. stops at the first pair about to cross, with a diffrax `Event` whose condition is the
   smallest signed pre-activation and whose root finder (`Illinois`, bracketed false
   position, `_illinois.py`) locates the time;
3. decides what happens at the surface (`_modes.py`): every candidate pair (the one
   that triggered the event, any other at its surface, and every sliding pair) must end
   in a consistent mode: on a side whose field keeps it there, or *sliding* with the
   Filippov field (the combination `f0 + sum_j lambda_j dF/dD_j` tangent to all
   sliding surfaces, every `lambda_j` in `(0, 1)`). This box-constrained
   complementarity problem is solved by single pivots on the least-index violation
   (a pushed pair crosses; pushed back, it slides; a sliding pair whose `lambda`
   leaves `(0, 1)` leaves to that side), so a neighbour's crossing can end a sliding
   mode;
4. restarts from the located point (`_driver.py`: one *segment* per event; the sweep
   engine runs the same segments slot by slot). A segment (`_segment.py`) is diffrax's
   step loop and root find written out lean: diffrax's solver and step-size controller
   objects, the same steps, saves and Illinois iterates as `diffrax.diffeqsolve` with an
   `Event`, without its per-call set-up.

In a batch of trajectories run under `jax.vmap` (the sweep engine's vmap mode, which
names the lanes `LANES`), the Filippov field, the restart's mode search, a node's exit
from its origin, and the later iterations of a segment's step loop and root find run for
the trajectories that need them only (`lane_cond`, `lane_while`, `_lanes.py`).

A node whose incoming weights reach 0 (all its surfaces meet) leaves the origin along
the ray the smooth limit chooses, or stays dead there (`_modes.leave_origin`).

Events where more than one pair changes mode are counted in `num_simultaneous`. If no
consistent modes are found (more than `max_sliding` pairs want to slide, or the
pivoting cycles) the pushed pairs flip, and the event is counted in `num_ambiguous`.
So is a two-fold: a sliding pair's rates on both sides pass through 0 together, the
slide turns repelling, and the flow past it is not unique (`KinkIntegrator._restart`);
`num_two_folds` counts those of the ambiguous events.
On sliding modes brute-force explicit solvers chatter and are no reference; the flow
here converges to the smooth limit (ReLU replaced by `softplus(beta z) / beta`,
`beta -> inf`) at first order in `1/beta` (tests/test_kinks.py).

Conservation: every field used (pattern-frozen or Filippov) has the form
`-grad L_D` with `L_D` positively homogeneous per node (or a linear combination of
derivatives of such fields in `D`), so `B~ (theta * f) = 0` holds for every `theta`.
With a Gauss-Legendre inner solver `c = B~ theta^2` is then conserved to round-off, on
sliding modes too. At each event the event time is refined by the secant method on the
Gauss solution and the restart point recomputed by one Gauss-Legendre step from the last
step's start, so the restart is on the surface and exact as well.
"""

from ._driver import KinkFlow, KinkIntegrator, KinkState, integrate_kink_flow, kink_aware_flow, make_kink_integrator
from ._filippov import KinkProblem, pattern_field
from ._illinois import Illinois
from ._lanes import LANES, lane_cond

__all__ = [
    "Illinois",
    "LANES",
    "KinkFlow",
    "KinkIntegrator",
    "KinkProblem",
    "KinkState",
    "integrate_kink_flow",
    "kink_aware_flow",
    "lane_cond",
    "make_kink_integrator",
    "pattern_field",
]
