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


def violations(prob: KinkProblem, th, P, slots, cand, utol, surface_tol):
    """Flat (N*H,) mask of pairs whose mode is inconsistent at `th`: a sliding pair
    with its weight outside `[tol, 1 - tol]`, or a candidate pair whose side the
    field pushes it out of. Returns `(mask, lam)`."""
    N, H = prob.shape
    lam, u = prob.rates(th, P, slots)
    act = slots >= 0
    lam_bad = act & ~((lam >= surface_tol) & (lam <= 1.0 - surface_tol))  # NaN is bad
    su = jnp.where(P, u, -u)
    bad = (cand & ~slot_mask(slots, N, H) & (su < -utol)).reshape(-1)
    bad = bad.at[jnp.where(act, slots, 0)].max(lam_bad)
    return bad, lam


def resolve(prob: KinkProblem, th, P, slots, cand, utol, surface_tol):
    """Modes of the pairs at a surface point: each candidate pair either stays on a
    side whose field keeps it there, or slides with weight in (0, 1) (a
    box-constrained complementarity problem). Single pivots on the least-index
    violation: a pushed pair first crosses; pushed again, it slides; a sliding pair
    whose weight leaves (0, 1) leaves to that side. Returns `(P, slots, resolved)`."""
    N, H = prob.shape
    M = prob.max_sliding

    def body(s):
        P, slots, tried, it, _ = s
        bad, lam = violations(prob, th, P, slots, cand, utol, surface_tol)
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
        bad, _ = violations(prob, th, P, slots, cand, utol, surface_tol)
        P = P ^ bad.reshape(N, H)
        bad, _ = violations(prob, th, P, slots, cand, utol, surface_tol)
        return P, slots, ~jnp.any(bad)
    init = (P, slots, jnp.zeros((N * H,), bool), jnp.asarray(0), jnp.asarray(False))
    P, slots, _, _, _ = jax.lax.while_loop(cond, body, init)
    bad, _ = violations(prob, th, P, slots, cand, utol, surface_tol)
    return P, slots, ~jnp.any(bad)


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
    _, u0 = prob.rates(th, P0, slots0)
    utol = surface_tol * (jnp.max(jnp.where(on, jnp.abs(u0), 0.0)) + 1e-300)
    P, slots, ok = resolve(prob, th, P0, slots0, cand, utol, surface_tol)

    def fallback(P, slots):
        bad, lam = violations(prob, th, P, slots, cand, utol, surface_tol)
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
    return EventOutcome(P=P, slots=slots, margin=margin, crossings=jnp.sum(crossings), entries=jnp.sum(entries),
                        exits=jnp.sum(exits), simultaneous=n_changed > 1, resolved=ok, residual=resid)
