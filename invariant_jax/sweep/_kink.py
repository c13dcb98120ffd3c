"""Sweeps with the kink-aware integrator (`ij.kink_aware_flow`) for relu / leaky-relu.

A kink-aware trajectory is a loop of *segments*: integrate the field of the current
activation modes to the next kink event, resolve the event, restart
(`ij.kinks.KinkIntegrator`). `KinkEngine` is the `SweepEngine` whose unit of work is one
segment: every loop iteration advances each active slot by one segment, and a slot
whose trajectory has ended is harvested and refilled from the queue at the next
harvest (continuous batching), in exact mode (a loop over the active slots, CPU) and in
vmap mode (GPU) alike.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import final

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array

from ..flow import trajectory_record
from ..kinks import LANES, KinkIntegrator, KinkState, make_kink_integrator
from ..network import DAGNetwork
from ..options import KinkOptions, SolverOptions, StopRules
from ._engine import SlotProgram, SweepEngine, host_table, same_arrays

KINK_FIELDS = (
    "num_events",
    "num_crossings",
    "num_sliding_entries",
    "num_sliding_exits",
    "num_ambiguous",
    "num_two_folds",
    "max_sliding_pairs",
    "sliding_time",
)
"""Extra per-trajectory records of a kink-aware sweep (see `ij.KinkFlow`)."""

KINK_STEPS_PER_CALL = 4
"""Default segments per slot between harvests in vmap mode: small, so that finished slots
refill soon (a trajectory has tens of segments; each harvest costs one host round trip).
In exact mode an idle slot costs nothing, so the default there is `KINK_STEPS_PER_CALL_EXACT`."""

KINK_STEPS_PER_CALL_EXACT = 64


def kink_unsupported(options: SolverOptions, stop: StopRules, weight_decay: float) -> list[str]:
    """The options set that the kink-aware integrator does not support (weight decay,
    `dt0`, a step-size controller, stopping rules), by name."""
    return [
        n
        for n, v in (
            ("weight_decay", weight_decay or None),
            ("dt0", options.dt0),
            ("stepsize_controller", options.stepsize_controller),
            ("grad_norm_tol", stop.grad_norm_tol),
            ("loss_floor", stop.loss_floor),
            ("max_param_norm", stop.max_param_norm),
            ("max_wall_time", stop.max_wall_time),
        )
        if v is not None
    ]


def resolve_kinks(
    kinks: KinkOptions | bool | None, *, kinked: bool, options: SolverOptions, stop: StopRules, weight_decay: float
) -> KinkOptions | None:
    """The one rule that decides whether a sweep is kink-aware (`sweep_flows` and
    `SweepConfig` both ask it).

    **Arguments:**

    - `kinks`: `None` (auto): kink-aware for networks with kinked piecewise-linear
        activations (`kinked`: relu, leaky_relu) unless an option it does not support is
        set (`kink_unsupported`); `False`: off; `True` or a `KinkOptions`: on (then an
        unsupported option is an error).
    - `kinked`, `options`, `stop`, `weight_decay`: what the rule looks at.

    **Returns:** the `KinkOptions` of a kink-aware sweep, or `None`.
    """
    if kinks is None:
        return KinkOptions() if kinked and not kink_unsupported(options, stop, weight_decay) else None
    if not isinstance(kinks, bool | KinkOptions):
        raise TypeError(f"kinks must be an ij.KinkOptions, True, False or None (auto); got {kinks!r}.")
    if kinks is False:
        return None
    used = kink_unsupported(options, stop, weight_decay)
    if used:
        raise ValueError(
            f"The kink-aware integrator does not support {', '.join(used)}; drop "
            f"{'it' if len(used) == 1 else 'them'} or use kinks=False (kink_aware = false)."
        )
    return KinkOptions() if kinks is True else kinks


class _KinkSlot(eqx.Module):
    occupied: Array
    index: Array
    theta0: Array
    state: KinkState


@final
class KinkEngine(SweepEngine):
    """Runs kink-aware flows for a queue of initialization indices in `slots` slots,
    refilling a slot as soon as its trajectory ends.

    **Arguments:** `net` (template network: graph and activations), `X`, `Y`, `t1`,
    `init_fn` (`index -> theta0`), or `init_table` (`(n, E)` initial weights: trajectory
    `i` starts at row `i`), `slots`, `steps_per_call` (segments per slot between
    harvests; default 64 in exact mode, where an idle slot costs nothing, 4 under vmap),
    `devices`, `exact` (see `SweepEngine`), and `**options` passed to
    `ij.kinks.make_kink_integrator`: `t0`, `options` (an `ij.SolverOptions`), `saveat`
    (an `ij.SaveTimes`), `kinks` (an `ij.KinkOptions`), `loss` -- the objects
    `kink_aware_flow` builds from its keywords; checked here, before any compilation.
    """

    _integrator: KinkIntegrator
    _static: KinkIntegrator  # (its non-array part: the programs' options)

    def __init__(
        self,
        net: DAGNetwork,
        X,
        Y,
        t1: float,
        init_fn: Callable | None = None,
        *,
        init_table=None,
        slots: int = 64,
        steps_per_call: int | None = None,
        devices=None,
        exact: bool = True,
        **options,
    ):
        if (init_fn is None) == (init_table is None):
            raise ValueError("Give exactly one of init_fn and init_table.")
        self.net = net
        # vmap mode: the segment as a step loop and a root-find loop (`one_site=False`),
        # which batch better than one loop with the step in a `lax.cond` branch
        self._one_site = bool(exact)
        self.integrator = self._make_integrator(net, X, Y, t1, **options)
        self.loss = options.get("loss", "mse")
        dtype = self.integrator.prob.X.dtype
        self.table = host_table(init_table, dtype, net.n_edges)
        if steps_per_call is None:
            steps_per_call = KINK_STEPS_PER_CALL_EXACT if exact else KINK_STEPS_PER_CALL
        init = None if init_fn is None else (lambda i: jnp.asarray(init_fn(i), dtype))
        super().__init__(init, slots=slots, steps_per_call=steps_per_call, devices=devices, exact=exact)

    def with_data(self, net: DAGNetwork, X, Y, t1: float, init_table=None, **options) -> KinkEngine:
        """Use another data set and `init_table` from now on, with the programs compiled
        for this engine. The arrays must have the current shapes and dtypes, and `t1` and
        the options must be the current ones (the caller keys its engines on them, as
        `sweep_flows` does). **Returns:** `self`."""
        integ = self._make_integrator(net, X, Y, t1, **options)
        new = eqx.filter(integ, eqx.is_array)
        same = same_arrays(new, self.data) and (init_table is None) == (self.table is None)
        if not same or not eqx.tree_equal(eqx.filter(integ, eqx.is_array, inverse=True), self._static):
            raise ValueError(
                "with_data needs arrays of the same structure, shapes and dtypes, and the same t1 "
                "and options, as the engine's; build a new KinkEngine for a different problem."
            )
        self.net, self.integrator = net, integ
        if init_table is not None:
            assert self.table is not None  # checked above: both have a table, or neither
            self.table = host_table(init_table, self.table.dtype, net.n_edges)
        return self

    @property
    def integrator(self):
        """The `KinkIntegrator` each slot runs; one set before the first run replaces it."""
        return self._integrator

    @integrator.setter
    def integrator(self, integ):
        static = eqx.filter(integ, eqx.is_array, inverse=True)
        if getattr(self, "_ready", None) and not eqx.tree_equal(static, self._static):
            # (the compiled programs took the old one's options; they would run on)
            raise ValueError(
                "KinkEngine.integrator with other options can only be set before the first run "
                "(its programs are compiled by then); build a new KinkEngine instead."
            )
        self._integrator = integ
        self.data = eqx.filter(integ, eqx.is_array)
        self._static = static

    def _make_integrator(self, net, X, Y, t1, **options):
        integ = make_kink_integrator(net, X, Y, t1, **options)
        # vmap mode: the lanes are named, so rare branches and loop iterations run for the lanes that need them
        prob = dataclasses.replace(integ.prob, lanes=None if self._one_site else LANES)
        return dataclasses.replace(integ, prob=prob, one_site=self._one_site)

    def bind(self, data):
        integ = eqx.combine(data, self._static)
        return SlotProgram(
            self.init_fn,
            functools.partial(self._init_slot, integ),
            self.active,
            functools.partial(self._advance_slot, integ),
            functools.partial(self._record, integ),
        )

    def init_slot(self, theta0, index, occupied):
        return self._init_slot(self.integrator, theta0, index, occupied)

    def active(self, s):
        return s.occupied & ~s.state.done

    def advance_slot(self, s):
        return self._advance_slot(self.integrator, s)

    def record(self, s):
        return self._record(self.integrator, s)

    @staticmethod
    def _init_slot(integ, theta0, index, occupied):
        return _KinkSlot(
            occupied=jnp.asarray(occupied), index=jnp.asarray(index, jnp.int32), theta0=theta0, state=integ.init(theta0)
        )

    def _advance_slot(self, integ, s):
        new = eqx.tree_at(lambda s: s.state, s, integ.segment(s.state))
        act = self.active(s)
        return jtu.tree_map(lambda a, b: jnp.where(act, a, b), new, s)

    def _record(self, integ, s):
        kf = integ.flow(self.net, s.theta0, s.state, self.loss)
        fl = kf.flow
        X, Y = integ.prob.X, integ.prob.Y
        rec = dict(
            index=s.index,
            **trajectory_record(
                self.net,
                X,
                Y,
                theta0=s.theta0,
                t_final=fl.t_final,
                theta_final=fl.theta_final,
                result=fl.result,
                stats=fl.stats,
                saved_drift=fl.drift,
                t0=integ.t0,
                loss=self.loss,
            ),
        )
        rec.update({k: getattr(kf, k) for k in KINK_FIELDS})
        return rec

    def useful_work(self, rec):
        return int((rec["num_events"] + 1).sum())  # segments
