"""Mode resolution at an event: which pairs cross, which slide, which leave a sliding
mode (a box-constrained complementarity problem solved by single pivots), and the
exit of a node whose incoming weights reached the origin (`leave_origin`)."""

from __future__ import annotations

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._filippov import TIE_PROBES, KinkProblem, no_ties, parallel, slot_mask, slot_ties
from ._lanes import lane_cond, lane_while


class EventOutcome(eqx.Module):
    """What happened at one event: the restart point, the new modes and the counts of
    each change."""

    theta: Float[Array, " E"]
    P: Bool[Array, "N H"]
    slots: Int[Array, " M"]
    ties: tuple  # (rep, sign, orient, lam) of the slots (`slot_ties`)
    margin: Float[Array, "N H"]
    crossings: Int[Array, ""]
    entries: Int[Array, ""]
    exits: Int[Array, ""]
    simultaneous: Bool[Array, ""]
    resolved: Bool[Array, ""]
    residual: Float[Array, ""]


def _bad_modes(prob: KinkProblem, lam, u, P, slots, cand, utol, surface_tol):
    """Flat (N*H,) mask of pairs whose mode is inconsistent, from the sliding weights
    `lam` and the rates `u = dz/dt`: a sliding pair with its weight outside
    `[tol, 1 - tol]`, or a candidate pair whose side the field pushes it out of."""
    N, H = prob.shape
    act = slots >= 0
    lam_bad = act & ~((lam >= surface_tol) & (lam <= 1.0 - surface_tol))  # NaN is bad
    su = jnp.where(P, u, -u)
    bad = (cand & ~slot_mask(slots, N, H) & (su < -utol)).reshape(-1)
    return bad.at[jnp.where(act, slots, 0)].max(lam_bad)


def _rate_tol(prob: KinkProblem, u, surface_tol):
    """Rates below this (relative to the largest kinked rate) count as zero."""
    return surface_tol * (jnp.max(jnp.where(prob.kinky[None, :], jnp.abs(u), 0.0)) + 1e-300)


def _surface_projections(prob: KinkProblem, th, P, cand):
    """`prob.normal_projections` of the candidate pairs, `(N*H, TIE_PROBES)` (zero for
    the other pairs)."""
    return jnp.where(cand.reshape(-1)[:, None], prob.normal_projections(th, prob.D_of(P)), 0.0)


def _same_surface(proj, cand, k):
    """`(group, flip)`: the candidate pairs whose surface is pair `k`'s (their normals'
    projections `parallel` to `k`'s, the test `coincident` applies to sliding slots; `k`
    included), and which of them face the other way."""
    dots = proj @ proj[k]
    nrm = jnp.sqrt(jnp.sum(proj * proj, axis=1))
    grp = (cand.reshape(-1) & parallel(dots, nrm, nrm[k])).at[k].set(True)
    return grp, dots < 0


def _crossings_only(prob: KinkProblem, th, P, slots, cand, surface_tol):
    """`resolve` without sliding slots: every pushed candidate crosses."""
    N, H = prob.shape
    ties = no_ties(0, th.dtype)
    lam, u, _ = prob.rates(th, P, slots, ties)
    utol = _rate_tol(prob, u, surface_tol)
    P = P ^ _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol).reshape(N, H)
    lam, u, det_sign = prob.rates(th, P, slots, ties)
    return P, slots, _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol), lam, None, det_sign


# when single pivots find no consistent modes, the modes of this many candidates are
# enumerated (3 each: inactive, active, sliding), fewest changes first
ENUMERATED = 4


def _combinations(k: int) -> np.ndarray:
    """`(3^k, k)`: per enumerated pair 0 (its mode before the event) or 1, 2 (the other
    two), ordered by how many pairs change (the unchanged row first)."""
    rows = np.array(list(itertools.product(range(3), repeat=k)), np.int32).reshape(-1, k)
    return rows[np.argsort((rows > 0).sum(axis=1), kind="stable")]


def _pivot(prob: KinkProblem, P, slots, tried, left, bad, lam, proj, cand, allowed):
    """One single pivot on the least-index violation `k` of `bad` (see `resolve`), where
    `allowed`. Returns `(P, slots, tried, left, pivoted)`."""
    N, H = prob.shape
    M = prob.max_sliding
    flat = jnp.arange(N * H)
    k = jnp.argmax(bad)
    is_k = (slots == k) & (slots >= 0)
    sliding_k = jnp.any(is_k)
    lam_k = jnp.sum(jnp.where(is_k, lam, 0.0))
    free = slots < 0
    slide = ~sliding_k & tried[k] & ~left[k] & jnp.any(free)
    Pf = P.reshape(-1)
    # k's group: the pairs on the same surface as k, which change mode with it
    grp, flip = _same_surface(proj, cand, k)
    in_slots = slot_mask(slots, N, H).reshape(-1)
    leave = (slots >= 0) & grp[jnp.where(slots >= 0, slots, 0)]
    side = jnp.where(sliding_k, lam_k > 0.5, jnp.where(slide, False, ~Pf[k]))
    others = jnp.nonzero(grp & ~in_slots & (flat != k), size=M - 1, fill_value=-1)[0]
    join = jnp.concatenate([k[None], others])  # k first, should the slots run out
    free_at = jnp.nonzero(free, size=M, fill_value=M)[0]
    joined = slots.at[free_at].set(join, mode="drop")
    slots_new = jnp.where(sliding_k, jnp.where(leave, -1, slots), jnp.where(slide, joined, slots))
    moved = jnp.where(sliding_k, grp, grp & ~in_slots)
    moved = jnp.where(slide, moved & slot_mask(slots_new, N, H).reshape(-1), moved)
    side_of = jnp.where(slide, False, side ^ flip)
    pivot = allowed & jnp.any(bad) & (sliding_k | ~tried[k] | slide | left[k])
    P_new = jnp.where(pivot & moved, side_of, Pf).reshape(N, H)
    tried = tried | (pivot & grp)
    # a group that left its slide may cross once when pushed back
    left = jnp.where(pivot & sliding_k, left | grp, jnp.where(pivot & ~slide, left & ~grp, left))
    return P_new, jnp.where(pivot, slots_new, slots), tried, left, pivot


def _enumerated_pairs(bad, cand, N, H, K):
    """The `K` pairs whose modes are enumerated (-1 padded): the inconsistent
    ones, then the candidates of their samples (a coupled pair upstream or downstream),
    then the other candidates."""
    sample = jnp.arange(N * H) // H
    of_bad = jnp.zeros((N,), bool).at[sample].max(bad)[sample]
    c = cand.reshape(-1)
    score = jnp.where(bad, 3, jnp.where(c & of_bad, 2, jnp.where(c, 1, 0)))
    order = jnp.argsort(-score, stable=True)[:K]
    return jnp.where(score[order] > 0, order, -1)


def _enumerated_modes(P0, slots0, sel, digits):
    """The modes of one combination: pair `sel[j]` in mode `(m_j + digits[j]) % 3`, `m_j`
    its mode in `(P0, slots0)` (0 inactive, 1 active, 2 sliding); the others as there."""
    N, H = P0.shape
    M = slots0.shape[0]
    valid = sel >= 0
    idx = jnp.where(valid, sel, 0)
    P0f = P0.reshape(-1)
    base = jnp.where(slot_mask(slots0, N, H).reshape(-1)[idx], 2, jnp.where(P0f[idx], 1, 0))
    mode = (base + digits) % 3
    P = P0f.at[jnp.where(valid, idx, N * H)].set(mode == 1, mode="drop").reshape(N, H)
    slots = jnp.where(jnp.any(slots0[:, None] == jnp.where(valid, sel, -2)[None, :], axis=1), -1, slots0)
    join = jnp.where(valid & (mode == 2), sel, -1)
    join = join[jnp.argsort(join < 0, stable=True)]  # the sliding ones first
    free_at = jnp.nonzero(slots < 0, size=join.shape[0], fill_value=M)[0]
    return P, slots.at[free_at].set(join, mode="drop")


def resolve(prob: KinkProblem, th, P, slots, cand, surface_tol):
    """Modes of the pairs at a surface point: each candidate pair either stays on a
    side whose field keeps it there, or slides with weight in (0, 1) (a
    box-constrained complementarity problem). Single pivots on the least-index
    violation (`_pivot`): a pushed pair first crosses; pushed again, it slides; a
    sliding pair whose weight leaves (0, 1) leaves to that side, and if it is pushed
    back there it crosses (a coupled pair can be pushed up from both sides with its
    weight below 0). For one pair, with its rate affine in its weight, that ends on the
    side its rate points to from the inactive side, whichever way the weight left.

    Single pivots move one group at a time. When they find no consistent modes (they
    cycle, or run out after `4 max_sliding + 16`), the modes of `ENUMERATED` pairs (the
    inconsistent ones first, then the candidates of their samples) are enumerated from
    the modes before the event, fewest changes first, and the first consistent
    combination is taken. That is the case where a pair upstream reaches its surface
    while one downstream of it on the same sample slides: the upstream pair must slide
    and the downstream one leave its surface, two changes at once.

    Which pairs share a surface (here and in the sliding solve) is told by the
    candidates' `normal_projections` (`_surface_projections`), evaluated with each
    pivot's pattern: a normal carries the slopes of the pairs upstream of it, so a pair
    that crosses can split a surface that several samples shared.

    The field and the rates are evaluated once per iteration, in one place (the loop
    body): the first evaluation, at the current modes, also gives the rate tolerance;
    the last, at the final modes, the verdict. Returns the final modes `(P, slots)`, the
    pairs still inconsistent (none when resolved), and there the sliding weights, the
    projections and the sign of the weights' system's determinant."""
    N, H = prob.shape
    M = prob.max_sliding
    cap = 4 * M + 16
    K = min(ENUMERATED, N * H)
    combos = jnp.asarray(_combinations(K))
    P0, slots0 = P, slots

    def body(s, th, cand, P0, slots0):
        P, slots, tried, left, it, _, utol, _, _, _, e, sel, kept, _ = s
        proj = _surface_projections(prob, th, P, cand)
        lam, u, det_sign = prob.rates(th, P, slots, slot_ties(proj, slots))
        utol = jnp.where(it == 0, _rate_tol(prob, u, surface_tol), utol)
        bad = _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol)
        allowed = (it < cap) & (e == 0)  # (no pivots once the enumeration has started)
        P_piv, slots_piv, tried, left, pivot = _pivot(prob, P, slots, tried, left, bad, lam, proj, cand, allowed)
        enum = jnp.any(bad) & ~pivot & (e < combos.shape[0] - 1)
        start = enum & (e == 0)
        sel = jnp.where(start, _enumerated_pairs(bad, cand, N, H, K), sel)
        # where the pivots ended: the fallback's start, should no combination do
        kept = jax.tree.map(lambda a, b: jnp.where(start, a, b), (P, slots, bad, lam, proj, det_sign), kept)
        e = jnp.where(enum, e + 1, e)
        P_en, slots_en = _enumerated_modes(P0, slots0, sel, combos[e])
        P_next = jnp.where(enum, P_en, jnp.where(pivot, P_piv, P))
        slots_next = jnp.where(enum, slots_en, jnp.where(pivot, slots_piv, slots))
        return P_next, slots_next, tried, left, it + 1, ~pivot & ~enum, utol, bad, lam, proj, e, sel, kept, det_sign

    if M == 0:
        return _crossings_only(prob, th, P, slots, cand, surface_tol)
    dtype = th.dtype
    no_bad, no_lam, no_proj = jnp.zeros((N * H,), bool), jnp.zeros((M,), dtype), jnp.zeros((N * H, TIE_PROBES), dtype)
    init = (
        P,
        slots,
        jnp.zeros((N * H,), bool),
        jnp.zeros((N * H,), bool),
        jnp.asarray(0),
        jnp.asarray(False),
        jnp.zeros((), dtype),
        no_bad,
        no_lam,
        no_proj,
        jnp.asarray(0),
        -jnp.ones((K,), int),
        (P, slots, no_bad, no_lam, no_proj, jnp.ones((), dtype)),
        jnp.ones((), dtype),
    )
    # (a lane of a batch stops paying once its modes are resolved: most take two iterations)
    P, slots, _, _, _, _, _, bad, lam, proj, e, _, kept, det_sign = lane_while(
        prob.lanes, lambda s: ~s[5], body, init, th, cand, P0, slots0
    )
    out = (P, slots, bad, lam, proj, det_sign)
    return jax.tree.map(lambda a, b: jnp.where(jnp.any(bad) & (e > 0), a, b), kept, out)


# the exit from the origin of a node's incoming weights: ascent steps of the blown-up
# potential, the radius it starts at (units of the node's typical |z|), and the size of
# the restart (in units of surface_tol * max|theta|)
ORIGIN_STEPS = 256
ORIGIN_RADIUS = 10.0
ORIGIN_RESTART = 1e3
ORIGIN_MOVING = 1e-4  # |grad Phi| below this (relative): at a maximum
ORIGIN_SPHERE_STEPS = 32


def _node_inputs(prob: KinkProblem, th, P, v, m, idx):
    """`(a, r)`: node `v`'s inputs per sample (`dz_v / dw`, `(N, K)`; `z_v` is linear in
    its incoming weights `w`, the edges `idx` where `m`) and its backpropagated signal."""
    D = prob.D_of(P)

    def col(e, on):
        return jax.jvp(lambda t: prob.Z(t, D)[:, v], (th,), (jnp.zeros_like(th).at[e].set(on),))[1]

    return jax.vmap(col, out_axes=1)(idx, m.astype(th.dtype)), prob.signal(th, D)[:, v]


def _escape_ray(a, r, slope, wp, far):
    """`(escape, u)`: whether the smooth limit leaves the origin, and along which unit
    ray `u` (see `leave_origin`): `y` ascends `Phi` from `ORIGIN_RADIUS` along the
    arrival direction `wp` (from 0 unless `far`), then `F` on the sphere from there."""
    N = a.shape[0]
    sa = jnp.sqrt(jnp.sum(a * a) / N)
    b = a / jnp.where(sa > 0, sa, 1.0)
    rsum = jnp.sum(jnp.abs(r))
    rho = r / jnp.where(rsum > 0, rsum, 1.0)
    nwp = jnp.sqrt(jnp.sum(wp * wp))
    y0 = jnp.where(far, ORIGIN_RADIUS * wp / jnp.where(far, nwp, 1.0), 0.0)
    # gradient ascent of Phi, steps 1 / (bound on its curvature)
    curv = 0.25 * (1 - slope) * jnp.sum(jnp.abs(rho) * jnp.sum(b * b, axis=1))
    h = 1.0 / jnp.where(curv > 0, curv, 1.0)
    grad_phi = lambda y: -(rho * (slope + (1 - slope) * jax.nn.sigmoid(b @ y))) @ b  # noqa: E731
    y = jax.lax.fori_loop(0, ORIGIN_STEPS, lambda _, y: y + h * grad_phi(y), y0)
    ny = jnp.sqrt(jnp.sum(y * y))
    F_of = lambda u: -jnp.sum(rho * (slope * (b @ u) + (1 - slope) * jnp.maximum(b @ u, 0.0)))  # noqa: E731
    u0 = y / jnp.where(ny > 0, ny, 1.0)
    rho_sum = jnp.sum(jnp.abs(rho))
    # escaping: Phi grows along the whole ray beyond y, or y still moves outward
    # (not at a maximum of Phi)
    g = grad_phi(y)
    sure = F_of(u0) * math.e * ny > (1 - slope) * rho_sum
    moving = (jnp.sum(y * g) > 0) & (jnp.sqrt(jnp.sum(g * g)) > ORIGIN_MOVING * (1 - slope) * rho_sum)

    # then the ray: projected subgradient ascent of F on the sphere, the best kept
    def sphere(k, c):
        u, ub, Fb = c
        gu = -(rho * (slope + (1 - slope) * jnp.where(b @ u > 0, 1.0, 0.0))) @ b
        u = u + 0.1 * 0.9**k * (gu - jnp.sum(gu * u) * u)
        u = u / jnp.sqrt(jnp.sum(u * u))
        Fu = F_of(u)
        return u, jnp.where(Fu > Fb, u, ub), jnp.maximum(Fu, Fb)

    _, u, F = jax.lax.fori_loop(0, ORIGIN_SPHERE_STEPS, sphere, (u0, u0, F_of(u0)))
    return (ny > 0) & (sure | (moving & (F > 0))), u


def leave_origin(prob: KinkProblem, th, th_prev, P, slots, margin, Zev, ztol, surface_tol):
    """The exit of a node whose incoming weights `w` reached 0 (every pair of the node at
    its surface at once; `|w|` tiny against the other weights). Returns the restart
    `(theta, P, slots, margin, Z)`, unchanged when no node is there.

    Near `w = 0` (the node's outputs and the rest of the network frozen to first order)
    the flow is `dw/dt = grad F(w)`, `F(w) = -sum_i r_i act(w . a_i)` (`a_i`: the node's
    inputs for sample `i`, `r_i = dL/da_i` its backpropagated signal), homogeneous of
    degree 1: on the unit sphere the direction ascends `F`, and `|w|` grows at rate
    `F(w / |w|)`. Which way the flow leaves is the smooth limit's choice: with relu
    replaced by `softplus(beta z) / beta` and `y = beta w`, `y` ascends
    `Phi(y) = -sum_i r_i softplus(y . a_i)` (the same for every `beta`); `y` may pass
    by the origin and leave on the other side (the arrival direction is a maximum of `F`
    on the sphere, with `F < 0`). So `y` ascends `Phi` for `ORIGIN_STEPS` fixed steps
    from `ORIGIN_RADIUS` along the direction the node arrived from (its weights at the
    segment start `th_prev`; from 0 if those are at the origin too), and the ray is then
    refined by an ascent of `F` on the sphere. If `y` leaves (`Phi` grows along the whole
    ray beyond it, or `y` still moves outward) and `F > 0` on the ray, the node restarts
    at `w = eps u`, with the pattern `sign(u . a_i)`. Otherwise it stays dead: `w = 0`,
    every pair inactive (stationary for relu)."""
    N, H = prob.shape
    if not prob.in_edges or not H:
        return th, P, slots, margin, Zev
    E = th.shape[0]
    edges = jnp.asarray(prob.in_edges)  # (H, K), -1 padded
    has = edges >= 0
    W = jnp.where(has, th[jnp.where(has, edges, 0)], 0.0)
    wnorm = jnp.sqrt(jnp.sum(W * W, axis=1))
    colmax = jnp.max(jnp.abs(Zev), axis=0)
    scale = jnp.max(jnp.abs(th))
    tiny = wnorm <= surface_tol * scale
    at0 = prob.kinky & (tiny | ((colmax <= ztol) & (wnorm <= math.sqrt(surface_tol) * scale)))
    v = jnp.argmin(jnp.where(at0, wnorm, jnp.inf))

    def leave(th, P, slots, margin, v, th_prev, scale, Zev):
        m = has[v]
        idx = jnp.where(m, edges[v], 0)
        a, r = _node_inputs(prob, th, P, v, m, idx)
        wp = jnp.where(m, th_prev[idx], 0.0)
        far = jnp.sqrt(jnp.sum(wp * wp)) > 10 * surface_tol * scale
        escape, u = _escape_ray(a, r, prob.slope[v], wp, far)
        su = a @ u
        eps = ORIGIN_RESTART * surface_tol * scale
        w = jnp.where(escape, eps * u, 0.0)
        th_new = th.at[jnp.where(m, idx, E)].set(w, mode="drop")
        P_new = P.at[:, v].set(escape & (su > 0))
        node_slot = (slots >= 0) & (slots % H == v)
        slots_new = jnp.where(node_slot, -1, slots)
        margin_new = margin.at[:, v].set(0.0)
        return th_new, P_new, slots_new, margin_new, prob.Z(th_new, prob.D_of(P_new))

    # (in a batch, only the lanes with a node at its origin search for the exit)
    stay = lambda th, P, slots, margin, v, th_prev, scale, Zev: (th, P, slots, margin, Zev)  # noqa: E731
    return lane_cond(prob.lanes, jnp.any(at0), leave, stay, th, P, slots, margin, v, th_prev, scale, Zev)


def resolve_event(prob: KinkProblem, th, P0, slots0, margin0, surface_tol, th_prev=None) -> EventOutcome:
    """The new modes at the located event point `th` (current modes `P0`, `slots0`,
    restart margins `margin0`; `th_prev` the segment's start), with the fallback for
    unresolved events: sliding pairs with bad weights leave to the nearer side and pushed
    pairs flip (`resolved` False). A node whose incoming weights reached the origin
    first leaves it (`leave_origin`), which moves the restart point by `O(eps)`."""
    N, H = prob.shape
    Zev = prob.Z(th, prob.D_of(P0))
    ztol = surface_tol * (jnp.max(jnp.abs(Zev)) + 1e-300)
    sm0 = slot_mask(slots0, N, H)
    resid = jnp.max(jnp.where(sm0, jnp.abs(Zev), 0.0))
    th_prev = th if th_prev is None else th_prev
    th, P1, slots1, margin1, Z1 = leave_origin(prob, th, th_prev, P0, slots0, margin0, Zev, ztol, surface_tol)
    ztol = surface_tol * (jnp.max(jnp.abs(Z1)) + 1e-300)
    sz = jnp.where(P1, Z1, -Z1)
    on = prob.kinky[None, :]
    # candidates: the pair(s) that triggered the event, every pair at its surface,
    # and the sliding pairs
    cand = (on & ((sz + margin1 <= ztol) | (jnp.abs(Z1) <= ztol))) | slot_mask(slots1, N, H)
    M = prob.max_sliding
    P, slots, bad, lam, proj, det_sign = resolve(prob, th, P1, slots1, cand, surface_tol)
    ok = ~jnp.any(bad)

    def fallback(P, slots, bad, lam):
        act = slots >= 0
        idx = jnp.where(act, slots, 0)
        rel = act & bad[idx]
        Pf = P.reshape(-1)
        Pf = Pf.at[idx].set(jnp.where(rel, lam > 0.5, Pf[idx]))
        slots = jnp.where(rel, -1, slots)
        flip = bad & ~slot_mask(slots, N, H).reshape(-1) & ~jnp.zeros_like(bad).at[idx].max(rel)
        return (Pf ^ flip).reshape(N, H), slots

    P, slots = lane_cond(prob.lanes, ~ok, fallback, lambda P, slots, bad, lam: (P, slots), P, slots, bad, lam)
    if M:  # (the fallback's pattern has projections of its own)
        proj = lane_cond(
            prob.lanes,
            ~ok,
            lambda P, th, cand, proj: _surface_projections(prob, th, P, cand),
            lambda P, th, cand, proj: proj,
            P,
            th,
            cand,
            proj,
        )
    # the weights and the determinant's sign at the restart (the segment's fields and
    # event condition start from them): resolved, those at the final modes; after the
    # fallback, whose modes were not solved, the box's centre and (-1)^k for k surfaces,
    # the sign of a system whose negative is a P-matrix (for one surface the only sign
    # an attracting slide has: its rate positive at lam = 0 and negative at lam = 1)
    n_surfaces = jnp.sum((slots >= 0) & (slot_ties(proj, slots)[0] == jnp.arange(M))) if M else 0
    orient = jnp.where(ok, det_sign, jnp.where(n_surfaces % 2 == 1, -1.0, 1.0)).astype(th.dtype)
    ties = slot_ties(proj, slots, orient, jnp.where(ok, lam, 0.5)) if M else no_ties(0, th.dtype)
    sm = slot_mask(slots, N, H)
    entries, exits = sm & ~sm0, sm0 & ~sm
    crossings = ~sm0 & ~sm & (P != P0)
    n_changed = jnp.sum(entries) + jnp.sum(exits) + jnp.sum(crossings)
    # pairs left at their surface (not sliding) get a margin so the restart does not
    # re-trigger on them
    sz_new = jnp.where(P, Z1, -Z1)
    margin = jnp.where(cand & ~sm, jnp.maximum(0.0, -sz_new) + ztol, 0.0)
    return EventOutcome(
        theta=th,
        P=P,
        slots=slots,
        ties=ties,
        margin=margin,
        crossings=jnp.sum(crossings),
        entries=jnp.sum(entries),
        exits=jnp.sum(exits),
        simultaneous=n_changed > 1,
        resolved=ok,
        residual=resid,
    )
