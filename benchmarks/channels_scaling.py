"""The flat-channels paper's Fig. 4 design, as its authors ran it: how often does gradient
flow end in a channel as the input dimension and the width grow?

The authors' `scripts/simulations/scaling.jl` pools one-hidden-layer networks over
D_in in {2, 4, 8, 16} x r in {2, 4, 8, 16} (softplus, sigmoid2, relu; biases), each seed
with a fresh data set: 10^4 standard-normal inputs (`standard_normal_input`) and the
modified Rosenbrock teacher z-scored over them. Their `Rosenbrock` is built with its
default `Din = 2`, so the target reads the first two input coordinates only; the other
D_in - 2 are distractors. This arm follows that design with our pipeline
(`ij.flow_then_newton`: the penalized ODE phase under a wall-time budget per run, then
Newton) and reports, per (D_in, r) cell:

- the authors' Fig. 4 criterion: among the runs their jump filter keeps (cosine distance
  between the ODE phase's end and the final point < 1e-2), those whose ODE phase passed
  `maxnorm` and whose closest first-layer pair is at cosine distance < 1e-2;
- ours: infinite (final `weightnorm >= maxnorm`) and confirmed by `ch.confirm_channel`
  (a merging pair with diverging opposite output weights whose GLU limit fits);
- runs with no verdict (Newton stopped by a budget short of `maxnorm`).

Departures from the authors' runs (also in the JSON): our random streams (JAX keys, not
Julia's Xoshiro), so the data and inits are other draws of the same distributions; an ODE
budget of `--flow-wall-time` seconds per run (theirs: 1 h, restarted after a timeout);
Newton with `ij.NewtonOptions` defaults (theirs: an optimizer with 1 h and patience 10^6).

Usage: python benchmarks/channels_scaling.py [--dins 2,4,8,16] [--widths 2,4,8,16]
       [--seeds 4] [--activation softplus] [--flow-wall-time 60] [--max-steps 2000]
       [--newton-max-time inf] [--t1 1e12] [--samples 10000] [--out benchmarks/results/channels_scaling.json]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import jax

jax.config.update("jax_enable_x64", True)

import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels as ch  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)

CHANNEL_COS = 1e-2  # the authors' closest-pair threshold (cosine distance of first-layer rows)
DATA_KEY = 1  # data of seed n: jr.fold_in(jr.key(DATA_KEY), n); inits: ch.study_inits (key 0)


def seed_data(seed: int, din: int, n_samples: int):
    """The authors' scaling data for one seed: standard-normal inputs, the z-scored
    modified Rosenbrock of the first two coordinates (their `Rosenbrock` default
    `Din = 2`), Julia's corrected standard deviation."""
    X = jr.normal(jr.fold_in(jr.key(DATA_KEY), seed), (n_samples, din))
    return X, ij.modified_rosenbrock(X[:, :2], ddof=1)


def run_cell(din: int, r: int, activation: str, seeds: int, n_samples: int, flow, newton) -> dict:
    g = ij.mlp([din, r, 1], bias=True)
    thetas = ch.study_inits(g, seeds)
    runs = []
    t_cell = time.perf_counter()
    for s in range(seeds):
        X, Y = seed_data(s, din, n_samples)
        net = ij.DAGNetwork(g, activation, edge_weights=thetas[s])
        t = time.perf_counter()
        res = ij.flow_then_newton(net, X, Y, flow=flow, newton=newton)
        end = net.with_edge_weights(res.theta[0])
        _, cos = ch.first_layer_distances(end)
        infinite = bool(res.weightnorm[0] >= newton.maxnorm)
        confirmed = infinite and bool(ch.confirm_channel(end, X, Y, maxnorm=newton.maxnorm, pair_tol=CHANNEL_COS)[0])
        jump = float(ch.jump_distance(res.theta_flow, res.theta)[0])
        ode = bool(res.passed_maxnorm_ode[0])
        runs.append(
            dict(
                seed=s,
                stopped_by=str(ij.result_name(res.result)[0]),
                success=bool(np.asarray(res.success)[0]),
                mse=2 * float(res.loss[0]),
                weightnorm=float(res.weightnorm[0]),
                infinite=infinite,
                confirmed=confirmed,
                passed_maxnorm_ode=ode,
                weightnorm_flow_max=float(res.weightnorm_flow_max[0]),
                flow_steps=int(res.flow_steps[0]),
                t_flow=float(res.t_flow[0]),
                newton_steps=int(res.n_steps[0]),
                min_cos=float(cos),
                jump_cos=jump,
                kept=jump < ch.JUMP_MAX_COS,
                authors_channel=jump < ch.JUMP_MAX_COS and ode and cos < CHANNEL_COS,
                min_eig=float(res.min_eig[0]),
                grad_norm=float(res.grad_norm[0]),
                seconds=time.perf_counter() - t,
            )
        )
    n = len(runs)
    kept = sum(r_["kept"] for r_ in runs)

    def count(name, among=None):
        k = sum(r_[name] for r_ in runs if among is None or r_[among])
        m = n if among is None else sum(r_[among] for r_ in runs)
        return dict(k=k, n=m, ci=list(ch.wilson_interval(k, m)))

    summary = dict(
        din=din,
        r=r,
        edges=len(g.edges),
        runs=n,
        kept=kept,
        authors_channel=count("authors_channel", "kept"),
        passed_maxnorm_ode=count("passed_maxnorm_ode"),
        infinite=count("infinite"),
        confirmed=count("confirmed"),
        undecided=sum(not r_["success"] and not r_["infinite"] for r_ in runs),
        saddles=sum(r_["min_eig"] < -1e-8 for r_ in runs),
        stopped_by=dict(Counter(r_["stopped_by"] for r_ in runs)),
        seconds=time.perf_counter() - t_cell,
    )
    return dict(summary=summary, runs=runs)


def figure(cells: list[dict], dins: list[int], widths: list[int], path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("authors_channel", "authors' Fig. 4 criterion (among kept)"),
        ("infinite", "infinite (final weightnorm >= maxnorm)"),
        ("confirmed", "confirmed channel (GLU limit fits)"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels):
        F = np.full((len(dins), len(widths)), np.nan)
        for c in cells:
            s = c["summary"]
            k, m = s[key]["k"], s[key]["n"]
            i, j = dins.index(s["din"]), widths.index(s["r"])
            F[i, j] = k / m if m else np.nan
            ax.text(j, i, f"{k}/{m}", ha="center", va="center", fontsize=8)
        im = ax.imshow(F, vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set_xticks(range(len(widths)), [str(w) for w in widths])
        ax.set_yticks(range(len(dins)), [str(d) for d in dins])
        ax.set_xlabel("width r")
        ax.set_ylabel("input dimension D_in")
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.8, label="fraction")
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _int_list(text: str, name: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"--{name} takes a comma list of integers, e.g. 2,4,8,16; got {text!r}.") from None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dins", default="2,4,8,16", help="input dimensions (comma list; the authors': 2,4,8,16)")
    ap.add_argument("--widths", default="2,4,8,16", help="hidden widths (comma list; the authors': 2,4,8,16)")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per cell (the authors: 10 per slot)")
    ap.add_argument("--activation", default="softplus")
    ap.add_argument("--samples", type=int, default=10**4, help="inputs per seed (the authors': 10^4)")
    ap.add_argument("--flow-wall-time", type=float, default=60.0, help="ODE-phase budget per run, seconds")
    ap.add_argument(
        "--t1", type=float, default=ij.FlowPhaseOptions().t1, help="ODE-phase flow-time budget (the authors': 1e300)"
    )
    ap.add_argument("--max-steps", type=int, default=2000, help="Newton iterations")
    ap.add_argument("--newton-max-time", type=float, default=float("inf"), help="Newton-phase seconds per run")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/channels_scaling.json)")
    args = ap.parse_args()
    dins, widths = _int_list(args.dins, "dins"), _int_list(args.widths, "widths")
    if min(dins) < 2:
        raise SystemExit(f"--dins must be >= 2 (the Rosenbrock teacher reads two coordinates); got {dins}.")
    if args.seeds < 1 or min(widths) < 1 or args.samples < 2:
        raise SystemExit(
            f"--seeds and --widths must be >= 1, --samples >= 2; got {args.seeds}, {widths}, {args.samples}."
        )
    if args.activation not in ij.ACTIVATIONS:
        raise SystemExit(f"--activation must be one of {sorted(ij.ACTIVATIONS)}; got {args.activation!r}.")
    path = output_path(args.out, "channels_scaling.json")
    flow = ij.FlowPhaseOptions(t1=args.t1, flow_wall_time=args.flow_wall_time, max_flow_steps=100_000, engine="loop")
    newton = ij.NewtonOptions(max_steps=args.max_steps, max_time=args.newton_max_time)
    grid = [(d, r) for d in dins for r in widths]
    t = time.perf_counter()
    cells = []
    for din, r in grid:
        cells.append(run_cell(din, r, args.activation, args.seeds, args.samples, flow, newton))
        s = cells[-1]["summary"]
        print(
            f"D_in={din} r={r}: authors' criterion {s['authors_channel']['k']}/{s['kept']} kept, "
            f"infinite {s['infinite']['k']}, confirmed {s['confirmed']['k']}, undecided {s['undecided']} "
            f"of {s['runs']}; {s['seconds']:.0f} s",
            flush=True,
        )
        figure(cells, dins, widths, path.with_suffix(".png"))
        write_json(  # after every cell: finished ones survive
            path,
            dict(
                benchmark="channels_scaling",
                activation=args.activation,
                bias=True,
                data=(
                    f"{args.samples} standard-normal inputs per seed (key fold_in(key({DATA_KEY}), seed)), "
                    "modified Rosenbrock of the first two coordinates, z-scored (ddof 1)"
                ),
                inits="ch.study_inits (MLPGradientFlow glorot_normal, zero biases), seeds 0..n-1",
                flow=dict(solver=flow.solver, flow_stop=flow.flow_stop, flow_wall_time=flow.flow_wall_time, t1=flow.t1),
                newton=newton.settings(),
                channel_cos=CHANNEL_COS,
                jump_max_cos=ch.JUMP_MAX_COS,
                cells=cells,
                not_run=[list(c) for c in grid[len(cells) :]],
                total_seconds=time.perf_counter() - t,
            ),
        )


if __name__ == "__main__":
    main()
