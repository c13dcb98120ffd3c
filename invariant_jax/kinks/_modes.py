"""Mode resolution at an event: which pairs cross, which slide, which leave a sliding
mode (a box-constrained complementarity problem solved by single pivots)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._filippov import KinkProblem, slot_mask


class EventOutcome(eqx.Module):
    """What happened at one event: the new modes and the counts of each change."""

    P: Bool[Array, "N H"]
    slots: Int[Array, " M"]
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


def resolve(prob: KinkProblem, th, P, slots, cand, surface_tol):
    """Modes of the pairs at a surface point: each candidate pair either stays on a
    side whose field keeps it there, or slides with weight in (0, 1) (a
    box-constrained complementarity problem). Single pivots on the least-index
    violation: a pushed pair first crosses; pushed again, it slides; a sliding pair
    whose weight leaves (0, 1) leaves to that side.

    The field and the rates are evaluated once per pivot, in one place (the loop
    body): the first evaluation, at the current modes, also gives the rate tolerance;
    the last, at the final modes (after at most `4 max_sliding + 16` pivots), the
    verdict. Returns `(P, slots, bad, lam)`: the final modes, the mask of pairs still
    inconsistent (none when resolved) and the sliding weights there."""
    N, H = prob.shape
    M = prob.max_sliding
    cap = 4 * M + 16

    def body(s):
        P, slots, tried, it, _, utol, _, _ = s
        lam, u = prob.rates(th, P, slots)
        utol = jnp.where(it == 0, _rate_tol(prob, u, surface_tol), utol)
        bad = _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol)
        k = jnp.argmax(bad)
        is_k = (slots == k) & (slots >= 0)
        sliding_k = jnp.any(is_k)
        lam_k = jnp.sum(jnp.where(is_k, lam, 0.0))
        free = slots < 0
        slide = ~sliding_k & tried[k] & jnp.any(free)
        Pf = P.reshape(-1)
        side = jnp.where(sliding_k, lam_k > 0.5, jnp.where(slide, False, ~Pf[k]))
        slots_new = jnp.where(
            sliding_k, jnp.where(is_k, -1, slots), jnp.where(slide, slots.at[jnp.argmax(free)].set(k), slots)
        )
        pivot = jnp.any(bad) & (sliding_k | ~tried[k] | slide) & (it < cap)
        P_new = jnp.where(pivot, Pf.at[k].set(side), Pf).reshape(N, H)
        slots = jnp.where(pivot, slots_new, slots)
        tried = tried.at[k].set(tried[k] | pivot)
        return P_new, slots, tried, it + 1, ~jnp.any(bad) | ~pivot, utol, bad, lam

    if M == 0:  # no sliding: crossings only
        lam, u = prob.rates(th, P, slots)
        utol = _rate_tol(prob, u, surface_tol)
        bad = _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol)
        P = P ^ bad.reshape(N, H)
        lam, u = prob.rates(th, P, slots)
        return P, slots, _bad_modes(prob, lam, u, P, slots, cand, utol, surface_tol), lam
    dtype = th.dtype
    init = (
        P,
        slots,
        jnp.zeros((N * H,), bool),
        jnp.asarray(0),
        jnp.asarray(False),
        jnp.zeros((), dtype),
        jnp.zeros((N * H,), bool),
        jnp.zeros((M,), dtype),
    )
    P, slots, _, _, _, _, bad, lam = jax.lax.while_loop(lambda s: ~s[4], body, init)
    return P, slots, bad, lam


def resolve_event(prob: KinkProblem, th, P0, slots0, margin0, surface_tol) -> EventOutcome:
    """The new modes at the located event point `th` (current modes `P0`, `slots0`,
    restart margins `margin0`), with the fallback for unresolved events: sliding pairs
    with bad weights leave to the nearer side and pushed pairs flip (`resolved` False)."""
    N, H = prob.shape
    Zev = prob.Z(th, prob.D_of(P0))
    ztol = surface_tol * (jnp.max(jnp.abs(Zev)) + 1e-300)
    sm0 = slot_mask(slots0, N, H)
    sz = jnp.where(P0, Zev, -Zev)
    on = prob.kinky[None, :]
    # candidates: the pair(s) that triggered the event, every pair at its surface,
    # and the sliding pairs
    cand = (on & ((sz + margin0 <= ztol) | (jnp.abs(Zev) <= ztol))) | sm0
    P, slots, bad, lam = resolve(prob, th, P0, slots0, cand, surface_tol)
    ok = ~jnp.any(bad)

    def fallback(P, slots):
        act = slots >= 0
        idx = jnp.where(act, slots, 0)
        rel = act & bad[idx]
        Pf = P.reshape(-1)
        Pf = Pf.at[idx].set(jnp.where(rel, lam > 0.5, Pf[idx]))
        slots = jnp.where(rel, -1, slots)
        flip = bad & ~slot_mask(slots, N, H).reshape(-1) & ~jnp.zeros_like(bad).at[idx].max(rel)
        return (Pf ^ flip).reshape(N, H), slots

    P, slots = jax.lax.cond(ok, lambda: (P, slots), lambda: fallback(P, slots))
    sm = slot_mask(slots, N, H)
    entries, exits = sm & ~sm0, sm0 & ~sm
    crossings = ~sm0 & ~sm & (P != P0)
    n_changed = jnp.sum(entries) + jnp.sum(exits) + jnp.sum(crossings)
    resid = jnp.max(jnp.where(sm0, jnp.abs(Zev), 0.0))
    # pairs left at their surface (not sliding) get a margin so the restart does not
    # re-trigger on them
    sz_new = jnp.where(P, Zev, -Zev)
    margin = jnp.where(cand & ~sm, jnp.maximum(0.0, -sz_new) + ztol, 0.0)
    return EventOutcome(
        P=P,
        slots=slots,
        margin=margin,
        crossings=jnp.sum(crossings),
        entries=jnp.sum(entries),
        exits=jnp.sum(exits),
        simultaneous=n_changed > 1,
        resolved=ok,
        residual=resid,
    )
