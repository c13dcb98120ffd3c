"""The paper's loss-levels study, done its way: one-hidden-layer networks from
MLPGradientFlow's Glorot-normal initialization, a gradient-flow phase then a
second-order phase (`ij.flow_then_newton`), and the authors' criteria:

- infinite: `weightnorm(theta) = sum(theta^2) / (2 E) >= maxnorm` (1e3);
- duplicate neurons: the smallest L2 distance between two rows of the first-layer
  weight matrix (bias column included) is below 1e-6;
- loss levels: greedy clustering of the losses at relative tolerance 1e-3
  (`cluster_loss_levels` of channels-to-infinity/src/helper_analyse.jl);
- channel (the GP / scaling study): infinite and the smallest cosine distance between
  first-layer rows below 1e-2.

On top, every infinite run is checked with `detect_channels` (a merging pair whose
output weights diverge with opposite signs, the late update along the channel) and the
GLU limit (the pair's output equals `c sigma(w.u) + a (Delta.u) sigma'(w.u)` to within
`glu_tol` relative). Fractions carry Wilson 95% intervals (the authors' `binomial_CI`).
"""

from __future__ import annotations

import collections
import itertools
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from tqdm.auto import tqdm

from .._checks import check_integer, take_deprecated
from .._results import RESULTS, is_success
from ..graph import DAG, mlp
from ..network import DAGNetwork
from ._converge import (
    FLOW_KEYWORDS,
    NEWTON_RESULTS,
    FlowPhaseOptions,
    NewtonOptions,
    flow_then_newton,
    newton_reason,
    newton_result,
    with_fields,
    with_flow_fields,
)
from ._detect import MAXNORM, PAIR_TOL, detect_channels
from ._glu import glu_limit, pair_output
from ._solutions import JUMP_MAX_COS, count_unique_solutions, jump_distance, solution_distances

__all__ = [
    "StudyGrid",
    "STUDY_FLOW",
    "ConvergenceStudy",
    "convergence_study",
    "mlpgf_glorot",
    "study_inits",
    "wilson_interval",
    "cluster_loss_levels",
    "confirm_channel",
    "first_layer_distances",
    "sharpened_neuron",
]


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for `k` successes in `n` trials (`scipy.stats.binomtest`).
    `(nan, nan)` when `n == 0`."""
    from scipy.stats import binomtest

    if n == 0:
        return (float("nan"), float("nan"))
    if not 0 <= k <= n:
        raise ValueError(f"Need 0 <= k <= n; got k={k}, n={n}.")
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return (float(ci.low), float(ci.high))


def cluster_loss_levels(losses, rtol: float = 1e-3) -> tuple[np.ndarray, list[list[int]]]:
    """The authors' greedy clustering: walk the losses in the given order; a loss joins
    the first level `lc` with `1 - rtol < l / lc < 1 + rtol`, else opens a new level. NaNs
    are skipped (the first entry always opens a level, as in their code).

    **Returns:** `(levels, members)`: the level values and the indices in each.
    """
    losses = np.asarray(losses, dtype=float)
    if losses.size == 0:
        return np.zeros(0), []
    levels, members = [losses[0]], [[0]]
    for i in range(1, losses.size):
        l_ = losses[i]
        if np.isnan(l_):
            continue
        for k, lc in enumerate(levels):
            if 1 - rtol < l_ / lc < 1 + rtol:
                members[k].append(i)
                break
        else:
            levels.append(l_)
            members.append([i])
    return np.asarray(levels), members


def mlpgf_glorot(graph: DAG, key) -> jax.Array:
    """MLPGradientFlow's `random_params` for a layered MLP: the weights of layer `l` are
    normal with std `sqrt(2 / (n_{l-1} + n_l))` (fan-in without the bias), biases are 0.
    **Returns:** `theta` in `graph.edges` order."""
    const = set(graph.constants) if hasattr(graph, "constants") else set()
    layer_sizes: dict = {}  # node -> the nodes feeding it
    for u, v in graph.edges:
        if u in const:
            continue
        layer_sizes.setdefault(v, []).append(u)
    std = np.zeros(len(graph.edges))
    for n, (u, v) in enumerate(graph.edges):
        if u in const:
            continue
        fan_in = len(layer_sizes[v])
        fan_out = sum(1 for s in graph.successors(u))
        std[n] = np.sqrt(2.0 / (fan_in + fan_out))
    return jr.normal(key, (len(graph.edges),)) * jnp.asarray(std)


def study_inits(graph: DAG, n_seeds: int, *, first_seed: int = 0, seed: int = 0) -> jax.Array:
    """The starting points of `convergence_study`: run `n` (`n = first_seed, ...,
    first_seed + n_seeds - 1`) starts from `mlpgf_glorot(graph, fold_in(key(seed), n))`, so
    a run's init depends on its seed alone and a study split into parts draws the same ones.
    **Returns:** `theta`, shape `(n_seeds, E)`."""
    keys = jax.vmap(lambda n: jr.fold_in(jr.key(seed), n))(jnp.arange(first_seed, first_seed + n_seeds))
    return jax.vmap(lambda k: mlpgf_glorot(graph, k))(keys)


def _first_layer_rows(net: DAGNetwork) -> np.ndarray:
    """`(H, inputs)`: each hidden neuron's incoming weights (bias included)."""
    g = net.graph
    W = np.asarray(net.weights)
    P = [g.index[u] for u in g.inputs]
    return np.stack([W[P, g.index[v]] for v in g.hidden])


def first_layer_distances(net: DAGNetwork) -> tuple[float, float]:
    """Smallest L2 and cosine distances between first-layer weight rows (bias included)
    of a one-hidden-layer network. `(inf, inf)` for one hidden neuron."""
    rows = _first_layer_rows(net)
    l2, cos = np.inf, np.inf
    for i, j in itertools.combinations(range(rows.shape[0]), 2):
        l2 = min(l2, float(np.linalg.norm(rows[i] - rows[j])))
        ni, nj = np.linalg.norm(rows[i]), np.linalg.norm(rows[j])
        cos = min(cos, 1.0 - float(rows[i] @ rows[j] / (ni * nj)) if ni > 0 and nj > 0 else 1.0)
    return l2, cos


class Confirmation(NamedTuple):
    """What `confirm_channel` found (a tuple: `confirmed, glu_error, pairs = ...`)."""

    confirmed: bool
    """A `"channel"` pair was found and every such pair matches its GLU limit."""
    glu_error: float
    """The worst relative error (max norm over `X`) of a pair's output against its GLU
    limit; NaN when no pair was found."""
    pairs: tuple
    """The `ChannelPair`s classified `"channel"` (their `eps`, `c`, `a`, `w`, `Delta`
    feed `glu_limit` and `collapse_channel`)."""

    @property
    def result(self) -> RESULTS:
        """`successful` (a verdict was reached), or `nonfinite_state` when a pair was found
        but its GLU error is not finite."""
        return RESULTS.nonfinite_state if self.pairs and not np.isfinite(self.glu_error) else RESULTS.successful

    @property
    def success(self) -> bool:
        return bool(is_success(self.result))


def confirm_channel(
    net: DAGNetwork, X, Y, *, maxnorm: float = MAXNORM, pair_tol: float = PAIR_TOL, glu_tol: float = 1e-2, loss="mse"
) -> Confirmation:
    """Confirm that a run counted infinite sits in a flat channel: `detect_channels(net,
    maxnorm=maxnorm, pair_tol=pair_tol)` finds a `"channel"` pair (the one definition of
    a channel: `weightnorm >= maxnorm` as `flow_then_newton` counts a run infinite,
    merging input weights at cosine distance < `pair_tol`, output weights of opposite
    sign and diverging), and each such pair's output equals its GLU limit to relative
    error < `glu_tol`. The late-update test of `detect_channels` is skipped: at a Newton
    end point `-grad L` is the residual of the last step, not the direction of travel.

    **Returns:** a `Confirmation` `(confirmed, glu_error, pairs)`.
    """
    # no late-update test (no X, Y): at a Newton end point -grad L is what the last step left
    # over, not the direction of travel; the GLU fit below checks the channel geometry instead
    rep = detect_channels(net, maxnorm=maxnorm, pair_tol=pair_tol)
    pairs = rep.channels
    if not pairs:
        return Confirmation(False, float("nan"), ())
    X = jnp.asarray(X)
    worst = 0.0
    for p in pairs:
        lim = np.asarray(glu_limit(p, X, net=net))
        out = np.asarray(pair_output(p, X))
        worst = max(worst, float(np.max(np.abs(out - lim)) / max(np.max(np.abs(lim)), 1e-300)))
    return Confirmation(bool(worst < glu_tol), worst, tuple(pairs))


def sharpened_neuron(net: DAGNetwork, X, *, share: float = 0.5, relu_tol: float = 1e-2) -> tuple[bool, float, float]:
    """Whether a run counted infinite is one hidden neuron sharpening into a kink rather
    than a channel: for an activation with `sigma(lam z) / lam -> relu(z)` (softplus, g),
    a neuron can send its input weights to infinity while its output weight shrinks, and
    `a sigma(w . x)` tends to `a relu(w . x)`. The neuron with the largest input weights
    (bias included) is *sharpened* when it holds at least `share` of `||theta||^2` and its
    output over `X` equals that ReLU limit to relative error (max norm) < `relu_tol`.

    **Returns:** `(sharpened, its share of ||theta||^2, relative error of the ReLU limit)`.
    """
    g = net.graph
    W = np.asarray(net.weights)
    rows = _first_layer_rows(net)
    k = int(np.argmax(np.linalg.norm(rows, axis=1)))
    frac = float(np.sum(rows[k] ** 2) / np.sum(np.asarray(net.edge_weights()) ** 2))
    z = np.asarray(net.preactivations(jnp.asarray(X)))[:, k]
    a = np.array([W[g.index[g.hidden[k]], g.index[o]] for o in g.outputs])
    out = np.asarray(net.activation_of(k).fn(jnp.asarray(z)))[:, None] * a
    lim = np.maximum(z, 0.0)[:, None] * a
    err = float(np.max(np.abs(out - lim)) / max(float(np.max(np.abs(lim))), 1e-300))
    return bool(frac >= share and err < relu_tol), frac, err


class ConvergenceStudy(eqx.Module):
    """Per-run records of `convergence_study` (one entry per run; concatenate studies
    with `ConvergenceStudy.concatenate`).

    **Fields:** `records`: dict of 1-D arrays: `activation`, `bias`, `r`, `seed`, `label`
    (the data set), `loss` (`(1/2N) sum (f-y)^2`), `mse` (the paper's `(1/N) sum (f-y)^2`),
    `weightnorm`, `infinite`, `min_l2`, `min_cos`, `duplicate`, `channel_paper`
    (infinite and `min_cos < 1e-2`), `confirmed` (`confirm_channel`), `glu_error`,
    `sharpened` (infinite, not a confirmed channel, and `sharpened_neuron`),
    `stopped_by`, `n_steps`, `flow_status`, `t_flow`, `loss_flow`, `weightnorm_flow`
    (at the end of the flow phase), `jump_cos` (cosine distance between the flow's end
    and the final point, the authors' jump filter), `theta`, `theta_flow` (object arrays
    of edge-weight vectors); optionally `teacher` (which data draw of its `label` a run
    trained on, when a study spans several); `settings`; `seconds` (wall time of the runs).
    """

    records: dict
    settings: dict
    seconds: float

    @property
    def result(self) -> RESULTS:
        """Why each run's Newton phase stopped: an `ij.RESULTS` item per run (from the
        `stopped_by` column, as `ConvergeResult.result`; older studies read the same)."""
        return newton_result(np.asarray(self.records["stopped_by"]).tolist())

    @property
    def success(self) -> np.ndarray:
        """Per run: the Newton phase stopped by a rule (gradient, patience, `maxnorm`), not
        by a budget (`max_steps`, `max_time`) or a non-finite state. `success.all()`: the
        study has no failed run."""
        return np.asarray(is_success(self.result))

    @staticmethod
    def concatenate(studies) -> ConvergenceStudy:
        studies = list(studies)
        rec = {k: np.concatenate([s.records[k] for s in studies]) for k in studies[0].records}
        return ConvergenceStudy(records=rec, settings=studies[0].settings, seconds=sum(s.seconds for s in studies))

    METHOD_SETTINGS = (
        "seed",
        "maxnorm",
        "t1",
        "rtol",
        "atol",
        "max_flow_steps",
        "max_steps",
        "patience",
        "g_tol",
        "max_time",
        "dup_tol",
        "channel_cos",
        "n_samples",
        "n_inputs",
        "jump_max_cos",
        "init",
    )
    """Settings that define the method: studies merge only when these agree (the others say
    which cells and seeds ran, and how they were scheduled)."""

    @staticmethod
    def merge(studies) -> ConvergenceStudy:
        """One study from studies of the same method run in parts (other seeds, widths or
        sessions): checks that `METHOD_SETTINGS` agree and that no run (activation, bias,
        r, label, seed) appears twice, then concatenates. The merged settings list the
        union of widths, activations and biases, and `n_seeds` as the runs per cell."""
        studies = list(studies)
        if not studies:
            raise ValueError("merge needs at least one study.")
        ref = studies[0].settings
        for i, st in enumerate(studies[1:], 1):
            bad = [k for k in ConvergenceStudy.METHOD_SETTINGS if str(st.settings.get(k)) != str(ref.get(k))]
            if bad:
                raise ValueError(
                    f"study {i} ran another method than study 0: settings {bad} differ "
                    f"({[(st.settings.get(k), ref.get(k)) for k in bad]}); merge only parts of one study."
                )
        out = ConvergenceStudy.concatenate(studies)
        rec = out.records
        # a run is (activation, bias, r, label[, teacher], seed): `teacher` numbers the data
        # draws of a label when a study trains on several (the roughness study)
        names = [k for k in ("activation", "bias", "r", "label", "teacher", "seed") if k in rec]
        keys = list(zip(*(rec[k].tolist() for k in names)))
        twice = [k for k, c in collections.Counter(keys).items() if c > 1]
        if twice:
            raise ValueError(
                f"{len(twice)} runs appear in more than one part (study) of the merge, e.g. "
                f"({', '.join(names)}) = {twice[0]}; merge studies of disjoint seeds (--first-seed)."
            )
        cells = collections.Counter(k[:4] for k in keys)
        settings = dict(
            ref,
            widths=sorted({int(r) for r in rec["r"].tolist()}),
            activations=list(dict.fromkeys(rec["activation"].tolist())),
            biases=sorted({bool(b) for b in rec["bias"].tolist()}),
            n_seeds=sorted(set(cells.values())) if len(set(cells.values())) > 1 else next(iter(cells.values())),
            first_seed=int(min(rec["seed"].tolist())),
        )
        return ConvergenceStudy(records=rec, settings=settings, seconds=out.seconds)

    @staticmethod
    def from_dict(d: dict) -> ConvergenceStudy:
        """The inverse of `to_dict` (e.g. a study read back from its JSON)."""
        rec = {}
        for k, v in d["records"].items():
            vector = len(v) > 0 and isinstance(v[0], list)
            rec[k] = _column([np.asarray(t, float) for t in v]) if vector else np.asarray(v)
        return ConvergenceStudy(records=rec, settings=dict(d["settings"]), seconds=float(d["seconds"]))

    def select(self, **where) -> np.ndarray:
        m = np.ones(len(self.records["loss"]), bool)
        for k, v in where.items():
            m &= self.records[k] == v
        return m

    def summary(self, by=("activation", "bias", "r"), unique: bool = True) -> list[dict]:
        """Per group: n, infinite / duplicate / confirmed / paper-channel counts,
        fractions and Wilson 95% intervals, `undecided` (runs not infinite whose Newton
        phase ended by a budget or a non-finite state: no verdict, so the infinite count is
        a lower bound), and the number of loss levels. The authors'
        post-processing (`_solutions`): `kept` (runs passing the jump filter
        `jump_cos < 1e-2`), `authors_channel` among the kept runs (`weightnorm` at the end
        of the flow `> maxnorm` and closest first-layer pair at cosine distance < 1e-2,
        their scaling-plot criterion), `infinite_kept` (final `weightnorm >= maxnorm`
        among the kept), and with `unique` and `by` containing `r` and `bias`,
        `n_unique` (Hungarian distance + their hierarchical clustering over the
        group's runs)."""
        keys = [tuple(self.records[b][i] for b in by) for i in range(len(self.records["loss"]))]
        out = []
        for key in sorted(set(keys), key=lambda k: tuple(str(x) for x in k)):
            m = np.array([k == key for k in keys])
            n = int(m.sum())
            row = {b: (v.item() if hasattr(v, "item") else v) for b, v in zip(by, key)}
            row["n"] = n
            for name in ("infinite", "duplicate", "confirmed", "channel_paper", "sharpened"):
                if name not in self.records:  # (studies written before the column existed)
                    continue
                k = int(self.records[name][m].sum())
                lo, hi = wilson_interval(k, n)
                row[name] = k
                row[f"{name}_fraction"] = k / n if n else float("nan")
                row[f"{name}_ci"] = (lo, hi)
            rec = self.records
            # no verdict: the Newton phase ended by a budget or a non-finite state short of
            # `maxnorm`, so "not infinite" says nothing (a lower bound on the infinite count)
            und = int((m & ~self.success & ~np.asarray(rec["infinite"], bool)).sum())
            row["undecided"] = und
            row["undecided_fraction"] = und / n if n else float("nan")
            row["undecided_ci"] = wilson_interval(und, n)
            if "jump_cos" in rec:
                kept = m & (rec["jump_cos"] < JUMP_MAX_COS)
                nk = int(kept.sum())
                row["kept"] = nk
                row["kept_ci"] = wilson_interval(nk, n)
                # the authors' Fig. 4 criterion reads the ODE phase's end: `passed_maxnorm_ode`
                # where recorded, else the flow's final weightnorm (older studies)
                ode = (
                    rec["passed_maxnorm_ode"].astype(bool)
                    if "passed_maxnorm_ode" in rec
                    else rec["weightnorm_flow"] > self.settings["maxnorm"]
                )
                for name, hit in (
                    ("infinite_kept", rec["infinite"]),
                    ("authors_channel", ode & (rec["min_cos"] < self.settings["channel_cos"])),
                ):
                    k = int((hit & kept).sum())
                    row[name] = k
                    row[f"{name}_fraction"] = k / nk if nk else float("nan")
                    row[f"{name}_ci"] = wilson_interval(k, nk)
            if unique and "theta" in rec and "r" in by and "bias" in by:
                idx = np.flatnonzero(m)
                th = np.stack([np.asarray(t, float) for t in rec["theta"][idx]])
                fin = np.all(np.isfinite(th), axis=1)
                net = DAGNetwork(
                    mlp([self.settings.get("n_inputs", 2), int(row["r"]), 1], bias=bool(row["bias"])),
                    "softplus",
                    edge_weights=th[0],
                )
                row["n_unique"] = count_unique_solutions(solution_distances(net, th[fin]))
            mse = self.records["mse"][m]
            row["n_levels"] = len(cluster_loss_levels(np.sort(mse)[::-1], 1e-3)[0])
            row["median_mse"] = float(np.median(mse))
            row["stopped_by"] = {
                str(r): int((self.records["stopped_by"][m] == r).sum())
                for r in sorted(set(self.records["stopped_by"][m]))
            }
            out.append(row)
        return out

    def table(self, by=("activation", "bias", "r")) -> str:
        head = (
            " ".join(f"{b:>10}" for b in by) + f" {'n':>4} {'% inf':>6} {'95% CI':>13} {'confirmed':>9} "
            f"{'undec.':>6} {'% dup':>6} {'95% CI':>13} {'levels':>6} {'unique':>6} {'kept':>4} {'ch.':>4} {'sharp':>5} "
            f"{'stopped by'}"
        )
        rows = [head, "-" * len(head)]
        for s in self.summary(by):
            ci, cd = s["infinite_ci"], s["duplicate_ci"]
            rows.append(
                " ".join(f"{str(s[b]):>10}" for b in by)
                + f" {s['n']:>4} {100 * s['infinite_fraction']:>6.1f} [{100 * ci[0]:>4.1f}, {100 * ci[1]:>5.1f}]"
                f" {s['confirmed']:>4}/{s['infinite']:<4} {s['undecided']:>6} {100 * s['duplicate_fraction']:>6.1f}"
                f" [{100 * cd[0]:>4.1f}, {100 * cd[1]:>5.1f}] {s['n_levels']:>6} {s.get('n_unique', '-'):>6}"
                f" {s.get('kept', '-'):>4} {s.get('authors_channel', '-'):>4} {s.get('sharpened', '-'):>5}"
                f" {s['stopped_by']}"
            )
        return "\n".join(rows)

    def to_dict(self) -> dict:
        rec = {
            k: ([np.asarray(t).tolist() for t in v] if np.asarray(v).dtype == object else np.asarray(v).tolist())
            for k, v in self.records.items()
        }
        return dict(records=rec, settings=self.settings, seconds=self.seconds)


class StudyGrid(eqx.Module):
    """The runs of `convergence_study`, validated once.

    **Fields:** `widths` (hidden widths `r` of `mlp([d, r, 1])`, default 1..5),
    `activations` (default `("g", "softplus")`), `biases` (default `(False, True)`),
    `n_seeds` (runs per cell, default 100), `seed` (the key of `study_inits`), `first_seed`
    (run `n` starts from `study_inits`'s run `n`, for `n = first_seed, ..., first_seed +
    n_seeds - 1`, so a study can be extended by more seeds later).
    """

    widths: tuple = eqx.field(default=(1, 2, 3, 4, 5), converter=tuple)
    activations: tuple = eqx.field(default=("g", "softplus"), converter=tuple)
    biases: tuple = eqx.field(default=(False, True), converter=tuple)
    n_seeds: int = 100
    seed: int = 0
    first_seed: int = 0

    def __check_init__(self):
        for name in ("widths", "activations", "biases"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty.")
        for r in self.widths:
            check_integer("every width", r, minimum=1)
        check_integer("n_seeds", self.n_seeds, minimum=1)
        check_integer("seed", self.seed, minimum=0)
        check_integer("first_seed", self.first_seed, minimum=0)

    @property
    def cells(self) -> list[tuple]:
        """`(activation, bias, width)` of every cell, in the order the study runs them."""
        return list(itertools.product(self.activations, self.biases, self.widths))


STUDY_FLOW = FlowPhaseOptions(max_flow_steps=2000, flow_stop="stop", n_record=0, engine="sweep")
"""`convergence_study`'s default flow phase, the scheme of the committed studies: the sweep
engine, a stop at `maxnorm`, 2000 steps, no trajectory record (one slot per run, at most
256)."""

_GRID_KEYWORDS = {
    k: f"pass grid=ij.channels.StudyGrid({k}=...) instead"
    for k in ("widths", "activations", "biases", "n_seeds", "seed", "first_seed")
}
_NEWTON_KEYWORDS = {
    k: f"pass newton=ij.NewtonOptions({k}=...) instead"
    for k in ("maxnorm", "max_steps", "patience", "g_tol", "max_time")
}
_NEWTON_KEYWORDS["newton_batch"] = "pass newton=ij.NewtonOptions(batch_size=...) instead"
_STUDY_FLOW_KEYWORDS = {
    k: FLOW_KEYWORDS[k]
    for k in ("t1", "rtol", "atol", "max_flow_steps", "slots", "engine", "flow_stop", "flow_wall_time", "n_record")
}


def _study_options(grid, flow, newton, deprecated: dict):
    """`(StudyGrid, FlowPhaseOptions, NewtonOptions)` with the old keywords (warned about)
    folded in."""
    old = take_deprecated(
        "convergence_study", deprecated, {**_GRID_KEYWORDS, **_STUDY_FLOW_KEYWORDS, **_NEWTON_KEYWORDS}
    )
    pick = lambda names: {k: old[k] for k in names if k in old}  # noqa: E731
    nw = pick(_NEWTON_KEYWORDS)
    if "newton_batch" in nw:
        nw["batch_size"] = nw.pop("newton_batch")
    return (
        with_fields(grid, StudyGrid, pick(_GRID_KEYWORDS), "grid"),
        with_flow_fields(flow if flow is not None else STUDY_FLOW, pick(_STUDY_FLOW_KEYWORDS)),
        with_fields(newton, NewtonOptions, nw, "newton"),
    )


def convergence_study(
    X,
    Y,
    *,
    grid: StudyGrid | None = None,
    flow: FlowPhaseOptions | None = None,
    newton: NewtonOptions | None = None,
    label: str = "data",
    dup_tol: float = 1e-6,
    channel_cos: float = 1e-2,
    confirm: bool = True,
    progress: bool = True,
    **deprecated,
) -> ConvergenceStudy:
    """Train `n_seeds` MLPGradientFlow-Glorot initializations of `mlp([d, r, 1], bias)`
    for every width `r`, activation and bias setting of `grid` with `ij.flow_then_newton`
    (a Kvaerno5 flow, then trust-region Newton), and classify the final points with the
    paper's criteria (module docstring).

    **Arguments:**

    - `X`, `Y`: the data; `label`: its name in the records.
    - `grid`: a `StudyGrid` (default `StudyGrid()`: widths 1..5, g and softplus, with and
        without bias, 100 seeds). Run `n` starts from `study_inits(graph, ...)[n -
        first_seed]`, i.e. `mlpgf_glorot(graph, fold_in(key(seed), n))`.
    - `flow`: the flow phase, a `FlowPhaseOptions` (default `STUDY_FLOW`: the sweep
        engine and a stop at `maxnorm`, the scheme of the committed studies; MLPGradientFlow's
        penalty, `flow_stop="penalty"`, needs `engine="loop"` or `"vmap"`).
    - `newton`: the Newton phase, a `NewtonOptions` (default `NewtonOptions()`; its
        `maxnorm` is the paper's "infinite", 1e3).
    - `dup_tol`, `channel_cos`: the duplicate (L2) and channel (cosine) criteria;
        `confirm`: check every infinite run with `confirm_channel`; `progress`: a bar.

    The old keywords (`widths=`, `n_seeds=`, ... of `StudyGrid`; `t1=`, `rtol=`,
    `max_flow_steps=`, `engine=`, ... of `FlowPhaseOptions`; `maxnorm=`, `max_steps=`,
    `patience=`, `g_tol=`, `max_time=`, `newton_batch=` of `NewtonOptions`) still work, with
    a `DeprecationWarning`.

    Records add `grad_norm`, `min_eig` (minimum Hessian eigenvalue at the end),
    `weightnorm_flow_max`, `passed_maxnorm_ode` (the authors' Fig. 4 norm criterion),
    `flow_steps` and, with `n_record`, a `trajectory` dict per run.

    **Returns:** a `ConvergenceStudy`.
    """
    grid, flow, newton = _study_options(grid, flow, newton, deprecated)
    X, Y = jnp.asarray(X), jnp.asarray(Y)
    Y = Y[:, None] if Y.ndim == 1 else Y
    d = X.shape[1]
    cols: dict[str, list] = {k: [] for k in _COLUMNS}
    crit = dict(dup_tol=dup_tol, channel_cos=channel_cos, confirm=confirm, maxnorm=newton.maxnorm)
    record = flow.n_record and flow.resolved_engine() != "sweep"
    t0 = time.perf_counter()
    for act, bias, r in tqdm(grid.cells, desc=f"convergence study ({label})", disable=not progress):
        g = mlp([d, int(r), 1], bias=bool(bias))
        thetas = study_inits(g, grid.n_seeds, first_seed=grid.first_seed, seed=grid.seed)
        net0 = DAGNetwork(g, act, edge_weights=thetas[0])
        nets = eqx.filter_vmap(net0.with_edge_weights)(thetas)
        res = flow_then_newton(nets, X, Y, flow=flow, newton=newton)
        _criteria_columns(cols, res, net0, X, Y, int(r), **crit)
        _run_columns(cols, res, act, bias, r, grid, label, record)
    records = {k: _column(v) for k, v in cols.items()}
    return ConvergenceStudy(
        records=records,
        settings=_study_settings(grid, flow, newton, X, dup_tol, channel_cos),
        seconds=time.perf_counter() - t0,
    )


_COLUMNS = (
    "activation",
    "bias",
    "r",
    "seed",
    "label",
    "loss",
    "mse",
    "weightnorm",
    "infinite",
    "min_l2",
    "min_cos",
    "duplicate",
    "channel_paper",
    "confirmed",
    "glu_error",
    "sharpened",
    "stopped_by",
    "n_steps",
    "flow_status",
    "t_flow",
    "loss_flow",
    "weightnorm_flow",
    "jump_cos",
    "theta",
    "theta_flow",
    "grad_norm",
    "min_eig",
    "weightnorm_flow_max",
    "passed_maxnorm_ode",
    "flow_steps",
    "trajectory",
)
"""The records of a study, in the order they are written."""


def _criteria_columns(cols, res, net0, X, Y, r, *, dup_tol, channel_cos, confirm, maxnorm):
    """The paper's criteria of each run of one cell (duplicates, channels, sharpening)."""
    theta = np.asarray(res.theta)
    inf = np.asarray(res.infinite)
    for n in range(theta.shape[0]):
        net = net0.with_edge_weights(theta[n])
        l2, cos = first_layer_distances(net)
        ok, err, _ = (
            confirm_channel(net, X, Y, maxnorm=maxnorm, pair_tol=channel_cos)
            if (confirm and inf[n] and r >= 2)
            else (False, float("nan"), 0)
        )
        cols["min_l2"].append(l2)
        cols["min_cos"].append(cos)
        cols["duplicate"].append(l2 < dup_tol)
        cols["channel_paper"].append(bool(inf[n]) and cos < channel_cos)
        cols["confirmed"].append(ok)
        cols["glu_error"].append(err)
        cols["sharpened"].append(bool(inf[n]) and not ok and sharpened_neuron(net, X)[0])


def _run_columns(cols, res, act, bias, r, grid: StudyGrid, label, record):
    """What each run of one cell was and where it ended."""
    B = grid.n_seeds
    theta, theta_flow = np.asarray(res.theta), np.asarray(res.theta_flow)
    cols["activation"] += [act] * B
    cols["bias"] += [bool(bias)] * B
    cols["r"] += [int(r)] * B
    cols["seed"] += list(range(grid.first_seed, grid.first_seed + B))
    cols["label"] += [label] * B
    cols["loss"] += np.asarray(res.loss).tolist()
    cols["mse"] += (2 * np.asarray(res.loss)).tolist()
    cols["weightnorm"] += np.asarray(res.weightnorm).tolist()
    cols["infinite"] += np.asarray(res.infinite).tolist()
    cols["stopped_by"] += list(newton_reason(res.result))
    for k in ("n_steps", "flow_status", "t_flow", "loss_flow"):
        cols[k] += np.asarray(getattr(res, k)).tolist()
    cols["weightnorm_flow"] += (np.sum(theta_flow**2, axis=1) / (2 * theta_flow.shape[1])).tolist()
    cols["jump_cos"] += jump_distance(theta_flow, theta).tolist()
    for k in ("grad_norm", "min_eig", "weightnorm_flow_max", "passed_maxnorm_ode", "flow_steps"):
        cols[k] += np.asarray(getattr(res, k)).tolist()
    if record:
        rec = res.trajectory.to_dict()
        cols["trajectory"] += [{k: rec[k][n] for k in rec} for n in range(B)]
    else:
        cols["trajectory"] += [None] * B
    cols["theta"] += list(theta)
    cols["theta_flow"] += list(theta_flow)


def _study_settings(grid: StudyGrid, flow: FlowPhaseOptions, newton: NewtonOptions, X, dup_tol, channel_cos) -> dict:
    """Everything needed to rerun a study (the keys of the committed study files)."""
    return dict(
        widths=[int(r) for r in grid.widths],
        activations=list(grid.activations),
        biases=[bool(b) for b in grid.biases],
        n_seeds=grid.n_seeds,
        seed=grid.seed,
        first_seed=grid.first_seed,
        maxnorm=newton.maxnorm,
        t1=flow.t1,
        rtol=flow.rtol,
        atol=flow.atol,
        max_flow_steps=flow.max_flow_steps,
        max_steps=newton.max_steps,
        patience=newton.patience,
        g_tol=newton.g_tol,
        max_time=newton.max_time,
        dup_tol=dup_tol,
        channel_cos=channel_cos,
        n_samples=int(X.shape[0]),
        n_inputs=int(X.shape[1]),
        jump_max_cos=JUMP_MAX_COS,
        init="MLPGradientFlow glorot_normal, zero biases",
        stop_reasons=list(NEWTON_RESULTS),
        flow=f"{flow.solver} via {flow.resolved_engine()}",
        recovery=None if flow.recovery is None else dict(growth=flow.recovery.growth, horizon=flow.recovery.horizon),
        newton_batch=newton.batch_size,
        flow_stop=flow.flow_stop,
        flow_wall_time=flow.flow_wall_time,
        n_record=flow.n_record,
        newton="ij.newton_phase (optimistix trust region, exact |H| from ij.losses.hessian_fn)",
    )


def _column(v: list) -> np.ndarray:
    """A records column: a 1-D array; vectors (edge weights) go in an object array."""
    if v and isinstance(v[0], np.ndarray):
        out = np.empty(len(v), dtype=object)
        for i, a in enumerate(v):
            out[i] = a
        return out
    return np.asarray(v)
