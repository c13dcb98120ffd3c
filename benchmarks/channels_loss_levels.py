"""The flat-channels paper's loss-levels study (its Fig. 2 / App. A.1, A.3), done its way:
modified Rosenbrock on the regular grid on [-sqrt3, sqrt3]^2, one hidden layer of
r = 1..5 neurons, activations g and softplus, with and without biases,
MLPGradientFlow-Glorot inits; a Kvaerno5 gradient-flow phase (rtol 1e-3, atol 1e-6,
the paper's KenCarp58 tolerances) then trust-region Newton with the exact Hessian
(`ij.flow_then_newton`); the authors' criteria: infinite when
weightnorm = sum(theta^2)/(2E) >= 1e3, duplicates when two first-layer rows are within
L2 distance 1e-6, loss levels clustered at relative tolerance 1e-3 (on the paper's
MSE = (1/N) sum (f-y)^2 = 2 L). Every infinite run is checked with `confirm_channel`.

Also an SGD / Adam arm (`ij.fit`, full batch and minibatch, a few learning rates, r = 4,
g, bias) classified with the same criteria; `channels_optimizers.py` runs that arm alone on any
cell.

Full size (the paper's grid, 101 x 101 = 10201 points; >= 100 seeds per cell) is meant
for a GPU; `--grid 100 --seeds 16` is the reduced size run on the shared 2-core CPU.

Usage: python benchmarks/channels_loss_levels.py [--grid 10000] [--seeds 100]
       [--activations g,softplus] [--biases 0,1] [--widths 1,2,3,4,5] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402


def channel_like(net) -> bool:
    """A merging first-layer pair (cosine distance < 1e-2) whose output weights are opposite
    and diverging (`detect_channels` "channel" or "candidate" at Euclidean norm threshold 1,
    i.e. `weightnorm >= 1 / (2E)`)."""
    rep = ch.detect_channels(net, pair_tol=1e-2, maxnorm=0.5 / len(net.graph.edges))
    return any(p.classification in (ch.PairClass.channel, ch.PairClass.candidate) for p in rep.pairs)


def optimizer_arm(X, Y, *, seeds, lrs, epochs, maxnorm, batch_size, activation="g", bias=True, width=4):
    """SGD / Adam (`lrs`: optimiser -> learning rates) from the Newton study's inits of seeds
    0 .. seeds - 1 of one cell, full batch and (unless `batch_size` is None) minibatch,
    classified like the Newton runs."""
    g = ij.mlp([X.shape[1], width, 1], bias=bias)
    thetas = ch.study_inits(g, seeds)
    net0 = ij.DAGNetwork(g, activation, edge_weights=thetas[0])
    nets = eqx.filter_vmap(net0.with_edge_weights)(thetas)
    rows = []
    for opt in lrs:
        for lr in lrs[opt]:
            for bs in dict.fromkeys((None, batch_size)):
                t = time.perf_counter()
                # the same number of updates for full batch and minibatch
                ep = epochs if bs is None else max(1, epochs * bs // X.shape[0])
                res = ij.fit(
                    nets,
                    X,
                    Y,
                    loss="mse",
                    key=jr.key(1),
                    options=ij.TrainOptions(optimizer=opt, learning_rate=lr, epochs=ep, batch_size=bs, log_every=ep),
                )
                theta = np.asarray(res.network.edge_weights())
                wn = np.asarray(ij.weightnorm(theta))
                inf, conf, near = 0, 0, 0
                for n in range(seeds):
                    net = net0.with_edge_weights(theta[n])
                    near += channel_like(net)
                    if wn[n] >= maxnorm:
                        inf += 1
                        conf += ch.confirm_channel(net, X, Y, maxnorm=maxnorm)[0]
                L = np.asarray(jax.vmap(lambda th: ij.losses.network_loss(net0.with_edge_weights(th), X, Y))(theta))
                lo, hi = ch.wilson_interval(near, seeds)
                rows.append(
                    dict(
                        activation=activation,
                        bias=bias,
                        r=width,
                        optimizer=opt,
                        lr=lr,
                        batch_size=bs,
                        epochs=ep,
                        updates=ep * (1 if bs is None else X.shape[0] // bs),
                        n=seeds,
                        infinite=inf,
                        confirmed=conf,
                        channel_like=near,
                        channel_like_ci=(lo, hi),
                        median_weightnorm=float(np.median(wn)),
                        max_weightnorm=float(wn.max()),
                        weightnorm=wn.tolist(),
                        theta=theta.tolist(),
                        median_mse=float(np.median(2 * L)),
                        seconds=time.perf_counter() - t,
                    )
                )
                r = rows[-1]
                print(
                    f"{opt:>5} lr={lr:<6g} batch={str(bs):>5}: weightnorm median {r['median_weightnorm']:.3g} max "
                    f"{r['max_weightnorm']:.3g}; infinite {inf}/{seeds}; merging pair with opposite diverging "
                    f"output weights {near}/{seeds} [{100 * lo:.0f}, {100 * hi:.0f}]%; median MSE "
                    f"{r['median_mse']:.4g} ({r['seconds']:.0f} s)",
                    flush=True,
                )
    return rows


def figures(study, out_png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = study.records
    combos = [(a, b) for a in study.settings["activations"] for b in study.settings["biases"]]
    fig, axes = plt.subplots(3, len(combos), figsize=(3.2 * len(combos), 9), squeeze=False)
    cmap = plt.get_cmap("plasma", 6)
    for c, (act, bias) in enumerate(combos):
        m = study.select(activation=act, bias=bias)
        mse, inf = rec["mse"][m], rec["infinite"][m]
        order = np.argsort(mse)[::-1]
        levels, members = ch.cluster_loss_levels(mse[order], 1e-3)
        ax = axes[0, c]
        for lv, mem in zip(levels, members):
            idx = order[mem]
            n_inf = int(inf[idx].sum())
            ax.barh(lv, len(idx) - n_inf, height=lv * 0.03, color="tab:blue")
            ax.barh(lv, n_inf, left=len(idx) - n_inf, height=lv * 0.03, color="tab:red")
        ax.set_yscale("log")
        ax.set_title(f"{act}, bias={bias}")
        ax.set_xlabel("runs at the loss level")
        ax.set_ylabel("MSE (paper's (1/N) sum)")
        ax.legend(
            handles=[plt.Rectangle((0, 0), 1, 1, color="tab:blue"), plt.Rectangle((0, 0), 1, 1, color="tab:red")],
            labels=["finite", "infinite"],
            fontsize=7,
        )
        summ = {
            s["r"]: s
            for s in study.summary(("activation", "bias", "r"))
            if s["activation"] == act and s["bias"] == bias
        }
        rs = sorted(summ)
        for row, key, title in ((1, "infinite", "% infinite"), (2, "duplicate", "% duplicate neurons")):
            ax = axes[row, c]
            f = np.array([summ[k][f"{key}_fraction"] for k in rs]) * 100
            ci = np.array([summ[k][f"{key}_ci"] for k in rs]) * 100
            ax.bar(rs, f, color=[cmap(k) for k in rs], edgecolor="k")
            ax.errorbar(rs, f, yerr=[f - ci[:, 0], ci[:, 1] - f], fmt="none", ecolor="k", capsize=3)
            if key == "infinite":
                conf = np.array([summ[k]["confirmed"] / summ[k]["n"] for k in rs]) * 100
                ax.plot(rs, conf, "kx", label="confirmed channel")
                ax.legend(fontsize=7)
            ax.set_ylim(0, 105)
            ax.set_xlabel("network size r")
            ax.set_ylabel(title + " (Wilson 95%)")
    fig.tight_layout()
    out_png = save_figure(fig, out_png, dpi=110)
    print(f"wrote {out_png}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", type=int, default=10**4, help="requested samples of the regular grid (paper: 10^4)")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds run are first-seed .. first-seed + seeds - 1, so that later runs can add seeds to a cell",
    )
    ap.add_argument("--widths", default="1,2,3,4,5")
    ap.add_argument("--activations", default="g,softplus")
    ap.add_argument("--biases", default="0,1")
    ap.add_argument("--max-flow-steps", type=int, default=2000)
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--patience", type=int, default=100)
    ap.add_argument(
        "--flow-stop",
        default="stop",
        choices=("stop", "penalty"),
        help="ODE phase: stop at maxnorm (the committed studies) or MLPGradientFlow's cubic maxnorm "
        "penalty (the paper's way; needs --engine loop or vmap)",
    )
    ap.add_argument("--flow-wall-time", type=float, default=float("inf"), help="ODE-phase seconds per run")
    ap.add_argument("--t1", type=float, default=1e12, help="ODE-phase flow time (of L = (1/2N) sum (f-y)^2)")
    ap.add_argument("--n-record", type=int, default=0, help="log-spaced trajectory rows per run (loop/vmap engines)")
    ap.add_argument("--optimizers", action="store_true", help="also run the SGD / Adam arm")
    ap.add_argument("--opt-seeds", type=int, default=32)
    ap.add_argument("--opt-epochs", type=int, default=20000, help="full-batch updates (minibatch: the same count)")
    ap.add_argument(
        "--engine",
        default="sweep",
        choices=("sweep", "vmap", "loop"),
        help="flow phase through ij.sweep_flows, one vmap of gradient_flow (suits a GPU), or one run "
        "at a time (fastest on a CPU)",
    )
    ap.add_argument(
        "--newton-batch",
        type=int,
        default=None,
        help="runs per Newton batch (default: 1 on CPU, all on an accelerator)",
    )
    ap.add_argument(
        "--round-seeds",
        type=int,
        default=None,
        help="seeds per cell per round (default: all --seeds in one round); rounds go over every cell, "
        "so a time budget leaves every cell with the same number of seeds of the finished rounds",
    )
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=float("inf"),
        help="start no new (activation, bias, r) cell after this many minutes (recorded in cells_not_run)",
    )
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/local/channels_loss_levels_<tag>.json); the PNG goes beside it",
    )
    args = ap.parse_args()
    X, Y = ij.rosenbrock_grid(args.grid)
    tag = args.tag or f"grid{X.shape[0]}_seeds{args.seeds}"
    path = output_path(args.out, f"channels_loss_levels_{tag}.json")
    print(f"{jax.devices()}; {X.shape[0]} grid points; {args.seeds} seeds per cell", flush=True)
    t = time.perf_counter()
    deadline = t + 60 * args.max_minutes
    cells = [
        (a, int(b), int(w))
        for a in args.activations.split(",")
        for b in args.biases.split(",")
        for w in args.widths.split(",")
    ]
    R = args.round_seeds or args.seeds
    parts, cell_seconds, skipped = [], [], []
    if args.first_seed < 0:
        raise SystemExit(f"--first-seed must be >= 0; got {args.first_seed}.")
    end = args.first_seed + args.seeds
    flow = ij.FlowPhaseOptions(
        t1=args.t1,
        max_flow_steps=args.max_flow_steps,
        flow_stop=args.flow_stop,
        flow_wall_time=args.flow_wall_time,
        n_record=args.n_record,
        engine=args.engine,
    )
    newton = ij.NewtonOptions(max_steps=args.max_steps, patience=args.patience, batch_size=args.newton_batch)
    for first in range(args.first_seed, end, R):
        n = min(R, end - first)
        for act, bias, w in cells:
            if time.perf_counter() > deadline:
                skipped.append(dict(activation=act, bias=bool(bias), r=w, first_seed=first, n_seeds=n))
                continue
            tc = time.perf_counter()
            grid = ch.StudyGrid(widths=[w], activations=[act], biases=[bool(bias)], n_seeds=n, first_seed=first)
            parts.append(
                ch.convergence_study(X, Y, grid=grid, flow=flow, newton=newton, label="rosenbrock", progress=False)
            )
            cell_seconds.append(
                dict(
                    activation=act, bias=bool(bias), r=w, first_seed=first, n_seeds=n, seconds=time.perf_counter() - tc
                )
            )
            study = ch.ConvergenceStudy.concatenate(parts)
            study = ch.ConvergenceStudy(
                records=study.records,
                settings=dict(
                    study.settings,
                    n_seeds=args.seeds,
                    first_seed=0,
                    seeds_per_round=R,
                    widths=sorted({c["r"] for c in cell_seconds}),
                    activations=list(dict.fromkeys(c["activation"] for c in cell_seconds)),
                    biases=list(dict.fromkeys(c["bias"] for c in cell_seconds)),
                ),
                seconds=study.seconds,
            )
            dt = time.perf_counter() - t
            print(
                f"{act} bias={bool(bias)} r={w} seeds {first}..{first + n - 1}: {n} runs in "
                f"{cell_seconds[-1]['seconds']:.0f} s (total {dt:.0f} s)",
                flush=True,
            )
            out = dict(
                benchmark="channels_loss_levels",
                platform=platform.platform(),
                devices=[str(d) for d in jax.devices()],
                jax=jax.__version__,
                total_seconds=dt,
                n_grid=int(X.shape[0]),
                cell_seconds=cell_seconds,
                cells_not_run=skipped,
                summary=study.summary(),
                **study.to_dict(),
            )
            write_json(path, json.loads(json.dumps(out, default=str)))  # after every cell: partial results survive
        if parts and first + n < end:
            figures(study, path.with_suffix(".png"))  # after every round
    out["cells_not_run"] = skipped
    print(study.table())
    print(f"{len(study.records['loss'])} runs in {dt:.0f} s (compilation included); not run (time budget): {skipped}")
    if args.optimizers:
        out["optimizers"] = optimizer_arm(
            X,
            Y,
            seeds=args.opt_seeds,
            lrs=dict(sgd=[0.05, 0.3], adam=[1e-3, 1e-2]),
            epochs=args.opt_epochs,
            maxnorm=1e3,
            batch_size=32,
        )
    write_json(path, json.loads(json.dumps(out, default=str)))
    figures(study, path.with_suffix(".png"))


if __name__ == "__main__":
    main()
