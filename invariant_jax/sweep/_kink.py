"""Sweeps with the kink-aware integrator (`ij.kink_aware_flow`) for relu / leaky-relu.

A kink-aware trajectory is a loop over segments between events, each a diffeqsolve with
its own activation pattern and sliding set, so it does not fit the step-level slots of
`Engine`. `KinkEngine` runs fixed-size batches of whole trajectories instead: with
`exact=True` one trajectory after another inside one jitted call (`lax.map`; each equals
`kink_aware_flow` run alone to round-off amplified by adaptive stepping), otherwise `vmap` over the batch (each
trajectory keeps its own pattern, sliding slots and event log). It has `Engine`'s `run`
interface, so `run_sweep` persists, resumes and reports its records the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..flow import trajectory_record
from ..kinks import kink_aware_flow
from ..network import DAGNetwork
from ._engine import EngineStats

KINK_FIELDS = ("num_events", "num_crossings", "num_sliding_entries", "num_sliding_exits",
               "num_ambiguous", "max_sliding_pairs", "sliding_time")
"""Extra per-trajectory records of a kink-aware sweep (see `ij.KinkFlow`)."""


class KinkEngine:
    """Runs kink-aware flows for a queue of initialization indices, `slots` at a time.

    **Arguments:** `net` (template network: graph and activations), `X`, `Y`, `t1`,
    `init_fn` (`index -> theta0`), `slots`, `devices`, `exact`, and `**flow_options`
    passed to `kink_aware_flow` (`solver`, `rtol`, `atol`, `n_save`, `max_steps`, ...).
    """

    def __init__(self, net: DAGNetwork, X, Y, t1: float, init_fn: Callable, *, slots: int = 64,
                 devices=None, exact: bool = True, **flow_options):
        if slots < 1:
            raise ValueError(f"slots must be >= 1; got {slots!r}.")
        devices = list(jax.local_devices() if devices is None else devices)
        nd = len(devices)
        self.slots = -(-int(slots) // nd) * nd
        self.mesh = Mesh(np.array(devices), ("slots",))
        self.sharding = NamedSharding(self.mesh, PartitionSpec("slots"))
        # trace once: bad options raise here, before any compilation
        jax.eval_shape(lambda th: kink_aware_flow(net.with_edge_weights(th), X, Y, t1, **flow_options),
                       net.edge_weights())
        self.exact = bool(exact)

        def one(i):
            theta0 = init_fn(i)
            kf = kink_aware_flow(net.with_edge_weights(theta0), X, Y, t1, **flow_options)
            fl = kf.flow
            rec = dict(index=i, **trajectory_record(
                net, X, Y, theta0=theta0, t_final=fl.t_final, theta_final=fl.theta_final, result=fl.result,
                stats=fl.stats, saved_drift=fl.drift, t0=flow_options.get("t0", 0.0),
                loss=flow_options.get("loss", "mse")))
            rec.update({k: getattr(kf, k) for k in KINK_FIELDS})
            return rec

        batch = (lambda idx: jax.lax.map(one, idx)) if exact else jax.vmap(one)
        if nd > 1:
            P = PartitionSpec("slots")
            batch = jax.shard_map(batch, mesh=self.mesh, in_specs=(P,), out_specs=P, check_vma=False)
        self._batch = jax.jit(batch)

    def run(self, indices, *, on_results: Callable[[dict], None], progress=None,
            should_stop: Callable[[], bool] | None = None) -> EngineStats:
        """As `Engine.run`: records reach `on_results` one batch at a time."""
        indices = np.asarray(indices, dtype=np.int64)
        S = self.slots
        t_start = time.perf_counter()
        useful = iters = calls = 0
        for s in range(0, len(indices), S):
            chunk = indices[s:s + S]
            padded = np.concatenate([chunk, np.full(S - len(chunk), chunk[-1])]).astype(np.int32)
            out = self._batch(jax.device_put(padded, self.sharding))
            rec = {k: np.asarray(v)[:len(chunk)] for k, v in out.items()}
            calls += 1
            useful += int(rec["num_steps"].sum())
            # lax.map runs trajectories one after another; vmap runs all for the longest
            iters += int(rec["num_steps"].sum()) if self.exact else S * int(np.max(np.asarray(out["num_steps"])))
            on_results(rec)
            if progress is not None:
                progress(rec)
            if should_stop is not None and should_stop():
                break
        return EngineStats(useful, iters, calls, time.perf_counter() - t_start)
