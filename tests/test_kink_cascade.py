"""The ambiguous-event cascade of issue 27, reduced to a 2-3-1 ReLU net (no bias).

Diagnosis (issue 27 session): trajectory 325 of `test_sweep_recompile._relu_batches`
(one sliding entry and exit before the cascade) reaches the origin of hidden node v = 2's
incoming weights: there every sample's pre-activation `z_{., 2} = w . x` is zero at once
(all 12 surfaces meet; at events 34-39, all ambiguous, the 12 pairs have |z| < 6e-8 and
rates |dz/dt| of 0.04-1.5). `resolve` (single pivots, one pair at a time) finds no consistent modes among the
many candidate pairs, the fallback leaves the pattern as it was, with restart margins
that let pairs sit on their wrong side; each margin is used up after `ztol / |dz/dt|`
(~1e-9 in time), the next event fires, and 997 of the 1000 events are ambiguous
(`max_events_reached` at t = 0.413 of 0.5). Trajectory 714 does the same (993 ambiguous,
t = 0.495). What the fix needs: a mode for a node whose incoming weights reach zero (all
its pairs on their surfaces): for ReLU, w = 0 with every pair inactive is a stationary
Filippov mode (the node's field vanishes); whether the flow leaves the origin, and along
which sector, is decided by the sector fields there.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij
from test_sweep_recompile import _data, _relu_batches


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 27: a node's incoming weights reach zero (all its surfaces at once); "
                                       "ambiguous-event cascade, see the module docstring")
@pytest.mark.parametrize("index", [325, 714])
def test_collapsing_node_has_no_ambiguous_cascade(index):
    _, table = _relu_batches((1000,))
    X, Y = _data(0)
    net = ij.DAGNetwork(ij.mlp([2, 3, 1]), "relu", edge_weights=table[index])
    kf = ij.kink_aware_flow(net, X, Y, 0.5, solver="tsit5", rtol=1e-7, atol=1e-7, n_save=3)
    assert bool(kf.success) and int(kf.num_ambiguous) == 0
    # the node's incoming weights end at (or leave) the origin; c is conserved to tolerance
    assert float(jnp.max(jnp.abs(kf.flow.conserved[-1] - kf.flow.conserved[0]))) < 1e-5
    assert np.isfinite(float(kf.flow.loss_final))
