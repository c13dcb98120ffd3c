"""Named activations, and the properties the laws depend on.

An `Activation` is hashable (it is a static field of `DAGNetwork`). The flags say
which theory applies:

- `positively_homogeneous`: `sigma(a x) = a sigma(x)` for `a > 0`; then `c = B~ theta^2`
  is conserved by gradient flow.
- `piecewise_linear`: the flow is piecewise polynomial, with kinks where `z = 0`.
- `smooth`: infinitely differentiable; Hessians and GLU limits make sense.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.scipy.special import erf as _erf

__all__ = ["Activation", "get_activation", "ACTIVATIONS", "leaky_relu"]


@dataclasses.dataclass(frozen=True)
class Activation:
    """A scalar activation function with its analytic properties.

    **Fields:** `name`, `fn` (elementwise), `derivative` (elementwise `sigma'`),
    `positively_homogeneous`, `piecewise_linear`, `smooth`, and `negative_slope` (the
    slope for `x < 0` of a piecewise-linear activation: 0 for relu, 1 for linear).
    """

    name: str
    fn: Callable = dataclasses.field(compare=False)
    derivative: Callable = dataclasses.field(compare=False)
    positively_homogeneous: bool
    piecewise_linear: bool
    smooth: bool
    negative_slope: float = 0.0

    def __call__(self, x):
        return self.fn(x)

    @property
    def kinked(self) -> bool:
        """Piecewise linear with a kink at 0 (relu, leaky_relu; not linear)."""
        return self.piecewise_linear and self.negative_slope != 1.0

    def __repr__(self) -> str:
        return f"Activation({self.name!r})"


def _relu_d(x):
    return jnp.where(x > 0, 1.0, 0.0).astype(jnp.result_type(x))


def leaky_relu(negative_slope: float = 0.01) -> Activation:
    """Leaky ReLU `max(x, s x)` with slope `s` in `[0, 1)` for `x < 0`."""
    s = float(negative_slope)
    if not (0.0 <= s < 1.0):
        raise ValueError(f"leaky_relu needs 0 <= negative_slope < 1; got {negative_slope!r}.")
    name = "leaky_relu" if s == 0.01 else f"leaky_relu:{s:g}"
    return Activation(
        name,
        lambda x: jnp.where(x > 0, x, s * x),
        lambda x: jnp.where(x > 0, 1.0, s).astype(jnp.result_type(x)),
        True,
        True,
        False,
        s,
    )


def _g(x):
    return jax.nn.sigmoid(4 * x) + jax.nn.softplus(x)


def _g_d(x):
    s4 = jax.nn.sigmoid(4 * x)
    return 4 * s4 * (1 - s4) + jax.nn.sigmoid(x)


_SQRT2 = 1.4142135623730951
_SQRT_2_OVER_PI = 0.7978845608028654

ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in [
        Activation("relu", jax.nn.relu, _relu_d, True, True, False),
        leaky_relu(0.01),
        Activation("linear", lambda x: x, jnp.ones_like, True, True, True, negative_slope=1.0),
        Activation("softplus", jax.nn.softplus, jax.nn.sigmoid, False, False, True),
        Activation("erf", _erf, lambda x: (2 / jnp.sqrt(jnp.pi)) * jnp.exp(-(x**2)), False, False, True),
        Activation("tanh", jnp.tanh, lambda x: 1 - jnp.tanh(x) ** 2, False, False, True),
        Activation("sigmoid", jax.nn.sigmoid, lambda x: jax.nn.sigmoid(x) * (1 - jax.nn.sigmoid(x)), False, False, True),
        Activation(
            "gelu",
            lambda x: jax.nn.gelu(x, approximate=False),
            lambda x: 0.5 * (1 + _erf(x / _SQRT2)) + x * jnp.exp(-0.5 * x**2) / jnp.sqrt(2 * jnp.pi),
            False,
            False,
            True,
        ),
        Activation("g", _g, _g_d, False, False, True),
    ]
}


def get_activation(act: str | Activation) -> Activation:
    """Look up an activation by name (`"leaky_relu:0.2"` sets the slope), or pass one
    through."""
    if isinstance(act, Activation):
        return act
    if not isinstance(act, str):
        raise TypeError(f"activation must be a name or an Activation; got {type(act).__name__}.")
    if act in ACTIVATIONS:
        return ACTIVATIONS[act]
    if act.startswith("leaky_relu:"):
        try:
            return leaky_relu(float(act.split(":", 1)[1]))
        except ValueError as e:
            raise ValueError(f"Bad leaky_relu slope in {act!r}: {e}") from None
    raise ValueError(
        f"Unknown activation {act!r}; choose one of {sorted(ACTIVATIONS)} "
        "(or 'leaky_relu:<slope>')."
    )
