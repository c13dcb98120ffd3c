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

from collections.abc import Callable
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array

from ..flow import trajectory_record
from ..kinks import KinkState, make_kink_integrator
from ..network import DAGNetwork
from ._engine import SweepEngine

KINK_FIELDS = ("num_events", "num_crossings", "num_sliding_entries", "num_sliding_exits",
               "num_ambiguous", "max_sliding_pairs", "sliding_time")
"""Extra per-trajectory records of a kink-aware sweep (see `ij.KinkFlow`)."""

KINK_STEPS_PER_CALL = 4
"""Default segments per slot between harvests in vmap mode: small, so that finished slots
refill soon (a trajectory has tens of segments; each harvest costs one host round trip).
In exact mode an idle slot costs nothing, so the default there is `KINK_STEPS_PER_CALL_EXACT`."""

KINK_STEPS_PER_CALL_EXACT = 64


def kink_aware_default(kink_aware: bool | None, *, kinked: bool, unsupported: dict) -> bool:
    """Resolve `kink_aware=None` (auto): the exact, kink-aware integrator for networks
    with kinked piecewise-linear activations (relu, leaky_relu), unless an option it does
    not support is set (`unsupported`: name -> value, e.g. stopping rules, weight decay).
    An explicit `True` / `False` is returned as given."""
    if kink_aware is None:
        used = [v for v in unsupported.values() if v is not None and not (isinstance(v, (int, float)) and v == 0)]
        return bool(kinked) and not used
    return bool(kink_aware)


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
    `init_fn` (`index -> theta0`), `slots`, `steps_per_call` (segments per slot between
    harvests; default 64 in exact mode, where an idle slot costs nothing, 4 under vmap), `devices`, `exact` (see `SweepEngine`), and `**options` passed to
    `ij.kinks.make_kink_integrator`: `t0`, `options` (an `ij.SolverOptions`), `saveat`
    (an `ij.SaveTimes`), `kinks` (an `ij.KinkOptions`), `loss` -- the objects
    `kink_aware_flow` builds from its keywords; checked here, before any compilation.
    """

    def __init__(self, net: DAGNetwork, X, Y, t1: float, init_fn: Callable, *, slots: int = 64,
                 steps_per_call: int | None = None, devices=None, exact: bool = True, **options):
        self.net = net
        self.integrator = make_kink_integrator(net, X, Y, t1, **options)
        self.loss = options.get("loss", "mse")
        dtype = self.integrator.prob.X.dtype
        if steps_per_call is None:
            steps_per_call = KINK_STEPS_PER_CALL_EXACT if exact else KINK_STEPS_PER_CALL
        super().__init__(lambda i: jnp.asarray(init_fn(i), dtype), slots=slots, steps_per_call=steps_per_call,
                         devices=devices, exact=exact)

    def init_slot(self, theta0, index, occupied):
        return _KinkSlot(occupied=jnp.asarray(occupied), index=jnp.asarray(index, jnp.int32), theta0=theta0,
                         state=self.integrator.init(theta0))

    def active(self, s):
        return s.occupied & ~s.state.done

    def advance_slot(self, s):
        new = eqx.tree_at(lambda s: s.state, s, self.integrator.segment(s.state))
        act = self.active(s)
        return jtu.tree_map(lambda a, b: jnp.where(act, a, b), new, s)

    def record(self, s):
        kf = self.integrator.flow(self.net, s.theta0, s.state, self.loss)
        fl = kf.flow
        X, Y = self.integrator.prob.X, self.integrator.prob.Y
        rec = dict(index=s.index, **trajectory_record(
            self.net, X, Y, theta0=s.theta0, t_final=fl.t_final, theta_final=fl.theta_final, result=fl.result,
            stats=fl.stats, saved_drift=fl.drift, t0=self.integrator.t0, loss=self.loss))
        rec.update({k: getattr(kf, k) for k in KINK_FIELDS})
        return rec

    def useful_work(self, rec):
        return int((rec["num_events"] + 1).sum())  # segments
