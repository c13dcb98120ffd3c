"""The fields of a kink-aware flow: the pattern-frozen gradient field, the Filippov
(sliding) field, and the event condition (distance to the nearest surface)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..losses import get_loss
from ..network import DAGNetwork
from ..solvers import count_evaluations, count_extra
from ._lanes import lane_cond

# surfaces whose normals are parallel to within this many machine epsilons (1 - |cos|)
# are one surface (`coincident`)
TIE_TOL = 1e3
# Newton's method on coupled tangency conditions (`KinkProblem.sliding`): at most this
# many steps, until the weights move less than the tolerance
TANGENCY_STEPS = 30
TANGENCY_TOL = 1e-13
TIE_PROBES = 3  # random directions that tell coincident surfaces apart (`normal_projections`)


def _forward_D(net: DAGNetwork, theta, X, D, shift=None):
    """Forward pass with activation `a = D * z` (plus `shift`) per (sample, hidden node)."""
    if shift is None:
        return net.with_edge_weights(theta).evaluate(X, activate=lambda z, k0, k1: D[:, k0:k1] * z)
    return net.with_edge_weights(theta).evaluate(X, activate=lambda z, k0, k1: D[:, k0:k1] * z + shift[:, k0:k1])


def pattern_field(net: DAGNetwork, X, Y, D, *, loss="mse"):
    """The pattern-frozen gradient-flow field `theta -> -grad L_D(theta)`, where every
    (sample, hidden node) pair applies the fixed slope `D[i, v]` (shape `(N, H)`).
    For `D` equal to the activation's slope on the side of `z` this is the ordinary
    gradient-flow field."""
    fn = get_loss(loss)

    def f(theta):
        return -jax.grad(lambda th: fn(_forward_D(net, th, X, D)[0], Y))(theta)

    return f


def slot_mask(slots, N, H):
    """`(N, H)` bool mask of the pairs held in the sliding slots (`-1` = empty)."""
    flat = jnp.zeros((N * H,), bool).at[jnp.where(slots >= 0, slots, 0)].max(slots >= 0)
    return flat.reshape(N, H)


def parallel(dots, na, nb):
    """Whether vectors with dot products `dots` and norms `na`, `nb` (broadcast) are
    parallel or opposite to within `TIE_TOL` (`1 - |cos|`); a zero vector is parallel to
    nothing."""
    tol = TIE_TOL * jnp.finfo(dots.dtype).eps
    return (na > 0) & (nb > 0) & (jnp.abs(dots) >= (1.0 - tol) * na * nb)


def coincident(normals, act):
    """`(rep, sign)` of the occupied slots: `rep[k]` the first slot whose surface is the
    same as slot `k`'s (normals `parallel`; `k` itself if none), `sign[k]` +1 if the
    normals point the same way, -1 if opposite."""
    M = normals.shape[0]
    gram = normals @ normals.T
    nrm = jnp.sqrt(jnp.diagonal(gram))
    same = act[:, None] & act[None, :] & parallel(gram, nrm[:, None], nrm[None, :])
    same = same | jnp.eye(M, dtype=bool)
    rep = jnp.argmax(same, axis=1)
    sign = jnp.where(gram[jnp.arange(M), rep] < 0, -1.0, 1.0).astype(normals.dtype)
    return rep, sign


def slot_ties(proj, slots, orient=None, lam=None):
    """`(rep, sign, orient, lam)` of the sliding slots: `(rep, sign)` the `coincident` of
    their rows of `proj` (the pairs' `normal_projections`; empty slots are their own);
    `orient` (+1 where not given) the sign of the sliding weights' system's determinant
    at the segment's start, for the event condition (`_weights_value`); `lam`
    (1/2 where not given) the weights there, where Newton's method on coupled weights
    starts (`KinkProblem.sliding`). Coincident surfaces are a property of the activation
    pattern (a node's other inputs zero for those samples), so the ties found at an event
    hold for the segment after it: `resolve_event` computes all four there, and the
    fields of the segment carry them."""
    act = slots >= 0
    rep, sign = coincident(jnp.where(act[:, None], proj[jnp.where(act, slots, 0)], 0.0), act)
    orient = jnp.ones((), proj.dtype) if orient is None else orient
    return rep, sign, orient, jnp.full(slots.shape, 0.5, proj.dtype) if lam is None else lam


def no_ties(M, dtype):
    """The ties of slots with no coincident surfaces (every slot its own)."""
    return jnp.arange(M), jnp.ones((M,), dtype), jnp.ones((), dtype), jnp.full((M,), 0.5, dtype)


def _tied_solve(rep, sign, A, b, act):
    """The sliding weights `lam` solving `b + A @ lam = 0` on the occupied slots `act`
    (`A`, `b`: the rows of the tangency conditions `n_k . f = 0`, linear in `lam`).
    Pairs whose surfaces coincide (several samples whose pre-activations are one weight
    times their own input, when the node's other inputs are zero for them) have parallel
    normals, and their equations are one: Filippov's field there is the convex
    combination of the two sides of the one surface, so their weights are tied,
    `lam_l = lam_k` (`1 - lam_k` for opposite normals), and one equation per surface is
    solved. `(rep, sign)` say which (`coincident`, in the rows' order). Without ties
    this is `solve(A, -b)`. Returns `(lam, det_sign)`: the weights, and the sign of the
    determinant of the system solved (they have poles where it is zero)."""
    M = A.shape[0]
    dtype = A.dtype
    is_rep = act & (rep == jnp.arange(M))
    S = jnp.where(act[:, None] & (rep[:, None] == jnp.arange(M)[None, :]), sign[:, None], 0.0).astype(dtype)
    c = jnp.where(act & (sign < 0), 1.0, 0.0).astype(dtype)  # lam = c + S @ mu
    A2 = jnp.where(is_rep[:, None] & is_rep[None, :], A @ S, jnp.eye(M, dtype=dtype))
    rhs = jnp.where(is_rep, -b - A @ c, 0.0)
    lu, piv = jax.scipy.linalg.lu_factor(A2)
    mu = jax.scipy.linalg.lu_solve((lu, piv), rhs)
    swaps = jnp.sum(piv != jnp.arange(M))
    det_sign = jnp.prod(jnp.sign(jnp.diagonal(lu))) * jnp.where(swaps % 2 == 1, -1.0, 1.0).astype(dtype)
    return jnp.where(act, c + S @ mu, 0.0), det_sign


def _weights_value(w, orient, slots):
    """The sliding part of the event condition, from `w = (lam, det_sign)`: over the
    sliding slots the smallest of `min(s lam, s (1 - lam)) / (|lam| + |1 - lam|)`, `s` +1
    while the tangency system's determinant has the sign `orient` it had at the segment's
    start, -1 after it changed sign. In `[0, 1]` that is `min(lam, 1 - lam)`. It is `lam`
    and `1 - lam` with their common denominator (the determinant) cleared: a weight that
    leaves `[0, 1]` towards a pole of the weights (a singular system) and comes back from
    its other side within one step leaves the condition negative at the step's end (-1/2
    at the pole), where `min(lam, 1 - lam)` would be positive again."""
    lam, det_sign = w
    s = det_sign * orient
    value = jnp.minimum(s * lam, s * (1.0 - lam)) / (jnp.abs(lam) + jnp.abs(1.0 - lam))
    return jnp.min(jnp.where(slots >= 0, value, jnp.asarray(jnp.inf, lam.dtype)))


class KinkProblem(eqx.Module):
    """Static description of one kink-aware problem: the network, the data, the
    per-node negative slopes, and the number of sliding slots."""

    net: DAGNetwork
    X: Array
    Y: Array
    slope: Array  # (H,) negative slope per hidden node
    kinky: Array  # (H,) bool: node has a kink (not the identity)
    upstream: Array  # (H, H) bool: hidden node a has a path to hidden node b
    loss: Callable = eqx.field(static=True)
    max_sliding: int = eqx.field(static=True)
    # per hidden node its incoming edges, padded with -1 to the largest in-degree
    in_edges: tuple = eqx.field(static=True, default=())
    # the named vmap axis of a batch of trajectories (`LANES` in the sweep engine's vmap
    # mode): the Filippov field is then computed for the sliding lanes only (`lane_cond`)
    lanes: str | None = eqx.field(static=True, default=None)

    @classmethod
    def build(cls, net: DAGNetwork, X, Y, loss, max_sliding: int) -> KinkProblem:
        H = len(net.graph.hidden)
        acts = [net.activation_of(k) for k in range(H)]
        slope = jnp.asarray([a.negative_slope for a in acts], X.dtype)
        kinky = jnp.asarray([a.kinked for a in acts])
        ins = [net.graph.in_edges(v) for v in net.graph.hidden]
        K = max((len(e) for e in ins), default=0)
        in_edges = tuple(tuple(e) + (-1,) * (K - len(e)) for e in ins)
        hidden = net.graph.hidden
        upstream = jnp.asarray([[a in net.graph.ancestors(b) for b in hidden] for a in hidden], bool).reshape(H, H)
        return cls(net, X, Y, slope, kinky, upstream, get_loss(loss), int(max_sliding), in_edges)

    @property
    def shape(self) -> tuple[int, int]:
        return self.X.shape[0], self.slope.shape[0]

    def D_of(self, P):
        return jnp.where(P, 1.0, self.slope[None, :]).astype(self.X.dtype)

    def grad(self, theta, D):
        theta = count_evaluations(theta)
        return -jax.grad(lambda th: self.loss(_forward_D(self.net, th, self.X, D)[0], self.Y))(theta)

    def frozen_jacobian(self, theta, P):
        """The Jacobian of the pattern-frozen field of `P` (sliding pairs at their base
        slope): the Newton matrix of Gauss steps. It is the field's own while no pair
        slides, and needs no derivative of the Filippov solve when some do."""
        return jax.jacfwd(self.grad)(theta, self.D_of(P))

    def Z(self, theta, D):
        return _forward_D(self.net, theta, self.X, D)[1]

    def pre_activations(self, theta):
        """The network's own pre-activations `(N, H)` (each node's activation applied,
        not a frozen pattern): their signs are the activation pattern at `theta`."""
        return self.net.with_edge_weights(theta).evaluate(self.X)[1]

    def signal(self, theta, D):
        """`dL / da` of every (sample, hidden node) pair, `(N, H)`: the backpropagated
        signal at each node's output."""
        shift = jnp.zeros(D.shape, theta.dtype)
        return jax.grad(lambda s: self.loss(_forward_D(self.net, theta, self.X, D, s)[0], self.Y))(shift)

    def sliding(self, theta, D, slots, ties):
        """Filippov field `f(D(lam))` for the pairs in `slots` (flat (sample, node)
        indices, -1 = empty), the sliding pairs at slopes `D(lam) = slope + lam (1 -
        slope)`, the weights `lam` solving their tangency conditions `r(lam) = dz/dt = 0`.

        Sliding pairs sit on their "off" side (`P = False`, `D = slope`), so `D` is the
        base. On the surfaces the outputs do not depend on the sliding pairs' slopes, so
        the field and the rates are affine in each weight alone (the field is
        multilinear, and a rate `n . f` is quadratic in a weight on both its pair's
        normal `n` and the field). Unless two pairs of one sample have one node upstream
        of the other (`coupled`), they are affine in `lam` jointly: the rates and fields
        at `lam = 0` and at each unit vector `e_k` give them exactly, and one linear
        solve gives `lam`. Coupled conditions are multilinear: Newton's method, the
        Jacobian from central differences (`lam +- e_k`, exact for a quadratic), from the
        weights at the segment's start (`ties[3]`; the box's centre while modes are
        resolved), so that a segment's weights stay on one branch of solutions (from the
        centre, states 1e-7 apart went to different ones: a cascade of events), until
        they move less than `TANGENCY_TOL` or for `TANGENCY_STEPS` steps (the field is
        then the one at the last weights). One loop evaluates every point (a gradient and
        a JVP each): `k + 1` per field for `k` sliding pairs, `2k + 1` per Newton step.
        Pairs on one surface have tied weights (`_tied_solve`; `ties`: `slot_ties`).
        Returns `(field, lam, det_sign)` (the last solved system's determinant's sign)."""
        N, H = D.shape
        M = self.max_sliding
        dtype = theta.dtype
        active = slots >= 0
        order = jnp.argsort(~active, stable=True)  # occupied slots first
        act = active[order]
        idx = jnp.where(act, slots[order], 0)
        k_act = jnp.sum(active)
        coupled = self.coupled(idx, act)
        rep, sign = ties[0], ties[1]
        position = jnp.zeros((M,), int).at[order].set(jnp.arange(M))  # slot -> its place in `order`
        rep, sign = position[rep[order]], sign[order]
        eye = jnp.eye(M, dtype=dtype)

        def point(lam, j, c):  # j = 0: lam; 1..k: lam + e_{j-1}; k+1..2k: lam - e_{j-k-1}
            r0, f0, Rp, Fp, Rm = c
            k = jnp.where(j > k_act, j - k_act - 1, jnp.maximum(j - 1, 0))
            h = jnp.where(j == 0, 0.0, jnp.where(j > k_act, -1.0, 1.0)).astype(dtype)
            Dl = self._D_at(D, idx, act, lam + h * eye[k])
            f = self.grad(theta, Dl)
            u = jax.jvp(lambda th: self.Z(th, Dl), (theta,), (f,))[1].reshape(-1)
            r = jnp.where(act, u[idx], 0.0)
            base, plus = j == 0, (j > 0) & (j <= k_act)
            return (
                jnp.where(base, r, r0),
                jnp.where(base, f, f0),
                jnp.where(plus, Rp.at[k].set(r), Rp),
                jnp.where(plus, Fp.at[k].set(f), Fp),
                jnp.where(j > k_act, Rm.at[k].set(r), Rm),
            )

        def step(c):
            _, _, lam, _, it, _ = c
            zeros = (
                jnp.zeros((M,), dtype),
                jnp.zeros_like(theta),
                jnp.zeros((M, M), dtype),
                jnp.zeros((M, theta.shape[0]), dtype),
                jnp.zeros((M, M), dtype),
            )
            n_points = 1 + k_act + jnp.where(coupled, k_act, 0)
            count_extra(n_points)  # the JVPs of z (the gradients count themselves)
            r0, f0, Rp, Fp, Rm = jax.lax.fori_loop(0, n_points, functools.partial(point, lam), zeros)
            J = jnp.where(coupled, (Rp - Rm) / 2.0, Rp - r0[None, :]).T  # J[i, k] = d r_i / d lam_k
            J = jnp.where(act[None, :], J, 0.0)
            new, det_sign = _tied_solve(rep, sign, J, r0 - J @ lam, act)
            # not coupled (affine): the new weights are exact, and so is their field
            f_new = f0 + (new - lam) @ jnp.where(act[:, None], Fp - f0[None, :], 0.0)
            done = (jnp.where(coupled, lam, new), jnp.where(coupled, f0, f_new))
            return done + (new, jnp.max(jnp.abs(new - lam)), it + 1, det_sign)

        def going(c):
            return (c[4] == 0) | (coupled & (c[3] > TANGENCY_TOL) & (c[4] < TANGENCY_STEPS))

        start = jnp.where(act & coupled, ties[3][order], 0.0).astype(dtype)
        init = (start, jnp.zeros_like(theta), start, jnp.asarray(jnp.inf, dtype), jnp.asarray(0), jnp.ones((), dtype))
        lam, f, _, _, _, det_sign = jax.lax.while_loop(going, step, init)
        return f, jnp.zeros((M,), dtype).at[order].set(lam), det_sign

    def normal_projections(self, theta, D):
        """The normals `grad z` of every pair projected on `TIE_PROBES` fixed random
        directions, `(N*H, TIE_PROBES)`: parallel normals give parallel projections, and
        distinct ones parallel projections with probability 0."""
        V = jax.random.normal(jax.random.key(0), (TIE_PROBES, theta.shape[0]), theta.dtype)
        jvp = lambda v: jax.jvp(lambda t: self.Z(t, D), (theta,), (v,))[1].reshape(-1)  # noqa: E731
        return jax.vmap(jvp, out_axes=1)(V)

    def coupled(self, idx, act):
        """Whether two occupied slots hold pairs of one sample, one node upstream of the
        other: the one case where the tangency conditions are not linear in `lam` (the
        downstream pair's normal, and the gradient along their common paths, carry the
        upstream pair's slope)."""
        N, H = self.shape
        s, v = idx // H, idx % H
        pair = act[:, None] & act[None, :] & (s[:, None] == s[None, :])
        return jnp.any(pair & self.upstream[v[:, None], v[None, :]])

    def _D_at(self, D, idx, act, lam):
        """`D` with the occupied slots' pairs at slope `slope + lam (1 - slope)`."""
        N, H = D.shape
        w = jnp.where(act, lam * (1.0 - self.slope[idx % H]), 0.0)
        return D.reshape(-1).at[idx].add(w).reshape(N, H)

    def no_weights(self, dtype):
        """`(lam, det_sign)` while no pair slides: zeros and +1."""
        return jnp.zeros((self.max_sliding,), dtype), jnp.ones((), dtype)

    def field(self, theta, P, slots, ties):
        """`(field, lam)`: the pattern-frozen field, or the Filippov field and the
        sliding weights while any pair slides (`lam` is zeros otherwise)."""
        return self._field(theta, P, slots, ties)[:2]

    def weights(self, theta, P, slots, ties):
        """`(lam, det_sign)`: the sliding weights of the pairs in `slots` and the sign of
        their tangency system's determinant (`sliding`; zeros and +1 while none slides)."""
        return self._field(theta, P, slots, ties)[1:]

    def _field(self, theta, P, slots, ties):
        if self.max_sliding == 0:
            return self.grad(theta, self.D_of(P)), *self.no_weights(theta.dtype)
        # (the branches take `P`, not `D`: under `lanes`, gathering every lane's float
        # `D` cost more than the gradient itself in a scratch timing at 1024 lanes)
        return lane_cond(self.lanes, jnp.any(slots >= 0), self._sliding_at, self._frozen_at, theta, P, slots, ties)

    def _sliding_at(self, theta, P, slots, ties):
        return self.sliding(theta, self.D_of(P), slots, ties)

    def _frozen_at(self, theta, P, slots, ties):
        dtype = theta.dtype
        return self.grad(theta, self.D_of(P)), *self.no_weights(dtype)

    def cond_value(self, theta, P, slots, ties, margin):
        """Smallest signed distance to a surface: `s z + margin` over non-sliding kinked
        pairs, and `lam`, `1 - lam` over sliding pairs (`_weights_value`). Positive
        inside the pattern."""
        w = None
        if self.max_sliding:  # (the sliding weights only: no gradient when nothing slides)
            w = lane_cond(
                self.lanes,
                jnp.any(slots >= 0),
                lambda *a: self._sliding_at(*a)[1:],
                lambda *a: self.no_weights(theta.dtype),
                theta,
                P,
                slots,
                ties,
            )
        return self._cond(theta, P, slots, ties, margin, w)

    def crossing_value(self, theta, P, slots, margin):
        """`s z + margin` over non-sliding kinked pairs, smallest: the part of `cond_value`
        that needs no Filippov solve (a forward pass), so never below it."""
        return self._cond(theta, P, slots, None, margin, None)

    def cond_values(self, thetas, args, weights_inside: bool = True, with_weights: bool = False):
        """`cond_value` at each of the states `thetas` (`(k, E)`), with `args = (P, slots,
        ties, margin)`: the crossing part (`crossing_value`, a forward pass each), and
        while pairs slide their weights' part (a Filippov solve each, all under one
        `lane_cond`). A segment checks its steps' ends and interior points in one call
        (`_segment.solve_segment`'s `inside`), so this is compiled once per call site.
        `weights_inside=False`: the weights' part at the last state only (the step's
        end), as from cb3d6ec to 2909e6b, when only the crossing part was checked inside
        steps (with that rule's cost: no Filippov solve at the other states).
        `with_weights`: also return `weights` at the last state, `(values, (lam,
        det_sign))`: the segment's end then needs no Filippov solve of its own."""
        P, slots, ties, margin = args
        crossing = lambda th: self.crossing_value(th, P, slots, margin)  # noqa: E731
        v = crossing(thetas[0])[None] if thetas.shape[0] == 1 else jax.vmap(crossing)(thetas)
        dtype = thetas.dtype
        if not self.max_sliding:
            return (v, self.no_weights(dtype)) if with_weights else v

        def weights(thetas, P, slots, ties):
            # (one point at a time: a vmapped Filippov solve, loops and all, compiled to a
            # program several seconds slower to compile)
            def one(th):
                w = self._sliding_at(th, P, slots, ties)[1:]
                return _weights_value(w, ties[2], slots), w

            values, w = (
                jax.tree.map(lambda a: a[None], one(thetas[0])) if thetas.shape[0] == 1 else jax.lax.map(one, thetas)
            )
            return values, jax.tree.map(lambda a: a[-1], w)

        def none(thetas, P, slots, ties):
            return jnp.full(thetas.shape[:1], jnp.inf, dtype), self.no_weights(dtype)

        at = thetas if weights_inside else thetas[-1:]
        w, last = lane_cond(self.lanes, jnp.any(slots >= 0), weights, none, at, P, slots, ties)
        if not weights_inside:
            w = jnp.concatenate([jnp.full(thetas.shape[0] - 1, jnp.inf, dtype), w])
        return (jnp.minimum(v, w), last) if with_weights else jnp.minimum(v, w)

    def _cond(self, theta, P, slots, ties, margin, w):
        Z = self.Z(theta, self.D_of(P))
        N, H = Z.shape
        sz = jnp.where(P, Z, -Z) + margin
        on = jnp.broadcast_to(self.kinky[None, :], (N, H))
        on = on & ~slot_mask(slots, N, H)
        big = jnp.asarray(jnp.inf, theta.dtype)
        m = jnp.min(jnp.where(on, sz, big))
        if self.max_sliding and w is not None:
            m = jnp.minimum(m, _weights_value(w, ties[2], slots))
        return m

    def cond_and_field(self, theta, P, slots, ties, margin):
        """`(cond_value, field)` with one Filippov solve for both."""
        f, lam, det_sign = self._field(theta, P, slots, ties)
        return self._cond(theta, P, slots, ties, margin, (lam, det_sign)), f

    def rates(self, theta, P, slots, ties):
        """Sliding weights and `dz/dt` of every pair under the field of `(P, slots)`, and
        the sign of the weights' system's determinant (`_weights_value`)."""
        D = self.D_of(P)
        f, lam, det_sign = self._field(theta, P, slots, ties)
        return lam, jax.jvp(lambda y: self.Z(y, D), (theta,), (f,))[1], det_sign
