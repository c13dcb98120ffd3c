"""Losses on a data set: MSE (the default) and binary cross-entropy on logits.

`L(theta) = (1/2N) sum_i ||f(x_i) - y_i||^2` for MSE, so gradient flow
`dtheta/dt = -grad L` runs on the time scale this normalisation fixes.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, ArrayLike, Float
from scipy.special import roots_hermitenorm

from ._checks import check_finite

__all__ = [
    "LOSSES",
    "mse",
    "bce",
    "get_loss",
    "network_loss",
    "loss_gradient",
    "hessian",
    "hessian_spectrum",
    "gauss_hermite",
    "weighted_mse",
    "population_loss",
    "check_data",
    "edge_loss_fn",
    "require_smooth",
    "hessian_fn",
    "gradient_fn",
]


def mse(pred: Float[Array, "N d"], Y: Float[Array, "N d"]) -> Float[Array, ""]:
    """`(1/2N) sum_i ||pred_i - y_i||^2`."""
    return 0.5 * jnp.sum((pred - Y) ** 2) / pred.shape[0]


def bce(logits: Float[Array, "N d"], Y: Float[Array, "N d"]) -> Float[Array, ""]:
    """Mean binary cross-entropy on logits, labels in {0, 1}; averaged over samples and
    outputs. Numerically stable: `softplus(z) - y z`."""
    return jnp.mean(jax.nn.softplus(logits) - Y * logits)


LOSSES = {"mse": mse, "bce": bce}


def get_loss(loss):
    """A loss by name (`"mse"`, `"bce"`) or a callable `(pred, Y) -> scalar`."""
    if callable(loss):
        return loss
    if loss not in LOSSES:
        raise ValueError(f"Unknown loss {loss!r}; choose one of {sorted(LOSSES)} or pass a callable.")
    return LOSSES[loss]


def network_loss(net, X, Y, loss="mse") -> Float[Array, ""]:
    """The loss of `net` on data `(X, Y)`; `Y` has shape `(N, d_out)`."""
    return get_loss(loss)(net.forward(X), Y)


def edge_loss_fn(net, X, Y, loss="mse"):
    """`theta -> L(theta)`: the loss as a function of the edge weights (in `graph.edges`
    order), with `net` supplying the graph and activation. Differentiate this one: its
    gradient has exactly one entry per edge."""
    fn = get_loss(loss)

    def L(theta):
        return fn(net.with_edge_weights(theta).forward(X), Y)

    return L


def check_data(graph, X: ArrayLike, Y: ArrayLike) -> tuple[Array, Array]:
    """Validate and shape data: returns `X` as `(N, n_in)` and `Y` as `(N, n_out)`.
    A 1-D `Y` is accepted for one output. Raises `ValueError` naming the problem (a
    non-finite value: `eqx.error_if` with the same words under `jit`)."""
    X = jnp.asarray(X)
    Y = jnp.asarray(Y)
    if X.ndim == 1 and graph.n_in == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[1] != graph.n_in:
        raise ValueError(
            f"X has shape {X.shape}; expected (N, {graph.n_in}): one row per sample, one column "
            "per data input (constant/bias nodes excluded)."
        )
    if Y.ndim == 1 and graph.n_out == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or Y.shape[1] != graph.n_out:
        raise ValueError(f"Y has shape {Y.shape}; expected (N, {graph.n_out}), one column per output.")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} samples but Y has {Y.shape[0]}; they must match.")
    if X.shape[0] == 0:
        raise ValueError("The data set is empty; pass at least one sample.")
    X = check_finite(X, "is not finite; clean or drop that sample.", where="X[{index}] ")
    Y = check_finite(Y, "is not finite; clean or drop that sample.", where="Y[{index}] ")
    return X, Y


# ------------------------------------------------------------------ derivatives

_NON_SMOOTH_WHY = (
    "is not smooth: it is piecewise linear, so the loss Hessian is zero almost everywhere "
    "and undefined on the kinks z = 0, where the curvature actually sits"
)


def require_smooth(net, tool: str) -> None:
    """Raise `ValueError` unless every activation of `net` is smooth (softplus, erf, g, ...)."""
    bad = [a.name for a in net.activations if not a.smooth]
    if bad:
        raise ValueError(
            f"{tool} needs a smooth activation; {bad} {_NON_SMOOTH_WHY}. Use a smooth "
            "activation such as 'softplus', 'erf', 'g', 'tanh' or 'gelu'."
        )


def loss_gradient(net, X, Y, *, loss="mse") -> tuple[Float[Array, ""], Float[Array, " E"]]:
    """The loss and its gradient with respect to the edge weights.

    **Arguments:** `net` (a `DAGNetwork`), data `X`, `Y`; `loss` as in `get_loss`.

    **Returns:** `(L, grad)` with `grad` ordered as `net.graph.edges`.
    """
    X, Y = check_data(net.graph, X, Y)
    return _value_and_grad(net, X, Y, loss)


def _jit(f):
    # compiled once per graph/activation/loss: eager Hessians are slow
    return eqx.filter_jit(f)


@_jit
def _value_and_grad(net, X, Y, loss):
    return jax.value_and_grad(edge_loss_fn(net, X, Y, loss))(net.edge_weights())


@_jit
def _hessian(net, X, Y, loss):
    H = jax.hessian(edge_loss_fn(net, X, Y, loss))(net.edge_weights())
    return 0.5 * (H + H.T)


def hessian(net, X, Y, *, loss="mse") -> Float[Array, "E E"]:
    """The Hessian of the loss with respect to the edge weights (`graph.edges` order).

    **Arguments:** `net` (a `DAGNetwork` with smooth activations), data `X`, `Y`; `loss`.

    **Returns:** the symmetric `(E, E)` matrix. Raises `ValueError` for ReLU-like nets,
    whose Hessian is zero almost everywhere and undefined on the kinks.
    """
    require_smooth(net, "hessian")
    X, Y = check_data(net.graph, X, Y)
    return _hessian(net, X, Y, loss)


def hessian_spectrum(net, X, Y, *, loss="mse"):
    """Eigenvalues (ascending) and eigenvectors (columns) of `hessian(net, X, Y)`, by
    `jnp.linalg.eigh`. The top eigenvalue `eigenvalues[-1]` is the sharpness.

    **Returns:** `jnp.linalg.eigh`'s `(eigenvalues, eigenvectors)`.
    """
    return jnp.linalg.eigh(hessian(net, X, Y, loss=loss))


# ------------------------------------------------------------------ population losses


def gauss_hermite(dim: int, n_points: int = 64) -> tuple[Float[Array, "M dim"], Float[Array, " M"]]:
    """Gauss-Hermite nodes and weights for `E[f(x)]`, `x ~ N(0, I_dim)`: a tensor grid
    of `n_points**dim` nodes whose weights sum to 1 (`sum_m w_m f(x_m)`).

    **Arguments:** `dim` (1 or 2: a tensor grid in more dimensions is too large to be
    accurate and cheap, so it is refused), `n_points` per dimension.

    **Returns:** `(X, weights)`.
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer; got {dim!r}.")
    if dim > 2:
        raise ValueError(
            f"Gauss-Hermite quadrature is supported for input dimension 1 or 2; got dim={dim}. "
            "A tensor grid grows like n_points**dim. Use the closed forms (one-hidden-layer "
            "erf or relu nets without bias: method='closed') or Monte Carlo samples instead."
        )
    if not isinstance(n_points, int) or n_points < 2:
        raise ValueError(f"n_points must be an integer >= 2; got {n_points!r}.")
    x, w = roots_hermitenorm(n_points)  # weight exp(-x^2/2); stable for large n_points
    w = w / w.sum()
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    ws = np.meshgrid(*([w] * dim), indexing="ij")
    X = np.stack([g.ravel() for g in grids], axis=1)
    W = np.prod(np.stack([g.ravel() for g in ws], axis=1), axis=1)
    return jnp.asarray(X), jnp.asarray(W)


def weighted_mse(weights):
    """A loss `(pred, Y) -> (1/2) sum_m w_m ||pred_m - y_m||^2` for quadrature data; with
    `gauss_hermite` nodes this is the population MSE and can be passed to
    `gradient_flow(..., loss=weighted_mse(w))`."""
    weights = jnp.asarray(weights)

    def loss(pred, Y):
        return 0.5 * jnp.sum(weights[:, None] * (pred - Y) ** 2)

    return loss


def _one_hidden_layer(net, role: str):
    """`(W (H, d), A (H, k))` of a one-hidden-layer net without bias, else ValueError."""
    g = net.graph
    n_in, H = len(g.inputs), len(g.hidden)
    if g.constants:
        raise ValueError(
            f"The closed-form population loss needs {role} without bias edges (constant "
            f"node(s) {list(g.constants)}): Gaussian expectations of erf/relu with offsets "
            "have no closed form. Use method='quadrature' (input dimension <= 2)."
        )
    rows, cols = g.edge_index
    kind = lambda k: 0 if k < n_in else (1 if k < n_in + H else 2)  # noqa: E731
    if any((kind(r), kind(c)) != (kind(r), kind(r) + 1) for r, c in zip(np.asarray(rows), np.asarray(cols))):
        raise ValueError(
            f"The closed-form population loss needs {role} with one hidden layer (every edge "
            "input -> hidden or hidden -> output). Use method='quadrature' for other graphs."
        )
    acts = net.activations
    if len(acts) != 1 or acts[0].name not in ("erf", "relu"):
        raise ValueError(
            f"Closed forms exist for erf (arcsine formula) and relu (arc-cosine kernel); "
            f"{role} uses {[a.name for a in acts]}. Use method='quadrature'."
        )
    Wfull = net.weights
    return Wfull[:n_in, n_in : n_in + H].T, Wfull[n_in : n_in + H, n_in + H :], acts[0].name


def _gauss_kernel(U, V, name):
    """`E[sigma(u.x) sigma(v.x)]`, x ~ N(0, I), for all rows u of U and v of V."""
    uv = U @ V.T
    nu = jnp.sum(U**2, axis=1)[:, None]
    nv = jnp.sum(V**2, axis=1)[None, :]
    if name == "erf":  # Williams (1997): (2/pi) arcsin(2 u.v / sqrt((1 + 2|u|^2)(1 + 2|v|^2)))
        return (2 / jnp.pi) * jnp.arcsin(2 * uv / jnp.sqrt((1 + 2 * nu) * (1 + 2 * nv)))
    # relu, Cho & Saul (2009): |u||v| (sin t + (pi - t) cos t) / (2 pi)
    norms = jnp.sqrt(nu * nv)
    cos = jnp.clip(uv / jnp.where(norms > 0, norms, 1.0), -1.0, 1.0)
    t = jnp.arccos(cos)
    return norms * (jnp.sqrt(1 - cos**2) + (jnp.pi - t) * cos) / (2 * jnp.pi)


def population_loss(net, target, *, method: str = "auto", n_points: int = 64) -> Float[Array, ""]:
    """The population MSE `(1/2) E ||f(x) - y(x)||^2` for inputs `x ~ N(0, I)`.

    **Arguments:**

    - `net`: the student `DAGNetwork`.
    - `target`: a teacher `DAGNetwork` on the same inputs and outputs, or a callable
        `X (M, d) -> Y (M, k)` (or `(M,)` for one output).
    - `method`: `"closed"` (one-hidden-layer erf or relu nets without bias, student and
        teacher alike: arcsine formula / arc-cosine kernel), `"quadrature"`
        (Gauss-Hermite, input dimension 1 or 2), or `"auto"` (closed when possible).
    - `n_points`: quadrature nodes per dimension.

    **Returns:** the scalar loss; differentiable in the student's weights.
    """
    d = net.graph.n_in
    teacher = target if hasattr(target, "graph") and hasattr(target, "forward") else None
    if method not in ("auto", "closed", "quadrature"):
        raise ValueError(f"method must be 'auto', 'closed' or 'quadrature'; got {method!r}.")
    if teacher is None and not callable(target):
        raise TypeError(f"target must be a DAGNetwork or a callable X -> Y; got {type(target).__name__}.")
    if teacher is not None and (teacher.graph.n_in != d or teacher.graph.n_out != net.graph.n_out):
        raise ValueError(
            f"Teacher has {teacher.graph.n_in} inputs / {teacher.graph.n_out} outputs; the student "
            f"has {d} / {net.graph.n_out}. They must match."
        )
    if method == "auto":
        try:
            _one_hidden_layer(net, "the student")
            if teacher is None:
                raise ValueError
            s_name = net.activations[0].name
            if _one_hidden_layer(teacher, "the teacher")[2] != s_name:
                raise ValueError
            method = "closed"
        except ValueError:
            method = "quadrature"
    if method == "closed":
        if teacher is None:
            raise ValueError("method='closed' needs a teacher DAGNetwork as target, not a callable.")
        Ws, As, name = _one_hidden_layer(net, "the student")
        Wt, At, tname = _one_hidden_layer(teacher, "the teacher")
        if tname != name:
            raise ValueError(f"Closed form needs one activation for both nets; student {name}, teacher {tname}.")
        Kss, Kst, Ktt = _gauss_kernel(Ws, Ws, name), _gauss_kernel(Ws, Wt, name), _gauss_kernel(Wt, Wt, name)
        return 0.5 * (jnp.sum(As * (Kss @ As)) - 2 * jnp.sum(As * (Kst @ At)) + jnp.sum(At * (Ktt @ At)))
    Xq, wq = gauss_hermite(d, n_points)
    Yq = teacher.forward(Xq) if teacher is not None else jnp.asarray(target(Xq))
    if Yq.ndim == 1:
        Yq = Yq[:, None]
    return weighted_mse(wq)(net.forward(Xq), Yq)


# ------------------------------------------------------------------ fast exact Hessian


@functools.lru_cache(maxsize=64)
def _layer_index(graph):
    """Static index arrays of a one-hidden-layer, one-output graph (hidden nodes read
    only inputs, the output reads hidden nodes and inputs), or `None`."""
    if graph.n_out != 1 or not graph.hidden:
        return None
    inputs, hidden = list(graph.inputs), list(graph.hidden)
    pin, hid = {u: k for k, u in enumerate(inputs)}, {v: k for k, v in enumerate(hidden)}
    e_in, p_in, j_in, e_out, j_out, e_skip, p_skip = ([] for _ in range(7))
    for e, (u, v) in enumerate(graph.edges):
        if v in hid and u in pin:
            e_in.append(e)
            p_in.append(pin[u])
            j_in.append(hid[v])
        elif v in hid:
            return None  # hidden -> hidden: deeper than one layer
        elif u in hid:
            e_out.append(e)
            j_out.append(hid[u])
        else:
            e_skip.append(e)
            p_skip.append(pin[u])
    # pairs of first-layer edges into the same hidden node (the sigma'' block)
    m, n = np.nonzero(np.asarray(j_in)[:, None] == np.asarray(j_in)[None, :])
    # first-layer edge and the out-edge of the same hidden node (the sigma' block)
    out_of = {j: e for e, j in zip(e_out, j_out)}
    io = [(k, out_of[j]) for k, j in enumerate(j_in) if j in out_of]
    data = {u: k for k, u in enumerate(graph.data_inputs)}
    cols = [data.get(u, -1) for u in inputs]  # -1: a constant (bias) node
    a = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return dict(
        e_in=a(e_in),
        p_in=a(p_in),
        j_in=a(j_in),
        e_out=a(e_out),
        j_out=a(j_out),
        e_skip=a(e_skip),
        p_skip=a(p_skip),
        pair_m=a(m),
        pair_n=a(n),
        io_in=a([k for k, _ in io]),
        io_out=a([e for _, e in io]),
        cols=cols,
        n_hidden=len(hidden),
        n_inputs=len(inputs),
    )


def _structured_parts(net, X, Y, s, theta):
    dtype = theta.dtype
    act = net.activation
    Xt = jnp.stack([X[:, c].astype(dtype) if c >= 0 else jnp.ones(X.shape[0], dtype) for c in s["cols"]], axis=1)
    W1 = jnp.zeros((s["n_inputs"], s["n_hidden"]), dtype).at[s["p_in"], s["j_in"]].set(theta[s["e_in"]])
    a = jnp.zeros(s["n_hidden"], dtype).at[s["j_out"]].set(theta[s["e_out"]])
    skip = jnp.zeros(s["n_inputs"], dtype).at[s["p_skip"]].set(theta[s["e_skip"]])
    Z = Xt @ W1
    S, S1 = jax.jvp(act, (Z,), (jnp.ones_like(Z),))
    e = S @ a + Xt @ skip - Y[:, 0].astype(dtype)
    return Xt, a, Z, S, S1, e


def _structured_grad(net, X, Y, s):
    """The MSE gradient of a one-hidden-layer network, `J^T e / N`, without forming `J`."""

    def grad(theta):
        Xt, a, Z, S, S1, e = _structured_parts(net, X, Y, s, theta)
        N = X.shape[0]
        g = jnp.zeros(theta.shape, theta.dtype)
        G1 = Xt.T @ (S1 * e[:, None])
        g = g.at[s["e_in"]].set(G1[s["p_in"], s["j_in"]] * a[s["j_in"]])
        g = g.at[s["e_out"]].set((S.T @ e)[s["j_out"]])
        g = g.at[s["e_skip"]].set((Xt.T @ e)[s["p_skip"]])
        return g / N

    return grad


def _structured_hessian(net, X, Y, s):
    """The exact MSE Hessian of a one-hidden-layer network from its structure:
    `H = (1/N) (J^T J + sum_i e_i d^2 f_i)`, `J` the per-sample Jacobian of the output
    (a product of activations and back-propagated derivatives, one matrix product), and
    `d^2 f_i` nonzero only in the blocks (w_j, w_j) = `a_j sigma''(z_j) x x^T` and
    (w_j, a_j) = `sigma'(z_j) x`. `sigma'`, `sigma''` come from autodiff of the activation."""
    act = net.activation
    E = net.n_edges

    def H(theta):
        dtype = theta.dtype
        Xt, a, Z, S, S1, e = _structured_parts(net, X, Y, s, theta)
        S2 = jax.jvp(lambda z: jax.jvp(act, (z,), (jnp.ones_like(z),))[1], (Z,), (jnp.ones_like(Z),))[1]
        N = X.shape[0]
        J = jnp.zeros((N, E), dtype)
        J = J.at[:, s["e_in"]].set(a[s["j_in"]] * S1[:, s["j_in"]] * Xt[:, s["p_in"]])
        J = J.at[:, s["e_out"]].set(S[:, s["j_out"]])
        J = J.at[:, s["e_skip"]].set(Xt[:, s["p_skip"]])
        R = jnp.zeros((E, E), dtype)
        # (w_j, w_j): a_j sum_i e_i sigma''(z_ij) x_ip x_iq
        T = jnp.einsum("ij,ip,iq->jpq", e[:, None] * S2, Xt, Xt)
        jm = s["j_in"][s["pair_m"]]
        R = R.at[s["e_in"][s["pair_m"]], s["e_in"][s["pair_n"]]].add(
            a[jm] * T[jm, s["p_in"][s["pair_m"]], s["p_in"][s["pair_n"]]]
        )
        # (w_j, a_j): sum_i e_i sigma'(z_ij) x_ip, both triangles
        U = jnp.einsum("ij,ip->jp", e[:, None] * S1, Xt)
        ji, pi = s["j_in"][s["io_in"]], s["p_in"][s["io_in"]]
        R = R.at[s["e_in"][s["io_in"]], s["io_out"]].add(U[ji, pi])
        R = R.at[s["io_out"], s["e_in"][s["io_in"]]].add(U[ji, pi])
        return (J.T @ J + R) / N

    return H


def hessian_fn(net, X, Y, loss="mse"):
    """`theta -> H(theta)`, the exact Hessian of the loss in the edge weights
    (`graph.edges` order), as a traceable function.

    For MSE on a one-hidden-layer network with one output and one activation (the
    flat-channels studies' networks) it is assembled from the structure (Gauss-Newton
    term `J^T J / N` plus the exact residual term, see `_structured_hessian`): on the
    paper's 101 x 101 grid this costs about a gradient, where `jax.hessian` costs about
    `E` of them (`benchmarks/converge_cost.py`). Otherwise `jax.hessian`. Both are the
    same matrix up to round-off (`tests/test_converge.py` checks it). `X`, `Y` as
    returned by `check_data`.
    """
    s = _structure(net, loss)
    if s is None:
        return jax.hessian(edge_loss_fn(net, X, Y, loss))
    return _structured_hessian(net, X, Y, s)


def _structure(net, loss):
    """The one-hidden-layer index arrays when the structured formulas apply, else None."""
    if not (isinstance(loss, str) and loss == "mse") or isinstance(net.activation, tuple):
        return None
    if not net.activation.smooth:
        return None
    return _layer_index(net.graph)


def gradient_fn(net, X, Y, loss="mse"):
    """`theta -> grad L(theta)` whose derivative in `theta` (a JVP, `jax.jacfwd`, an
    implicit solver's Jacobian) is `hessian_fn(net, X, Y, loss)(theta) @ tangent`: one
    Hessian evaluation per Jacobian instead of one reverse pass per edge. Derivatives in
    the data `X`, `Y` (when they carry tangents) are taken by plain autodiff. Where the
    structured formulas do not apply (see `hessian_fn`), plain `jax.grad`: a Hessian from
    `jax.hessian` would cost a reverse pass per edge for every single JVP."""
    s = _structure(net, loss)
    if s is None:
        return jax.grad(edge_loss_fn(net, X, Y, loss))

    def plain(theta, X, Y):
        return _structured_grad(net, X, Y, s)(theta)

    @jax.custom_jvp
    def grad(theta, X, Y):
        return plain(theta, X, Y)

    def _jvp(primals, tangents):
        theta, X, Y = primals
        dtheta, dX, dY = tangents
        out = plain(theta, X, Y)
        zero = lambda t: isinstance(t, SymbolicZero)  # noqa: E731
        if zero(dtheta):
            d = jnp.zeros_like(out)
        else:
            d = _structured_hessian(net, X, Y, s)(theta) @ dtheta
        if not (zero(dX) and zero(dY)):
            dX = jnp.zeros_like(X) if zero(dX) else dX
            dY = jnp.zeros_like(Y) if zero(dY) else dY
            d = d + jax.jvp(lambda X, Y: plain(theta, X, Y), (X, Y), (dX, dY))[1]
        return out, d

    grad.defjvp(_jvp, symbolic_zeros=True)
    return lambda theta: grad(theta, X, Y)
