"""Defaults that several modules share, each written once here. JAX-free: the CLI's
argument parser reads them to print `--help` without importing JAX."""

MAX_STEPS = 100_000
"""Step budget of one gradient flow (`SolverOptions.max_steps`, sweeps, studies)."""

KINK_MAX_STEPS = 10_000
"""Step budget of each segment of a kink-aware flow when it gets a solver name."""

DRIFT_TOL_UNITS = 100.0
"""A drift of `c` within this many tolerance units (`atol + rtol * scale`) is integration
error: beyond it a flow where a conservation law holds is `RESULTS.drift_exceeded`."""
