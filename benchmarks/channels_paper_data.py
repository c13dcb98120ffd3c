"""The flat-channels paper's committed data (flavio-martinelli/channels-to-infinity,
`paper_data/plots_csv/`) against this package, row by row.

- The toy model's loss at infinity (`loss_at_infinity.csv`, Fig. 6c): their `(w, loss)`
  against ours, `ij.channels.toy_limit_loss(w)` (the two-neuron net collapsed to its GLU
  limit with optimal `(c, a)`, population loss by Gauss-Hermite), in the paper's units
  (MLPGradientFlow's `(1/N) sum (f - y)^2`, twice our `L`), at every `--stride`-th row.
- The toy's optima (`loss_at_infinity_optima.csv`: saddle line, channel 1, channel 2):
  their `w` and loss against the critical points of our `L0(w)` (`toy_critical_points`).
- The curves along a channel (`acurve`, `ccurve`, `simcurve`, `approxcurve`,
  `losscurve`, `maxeigvals`, Fig. 5): the network they come from is not committed (the
  authors' `plots_csv.jl` says the script that writes them "is not yet included"), so we
  cannot start from their point. We test their curves against the theory this package
  implements: `c`, `a`, `cos(Delta, w)` converge as `eps -> 0`, `loss - loss_inf ~ eps^2`,
  the GLU approximation error `~ eps^2`, and `lambda_max ~ 1/eps^2` (log-log slopes in
  `1/eps`: 0, 0, 0, -2, -2, 2). This is a weaker comparison, and the JSON says so.
- Fig. 6a-b (`function.csv`, `losslandscape.csv`, `projected_dynamics.csv`). The plane and
  the start points are in `paper_data/edge_of_stability/initialization.dat` (a Julia
  `Serialization` of `(p, v2, ls)`, read by `_julia_serialization.py` and checked):
  `ls = LinearSubspace(ref, v1, v2)`, `ref` the saddle point `(w*, w*, a*/2, a*/2)`,
  `v1 = (0, 0, 1, -1)/sqrt2` along the saddle line, `v2` the perturbation direction;
  MLPGradientFlow's `to_local_coords` gives `gamma = v1.(theta - ref)`, `proj =
  v2.(theta - ref)`. `function.csv`: every row against our GLU `c s(wx) + a x s'(wx)` at
  our critical points of `L0`. `losslandscape.csv`: their `subspace_minloss` (the loss at
  `ref + gamma v1 + proj v2` minimised over the plane's 2-D orthogonal complement), every
  `--stride`-th row tabled, all rows in the max. `projected_dynamics.csv`: gradient flow
  (Kvaerno5) from their `p` and `p + 2 v2` on the population loss and on 4096 samples, and
  `ij.fit` with SGD / Adam; the CSV stores no times, so the curves are compared as point sets
  (distance of each of their rows to our polyline, Hausdorff distance, end points, the
  channel reached). Their finite sample (Julia's RNG) and their SGD / Adam settings are not
  committed: those rows are compared for the channel they reach only.

The data are read at run time from a local git mirror of the authors' repository
(`--repo`, its git directory), never copied here; the JSON records the commit read.

Usage: python benchmarks/channels_paper_data.py --repo /path/to/channels-to-infinity.git [--stride 100]
    [--sgd LR,BATCH,EPOCHS] [--adam LR,BATCH,EPOCHS] [--out benchmarks/results/channels_paper_data.json]
    (the PNG of Fig. 6a-b, theirs against ours, goes beside the JSON)
"""

from __future__ import annotations

import argparse
import io
import subprocess
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402

CURVES = {"ccurve": 0.0, "acurve": 0.0, "simcurve": 0.0, "approxcurve": -2.0, "losscurve": -2.0, "maxeigvals": 2.0}
"""Each curve's log-log slope against `1/eps` that the theory predicts."""


def _read(repo: str, commit: str, path: str) -> np.ndarray:
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    return np.loadtxt(io.StringIO(text), skiprows=1, delimiter=None if " " in text.splitlines()[1] else ",")


def _loss_at_infinity(repo, commit, stride, n_points):
    data = _read(repo, commit, "paper_data/plots_csv/loss_at_infinity.csv")
    ours = np.asarray(
        jax.jit(jax.vmap(lambda w: 2 * ch.toy_limit_loss(w, n_points=n_points)[0]))(jnp.asarray(data[:, 0]))
    )
    diff = ours - data[:, 1]
    rows = [
        dict(w=float(data[i, 0]), theirs=float(data[i, 1]), ours=float(ours[i]), diff=float(diff[i]))
        for i in range(0, len(data), stride)
    ]
    return dict(
        n_rows=int(len(data)),
        max_abs_diff=float(np.max(np.abs(diff))),
        max_rel_diff=float(np.max(np.abs(diff) / np.abs(data[:, 1]))),
        w_range=[float(data[0, 0]), float(data[-1, 0])],
        rows=rows,
        their_argmin_w=float(data[np.argmin(data[:, 1]), 0]),
        their_min=float(data[:, 1].min()),
        our_argmin_w=float(data[np.argmin(ours), 0]),
        our_min=float(ours.min()),
    )


def _optima(repo, commit, n_points):
    data = _read(repo, commit, "paper_data/plots_csv/loss_at_infinity_optima.csv")
    cps = ch.toy_critical_points(n_points=n_points)
    names = ("saddle line", "channel 1", "channel 2")
    rows = []
    for name, (w, loss) in zip(names, data):
        real = [k for k, kind in enumerate(cps.kind) if kind != "h = 0" and cps.w[k] > 0]
        k = min(real, key=lambda j: abs(cps.w[j] - w))  # our nearest critical point
        rows.append(
            dict(
                point=name,
                w_theirs=float(w),
                w_ours=float(cps.w[k]),
                loss_theirs=float(loss),
                loss_ours=float(2 * cps.loss[k]),
                kind_ours=cps.kind[k],
                h_ours=float(cps.h[k]),
            )
        )
    return rows


def _curves(repo, commit):
    out = {}
    for name, slope in CURVES.items():
        d = _read(repo, commit, f"paper_data/plots_csv/{name}.csv")
        x, y = d[:, 0], d[:, 1]
        keep = y != 0  # losscurve's last row is exactly 0 (below float64 resolution of loss - loss_inf)
        if slope == 0.0:
            fit = dict(
                relative_change_last_two=float(abs(y[-1] - y[-2]) / abs(y[-1])),
                relative_change_total=float(abs(y[-1] - y[0]) / abs(y[-1])),
            )
        else:
            p = np.polyfit(np.log(x[keep]), np.log(np.abs(y[keep])), 1)
            last = np.diff(np.log(np.abs(y[keep])))[-1] / np.diff(np.log(x[keep]))[-1]
            fit = dict(fitted_slope=float(p[0]), last_segment_slope=float(last))
        out[name] = dict(
            predicted_slope=slope,
            rows=[dict(inv_eps=float(a), y=float(b)) for a, b in zip(x, y)],
            dropped_zero_rows=int((~keep).sum()),
            **fit,
        )
    return out


# ---------------------------------------------------------------------------------------
# Fig. 6a-b: the landscape, the trajectories and the functions
# ---------------------------------------------------------------------------------------

INIT_PATH = "paper_data/edge_of_stability/initialization.dat"
INIT_OFFSETS = dict(p=0x16E, v2=0x19C, ref=0x217, v1=0x245, ls_v2=0x273)
"""Byte offsets of the five Float64 4-vectors in `initialization.dat` (Julia `Serialization`
of the tuple `(p, v2, ls)`, `ls` an MLPGradientFlow `LinearSubspace(ref, v1, v2, u, b)`), as
this script read them before `_julia_serialization.py` existed; `tests/test_julia_serialization.py`
checks that the reader gives the same bytes. The parameters are ordered `(w1, w2, a1, a2)` as
in this package's `toy_network`."""

NOT_READ = {
    "paper_data/fig1A_saddle_perturbation/**/res_*.dat": "Julia Serialization of whole MLPGradientFlow "
    "result dictionaries (Fig. 2(c, d)); compared by benchmarks/channels_saddle_split.py.",
    "paper_data/scaling/*.jld2": "JLD2 (HDF5); compared by benchmarks/channels_paper_run.py.",
}

TRAJECTORIES = ("saddle", "i1", "i2", "1", "2", "sgd1", "sgd2", "adam1", "adam2")


def _read_bytes(repo: str, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, check=True).stdout


def _read_csv(repo, commit, path):
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    head = text.splitlines()[0]
    sep = "," if "," in head else None
    names = head.split(sep)
    return names, np.loadtxt(io.StringIO(text), skiprows=1, delimiter=sep)


def _initialization(repo, commit):
    import _julia_serialization as js

    p, v2, ls = js.read(_read_bytes(repo, commit, INIT_PATH))
    vec = lambda x: np.asarray(x.fields["data"] if isinstance(x, js.JlStruct) else x, float).ravel()  # noqa: E731
    v = dict(p=vec(p), v2=vec(v2), ref=vec(ls.fields["ref"]), v1=vec(ls.fields["v1"]), ls_v2=vec(ls.fields["v2"]))
    s = 1 / np.sqrt(2.0)
    assert np.allclose(np.abs(v["v1"]), [0, 0, s, s], rtol=0, atol=1e-15), v["v1"]
    assert abs(np.linalg.norm(v["v2"]) - 1) < 1e-12 and np.allclose(v["v2"], v["ls_v2"], rtol=0, atol=1e-13)
    assert abs(v["ref"][0] - v["ref"][1]) < 1e-9 and v["ref"][2] == v["ref"][3], v["ref"]
    return v


def _coords(theta, init):
    """`(gamma, proj)`: MLPGradientFlow's `to_local_coords(ls, theta) = u[:, 1:2]' (ref - theta)`;
    `u[:, 1:2] = -(v1, v2)` (the SVD of `[2 v1, v2]`), so `gamma = v1 . (theta - ref)`,
    `proj = v2 . (theta - ref)`."""
    d = np.asarray(theta) - init["ref"]
    return np.stack([d @ init["v1"], d @ init["ls_v2"]], axis=-1)


def _point_to_curve(P, Q):
    """Euclidean distance in the (gamma, proj) plane from each point of `P` (n, 2) to the
    polyline `Q` (m, 2)."""
    if len(Q) == 1:
        return np.linalg.norm(P - Q[0], axis=1)
    A, AB = Q[:-1], np.diff(Q, axis=0)
    AP = P[:, None, :] - A[None]
    den = np.sum(AB * AB, axis=1)
    t = np.clip(np.sum(AP * AB[None], axis=2) / np.where(den > 0, den, 1.0), 0.0, 1.0)
    t = np.where(den > 0, t, 0.0)
    return np.min(np.linalg.norm(AP - t[..., None] * AB[None], axis=2), axis=1)


def _compare_curve(theirs, ours, *, cut_at_their_end: bool):
    """Their curve against ours as point sets (the CSV stores no times)."""
    if cut_at_their_end:  # ours runs on past their last gamma: compare the common stretch
        past = np.nonzero(ours[:, 0] > theirs[-1, 0])[0]
        if len(past):
            k = past[0]
            frac = (theirs[-1, 0] - ours[k - 1, 0]) / (ours[k, 0] - ours[k - 1, 0])
            ours = np.vstack([ours[:k], ours[k - 1] + frac * (ours[k] - ours[k - 1])])
    d_theirs = _point_to_curve(theirs, ours)
    d_ours = _point_to_curve(ours, theirs)
    covered = theirs[:, 0] <= ours[:, 0].max() * (1 + 1e-12) if cut_at_their_end else np.ones(len(theirs), bool)
    return dict(
        n_rows=int(len(theirs)),
        rows_covered=int(covered.sum()),
        start_theirs=theirs[0].tolist(),
        start_ours=ours[0].tolist(),
        start_distance=float(np.linalg.norm(theirs[0] - ours[0])),
        end_theirs=theirs[-1].tolist(),
        end_ours=ours[-1].tolist(),
        end_distance_to_our_curve=float(d_theirs[-1]),
        max_distance_theirs_to_ours=float(d_theirs[covered].max()),
        max_distance_ours_to_theirs=float(d_ours.max()),
        hausdorff=float(max(d_theirs[covered].max(), d_ours.max())),
        rows=[
            dict(row=i, gamma=float(theirs[i, 0]), proj=float(theirs[i, 1]), distance=float(d_theirs[i]))
            for i in range(len(theirs))
        ],
    )


def _population(n_points):
    X, Y, loss = ch.toy_data(n_points)
    _, q = ij.gauss_hermite(1, n_points)
    return X, Y, loss, q


def _flow_curve(theta0, X, Y, loss, *, t1, max_norm, n_save, solver_rtol, max_steps):
    net = ch.toy_network(*[float(t) for t in theta0])
    ts = np.concatenate([[0.0], np.geomspace(1e-4, t1, n_save - 1)])
    flow = ij.gradient_flow(
        net,
        X,
        Y,
        t1,
        solver=ij.SolverOptions("kvaerno5", rtol=solver_rtol, atol=solver_rtol, max_steps=max_steps),
        saveat=ij.SaveTimes(ts),
        stop=ij.StopRules(max_param_norm=max_norm, grad_norm_tol=1e-13),
        loss=loss,
    )
    th = np.asarray(flow.thetas)
    th = np.vstack([th[np.all(np.isfinite(th), axis=1)], np.asarray(flow.theta_final)[None]])
    return th, flow


def _loss_fn(X, Y, loss):
    """`theta -> L(theta)` (our units) of the toy network on `(X, Y)`."""
    net = ch.toy_network(1.0, 1.0, 1.0, 1.0)
    lf = ij.get_loss(loss) if isinstance(loss, str) else loss
    return lambda th: lf(net.with_edge_weights(th)(X), Y)


def _valley(theta0, gammas, init, lossf, steps=8):
    """The channel's valley floor: for each `gamma` (increasing), `theta` minimising `L` on the
    hyperplane `v1 . (theta - ref) = gamma`, warm-started from the previous one (Newton on |H|,
    backtracked). Gradient flow in a channel follows this floor: its pull across the valley
    (the top Hessian eigenvalue, ~ gamma^2) is many orders above the drift along it."""
    v1, ref = init["v1"], init["ref"]
    Qm, _ = np.linalg.qr(v1[:, None], mode="complete")
    C = jnp.asarray(Qm[:, 1:])
    f = lambda y, g: lossf(jnp.asarray(ref) + g * jnp.asarray(v1) + C @ y)  # noqa: E731
    scales = jnp.asarray([1.0, 0.5, 0.1, 0.0])

    @jax.jit
    def solve(y, g):
        def step(_, y):
            lam, V = jnp.linalg.eigh(jax.hessian(f)(y, g))
            dy = -V @ ((V.T @ jax.grad(f)(y, g)) / jnp.maximum(jnp.abs(lam), 1e-14))
            trials = jax.vmap(lambda sc: f(y + sc * dy, g))(scales)
            return y + scales[jnp.argmin(trials)] * dy

        return jax.lax.fori_loop(0, steps, step, y)

    y = C.T @ (jnp.asarray(theta0) - jnp.asarray(ref))
    out = []
    for g in gammas:
        y = solve(y, float(g))
        out.append(np.asarray(jnp.asarray(ref) + float(g) * jnp.asarray(v1) + C @ y))
    return np.array(out)


def _trajectories(repo, commit, init, n_points, samples, seed, sgd, adam, flow_rtol, flow_steps):
    names, d = _read_csv(repo, commit, "paper_data/plots_csv/projected_dynamics.csv")
    col = {n: d[:, k] for k, n in enumerate(names)}
    theirs = {t: np.stack([col[f"{'saddle' if t == 'saddle' else 'flow_' + t}_gamma"],
                           col[f"{'saddle' if t == 'saddle' else 'flow_' + t}_proj"]], axis=1)
              for t in TRAJECTORIES}  # fmt: skip
    p = init["p"]
    starts = {"1": p, "2": p + 2 * init["v2"]}  # edge_of_stability_training.jl: `p` and `p + 2*v2`
    start_check = {k: _coords(v, init).tolist() for k, v in starts.items()}
    for k, t in (("1", "i1"), ("2", "i2")):
        assert np.allclose(start_check[k], theirs[t][0], rtol=0, atol=1e-9), (k, start_check[k], theirs[t][0])
    # the saddle curve: p's input weights with a1 = a2 = 1/2 reproduce its first row (gamma = 9.4e-14 is
    # round-off of u[:, 1]'s 1e-14 entries, proj to 1e-15): our reading, the 4-D point is not committed
    saddle0 = np.array([p[0], p[1], 0.5, 0.5])
    assert np.allclose(_coords(saddle0, init), theirs["saddle"][0], rtol=0, atol=1e-9)
    out = dict(
        starts=dict(
            p=p.tolist(),
            p_plus_2v2=starts["2"].tolist(),
            saddle_start=saddle0.tolist(),
            note="p and p + 2 v2 from initialization.dat (their first CSV rows reproduced to 1e-9); the saddle "
            "curve's start (p's input weights, a1 = a2 = 1/2) is our reading of its first row, which it "
            "reproduces to 1e-13",
        )
    )
    X, Y, loss, q = _population(n_points)
    Xs = jr.normal(jr.key(seed), (samples, 1))
    Ys = ch.toy_target(Xs)
    ours = {}
    t0 = time.perf_counter()
    runs = (("i1", starts["1"], X, Y, loss), ("i2", starts["2"], X, Y, loss), ("saddle", saddle0, X, Y, loss),
            ("1", starts["1"], Xs, Ys, "mse"), ("2", starts["2"], Xs, Ys, "mse"))  # fmt: skip
    for t, th0, Xd, Yd, lf in runs:
        max_norm = 1.05 * float(np.max(np.abs(theirs[t][:, 0]))) + 10.0
        th, flow = _flow_curve(th0, Xd, Yd, lf, t1=1e18, max_norm=max_norm, n_save=3000, solver_rtol=flow_rtol,
                               max_steps=flow_steps)  # fmt: skip
        o = dict(theta=th, result=ij.result_name(flow.result), t_final=float(flow.t_final),
                 loss_final_paper_units=2 * float(flow.loss_final), steps=int(flow.stats["num_steps"]),
                 flow_end_gamma=float(_coords(th[-1], init)[0]))  # fmt: skip
        g_end, g_their = o["flow_end_gamma"], float(theirs[t][-1, 0])
        if t != "saddle" and g_end < g_their:  # the rest of the channel: its valley floor
            lossf = _loss_fn(Xd, Yd, lf)
            over = np.geomspace(max(g_end / 4, 10.0), g_end, 40)
            vo = _valley(th[np.argmin(np.abs(_coords(th, init)[:, 0] - over[0]))], over, init, lossf)
            fc = _coords(th, init)
            k = np.argsort(fc[:, 0])
            o["valley_vs_flow_max_proj_diff"] = float(
                np.max(np.abs(np.interp(over, fc[k, 0], fc[k, 1]) - _coords(vo, init)[:, 1]))
            )
            gs = np.geomspace(g_end, 1.02 * g_their, 400)[1:]
            o["theta"] = np.vstack([th, _valley(th[-1], gs, init, lossf)])
            o["valley_from_gamma"] = g_end
        ours[t] = o
    for opt, (lr, batch, epochs) in (("sgd", sgd), ("adam", adam)):
        for k in ("1", "2"):
            res = ij.fit(
                ch.toy_network(*[float(v) for v in starts[k]]),
                Xs,
                Ys,
                loss="mse",
                options=ij.TrainOptions(
                    optimizer=opt, learning_rate=lr, epochs=epochs, batch_size=batch, log_every=max(1, epochs // 200)
                ),
                key=jr.key(seed),
            )
            th = np.asarray(res.log.thetas)
            ours[f"{opt}{k}"] = dict(
                theta=th,
                result=ij.result_name(res.result),
                loss_final_paper_units=2 * float(res.log.loss[-1]),
                settings=dict(optimizer=opt, learning_rate=lr, batch_size=batch, epochs=epochs, key=seed),
            )
    seconds = time.perf_counter() - t0
    end_proj = {k: float(_coords(ours[k]["theta"][-1], init)[1]) for k in ("i1", "i2")}

    def side(pr):  # the nearer of the two population flows' channel ends
        return "channel 1" if abs(pr - end_proj["i1"]) < abs(pr - end_proj["i2"]) else "channel 2"

    comps = {}
    for t in TRAJECTORIES:
        o = ours[t]
        c = _coords(o["theta"], init)
        stochastic = t.startswith(("sgd", "adam"))
        comp = _compare_curve(theirs[t], c, cut_at_their_end=not stochastic and t != "saddle")
        th_end = o["theta"][-1]
        comp.update(
            kind=dict(
                saddle="gradient flow, population",
                i1="gradient flow, population",
                i2="gradient flow, population",
                **{"1": "gradient flow, 4096 samples", "2": "gradient flow, 4096 samples"},
            ).get(t, f"{t[:-1]}, 4096 samples"),  # fmt: skip
            result=o["result"],
            loss_final_paper_units=o["loss_final_paper_units"],
            our_end_theta=th_end.tolist(),
            our_end_w_mean=float(0.5 * (th_end[0] + th_end[1])),
            channel_theirs=None if t == "saddle" else side(float(theirs[t][-1, 1])),
            channel_ours=None if t == "saddle" else side(float(c[-1, 1])),
            max_gamma_theirs=float(theirs[t][:, 0].max()),
            max_gamma_ours=float(c[:, 0].max()),
        )
        for key in (
            "t_final",
            "steps",
            "settings",
            "flow_end_gamma",
            "valley_from_gamma",
            "valley_vs_flow_max_proj_diff",
        ):
            if key in o:
                comp[key] = o[key]
        comps[t] = comp
    out.update(trajectories=comps, seconds=seconds)
    return out, {t: _coords(ours[t]["theta"], init) for t in TRAJECTORIES}, theirs


def _landscape(repo, commit, init, n_points, stride, newton_steps):
    """MLPGradientFlow's `subspace_minloss`: the loss at `ref + gamma v1 + proj v2` minimised
    over the two directions orthogonal to the plane (paper units, population loss)."""
    names, d = _read_csv(repo, commit, "paper_data/plots_csv/losslandscape.csv")
    G, A, L = d[:, 0], d[:, 1], d[:, 2]
    gam, prj = np.unique(G), np.unique(A)
    assert len(d) == len(gam) * len(prj) and np.all(G.reshape(len(prj), len(gam)) == gam[None])  # gamma fastest
    v1, v2, ref = init["v1"], init["ls_v2"], init["ref"]
    Qm, _ = np.linalg.qr(np.stack([v1, v2], axis=1), mode="complete")
    B = jnp.asarray(Qm[:, 2:])
    X, Y, _, q = _population(n_points)
    x, y = X[:, 0], Y[:, 0]
    act = ch.toy_activation()  # erf(z/sqrt2); s'' = -z s'
    base = (
        jnp.asarray(ref)[None] + jnp.asarray(G)[:, None] * jnp.asarray(v1) + jnp.asarray(A)[:, None] * jnp.asarray(v2)
    )

    def loss_grad_hess(th):  # paper units E (f - y)^2, analytic gradient and Hessian in theta
        w, a = th[:2], th[2:]
        z = w[:, None] * x[None]
        s, s1 = act(z), act.derivative(z)
        r = a @ s - y
        g = 2 * jnp.concatenate([jnp.sum(q * r * a[:, None] * x * s1, 1), jnp.sum(q * r * s, 1)])
        dw = a[:, None] * x * s1  # d f / d w_i
        J = jnp.concatenate([dw, s])  # (4, M)
        H = 2 * (J * q) @ J.T
        H = H.at[0, 0].add(2 * jnp.sum(q * r * a[0] * x**2 * (-z[0] * s1[0])))
        H = H.at[1, 1].add(2 * jnp.sum(q * r * a[1] * x**2 * (-z[1] * s1[1])))
        for i in (0, 1):
            c = 2 * jnp.sum(q * r * x * s1[i])
            H = H.at[i, 2 + i].add(c).at[2 + i, i].add(c)
        return jnp.sum(q * r**2), g, H

    def loss_only(th):
        return jnp.sum(q * (th[2:] @ act(th[:2, None] * x[None]) - y) ** 2)

    scales = jnp.asarray([1.0, 0.5, 0.1, 0.0])

    def solve(z, b, n):
        def step(_, z):
            _, g, H = loss_grad_hess(b + B @ z)
            lam, V = jnp.linalg.eigh(B.T @ H @ B)
            dz = -V @ ((V.T @ (B.T @ g)) / jnp.maximum(jnp.abs(lam), 1e-10))  # Newton on |H|, backtracked
            trials = jax.vmap(lambda s: loss_only(b + B @ (z + s * dz)))(scales)
            return z + scales[jnp.argmin(trials)] * dz

        z = jax.lax.fori_loop(0, n, step, z)
        return loss_only(b + B @ z), z

    vsolve = jax.jit(jax.vmap(solve, in_axes=(0, 0, None)), static_argnums=2)
    t0 = time.perf_counter()
    best, zb = None, None

    def keep(val, z):
        nonlocal best, zb
        if best is None:
            best, zb = val, z
        else:
            better = val < best
            best, zb = jnp.where(better, val, best), jnp.where(better[:, None], z, zb)

    for z0 in (jnp.zeros(2), -(B.T @ jnp.asarray(ref))):  # MLPGradientFlow's restart_ref and restart_origin
        keep(*vsolve(jnp.broadcast_to(z0, (len(G), 2)), base, newton_steps))
    # then restarts from the neighbours' minimisers (their `restart_nearby`), twice over
    shape = (len(prj), len(gam), 2)
    for _ in range(2):
        for axis, shift in ((0, 1), (0, -1), (1, 1), (1, -1)):
            zn = jnp.roll(zb.reshape(shape), shift, axis=axis).reshape(-1, 2)
            keep(*vsolve(zn, base, newton_steps // 2))
    ours = np.asarray(best)
    seconds = time.perf_counter() - t0
    # the package's own network and loss at the minimisers of the tabled rows
    net = ch.toy_network(1.0, 1.0, 1.0, 1.0)
    idx = np.arange(0, len(d), stride)
    th = np.asarray(base[idx] + zb[idx] @ B.T)
    _, _, loss_fn, _ = _population(n_points)
    pkg = np.array([2 * float(loss_fn(net.with_edge_weights(t)(X), Y)) for t in th])
    assert np.allclose(pkg, ours[idx], rtol=1e-12, atol=1e-15), np.max(np.abs(pkg - ours[idx]))
    plane = np.asarray(jax.jit(jax.vmap(loss_only))(base))
    diff = ours - L
    return dict(
        n_rows=int(len(d)),
        gamma_range=[float(G.min()), float(G.max())],
        proj_range=[float(A.min()), float(A.max())],
        max_abs_diff=float(np.max(np.abs(diff))),
        max_rel_diff=float(np.max(np.abs(diff) / np.abs(L))),
        median_diff=float(np.median(diff)),
        rows_ours_lower_by_1e_8=int(np.sum(diff < -1e-8)),
        rows_ours_higher_by_1e_8=int(np.sum(diff > 1e-8)),
        max_abs_diff_plane_not_minimised=float(np.max(np.abs(plane - L))),
        newton_steps=newton_steps,
        seconds=seconds,
        rows=[
            dict(gamma=float(G[i]), proj=float(A[i]), theirs=float(L[i]), ours=float(ours[i]), diff=float(diff[i]))
            for i in idx
        ],
    ), (G, A, L, ours)


def _functions(repo, commit, n_points):
    names, d = _read_csv(repo, commit, "paper_data/plots_csv/function.csv")
    _, opt = _read_csv(repo, commit, "paper_data/plots_csv/loss_at_infinity_optima.csv")
    x = d[:, 0]
    cps = ch.toy_critical_points(n_points=n_points)
    act = ch.toy_activation()
    ours = {"target": np.asarray(ch.toy_target(jnp.asarray(x)[:, None]))[:, 0]}
    ws = {}
    for name, w_their in zip(("saddleline", "studentone", "studenttwo"), opt[:, 0]):
        k = int(np.argmin(np.abs(cps.w - w_their)))
        w = float(cps.w[k])
        _, c, a, _ = ch.toy_limit_loss(w, n_points=n_points)
        c, a = float(c), float(a)
        ws[name] = dict(w=w, c=c, a=a)
        ours[name] = np.asarray(c * act(w * jnp.asarray(x)) + a * jnp.asarray(x) * act.derivative(w * jnp.asarray(x)))
    cols = {}
    for j, name in enumerate(names[1:], start=1):
        diff = ours[name] - d[:, j]
        cols[name] = dict(max_abs_diff=float(np.max(np.abs(diff))), **ws.get(name, {}))
    rows = [
        dict(x=float(x[i]), **{f"{n}_theirs": float(d[i, j]) for j, n in enumerate(names[1:], 1)},
             **{f"{n}_ours": float(ours[n][i]) for n in names[1:]})
        for i in range(len(x))
    ]  # fmt: skip
    return dict(n_rows=int(len(x)), columns=cols, rows=rows), (x, d, ours)


def _figure(path, landscape, theirs, ours, functions):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    G, A, L, Lours = landscape
    g, a = np.unique(G), np.unique(A)
    fig, axs = plt.subplots(1, 3, figsize=(15, 4.2))
    Z = L.reshape(len(a), len(g))  # gamma runs fastest in the file
    levels = np.exp(np.linspace(np.log(Z.min()), np.log(Z.max()), 40))
    axs[0].contourf(g, a, Z, levels=levels, cmap="viridis", norm=matplotlib.colors.LogNorm())
    axs[0].contour(g, a, Lours.reshape(len(a), len(g)), levels=levels[::4], colors="k", linewidths=0.4)
    colors = dict(saddle="w", i1="w", i2="w", **{"1": "0.6", "2": "0.6"}, sgd1="orange", sgd2="orange",
                  adam1="r", adam2="r")  # fmt: skip
    for ax, xscale in ((axs[0], "linear"), (axs[1], "log")):
        for t in TRAJECTORIES:
            ax.plot(*theirs[t].T, color=colors[t], lw=1.2)
            ax.plot(*ours[t].T, color=colors[t] if ax is axs[0] else "k", lw=0.8, ls="--")
        ax.set_xscale(xscale)
        if xscale == "log":
            ax.set_xlim(0.1, 5000)
        ax.set_xlabel("gamma")
        ax.set_ylabel("proj (alpha)")
    axs[0].set_xlim(g.min(), g.max())
    axs[0].set_ylim(a.min(), a.max())
    axs[0].set_title("landscape (theirs filled, ours black lines); curves: theirs solid, ours dashed", fontsize=8)
    axs[1].set_title("the same curves, log gamma (theirs coloured, ours black dashed)", fontsize=8)
    x, d, fo = functions
    for j, name in enumerate(("target", "saddleline", "studentone", "studenttwo"), start=1):
        axs[2].plot(x, d[:, j], lw=2, alpha=0.5, label=f"{name} (theirs)")
        axs[2].plot(x, fo[name], "k--", lw=0.7)
    axs[2].legend(fontsize=7)
    axs[2].set_title("function.csv (ours black dashed)", fontsize=8)
    fig.tight_layout()
    path = save_figure(fig, path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="git directory of a mirror of flavio-martinelli/channels-to-infinity")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument(
        "--stride",
        type=int,
        default=100,
        help="table every stride-th row of loss_at_infinity.csv and losslandscape.csv",
    )
    ap.add_argument("--n-points", type=int, default=401, help="Gauss-Hermite nodes of the population loss")
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/channels_paper_data.json)")
    ap.add_argument("--samples", type=int, default=4096, help="finite-data inputs (theirs: 2^12, Julia seed 12)")
    ap.add_argument("--seed", type=int, default=12, help="jax.random key of the finite data and the minibatches")
    ap.add_argument("--sgd", default="0.1,64,200", help="SGD learning rate (our L), batch size, epochs")
    ap.add_argument("--adam", default="0.01,64,200", help="Adam learning rate, batch size, epochs")
    ap.add_argument("--flow-rtol", type=float, default=1e-8, help="rtol = atol of the Kvaerno5 flows")
    ap.add_argument("--flow-steps", type=int, default=20_000, help="step budget of each flow; the valley floor goes on")
    ap.add_argument("--newton-steps", type=int, default=30, help="Newton steps of the landscape's inner minimisation")
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "-C", args.repo, "rev-parse", args.commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    lai = _loss_at_infinity(args.repo, commit, args.stride, args.n_points)
    opt = _optima(args.repo, commit, args.n_points)
    curves = _curves(args.repo, commit)
    init = _initialization(args.repo, commit)
    fun, fun_plot = _functions(args.repo, commit, args.n_points)
    print("function.csv: " + ", ".join(f"{k} max |diff| {v['max_abs_diff']:.2e}" for k, v in fun["columns"].items()))
    land, land_plot = _landscape(args.repo, commit, init, args.n_points, args.stride, args.newton_steps)
    print(
        f"losslandscape.csv: {land['n_rows']} rows, max |ours - theirs| = {land['max_abs_diff']:.3e} "
        f"(relative {land['max_rel_diff']:.2e}); ours lower by > 1e-8 on {land['rows_ours_lower_by_1e_8']} rows, "
        f"higher on {land['rows_ours_higher_by_1e_8']}; the plane without minimisation: "
        f"{land['max_abs_diff_plane_not_minimised']:.2e} ({land['seconds']:.0f} s)"
    )
    sgd = [float(v) for v in args.sgd.split(",")]
    adam = [float(v) for v in args.adam.split(",")]
    traj, ours_xy, theirs_xy = _trajectories(
        args.repo, commit, init, args.n_points, args.samples, args.seed,
        (sgd[0], int(sgd[1]), int(sgd[2])), (adam[0], int(adam[1]), int(adam[2])), args.flow_rtol, args.flow_steps,
    )  # fmt: skip
    for t, c in traj["trajectories"].items():
        print(
            f"{t:>7}: covered {c['rows_covered']}/{c['n_rows']}, start {c['start_distance']:.1e}, "
            f"max dist theirs->ours {c['max_distance_theirs_to_ours']:.3e}, Hausdorff {c['hausdorff']:.3e}, "
            f"end theirs {c['end_theirs'][0]:.4g},{c['end_theirs'][1]:.4f} ours {c['end_ours'][0]:.4g},"
            f"{c['end_ours'][1]:.4f}; channel theirs {c['channel_theirs']} ours {c['channel_ours']} [{c['result']}]"
        )
    print(
        f"loss_at_infinity: {lai['n_rows']} rows, max |ours - theirs| = {lai['max_abs_diff']:.3e} "
        f"(relative {lai['max_rel_diff']:.3e}); minimum theirs w = {lai['their_argmin_w']:.4f}, "
        f"ours w = {lai['our_argmin_w']:.4f}"
    )
    print(f"{'point':>12} {'w theirs':>9} {'w ours':>9} {'loss theirs':>12} {'loss ours':>12} kind (ours)")
    for r in opt:
        print(
            f"{r['point']:>12} {r['w_theirs']:>9.4f} {r['w_ours']:>9.4f} {r['loss_theirs']:>12.5e} "
            f"{r['loss_ours']:>12.5e} {r['kind_ours']}"
        )
    for name, c in curves.items():
        print(
            f"{name:>12}: predicted slope {c['predicted_slope']:+.0f}; "
            + ", ".join(f"{k} {v:.4g}" for k, v in c.items() if k not in ("rows", "predicted_slope"))
        )
    write_json(
        output_path(args.out, "channels_paper_data.json"),
        dict(
            source=dict(
                repository="flavio-martinelli/channels-to-infinity",
                commit=commit,
                files="paper_data/plots_csv/{loss_at_infinity,loss_at_infinity_optima,acurve,ccurve,simcurve,"
                "approxcurve,losscurve,maxeigvals,function,losslandscape,projected_dynamics}.csv and "
                "paper_data/edge_of_stability/initialization.dat",
            ),
            not_read=NOT_READ,
            units="loss in the paper's units: (1/N) sum (f - y)^2 = 2 L (ours is L = (1/2N) sum (f - y)^2); "
            "student neuron erf(z/sqrt2) (MLPGradientFlow sigmoid2); population loss x ~ N(0,1)",
            n_points=args.n_points,
            loss_at_infinity=lai,
            optima=opt,
            channel_curves=curves,
            channel_curves_note="the network behind Fig. 5's curves is not committed, so these rows are checked "
            "against the predicted scaling only, not reproduced from their start point",
            initialization=dict(
                path=INIT_PATH,
                format="Julia Serialization of (p, v2, ls), read by benchmarks/_julia_serialization.py and checked",
                **{k: v.tolist() for k, v in init.items()},
                coordinates="gamma = v1 . (theta - ref), proj = v2 . (theta - ref) (MLPGradientFlow "
                "to_local_coords with u[:, 1:2] = -(v1, v2)); theta = (w1, w2, a1, a2)",
            ),
            functions=fun,
            functions_note="ours: c s(w x) + a x s'(w x), s(z) = erf(z/sqrt2), at our critical points w of L0 "
            "(saddle line: a = 0, the one-neuron optimum) with the optimal (c, a) of toy_limit_loss",
            landscape=land,
            landscape_note="ours: MLPGradientFlow's subspace_minloss, the population loss (paper units) at "
            "ref + gamma v1 + proj v2 minimised over the 2-D orthogonal complement (damped Newton on |H| from "
            "their two restart points, z = 0 and z = -B'ref)",
            projected_dynamics=traj,
            projected_dynamics_note="the CSV stores no times (MLPGradientFlow saves 100 log-spaced ODE times "
            "up to a wall-clock stop), so curves are compared as point sets in the (gamma, proj) plane: for "
            "each of their rows the distance to our polyline (ours cut at their last gamma for the flows "
            "that run into a channel), and the Hausdorff distance (ours is sampled densely, theirs at 100 "
            "log-spaced times, so the ours-to-theirs side includes their chords). Past the flow's step budget "
            "(flow_end_gamma) our curve is the channel's valley floor, continued from the flow's end point "
            "(valley_vs_flow_max_proj_diff: the two on an overlap before it). SGD / Adam are stochastic and their "
            "learning rates, batches and seeds are not committed: only the channel they reach is compared.",
        ),
    )
    out = output_path(args.out, "channels_paper_data.json")
    _figure(out.with_suffix(".png"), land_plot, theirs_xy, ours_xy, fun_plot)


if __name__ == "__main__":
    main()
