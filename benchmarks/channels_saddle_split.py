"""Fig. 2(c, d) of the flat-channels paper (the neuron-splitting saddle perturbation), from
the authors' committed runs, row by row.

`paper_data/fig1A_saddle_perturbation/86/split_2/res_<mu>.dat` (31 files, mu = -2..3) are
Julia `Serialization` streams, read by `_julia_serialization.py`. Each is one run behind
their `scripts/simulations/fig2_perturbation_plot.jl`:
- `x`: a 2-2-1 network (activation `g`, no biases) fitted on 10201 inputs (a 101 x 101
  grid of [-sqrt3, sqrt3]^2);
- `xs`: its hidden neuron 2 split in two, with output weights `mu a` and `(1 - mu) a` (a
  point of the "mu line" of 3-neuron networks with the same function);
- `trj`, `loss_trj`: a first-order phase from `xs` perturbed by 1e-7;
- `res["trajectory"]`, `res["loss_curve"]`: MLPGradientFlow's ODE phase from its end
  (`res["init"]`), 500 saved rows; then their optimizer (`res["x"]`, `res["loss"]`).

This script
1. checks the reading by exact identities: our MSE at their `init`, `ode_x` and `x`
   against their recorded losses, our MSE along `trj` against `loss_trj`, `xs` against
   the split of their unsplit network, and the split's MSE against the unsplit one's;
2. runs our gradient flow (`ij.gradient_flow`, Kvaerno5 with Newton stage solves) from the
   start of their ODE phase, with their `maxnorm` penalty, and compares it with their saved
   rows up to their time `--t-cut` (default: all, to t > 1e300). Their ODE is
   `dx/dt = -grad sum_i (f_i - y_i)^2` (MLPGradientFlow's `train` docstring), ours
   `-grad (1/2N) sum_i (f_i - y_i)^2`: their time t is our time 2 N t. Their penalty
   (`--penalty`): MLPGradientFlow's `(nx - maxnorm)^3/3` was multiplied by `n_samples` only
   from jbrea/MLPGradientFlow.jl 2be60bf (2025-03-27) on. Where their runs hover at
   `maxnorm`, the script solves the radial balance of loss and penalty gradients at their
   last row for the excess `nx - maxnorm` each form predicts, beside the excess they show;
3. computes, at each of their `xs`, the eigenvalues of our Hessian (panel I's quantity;
   their values are not committed) and at the end of their ODE phase what
   `ch.detect_channels` and `ch.confirm_channel` say;
4. draws panel G (distance from the mu line against the projection on it, their
   coordinates) and panel H (loss against mu), theirs and ours.

The data are read from a local git mirror of the authors' repository (`--repo`), never
copied here; the JSON records the commit read.

Usage: python benchmarks/channels_saddle_split.py --repo /path/to/channels-to-infinity.git
       [--t-cut inf] [--rtol 1e-8] [--max-steps 20000] [--solver kvaerno5_newton]
       [--maxnorm 1e3] [--penalty unscaled] [--workers 2] [--mus=-1.0,0.5]
       [--out benchmarks/results/channels_saddle_split.json] (the PNG goes beside the JSON)
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

import numpy as np

from _output import output_path, save_figure, write_json  # benchmarks/_output.py

DIR = "paper_data/fig1A_saddle_perturbation/86/split_2"
SPLIT = 2  # their `split_id`: the hidden neuron split (1-based)
IDENTITY_RTOL = 1e-10
PENALTIES = ("unscaled", "n_samples")
"""Their penalty's two forms: `(nx - maxnorm)^3/3` added to `sum (f - y)^2` before
MLPGradientFlow.jl 2be60bf, times `n_samples` after it (`penalty_strength`)."""


def penalty_strength(form: str, n: int) -> float:
    """`ij.channels.penalty_strength` (imported when called: the parent process of the
    workers does not load JAX)."""
    from invariant_jax.channels import penalty_strength as strength

    return strength(form, n)


def their_files(repo: str, rev: str) -> tuple[str, dict[float, str]]:
    """The commit `rev` names in their mirror `repo`, and its files by mu."""
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    return commit, _files(repo, commit)


def _files(repo: str, commit: str) -> dict[float, str]:
    names = subprocess.run(
        ["git", "-C", repo, "ls-tree", "--name-only", f"{commit}:{DIR}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return {float(n[len("res_") : -len(".dat")]): f"{DIR}/{n}" for n in names if n.startswith("res_")}


def _read(repo: str, commit: str, path: str) -> dict:
    import _julia_serialization as js

    blob = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, check=True).stdout
    return js.read(blob)


@functools.cache
def _graph(din: int, k: int):
    import invariant_jax as ij

    return ij.mlp([din, k, 1])


def _theta(p) -> np.ndarray:
    """MLPGradientFlow's `(w1, w2)` (hidden x inputs, 1 x hidden), as a dict or a
    `ComponentArray`, as this package's edge weights of `ij.mlp([2, k, 1])`."""
    from channels_paper_run import to_theta

    if not isinstance(p, dict):
        p = _read_components(p)
    w1, w2 = np.atleast_2d(p["w1"]), np.atleast_2d(p["w2"])
    return to_theta(_graph(*w1.shape[::-1]), w1, w2)


def _split(w1: np.ndarray, w2: np.ndarray, mu: float):
    """Their `split(x, split_id, mu)`: the neuron's input row copied to a new last row, its
    output weight `a` shared as `mu a` (in place) and `(1 - mu) a` (the new neuron)."""
    i = SPLIT - 1
    a = w2[0, i]
    w1s = np.vstack([w1, w1[i : i + 1]])
    w2s = np.hstack([w2, [[(1 - mu) * a]]])
    w2s[0, i] = mu * a
    return w1s, w2s


def _mu_coordinates(P: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """Panel G's coordinates of parameter rows `P` (as `fig2_perturbation_plot.jl` computes
    them): the projection `mu` on the mu line and the distance to it. The line is
    `split(x, split_id, 0) + mu a v`, `v` = +1 on the split neuron's output weight and -1
    on the new one's."""
    x0 = _theta(dict(zip(("w1", "w2"), _split(w1, w2, 0.0))))
    a = w2[0, SPLIT - 1]
    k = w2.shape[1] + 1
    direction = np.zeros((1, k))
    direction[0, SPLIT - 1], direction[0, k - 1] = 1.0, -1.0
    v = _theta(dict(w1=np.zeros((k, w1.shape[1])), w2=direction))
    mu = (P - x0) @ v / (2 * a)
    dist = np.linalg.norm(P - x0 - (mu * a)[:, None] * v, axis=1)
    return np.stack([mu, dist], axis=1)


def one_run(
    repo: str,
    commit: str,
    path: str,
    mu: float,
    t_cut: float,
    rtol: float,
    max_steps: int,
    solver: str,
    maxnorm: float,
    penalty: str,
    recovery=None,
) -> dict:
    """One of their runs from its start with our flow (`recovery`: `ij.SolverOptions`'s)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import warnings

    import jax.numpy as jnp

    import invariant_jax as ij
    import invariant_jax.channels as ch

    warnings.filterwarnings("ignore", category=ij.NoConservationLaw)
    v = _read(repo, commit, path)
    r = v["res"]
    X, Y = np.asarray(r["input"]).T, np.asarray(r["target"]).T
    n = len(Y)
    net = ij.DAGNetwork(ij.mlp([2, 3, 1]), "g", edge_weights=_theta(r["init"]))
    mse = jax.jit(lambda th: 2 * ij.network_loss(net.with_edge_weights(th), X, Y))

    # 1. the reading, by exact identities
    xs = _read_components(v["xs"])
    before = {k: np.asarray(w) for k, w in v["x"].items()}
    w1s, w2s = _split(before["w1"], before["w2"], mu)
    net2 = ij.DAGNetwork(ij.mlp([2, 2, 1]), "g", edge_weights=_theta(before))
    ids = {
        name: _rel(float(mse(_theta(r[name]))), float(theirs))
        for name, theirs in (("init", r["loss_curve"][0]), ("ode_x", r["ode_loss"]), ("x", r["loss"]))
    }
    trj = np.array([_theta(p) for p in v["trj"].values()])
    ids["loss_trj (max over rows)"] = max(_rel(float(mse(p)), float(L)) for p, L in zip(trj, v["loss_trj"]))
    ids["xs == split(x, mu) (max abs)"] = float(max(np.abs(xs["w1"] - w1s).max(), np.abs(xs["w2"] - w2s).max()))
    ids["MSE(xs) vs MSE(x)"] = _rel(
        float(mse(_theta(xs))), 2 * float(ij.network_loss(net2.with_edge_weights(_theta(before)), X, Y))
    )
    bad = {k: e for k, e in ids.items() if e > IDENTITY_RTOL}
    if bad:
        raise SystemExit(f"mu = {mu}: the reading fails its identities {bad}; the layout is not the expected one.")

    # 2. our flow from the start of their ODE phase, at their saved times up to t_cut
    traj = r["trajectory"]
    ts = np.array([float(t) for t in traj])
    P = np.array([_theta(p) for p in traj.values()])
    their_loss = np.asarray(r["loss_curve"])[: len(ts)]  # one more entry when their ODE hit t > 1e300
    keep = ts <= t_cut
    t0 = time.perf_counter()
    strength = penalty_strength(penalty, n)
    flow = ij.gradient_flow(
        net,
        X,
        Y,
        2 * n * ts[keep][-1],
        loss=ij.Objective("mse", regularizer=ch.MaxnormPenalty(maxnorm), strength=strength),
        solver=ij.SolverOptions(solver, rtol=rtol, atol=rtol, max_steps=max_steps, recovery=recovery),
        saveat=ij.SaveTimes(2 * n * ts[keep]),
        throw=False,
    )
    wall = time.perf_counter() - t0
    reached = np.all(np.isfinite(np.asarray(flow.thetas)), axis=1)  # rows past a failure are not saved
    keep[np.flatnonzero(keep)[~reached]] = False
    Q = np.asarray(flow.thetas)[reached]
    dist = np.linalg.norm(Q - P[keep], axis=1)
    loss_ours = np.array([float(mse(q)) for q in Q])

    # 3. the Hessian on the mu line (at xs), and their ODE phase's end by our criteria
    H = np.asarray(jax.hessian(mse)(jnp.asarray(_theta(xs))))
    eig = np.linalg.eigvalsh(H)
    end = net.with_edge_weights(_theta(r["ode_x"]))
    rep = ch.detect_channels(end, pair_tol=1e-2)
    ok, glu_err, _ = ch.confirm_channel(end, X, Y, pair_tol=1e-2)
    pair = rep.pairs[int(np.argmin(rep.cosine_distances))] if rep.pairs else None

    # the hover: the excess at which each penalty form balances the loss's pull, at their last row
    last = jnp.asarray(P[-1])
    g = np.asarray(jax.grad(lambda th: ij.network_loss(net.with_edge_weights(th), X, Y))(last))
    excess = {form: hover_excess(g, P[-1], penalty_strength(form, n)) for form in PENALTIES}
    theirs_excess = float(ch.weightnorm(last)) - maxnorm
    hover = dict(
        theirs_excess=theirs_excess,
        predicted_excess=excess if theirs_excess > 0 else None,  # None: their run does not hover
        ours_excess=float(ch.weightnorm(jnp.asarray(Q[-1]))) - maxnorm,
    )

    # panel G: their rows (first-order phase, then ODE) and ours, in their coordinates
    theirs_G = _mu_coordinates(np.vstack([trj, P]), before["w1"], before["w2"])
    ours_G = _mu_coordinates(Q, before["w1"], before["w2"])
    return dict(
        mu=mu,
        file=path,
        identities=ids,
        their_ode=dict(
            stopped_by=r["ode_stopped_by"],
            iterations=int(r["ode_iterations"]),
            seconds=float(r["ode_time_run"]),
            last_time=float(ts[-1]),
            end_loss=float(r["ode_loss"]),
            end_weightnorm=float(np.linalg.norm(_theta(r["ode_x"]))),
        ),
        their_final_loss=float(r["loss"]),
        our_result=str(ij.result_name(flow.result)),
        rows_compared=int(keep.sum()),
        t_last_compared=float(ts[keep][-1]),
        max_distance=float(dist.max()),
        max_relative_distance=float((dist / np.linalg.norm(P[keep], axis=1)).max()),
        distance_at_last=float(dist[-1]),
        max_loss_diff=float(np.abs(loss_ours - their_loss[keep]).max()),
        loss_at_last=dict(theirs=float(their_loss[keep][-1]), ours=float(loss_ours[-1])),
        weightnorm_at_last=dict(theirs=float(np.linalg.norm(P[keep][-1])), ours=float(np.linalg.norm(Q[-1]))),
        our_seconds=wall,
        our_steps=int(np.asarray(flow.stats["num_steps"])),
        our_rejected_steps=int(np.asarray(flow.stats["num_rejected_steps"])),
        hover=hover,
        hessian_eigenvalues_at_xs=[float(e) for e in eig],
        n_negative_eigenvalues=int((eig < -1e-10).sum()),
        their_ode_end=dict(
            closest_pair=None if pair is None else [pair.i, pair.j],
            kind=None if pair is None else str(pair.classification),
            confirmed_channel=bool(ok),
            glu_error=None if np.isnan(glu_err) else float(glu_err),
        ),
        panel_G=dict(theirs=theirs_G.tolist(), ours=ours_G.tolist()),
    )


def hover_excess(grad_loss: np.ndarray, theta: np.ndarray, strength: float) -> float:
    """The excess `e = weightnorm(theta) - maxnorm` at which `strength * ch.maxnorm_penalty`
    (gradient `strength * e^2 / 2 * theta / E`) cancels the radial part of `grad_loss` at
    `theta`: `e = sqrt(-2 E (grad_loss . theta) / (strength |theta|^2))`; 0 where the loss
    pulls inward."""
    push = -float(grad_loss @ theta)
    return float(np.sqrt(2 * theta.size * push / (strength * float(theta @ theta)))) if push > 0 else 0.0


def _read_components(ca) -> dict:
    import _julia_serialization as js

    return {k: np.asarray(w) for k, w in js.component_arrays(ca).items()}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def _figure(path, runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (g, h, e) = plt.subplots(1, 3, figsize=(13, 4))
    for k, run in enumerate(runs):
        t, o = np.asarray(run["panel_G"]["theirs"]), np.asarray(run["panel_G"]["ours"])
        g.plot(t[:, 0], t[:, 1], color="0.6", lw=0.6, label="theirs (all rows)" if k == 0 else None)
        g.plot(o[:, 0], o[:, 1], "o", ms=2, color="C3", label="ours (compared rows)" if k == 0 else None)
    g.set(yscale="log", xlabel="projection on the mu line", ylabel="distance from the mu line", title="panel G")
    g.legend(fontsize=7)
    mus = [r["mu"] for r in runs]
    h.plot(mus, [r["their_final_loss"] for r in runs], "D", ms=4, color="0.4", label="theirs: final loss")
    h.plot(
        mus,
        [r["loss_at_last"]["theirs"] for r in runs],
        "s",
        mfc="none",
        color="k",
        label="theirs at the last row compared",
    )
    h.plot(mus, [r["loss_at_last"]["ours"] for r in runs], "x", color="C3", label="ours there")
    h.set(xlabel="mu", ylabel="MSE", title="panel H")
    h.legend(fontsize=7)
    for r in runs:
        e.plot([r["mu"]] * len(r["hessian_eigenvalues_at_xs"]), r["hessian_eigenvalues_at_xs"], "_", color="C0", ms=8)
    e.set(yscale="symlog", xlabel="mu", ylabel="eigenvalues of our Hessian at xs", title="panel I (ours only)")
    save_figure(fig, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", required=True, help="git directory of flavio-martinelli/channels-to-infinity")
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--t-cut", type=float, default=np.inf, help="compare their rows up to this time of theirs")
    p.add_argument("--rtol", type=float, default=1e-8, help="our solver's rtol = atol")
    p.add_argument("--max-steps", type=int, default=20_000, help="our solver's step budget per run")
    p.add_argument("--solver", default="kvaerno5_newton", help="a name in ij.SOLVERS")
    p.add_argument("--maxnorm", type=float, default=1e3, help="their maxnorm (their rows hover at 1e3)")
    p.add_argument("--penalty", choices=PENALTIES, default="unscaled", help="their penalty's form (see PENALTIES)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mus", default=None, help="comma-separated subset of mu (default: every file)")
    p.add_argument("--out", default=None, help="default: benchmarks/results/local/channels_saddle_split.json")
    args = p.parse_args()
    import invariant_jax as ij

    if args.solver not in ij.SOLVERS:
        raise SystemExit(f"--solver {args.solver!r}: not a solver name; use one of {sorted(ij.SOLVERS)}.")
    out = output_path(args.out, "channels_saddle_split.json")
    commit, files = their_files(args.repo, args.commit)
    if args.mus:
        want = [float(m) for m in args.mus.split(",")]
        missing = [m for m in want if m not in files]
        if missing:
            raise SystemExit(f"--mus {missing}: no such file; the files have mu in {sorted(files)}.")
        files = {m: files[m] for m in want}
    t = time.perf_counter()

    def record(runs, done):  # written after every run, so a cut-off run keeps what it finished
        write_json(
            out,
            dict(
                their_repo="flavio-martinelli/channels-to-infinity",
                their_commit=commit,
                t_cut=None if np.isinf(args.t_cut) else args.t_cut,  # None: every row
                rtol=args.rtol,
                max_steps=args.max_steps,
                solver=args.solver,
                maxnorm=args.maxnorm,
                penalty=args.penalty,
                time_scale="our t = 2 N x their t (their ODE: -grad sum (f - y)^2; ours: -grad (1/2N) sum (f - y)^2)",
                wall_seconds=time.perf_counter() - t,
                complete=done,
                runs=sorted(runs, key=lambda r: r["mu"]),
            ),
        )

    runs = []
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                one_run,
                args.repo,
                commit,
                f,
                m,
                args.t_cut,
                args.rtol,
                args.max_steps,
                args.solver,
                args.maxnorm,
                args.penalty,
            )
            for m, f in sorted(files.items())
        ]
        for f in as_completed(futures):
            runs.append(f.result())
            run = runs[-1]
            print(
                f"mu = {run['mu']:g}: {run['rows_compared']} rows, max distance {run['max_distance']:.1e}, "
                f"{run['our_seconds']:.0f} s",
                flush=True,
            )
            record(runs, len(runs) == len(futures))
    runs = sorted(runs, key=lambda r: r["mu"])
    _figure(out.with_suffix(".png"), runs)


if __name__ == "__main__":
    main()
