"""Kink-aware gradient flow for piecewise-linear activations (relu, leaky_relu).

Inside one activation pattern the loss is a polynomial in `theta`, so the flow is
smooth and a high-order solver takes long steps. The pattern changes where a
pre-activation `z_{i,v}(theta)` (sample `i`, hidden node `v`) crosses zero; there the
vector field jumps. `kink_aware_flow`:

1. integrates the *pattern-frozen* field `f_D(theta) = -grad L_D(theta)`, where every
   (sample, node) pair uses the fixed slope `D_{i,v}` (1 on the active side, the
   negative slope on the other) in the forward and the backward pass;
2. stops at the first pair about to cross, with a diffrax `Event` whose condition is the
   smallest signed pre-activation and whose root finder (`Illinois`, bracketed false
   position) locates the time;
3. decides what happens at the surface: every candidate pair (the one that triggered
   the event, any other at its surface, and every sliding pair) must end in a
   consistent mode: on a side whose field keeps it there, or *sliding* with the
   Filippov field (the combination `f0 + sum_j lambda_j dF/dD_j` tangent to all
   sliding surfaces, every `lambda_j` in `(0, 1)`). This box-constrained
   complementarity problem is solved by single pivots on the least-index violation
   (a pushed pair crosses; pushed back, it slides; a sliding pair whose `lambda`
   leaves `(0, 1)` leaves to that side), so a neighbour's crossing can end a sliding
   mode;
4. restarts from the located point.

Events where more than one pair changes mode are counted in `num_simultaneous`. If no
consistent modes are found (more than `max_sliding` pairs want to slide, or the
pivoting cycles) the pushed pairs flip, and the event is counted in `num_ambiguous`.
On sliding modes brute-force explicit solvers chatter and are no reference; the flow
here converges to the smooth limit (ReLU replaced by `softplus(beta z) / beta`,
`beta -> inf`) at first order in `1/beta` (tests/test_kinks.py).

Conservation: every field used (pattern-frozen or Filippov) has the form
`-grad L_D` with `L_D` positively homogeneous per node (or a linear combination of
derivatives of such fields in `D`), so `B~ (theta * f) = 0` holds for every `theta`.
With a Gauss-Legendre inner solver `c = B~ theta^2` is then conserved to round-off, on
sliding modes too. At each event the event time is refined by Newton on the Gauss
solution and the restart point recomputed by one Gauss-Legendre step from the last
step's start, so the restart is on the surface and exact as well.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from .flow import Flow
from .losses import check_data, get_loss
from .network import DAGNetwork
from .options import SaveTimes, SolverOptions, as_save_times, as_solver_options, check_integer, check_positive
from .solvers import GaussLegendre, count_evaluations, count_extra, gl_step

__all__ = ["KinkFlow", "kink_aware_flow", "pattern_field"]


class KinkFlow(eqx.Module):
    """The result of `kink_aware_flow`.

    **Fields:**

    - `flow`: a `Flow` (saved times, weights, losses, conserved quantities, drift,
        result, stats) exactly as from `gradient_flow`.
    - `num_events`: number of located events (crossings, sliding entries and exits).
    - `num_crossings`: pairs that flipped pattern transversally.
    - `num_sliding_entries`, `num_sliding_exits`: sliding modes entered and left.
    - `num_simultaneous`: events at which more than one pair changed mode.
    - `num_ambiguous`: events without consistent modes, resolved by the fallback (see
        the module docstring).
    - `sliding_time`: total time spent on sliding modes.
    - `max_sliding_pairs`: most pairs sliding at once (> 1: motion on an intersection
        of surfaces).
    - `surface_residual`: max `|z|` of sliding pairs at the events and at the end (how
        well the state stays on the surfaces).
    - `event_times`: the event times, padded with `inf`, `(max_events,)`.
    - `pattern_final`: the final activation pattern, `(N, H)` bool (True = active side).
    - `sliding_final`: the pairs sliding at the end, `(N, H)` bool.
    - `events_exhausted`: True when `max_events` stopped the integration.
    """

    flow: Flow
    num_events: Int[Array, ""]
    num_crossings: Int[Array, ""]
    num_sliding_entries: Int[Array, ""]
    num_sliding_exits: Int[Array, ""]
    num_simultaneous: Int[Array, ""]
    num_ambiguous: Int[Array, ""]
    sliding_time: Float[Array, ""]
    max_sliding_pairs: Int[Array, ""]
    surface_residual: Float[Array, ""]
    event_times: Float[Array, " K"]
    pattern_final: Bool[Array, "N H"]
    sliding_final: Bool[Array, "N H"]
    events_exhausted: Bool[Array, ""]

    @property
    def result(self):
        return self.flow.result

    @property
    def success(self):
        return self.flow.success & ~self.events_exhausted


# ------------------------------------------------------------------ event root finder


class _IllinoisState(eqx.Module):
    lower: Array
    upper: Array
    f_lower: Array
    f_upper: Array
    side: Array  # +1 / -1: which end moved last (0: none yet)


class Illinois(optx.AbstractRootFinder):
    """Bracketed false position with the Illinois modification, for scalar roots on
    `[lower, upper]` (passed as `options`, as diffrax does for events). Superlinear
    (order ~1.44), so an event costs ~10 condition evaluations where bisection to
    the same `atol` costs ~40; falls back to bisection when the secant point is
    not strictly inside the bracket. Stops when the bracket is narrower than `atol`
    or the condition is exactly 0."""

    atol: float
    rtol: float = 0.0
    norm: Callable = jnp.abs

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        lower = jnp.asarray(options["lower"], f_struct.dtype)
        upper = jnp.asarray(options["upper"], f_struct.dtype)
        f_lower, _ = fn(lower, args)
        f_upper, _ = fn(upper, args)
        return _IllinoisState(lower, upper, f_lower, f_upper, jnp.asarray(0))

    def step(self, fn, y, args, options, state, tags):
        fy, aux = fn(y, args)
        same_as_lower = jnp.sign(fy) == jnp.sign(state.f_lower)
        # replace the end with the same sign; halve the kept end's value if that end
        # was also kept last time (Illinois)
        lower = jnp.where(same_as_lower, y, state.lower)
        upper = jnp.where(same_as_lower, state.upper, y)
        side = jnp.where(same_as_lower, -1, 1)
        f_lower = jnp.where(same_as_lower, fy, jnp.where(state.side == 1, 0.5 * state.f_lower, state.f_lower))
        f_upper = jnp.where(same_as_lower, jnp.where(state.side == -1, 0.5 * state.f_upper, state.f_upper), fy)
        denom = f_lower - f_upper
        secant = (lower * -f_upper + upper * f_lower) / jnp.where(denom == 0, 1.0, denom)
        mid = 0.5 * (lower + upper)
        inside = (denom != 0) & jnp.isfinite(secant) & (secant > jnp.minimum(lower, upper)) & (secant < jnp.maximum(lower, upper))
        new_y = jnp.where(fy == 0, y, jnp.where(inside, secant, mid))
        return new_y, _IllinoisState(lower, upper, f_lower, f_upper, side), aux

    def terminate(self, fn, y, args, options, state, tags):
        width = jnp.abs(state.upper - state.lower)
        done = (width < self.atol + self.rtol * jnp.abs(y)) | (state.f_lower == 0) | (state.f_upper == 0)
        return done, optx.RESULTS.successful

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}


# ------------------------------------------------------------------ frozen-pattern field


def _forward_D(net: DAGNetwork, theta, X, D):
    """Forward pass with activation `a = D * z` per (sample, hidden node)."""
    return net.with_edge_weights(theta)._run(X, activate=lambda z, k0, k1: D[:, k0:k1] * z)


def pattern_field(net: DAGNetwork, X, Y, D, *, loss="mse"):
    """The pattern-frozen gradient-flow field `theta -> -grad L_D(theta)`, where every
    (sample, hidden node) pair applies the fixed slope `D[i, v]` (shape `(N, H)`).
    For `D` equal to the activation's slope on the side of `z` this is the ordinary
    gradient-flow field."""
    fn = get_loss(loss)

    def f(theta):
        return -jax.grad(lambda th: fn(_forward_D(net, th, X, D)[0], Y))(theta)

    return f


class _Problem(eqx.Module):
    """Static description of one kink-aware problem (closed over by the fields)."""

    net: DAGNetwork
    X: Array
    Y: Array
    slope: Array  # (H,) negative slope per hidden node
    kinky: Array  # (H,) bool: node has a kink (not the identity)
    loss: Callable = eqx.field(static=True)
    max_sliding: int = eqx.field(static=True)

    def D_of(self, P):
        return jnp.where(P, 1.0, self.slope[None, :]).astype(self.X.dtype)

    def grad(self, theta, D):
        theta = count_evaluations(theta)
        return -jax.grad(lambda th: self.loss(_forward_D(self.net, th, self.X, D)[0], self.Y))(theta)

    def Z(self, theta, D):
        return _forward_D(self.net, theta, self.X, D)[1]

    def sliding(self, theta, D, slots):
        """Filippov field for the pairs in `slots` (flat (sample, node) indices, -1 =
        empty): `f0 + sum_j lam_j F_j` with `F_j = d f / d D_j (1 - slope_j)` and `lam`
        solving `n_i . f = 0` (n_i = grad z_i). Returns `(field, lam)`.

        Sliding pairs sit on their "off" side (`P = False`, `D = slope`), so `D` is the
        base of the combination. The JVPs and VJPs run for the occupied slots only (a
        loop with a dynamic trip count), so the cost is `1 + 2k` gradient-equivalents
        for `k` sliding pairs, whatever `max_sliding` is."""
        N, H = D.shape
        M, E = self.max_sliding, theta.shape[0]
        active = slots >= 0
        order = jnp.argsort(~active, stable=True)  # occupied slots first
        act = active[order]
        idx = jnp.where(act, slots[order], 0)
        k_act = jnp.sum(active)
        f0 = self.grad(theta, D)
        _, vjp = jax.vjp(lambda th: self.Z(th, D).reshape(-1), theta)
        grad_of_D = lambda d: self.grad(theta, d.reshape(N, H))  # noqa: E731

        def row(k, rows):
            Fj, normals = rows
            j = idx[k]
            e = jnp.zeros((N * H,), theta.dtype).at[j].set(1.0 - self.slope[j % H])
            Fk = jax.jvp(grad_of_D, (D.reshape(-1),), (e,))[1]
            nk = vjp(jnp.zeros((N * H,), theta.dtype).at[j].set(1.0))[0]
            return Fj.at[k].set(Fk), normals.at[k].set(nk)

        zeros = jnp.zeros((M, E), theta.dtype)
        Fj, normals = jax.lax.fori_loop(0, k_act, row, (zeros, zeros))
        count_extra(k_act)  # the k VJPs of z (the k JVPs of the gradient count themselves)
        Amat = normals @ Fj.T
        b = normals @ f0
        both = act[:, None] & act[None, :]
        Amat = jnp.where(both, Amat, jnp.eye(M, dtype=theta.dtype))
        lam = jnp.where(act, jnp.linalg.solve(Amat, -jnp.where(act, b, 0.0)), 0.0)
        return f0 + lam @ Fj, jnp.zeros((M,), theta.dtype).at[order].set(lam)

    def field(self, theta, P, slots):
        """`(field, lam)`: the pattern-frozen field, or the Filippov field and the
        sliding weights while any pair slides (`lam` is zeros otherwise)."""
        D = self.D_of(P)
        if self.max_sliding == 0:
            return self.grad(theta, D), jnp.zeros((0,), theta.dtype)
        return jax.lax.cond(
            jnp.any(slots >= 0),
            lambda: self.sliding(theta, D, slots),
            lambda: (self.grad(theta, D), jnp.zeros((self.max_sliding,), theta.dtype)),
        )

    def cond_value(self, theta, P, slots, margin):
        """Smallest signed distance to a surface: `s z + margin` over non-sliding kinked
        pairs, and `lam`, `1 - lam` over sliding pairs. Positive inside the pattern."""
        Z = self.Z(theta, self.D_of(P))
        N, H = Z.shape
        sz = jnp.where(P, Z, -Z) + margin
        on = jnp.broadcast_to(self.kinky[None, :], (N, H))
        on = on & ~_slot_mask(slots, N, H)
        big = jnp.asarray(jnp.inf, theta.dtype)
        m = jnp.min(jnp.where(on, sz, big))
        if self.max_sliding:
            lam = self.field(theta, P, slots)[1]
            act = slots >= 0
            m = jnp.minimum(m, jnp.min(jnp.where(act, jnp.minimum(lam, 1.0 - lam), big)))
        return m


def _slot_mask(slots, N, H):
    flat = jnp.zeros((N * H,), bool).at[jnp.where(slots >= 0, slots, 0)].max(slots >= 0)
    return flat.reshape(N, H)


# ------------------------------------------------------------------ driver


class _Carry(eqx.Module):
    t: Array
    theta: Array
    P: Array
    slots: Array
    margin: Array
    ys: Array
    filled: Array
    n_events: Array
    n_cross: Array
    n_sin: Array
    n_sout: Array
    n_simul: Array
    n_amb: Array
    t_slide: Array
    max_slide: Array
    resid: Array
    ev_times: Array
    steps: Array
    acc: Array
    rej: Array
    result: diffrax.RESULTS
    done: Array


def _check_piecewise_linear(net: DAGNetwork):
    bad = [a.name for a in net.activations if not a.piecewise_linear]
    if bad:
        raise ValueError(
            f"kink_aware_flow needs piecewise-linear activations (relu, leaky_relu); got {bad}. "
            "For a smooth activation the flow has no kinks: use ij.gradient_flow with "
            "solver='tsit5' (explicit), 'kvaerno5_hessian' (stiff, long horizons) or "
            "'gauss4' (conserves quadratic invariants)."
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
    n_save: int | None = None,
    max_events: int = 1_000,
    max_sliding: int = 16,
    event_tol: float = 1e-13,
    surface_tol: float = 1e-9,
    loss: str | Callable = "mse",
) -> KinkFlow:
    """Gradient flow of a ReLU / leaky-ReLU network that integrates within activation
    patterns, locates pattern changes as events, and follows sliding modes.

    **Arguments:**

    - `net`, `X`, `Y`, `t1`, `t0`, `rtol`, `atol`, `saveat`, `n_save`, `loss`: as in
        `gradient_flow`.
    - `solver`: the solver inside each pattern: an `ij.SolverOptions`, or a name in
        `ij.SOLVERS` or a diffrax solver (then with `rtol`, `atol` and a step budget
        `max_steps=10_000`). `SolverOptions.max_steps` is the step budget of each
        segment between events; `dt0` and `stepsize_controller` are not used. The
        default `"gauss4"` (Gauss-Legendre, order 4) conserves `c` to round-off;
        `"tsit5"` is cheaper per step but conserves only to tolerance.
    - `max_events`: cap on located events (each restart is one); hitting it sets
        `events_exhausted` and `flow.result` to `max_steps_reached`.
    - `max_sliding`: most pairs that may slide at once (static: the size of the slot
        arrays). Each pair *actually* sliding costs about two gradient evaluations per
        field evaluation; empty slots cost nothing. 0 disables sliding (the trajectory
        then crosses back and forth, counted as ambiguous events).
    - `event_tol`: absolute tolerance, in time, of the root finder that locates events.
    - `surface_tol`: pre-activations (relative to `max |z|`) and sliding weights within
        this of 0 at an event count as on their surface.

    **Returns:** a `KinkFlow`.
    """
    if not isinstance(net, DAGNetwork):
        raise TypeError(f"net must be a DAGNetwork; got {type(net).__name__}.")
    _check_piecewise_linear(net)
    X, Y = check_data(net.graph, X, Y)
    theta0 = net.edge_weights()
    dtype = jnp.result_type(theta0.dtype, X.dtype)
    theta0, X, Y = theta0.astype(dtype), X.astype(dtype), Y.astype(dtype)
    opts = as_solver_options(solver, rtol=rtol, atol=atol, max_steps=10_000)
    ts = jnp.asarray(as_save_times(saveat, n_save).times(t0, t1), dtype)
    opts.check_dtype(dtype)
    check_positive("event_tol", event_tol)
    check_positive("surface_tol", surface_tol)
    check_integer("max_events", max_events, minimum=1)
    check_integer("max_sliding", max_sliding, minimum=0)
    get_loss(loss)
    inner = opts.get_solver()
    rtol, atol, max_steps = opts.rtol, opts.atol, opts.max_steps
    sol, extra = _integrate(
        net, theta0, X, Y, ts, inner, jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), t0=float(t0), t1=float(t1),
        max_steps=int(max_steps), max_events=int(max_events), max_sliding=int(max_sliding),
        event_tol=float(event_tol), surface_tol=float(surface_tol), loss=loss,
    )
    fl = Flow.from_solution(net, X, Y, sol, theta0=theta0, t0=t0, loss=loss, rtol=rtol, atol=atol)
    return KinkFlow(flow=fl, **extra)


@eqx.filter_jit
def _integrate(net, theta0, X, Y, ts, inner, rtol, atol, *, t0, t1, max_steps, max_events, max_sliding, event_tol, surface_tol, loss):
    dtype = theta0.dtype
    is_gl = isinstance(inner, GaussLegendre)
    H = len(net.graph.hidden)
    acts = [net.activation_of(k) for k in range(H)]
    slope = jnp.asarray([a.negative_slope for a in acts], dtype)
    kinky = jnp.asarray([a.kinked for a in acts])
    prob = _Problem(net, X, Y, slope, kinky, get_loss(loss), int(max_sliding))
    N = X.shape[0]
    T = ts.shape[0]
    M = int(max_sliding)

    def vf(t, theta, args):
        P, slots = args
        return prob.field(theta, P, slots)[0]

    term = diffrax.ODETerm(vf)
    root_finder = Illinois(atol=event_tol)

    def segment(c: _Carry):
        margin = c.margin

        def cond_fn(t, y, args, **kw):
            P, slots = args
            return prob.cond_value(y, P, slots, margin)

        tclip = jnp.clip(ts, c.t, t1)
        controller = diffrax.PIDController(rtol=rtol, atol=atol, step_ts=tclip if is_gl else None)
        sol = diffrax.diffeqsolve(
            term,
            inner,
            c.t,
            t1,
            None,
            c.theta,
            args=(c.P, c.slots),
            saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=tclip), diffrax.SubSaveAt(t1=True)], solver_state=is_gl),
            stepsize_controller=controller,
            event=diffrax.Event(cond_fn, root_finder=root_finder),
            max_steps=max_steps,
            throw=False,
        )
        t_end = sol.ts[1][-1]
        y_end = sol.ys[1][-1]
        event = sol.result == diffrax.RESULTS.event_occurred
        if is_gl:
            # Recompute the event state by one Gauss step from the last step's start, so
            # the restart point conserves c exactly (the interpolant does not).
            # The event time is then refined by Newton on the Gauss solution itself,
            # t <- t - g(y(t)) / (dg/dt), so the restart is on the surface (the root of the
            # interpolant can be ~h^4 off, which costs a spurious event). Skipped if it
            # would move the event across a save time.
            _, t_prev, y_prev = sol.solver_state
            f = lambda tt, yy: prob.field(yy, c.P, c.slots)[0]  # noqa: E731
            J = jax.jacfwd(lambda yy: f(t_prev, yy))(y_prev)
            g = lambda yy: prob.cond_value(yy, c.P, c.slots, margin)  # noqa: E731

            def newton(_, tt):
                yy, _ = gl_step(f, J, t_prev, y_prev, tt - t_prev, inner)
                v, dv = jax.jvp(g, (yy,), (f(tt, yy),))
                t_new = tt - v / jnp.where(dv == 0, jnp.inf, dv)
                return jnp.where(jnp.isfinite(t_new), jnp.clip(t_new, t_prev, t1), tt)

            t_ref = jax.lax.fori_loop(0, 3, newton, t_end)
            lo, hi = jnp.minimum(t_ref, t_end), jnp.maximum(t_ref, t_end)
            use_ref = event & (t_ref > t_prev) & ~jnp.any((ts > lo) & (ts <= hi))
            t_end = jnp.where(use_ref, t_ref, t_end)
            y_gl, ok = gl_step(f, J, t_prev, y_prev, t_end - t_prev, inner)
            y_end = jnp.where(event & ok & (t_end > t_prev), y_gl, y_end)
        # merge saves made in this segment
        seg_ok = jnp.isfinite(sol.ts[0]) & (ts >= c.t) & (ts <= t_end) & ~c.filled
        ys = jnp.where(seg_ok[:, None], sol.ys[0], c.ys)
        filled = c.filled | seg_ok
        nst = sol.stats["num_steps"]
        c = eqx.tree_at(
            lambda c: (c.ys, c.filled, c.steps, c.acc, c.rej),
            c,
            (ys, filled, c.steps + nst, c.acc + sol.stats["num_accepted_steps"], c.rej + sol.stats["num_rejected_steps"]),
        )
        slide_dt = jnp.where(jnp.any(c.slots >= 0), t_end - c.t, 0.0)
        c = eqx.tree_at(lambda c: (c.t_slide,), c, (c.t_slide + slide_dt,))
        ok_result = (sol.result == diffrax.RESULTS.successful) | event
        failed = ~ok_result
        c_new = jax.lax.cond(event & ~failed, lambda: _handle_event(c, t_end, y_end), lambda: eqx.tree_at(lambda c: (c.t, c.theta), c, (t_end, y_end)))
        done = failed | ~event | (c_new.n_events >= max_events)
        exhausted = event & (c_new.n_events >= max_events) & (c_new.t < t1)
        res = diffrax.RESULTS.where(
            failed, sol.result, diffrax.RESULTS.where(exhausted, diffrax.RESULTS.max_steps_reached, diffrax.RESULTS.successful)
        )
        # keep the last good state on failure
        theta_keep = jnp.where(failed, c.theta, c_new.theta)
        t_keep = jnp.where(failed, c.t, c_new.t)
        return eqx.tree_at(lambda c: (c.done, c.result, c.theta, c.t), c_new, (done, res, theta_keep, t_keep))

    def _rates(th, P, slots):
        """Sliding weights and `dz/dt` of every pair under the field of `(P, slots)`."""
        D = prob.D_of(P)
        f, lam = prob.field(th, P, slots)
        return lam, jax.jvp(lambda y: prob.Z(y, D), (th,), (f,))[1]

    def _violations(th, P, slots, cand, utol):
        """Flat (N*H,) mask of pairs whose mode is inconsistent at `th`: a sliding pair
        with its weight outside `[tol, 1 - tol]`, or a candidate pair whose side the
        field pushes it out of."""
        lam, u = _rates(th, P, slots)
        act = slots >= 0
        lam_bad = act & ~((lam >= surface_tol) & (lam <= 1.0 - surface_tol))  # NaN is bad
        su = jnp.where(P, u, -u)
        bad = (cand & ~_slot_mask(slots, N, H) & (su < -utol)).reshape(-1)
        bad = bad.at[jnp.where(act, slots, 0)].max(lam_bad)
        return bad, lam

    def _resolve(th, P, slots, cand, utol):
        """Modes of the pairs at a surface point: each candidate pair either stays on a
        side whose field keeps it there, or slides with weight in (0, 1) (a
        box-constrained complementarity problem). Single pivots on the least-index
        violation: a pushed pair first crosses; pushed again, it slides; a sliding pair
        whose weight leaves (0, 1) leaves to that side. Returns `(P, slots, resolved)`."""

        def body(s):
            P, slots, tried, it, _ = s
            bad, lam = _violations(th, P, slots, cand, utol)
            k = jnp.argmax(bad)
            is_k = (slots == k) & (slots >= 0)
            sliding_k = jnp.any(is_k)
            lam_k = jnp.sum(jnp.where(is_k, lam, 0.0))
            free = slots < 0
            slide = ~sliding_k & tried[k] & jnp.any(free)
            Pf = P.reshape(-1)
            side = jnp.where(sliding_k, lam_k > 0.5, jnp.where(slide, False, ~Pf[k]))
            slots_new = jnp.where(sliding_k, jnp.where(is_k, -1, slots), jnp.where(slide, slots.at[jnp.argmax(free)].set(k), slots))
            pivot = jnp.any(bad) & (sliding_k | ~tried[k] | slide)
            P = jnp.where(pivot, Pf.at[k].set(side), Pf).reshape(N, H)
            slots = jnp.where(pivot, slots_new, slots)
            tried = tried.at[k].set(tried[k] | pivot)
            return P, slots, tried, it + 1, ~jnp.any(bad) | ~pivot

        def cond(s):
            return (s[3] < 4 * M + 16) & ~s[4]

        if M == 0:  # no sliding: crossings only
            bad, _ = _violations(th, P, slots, cand, utol)
            P = P ^ bad.reshape(N, H)
            bad, _ = _violations(th, P, slots, cand, utol)
            return P, slots, ~jnp.any(bad)
        init = (P, slots, jnp.zeros((N * H,), bool), jnp.asarray(0), jnp.asarray(False))
        P, slots, _, _, _ = jax.lax.while_loop(cond, body, init)
        bad, _ = _violations(th, P, slots, cand, utol)
        return P, slots, ~jnp.any(bad)

    def _handle_event(c: _Carry, t_ev, th):
        P0, slots0 = c.P, c.slots
        Zev = prob.Z(th, prob.D_of(P0))
        ztol = surface_tol * (jnp.max(jnp.abs(Zev)) + 1e-300)
        sm0 = _slot_mask(slots0, N, H)
        sz = jnp.where(P0, Zev, -Zev)
        on = prob.kinky[None, :]
        # candidates: the pair(s) that triggered the event, every pair at its surface,
        # and the sliding pairs
        cand = (on & ((sz + c.margin <= ztol) | (jnp.abs(Zev) <= ztol))) | sm0
        _, u0 = _rates(th, P0, slots0)
        utol = surface_tol * (jnp.max(jnp.where(on, jnp.abs(u0), 0.0)) + 1e-300)
        P, slots, ok = _resolve(th, P0, slots0, cand, utol)

        def fallback(P, slots):
            # Unresolved (no free slot, or no consistent modes): sliding pairs with bad
            # weights leave to the nearer side, pushed pairs flip; flagged as ambiguous.
            bad, lam = _violations(th, P, slots, cand, utol)
            act = slots >= 0
            idx = jnp.where(act, slots, 0)
            rel = act & bad[idx]
            Pf = P.reshape(-1)
            Pf = Pf.at[idx].set(jnp.where(rel, lam > 0.5, Pf[idx]))
            slots = jnp.where(rel, -1, slots)
            flip = bad & ~_slot_mask(slots, N, H).reshape(-1) & ~jnp.zeros_like(bad).at[idx].max(rel)
            return (Pf ^ flip).reshape(N, H), slots

        P, slots = jax.lax.cond(ok, lambda: (P, slots), lambda: fallback(P, slots))
        sm = _slot_mask(slots, N, H)
        entries, exits = sm & ~sm0, sm0 & ~sm
        crossings = ~sm0 & ~sm & (P != P0)
        n_changed = jnp.sum(entries) + jnp.sum(exits) + jnp.sum(crossings)
        resid = jnp.max(jnp.where(sm0, jnp.abs(Zev), 0.0))
        # pairs left at their surface (not sliding) get a margin so the restart does
        # not re-trigger on them
        sz_new = jnp.where(P, Zev, -Zev)
        margin = jnp.where(cand & ~sm, jnp.maximum(0.0, -sz_new) + ztol, 0.0)
        k = c.n_events
        return eqx.tree_at(
            lambda c: (c.t, c.theta, c.P, c.slots, c.margin, c.n_events, c.n_cross, c.n_sin, c.n_sout, c.n_simul, c.n_amb, c.max_slide, c.resid, c.ev_times),
            c,
            (
                t_ev,
                th,
                P,
                slots,
                margin,
                k + 1,
                c.n_cross + jnp.sum(crossings),
                c.n_sin + jnp.sum(entries),
                c.n_sout + jnp.sum(exits),
                c.n_simul + jnp.where(n_changed > 1, 1, 0),
                c.n_amb + jnp.where(ok, 0, 1),
                jnp.maximum(c.max_slide, jnp.sum(slots >= 0)),
                jnp.maximum(c.resid, resid),
                c.ev_times.at[jnp.minimum(k, max_events - 1)].set(t_ev),
            ),
        )

    Z0 = prob.Z(theta0, jnp.ones((N, H), dtype))
    P0 = Z0 > 0
    i0 = jnp.asarray(0)
    zero = jnp.asarray(0.0, dtype)
    carry = _Carry(
        t=jnp.asarray(t0, dtype), theta=theta0, P=P0, slots=-jnp.ones((M,), int), margin=jnp.zeros((N, H), dtype),
        ys=jnp.full((T, theta0.shape[0]), jnp.inf, dtype), filled=jnp.zeros((T,), bool),
        n_events=i0, n_cross=i0, n_sin=i0, n_sout=i0, n_simul=i0, n_amb=i0, t_slide=zero, max_slide=i0, resid=zero,
        ev_times=jnp.full((max_events,), jnp.inf, dtype), steps=i0, acc=i0, rej=i0, result=diffrax.RESULTS.successful, done=jnp.asarray(False),
    )
    out = jax.lax.while_loop(lambda c: ~c.done, segment, carry)

    # final surface residual of sliding pairs
    if M:
        Zf = prob.Z(out.theta, prob.D_of(out.P)).reshape(-1)
        act = out.slots >= 0
        rf = jnp.max(jnp.where(act, jnp.abs(Zf[jnp.where(act, out.slots, 0)]), 0.0))
    else:
        rf = zero
    result = out.result
    ys_all = jnp.concatenate([out.ys, out.theta[None]], axis=0)
    ts_out = jnp.where(out.filled, ts, jnp.inf)
    ts_all = jnp.concatenate([ts_out, out.t[None]])
    stats = dict(num_steps=out.steps, num_accepted_steps=out.acc, num_rejected_steps=out.rej, max_steps=max_steps)
    return _Sol(ts_all, ys_all, result, stats), dict(
        num_events=out.n_events,
        num_crossings=out.n_cross,
        num_sliding_entries=out.n_sin,
        num_sliding_exits=out.n_sout,
        num_simultaneous=out.n_simul,
        num_ambiguous=out.n_amb,
        sliding_time=out.t_slide,
        max_sliding_pairs=out.max_slide,
        surface_residual=jnp.maximum(out.resid, rf),
        event_times=out.ev_times,
        pattern_final=out.P,
        sliding_final=_slot_mask(out.slots, N, H),
        events_exhausted=(out.n_events >= max_events) & (out.t < t1),
    )


class _Sol(eqx.Module):
    ts: Array
    ys: Array
    result: diffrax.RESULTS
    stats: dict
