"""The frequency study: how often gradient flow from Glorot-normal initializations
ends in a flat channel, as a function of the target's roughness (Matérn-3/2 GP samples
at length scale 1/s), the width and the activation."""

from __future__ import annotations

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from tqdm.auto import tqdm

from .._results import result_code, status_code
from ..datasets import gp_data
from ..flow import gradient_flow
from ..graph import mlp
from ..network import DAGNetwork
from ..options import SolverOptions
from ..sweep import sweep_flows
from ._detect import MAXNORM, PAIR_TOL, detect_channels
from ._glu import PairClass

__all__ = ["FrequencyStudy", "channel_frequency"]


class FrequencyStudy(eqx.Module):
    """Result of `channel_frequency`. Arrays have shape `(A, S, W, n_inits)` (activation,
    roughness, width, initialization) unless noted.

    **Fields:** `activations`, `roughness`, `widths` (the grid); `channel` (all criteria
    of `detect_channels` hold), `candidate` (merging input weights and diverging,
    opposite output weights, but below the norm threshold), `loss_final`, `param_norm`,
    `t_final`, `status` (`ij.sweep.STATUSES` indices; `ij.sweep.status_is_success` tells
    success); `channel_fraction` and `candidate_fraction` `(A, S, W)`; `settings` (everything needed to rerun it).
    """

    activations: tuple[str, ...]
    roughness: tuple[float, ...]
    widths: tuple[int, ...]
    channel: np.ndarray
    candidate: np.ndarray
    loss_final: np.ndarray
    param_norm: np.ndarray
    t_final: np.ndarray
    status: np.ndarray
    settings: dict

    @property
    def channel_fraction(self) -> np.ndarray:
        return self.channel.mean(axis=-1)

    @property
    def candidate_fraction(self) -> np.ndarray:
        return (self.channel | self.candidate).mean(axis=-1)

    def table(self) -> str:
        head = f"{'activation':>10} {'s':>6} {'width':>5} {'channel':>8} {'+cand.':>7} {'median loss':>12} {'max norm':>9}"
        rows = [head, "-" * len(head)]
        for (a, act), (k, s), (m, w) in itertools.product(*(enumerate(v) for v in (self.activations, self.roughness, self.widths))):
            rows.append(f"{act:>10} {s:>6g} {w:>5d} {self.channel_fraction[a, k, m]:>8.2f} "
                        f"{self.candidate_fraction[a, k, m]:>7.2f} {np.median(self.loss_final[a, k, m]):>12.3e} "
                        f"{np.max(self.param_norm[a, k, m]):>9.2e}")
        return "\n".join(rows)

    def to_dict(self) -> dict:
        return dict(activations=list(self.activations), roughness=list(self.roughness), widths=list(self.widths),
                    channel_fraction=self.channel_fraction.tolist(), candidate_fraction=self.candidate_fraction.tolist(),
                    loss_final=self.loss_final.tolist(), param_norm=self.param_norm.tolist(),
                    status=self.status.tolist(), settings=self.settings)


_IMPLICIT = ("kvaerno3", "kvaerno4", "kvaerno5")


class _Batch(eqx.Module):
    theta_final: np.ndarray
    loss_final: np.ndarray
    t_final: np.ndarray
    status: np.ndarray


@eqx.filter_jit
def _run_batch(nets, X, Y, t1, solver, rtol, atol, max_steps):
    opts = SolverOptions(solver, rtol=rtol, atol=atol, max_steps=max_steps)
    f = eqx.filter_vmap(lambda n: gradient_flow(n, X, Y, t1, n_save=2, solver=opts))(nets)
    return f.theta_final, f.loss_final, f.t_final, result_code(f.result)


def _vmapped_flows(nets, X, Y, t1, *, solver, rtol, atol, max_steps) -> _Batch:
    # one compilation per graph and activation; new data reuse it
    th, L, t, r = (np.asarray(v) for v in _run_batch(nets, X, Y, t1, solver, rtol, atol, max_steps))
    return _Batch(theta_final=th, loss_final=L, t_final=t, status=np.asarray(status_code(r)))


def channel_frequency(
    *,
    activations=("softplus", "erf"),
    roughness=(0.1, 0.5, 2.0, 10.0),
    widths=(2, 4),
    n_inits: int = 8,
    n_samples: int = 32,
    dim: int = 1,
    bias: bool = True,
    t1: float = 1e4,
    solver: str = "kvaerno5",
    rtol: float = 1e-7,
    atol: float = 1e-7,
    max_steps: int = 20_000,
    maxnorm: float = MAXNORM,
    pair_tol: float = PAIR_TOL,
    engine: str = "auto",
    seed: int = 0,
    data_seed: int = 1,
    slots: int = 64,
    progress: bool = True,
) -> FrequencyStudy:
    """Run gradient flow from `n_inits` Glorot-normal initializations of
    `mlp([dim, width, 1], bias=bias)` for every activation, roughness `s` and width, on
    one GP target per `s` (`gp_data(n_samples, dim, roughness=s)`), and classify each
    final state with `detect_channels(net, X, Y, maxnorm=..., pair_tol=...)` (the
    late update is `-grad L` at the final state).

    The flows go through the sweep engine (`ij.sweep.sweep_flows`: continuous batching,
    sharded over all JAX devices), so the same call scales to many initializations and
    devices unchanged. On more than one device, implicit solvers (Kvaerno, for stiff
    channels) run as one `eqx.filter_vmap` of `gradient_flow` (`engine="vmap"`), because
    lineax's Newton operators do not yet pass through the engine's `shard_map`. Time is
    gradient-flow time of `L = (1/2N) sum (f - y)^2`.

    **Returns:** a `FrequencyStudy`.
    """
    for name, v in (("activations", activations), ("roughness", roughness), ("widths", widths)):
        if len(v) == 0:
            raise ValueError(f"{name} must not be empty.")
    if any(not (np.isfinite(s) and s > 0) for s in roughness):
        raise ValueError(f"Every roughness s must be positive (length scale 1/s); got {list(roughness)}.")
    if any(not isinstance(w, (int, np.integer)) or w < 2 for w in widths):
        raise ValueError(f"Widths must be integers >= 2 (a channel needs two neurons); got {list(widths)}.")
    if not isinstance(n_inits, int) or n_inits < 1:
        raise ValueError(f"n_inits must be a positive integer; got {n_inits!r}.")
    if engine not in ("auto", "sweep", "vmap"):
        raise ValueError(f"engine must be 'auto', 'sweep' or 'vmap'; got {engine!r}.")
    if engine == "auto":  # implicit solvers are not sharded by the sweep engine: vmap them on >1 device
        engine = "vmap" if (solver.lower() in _IMPLICIT and jax.device_count() > 1) else "sweep"
    shape = (len(activations), len(roughness), len(widths), n_inits)
    channel, candidate = np.zeros(shape, bool), np.zeros(shape, bool)
    loss_final, norm, t_final = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    status = np.zeros(shape, int)
    data = {s: gp_data(n_samples, dim, roughness=float(s), key=jr.fold_in(jr.key(data_seed), k))
            for k, s in enumerate(roughness)}
    grid = list(itertools.product(enumerate(activations), enumerate(roughness), enumerate(widths)))
    for (a, act), (k, s), (m, w) in tqdm(grid, desc="channel frequency", disable=not progress):
        X, Y = data[s]
        g = mlp([dim, int(w), 1], bias=bias)
        keys = jax.vmap(lambda n: jr.fold_in(jr.key(seed), n))(jnp.arange(n_inits))
        nets = eqx.filter_vmap(lambda key: DAGNetwork(g, act, key=key, init="glorot"))(keys)
        if engine == "sweep":
            res = sweep_flows(nets, X, Y, t1, solver=SolverOptions(solver, rtol=rtol, atol=atol,
                                                                   max_steps=max_steps), n_save=2, slots=slots)
        else:
            res = _vmapped_flows(nets, X, Y, t1, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps)
        for n in range(n_inits):
            net = DAGNetwork(g, act, edge_weights=res.theta_final[n])
            rep = detect_channels(net, X, Y, maxnorm=maxnorm, pair_tol=pair_tol)
            cls = {p.classification for p in rep.pairs}
            channel[a, k, m, n] = PairClass.channel in cls
            candidate[a, k, m, n] = PairClass.candidate in cls and PairClass.channel not in cls
            norm[a, k, m, n] = rep.param_norm
        loss_final[a, k, m] = res.loss_final
        t_final[a, k, m] = res.t_final
        status[a, k, m] = res.status
    settings = dict(n_inits=n_inits, n_samples=n_samples, dim=dim, bias=bias, t1=t1, solver=solver, rtol=rtol,
                    atol=atol, max_steps=max_steps, maxnorm=maxnorm, pair_tol=pair_tol, seed=seed,
                    data_seed=data_seed, init="glorot (normal)")
    return FrequencyStudy(activations=tuple(activations), roughness=tuple(float(s) for s in roughness),
                          widths=tuple(int(w) for w in widths), channel=channel, candidate=candidate,
                          loss_final=loss_final, param_norm=norm, t_final=t_final, status=status, settings=settings)
