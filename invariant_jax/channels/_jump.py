"""The jump procedure along a channel, and power-law fits of how the loss gap, the
sharpness and the GLU approximation scale with `eps`."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike
from tqdm.auto import tqdm

from .._checks import check_integer, check_positive, take_deprecated
from .._results import RESULTS, is_success, result_code, result_from_code, result_where
from ..flow import gradient_flow
from ..losses import check_data, get_loss, hessian, require_smooth
from ..network import DAGNetwork
from ..options import SaveTimes, SolverOptions
from ._glu import ChannelPair, channel_coordinates, collapse_channel, glu_limit, pair_output, set_channel_coordinates

__all__ = ["PowerLaw", "power_law_fit", "JumpResult", "jump_procedure", "GLUConvergence", "glu_convergence"]


class PowerLaw(eqx.Module):
    """A log-log least-squares fit `y ~ prefactor * x^exponent`.

    **Fields:** `exponent`, `stderr` (its standard error), `prefactor`, `r2`, `n`.
    """

    exponent: float
    stderr: float
    prefactor: float
    r2: float
    n: int

    def __str__(self) -> str:
        return f"{self.exponent:.3f} +- {self.stderr:.3f} (n={self.n}, R^2={self.r2:.4f})"


def power_law_fit(x: ArrayLike, y: ArrayLike) -> PowerLaw:
    """Fit `log|y| = exponent log x + log prefactor` by least squares
    (`scipy.stats.linregress`); `stderr` is the slope's standard error.

    **Arguments:** positive `x`, nonzero `y` (at least 3 points).
    """
    from scipy.stats import linregress

    x, y = np.asarray(x, float), abs(np.asarray(y, float))
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 3:
        raise ValueError(f"power_law_fit needs at least 3 positive finite points; got {int(ok.sum())}.")
    r = linregress(np.log(x[ok]), np.log(y[ok]))
    return PowerLaw(float(r.slope), float(r.stderr), float(np.exp(r.intercept)), float(r.rvalue**2), int(ok.sum()))


class GLUConvergence(eqx.Module):
    """How fast the pair's output tends to its GLU limit as `eps -> 0` at fixed
    `(w, Delta, c, a)`.

    **Fields:** `eps` `(K,)`, `errors` (max over samples and successors of
    `|pair_output - glu_limit|`), `fit` (a `PowerLaw` of errors vs eps; the rate).
    `result` (per `eps`): `successful`, or `nonfinite_state` where the error is not
    finite; `success` says which.
    """

    eps: np.ndarray
    errors: np.ndarray
    fit: PowerLaw

    @property
    def result(self) -> RESULTS:
        return result_where(np.isfinite(self.errors), RESULTS.successful, RESULTS.nonfinite_state)

    @property
    def success(self) -> np.ndarray:
        return np.asarray(is_success(self.result))


def glu_convergence(
    pair: ChannelPair, X: ArrayLike, eps_values: ArrayLike, *, net: DAGNetwork | None = None
) -> GLUConvergence:
    """Measure `max |pair_output - glu_limit|` for each `eps` in `eps_values`, holding
    `(w, Delta, c, a)`, and fit the rate. With `w` the midpoint of the two input weights
    the leading error terms are even in `eps`, so the rate is `eps^2` (at least the
    `O(eps)` the GLU limit promises).

    **Returns:** a `GLUConvergence`.
    """
    eps_values = np.asarray(eps_values, float)
    if eps_values.ndim != 1 or np.any(~np.isfinite(eps_values)) or np.any(eps_values <= 0):
        raise ValueError("eps_values must be a 1-D array of positive finite numbers.")
    glu = glu_limit(pair, X, net=net)
    errs = np.array([float(jnp.max(jnp.abs(pair_output(pair.with_eps(e), X, net=net) - glu))) for e in eps_values])
    return GLUConvergence(eps=eps_values, errors=errs, fit=power_law_fit(eps_values, errs))


class JumpResult(eqx.Module):
    """The jump procedure's record, one entry per jump (after the flow that follows it).

    **Fields:** `eps`, `loss`, `limit_loss`, `gap` (`loss - limit_loss`), `sharpness`
    (top Hessian eigenvalue), `param_norm`; `sharpness_fit` (`PowerLaw` of sharpness vs
    `1/eps`, expected exponent 2), `gap_fit` (`PowerLaw` of `|gap|` vs `eps`, expected
    exponent 2); `pairs` (the `ChannelPair` after each jump) and `network` (the last);
    `result` (per jump): the result of the flow after the jump (`successful` when
    `t_flow = 0`), or `nonfinite_state` where the loss or sharpness is not finite;
    `success` (per jump) says whether the jump's record can be trusted.
    """

    eps: np.ndarray
    loss: np.ndarray
    limit_loss: np.ndarray
    gap: np.ndarray
    sharpness: np.ndarray
    param_norm: np.ndarray
    sharpness_fit: PowerLaw | None
    gap_fit: PowerLaw | None
    pairs: tuple
    network: DAGNetwork
    result: RESULTS

    @property
    def success(self) -> np.ndarray:
        return np.asarray(is_success(self.result))

    def table(self) -> str:
        head = (
            f"{'jump':>4} {'eps':>10} {'1/eps':>10} {'loss':>12} {'loss - L0':>11} {'sharpness':>11} {'||theta||':>10}"
        )
        rows = [head, "-" * len(head)]
        for k in range(len(self.eps)):
            rows.append(
                f"{k:>4} {self.eps[k]:>10.3e} {1 / self.eps[k]:>10.3e} {self.loss[k]:>12.6e} "
                f"{self.gap[k]:>11.3e} {self.sharpness[k]:>11.3e} {self.param_norm[k]:>10.3e}"
            )
        if self.sharpness_fit is not None:
            rows.append(f"sharpness ~ (1/eps)^p, p = {self.sharpness_fit}   (expected 2)")
            rows.append(f"loss gap  ~ eps^q,     q = {self.gap_fit}   (expected 2)")
        return "\n".join(rows)


JUMP_SOLVER = SolverOptions("kvaerno5_newton", rtol=1e-9, atol=1e-9)
"""`jump_procedure`'s default flow solver: Kvaerno5 (the channel is stiff, sharpness ~
1/eps^2) with a Newton stage solve (`ij.newton_kvaerno5`: diffrax's chord solve crawls
along a channel) at rtol = atol = 1e-9."""

_SOLVER_KEYWORDS = {k: f"pass solver=ij.SolverOptions(name, {k}=...) instead" for k in ("rtol", "atol", "max_steps")}


def _jump_solver(solver, old: dict) -> SolverOptions:
    if isinstance(solver, SolverOptions):
        if old:
            raise ValueError(f"Pass {', '.join(sorted(old))} inside SolverOptions(...), not as keywords as well.")
        return solver
    return SolverOptions(solver, **{k: old.get(k, getattr(JUMP_SOLVER, k)) for k in ("rtol", "atol", "max_steps")})


def jump_procedure(
    net: DAGNetwork,
    pair: ChannelPair | tuple[int, int],
    X: ArrayLike,
    Y: ArrayLike,
    *,
    n_jumps: int = 6,
    factor: float = 0.5,
    t_flow: float = 0.0,
    loss="mse",
    solver: str | SolverOptions = JUMP_SOLVER,
    progress: bool = True,
    **deprecated,
) -> JumpResult:
    """Jump along a channel: multiply `eps` by `factor` holding `(w, Delta, c, a)`, map
    back to weights, continue gradient flow for `t_flow` (0: no flow), recompute the
    pair's coordinates, and record the loss, the limit loss (the loss of
    `collapse_channel`), their gap and the sharpness. Repeat `n_jumps` times and fit
    the exponents.

    **Arguments:** `net`; `pair` (a `ChannelPair` or hidden positions `(i, j)`); data;
    `n_jumps`; `factor` in (0, 1); `t_flow` and the flow's `solver` (an `ij.SolverOptions`,
    default `JUMP_SOLVER`: Kvaerno5 with a Newton stage solve at rtol = atol = 1e-9, since the channel is stiff,
    sharpness ~ 1/eps^2; or a solver name with those tolerances); `loss` (a name or
    callable, e.g. `weighted_mse` for population losses). The old keywords `rtol=`,
    `atol=`, `max_steps=` still work, with a `DeprecationWarning`.

    **Returns:** a `JumpResult`.
    """
    opts = _jump_solver(solver, take_deprecated("jump_procedure", deprecated, _SOLVER_KEYWORDS))
    require_smooth(net, "jump_procedure")
    X, Y = check_data(net.graph, X, Y)
    if not 0 < factor < 1:
        raise ValueError(f"factor must lie in (0, 1) so that eps shrinks; got {factor!r}.")
    check_integer("n_jumps", n_jumps, minimum=1)
    check_positive("t_flow", t_flow, allow_zero=True)
    ij = (pair.i, pair.j) if isinstance(pair, ChannelPair) else tuple(pair)
    fn = get_loss(loss)
    Lfun = jax.jit(lambda n: fn(n.forward(X), Y))
    top = jax.jit(lambda n: jnp.linalg.eigvalsh(hessian(n, X, Y, loss=loss))[-1])

    @eqx.filter_jit
    def flow(n):
        f = gradient_flow(n, X, Y, t_flow, loss=loss, saveat=SaveTimes(n_save=2), solver=opts)
        return f.final, result_code(f.result)

    ok = int(result_code(RESULTS.successful))
    p = channel_coordinates(net, *ij)
    rec: dict[str, list[float]] = {k: [] for k in ("eps", "loss", "limit", "sharp", "norm", "result")}
    pairs = []
    for _ in tqdm(range(n_jumps), desc="jumps", disable=not progress):
        net = set_channel_coordinates(net, p.with_eps(p.eps * factor))
        code = ok
        if t_flow > 0:
            net, code = flow(net)
        p = channel_coordinates(net, *ij)
        pairs.append(p)
        rec["eps"].append(float(p.eps))
        rec["loss"].append(float(Lfun(net)))
        rec["limit"].append(float(fn(collapse_channel(net, p).forward(X), Y)))
        rec["sharp"].append(float(top(net)))
        rec["norm"].append(float(jnp.linalg.norm(net.edge_weights())))
        rec["result"].append(int(code))
    return _jump_result(rec, pairs, net)


def _jump_result(rec: dict[str, list[float]], pairs: list, net: DAGNetwork) -> JumpResult:
    """The `JumpResult` of the per-jump records `rec` (the exponents are fitted from 3 jumps)."""
    eps = np.array(rec["eps"])
    gap = np.array(rec["loss"]) - np.array(rec["limit"])
    sharp = np.array(rec["sharp"])
    fits = (power_law_fit(1 / eps, sharp), power_law_fit(eps, gap)) if len(eps) >= 3 else (None, None)
    finite = np.isfinite(np.array(rec["loss"])) & np.isfinite(sharp)
    result = result_where(finite, result_from_code(np.array(rec["result"], np.int32)), RESULTS.nonfinite_state)
    return JumpResult(
        eps=eps,
        loss=np.array(rec["loss"]),
        limit_loss=np.array(rec["limit"]),
        gap=gap,
        sharpness=sharp,
        param_norm=np.array(rec["norm"]),
        sharpness_fit=fits[0],
        gap_fit=fits[1],
        pairs=tuple(pairs),
        network=net,
        result=result,
    )
