"""The frequency study: how often gradient flow from Glorot-normal initializations
ends in a flat channel, as a function of the target's roughness (Matérn-3/2 GP samples
at length scale 1/s), the width and the activation."""

from __future__ import annotations

import dataclasses
import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from tqdm.auto import tqdm

from .._checks import check_integer, check_positive, take_deprecated
from .._results import RESULTS, is_success, result_code, result_from_code, result_name, status_code
from ..datasets import gp_data
from ..flow import gradient_flow
from ..graph import mlp
from ..network import DAGNetwork
from ..options import SaveTimes, SolverOptions
from ..sweep import BatchOptions, SweepResult, sweep_flows
from ._detect import MAXNORM, PAIR_TOL, detect_channels
from ._glu import PairClass

__all__ = ["FrequencyGrid", "FREQUENCY_SOLVER", "FrequencyStudy", "channel_frequency"]


class FrequencyGrid(eqx.Module):
    """The runs of `channel_frequency`, validated once.

    **Fields:** `activations` (default softplus, erf), `roughness` (the GP targets'
    roughness `s`, length scale `1/s`; default 0.1, 0.5, 2, 10), `widths` (integers >= 2: a
    channel needs two neurons; default 2, 4), `n_inits` (Glorot-normal initializations per
    cell, default 8, from key `seed`), `n_samples`, `dim` (the data: `gp_data(n_samples,
    dim, roughness=s)`, one draw per `s` from key `data_seed`), `bias`.
    """

    activations: tuple = eqx.field(default=("softplus", "erf"), converter=tuple)
    roughness: tuple = eqx.field(default=(0.1, 0.5, 2.0, 10.0), converter=tuple)
    widths: tuple = eqx.field(default=(2, 4), converter=tuple)
    n_inits: int = 8
    n_samples: int = 32
    dim: int = 1
    bias: bool = True
    seed: int = 0
    data_seed: int = 1

    def __check_init__(self):
        for name in ("activations", "roughness", "widths"):
            if len(getattr(self, name)) == 0:
                raise ValueError(f"{name} must not be empty.")
        for s in self.roughness:
            check_positive("every roughness s (length scale 1/s)", s)
        for w in self.widths:
            check_integer("every width (a channel needs two neurons)", w, minimum=2)
        for name in ("n_inits", "n_samples", "dim"):
            check_integer(name, getattr(self, name), minimum=1)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.activations), len(self.roughness), len(self.widths), self.n_inits)


class FrequencyStudy(eqx.Module):
    """Result of `channel_frequency`. Arrays have shape `(A, S, W, n_inits)` (activation,
    roughness, width, initialization) unless noted.

    **Fields:** `activations`, `roughness`, `widths` (the grid); `channel` (all criteria
    of `detect_channels` hold), `candidate` (merging input weights and diverging,
    opposite output weights, but below the norm threshold), `loss_final`, `param_norm`,
    `t_final`, `status` (`ij.sweep.STATUSES` indices), `result` (each flow's `ij.RESULTS`
    item); `success` (per flow: reached `t1` or stopped by a rule; `success.all()`: no
    flow failed); `channel_fraction` and `candidate_fraction` `(A, S, W)`; `settings`
    (everything needed to rerun it).
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
    result: RESULTS
    settings: dict

    @property
    def success(self) -> np.ndarray:
        return np.asarray(is_success(self.result))

    @property
    def channel_fraction(self) -> np.ndarray:
        return self.channel.mean(axis=-1)

    @property
    def candidate_fraction(self) -> np.ndarray:
        return (self.channel | self.candidate).mean(axis=-1)

    def table(self) -> str:
        head = (
            f"{'activation':>10} {'s':>6} {'width':>5} {'channel':>8} {'+cand.':>7} {'median loss':>12} {'max norm':>9}"
        )
        rows = [head, "-" * len(head)]
        for (a, act), (k, s), (m, w) in itertools.product(
            *(enumerate(v) for v in (self.activations, self.roughness, self.widths))
        ):
            rows.append(
                f"{act:>10} {s:>6g} {w:>5d} {self.channel_fraction[a, k, m]:>8.2f} "
                f"{self.candidate_fraction[a, k, m]:>7.2f} {np.median(self.loss_final[a, k, m]):>12.3e} "
                f"{np.max(self.param_norm[a, k, m]):>9.2e}"
            )
        return "\n".join(rows)

    def to_dict(self) -> dict:
        return dict(
            activations=list(self.activations),
            roughness=list(self.roughness),
            widths=list(self.widths),
            channel_fraction=self.channel_fraction.tolist(),
            candidate_fraction=self.candidate_fraction.tolist(),
            loss_final=self.loss_final.tolist(),
            param_norm=self.param_norm.tolist(),
            status=self.status.tolist(),
            result=np.asarray(result_name(self.result)).tolist(),
            settings=self.settings,
        )


class _Batch(eqx.Module):
    theta_final: np.ndarray
    loss_final: np.ndarray
    t_final: np.ndarray
    status: np.ndarray
    result: np.ndarray


@eqx.filter_jit
def _run_batch(nets, X, Y, t1, solver: SolverOptions):
    f = eqx.filter_vmap(lambda n: gradient_flow(n, X, Y, t1, saveat=SaveTimes(n_save=2), solver=solver))(nets)
    return f.theta_final, f.loss_final, f.t_final, result_code(f.result)


def _vmapped_flows(nets, X, Y, t1, solver: SolverOptions) -> _Batch:
    # one compilation per graph and activation; new data reuse it
    th, L, t, r = (np.asarray(v) for v in _run_batch(nets, X, Y, t1, solver))
    return _Batch(theta_final=th, loss_final=L, t_final=t, status=np.asarray(status_code(r)), result=r)


FREQUENCY_SOLVER = SolverOptions("kvaerno5_newton", rtol=1e-7, atol=1e-7, max_steps=20_000)
"""`channel_frequency`'s default solver: Kvaerno5 (channels are stiff) with a Newton stage
solve (`ij.newton_kvaerno5`: diffrax's chord solve crawls along a channel), at tight
tolerances."""

_GRID_KEYWORDS = {
    k: f"pass grid=ij.channels.FrequencyGrid({k}=...) instead"
    for k in ("activations", "roughness", "widths", "n_inits", "n_samples", "dim", "bias", "seed", "data_seed")
}
_SOLVER_KEYWORDS = {k: f"pass solver=ij.SolverOptions(name, {k}=...) instead" for k in ("rtol", "atol", "max_steps")}


def _frequency_options(grid, solver, deprecated: dict) -> tuple[FrequencyGrid, SolverOptions]:
    old = take_deprecated("channel_frequency", deprecated, {**_GRID_KEYWORDS, **_SOLVER_KEYWORDS})
    grid = FrequencyGrid() if grid is None else grid
    if not isinstance(grid, FrequencyGrid):
        raise TypeError(f"grid must be an ij.channels.FrequencyGrid; got {type(grid).__name__}.")
    given = {k: old[k] for k in _GRID_KEYWORDS if k in old}
    grid = dataclasses.replace(grid, **given) if given else grid
    thin = {k: old[k] for k in _SOLVER_KEYWORDS if k in old}
    if isinstance(solver, SolverOptions):
        if thin:
            raise ValueError(f"Pass {', '.join(sorted(thin))} inside SolverOptions(...), not as keywords as well.")
    else:
        base = FREQUENCY_SOLVER
        solver = SolverOptions(
            base.solver if solver is None else solver,
            **{k: thin.get(k, getattr(base, k)) for k in ("rtol", "atol", "max_steps")},
        )
    return grid, solver


def channel_frequency(
    *,
    grid: FrequencyGrid | None = None,
    t1: float = 1e4,
    solver: str | SolverOptions | None = None,
    maxnorm: float = MAXNORM,
    pair_tol: float = PAIR_TOL,
    engine: str = "auto",
    slots: int = 64,
    progress: bool = True,
    **deprecated,
) -> FrequencyStudy:
    """Run gradient flow from `n_inits` Glorot-normal initializations of
    `mlp([dim, width, 1], bias=bias)` for every activation, roughness `s` and width of
    `grid`, on one GP target per `s` (`gp_data(n_samples, dim, roughness=s)`), and classify
    each final state with `detect_channels(net, X, Y, maxnorm=..., pair_tol=...)` (the late
    update is `-grad L` at the final state).

    **Arguments:**

    - `grid`: a `FrequencyGrid` (default `FrequencyGrid()`).
    - `t1`: the flow time (gradient-flow time of `L = (1/2N) sum (f - y)^2`).
    - `solver`: an `ij.SolverOptions` (default `FREQUENCY_SOLVER`: Kvaerno5 with a Newton stage solve at
        rtol = atol = 1e-7, 20 000 steps), or a solver name with those tolerances.
    - `maxnorm`, `pair_tol`: the channel criteria of `detect_channels`.
    - `engine`: `"sweep"` (`ij.sweep_flows` with `slots`: continuous batching, split over
        all JAX devices), `"vmap"` (one `eqx.filter_vmap` of `gradient_flow`) or `"auto"`
        (the sweep engine).
    - `progress`: a progress bar.

    The old keywords (`activations=`, `roughness=`, `widths=`, `n_inits=`, ... of
    `FrequencyGrid`; `rtol=`, `atol=`, `max_steps=` of the solver) still work, with a
    `DeprecationWarning`.

    **Returns:** a `FrequencyStudy`.
    """
    grid, solver = _frequency_options(grid, solver, deprecated)
    check_positive("t1", t1)
    check_positive("maxnorm", maxnorm)
    check_positive("pair_tol", pair_tol)
    engine = _frequency_engine(engine)
    out = _empty_record(grid.shape)
    data = _targets(grid)
    cells = list(itertools.product(*(enumerate(v) for v in (grid.activations, grid.roughness, grid.widths))))
    for (a, act), (k, s), (m, w) in tqdm(cells, desc="channel frequency", disable=not progress):
        X, Y = data[s]
        g = mlp([grid.dim, int(w), 1], bias=grid.bias)
        res = _cell_flows(grid, g, act, X, Y, t1, solver, engine=engine, slots=slots)
        cell = (a, k, m)
        _classify(out, cell, g, act, res.theta_final, X, Y, maxnorm=maxnorm, pair_tol=pair_tol)
        for name in ("loss_final", "t_final", "status"):
            out[name][cell] = np.asarray(getattr(res, name))
        out["result"][cell] = np.asarray(result_code(res.result))  # codes, or a RESULTS item (a sweep's)
    settings = _frequency_settings(grid, t1, solver, maxnorm, pair_tol)
    result = result_from_code(out.pop("result"))
    return FrequencyStudy(
        activations=tuple(grid.activations),
        roughness=tuple(float(s) for s in grid.roughness),
        widths=tuple(int(w) for w in grid.widths),
        result=result,
        settings=settings,
        **out,
    )


def _frequency_engine(engine: str) -> str:
    """`engine`, checked, with `"auto"` resolved (see `channel_frequency`)."""
    if engine not in ("auto", "sweep", "vmap"):
        raise ValueError(f"engine must be 'auto', 'sweep' or 'vmap'; got {engine!r}.")
    return "sweep" if engine == "auto" else engine


def _empty_record(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The study's per-flow arrays, zeros of `shape`, filled cell by cell."""
    return {
        k: np.zeros(shape, dt)
        for k, dt in (
            ("channel", bool),
            ("candidate", bool),
            ("loss_final", float),
            ("param_norm", float),
            ("t_final", float),
            ("status", int),
            ("result", np.int32),
        )
    }


def _targets(grid: FrequencyGrid) -> dict:
    """One GP data set `(X, Y)` per roughness `s`, from key `fold_in(key(data_seed), k)`."""
    return {
        s: gp_data(grid.n_samples, grid.dim, roughness=float(s), key=jr.fold_in(jr.key(grid.data_seed), k))
        for k, s in enumerate(grid.roughness)
    }


def _cell_flows(
    grid: FrequencyGrid, g, act, X, Y, t1, solver: SolverOptions, *, engine: str, slots: int
) -> SweepResult | _Batch:
    """The flows of one cell, from `grid.n_inits` Glorot-normal initializations of graph
    `g` (keys `fold_in(key(seed), n)`, the same in every cell), on `engine`."""
    keys = jax.vmap(lambda n: jr.fold_in(jr.key(grid.seed), n))(jnp.arange(grid.n_inits))
    nets = eqx.filter_vmap(lambda key: DAGNetwork(g, act, key=key, init="glorot"))(keys)
    if engine == "sweep":
        return sweep_flows(nets, X, Y, t1, solver=solver, saveat=SaveTimes(n_save=2), batch=BatchOptions(slots=slots))
    return _vmapped_flows(nets, X, Y, t1, solver)


def _frequency_settings(grid: FrequencyGrid, t1, solver: SolverOptions, maxnorm, pair_tol) -> dict:
    """`FrequencyStudy.settings`: everything needed to rerun the study."""
    return dict(
        n_inits=grid.n_inits,
        n_samples=grid.n_samples,
        dim=grid.dim,
        bias=grid.bias,
        t1=t1,
        solver=solver.solver,
        rtol=solver.rtol,
        atol=solver.atol,
        max_steps=solver.max_steps,
        maxnorm=maxnorm,
        pair_tol=pair_tol,
        seed=grid.seed,
        data_seed=grid.data_seed,
        init="glorot (normal)",
    )


def _classify(out: dict, cell: tuple, g, act, thetas, X, Y, *, maxnorm, pair_tol) -> None:
    """`detect_channels` on each final state of one cell, into `out`."""
    for n, theta in enumerate(np.asarray(thetas)):
        rep = detect_channels(DAGNetwork(g, act, edge_weights=theta), X, Y, maxnorm=maxnorm, pair_tol=pair_tol)
        cls = {p.classification for p in rep.pairs}
        out["channel"][(*cell, n)] = PairClass.channel in cls
        out["candidate"][(*cell, n)] = PairClass.candidate in cls and PairClass.channel not in cls
        out["param_norm"][(*cell, n)] = rep.param_norm
