"""Named activations, and the properties the laws depend on.

An `Activation` is a small static `eqx.Module`, hashable (it is a static field of
`DAGNetwork`), built with keyword flags that say which theory applies:

- `positively_homogeneous`: `sigma(a x) = a sigma(x)` for `a > 0`; then `c = B~ theta^2`
  is conserved by gradient flow.
- `piecewise_linear`: the flow is piecewise polynomial, with kinks where `z = 0`.
- `smooth`: infinitely differentiable; Hessians and GLU limits make sense.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import erf as _erf

__all__ = ["Activation", "get_activation", "ACTIVATIONS", "leaky_relu", "smoothed_relu"]


class Activation(eqx.Module):
    """A scalar activation function with the analytic properties the laws depend on.

    A small static Module, in the spirit of `equinox.nn.Linear`: every field is
    configuration (`eqx.field(static=True)`), so an `Activation` has no array leaves and is
    hashable. It is a static field of `DAGNetwork`, so two activations that are equal
    share compiled programs. Equality and hashing use the name, the flags and the slope,
    not the identity of `fn` and `derivative` (two `leaky_relu(0.2)` are equal).

    **Arguments:**

    - `name`: the name, as `get_activation` and the CLI spell it.
    - `fn`: the elementwise function `sigma`.
    - `derivative`: the elementwise `sigma'` (any convention at the kink).
    - `positively_homogeneous`: `sigma(a x) = a sigma(x)` for `a > 0`; then `c = B~ theta^2`
        is conserved by gradient flow. (Keyword only.)
    - `piecewise_linear`: `sigma(x) = max(x, s x)` with `s = negative_slope`, so the flow
        is piecewise polynomial with kinks where `z = 0`; implies positive homogeneity.
        (Keyword only.)
    - `smooth`: infinitely differentiable; Hessians and GLU limits make sense. (Keyword
        only.)
    - `negative_slope`: the slope for `x < 0` of a piecewise-linear activation, in
        `[0, 1]`: 0 for relu, 1 for linear. (Keyword only; 0 by default.)

    `kinked` is derived, not declared: piecewise linear with `negative_slope != 1`.
    """

    name: str = eqx.field(static=True)
    fn: Callable = eqx.field(static=True)
    derivative: Callable = eqx.field(static=True)
    positively_homogeneous: bool = eqx.field(static=True)
    piecewise_linear: bool = eqx.field(static=True)
    smooth: bool = eqx.field(static=True)
    negative_slope: float = eqx.field(static=True)

    def __init__(
        self,
        name: str,
        fn: Callable,
        derivative: Callable,
        *,
        positively_homogeneous: bool,
        piecewise_linear: bool,
        smooth: bool,
        negative_slope: float = 0.0,
    ):
        self.name = name
        self.fn = fn
        self.derivative = derivative
        self.positively_homogeneous = positively_homogeneous
        self.piecewise_linear = piecewise_linear
        self.smooth = smooth
        self.negative_slope = negative_slope

    def __check_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Activation needs a non-empty name; got {self.name!r}.")
        for field in ("fn", "derivative"):
            if not callable(getattr(self, field)):
                raise TypeError(f"Activation {self.name!r}: {field} must be callable; got {getattr(self, field)!r}.")
        for field in ("positively_homogeneous", "piecewise_linear", "smooth"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(
                    f"Activation {self.name!r}: {field} must be True or False; got {getattr(self, field)!r}."
                )
        if isinstance(self.negative_slope, bool) or not isinstance(self.negative_slope, (int, float)):
            raise TypeError(f"Activation {self.name!r}: negative_slope must be a number; got {self.negative_slope!r}.")
        if self.piecewise_linear:
            if not 0.0 <= self.negative_slope <= 1.0:
                raise ValueError(
                    f"Activation {self.name!r}: a piecewise-linear activation is max(x, s x) with "
                    f"0 <= s <= 1; got negative_slope={self.negative_slope!r}."
                )
            if not self.positively_homogeneous:
                raise ValueError(
                    f"Activation {self.name!r}: max(x, s x) is positively homogeneous; declare "
                    "positively_homogeneous=True, or piecewise_linear=False."
                )
            if self.smooth and self.negative_slope != 1.0:
                raise ValueError(
                    f"Activation {self.name!r}: a kink at 0 (negative_slope={self.negative_slope!r}) "
                    "is not smooth; declare smooth=False."
                )

    def __call__(self, x):
        return self.fn(x)

    @property
    def kinked(self) -> bool:
        """Piecewise linear with a kink at 0 (relu, leaky_relu; not linear)."""
        return self.piecewise_linear and self.negative_slope != 1.0

    def _key(self) -> tuple:
        return (self.name, self.positively_homogeneous, self.piecewise_linear, self.smooth, float(self.negative_slope))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Activation):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("Activation", *self._key()))

    def __repr__(self) -> str:
        return f"Activation({self.name!r})"


def _relu_d(x):
    return jnp.where(x > 0, 1.0, 0.0).astype(jnp.result_type(x))


def leaky_relu(negative_slope: float = 0.01) -> Activation:
    """Leaky ReLU `max(x, s x)` with slope `s` in `[0, 1)` for `x < 0`.

    The same slope gives the same object, so direct uses hit the same compiled programs.
    """
    s = float(negative_slope)
    if not (0.0 <= s < 1.0):
        raise ValueError(f"leaky_relu needs 0 <= negative_slope < 1; got {negative_slope!r}.")
    return _leaky_relu(s)


@functools.lru_cache(maxsize=64)
def _leaky_relu(s: float) -> Activation:
    return Activation(
        "leaky_relu" if s == 0.01 else f"leaky_relu:{s:g}",
        lambda x: jnp.where(x > 0, x, s * x),
        lambda x: jnp.where(x > 0, 1.0, s).astype(jnp.result_type(x)),
        positively_homogeneous=True,
        piecewise_linear=True,
        smooth=False,
        negative_slope=s,
    )


def smoothed_relu(beta: float) -> Activation:
    """`softplus(beta x) / beta`: smooth, within `log(2) / beta` of relu, and relu as
    `beta -> inf` (derivative `sigmoid(beta x)`). The independent reference for the
    exact (kink-aware) relu flow: the smooth net's gradient flow converges to it like
    `1 / beta`, sliding modes included (see the solvers guide).

    The same `beta` gives the same object, so direct uses hit the same compiled programs.
    """
    b = float(beta)
    if not (b > 0.0 and b < float("inf")):
        raise ValueError(f"smoothed_relu needs a finite beta > 0; got {beta!r}.")
    return _smoothed_relu(b)


@functools.lru_cache(maxsize=64)
def _smoothed_relu(b: float) -> Activation:
    return Activation(
        f"softplus_beta{b:g}",
        lambda x: jax.nn.softplus(b * x) / b,
        lambda x: jax.nn.sigmoid(b * x),
        positively_homogeneous=False,
        piecewise_linear=False,
        smooth=True,
    )


def _g(x):
    return jax.nn.sigmoid(4 * x) + jax.nn.softplus(x)


def _g_d(x):
    s4 = jax.nn.sigmoid(4 * x)
    return 4 * s4 * (1 - s4) + jax.nn.sigmoid(x)


_SQRT2 = 1.4142135623730951
_SQRT_2_OVER_PI = 0.7978845608028654

_SMOOTH = dict(positively_homogeneous=False, piecewise_linear=False, smooth=True)

ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in [
        Activation("relu", jax.nn.relu, _relu_d, positively_homogeneous=True, piecewise_linear=True, smooth=False),
        leaky_relu(0.01),
        Activation(
            "linear",
            lambda x: x,
            jnp.ones_like,
            positively_homogeneous=True,
            piecewise_linear=True,
            smooth=True,
            negative_slope=1.0,
        ),
        Activation("softplus", jax.nn.softplus, jax.nn.sigmoid, **_SMOOTH),
        Activation("erf", _erf, lambda x: (2 / jnp.sqrt(jnp.pi)) * jnp.exp(-(x**2)), **_SMOOTH),
        Activation("tanh", jnp.tanh, lambda x: 1 - jnp.tanh(x) ** 2, **_SMOOTH),
        Activation("sigmoid", jax.nn.sigmoid, lambda x: jax.nn.sigmoid(x) * (1 - jax.nn.sigmoid(x)), **_SMOOTH),
        Activation(
            "gelu",
            lambda x: jax.nn.gelu(x, approximate=False),
            lambda x: 0.5 * (1 + _erf(x / _SQRT2)) + x * jnp.exp(-0.5 * x**2) / jnp.sqrt(2 * jnp.pi),
            **_SMOOTH,
        ),
        Activation("g", _g, _g_d, **_SMOOTH),
    ]
}
"""The activations by name. Add one here to make it available to `get_activation`, the
CLI and TOML files."""


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
    raise ValueError(f"Unknown activation {act!r}; choose one of {sorted(ACTIVATIONS)} (or 'leaky_relu:<slope>').")
