"""One segment of a kink-aware flow: integrate until the first sign change of the event
condition (or `t1`), locate it, and save at the requested times on the way.

This is `diffrax.diffeqsolve` with one floating-point `Event` whose root finder is
`Illinois`, written out as lean `while_loop`s over solver steps (with diffrax's
solver and step-size-controller objects, as the sweep engine does) and over the root
finder's iterations. It takes the same steps, makes the same saves and locates
the same event time as `diffeqsolve` (`diffrax/_integrate.py`: the initial step,
clipping to `t1`, rejection, the event check after every step, the root find on the
last step's dense output, the saves after the event dropped), with one addition
(`inside`): the condition is also checked inside each step, which catches a crossing and
its return within one step that `diffeqsolve` misses. A segment is short
(a few steps) and is run thousands of times per sweep, so what `diffeqsolve` and
`optimistix.root_find` add around the arithmetic dominated its cost (measured in
`benchmarks/sweep_throughput.py`): set-up and checks, output buffers, the root finder's
implicit-function machinery. The event condition (which holds a Filippov solve) is
evaluated in one place, so compiled once instead of five times as in `diffeqsolve`:
the condition at the start, after each step, in the root find and (`refine`) in the
event time's refinement on the solver's own step are iterations of one `while_loop`
(`one_site=True`, unbatched), or in two places under `vmap` (a step loop, then a
root-find loop, `one_site=False`; see `solve_segment`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import optimistix as optx
from jaxtyping import Array, ArrayLike

from .._diffrax_compat import t1_clip_floor, with_controller_tols, wrap_term
from ._illinois import Illinois, IllinoisState
from ._lanes import lane_while

_MAX_ROOT_STEPS = 256  # optimistix.root_find's default max_steps


class SegmentSolution(eqx.Module):
    """What one segment produced.

    **Fields:** `t`, `y` (where it stopped: the event, `t1`, or the last good step),
    `ys` `(T, E)` and `saved` `(T,)` (the saves made at `ts`), `result` (a
    `diffrax.RESULTS`: `event_occurred` at an event), `num_steps`, `num_accepted`,
    `num_rejected`, `solver_state` (after the last accepted step), `dt_next` (the step
    the controller proposed after the last step: where the next segment starts),
    `past` (at an event, the sign the condition changed to: it has that sign at `t`),
    `aux` (given `aux0`: the condition's `aux` at `y`; else None)."""

    t: Array
    y: Array
    ys: Array
    saved: Array
    result: diffrax.RESULTS
    num_steps: Array
    num_accepted: Array
    num_rejected: Array
    solver_state: object
    dt_next: Array
    past: Array
    aux: object = None


class _Root(eqx.Module):
    """The state of the Illinois root find: iteration, current iterate, bracket."""

    it: Array
    y: Array
    st: IllinoisState
    done: Array
    finite: Array


def _root_init(lower, upper, dtype) -> _Root:
    z = jnp.zeros((), dtype)
    st = IllinoisState(jnp.asarray(lower, dtype), jnp.asarray(upper, dtype), z, z, jnp.asarray(0))
    return _Root(jnp.asarray(0), jnp.asarray(upper, dtype), st, jnp.asarray(False), jnp.asarray(True))


def _root_point(r: _Root):
    """Where the next iteration evaluates the condition: the bracket's ends in the first
    two iterations (the root finder's `init`), then the iterate."""
    return jnp.where(r.it == 0, r.st.lower, jnp.where(r.it == 1, r.st.upper, r.y))


def _root_update(finder: Illinois, r: _Root, v) -> _Root:
    """One iteration, given the condition's value `v` at `_root_point(r)`."""
    st = r.st
    init = r.it < 2
    st_init = IllinoisState(
        st.lower, st.upper, jnp.where(r.it == 0, v, st.f_lower), jnp.where(r.it == 1, v, st.f_upper), st.side
    )
    new_y, st_step, _ = finder.step(lambda yy, args: (v, None), r.y, None, None, st, None)
    st = jtu.tree_map(lambda a, b: jnp.where(init, a, b), st_init, st_step)
    finite = jnp.isfinite(r.y)
    done = (r.it >= 1) & (finder.terminate(None, r.y, None, None, st, None)[0] | ~finite)
    return _Root(r.it + 1, jnp.where(init, r.y, new_y), st, done, finite)


def _root_going(r: _Root):
    return ~r.done & (r.it < _MAX_ROOT_STEPS + 2)


def _root_past(r: _Root):
    """The event time a segment restarts at: the end of the final bracket past the sign
    change (the condition has there the sign it changed to), within `event_tol` of the
    root. The last iterate may lie on either side, and where the condition jumps (the
    sliding weights' determinant changing sign at a two-fold) a restart before the jump
    meets it again at once: a cascade of events at one time."""
    return r.st.upper


def _root_result(r: _Root):
    result = optx.RESULTS.where(r.done, optx.RESULTS.successful, optx.RESULTS.nonlinear_max_steps_reached)
    return optx.RESULTS.where(r.finite, result, optx.RESULTS.nonfinite)


def _root_sign(r: _Root):
    # (`f_upper` is exactly 0 where the root finder hit the root: the sign is then the
    # one opposite the bracket's other end)
    return jnp.where(r.st.f_upper != 0, jnp.sign(r.st.f_upper), -jnp.sign(r.st.f_lower))


def _root_answer(r: _Root):
    """`(t, sign, result)` of a finished root find: `_root_past`, the sign the condition
    has there (the sign it changed to), and the `optimistix.RESULTS`."""
    return _root_past(r), _root_sign(r), _root_result(r)


def locate(g: Callable, lower, upper, event_tol: float, go, data=(), lanes: str | None = None, aux0=None):
    """The root of `g(t, *data)` on `[lower, upper]` by `Illinois(atol=event_tol)`, as
    `optimistix.root_find(g, Illinois, y0=upper, options=dict(lower, upper))` computes
    it (same iterates), in one `while_loop` that evaluates `g` once per iteration:
    the first two iterations evaluate the bracket's ends (the root finder's `init`),
    the others are its steps. `go=False` returns at once. `lanes`: the named `vmap`
    axis of a batch, whose iterations run for the lanes still searching only
    (`lane_while`; every value of `g` that differs between lanes must be in `data`).
    Returns `(t, sign, result)` (`_root_answer`): `t` the end of the final bracket past
    the root, `sign` the sign `g` has there, `result` an `optimistix.RESULTS`
    (`nonfinite`, `nonlinear_max_steps_reached` as there). With `aux0`, `g` returns
    `(value, aux)` (`aux` structured as `aux0`), and `aux` at `t` comes fourth."""
    finder = Illinois(atol=event_tol)
    split = (lambda out: (out, None)) if aux0 is None else (lambda out: out)

    def body(s, *data):
        r, aux = s
        value, aux_new = split(g(_root_point(r), *data))
        r_new = _root_update(finder, r, value)
        if aux is not None:  # (the point evaluated became the bracket's end past the root)
            at_upper = (r.it == 1) | ((r.it >= 2) & (r_new.st.upper == r.y))
            aux = jtu.tree_map(lambda a, b: jnp.where(at_upper, a, b), aux_new, aux)
        return r_new, aux

    r, aux = lane_while(
        lanes,
        lambda s: go & _root_going(s[0]),
        body,
        (_root_init(lower, upper, jnp.result_type(lower)), aux0),
        *data,
    )
    return _root_answer(r) if aux0 is None else _root_answer(r) + (aux,)


class _Carry(eqx.Module):
    y: Array
    tprev: Array
    tnext: Array
    solver_state: object
    controller_state: object
    result: diffrax.RESULTS
    num_steps: Array
    num_accepted: Array
    num_rejected: Array
    save_i: Array
    ys: Array
    saved: Array
    ev_value: Array
    ev_tprev: Array
    ev_tnext: Array
    ev_thi: Array  # the upper end of the event's bracket: the step's end, or the first interior point inside crossed
    ev_inside: Array  # the condition was negative inside the last step
    ev_y: Array
    ev_dense: dict


_INIT, _STEP, _ROOT, _REFINE, _FINAL, _DONE = 0, 1, 2, 3, 4, 5

RESTART_ITERATIONS = 5
"""Steps of the event-time refinement (`refine=True`): at the interpolant's root, three
more (`Refine`), and the one kept."""
INTERIOR_POINTS = 3
"""Evenly spaced points inside each step where the condition is checked (`solve_segment`'s
`inside`)."""
SECANT_OFFSET = 1e-6
"""How far from the interpolant's root, as a fraction of the last step, the refinement's
second point lies, towards the side of the event not seen yet; the secant steps after it
may move up to 100 and 10^4 times as far while that side stays unseen."""


class Refine(eqx.Module):
    """The event-time refinement: the secant method on `g(y(t))`, `y(t)` the solver's own
    step from the last step's start `t_prev` to `t` (not the interpolant). Iteration `i`
    steps to `time(...)`; then `update` with the condition there. `tt` ends as the time
    kept and `y`, `ok` as the step to it.

    A Gauss step conserves `c` exactly (the interpolant does not), and the interpolant's
    root can be ~h^4 off the surface, which costs a spurious event. The first point is
    the interpolant's root, the second `SECANT_OFFSET` of the step towards the side of
    the event not seen there; then secant steps, through the last two points while one
    side only is seen (moved towards the other, at most 100^i times the first offset),
    and after that just past the secant root between the best point of each side. These
    points are near the root, on the piece of `g` (a minimum over pairs) that the
    crossing pair defines; the step's start is not, as `g` there is often another
    pair's. The time kept is the point past the event (`g` with the sign it changed to,
    `past`) where `|g|` was smallest (before it, where none was found), unless it would
    move the event across a save: where `g` jumps (the sliding weights' at a two-fold) a
    restart before the jump meets it again at once, and the Gauss steps can jump up to
    ~1e-5 of a step after the interpolant.
    The secant method needs no derivative of `g`, whose Filippov solve would double the
    program's largest piece."""

    i: Array
    tt: Array
    ta: Array  # the previous iteration's time and condition value
    va: Array
    tn: Array  # the best point before the event (|g| smallest) and its value
    vn: Array
    tf: Array  # the best point past it
    vf: Array
    y: Array
    ok: Array
    past: Array  # the sign g changed to at the event

    @classmethod
    def start(cls, t_root, y, past):
        inf = jnp.asarray(jnp.inf, y.dtype)
        t, no = t_root, jnp.asarray(False)
        return cls(jnp.asarray(0), t, t, inf, t, inf, t, inf, y, no, jnp.asarray(past, y.dtype))

    def going(self):
        return self.i < RESTART_ITERATIONS

    @property
    def tbest(self):
        """The time to keep: the best point past the event, else the best before it."""
        return jnp.where(jnp.isfinite(self.vf), self.tf, self.tn)

    def time(self, t_root, t_prev, ts, event):
        """This iteration's time: `tt`, and in the last iteration the best time unless
        that moves the event across a save time (then the interpolant's root)."""
        tbest = self.tbest
        lo, hi = jnp.minimum(tbest, t_root), jnp.maximum(tbest, t_root)
        use = event & (tbest > t_prev) & ~jnp.any((ts > lo) & (ts <= hi))
        return jnp.where(self.i == RESTART_ITERATIONS - 1, jnp.where(use, tbest, t_root), self.tt)

    def update(self, tt, y, ok, v, t_root, t_prev, t1) -> Refine:
        """After the step to `tt` (`y`, `ok`) and the condition `v` there: the best points
        of each side, and the next time."""
        far = v * self.past >= 0  # (NaN is on neither side)
        # (ties go to the later point: where g jumps, the secants' points come closer)
        new_f = far & (jnp.abs(v) <= jnp.abs(self.vf))
        new_n = (v * self.past < 0) & (jnp.abs(v) <= jnp.abs(self.vn))
        tf, vf = jnp.where(new_f, tt, self.tf), jnp.where(new_f, v, self.vf)
        tn, vn = jnp.where(new_n, tt, self.tn), jnp.where(new_n, v, self.vn)
        both = jnp.isfinite(vf) & jnp.isfinite(vn)
        root = tn - vn * (tf - tn) / jnp.where(both & (vf != vn), vf - vn, 1.0)
        root = jnp.where((root - tn) * (root - tf) < 0, root, 0.5 * (tn + tf))
        # just past the secant's root (1e-3 of the bracket, or a few ulps): aimed at the
        # root itself, the points landed before it again and again, and the one past the
        # event kept its first |g|
        pad = jnp.maximum(1e-3 * jnp.abs(tf - tn), 8 * jnp.finfo(root.dtype).eps * jnp.abs(root))
        bracketed = root + jnp.sign(tf - root) * jnp.minimum(pad, 0.5 * jnp.abs(tf - root))
        # one side seen: the secant through the last two points, towards the other side
        slope = (v - self.va) / (tt - self.ta)
        secant = tt - v / slope  # (not finite where g did not change: then as far as it may)
        reach = SECANT_OFFSET * 100.0**self.i * (t_root - t_prev)
        later = ~jnp.isfinite(vf)  # (points before the event only: it lies later)
        lo, hi = jnp.where(later, t_root, t_root - reach), jnp.where(later, t_root + reach, t_root)
        one_side = jnp.clip(jnp.where(jnp.isfinite(secant), secant, jnp.where(later, hi, lo)), lo, hi)
        one_side = jnp.where(self.i == 0, jnp.where(later, hi, lo), one_side)
        t_new = jnp.clip(jnp.where(both, bracketed, one_side), t_prev, t1)
        last = self.i == RESTART_ITERATIONS - 1
        return Refine(self.i + 1, jnp.where(last, tt, t_new), tt, v, tn, vn, tf, vf, y, ok, self.past)


@dataclasses.dataclass(frozen=True, eq=False)
class _Stepper:
    """What the loops of one segment share: the wrapped term, the solver (with the
    controller's tolerances) and the wrapped controller, `args`, the end `t1` and its
    clipping threshold, the save times `ts` and the steps budget. Its methods are the
    pieces of `diffeqsolve`'s loop: `going`, `advance` (one step and its saves) and
    `dense_at` (the last step's dense output). A trace-time object, not a pytree (its
    methods go to `lax.cond` / `while_loop` as plain functions, hashed by identity)."""

    terms: object
    solver: diffrax.AbstractSolver
    controller: diffrax.AbstractStepSizeController
    args: object
    t1: Array
    clip_floor: Array
    error_order: float | Array | None
    ts: Array
    max_steps: int
    inside: bool = False

    def going(self, c: _Carry):
        return (c.tprev < self.t1) & (c.result == diffrax.RESULTS.successful) & (c.num_steps < self.max_steps)

    def advance(self, c: _Carry) -> _Carry:
        """One step (accepted or rejected) and the saves it makes; the event check is the
        caller's (`_checked`)."""
        solver, t1, ok = self.solver, self.t1, diffrax.RESULTS.successful
        y, y_error, dense_info, sstate, sres = solver.step(
            self.terms, c.tprev, c.tnext, c.y, self.args, c.solver_state, False
        )
        y_error = jtu.tree_map(lambda x: jnp.where(jnp.isnan(x), jnp.inf, x), y_error)
        keep, tprev, tnext, made_jump, cstate, cres = self.controller.adapt_step_size(
            c.tprev,
            c.tnext,
            c.y,
            y,
            self.args,
            y_error,
            self.error_order,  # type: ignore[arg-type]  # None as diffeqsolve passes it; diffrax's annotation omits it
            c.controller_state,
        )
        if made_jump is not False:
            raise NotImplementedError("Step-size controllers with jumps are not supported in kink-aware flows.")
        tprev = jnp.minimum(tprev, t1)
        clip = tnext > self.clip_floor
        tnext = jnp.where(clip, jnp.where(keep, t1, tprev + 0.5 * (t1 - tprev)), tnext)
        y = jnp.where(keep, y, c.y)
        sstate = jtu.tree_map(lambda a, b: jnp.where(keep, a, b), sstate, c.solver_state)
        result = diffrax.RESULTS.where(keep, sres, ok)
        result = diffrax.RESULTS.where(result == ok, cres, result)
        interp = solver.interpolation_cls(t0=c.tprev, t1=c.tnext, **dense_info)
        save_i, ys, saved = self._save(c, keep, interp)
        return _Carry(
            y=y,
            tprev=tprev,
            tnext=tnext,
            solver_state=sstate,
            controller_state=cstate,
            result=result,
            num_steps=c.num_steps + 1,
            num_accepted=c.num_accepted + jnp.where(keep, 1, 0),
            num_rejected=c.num_rejected + jnp.where(keep, 0, 1),
            save_i=save_i,
            ys=ys,
            saved=saved,
            ev_value=c.ev_value,
            ev_tprev=c.tprev,
            ev_tnext=c.tnext,
            ev_thi=c.tnext,
            ev_inside=jnp.asarray(False),
            ev_y=c.y,
            ev_dense=dense_info,
        )

    def step_points(self, c: _Carry):
        """The states where the condition is checked after the step `c` took: with
        `inside`, at `INTERIOR_POINTS` evenly spaced times inside it (on its dense
        output), then at its end; `(k, ...)`."""
        if not self.inside:
            return c.y[None]
        interior = jax.vmap(lambda t: self.dense_at(c, t))(_interior_times(c))
        return jnp.concatenate([interior, c.y[None]])

    def checked(self, c_old: _Carry, c: _Carry, values) -> _Carry:
        """The event check after the step from `c_old` to `c`, with the condition's
        `values` at `step_points(c)`: a sign change at the step's end, or (`inside`) a
        negative value inside an accepted step from a positive start (a pair that
        crosses its surface and back within the step), whose first such point then ends
        the event's bracket."""
        if self.inside:
            neg = (values[:-1] < 0) & (c.num_accepted > c_old.num_accepted) & (c_old.ev_value > 0)
            crossed = jnp.any(neg)
            thi = jnp.where(crossed, _interior_times(c)[jnp.argmax(neg)], c.ev_tnext)
            c = eqx.tree_at(lambda c: (c.ev_thi, c.ev_inside), c, (thi, crossed))
        return _checked(c_old, c, values[-1])

    def _save(self, c: _Carry, keep, interp):
        """The saves at the `ts` an accepted step `[c.tprev, c.tnext]` passed, from its
        dense output: `(save_i, ys, saved)`."""
        ts = self.ts
        T = ts.shape[0]

        def s_cond(s):
            i = s[0]
            return keep & (i < T) & (ts[jnp.minimum(i, T - 1)] <= c.tnext)

        def s_body(s):
            i, ys, saved = s
            return i + 1, ys.at[i].set(interp.evaluate(ts[i])), saved.at[i].set(True)

        return jax.lax.while_loop(s_cond, s_body, (c.save_i, c.ys, c.saved))

    def dense_at(self, c: _Carry, t):
        return self.dense(c.ev_tprev, c.ev_tnext, c.ev_dense, t)

    def dense(self, tprev, tnext, dense_info, t):
        """The dense output at `t` of the step `[tprev, tnext]` with `dense_info`."""
        return self.solver.interpolation_cls(t0=tprev, t1=tnext, **dense_info).evaluate(t)


def _start(
    vf: Callable, solver, controller, t0, t1, y0, args, ts, max_steps: int, dt0=None, inside: bool = False
) -> tuple[_Stepper, _Carry]:
    """As `diffeqsolve` does before its loop: wrap the term and the controller, give an
    implicit solver the controller's tolerances, choose the first step (clipped to `t1`)
    and initialise the solver. Returns the `_Stepper` and the loop's first carry."""
    dtype = jnp.result_type(y0)
    terms, solver, controller = _wrapped(vf, solver, controller)
    clip_floor = t1_clip_floor(t1)
    error_order = solver.error_order(terms)
    tnext, cstate = controller.init(terms, t0, t1, y0, dt0, args, solver.func, error_order)
    tnext = jnp.minimum(tnext, t1)
    sstate = solver.init(terms, t0, tnext, y0, args)
    T = ts.shape[0]
    dense_struct = _dense_structure(solver, t0, tnext, y0)
    init = _Carry(
        y=y0,
        tprev=t0,
        tnext=tnext,
        solver_state=sstate,
        controller_state=cstate,
        result=diffrax.RESULTS.successful,
        num_steps=jnp.asarray(0),
        num_accepted=jnp.asarray(0),
        num_rejected=jnp.asarray(0),
        save_i=jnp.sum(ts < t0),
        ys=jnp.full((T,) + y0.shape, jnp.inf, dtype),
        saved=jnp.zeros((T,), bool),
        ev_value=jnp.zeros((), dtype),
        ev_tprev=t0,
        ev_tnext=t0,
        ev_thi=t0,
        ev_inside=jnp.asarray(False),
        ev_y=y0,
        ev_dense=jtu.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), dense_struct),
    )
    stepper = _Stepper(
        terms=terms,
        solver=solver,
        controller=controller,
        args=args,
        t1=t1,
        clip_floor=clip_floor,
        error_order=error_order,
        ts=ts,
        max_steps=max_steps,
        inside=inside,
    )
    return stepper, init


def _interior_times(c: _Carry):
    """The `INTERIOR_POINTS` evenly spaced times inside the last step."""
    frac = jnp.arange(1, INTERIOR_POINTS + 1, dtype=c.ev_tnext.dtype) / (INTERIOR_POINTS + 1)
    return c.ev_tprev + frac * (c.ev_tnext - c.ev_tprev)


def _checked(c_old: _Carry, c: _Carry, value) -> _Carry:
    """The event check after a step: the condition changed sign, at its end or inside it."""
    event = (jnp.sign(c_old.ev_value) != jnp.sign(value)) | c.ev_inside
    result = diffrax.RESULTS.where(event, diffrax.RESULTS.event_occurred, c.result)
    return eqx.tree_at(lambda c: (c.result, c.ev_value), c, (result, value))


def _restep(st: _Stepper, c: _Carry, refining, t) -> _Carry:
    """While `refining`, the carry whose `advance` retakes the last step from its start to
    `t` (`restep_state`); otherwise `c`."""
    re = eqx.tree_at(
        lambda c: (c.tprev, c.tnext, c.y, c.solver_state),
        c,
        (c.ev_tprev, t, c.ev_y, st.solver.restep_state(c.solver_state)),  # type: ignore[attr-defined]
    )
    return jtu.tree_map(lambda a, b: jnp.where(refining, a, b), re, c)


def _dense_structure(solver, t0, t1, y0):
    """The structure of `solver.step`'s dense output from `(t0, y0)`, traced on a stand-in
    field of `y0`'s structure (the identity), without a Newton Jacobian of its own: it
    does not depend on the field, and tracing a step of a kink-aware field (Filippov
    solves and all) only for it took a tenth of the program's lowering."""
    if getattr(solver, "newton_jacobian", None) is not None:
        solver = dataclasses.replace(solver, newton_jacobian=None)
    terms = wrap_term(diffrax.ODETerm(lambda t, y, args: y), jnp.asarray(1))

    def step():
        return solver.step(terms, t0, t1, y0, None, solver.init(terms, t0, t1, y0, None), False)[2]

    return jax.eval_shape(step)


def _one_site_loop(
    st: _Stepper, cond: Callable, init: _Carry, t0, event_tol: float, refine: bool, aux0=None
) -> tuple[_Carry, _Root, Refine, object]:
    """The condition at `y0`, the steps, the root find and (`refine`) the event time's
    refinement as iterations of one `while_loop` (phases `_INIT`, `_STEP`, `_ROOT`,
    `_REFINE`, `_FINAL`), the condition evaluated in one place (on `INTERIOR_POINTS + 1`
    states after a step with `inside`) and the step taken in one place, a `lax.cond`
    branch. With `aux0` (and `refine`) the condition returns `(values, aux)` (`aux` of its
    last state, structured as `aux0`), and the loop keeps the `aux` at the segment's end:
    at the refinement's last point, or where that is not kept (`_end_point`), at the
    interpolant's root, evaluated there in a last iteration (`_FINAL`). Returns the last
    carry, the root find's state, the refinement's and that `aux` (`aux0` without an
    event; None without `aux0`)."""
    dtype = jnp.result_type(init.y)
    finder = Illinois(atol=event_tol)
    aux = aux0 if refine else None
    split = (lambda out: out) if aux is not None else (lambda out: (out, None))

    def body(carry):
        phase, c, r, R, aux = carry
        refining = phase == _REFINE
        final = phase == _FINAL
        c_in = c
        if refine:
            t_re = R.time(_root_past(r), c.ev_tprev, st.ts, c.result == diffrax.RESULTS.event_occurred)
            c_in = _restep(st, c, refining, t_re)
        c_new = jax.lax.cond((phase == _STEP) | refining, st.advance, lambda c: c, c_in)
        t_dense = jnp.where(final, _root_past(r), _root_point(r))
        point = jnp.where(phase == _INIT, c.y, jnp.where((phase == _STEP) | refining, c_new.y, st.dense_at(c, t_dense)))
        # the one evaluation site: after a step, inside it too (`step_points`)
        points = jnp.where(phase == _STEP, st.step_points(c_new), point[None])
        values, aux_new = split(cond(points, st.args))
        value = values[-1]
        if refine:
            accepted = c_new.num_accepted > c_in.num_accepted
            R_new = R.update(t_re, c_new.y, accepted, value, _root_past(r), c.ev_tprev, st.t1)
            R = jtu.tree_map(lambda a, b: jnp.where(refining, a, b), R_new, R)
            if aux is not None:
                aux = jtu.tree_map(lambda a, b: jnp.where(refining | final, a, b), aux_new, aux)
        c_new = jtu.tree_map(
            lambda a, b: jnp.where(phase == _STEP, a, b),
            st.checked(c, c_new, values),
            eqx.tree_at(lambda c: c.ev_value, c, jnp.where(phase == _INIT, value, c.ev_value)),
        )
        r_new = _root_update(finder, r, value)
        more = st.going(c_new)
        enter_root = ~more & (c_new.result == diffrax.RESULTS.event_occurred)
        r_next = jtu.tree_map(
            lambda a, b, d: jnp.where(phase == _ROOT, a, jnp.where(refining | final, b, d)),
            r_new,
            r,
            _root_init(c_new.ev_tprev, c_new.ev_thi, dtype),
        )
        # (the refinement starts where the root find stops: its final bracket's end past the event)
        R = jtu.tree_map(
            lambda a, b: jnp.where(phase == _ROOT, a, b),
            Refine.start(_root_past(r_new), c.y, _root_sign(r_new)),
            R,
        )
        after_root = _REFINE if refine else _DONE
        after_refine: int | Array = _DONE
        if aux is not None:  # (the end is not the refinement's last point: its aux there, in one more iteration)
            after_refine = jnp.where(_end_point(c, R), _DONE, _FINAL)
        phase_next = jnp.where(
            phase == _REFINE,
            jnp.where(R.going(), _REFINE, after_refine),
            jnp.where(
                phase == _ROOT,
                jnp.where(_root_going(r_new), _ROOT, after_root),
                jnp.where(more & ~final, _STEP, jnp.where(enter_root & ~final, _ROOT, _DONE)),
            ),
        )
        return phase_next, c_new, r_next, R, aux

    carry = (jnp.asarray(_INIT), init, _root_init(t0, t0, dtype), Refine.start(t0, init.y, 0.0), aux)
    _, f, r, R, aux = jax.lax.while_loop(lambda carry: carry[0] != _DONE, body, carry)
    return f, r, R, aux


def _end_point(f: _Carry, R: Refine):
    """Whether a refined segment ends at the refinement's last point (else at the
    interpolant's root)."""
    return R.ok & (R.tt > f.ev_tprev)


def _step_loop(st: _Stepper, cond: Callable, init: _Carry, lanes: str | None = None) -> _Carry:
    """The condition at `y0`, then a `while_loop` of steps, each followed by the
    condition; the root find is the caller's (`locate`). `lanes`: the named `vmap` axis
    of a batch, whose later steps run for the lanes still stepping only (`lane_while`;
    `st.args` is then the only value of the loop that differs between lanes)."""

    def loop_body(c: _Carry, args) -> _Carry:
        st_lane = dataclasses.replace(st, args=args)
        c_new = st_lane.advance(c)
        return st_lane.checked(c, c_new, cond(st_lane.step_points(c_new), args))

    first = eqx.tree_at(lambda c: c.ev_value, init, cond(init.y[None], st.args)[0])
    return lane_while(lanes, st.going, loop_body, first, st.args)


def _locate_on_dense(st: _Stepper, cond: Callable, f: _Carry, event_tol: float, event, lanes, aux0=None):
    """The event's time on the last step's dense output (`locate`), and with `aux0` the
    condition's `aux` there (else None)."""

    def g(t, ev_tprev, ev_tnext, ev_dense, args):
        out = cond(st.dense(ev_tprev, ev_tnext, ev_dense, t)[None], args)
        return out[0] if aux0 is None else (out[0][0], out[1])

    data = (f.ev_tprev, f.ev_tnext, f.ev_dense, st.args)
    found = locate(g, f.ev_tprev, f.ev_thi, event_tol, event, data, lanes, aux0)
    return found if aux0 is not None else found + (None,)


def _loop_result(f: _Carry, t1):
    """The loop's outcome: `max_steps_reached` if it stopped short of `t1` with nothing
    else to say."""
    ok = diffrax.RESULTS.successful
    return diffrax.RESULTS.where((f.tprev < t1) & (f.result == ok), diffrax.RESULTS.max_steps_reached, f.result)


def _wrapped(vf: Callable, solver, controller):
    """`(terms, solver, controller)` as `diffeqsolve` wraps them: the term and the
    controller for forward time, the solver given the controller's tolerances."""
    controller = controller.wrap(jnp.asarray(1))
    return wrap_term(diffrax.ODETerm(vf), jnp.asarray(1)), with_controller_tols(solver, controller), controller


def first_step(vf: Callable, solver, controller, t0, t1, y0, args):
    """The first step size `diffeqsolve` would choose (`dt0=None`), clipped to `t1`."""
    dtype = jnp.result_type(y0)
    t0, t1 = jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)
    terms, solver, controller = _wrapped(vf, solver, controller)
    tnext, _ = controller.init(terms, t0, t1, y0, None, args, solver.func, solver.error_order(terms))
    return jnp.minimum(tnext, t1) - t0


def _check_refine(solver, one_site: bool, refine: bool, aux0):
    if refine and not (one_site and getattr(solver, "keep_jacobian", False)):
        raise ValueError("refine needs one_site=True and a solver that resteps (GaussLegendre(keep_jacobian=True)).")
    if aux0 is not None and one_site and not refine:
        raise ValueError("aux0 (a condition that returns (values, aux)) needs refine=True or one_site=False.")


def solve_segment(
    vf: Callable,
    cond: Callable,
    solver: diffrax.AbstractSolver,
    controller: diffrax.AbstractStepSizeController,
    t0,
    t1: ArrayLike,
    y0,
    args,
    ts,
    *,
    max_steps: int,
    event_tol: float,
    one_site: bool = True,
    refine: bool = False,
    lanes: str | None = None,
    dt0: ArrayLike | None = None,
    inside: bool = False,
    aux0=None,
) -> SegmentSolution:
    """Integrate `dy/dt = vf(t, y, args)` from `(t0, y0)` until the event condition
    changes sign (or `t1`), saving at the `ts` (sorted) in `[t0, t1]`.

    **Arguments:** the vector field, the event condition `cond(ys, args)` (its values at
    a stack of states `ys`), the diffrax solver and step-size controller, `t0` (traced),
    `t1`, `y0`, `args`, the save times `ts`; `max_steps`, `event_tol` (the root find's
    time tolerance); `dt0`: the first step (`None`: diffrax's initial step selection);
    `inside`: also check the condition at `INTERIOR_POINTS` inside each step, in the same
    call as at its end (`_Stepper.step_points`): where it is negative the event's bracket
    ends (a crossing and back within one step); `one_site`: one evaluation site; `refine`
    (with `one_site`, for `GaussLegendre(keep_jacobian=True)`): refine an event's time
    on the solver's own step from the last step's start (`Refine`), so the end state is a
    Gauss step (it conserves quadratic invariants) just past the event, in the same loop;
    `aux0` (with `refine` or `one_site=False`): `cond` returns `(values, aux)`, `aux` of its
    last state structured as `aux0`, and the solution's `aux` is the one at its end `y`;
    `lanes` (`one_site=False`): a batch's named `vmap` axis; steps and root-find iterations
    then run for the lanes going only (`lane_while`: lanes differ in `args`; no `step_ts`).

    With `one_site=True` the condition is evaluated in one place (`_one_site_loop`): its
    Filippov solve is compiled once, not three times. Under `vmap` (a `lax.cond` computes
    both branches) `one_site=False` (`_step_loop`, then `locate`) is cheaper; both take the
    same steps and evaluate the condition at the same points. Returns a `SegmentSolution`."""
    dtype = jnp.result_type(y0)
    t0, t1 = jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)
    st, init = _start(vf, solver, controller, t0, t1, y0, args, ts, max_steps, dt0, inside)
    _check_refine(solver, one_site, refine, aux0)
    if one_site:
        f, r, R, aux = _one_site_loop(st, cond, init, t0, event_tol, refine, aux0)
    else:
        f = _step_loop(st, cond if aux0 is None else lambda ys, args: cond(ys, args)[0], init, lanes)
    result = _loop_result(f, t1)
    event = result == diffrax.RESULTS.event_occurred
    if one_site:
        t_root, past, root_result = _root_answer(r)
    else:
        t_root, past, root_result, aux = _locate_on_dense(st, cond, f, event_tol, event, lanes, aux0)
    t_end = jnp.where(event, t_root, f.tprev)
    y_end = jnp.where(event, st.dense_at(f, t_root), f.y)
    result = diffrax.RESULTS.where(
        event & (root_result != optx.RESULTS.successful), diffrax.RESULTS.promote(root_result), result
    )
    saved = f.saved & ~(event & (ts > t_end))
    if refine:  # (the refined time crosses no save time: `Refine.time`)
        event = event & (root_result == optx.RESULTS.successful)
        y_end = jnp.where(event & _end_point(f, R), R.y, y_end)
        t_end = jnp.where(event, R.tt, t_end)
    return SegmentSolution(
        t=t_end,
        y=y_end,
        ys=f.ys,
        saved=saved,
        result=result,
        num_steps=f.num_steps,
        num_accepted=f.num_accepted,
        num_rejected=f.num_rejected,
        solver_state=f.solver_state,
        dt_next=f.tnext - f.tprev,
        past=past,
        aux=aux,
    )
