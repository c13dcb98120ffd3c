"""One of the authors' own runs, rerun from their initialization on their data.

The flat-channels repository (flavio-martinelli/channels-to-infinity) commits one complete
run of its Fig. 4 / App. B scaling study: `paper_data/scaling/Din=4_f=g_input=
quasimontecarlo_input_r=4_seed=18_teacher=rosenbrock.jld2` (a 4-4-1 network with biases,
activation `g`, 10^4 quasi-Monte-Carlo inputs, the modified Rosenbrock teacher). The
file (JLD2, an HDF5 file; read with h5py) holds the inputs and targets, the
initialization, the state at the end of their ODE phase (`ode_x`) and at the end of the
optimizer (`x`), and their losses, iteration counts and stop reasons.

This script
1. checks the reading: our MSE (the paper's `(1/N) sum (f - y)^2 = 2 L`) at their three
   points equals the losses they recorded (exact identities: the same data, activation
   and weight layout, or the script stops);
2. runs `ij.flow_then_newton` (the penalized ODE phase, then Newton, defaults) from their
   initialization on their data;
3. tables theirs against ours, row by row: the ODE phase's end and the final point (MSE,
   `weightnorm`, the closest first-layer pair, its output weights, `ch.confirm_channel`,
   the distance between the two parameter vectors), their and our iterations and times.

The data are read from a local git mirror of the authors' repository (`--repo`), never
copied here; the JSON records the commit read. Needs h5py (`pip install
'invariant-jax[paper]'`).

Usage: python benchmarks/channels_paper_run.py --repo /path/to/channels-to-infinity.git
       [--flow-wall-time 600] [--out benchmarks/results/channels_paper_run.json]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels as ch  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)

RUN = "paper_data/scaling/Din=4_f=g_input=quasimontecarlo_input_r=4_seed=18_teacher=rosenbrock.jld2"
IDENTITY_RTOL = 1e-10  # our MSE at their points against their recorded losses


def read_jld2(data: bytes) -> dict:
    """The top-level `Dict{String, Any}`s of a JLD2 file as Python dicts: nested
    dictionaries (Julia `Dict` and `OrderedDict`), arrays in Julia's orientation (HDF5
    stores them column-major, so h5py returns them transposed), strings decoded."""
    import h5py

    f = h5py.File(io.BytesIO(data), "r")

    def raw(x):  # follow a reference, convert nothing
        if isinstance(x, h5py.Reference):
            obj = f[x] if x else None
            return obj[()] if isinstance(obj, h5py.Dataset) else obj
        return x

    def value(x):
        x = raw(x)
        if isinstance(x, bytes | np.bytes_):
            return x.decode()
        if isinstance(x, np.void) and x.dtype.names == ("kvvec",):  # Dict{K, V}: a vector of pairs
            return {value(p["first"]): value(p["second"]) for p in (raw(q) for q in raw(x["kvvec"]))}
        if isinstance(x, np.void) and x.dtype.names and "keys" in x.dtype.names:  # OrderedDict
            if int(x["ndel"]) != 0:
                raise ValueError("an OrderedDict with deleted entries: its keys and vals arrays have holes.")
            return dict(zip([value(k) for k in raw(x["keys"])], [value(v) for v in raw(x["vals"])]))
        if isinstance(x, np.ndarray) and x.dtype == object:
            return [value(v) for v in x]
        if isinstance(x, np.ndarray):
            return x.T  # column-major on disk
        return x.item() if isinstance(x, np.generic) else x

    return {k: value(f[k][()]) for k in f if not k.startswith("_")}


def to_theta(graph, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """MLPGradientFlow's layer matrices (`w1`: hidden x (inputs + bias), `w2`: 1 x (hidden +
    bias), bias last) as edge weights in `graph.edges` order."""
    xs = [v for v in graph.inputs if v not in graph.constants] + list(graph.constants)
    hidden = list(graph.hidden)
    theta = np.empty(len(graph.edges))
    for n, (u, v) in enumerate(graph.edges):
        if v in hidden:
            theta[n] = w1[hidden.index(v), xs.index(u)]
        else:
            theta[n] = w2[0, len(hidden) if u in graph.constants else hidden.index(u)]
    return theta


def describe(net, X, Y, theta, maxnorm) -> dict:
    """A point's MSE, weightnorm, closest first-layer pair and what `confirm_channel` says."""
    end = net.with_edge_weights(theta)
    rep = ch.detect_channels(end, pair_tol=1e-2, maxnorm=maxnorm)
    pair = rep.pairs[int(np.argmin(rep.cosine_distances))] if rep.pairs else None
    _, cos = ch.first_layer_distances(end)
    ok, err, _ = ch.confirm_channel(end, X, Y, maxnorm=maxnorm, pair_tol=1e-2)
    out = dict(
        mse=2 * float(ij.network_loss(end, X, Y)),
        weightnorm=float(ij.weightnorm(theta)),
        closest_pair_cos=float(cos),
        confirmed_channel=bool(ok),
        glu_error=float(err),
    )
    if pair is not None:
        c = ch.channel_coordinates(end, pair.i, pair.j)
        out.update(
            pair=[int(pair.i), int(pair.j)],
            pair_class=str(pair.classification),
            pair_c=float(np.ravel(c.c)[0]),  # channel coordinates (ch.channel_coordinates)
            pair_a=float(np.ravel(c.a)[0]),
            pair_eps=float(c.eps),
        )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="git directory of a mirror of flavio-martinelli/channels-to-infinity")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--flow-wall-time", type=float, default=600.0, help="our ODE-phase budget, seconds")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/channels_paper_run.json)")
    args = ap.parse_args()
    try:
        import h5py  # noqa: F401
    except ImportError:
        raise SystemExit("This script reads a JLD2 (HDF5) file: pip install 'invariant-jax[paper]' (h5py).") from None
    path = output_path(args.out, "channels_paper_run.json")
    git = lambda *a, **k: subprocess.run(["git", "-C", args.repo, *a], capture_output=True, check=True, **k)  # noqa: E731
    try:
        commit = git("rev-parse", args.commit, text=True).stdout.strip()
        blob = git("show", f"{commit}:{RUN}").stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise SystemExit(f"Cannot read {RUN} at {args.commit} from --repo {args.repo!r}: {e}.") from None
    d = read_jld2(blob)
    res, setting = d["res"], d["setting"]
    inputs = np.asarray(res["input"]).T  # Julia's (Din + 1, N): MLPGradientFlow appends the bias input
    if not np.all(inputs[:, -1] == 1.0):
        raise SystemExit(
            "The input's last column is not the constant bias input; the file's layout is not the expected one."
        )
    X, Y = inputs[:, :-1], np.asarray(res["target"]).T
    din, r = int(setting["Din"]), int(setting["r"])
    g = ij.mlp([din, r, 1], bias=True)
    point = {k: to_theta(g, np.atleast_2d(res[k]["w1"]), np.atleast_2d(res[k]["w2"])) for k in ("init", "ode_x", "x")}
    net = ij.DAGNetwork(g, "g", edge_weights=point["init"])
    maxnorm = ij.NewtonOptions().maxnorm

    # 1. the reading, checked by exact identities
    identities = []
    for name, theirs in (("init", res["loss_curve"][0]), ("ode_x", res["ode_loss"]), ("x", res["loss"])):
        ours = 2 * float(ij.network_loss(net.with_edge_weights(point[name]), X, Y))
        identities.append(dict(point=name, theirs=float(theirs), ours=ours, rel_diff=abs(ours - theirs) / abs(theirs)))
        if identities[-1]["rel_diff"] > IDENTITY_RTOL:
            raise SystemExit(f"Our MSE at their {name} differs from theirs: {identities[-1]}; the reading is wrong.")

    # 2. our pipeline from their initialization
    flow = ij.FlowPhaseOptions(flow_wall_time=args.flow_wall_time, max_flow_steps=100_000, engine="loop")
    newton = ij.NewtonOptions()
    t = time.perf_counter()
    out = ij.flow_then_newton(net, X, Y, flow=flow, newton=newton)
    wall = time.perf_counter() - t
    ours_ode, ours_end = np.asarray(out.theta_flow[0]), np.asarray(out.theta[0])

    # 3. theirs against ours
    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    rows = dict(
        ode_end=dict(
            theirs=describe(net, X, Y, point["ode_x"], maxnorm)
            | dict(
                iterations=int(res["ode_iterations"]),
                seconds=float(res["ode_time_run"]),
                stopped_by=res["ode_stopped_by"],
            ),
            ours=describe(net, X, Y, ours_ode, maxnorm)
            | dict(
                iterations=int(out.flow_steps[0]),
                seconds=wall - out.wall_time,  # compilation included
                passed_maxnorm_ode=bool(out.passed_maxnorm_ode[0]),
                t_flow=float(out.t_flow[0]),
            ),
            relative_distance=rel(ours_ode, point["ode_x"]),
            cosine_distance=float(ch.jump_distance(ours_ode, point["ode_x"])[0]),
        ),
        final=dict(
            theirs=describe(net, X, Y, point["x"], maxnorm)
            | dict(
                iterations=int(res["optim_iterations"]),
                seconds=float(res["optim_time_run"]),
                stopped_by=res["optim_stopped_by"],
                gnorm=float(res["gnorm"]),
            ),
            ours=describe(net, X, Y, ours_end, maxnorm)
            | dict(
                iterations=int(out.n_steps[0]),
                seconds=out.wall_time,  # compilation included
                stopped_by=str(ij.result_name(out.result)[0]),
                grad_norm=float(out.grad_norm[0]),
                min_eig=float(out.min_eig[0]),
            ),
            relative_distance=rel(ours_end, point["x"]),
            cosine_distance=float(ch.jump_distance(ours_end, point["x"])[0]),
            their_ode_end_to_final=rel(point["ode_x"], point["x"]),  # how far their optimizer moved
        ),
    )
    # their ODE end's excess over maxnorm beside where each form of their penalty balances
    # the loss's pull (channels_saddle_split.py's hover_excess; docs: "Which penalty")
    from channels_saddle_split import hover_excess, penalty_strength

    n = X.shape[0]
    grad = np.asarray(jax.grad(lambda th: ij.network_loss(net.with_edge_weights(th), X, Y))(point["ode_x"]))
    hover = dict(
        theirs_excess=float(ch.weightnorm(point["ode_x"])) - maxnorm,
        ours_excess=float(ch.weightnorm(ours_ode)) - maxnorm,
        balance_without_n_samples=hover_excess(grad, point["ode_x"], penalty_strength("unscaled", n)),
        balance_with_n_samples=hover_excess(grad, point["ode_x"], penalty_strength("n_samples", n)),
    )
    init_jump = dict(
        theirs=float(ch.jump_distance(point["ode_x"], point["x"])[0]),
        ours=float(ch.jump_distance(ours_ode, ours_end)[0]),
    )
    print("identities (relative difference):", {i["point"]: f"{i['rel_diff']:.1e}" for i in identities})
    for k, v in rows.items():
        print(k, "theirs", v["theirs"], "\n   ours", v["ours"], f"\n   relative distance {v['relative_distance']:.3g}")

    figure(g, point, ours_ode, ours_end, path.with_suffix(".png"))
    write_json(
        path,
        dict(
            benchmark="channels_paper_run",
            source=dict(
                repo="flavio-martinelli/channels-to-infinity",
                commit=commit,
                path=RUN,
                their_gitcommit=d.get("gitcommit"),
            ),
            setting=dict(din=din, r=r, activation="g", bias=True, n_samples=int(X.shape[0])),
            identities=identities,
            flow=dict(solver=flow.solver, flow_stop=flow.flow_stop, flow_wall_time=flow.flow_wall_time),
            newton=newton.settings(),
            rows=rows,
            jump_filter_cos=init_jump,
            hover=hover,
            seconds=wall,
        ),
    )


def figure(graph, point, ours_ode, ours_end, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.8))
    for ax, theirs, ours, title in (
        (axes[0], point["ode_x"], ours_ode, "end of the ODE phase"),
        (axes[1], point["x"], ours_end, "final point"),
    ):
        lim = 1.1 * max(np.abs(theirs).max(), np.abs(ours).max())
        ax.plot([-lim, lim], [-lim, lim], color="0.7", lw=0.8)
        ax.scatter(theirs, ours, s=14)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_xlabel("theirs (channels-to-infinity)")
        ax.set_ylabel("ours (ij.flow_then_newton)")
        ax.set_title(f"{title}: each of the {len(graph.edges)} weights", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
