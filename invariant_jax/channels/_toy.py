"""The two-neuron toy model: two neurons without bias trained on the population loss
(x ~ N(0, 1)) for the target `erf((5x + 2.5)/sqrt2) + erf((5x - 2.5)/sqrt2)`; its limit
loss as a function of the merged input weight `w`, and the critical points of that
curve.

Student convention: `convention="paper"` (the default) uses the paper's neurons
`erf(z / sqrt2)` (MLPGradientFlow's `sigmoid2`, the same function as the target's), so
the critical points lie on the paper's `w` axis; `convention="erf"` uses `erf(z)`
neurons, whose `w` is the paper's divided by sqrt2 (the earlier convention here)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf
from jaxtyping import Array, Float
from scipy.optimize import brentq

from .._results import RESULTS, is_success
from ..activations import Activation, get_activation
from ..graph import mlp
from ..losses import gauss_hermite, weighted_mse
from ..network import DAGNetwork

__all__ = [
    "toy_target",
    "toy_data",
    "toy_network",
    "toy_limit_loss",
    "ToyCriticalPoints",
    "toy_critical_points",
    "toy_activation",
    "SIGMOID2",
    "CONVENTIONS",
]

_SQRT2 = float(np.sqrt(2.0))

SIGMOID2 = Activation(
    "sigmoid2",
    lambda x: erf(x / _SQRT2),
    lambda x: jnp.sqrt(2 / jnp.pi) * jnp.exp(-0.5 * x**2),
    positively_homogeneous=False,
    piecewise_linear=False,
    smooth=True,
)
"""`erf(z / sqrt2)`: the paper's toy-model neuron (MLPGradientFlow's `sigmoid2`)."""

CONVENTIONS = ("paper", "erf")


def toy_activation(convention: str = "paper") -> Activation:
    """The student neuron: `erf(z / sqrt2)` for `"paper"`, `erf(z)` for `"erf"`."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}; got {convention!r}.")
    return SIGMOID2 if convention == "paper" else get_activation("erf")


def toy_target(X: Float[Array, "N 1"]) -> Float[Array, "N 1"]:
    """`erf((5x + 2.5)/sqrt2) + erf((5x - 2.5)/sqrt2)`."""
    X = jnp.asarray(X)
    return erf((5 * X + 2.5) / _SQRT2) + erf((5 * X - 2.5) / _SQRT2)


def toy_data(n_points: int = 401):
    """Gauss-Hermite nodes `X` `(n, 1)`, targets `Y`, and the loss `weighted_mse(w)`, so
    that `gradient_flow(net, X, Y, t1, loss=loss)` runs on the population loss.

    **Returns:** `(X, Y, loss)`.
    """
    X, w = gauss_hermite(1, n_points)
    return X, toy_target(X), weighted_mse(w)


def toy_network(w1: float, w2: float, a1: float, a2: float, *, convention: str = "paper") -> DAGNetwork:
    """`f(x) = a1 s(w1 x) + a2 s(w2 x)` as a `DAGNetwork` on `mlp([1, 2, 1])`, with
    `s(z) = erf(z / sqrt2)` (`convention="paper"`) or `erf(z)` (`"erf"`)."""
    # edge order: (x0, h1_0), (x0, h1_1), (h1_0, y0), (h1_1, y0)
    return DAGNetwork(
        mlp([1, 2, 1]), toy_activation(convention), edge_weights=jnp.asarray([w1, w2, a1, a2], dtype=float)
    )


def _features(w, X, convention):
    act = toy_activation(convention)
    x = X[:, 0]
    return jnp.stack([act(w * x), x * act.derivative(w * x)], axis=1)


def toy_limit_loss(w, *, n_points: int = 401, convention: str = "paper"):
    """The limit loss at merged input weight `w`: the two-neuron net collapsed to the GLU
    `c erf(w x) + a x erf'(w x)`, with `(c, a)` chosen optimally (weighted least squares
    on the population), and the curvature coefficient `h` of `L ~ L0 + eps^2 h`.

    **Returns:** `(L0, c, a, h)` (scalars; vectorise with `jax.vmap`).
    """
    X, Y, _ = toy_data(n_points)
    _, q = gauss_hermite(1, n_points)
    F = _features(w, X, convention)
    G = F.T @ (q[:, None] * F)
    coef = jnp.linalg.solve(G + 1e-14 * jnp.eye(2), F.T @ (q * Y[:, 0]))
    r = F @ coef - Y[:, 0]
    L0 = 0.5 * jnp.sum(q * r**2)
    c, a = coef
    act = toy_activation(convention)
    s1 = act.derivative
    s2 = jax.vmap(jax.grad(s1))
    s3 = jax.vmap(jax.grad(jax.grad(s1)))
    x = X[:, 0]
    # pair output = GLU + eps^2 [ (c/2) x^2 s''(wx) + (a/6) x^3 s'''(wx) ] + O(eps^4)
    corr = 0.5 * c * x**2 * s2(w * x) + a * x**3 * s3(w * x) / 6
    h = jnp.sum(q * r * corr)
    return L0, c, a, h


class ToyCriticalPoints(eqx.Module):
    """Critical points of the toy model's limit loss `L0(w)`, `w >= 0` (it is even in w).

    **Fields:** `w`, `loss`, `curvature` (`L0''(w)`), `h` (at the point), `kind` (tuple of
    `"saddle"` (a maximum along w), `"channel minimum"` (a minimum with h > 0: flow can
    run into it), `"minimum with h < 0"` (the channel repels) and `"global minimum"`
    (the lowest limit loss)), `h_sign_after` (sign of h on the interval up to the next
    critical point), and the grid `ws`, `losses`, `hs` for plotting. `result`:
    `successful`, or `nonfinite_state` when a listed point's loss, curvature or `h` is not
    finite; `success` says which.
    """

    w: np.ndarray
    loss: np.ndarray
    curvature: np.ndarray
    h: np.ndarray
    kind: tuple[str, ...]
    h_sign_after: tuple[str, ...]
    ws: np.ndarray
    losses: np.ndarray
    hs: np.ndarray

    @property
    def result(self) -> RESULTS:
        ok = all(np.all(np.isfinite(v)) for v in (self.loss, self.curvature, self.h))
        return RESULTS.successful if ok else RESULTS.nonfinite_state

    @property
    def success(self) -> bool:
        return bool(is_success(self.result))

    def table(self) -> str:
        head = f"{'w':>8} {'L0(w)':>11} {'L0pp(w)':>10} {'h(w)':>10}  {'kind':<20} {'sign h after':>12}"
        rows = [head, "-" * len(head)]
        for k in range(len(self.w)):
            rows.append(
                f"{self.w[k]:>8.4f} {self.loss[k]:>11.6f} {self.curvature[k]:>10.3e} {self.h[k]:>10.3e}  "
                f"{self.kind[k]:<20} {self.h_sign_after[k]:>12}"
            )
        return "\n".join(rows)


def toy_critical_points(
    *, w_max: float = 6.0, n_grid: int = 1201, n_points: int = 401, w_min: float = 0.05, convention: str = "paper"
) -> ToyCriticalPoints:
    """Locate the critical points of the limit loss `L0(w)` on `[0, w_max]`: sign changes
    of `dL0/dw` on a grid, refined by `scipy.optimize.brentq`; the zeros of `h(w)` are
    listed too, so the sign of h between consecutive rows is constant. `w = 0` (critical
    by symmetry) is always listed; the search starts at `w_min`, because as `w -> 0` the
    two GLU features `erf(w x)` and `x erf'(w x)` become collinear and `L0` jumps (its
    limit fits `x` and `x^3`, while `w = 0` fits `x` only).

    **Returns:** a `ToyCriticalPoints`.
    """
    f = jax.jit(lambda w: toy_limit_loss(w, n_points=n_points, convention=convention))
    dL = jax.jit(jax.grad(lambda w: toy_limit_loss(w, n_points=n_points, convention=convention)[0]))
    d2L = jax.jit(jax.grad(jax.grad(lambda w: toy_limit_loss(w, n_points=n_points, convention=convention)[0])))
    ws = np.linspace(0.0, w_max, n_grid)
    vals = jax.vmap(f)(jnp.asarray(ws))
    losses, hs = np.asarray(vals[0]), np.asarray(vals[3])
    grads = np.asarray(jax.vmap(dL)(jnp.asarray(ws)))
    found = [0.0]  # L0 is even in w
    start = max(1, int(np.searchsorted(ws, w_min)))
    for k in range(start, n_grid - 1):
        if grads[k] == 0 or np.sign(grads[k]) != np.sign(grads[k + 1]):
            found.append(brentq(lambda t: float(dL(t)), ws[k], ws[k + 1], xtol=1e-12))
    roots = np.array(sorted(set(np.round(found, 12))))
    hfun = lambda t: float(f(t)[3])  # noqa: E731
    h_zeros = [
        brentq(hfun, ws[k], ws[k + 1], xtol=1e-12)
        for k in range(start, n_grid - 1)
        if np.sign(hs[k]) * np.sign(hs[k + 1]) < 0
    ]
    is_h_zero = np.array([False] * len(roots) + [True] * len(h_zeros))
    order = np.argsort(np.concatenate([roots, h_zeros]))
    roots, is_h_zero = np.concatenate([roots, h_zeros])[order], is_h_zero[order]
    L = np.array([float(f(r)[0]) for r in roots])
    curv = np.array([float(d2L(r)) for r in roots])
    h = np.array([float(f(r)[3]) for r in roots])
    kinds = []
    for c, hv, hz in zip(curv, h, is_h_zero):
        if hz:
            kinds.append("h = 0")
        elif c < 0:
            kinds.append("saddle")
        else:
            kinds.append("channel minimum" if hv > 0 else "minimum with h < 0")
    minima = [k for k, c in enumerate(curv) if c >= 0 and not is_h_zero[k]]
    if minima:
        best = min(minima, key=lambda k: L[k])
        kinds[best] = "global minimum" if h[best] > 0 else kinds[best]
    after = []
    for k, r in enumerate(roots):
        hi = roots[k + 1] if k + 1 < len(roots) else w_max
        mid = (ws > max(r, w_min)) & (ws < hi)
        s = np.sign(hs[mid]) if mid.any() else np.array([0.0])
        after.append("+" if np.all(s > 0) else "-" if np.all(s < 0) else "mixed")
    return ToyCriticalPoints(
        w=roots, loss=L, curvature=curv, h=h, kind=tuple(kinds), h_sign_after=tuple(after), ws=ws, losses=losses, hs=hs
    )
