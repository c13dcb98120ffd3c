"""Flat channels in deep networks: where in the network do they form?

Beyond the paper (issue 28): the loss-levels pipeline (`ij.flow_then_newton` with its
defaults: the penalized ODE phase, then Newton) on MLPs with two and three hidden layers,
`mlp([2, w, ..., w, 1])`, on the loss-levels target (`ij.rosenbrock_grid()`, 101 x 101
points), from MLPGradientFlow's Glorot inits (`ch.study_inits`, seeds 0..n-1). At each end
point `ch.detect_channels` (the one definition of a channel: `weightnorm >= maxnorm`,
a pair of one layer with input weights at cosine distance < 1e-2, opposite diverging output
weights; its late-update test is skipped, as `ch.confirm_channel` does at a Newton end
point) names every merging pair and its layer, and every group of three or more neurons
of one layer that merge together (`groups`, at cosine distance < 1e-2).

Per run the JSON records the stop reason, the end loss and `weightnorm`, whether the ODE
phase alone passed `maxnorm`, the smallest Hessian eigenvalue, and each pair (layer,
neurons, cosine distance, class) and group; per architecture a summary. The PNG beside it
plots, per architecture, the channels found in each hidden layer and the runs' end loss
against `weightnorm`.

Usage: python benchmarks/channels_deep.py [--widths 4] [--depths 2,3] [--seeds 10]
       [--activation softplus] [--bias] [--flow-wall-time 120] [--max-steps 2000]
       [--out benchmarks/results/channels_deep.json]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels as ch  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)


def run_arch(sizes: list[int], activation: str, bias: bool, seeds: int, X, Y, flow, newton) -> dict:
    g = ij.mlp(sizes, bias=bias)
    thetas = ch.study_inits(g, seeds)
    net0 = ij.DAGNetwork(g, activation, edge_weights=thetas[0])
    nets = eqx.filter_vmap(net0.with_edge_weights)(thetas)
    t = time.perf_counter()
    res = ij.flow_then_newton(nets, X, Y, flow=flow, newton=newton)
    seconds = time.perf_counter() - t
    layers = {v: g.level_of(v) for v in g.hidden}  # 1 = the first hidden layer
    names = ij.result_name(res.result)
    runs = []
    for s in range(seeds):
        end = net0.with_edge_weights(res.theta[s])
        rep = ch.detect_channels(end, maxnorm=newton.maxnorm)  # no data: no late-update test
        pairs = [
            dict(
                layer=layers[p.nodes[0]],
                neurons=[int(p.i), int(p.j)],
                cosine_distance=float(cd),
                classification=str(p.classification),
            )
            for p, cd in zip(rep.pairs, np.asarray(rep.cosine_distances))
        ]
        runs.append(
            dict(
                seed=s,
                stopped_by=str(names[s]),
                success=bool(np.asarray(res.success)[s]),
                mse=2 * float(res.loss[s]),
                weightnorm=float(res.weightnorm[s]),
                infinite=bool(res.weightnorm[s] >= newton.maxnorm),
                passed_maxnorm_ode=bool(res.passed_maxnorm_ode[s]),
                min_eig=float(res.min_eig[s]),
                grad_norm=float(res.grad_norm[s]),
                pairs=pairs,
                groups=[dict(layer=layers[g.hidden[k[0]]], neurons=[int(i) for i in k]) for k in rep.groups],
            )
        )
    channels = Counter(p["layer"] for r in runs for p in r["pairs"] if p["classification"] == "channel")
    with_channel = {
        layer: sum(any(p["layer"] == layer and p["classification"] == "channel" for p in r["pairs"]) for r in runs)
        for layer in sorted(set(layers.values()))
    }
    summary = dict(
        sizes=sizes,
        edges=len(g.edges),
        runs=seeds,
        infinite=sum(r["infinite"] for r in runs),
        passed_maxnorm_ode=sum(r["passed_maxnorm_ode"] for r in runs),
        undecided=sum(not r["success"] and not r["infinite"] for r in runs),
        runs_with_channel=sum(any(p["classification"] == "channel" for p in r["pairs"]) for r in runs),
        channels_per_layer={str(k): channels.get(k, 0) for k in sorted(set(layers.values()))},
        runs_with_channel_per_layer={str(k): v for k, v in sorted(with_channel.items())},
        merging_pairs_per_layer={
            str(k): sum(p["layer"] == k for r in runs for p in r["pairs"]) for k in sorted(set(layers.values()))
        },
        runs_with_group=sum(bool(r["groups"]) for r in runs),
        saddles=sum(r["min_eig"] < -1e-8 for r in runs),
        stopped_by=dict(Counter(r["stopped_by"] for r in runs)),
        seconds=seconds,
    )
    return dict(summary=summary, runs=runs)


def figure(archs: list[dict], path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(archs), figsize=(4.2 * len(archs), 6.4), squeeze=False)
    for j, a in enumerate(archs):
        s = a["summary"]
        name = "-".join(map(str, s["sizes"]))
        layers = list(s["channels_per_layer"])
        ax = axes[0, j]
        ax.bar([f"layer {k}" for k in layers], [s["runs_with_channel_per_layer"][k] for k in layers], color="C0")
        ax.set_ylabel("runs with a channel in the layer")
        ax.set_ylim(0, s["runs"])
        ax.set_title(f"{name}: {s['runs_with_channel']}/{s['runs']} runs with a channel", fontsize=9)
        ax = axes[1, j]
        for r in a["runs"]:
            lay = sorted({p["layer"] for p in r["pairs"] if p["classification"] == "channel"})
            ax.scatter(
                r["weightnorm"],
                r["mse"],
                c="C3" if lay else "C7",
                marker="o" if len(lay) <= 1 else "D",
                s=18,
            )
            if lay:
                ax.annotate(",".join(map(str, lay)), (r["weightnorm"], r["mse"]), fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("weightnorm at the end")
        ax.set_ylabel("MSE at the end")
        ax.set_title("red: a channel (label: its layers); grey: none", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="4", help="hidden width of every layer (comma list)")
    ap.add_argument("--depths", default="2,3", help="hidden layers (comma list)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--activation", default="softplus")
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--flow-wall-time", type=float, default=120.0, help="ODE-phase budget per run, seconds")
    ap.add_argument("--max-steps", type=int, default=2000, help="Newton iterations")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/channels_deep.json)")
    args = ap.parse_args()
    try:
        depths = [int(d) for d in args.depths.split(",")]
        widths = [int(v) for v in args.widths.split(",")]
    except ValueError:
        raise SystemExit(
            f"--depths and --widths take comma lists of integers; got {args.depths!r}, {args.widths!r}."
        ) from None
    if args.seeds < 1 or min(depths) < 1 or min(widths) < 1:
        raise SystemExit(f"--seeds, --depths and --widths must be >= 1; got {args.seeds}, {depths}, {widths}.")
    path = output_path(args.out, "channels_deep.json")
    X, Y = ij.rosenbrock_grid()
    shapes = [[X.shape[1], *([w] * depth), 1] for depth in depths for w in widths]
    flow = ij.FlowPhaseOptions(flow_wall_time=args.flow_wall_time, max_flow_steps=100_000, engine="loop")
    newton = ij.NewtonOptions(max_steps=args.max_steps)
    t = time.perf_counter()
    archs = []
    for sizes in shapes:
        archs.append(run_arch(sizes, args.activation, args.bias, args.seeds, X, Y, flow, newton))
        s = archs[-1]["summary"]
        print(
            f"{sizes}: {s['runs_with_channel']}/{s['runs']} runs with a channel, per layer "
            f"{s['runs_with_channel_per_layer']}; infinite {s['infinite']}; {s['seconds']:.0f} s",
            flush=True,
        )
        figure(archs, path.with_suffix(".png"))
        write_json(  # after every architecture: finished ones survive
            path,
            dict(
                benchmark="channels_deep",
                activation=args.activation,
                bias=args.bias,
                data=f"ij.rosenbrock_grid(): {X.shape[0]} points",
                flow=dict(solver=flow.solver, flow_stop=flow.flow_stop, flow_wall_time=flow.flow_wall_time),
                newton=dict(max_steps=newton.max_steps, maxnorm=newton.maxnorm),
                architectures=archs,
                not_run=[list(x) for x in shapes[len(archs) :]],
                total_seconds=time.perf_counter() - t,
            ),
        )


if __name__ == "__main__":
    main()
