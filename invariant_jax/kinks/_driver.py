"""The kink-aware driver: a trajectory is a loop of *segments*. A segment integrates
the field of the current modes with diffrax until the next event (or `t1`), locates
the event, resolves the new modes and restarts there.

`KinkIntegrator` exposes the three pieces separately -- `init` (a `KinkState` at `t0`),
`segment` (one segment) and `finish` (the outputs) -- so that `kink_aware_flow` runs
them in one `while_loop` and the sweep engine runs them slot by slot, refilling slots
as trajectories finish."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .._checks import check_finite, take_deprecated
from .._compile import quick_compile
from .._defaults import KINK_MAX_STEPS
from .._diffrax_compat import cacheable_checks
from .._results import RESULTS
from ..flow import FLOW_KEYWORDS, Flow
from ..losses import check_data, get_loss
from ..network import DAGNetwork
from ..options import KinkOptions, Objective, SaveTimes, SolverOptions, as_objective, as_save_times, as_solver_options
from ..solvers import GaussLegendre, gl_step
from ._filippov import KinkProblem, no_ties, slot_mask
from ._illinois import Illinois
from ._lanes import lane_cond
from ._modes import resolve_event
from ._segment import Refine, SegmentSolution, first_step, solve_segment


class KinkFlow(eqx.Module):
    """The result of `kink_aware_flow`.

    **Fields:**

    - `flow`: a `Flow` (saved times, weights, losses, conserved quantities, drift,
        result, stats) exactly as from `gradient_flow`.
    - `num_events`: number of located events (crossings, sliding entries and exits).
    - `num_crossings`: pairs that flipped pattern transversally.
    - `num_sliding_entries`, `num_sliding_exits`: sliding modes entered and left.
    - `num_simultaneous`: events at which more than one pair changed mode.
    - `num_ambiguous`: events whose continuation is not certified: without consistent
        modes (resolved by the fallback; see the package docstring), or at a two-fold,
        where a slide turns repelling and the flow past it is not unique (docs/solvers.md).
    - `num_two_folds`: those of the ambiguous events that are two-folds (the others had
        no consistent modes).
    - `sliding_time`: total time spent on sliding modes.
    - `max_sliding_pairs`: most pairs sliding at once (> 1: motion on an intersection
        of surfaces).
    - `surface_residual`: max `|z|` of sliding pairs at the events and at the end (how
        well the state stays on the surfaces).
    - `event_times`: the event times, padded with `inf`, `(max_events,)`.
    - `pattern_final`: the final activation pattern, `(N, H)` bool (True = active side).
    - `sliding_final`: the pairs sliding at the end, `(N, H)` bool.

    `result` is `RESULTS.max_events_reached` when `max_events` stopped the integration
    (`kflow.result == ij.RESULTS.max_events_reached`); `events_exhausted`, the flag that
    said the same, is deprecated.
    """

    flow: Flow
    num_events: Int[Array, ""]
    num_crossings: Int[Array, ""]
    num_sliding_entries: Int[Array, ""]
    num_sliding_exits: Int[Array, ""]
    num_simultaneous: Int[Array, ""]
    num_ambiguous: Int[Array, ""]
    num_two_folds: Int[Array, ""]
    sliding_time: Float[Array, ""]
    max_sliding_pairs: Int[Array, ""]
    surface_residual: Float[Array, ""]
    event_times: Float[Array, " K"]
    pattern_final: Bool[Array, "N H"]
    sliding_final: Bool[Array, "N H"]

    @property
    def result(self) -> RESULTS:
        """`flow.result`: `RESULTS.max_events_reached` when `max_events` stopped it."""
        return self.flow.result

    @property
    def success(self):
        """Reached `t1`, or stopped by a stopping rule (`flow.success`; False when
        `max_events` stopped it)."""
        return self.flow.success

    @property
    def events_exhausted(self) -> Bool[Array, "..."]:
        """Deprecated: ask `kflow.result == ij.RESULTS.max_events_reached`."""
        warnings.warn(
            "KinkFlow.events_exhausted is deprecated; ask `kflow.result == ij.RESULTS.max_events_reached`.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.result == RESULTS.max_events_reached

    # the names every flow result answers (as `Flow` does)
    @property
    def final(self):
        """The network at the end of the flow (`flow.final`)."""
        return self.flow.final

    @property
    def theta_final(self) -> Float[Array, " E"]:
        """The weights at the end of the flow (`flow.theta_final`)."""
        return self.flow.theta_final

    @property
    def loss_final(self) -> Float[Array, ""]:
        """The loss at the end of the flow (`flow.loss_final`)."""
        return self.flow.loss_final


class KinkState(eqx.Module):
    """The state of one kink-aware trajectory between segments."""

    t: Array
    theta: Array
    P: Array  # (N, H) bool: active side of each pair
    slots: Array  # (M,) flat indices of the sliding pairs, -1 = empty
    ties: tuple  # (rep, sign, orient, lam): shared surfaces, the weights' start (`slot_ties`, set at events)
    margin: Array  # (N, H) restart margins of pairs left at their surface
    ys: Array  # (T, E) saved states
    filled: Array  # (T,) which saves are made
    n_events: Array
    n_cross: Array
    n_sin: Array
    n_sout: Array
    n_simul: Array
    n_amb: Array
    n_fold: Array
    t_slide: Array
    max_slide: Array
    resid: Array
    ev_times: Array
    steps: Array
    acc: Array
    rej: Array
    dt: Array  # the step size the next segment starts with
    result: RESULTS
    done: Array


class _Sol(eqx.Module):
    ts: Array
    ys: Array
    result: RESULTS
    stats: dict


class KinkIntegrator(eqx.Module):
    """Everything a kink-aware trajectory needs besides its initial weights."""

    prob: KinkProblem
    ts: Array
    inner: diffrax.AbstractSolver
    rtol: Array
    atol: Array
    t0: Array  # arrays, so that a new horizon compiles nothing
    t1: Array
    max_steps: int = eqx.field(static=True)
    max_events: int = eqx.field(static=True)
    event_tol: float = eqx.field(static=True)
    surface_tol: float = eqx.field(static=True)
    reference_solve: bool = eqx.field(static=True, default=False)  # segments by diffrax.diffeqsolve (tests)
    # each segment selects its first step afresh (diffrax's `dt0=None`), as before b781332
    # (benchmarks/kink_restart_step.py), instead of the step proposed at the event
    reselect_step: bool = eqx.field(static=True, default=False)
    # the event condition also checked inside each step (`_segment.INTERIOR_POINTS`);
    # False: at step ends only, as before cb3d6ec (benchmarks)
    interior_check: bool = eqx.field(static=True, default=True)
    # inside each step, while pairs slide, their weights too (a Filippov solve per point,
    # `KinkProblem.cond_values`); False: the crossing part only, as from cb3d6ec to 2909e6b
    # (benchmarks/kink_sliding_exits.py)
    interior_sliding: bool = eqx.field(static=True, default=True)
    # the event condition compiled once per segment (`solve_segment`), for Gauss-Legendre
    # inside (an explicit solver's short segments run faster as two loops); False under vmap
    one_site: bool = eqx.field(static=True, default=True)

    @property
    def is_gl(self) -> bool:
        return isinstance(self.inner, GaussLegendre)

    def init(self, theta0) -> KinkState:
        prob = self.prob
        N, H = prob.shape
        dtype = theta0.dtype
        Z0 = prob.pre_activations(theta0)  # (a pattern of all ones gives wrong signs downstream of an inactive pair)
        i0 = jnp.asarray(0, int)  # not weak-typed: the segment returns strong ints (a weak one compiles twice)
        zero = jnp.asarray(0.0, dtype)
        return KinkState(
            t=jnp.asarray(self.t0, dtype),
            theta=theta0,
            P=Z0 > 0,
            slots=-jnp.ones((prob.max_sliding,), int),
            ties=no_ties(prob.max_sliding, dtype),
            margin=jnp.zeros((N, H), dtype),
            ys=jnp.full((self.ts.shape[0], theta0.shape[0]), jnp.inf, dtype),
            filled=jnp.zeros(self.ts.shape, bool),
            n_events=i0,
            n_cross=i0,
            n_sin=i0,
            n_sout=i0,
            n_simul=i0,
            n_amb=i0,
            n_fold=i0,
            t_slide=zero,
            max_slide=i0,
            resid=zero,
            ev_times=jnp.full((self.max_events,), jnp.inf, dtype),
            steps=i0,
            acc=i0,
            rej=i0,
            dt=self._first_step(theta0, Z0 > 0),
            result=RESULTS.successful,
            done=jnp.asarray(False),
        )

    def _controller(self, tclip):
        # step_ts: diffrax 0.7's metaclass wraps it in a ClipStepSizeController; diffrax 0.6 knows only this spelling
        return diffrax.PIDController(
            rtol=self.rtol,
            atol=self.atol,  # type: ignore[call-arg]
            step_ts=tclip if self.is_gl else None,
        )

    def _first_step(self, theta0, P) -> Array:
        # diffrax's initial step selection, once per trajectory: every later segment starts
        # with the step its predecessor's controller proposed (`KinkState.dt`)
        m = self.prob.max_sliding
        args = (P, -jnp.ones((m,), int), no_ties(m, theta0.dtype), None)  # (nothing slides yet)
        t0 = jnp.asarray(self.t0, theta0.dtype)
        controller = self._controller(jnp.clip(self.ts, t0, self.t1))
        return first_step(self._vf, self.inner, controller, t0, self.t1, theta0, args)

    def _vf(self, t, theta, args):
        """The segment's field: the pattern-frozen or (pairs sliding) Filippov field."""
        P, slots, ties, _ = args
        return self.prob.field(theta, P, slots, ties)[0]

    def _solve_segment(self, c: KinkState) -> SegmentSolution:
        """The segment from `c.t` to the next event (or `t1`), before the event's resolution."""
        prob, ts, t1, vf = self.prob, self.ts, self.t1, self._vf

        def cond_fn(t, y, args, **kw):
            P, slots, ties, margin = args  # (in `args`: it differs between the lanes of a batch)
            return prob.cond_value(y, P, slots, ties, margin)

        inner = self.inner
        if isinstance(inner, GaussLegendre):  # self.is_gl
            jac = lambda t, theta, args: prob.frozen_jacobian(theta, args[0])  # noqa: E731
            inner = dataclasses.replace(inner, keep_jacobian=True, newton_jacobian=jac)
        tclip = jnp.clip(ts, c.t, t1)
        controller = self._controller(tclip)
        refine = self.one_site and self.is_gl
        # the sliding weights at the segment's end too, for the restart: not where a Gauss
        # restart after the segment moves the end (`_gauss_restart`)
        weights = refine or not self.is_gl
        sol = solve_segment(
            vf,
            functools.partial(prob.cond_values, weights_inside=self.interior_sliding, with_weights=weights),
            inner,
            controller,
            c.t,
            t1,
            c.theta,
            (c.P, c.slots, c.ties, c.margin),
            ts,
            max_steps=self.max_steps,
            event_tol=self.event_tol,
            one_site=refine,
            refine=refine,  # (the event restart, in the segment's loop)
            lanes=None if self.is_gl else prob.lanes,  # (Gauss-Legendre's controller has per-lane step_ts)
            dt0=None if self.reselect_step else c.dt,
            inside=self.interior_check,
            aux0=prob.no_weights(c.theta.dtype) if weights else None,
        )
        if self.reference_solve:  # (diffeqsolve's segment; the step it proposes next is the lean one's)
            with cacheable_checks():
                sol = eqx.tree_at(
                    lambda s: s.dt_next, self._solve(vf, cond_fn, tclip, controller, c, inner), sol.dt_next
                )
        return sol

    def segment(self, c: KinkState) -> KinkState:
        """Integrate from `c.t` to the next event (or `t1`) and resolve the event."""
        ts = self.ts
        sol = self._solve_segment(c)
        t_end, y_end = sol.t, sol.y
        event = sol.result == diffrax.RESULTS.event_occurred
        if self.is_gl and (self.reference_solve or not self.one_site):
            t_end, y_end = self._gauss_restart(c, sol, event, t_end, y_end)
        # merge saves made in this segment
        seg_ok = sol.saved & (ts >= c.t) & (ts <= t_end) & ~c.filled
        ys = jnp.where(seg_ok[:, None], sol.ys, c.ys)
        slide_dt = jnp.where(jnp.any(c.slots >= 0), t_end - c.t, 0.0)
        c = eqx.tree_at(
            lambda c: (c.ys, c.filled, c.steps, c.acc, c.rej, c.t_slide, c.dt),
            c,
            (
                ys,
                c.filled | seg_ok,
                c.steps + sol.num_steps,
                c.acc + sol.num_accepted,
                c.rej + sol.num_rejected,
                c.t_slide + slide_dt,
                jnp.where(jnp.isfinite(sol.dt_next) & (sol.dt_next > 0), sol.dt_next, c.dt),
            ),
        )
        return self._end(c, sol.result, event, t_end, y_end, sol.aux)

    def _end(self, c: KinkState, result, event, t_end, y_end, weights=None) -> KinkState:
        """The segment's end: restart at the event (or stop at `t1`, or keep the last
        good state on failure), and the trajectory's result so far. `weights`: the
        segment's sliding weights at `y_end`, where the segment gives them (`_restart`)."""
        failed = ~((result == diffrax.RESULTS.successful) | event)
        # (in a batch, `lane_cond`: a batched `lax.cond` here, with the field already
        # gathered, made a scratch segment at 256 lanes many times slower; cause not found)
        c_new = lane_cond(
            self.prob.lanes,
            event & ~failed,
            self._restart,
            lambda c, t_end, y_end, weights: eqx.tree_at(lambda c: (c.t, c.theta), c, (t_end, y_end)),
            c,
            t_end,
            y_end,
            weights,
        )
        done = failed | ~event | (c_new.n_events >= self.max_events)
        exhausted = event & (c_new.n_events >= self.max_events) & (c_new.t < self.t1)
        res = RESULTS.where(
            failed,
            RESULTS.promote(result),
            RESULTS.where(exhausted, RESULTS.max_events_reached, RESULTS.successful),
        )
        # keep the last good state on failure
        theta_keep = jnp.where(failed, c.theta, c_new.theta)
        t_keep = jnp.where(failed, c.t, c_new.t)
        return eqx.tree_at(lambda c: (c.done, c.result, c.theta, c.t), c_new, (done, res, theta_keep, t_keep))

    def _solve(self, vf, cond_fn, tclip, controller, c: KinkState, inner) -> SegmentSolution:
        # the reference: the same segment with diffrax.diffeqsolve (`reference_solve`)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(vf),
            inner,
            c.t,
            self.t1,
            None if self.reselect_step else c.dt,
            c.theta,
            args=(c.P, c.slots, c.ties, c.margin),
            saveat=diffrax.SaveAt(
                subs=[diffrax.SubSaveAt(ts=tclip), diffrax.SubSaveAt(t1=True)], solver_state=self.is_gl
            ),
            stepsize_controller=controller,
            event=diffrax.Event(cond_fn, root_finder=Illinois(atol=self.event_tol)),
            max_steps=self.max_steps,
            throw=False,
        )
        st = sol.stats
        return SegmentSolution(
            t=sol.ts[1][-1],
            y=sol.ys[1][-1],
            ys=sol.ys[0],
            saved=jnp.isfinite(sol.ts[0]),
            result=sol.result,
            num_steps=st["num_steps"],
            num_accepted=st["num_accepted_steps"],
            num_rejected=st["num_rejected_steps"],
            solver_state=sol.solver_state,
            dt_next=jnp.full((), jnp.nan, c.theta.dtype),
            # (which side of the event diffeqsolve's root lies is not known; a segment starts inside its pattern)
            past=-jnp.ones((), c.theta.dtype),
        )

    def _gauss_restart(self, c, sol, event, t_end, y_end):
        # The event restart where the segment did not refine the event time itself (vmap
        # mode's two loops, the diffeqsolve reference): the same refinement (`Refine`: the
        # secant method on g of a Gauss step from the last step's start, so the restart
        # conserves c exactly and lies on the surface), its Gauss steps by `gl_step` with
        # the kept Jacobian, in a loop of its own.
        prob, ts, t1, inner = self.prob, self.ts, self.t1, self.inner
        assert isinstance(inner, GaussLegendre)  # the restart of Gauss-Legendre flows only
        _, t_prev, y_prev, J = sol.solver_state[:4]  # (`keep_jacobian`)
        f = lambda tt, yy: prob.field(yy, c.P, c.slots, c.ties)[0]  # noqa: E731

        def body(R):
            tt = R.time(t_end, t_prev, ts, event)
            yy, ok = gl_step(f, J, t_prev, y_prev, tt - t_prev, inner)
            v = prob.cond_value(yy, c.P, c.slots, c.ties, c.margin)
            return R.update(tt, yy, ok, v, t_end, t_prev, t1)

        R = jax.lax.while_loop(lambda R: R.going(), body, Refine.start(t_end, y_end, sol.past))
        return R.tt, jnp.where(event & R.ok & (R.tt > t_prev), R.y, y_end)

    def _restart(self, c: KinkState, t_ev, th, weights=None) -> KinkState:
        # (the segment's start: the direction a node that reached its origin came from)
        ev = resolve_event(self.prob, th, c.P, c.slots, c.margin, self.surface_tol, c.theta)
        k = c.n_events
        # a slide that goes on through a sign change of its system's determinant (its
        # weights stayed in [0, 1], else it would have ended there), or an event that
        # changes nothing while pairs slide (the condition's sign flip there): a two-fold,
        # where both sides' fields are tangent to the surface and the slide turns
        # repelling. The flow past it is not unique: the event counts as ambiguous
        same = jnp.any(c.slots >= 0) & jnp.all(ev.slots == c.slots)
        twofold = same & ((ev.ties[2] != c.ties[2]) | jnp.all(ev.P == c.P))
        # wherever the restart landed: past the sign change, the segment's own system has
        # its determinant's sign flipped with its weights still in [0, 1], or is singular
        # (exactly at it), whatever modes the event resolved to (a restart past a
        # two-fold may resolve as an exit)
        # (`weights`: the segment's own, from its last condition at `th`; else solved here)
        lam, det_sign = self.prob.weights(th, c.P, c.slots, c.ties) if weights is None else weights
        inside = jnp.all(jnp.where(c.slots >= 0, (lam >= 0.0) & (lam <= 1.0), True)) | (det_sign == 0)
        twofold = twofold | (jnp.any(c.slots >= 0) & inside & (det_sign != c.ties[2]))
        return eqx.tree_at(
            lambda c: (
                c.t,
                c.theta,
                c.P,
                c.slots,
                c.ties,
                c.margin,
                c.n_events,
                c.n_cross,
                c.n_sin,
                c.n_sout,
                c.n_simul,
                c.n_amb,
                c.n_fold,
                c.max_slide,
                c.resid,
                c.ev_times,
            ),
            c,
            (
                t_ev,
                ev.theta,
                ev.P,
                ev.slots,
                ev.ties,
                ev.margin,
                k + 1,
                c.n_cross + ev.crossings,
                c.n_sin + ev.entries,
                c.n_sout + ev.exits,
                c.n_simul + jnp.where(ev.simultaneous, 1, 0),
                c.n_amb + jnp.where(ev.resolved & ~twofold, 0, 1),
                c.n_fold + jnp.where(twofold, 1, 0),
                jnp.maximum(c.max_slide, jnp.sum(ev.slots >= 0)),
                jnp.maximum(c.resid, ev.residual),
                c.ev_times.at[jnp.minimum(k, self.max_events - 1)].set(t_ev),
            ),
        )

    def finish(self, out: KinkState) -> tuple[_Sol, dict]:
        """`(solution, event statistics)` of a finished trajectory."""
        prob = self.prob
        N, H = prob.shape
        if prob.max_sliding:  # final surface residual of sliding pairs
            Zf = prob.Z(out.theta, prob.D_of(out.P)).reshape(-1)
            act = out.slots >= 0
            rf = jnp.max(jnp.where(act, jnp.abs(Zf[jnp.where(act, out.slots, 0)]), 0.0))
        else:
            rf = jnp.zeros((), out.theta.dtype)
        ys_all = jnp.concatenate([out.ys, out.theta[None]], axis=0)
        ts_all = jnp.concatenate([jnp.where(out.filled, self.ts, jnp.inf), out.t[None]])
        stats = dict(
            num_steps=out.steps, num_accepted_steps=out.acc, num_rejected_steps=out.rej, max_steps=self.max_steps
        )
        return _Sol(ts_all, ys_all, out.result, stats), dict(
            num_events=out.n_events,
            num_crossings=out.n_cross,
            num_sliding_entries=out.n_sin,
            num_sliding_exits=out.n_sout,
            num_simultaneous=out.n_simul,
            num_ambiguous=out.n_amb,
            num_two_folds=out.n_fold,
            sliding_time=out.t_slide,
            max_sliding_pairs=out.max_slide,
            surface_residual=jnp.maximum(out.resid, rf),
            event_times=out.ev_times,
            pattern_final=out.P,
            sliding_final=slot_mask(out.slots, N, H),
        )

    def flow(self, net: DAGNetwork, theta0, out: KinkState, loss) -> KinkFlow:
        """The `KinkFlow` of a finished trajectory started at `theta0`."""
        sol, extra = self.finish(out)
        # the tolerances are traced: `kink_aware_flow` writes them into the Flow after the call (as `gradient_flow`)
        fl = Flow.from_solution(
            net, self.prob.X, self.prob.Y, sol, theta0=theta0, t0=self.t0, loss=loss, rtol=math.nan, atol=math.nan
        )
        return KinkFlow(flow=fl, **extra)

    def run(self, theta0) -> KinkState:
        """The whole trajectory: segments until done."""
        return jax.lax.while_loop(lambda c: ~c.done, lambda c: self.segment(c), self.init(theta0))


def _check_piecewise_linear(net: DAGNetwork):
    bad = [a.name for a in net.activations if not a.piecewise_linear]
    if bad:
        raise ValueError(
            f"kink_aware_flow needs piecewise-linear activations (relu, leaky_relu); got {bad}. "
            "For a smooth activation the flow has no kinks: use ij.gradient_flow with "
            "solver='tsit5' (explicit), 'kvaerno5_hessian' (stiff, long horizons) or "
            "'gauss4' (conserves quadratic invariants)."
        )


def make_kink_integrator(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    t1: float,
    *,
    t0: float = 0.0,
    options: SolverOptions = SolverOptions("gauss4", max_steps=KINK_MAX_STEPS),
    saveat: SaveTimes = SaveTimes(),
    kinks: KinkOptions = KinkOptions(),
    loss: str | Callable = "mse",
) -> KinkIntegrator:
    """Check the data against the options and build the `KinkIntegrator` of
    `kink_aware_flow` (the analogue of the sweep engine's `make_problem`; the network's
    weights are not used). The options are the objects that `kink_aware_flow` builds from
    its keywords: `options` (an `ij.SolverOptions`), `saveat` (an `ij.SaveTimes`),
    `kinks` (an `ij.KinkOptions`)."""
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    for name, v, cls in (
        ("options", options, SolverOptions),
        ("saveat", saveat, SaveTimes),
        ("kinks", kinks, KinkOptions),
    ):
        if not isinstance(v, cls):
            raise TypeError(f"{name} must be an ij.{cls.__name__}(...); got {v!r}.")
    _check_piecewise_linear(net)
    X, Y = check_data(net.graph, X, Y)
    dtype = jnp.result_type(net.weights.dtype, X.dtype)
    X, Y = X.astype(dtype), Y.astype(dtype)
    ts = jnp.asarray(saveat.times(t0, t1), dtype)
    options.check_dtype(dtype)
    get_loss(loss)
    return KinkIntegrator(
        prob=KinkProblem.build(net, X, Y, loss, int(kinks.max_sliding)),
        ts=ts,
        inner=options.get_solver(),
        rtol=jnp.asarray(options.rtol, dtype),
        atol=jnp.asarray(options.atol, dtype),
        t0=jnp.asarray(t0, dtype),
        t1=jnp.asarray(t1, dtype),
        max_steps=int(options.max_steps),
        max_events=int(kinks.max_events),
        event_tol=float(kinks.event_tol),
        surface_tol=float(kinks.surface_tol),
    )


def kink_aware_flow(
    net: DAGNetwork,
    X: ArrayLike,
    Y: ArrayLike,
    t1: float,
    *,
    t0: float = 0.0,
    solver: str | diffrax.AbstractSolver | SolverOptions = "gauss4",
    rtol: float | None = None,
    atol: float | None = None,
    saveat: SaveTimes | ArrayLike | None = None,
    kinks: KinkOptions = KinkOptions(),
    loss: str | Callable | Objective = "mse",
    **deprecated,
) -> KinkFlow:
    """Gradient flow of a ReLU / leaky-ReLU network that integrates within activation
    patterns, locates pattern changes as events, and follows sliding modes.

    **Arguments:**

    - `net`, `X`, `Y`, `t1`, `t0`, `rtol`, `atol`, `saveat`: as in `gradient_flow`.
    - `solver`: the solver inside each pattern: an `ij.SolverOptions`, or a name in
        `ij.SOLVERS` or a diffrax solver (then with `rtol`, `atol` and a step budget
        `max_steps=10_000`, `KINK_MAX_STEPS`). `SolverOptions.max_steps` is the step budget of each
        segment between events; `dt0` and `stepsize_controller` are not used: the
        first step is diffrax's initial step selection, and each later segment starts
        with the step the controller proposed after the event's step. The
        default `"gauss4"` (Gauss-Legendre, order 4) conserves `c` to round-off;
        `"tsit5"` is cheaper per step but conserves only to tolerance.
    - `kinks`: an `ij.KinkOptions`: the cap on events (`max_events`; hitting it sets
        `result` to `RESULTS.max_events_reached`), on pairs
        sliding at once (`max_sliding`), and the tolerances of event location
        (`event_tol`) and of "on the surface" (`surface_tol`). Default `KinkOptions()`.
    - `loss`: the data loss, as in `gradient_flow` (a name, a callable or an
        `ij.Objective`). The kink-aware flow integrates the data loss alone: an
        `Objective` with weight decay or a regularizer is refused (use `gradient_flow`).

    The deprecated keyword `n_save` warns and gives the same flow (pass
    `saveat=ij.SaveTimes(n_save=...)`).

    **Returns:** a `KinkFlow`, which answers the names a `Flow` does (`final`,
    `theta_final`, `loss_final`, `result`, `success`); the event counts are its own fields.

    The whole computation is one compiled program per configuration (network graph,
    shapes, solver and options), reused by later calls with other weights or data.
    """
    kw = take_deprecated("kink_aware_flow", deprecated, {"n_save": FLOW_KEYWORDS["n_save"]})
    obj = as_objective(loss)
    if obj.weight_decay != 0 or obj.regularized:
        raise ValueError(
            f"kink_aware_flow integrates the data loss alone; got an Objective with weight_decay={obj.weight_decay!r}, "
            f"regularizer={obj.regularizer!r}, strength={obj.strength!r}. Pass the loss alone, or use "
            "ij.gradient_flow(..., loss=objective) for weight decay or a regularizer."
        )
    opts = as_solver_options(solver, rtol=rtol, atol=atol, max_steps=KINK_MAX_STEPS)
    integ = make_kink_integrator(
        net,
        X,
        Y,
        t1,
        t0=t0,
        options=opts,
        saveat=as_save_times(saveat, kw.get("n_save")),
        kinks=kinks,
        loss=obj.loss,
    )
    dtype = integ.prob.X.dtype
    theta0 = check_finite(
        net.edge_weights().astype(dtype),
        "is not finite; re-initialize the network.",
        where="initial weight theta0[{index}] ",
    )  # as gradient_flow: before any compile
    kf = integrate_kink_flow(integ, net, theta0, obj.loss)
    flow = dataclasses.replace(kf.flow, rtol=float(opts.rtol), atol=float(opts.atol))
    return dataclasses.replace(kf, flow=flow)


@quick_compile
def integrate_kink_flow(
    integ: KinkIntegrator, net: DAGNetwork, theta0: Float[Array, " E"], loss: str | Callable = "mse"
) -> KinkFlow:
    """The one compiled program of `kink_aware_flow`: run `integ` (from
    `make_kink_integrator`) from the initial weights `theta0` and return the `KinkFlow`
    (`net` gives the graph and activations; its weights are not used). A filter-jitted
    function with the single-flow compiler options (`_compile.quick_compile`), so
    `integrate_kink_flow.lower(integ, net, theta0, loss)` compiles it ahead of time
    (`benchmarks/kink_compile.py` does). The tolerances are
    traced, so the returned `flow.rtol` and `flow.atol` are `nan`; `kink_aware_flow`
    writes the given ones in."""
    return integ.flow(net, theta0, integ.run(theta0), loss)
