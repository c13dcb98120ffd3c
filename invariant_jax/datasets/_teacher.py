"""Teacher-student data."""

from __future__ import annotations

import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from .._checks import check_integer, check_positive
from ..graph import DAG
from ..network import DAGNetwork

__all__ = ["teacher_student"]


def teacher_student(
    graph: DAG,
    n_samples: int,
    *,
    key: PRNGKeyArray,
    activation: str = "relu",
    init: str = "glorot",
    noise: float = 0.0,
) -> tuple[Float[Array, "N d_in"], Float[Array, "N d_out"], DAGNetwork]:
    """Inputs `x ~ N(0, I)` and targets from a random teacher network on `graph`.

    **Returns:** `(X, Y, teacher)`.
    """
    check_integer("n_samples", n_samples, minimum=1)
    check_positive("noise", noise, allow_zero=True)
    kx, kt, kn = jr.split(key, 3)
    teacher = DAGNetwork(graph, activation, key=kt, init=init)
    X = jr.normal(kx, (n_samples, graph.n_in))
    Y = teacher.forward(X)
    if noise:
        Y = Y + noise * jr.normal(kn, Y.shape, Y.dtype)
    return X, Y, teacher
