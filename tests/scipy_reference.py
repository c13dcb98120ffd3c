"""An independent reference for gradient flow: SciPy's `solve_ivp` on `-grad L`, with the
gradient compiled once by `jax.jit(jax.grad(...))`."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import invariant_jax as ij


def scipy_flow(net, X, Y, t1, *, method, rtol, atol, t_eval=None):
    """`solve_ivp` from `net`'s edge weights over `[0, t1]` (MSE loss); `.y` is `(E, times)`."""
    grad = jax.jit(jax.grad(ij.edge_loss_fn(net, X, Y)))
    return solve_ivp(
        lambda t, y: -np.asarray(grad(jnp.asarray(y))),
        (0.0, t1),
        np.asarray(net.edge_weights()),
        method=method,
        rtol=rtol,
        atol=atol,
        t_eval=t_eval,
    )
