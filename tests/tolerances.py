"""Bounds for comparing two *separately compiled* programs that integrate one flow.

XLA's CPU code depends on the host's instruction set (FMA contraction, vector width),
so two programs -- the sweep engine's step and `gradient_flow`'s `diffeqsolve`, or the
kink-aware engine and `kink_aware_flow` alone -- round differently in the last bit on
some machines. The adaptive controller then takes slightly different steps, and each
step's local error is only controlled to `atol + rtol * scale`. So the two ends may
differ by up to that much per step. Bit-identity is asserted only for one compiled
program run again (slot counts, chunking, resume, device counts).
"""

import numpy as np


def tolerance_bound(*, rtol, atol, scale, num_steps) -> float:
    """`num_steps` local tolerances `atol + rtol * scale` (largest over the batch)."""
    return float(np.max(num_steps)) * (atol + rtol * float(np.max(scale)))


def assert_within_tolerance(a, b, *, rtol, atol, scale, num_steps, err_msg=""):
    """`a` and `b` agree within `tolerance_bound`."""
    bound = tolerance_bound(rtol=rtol, atol=atol, scale=scale, num_steps=num_steps)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=bound, err_msg=err_msg)


def assert_step_counts_close(a, b, *, slack=2):
    """Step counts of two compilations: a last-bit difference can flip one
    accept/reject decision near the controller's threshold, costing a step or two."""
    assert abs(int(a) - int(b)) <= slack, (int(a), int(b))
