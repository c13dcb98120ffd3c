"""The fields of a kink-aware flow: the pattern-frozen gradient field, the Filippov
(sliding) field, and the event condition (distance to the nearest surface)."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..losses import get_loss
from ..network import DAGNetwork
from ..solvers import count_evaluations, count_extra

# surfaces whose normals are parallel to within this many machine epsilons (1 - |cos|)
# are one surface (`coincident`)
TIE_TOL = 1e3
# Newton's method on coupled tangency conditions (`KinkProblem._tangency`): at most this
# many steps, until the weights move less than the tolerance
TANGENCY_STEPS = 30
TANGENCY_TOL = 1e-13


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


def _tied_solve(normals, A, b, act):
    """The sliding weights `lam` solving `b + A @ lam = 0` on the occupied slots `act`
    (`A`, `b`: the rows of the tangency conditions `n_k . f = 0`, linear in `lam`).
    Pairs whose surfaces coincide (several samples whose pre-activations are one weight
    times their own input, when the node's other inputs are zero for them) have parallel
    normals, and their equations are one: Filippov's field there is the convex
    combination of the two sides of the one surface, so their weights are tied,
    `lam_l = lam_k` (`1 - lam_k` for opposite normals), and one equation per surface is
    solved. Without such pairs this is `solve(A, -b)`."""
    M = normals.shape[0]
    dtype = normals.dtype
    rep, sign = coincident(normals, act)
    is_rep = act & (rep == jnp.arange(M))
    S = jnp.where(act[:, None] & (rep[:, None] == jnp.arange(M)[None, :]), sign[:, None], 0.0).astype(dtype)
    c = jnp.where(act & (sign < 0), 1.0, 0.0).astype(dtype)  # lam = c + S @ mu
    A2 = jnp.where(is_rep[:, None] & is_rep[None, :], A @ S, jnp.eye(M, dtype=dtype))
    rhs = jnp.where(is_rep, -b - A @ c, 0.0)
    mu = jnp.linalg.solve(A2, rhs)
    return jnp.where(act, c + S @ mu, 0.0)


def _sliding_weights(normals, Fj, f0, act):
    """The sliding weights of the field `f0 + lam @ Fj` (affine in `lam`): `_tied_solve`
    of `n_k . (f0 + lam @ Fj) = 0`."""
    return _tied_solve(normals, normals @ Fj.T, normals @ f0, act)


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

    def Z(self, theta, D):
        return _forward_D(self.net, theta, self.X, D)[1]

    def signal(self, theta, D):
        """`dL / da` of every (sample, hidden node) pair, `(N, H)`: the backpropagated
        signal at each node's output."""
        shift = jnp.zeros(D.shape, theta.dtype)
        return jax.grad(lambda s: self.loss(_forward_D(self.net, theta, self.X, D, s)[0], self.Y))(shift)

    def sliding(self, theta, D, slots):
        """Filippov field for the pairs in `slots` (flat (sample, node) indices, -1 =
        empty): `f(D + lam (1 - slope))` with the sliding weights `lam` solving
        `n_i . f = 0` (n_i = grad z_i). Returns `(field, lam)`.

        Sliding pairs sit on their "off" side (`P = False`, `D = slope`), so `D` is the
        base of the combination. On the surfaces the outputs do not depend on the sliding
        pairs' slopes, so the field is affine in each, `f0 + sum_j lam_j F_j` with
        `F_j = d f / d D_j (1 - slope_j)`, and the weights solve a linear system. The
        JVPs and VJPs run for the occupied slots only (a loop with a dynamic trip count),
        so the cost is `1 + 2k` gradient-equivalents for `k` sliding pairs, whatever
        `max_sliding` is. Two pairs of one sample with one node upstream of the other
        (`coupled`) make the conditions multilinear in `lam`: they are then solved by
        Newton's method (`_tangency`), from the linear solution."""
        N, H = D.shape
        M, E = self.max_sliding, theta.shape[0]
        active = slots >= 0
        order = jnp.argsort(~active, stable=True)  # occupied slots first
        act = active[order]
        idx = jnp.where(act, slots[order], 0)
        k_act = jnp.sum(active)
        # linearised once, outside the loop: the loop body holds only the tangent maps
        # (smaller to compile, and the gradient is not recomputed per slot)
        f0, dgrad = jax.linearize(lambda d: self.grad(theta, d.reshape(N, H)), D.reshape(-1))
        _, vjp = jax.vjp(lambda th: self.Z(th, D).reshape(-1), theta)

        def row(k, rows):
            Fj, normals = rows
            j = idx[k]
            e = jnp.zeros((N * H,), theta.dtype).at[j].set(1.0 - self.slope[j % H])
            Fk = dgrad(e)
            nk = vjp(jnp.zeros((N * H,), theta.dtype).at[j].set(1.0))[0]
            return Fj.at[k].set(Fk), normals.at[k].set(nk)

        zeros = jnp.zeros((M, E), theta.dtype)
        Fj, normals = jax.lax.fori_loop(0, k_act, row, (zeros, zeros))
        count_extra(k_act)  # the k VJPs of z (the k JVPs of the gradient count themselves)
        lam = _sliding_weights(normals, Fj, f0, act)
        lam, f = self._tangency(theta, D, idx, act, normals, lam, f0 + lam @ Fj)
        return f, jnp.zeros((M,), theta.dtype).at[order].set(lam)

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

    def _tangency(self, theta, D, idx, act, normals, lam, f):
        """`(lam, f)`: the sliding weights and the field. Unless the slots are `coupled`,
        the linear solution `(lam, f)` as given. Otherwise Newton's method on the
        tangency conditions `dz_k/dt = 0` of the occupied slots, as functions of their
        weights (normals and field at `_D_at(lam)`), from the linear solution (the box's
        centre where that is not finite). Each step evaluates the rates at `2k + 1` points
        (one gradient and one JVP each, for `k` sliding pairs) and solves the linearised
        conditions with `_tied_solve`; the loop stops when the weights move less than `TANGENCY_TOL`
        (returning the last weights the field was evaluated at, and that field) or after
        `TANGENCY_STEPS` steps. The loop runs no step when the slots are not coupled (under
        `vmap`, none unless a trajectory's are)."""
        M = lam.shape[0]
        k_act = jnp.sum(act)

        def step(carry):
            _, _, lam, _, it = carry

            def point(j, c):  # the rates at lam (j = 0) and at lam +- e_k (j = 2k + 1, 2k + 2)
                R, f = c
                k = (j - 1) // 2
                h = jnp.where(j == 0, 0.0, jnp.where(j % 2 == 1, 1.0, -1.0)).astype(lam.dtype)
                Dl = self._D_at(D, idx, act, lam.at[jnp.maximum(k, 0)].add(h))
                fj = self.grad(theta, Dl)
                u = jax.jvp(lambda th: self.Z(th, Dl), (theta,), (fj,))[1].reshape(-1)
                return R.at[j].set(jnp.where(act, u[idx], 0.0)), jnp.where(j == 0, fj, f)

            R0 = jnp.zeros((2 * M + 1, M), lam.dtype)
            R, f = jax.lax.fori_loop(0, 2 * k_act + 1, point, (R0, jnp.zeros_like(theta)))
            # the rates are quadratic in each weight (a normal and a gradient, each affine
            # in it), so central differences give the Jacobian exactly
            J = ((R[1::2] - R[2::2]) / 2.0).T
            new = _tied_solve(normals, J, R[0] - J @ lam, act)
            return lam, f, new, jnp.max(jnp.abs(new - lam)), it + 1

        start = jnp.where(jnp.all(jnp.isfinite(lam)), jnp.clip(lam, 0.0, 1.0), jnp.where(act, 0.5, 0.0))
        go = jnp.where(self.coupled(idx, act), jnp.inf, 0.0).astype(lam.dtype)
        init = (lam, f, start, go, jnp.asarray(0))
        lam, f, _, _, _ = jax.lax.while_loop(lambda c: (c[3] > TANGENCY_TOL) & (c[4] < TANGENCY_STEPS), step, init)
        return lam, f

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
        lam = None
        if self.max_sliding:  # (the sliding weights only: no gradient when nothing slides)
            D = self.D_of(P)
            lam = jax.lax.cond(
                jnp.any(slots >= 0),
                lambda: self.sliding(theta, D, slots)[1],
                lambda: jnp.zeros((self.max_sliding,), theta.dtype),
            )
        return self._cond(theta, P, slots, margin, lam)

    def _cond(self, theta, P, slots, margin, lam):
        Z = self.Z(theta, self.D_of(P))
        N, H = Z.shape
        sz = jnp.where(P, Z, -Z) + margin
        on = jnp.broadcast_to(self.kinky[None, :], (N, H))
        on = on & ~slot_mask(slots, N, H)
        big = jnp.asarray(jnp.inf, theta.dtype)
        m = jnp.min(jnp.where(on, sz, big))
        if self.max_sliding:
            act = slots >= 0
            m = jnp.minimum(m, jnp.min(jnp.where(act, jnp.minimum(lam, 1.0 - lam), big)))
        return m

    def cond_and_field(self, theta, P, slots, margin):
        """`(cond_value, field)` with one Filippov solve for both."""
        f, lam = self.field(theta, P, slots)
        return self._cond(theta, P, slots, margin, lam), f

    def rates(self, theta, P, slots):
        """Sliding weights and `dz/dt` of every pair under the field of `(P, slots)`."""
        D = self.D_of(P)
        f, lam = self.field(theta, P, slots)
        return lam, jax.jvp(lambda y: self.Z(y, D), (theta,), (f,))[1]
