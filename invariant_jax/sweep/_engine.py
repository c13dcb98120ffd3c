"""The sweep engine: many trajectories in a fixed number of slots.

`SweepEngine` (abstract) owns what every sweep shares: the compiled refill / advance /
finalize programs, and the host loop that harvests finished slots and refills them from
the queue (continuous batching), one loop per device over its share of the slots, all
taking from one queue (`_devices.py`).
Its two final subclasses say what one slot integrates:

- `Engine`: plain gradient flow. One unit of work is one solver step, taken with
  diffrax's solver and step-size-controller objects directly (`solver.init`,
  `solver.step`, `controller.init`, `controller.adapt_step_size`). The step logic
  mirrors `diffrax.diffeqsolve`'s loop (`diffrax/_integrate.py`): the same initial step,
  clipping to `t1`, rejection and `max_steps` semantics, and the same dense-output saves
  at `gradient_flow`'s save times, so a trajectory's numbers equal `ij.gradient_flow`'s.
- `KinkEngine` (`_kink.py`): the kink-aware flow. One unit of work is one *segment*
  (integrate to the next kink event and resolve it, `ij.kinks.KinkIntegrator`), so a
  slot refills as soon as its trajectory ends, whatever the others do.

Two evaluation modes: `exact=True` (CPU default) loops over the active slots with the
unbatched per-slot program, so an idle slot costs nothing; `exact=False` vmaps over all
slots (for GPUs). A vmapped step costs every slot, finished or not, so once the queue is
empty `Engine` narrows the batch to the unfinished slots (widths `slots / 8^k`, each
compiled once): the tail of a sweep, and a sweep with fewer trajectories than slots, do
not pay for the finished ones.
"""

from __future__ import annotations

import abc
import functools
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple, final

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from .._diffrax_compat import t1_clip_floor, with_controller_tols, wrap_term
from .._results import RESULTS, result_code
from ..flow import flow_field, trajectory_record
from ..invariants import conserved_quantities
from ..kinks import LANES
from ..losses import edge_loss_fn
from ..network import DAGNetwork
from ..options import SaveTimes, SolverOptions, StopRules
from ._devices import Joiner, RunQueue, engine_devices

_SUCC = int(result_code(RESULTS.successful))
_EVENT = int(result_code(RESULTS.event_occurred))
_MAXSTEPS = int(result_code(RESULTS.max_steps_reached))
_code = result_code


class _Slot(NamedTuple):
    occupied: Any
    index: Any
    y: Any
    tprev: Any
    tnext: Any
    solver_state: Any
    controller_state: Any
    result: Any
    num_steps: Any
    num_accepted: Any
    num_rejected: Any
    save_i: Any
    drift: Any
    last_t: Any
    last_y: Any
    theta0: Any
    c0: Any
    clock: Any


class SweepProblem(eqx.Module):
    """Everything that is the same for all trajectories of a plain-flow sweep (the
    network template, data, times, solver, controller, objective and stopping rules), as
    `make_problem` builds it for `Engine`."""

    net: DAGNetwork
    X: jax.Array
    Y: jax.Array
    t0: jax.Array
    t1: jax.Array
    t1_clip_floor: jax.Array
    save_ts: jax.Array
    solver: diffrax.AbstractSolver
    controller: diffrax.AbstractStepSizeController
    terms: Any
    dt0: Any
    max_steps: int = eqx.field(static=True)
    loss: Any = eqx.field(static=True)
    weight_decay: float = eqx.field(static=True)
    stop: StopRules = eqx.field(static=True)

    @property
    def has_stop_rule(self) -> bool:
        return self.stop.enabled

    @property
    def args(self):
        return (self.X, self.Y)

    def field(self, t, y):
        return flow_field(self.net, loss=self.loss, weight_decay=self.weight_decay)(t, y, self.args)

    def conserved(self, theta):
        return conserved_quantities(self.net.with_edge_weights(theta))

    def decay(self, t):
        return jnp.exp(-2.0 * self.weight_decay * (t - self.t0))

    def stop_hits(self, t, y, clock_start):
        # gradient_flow's Event condition: the same StopRules.hits with the same arguments
        return self.stop.hits(
            t,
            y,
            gradient=lambda th: self.field(t, th) + self.weight_decay * th,
            loss=edge_loss_fn(self.net, self.X, self.Y, self.loss),
            clock_start=clock_start,
        )


def make_problem(
    net,
    X,
    Y,
    t1,
    *,
    t0=0.0,
    options: SolverOptions = SolverOptions(),
    saveat: SaveTimes = SaveTimes(),
    stop: StopRules = StopRules(),
    loss="mse",
    weight_decay=0.0,
) -> SweepProblem:
    """The problem every trajectory of an `Engine` shares, built exactly as
    `gradient_flow` hands it to `diffeqsolve` (so a slot's numbers equal
    `gradient_flow`'s).

    **Arguments:** `net` (template network: graph and activations), `X`, `Y`, `t1`, `t0`,
    and the option objects `options` (`ij.SolverOptions`; no `stepsize_controller`: the
    engine uses `options.get_controller()`), `saveat` (`ij.SaveTimes`), `stop`
    (`ij.StopRules`), and the objective's `loss` name and `weight_decay`.

    **Returns:** a `SweepProblem`.
    """
    if options.stepsize_controller is not None:
        raise ValueError(
            "The sweep engine builds its step-size controller from rtol, atol and recovery; drop SolverOptions.stepsize_controller."
        )
    theta = net.edge_weights()
    dtype = jnp.result_type(theta.dtype, X.dtype)
    ts = jnp.asarray(saveat.times(t0, t1), dtype=dtype)
    time_dtype = jnp.result_type(t0, t1, ts.dtype)
    direction = jnp.asarray(1)  # t0 < t1 always: diffeqsolve's direction is +1
    t0_ = jnp.asarray(t0, dtype=time_dtype) * direction
    t1_ = jnp.asarray(t1, dtype=time_dtype) * direction
    floor = t1_clip_floor(t1_)
    ctrl = options.get_controller().wrap(direction)
    field = flow_field(net, loss=loss, weight_decay=weight_decay)
    term = wrap_term(diffrax.ODETerm(field), direction)
    dt0 = options.dt0
    return SweepProblem(
        net=net,
        X=X,
        Y=Y,
        t0=t0_,
        t1=t1_,
        t1_clip_floor=floor,
        save_ts=ts * direction,
        solver=with_controller_tols(options.get_solver(), ctrl),
        controller=ctrl,
        terms=term,
        dt0=None if dt0 is None else jnp.asarray(dt0, dtype=time_dtype) * direction,
        max_steps=int(options.max_steps),
        loss=loss,
        weight_decay=float(weight_decay),
        stop=stop,
    )


def _dtype(p: SweepProblem):
    return jnp.result_type(p.net.weights.dtype, p.X.dtype, p.t0.dtype)


def _init_slot(p: SweepProblem, theta0, index, occupied) -> _Slot:
    y0 = jnp.asarray(theta0, dtype=_dtype(p))
    err_order = p.solver.error_order(p.terms)
    tnext, cstate = p.controller.init(p.terms, p.t0, p.t1, y0, p.dt0, p.args, p.solver.func, err_order)
    tnext = jnp.minimum(tnext, p.t1)
    sstate = p.solver.init(p.terms, p.t0, tnext, y0, p.args)
    result = jnp.asarray(_SUCC, jnp.int32)
    clock = p.stop.start_clock()
    if p.has_stop_rule:
        result = StopRules.result_code(p.stop_hits(p.t0, y0, clock), result)
    zero = jnp.asarray(0, jnp.int32)
    return _Slot(
        occupied=jnp.asarray(occupied),
        index=jnp.asarray(index, jnp.int32),
        y=y0,
        tprev=p.t0,
        tnext=tnext,
        solver_state=sstate,
        controller_state=cstate,
        result=result,
        num_steps=zero,
        num_accepted=zero,
        num_rejected=zero,
        save_i=zero,
        drift=jnp.zeros((), y0.dtype),
        last_t=jnp.asarray(jnp.nan, p.t0.dtype),
        last_y=jnp.full_like(y0, jnp.nan),
        theta0=y0,
        c0=p.conserved(y0),
        clock=clock,
    )


def _active(p: SweepProblem, s: _Slot):
    return s.occupied & (s.tprev < p.t1) & (s.result == _SUCC) & (s.num_steps < p.max_steps)


def _step_slot(p: SweepProblem, s: _Slot, masked: bool = True) -> _Slot:
    """One iteration of diffrax's `body_fun` for one slot (held still when inactive).
    `masked=False`: the caller knows the slot is active (exact mode's per-slot loop), so
    the selects that hold an inactive slot still are left out."""
    active = _active(p, s) if masked else True
    y, y_error, dense_info, sstate, sres = p.solver.step(p.terms, s.tprev, s.tnext, s.y, p.args, s.solver_state, False)
    y_error = jtu.tree_map(lambda x: jnp.where(jnp.isnan(x), jnp.inf, x), y_error)
    keep, tprev, tnext, made_jump, cstate, cres = p.controller.adapt_step_size(
        s.tprev,
        s.tnext,
        s.y,
        y,
        p.args,
        y_error,
        p.solver.error_order(p.terms),  # type: ignore[arg-type]  # None as diffeqsolve passes it; diffrax's annotation omits it
        s.controller_state,
    )
    if made_jump is not False:
        raise NotImplementedError("Step-size controllers with jumps are not supported by the sweep engine.")
    keep = jnp.asarray(keep)  # a traced bool already (diffrax types it as a Python bool or an array)
    tprev = jnp.minimum(tprev, p.t1)
    clip = tnext > p.t1_clip_floor
    tnext = jnp.where(clip, jnp.where(keep, p.t1, tprev + 0.5 * (p.t1 - tprev)), tnext)
    y = jnp.where(keep, y, s.y)
    sstate = jtu.tree_map(lambda a, b: jnp.where(keep, a, b), sstate, s.solver_state)
    result = jnp.where(keep, _code(sres), _SUCC)
    ok = (result == _SUCC) | (result == _EVENT)
    result = jnp.where(ok, _code(cres), result)

    # Dense-output saves at gradient_flow's save times: running max of |c(t) - c0 decay|.
    interp = p.solver.interpolation_cls(t0=s.tprev, t1=s.tnext, **dense_info)
    n_save = p.save_ts.shape[0]

    def cond(c):
        i = c[0]
        return active & keep & (i < n_save) & (p.save_ts[jnp.minimum(i, n_save - 1)] <= s.tnext)

    def body(c):
        i, drift, lt, ly = c
        t = p.save_ts[i]
        yt = interp.evaluate(t)
        valid = jnp.all(jnp.isfinite(yt))
        dev = jnp.max(jnp.abs(p.conserved(yt) - s.c0 * p.decay(t)), initial=0.0)
        drift = jnp.where(valid, jnp.maximum(drift, dev), drift)
        return i + 1, drift, jnp.where(valid, t, lt), jnp.where(valid, yt, ly)

    save_i, drift, last_t, last_y = jax.lax.while_loop(cond, body, (s.save_i, s.drift, s.last_t, s.last_y))

    if p.has_stop_rule:
        result = StopRules.result_code(p.stop_hits(tprev, y, s.clock), result)
    new = s._replace(
        y=y,
        tprev=tprev,
        tnext=tnext,
        solver_state=sstate,
        controller_state=cstate,
        result=result.astype(jnp.int32),
        num_steps=s.num_steps + 1,
        num_accepted=s.num_accepted + keep.astype(jnp.int32),
        num_rejected=s.num_rejected + (~keep).astype(jnp.int32),
        save_i=save_i,
        drift=drift,
        last_t=last_t,
        last_y=last_y,
    )
    if not masked:
        return new
    return jtu.tree_map(lambda a, b: jnp.where(active, a, b), new, s)


def _finalize_slot(p: SweepProblem, s: _Slot) -> dict:
    """The per-trajectory record (`trajectory_record`, as `gradient_flow` builds it)."""
    final_ok = jnp.isfinite(s.tprev) & jnp.all(jnp.isfinite(s.y))
    have_save = jnp.isfinite(s.last_t)
    t_final = jnp.where(final_ok, s.tprev, jnp.where(have_save, s.last_t, p.t0))
    theta_final = jnp.where(final_ok, s.y, jnp.where(have_save, s.last_y, s.theta0))
    result = jnp.where((s.tprev < p.t1) & (s.result == _SUCC), _MAXSTEPS, s.result)
    stats = dict(num_steps=s.num_steps, num_accepted_steps=s.num_accepted, num_rejected_steps=s.num_rejected)
    rec = trajectory_record(
        p.net,
        p.X,
        p.Y,
        theta0=s.theta0,
        t_final=t_final,
        theta_final=theta_final,
        result=result,
        stats=stats,
        saved_drift=s.drift,
        t0=p.t0,
        loss=p.loss,
        weight_decay=p.weight_decay,
    )
    return dict(index=s.index, **rec)


class EngineStats(NamedTuple):
    """Work accounting of one engine run: `useful_steps` (units of work of harvested
    trajectories: solver steps, or segments for the kink-aware engine),
    `slot_iterations` (slots x loop iterations), `calls`, `seconds`, `devices`
    (the devices that ran work), and `host_seconds`: the time the device loops spent
    on the host's work after their first call (harvests, records, refills), summed over
    devices; each device runs its next call meanwhile, except during the harvest and refill."""

    useful_steps: int
    slot_iterations: int
    calls: int
    seconds: float
    devices: int = 1
    host_seconds: float = 0.0

    @property
    def work_efficiency(self) -> float:
        return self.useful_steps / max(self.slot_iterations, 1)


def _advance_exact(m, st, limit):
    # slot-major: each active slot is taken out of the batch once, advanced by up to
    # `limit` units of work with the unbatched program, and put back (taking a slot
    # out and putting it back per unit of work cost as much as a solver step)
    act = jax.vmap(m.active)(st)
    order = jnp.argsort(~act, stable=True)

    def one(j, c):
        st, n = c
        k = order[j]

        step = m.advance_active or m.advance_slot

        def body(c2):
            i, s = c2
            return i + 1, step(s)  # the loop's condition holds: s is active

        i, s = jax.lax.while_loop(
            lambda c2: (c2[0] < limit) & m.active(c2[1]), body, (jnp.asarray(0), jtu.tree_map(lambda a: a[k], st))
        )
        return jtu.tree_map(lambda a, b: a.at[k].set(b), st, s), jnp.maximum(n, i)

    return jax.lax.fori_loop(0, jnp.sum(act), one, (st, jnp.asarray(0)))


def _theta0(m, i, row):
    # the initial weights of trajectory `i`: its row of the host's init table
    # (fed with the queue, `rows`), else `init_fn(i)`
    return m.init(i) if row is None else row


def _records(map_all, m, st, take):
    # records of the slots `take` only (exact mode skips the others; under vmap the
    # per-slot cond is a select), and nothing at all when no slot is taken
    blank = jax.eval_shape(m.record, jtu.tree_map(lambda a: a[0], st))
    zeros = lambda *_: jtu.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), blank)  # noqa: E731

    def one(s_t):
        s, t = s_t
        return jax.lax.cond(t, m.record, zeros, s)

    return jax.lax.cond(
        jnp.any(take),
        lambda: map_all(one, (st, take)),
        lambda: jtu.tree_map(lambda a: jnp.zeros(take.shape + a.shape, a.dtype), blank),
    )


def _vmap_all(f, x):
    # (the lanes are a named axis: a slot program may gather the lanes that take a
    # rare branch, `kinks.lane_cond`)
    return jax.vmap(f, axis_name=LANES)(x)


class SweepEngine(abc.ABC):
    """Runs a queue of initialization indices through `slots` slots, refilling each slot
    as soon as its trajectory finishes.

    Subclasses give the per-slot program: `init_slot(theta0, index, occupied)`,
    `active(slot)`, `advance_slot(slot)` (one unit of work; an inactive slot is
    returned unchanged), `record(slot)` (the per-trajectory record, a dict of arrays) and
    `useful_work(record)` (units of work done, for `EngineStats`).

    **Arguments:**

    - `init_fn`: a JAX function `index -> theta0` (jit- and vmap-able).
    - `slots`: number of slots (rounded up to a multiple of the device count).
    - `steps_per_call`: loop iterations (units of work per slot) per jitted call between
        harvests.
    - `devices`: JAX devices to split the slots over, each running its own loop over
        its share (default: this process's devices; one CPU device in vmap mode,
        `engine_devices`).
    - `exact`: loop over the active slots with the unbatched program (default), or vmap
        over all slots.
    """

    compact: bool = False
    """Vmap mode: once the queue is empty, narrow the batch to the active slots (widths
    `slots / 8^k`; each width compiles once). Set by subclasses whose per-slot program
    compiles quickly."""

    def __init__(
        self, init_fn: Callable | None, *, slots: int = 64, steps_per_call: int = 64, devices=None, exact: bool = True
    ):
        if slots < 1:
            raise ValueError(f"slots must be >= 1; got {slots!r}.")
        if steps_per_call < 1:
            raise ValueError(f"steps_per_call must be >= 1; got {steps_per_call!r}.")
        self.devices = engine_devices(devices, exact=exact)
        nd = len(self.devices)
        self.slots = -(-int(slots) // nd) * nd
        self.steps_per_call = int(steps_per_call)
        self.exact = bool(exact)
        # exact: each slot runs the unbatched program (XLA rounds batched kernels
        # differently, by ~1e-16, and adaptive stepping amplifies that to ~tolerance), so
        # results do not depend on slots, chunking, resume or devices; a loop over the
        # active slots only, so an idle slot costs nothing. Otherwise vmap over all slots
        # (for GPUs). Against gradient_flow / kink_aware_flow (other compiled programs)
        # it agrees to round-off amplified by adaptive stepping.
        self._map_all = jax.lax.map if exact else _vmap_all
        self.init_fn = init_fn
        # Every program takes `data` (the engine's arrays, `self.data`: e.g. the data set and
        # the initial weights) as its first argument, never as a closed-over constant, so an
        # engine given new data of the same shapes (`Engine.with_data`) reuses its programs.
        # Each program runs on one device (the one its arguments are on: each device's loop
        # calls it with its own; it compiles once per device).
        self._refill = jax.jit(self._refill_program, donate_argnums=(1,))
        self._advance = jax.jit(self._advance_program, donate_argnums=(3,))
        self._start = jax.jit(self._start_program)
        self._take = jax.jit(lambda st, rows: jtu.tree_map(lambda a: a[rows], st))
        self._ready: set = set()  # devices whose programs are compiled
        self._compile_s = 0.0  # the seconds a device's first calls took (compiling)
        self._on_device: dict = {}  # device -> (self.data, its copy there)

    def _refill_program(self, data, state, index, rows, take):
        m = self.bind(data)
        fresh = self._map_all(lambda a: m.init_slot(_theta0(m, a[0], a[1]), a[0], True), (index, rows))
        return jtu.tree_map(lambda a, b: jnp.where(_bcast(take, a), a, b), fresh, state)

    def _advance_program(self, data, limit, floor, state, pending):
        # up to `limit` units of work per slot; vmap mode also returns once no more than
        # `floor` slots (of this device's) are active, so the host can narrow the batch.
        # Also the records of the `pending` (unharvested) slots that are done.
        m = self.bind(data)
        active_all = jax.vmap(m.active)
        if self.exact or jtu.tree_leaves(state)[0].shape[0] == 1:
            # (a batch of one gains nothing from vmap: the unbatched loop, no selects)
            state, n = _advance_exact(m, state, limit)
            act = active_all(state)
            return state, n, act, _records(self._map_all, m, state, pending & ~act)
        step_all = functools.partial(_vmap_all, m.advance_slot)

        def cond(c):
            i, st = c
            return (i < limit) & (jnp.sum(active_all(st)) > floor)

        def body(c):
            i, st = c
            return i + 1, step_all(st)

        n, state = jax.lax.while_loop(cond, body, (jnp.asarray(0), state))
        act = active_all(state)
        return state, n, act, _records(self._map_all, m, state, pending & ~act)

    def _start_program(self, data, index, rows, take):
        # the first fill: slots `take` start trajectories `index`, the others are empty
        m = self.bind(data)
        return self._map_all(lambda a: m.init_slot(_theta0(m, a[0], a[1]), a[0], a[2]), (index, rows, take))

    data: Any = ()
    """The arrays the compiled programs take as their first argument (default: none)."""

    tail_calls_factor: int = 1
    """Once the queue is empty (nothing to refill), each call does up to this many times
    `steps_per_call` units of work per slot: fewer host round trips in the tail. Set by
    subclasses whose unit of work is short."""

    def bind(self, data) -> SlotProgram:
        """The per-slot functions with `data` (traced inside a program) in place of
        `self.data`. Default: `data` is unused and the methods are `self`'s."""
        return SlotProgram(self.init_fn, self.init_slot, self.active, self.advance_slot, self.record)

    @abc.abstractmethod
    def init_slot(self, theta0, index, occupied):
        """The state of a slot that starts trajectory `index` at `theta0`."""

    @abc.abstractmethod
    def active(self, s) -> jax.Array:
        """Whether the slot still has work to do."""

    @abc.abstractmethod
    def advance_slot(self, s):
        """One unit of work (an inactive slot is returned unchanged)."""

    @abc.abstractmethod
    def record(self, s) -> dict:
        """The per-trajectory record of a finished slot."""

    @abc.abstractmethod
    def useful_work(self, rec: dict) -> int:
        """Units of work in a batch of records (for `EngineStats`)."""

    table: np.ndarray | None = None
    """Initial weights on the host, `(n, E)`: trajectory `i` starts at row `i` (else
    `init_fn(i)` inside the programs). The queue feeds the rows of the slots it fills,
    `(slots, E)` per call, so no program depends on `n`."""

    def _empty(self, S: int) -> tuple:
        """`(index, rows, take)` arguments of `_start` / `_refill` that fill no slot."""
        none = np.zeros(S, bool)
        return np.zeros(S, np.int32), self._put_rows(np.zeros(S, np.int32), none), none

    def _put_rows(self, index, take):
        """The init-table rows of the slots `take` (zeros elsewhere), or `None` (no table)."""
        if self.table is None:
            return None
        rows = np.zeros((len(index),) + self.table.shape[1:], self.table.dtype)
        rows[take] = self.table[index[take]]
        return rows

    def _data_on(self, device):
        """`self.data` on `device` (copied once per data and device). With the state
        there too (the programs' other arguments are NumPy arrays), each program runs on
        `device`; one trace and one lowering serve every device (with
        `jax.default_device` instead, each device would trace again)."""
        kept = self._on_device.get(device)
        if kept is None or kept[0] is not self.data:
            kept = self._on_device[device] = (self.data, jax.device_put(self.data, device))
        return kept[1]

    def run(
        self,
        indices,
        *,
        on_results: Callable[[dict], None],
        progress=None,
        should_stop: Callable[[], bool] | None = None,
        more: Callable[[], np.ndarray] | None = None,
        expected: int | None = None,
    ) -> EngineStats:
        """Integrate every index in `indices` (in queue order). Each batch of finished
        trajectories is passed to `on_results` as a dict of NumPy arrays (one row per
        trajectory). `progress(records)` is called after each harvest. `more()`, called
        when the queue runs low (fewer indices than a device's slots), returns the next indices to queue
        (none: the run drains and ends): the slots keep working across the caller's
        rounds instead of draining at the end of each. `expected`: the trajectories the
        run will get in all (default: `indices`, or unknown with `more`), which decides
        whether a device that must compile first joins (`worth_joining`).

        Each device runs its own loop over its share of the slots, all taking from one
        queue; the callbacks are called from one device's loop at a time, under one lock,
        while that device runs its next call (a harvest is handed on one call later).
        A device that is not compiled yet compiles in the background and joins when the
        work left is worth it; the first device runs in the caller's thread.
        """
        t_start = time.perf_counter()
        queue = RunQueue(
            indices, on_results=on_results, progress=progress, should_stop=should_stop, more=more, expected=expected
        )
        stats: list[tuple[int, int, int, float]] = []
        first, *others = self.devices

        def loop(device, q, joiner=None):
            stats.append(self._device_loop(device, q, joiner))

        joiner = Joiner(others, self._ready, queue, loop, self._compile_on, lambda: self._compile_s)
        try:
            loop(first, queue, joiner)
        except BaseException as e:
            queue.fail(e)
            raise
        finally:
            joiner.finish()
        if queue.error is not None:
            raise queue.error
        useful, iters, calls, host = (sum(x) for x in zip(*stats))
        return EngineStats(useful, iters, calls, time.perf_counter() - t_start, len(stats), host)

    def _device_loop(self, device, queue: RunQueue, joiner: Joiner | None) -> tuple[int, int, int, float]:
        """One device's host loop: harvest its finished slots and refill them from
        `queue` until the queue is exhausted and its slots are done. `joiner` (the first
        device's loop): measures the compilation and admits the other devices.
        **Returns:** `(useful work, slot iterations, calls, host seconds)` (`EngineStats`)."""
        compiled = device in self._ready
        t_first = time.perf_counter()
        widths = self.widths(None if math.isinf(queue.expected) else int(queue.expected))
        S = widths[0]
        data = self._data_on(device)
        slot_idx = np.full(S, -1, dtype=np.int64)
        # empty slots, then the first block by the refill program, so that a first
        # run (of any size) compiles every program a later run of any size needs; the
        # state is on `device` from the start, so every program runs there
        state = self._start(data, *jax.device_put(self._empty(S), device))
        useful = iters = calls = 0
        host, t_back = 0.0, None  # (t_back: when the last wait for the device ended)
        harvested = None  # the last call's finished records, handed on while the next call runs
        while True:
            free = np.flatnonzero(slot_idx < 0)
            new = queue.take(free.size) if free.size else np.zeros(0, np.int64)
            if new.size:
                # the next block of the queue into the free slots: every argument has
                # the fixed shape (S, ...), whatever the number of trajectories
                take = np.zeros(len(slot_idx), bool)
                new_idx = np.zeros(len(slot_idx), np.int32)
                take[free[: new.size]] = True
                new_idx[free[: new.size]] = new
                slot_idx[free[: new.size]] = new
                state = self._refill(data, state, new_idx, self._put_rows(new_idx, take), take)
            if not np.any(slot_idx >= 0):
                break
            tail = queue.exhausted
            limit, floor = self.steps_per_call, 0
            if tail:
                limit *= self.tail_calls_factor
            if self.compact and not self.exact and tail:
                # nothing left to refill: a narrower batch costs less per step (vmap
                # steps every slot, finished or not); return when the next width holds
                # the active slots
                state, slot_idx = self._narrow(state, slot_idx, widths)
                floor = max((w for w in widths if w < len(slot_idx)), default=0)
            state, n, active, recs = self._advance(data, np.int32(limit), np.int32(floor), state, slot_idx >= 0)
            # the host's work while the call runs: the last call's records to the caller,
            # and the next indices asked for before the queue runs dry
            if harvested is not None:
                _hand_on(queue, harvested, joiner)
                harvested = None
            queue.prefetch(len(slot_idx))
            calls += 1
            t_wait = time.perf_counter()
            iters += int(n) * len(slot_idx)
            host, t_back = host + (0.0 if t_back is None else t_wait - t_back), time.perf_counter()
            done = (slot_idx >= 0) & ~np.asarray(active)
            if calls == 1 and joiner is not None:
                if not compiled:
                    self._compile_s = time.perf_counter() - t_first
                self._ready.add(device)
                joiner.first_ready()
            if done.any():
                harvested = {k: np.asarray(v)[done] for k, v in recs.items()}
                useful += self.useful_work(harvested)
                slot_idx[done] = -1
            if queue.check_stop():
                break
        if harvested is not None:
            _hand_on(queue, harvested, joiner)
        return useful, iters, calls, host + (0.0 if t_back is None else time.perf_counter() - t_back)

    def widths(self, n: int | None = None) -> list[int]:
        """Batch widths of each device's loop in a run of `n` trajectories (default: at
        least `slots`): `slots / devices`, then (vmap mode with `compact`) the ladder
        `/ 8^k`, rounded up, down to one slot. With `compact` in vmap mode, a run of fewer
        trajectories starts at the narrowest of `/ 2^j` (rounded up) that holds `n`, since a
        vmapped step costs every slot, then follows the ladder. No width depends on `n`
        itself: each compiles once, so at most `log2(slots) + 1` programs per engine and
        device, whatever the batch sizes (`warm_up(n)` compiles a run of `n`'s)."""
        per_device = self.slots // len(self.devices)
        narrows = self.compact and not self.exact
        out = [per_device]
        while narrows and out[-1] > 1:
            out.append(-(-out[-1] // 8))  # ceil(w / 8)
        start = per_device
        while narrows and n is not None and start > 1 and -(-start // 2) >= n:
            start = -(-start // 2)
        return [start] + [w for w in out if w < start]

    def warm_up(self, n: int | None = None) -> None:
        """Compile every program at every width (`widths(n)`) on empty slots, on every
        device, so that a later `run` of `n` trajectories (default: at least `slots`)
        compiles nothing."""
        for device in self.devices:
            self._compile_on(device, n)

    def _compile_on(self, device, n: int | None = None) -> None:
        """`warm_up` on `device` alone (a device that joins a run compiles so, first)."""
        data = self._data_on(device)
        widths = self.widths(n)
        S = widths[0]
        state = self._refill(data, self._start(data, *jax.device_put(self._empty(S), device)), *self._empty(S))
        for w in widths:  # the device's loop narrows from each width to the next
            state = self._rows(state, np.arange(w)) if w < _width(state) else state
            state = self._advance(data, np.int32(1), np.int32(0), state, np.zeros(w, bool))[0]
        jax.block_until_ready(state)
        self._ready.add(device)

    def _rows(self, state, rows):
        """The slots `rows` of `state` (a narrower batch)."""
        return self._take(state, np.asarray(rows, np.int32))

    def _narrow(self, state, slot_idx, widths):
        """Vmap mode with an empty queue: the state restricted to its unharvested slots,
        padded with finished ones to the smallest of `widths` that holds them;
        unchanged if that is the current width."""
        live = np.flatnonzero(slot_idx >= 0)
        width = len(slot_idx)
        new = min((w for w in widths if w >= live.size), default=width)
        if new >= width:
            return state, slot_idx
        rows = np.concatenate([live, np.flatnonzero(slot_idx < 0)[: new - live.size]])
        return self._rows(state, rows), slot_idx[rows]


@final
class Engine(SweepEngine):
    """Plain gradient flow (`ij.gradient_flow`) in continuously refilled slots; one unit
    of work is one solver step.

    **Arguments:** `problem` (from `make_problem`), `init_fn` (`index -> theta0`, or
    `None` with `init_table`), `init_table` (optional `(n, E)` initial weights: trajectory
    `i` starts at row `i`), then `SweepEngine`'s. The problem's arrays (data, times) and
    `init_table` are arguments of the compiled programs: `with_data` swaps them for new
    ones of the same shapes without compiling again.
    """

    compact = True  # vmap mode narrows its batch at the end (a plain step compiles in seconds)
    tail_calls_factor = 8  # a solver step is tens of microseconds: longer calls in the tail

    def __init__(
        self,
        problem: SweepProblem,
        init_fn: Callable | None = None,
        *,
        init_table=None,
        slots: int = 64,
        steps_per_call: int = 64,
        devices=None,
        exact: bool = True,
    ):
        if (init_fn is None) == (init_table is None):
            raise ValueError("Give exactly one of init_fn and init_table.")
        self.problem = problem
        self._static = eqx.filter(problem, eqx.is_array, inverse=True)
        self.data = eqx.filter(problem, eqx.is_array)
        self.table = host_table(init_table, _dtype(problem), problem.net.n_edges)
        super().__init__(init_fn, slots=slots, steps_per_call=steps_per_call, devices=devices, exact=exact)

    def with_data(self, problem: SweepProblem, init_table=None) -> Engine:
        """Use `problem`'s arrays (e.g. another data set) and `init_table` from now on,
        with the programs compiled for this engine. They must have the shapes and dtypes
        of the current ones, and `problem` the same solver and options (the caller keys
        its engines on them, as `sweep_flows` does). **Returns:** `self`."""
        new = eqx.filter(problem, eqx.is_array)
        if not same_arrays(self.data, new) or (init_table is None) != (self.table is None):
            raise ValueError(
                "with_data needs arrays of the same structure, shapes and dtypes as the engine's; "
                "build a new Engine for a different problem."
            )
        self.problem = problem
        self.data = new
        if init_table is not None:
            assert self.table is not None  # checked above: both have a table, or neither
            self.table = host_table(init_table, self.table.dtype, problem.net.n_edges)
        return self

    def bind(self, data):
        p = eqx.combine(data, self._static)
        return SlotProgram(
            self.init_fn,
            functools.partial(_init_slot, p),
            functools.partial(_active, p),
            functools.partial(_step_slot, p),
            functools.partial(_finalize_slot, p),
            functools.partial(_step_slot, p, masked=False),
        )

    def init_slot(self, theta0, index, occupied):
        return _init_slot(self.problem, theta0, index, occupied)

    def active(self, s):
        return _active(self.problem, s)

    def advance_slot(self, s):
        return _step_slot(self.problem, s)

    def record(self, s):
        return _finalize_slot(self.problem, s)

    def useful_work(self, rec):
        return int(rec["num_steps"].sum())


class SlotProgram(NamedTuple):
    """The per-slot functions of an engine with its arrays (`data`, traced inside a
    program) bound in (`SweepEngine.bind`): `init` (`index -> theta0`), `init_slot`,
    `active`, `advance_slot`, `record`, and optionally `advance_active` (`advance_slot`
    for a slot known to be active)."""

    init: Callable | None  # None: the engine's init table feeds the rows
    init_slot: Callable
    active: Callable
    advance_slot: Callable
    record: Callable
    advance_active: Callable | None = None  # advance_slot for a slot known to be active (default: advance_slot)


def same_arrays(a, b) -> bool:
    """Whether two pytrees of arrays have the same structure, shapes and dtypes (so a
    compiled program takes either)."""
    shapes = lambda t: [(x.shape, x.dtype) for x in jtu.tree_leaves(t)]  # noqa: E731
    return (
        jtu.tree_structure(a) == jtu.tree_structure(b)  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef
        and shapes(a) == shapes(b)
    )


def host_table(init_table, dtype, n_edges: int) -> np.ndarray | None:
    """The init table as a host `(n, E)` array of the problem's dtype (or `None`)."""
    if init_table is None:
        return None
    table = np.asarray(init_table, dtype=dtype)
    if table.ndim != 2 or table.shape[1] != n_edges:
        raise ValueError(
            f"init_table has shape {table.shape}; expected (n, {n_edges}): one row of edge weights per trajectory."
        )
    return table


def _hand_on(queue: RunQueue, records: dict, joiner: Joiner | None) -> None:
    # a harvest to the run's caller; the first device's loop then considers the others
    queue.deliver(records)
    if joiner is not None:
        joiner.consider()


def _width(state) -> int:
    """The number of slots of an engine state."""
    return len(jtu.tree_leaves(state)[0])


def _bcast(mask, a):
    return mask.reshape(mask.shape + (1,) * (a.ndim - 1))
