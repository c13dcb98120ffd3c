"""Does the ODE phase's flow-time budget `t1` cut channels short?

`ij.FlowPhaseOptions` bounds the flow at `t1 = 1e12` (of our `L = (1/2N) sum (f - y)^2`); the
authors' runs have no such bound in practice (their committed scaling run stops by
"t > 1e300"). This script takes a committed loss-levels study (`--study`, a
`channels_loss_levels.py` JSON with per-run records), picks the runs whose flow ended at `t1`
without passing `maxnorm` although their closest first-layer pair already merged (cosine
distance < the study's `channel_cos`), keeps the first run of each end state (many seeds of
one width end at the same `weightnorm`: the same channel; the JSON counts them), and reruns
each from the same initialization with the study's settings, `t1` alone changed (`--t1`,
default the authors' 1e300). Per run it records
the study's verdict and the rerun's: the flow time and steps reached, the largest
`weightnorm` of the ODE phase, whether it passed `maxnorm`, the final verdict and
`ch.confirm_channel`.

`--controller` picks the flow's step-size controller (`FlowPhaseOptions(recovery=)`), as
`channels_step_control.py`'s arms do: `default` (the study's, where its settings record
one, else the flow phase's default), `pid` (None),
`recovering` (`ij.StepRecovery(1.5)`) or `horizon:K` (`ij.StepRecovery(1.5, horizon=K)`).

Usage: python benchmarks/channels_t1.py --study benchmarks/results/channels_loss_levels_newton_softplus_bias.json
       [--t1 1e300] [--max-runs 8] [--controller default] [--out benchmarks/results/channels_t1.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels as ch  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from channels_step_control import arm_recovery  # noqa: E402


def candidates(rec: dict, st: dict) -> list[int]:
    """Runs whose flow ended at `t1`, short of `maxnorm`, with a merged closest pair."""
    t = np.asarray(rec["t_flow"], float)
    passed = np.asarray(rec["passed_maxnorm_ode"], bool)
    cos = np.asarray(rec["min_cos"], float)
    return [int(i) for i in np.flatnonzero(np.isclose(t, st["t1"]) & ~passed & (cos < st["channel_cos"]))]


def end_state(rec: dict, i: int) -> tuple:
    """Runs of one width that end the flow at the same weightnorm (4 digits) share an end
    state: many seeds flow into the same channel."""
    return int(rec["r"][i]), float(f"{rec['weightnorm_flow_max'][i]:.4g}")


def distinct(rec: dict, picked: list[int]) -> dict[int, int]:
    """The first run of each end state -> how many candidates share it."""
    first: dict[tuple, int] = {}
    count: dict[int, int] = {}
    for i in picked:
        j = first.setdefault(end_state(rec, i), i)
        count[j] = count.get(j, 0) + 1
    return count


def controller_options(st: dict, controller: str) -> dict:
    """`FlowPhaseOptions`' `recovery` for `--controller`: the study's own (its settings'
    `recovery`, where it records one; else the flow phase's default) for `default`."""
    if controller != "default":
        return dict(recovery=arm_recovery(controller, "--controller"))
    if "recovery" not in st:
        return {}
    return dict(recovery=None if st["recovery"] is None else ij.StepRecovery(**st["recovery"]))


def rerun(rec: dict, st: dict, i: int, X, Y, t1: float, controller: str = "default") -> dict:
    act, bias, r, seed = rec["activation"][i], bool(rec["bias"][i]), int(rec["r"][i]), int(rec["seed"][i])
    g = ij.mlp([X.shape[1], r, 1], bias=bias)
    theta0 = ch.study_inits(g, 1, first_seed=seed, seed=st["seed"])[0]
    net = ij.DAGNetwork(g, act, edge_weights=theta0)
    flow = ij.FlowPhaseOptions(
        t1=t1,
        rtol=st["rtol"],
        atol=st["atol"],
        max_flow_steps=st["max_flow_steps"],
        flow_wall_time=st["flow_wall_time"],
        flow_stop=st["flow_stop"],
        n_record=0,
        engine="loop",
        **controller_options(st, controller),
    )
    newton = ij.NewtonOptions(
        maxnorm=st["maxnorm"], g_tol=st["g_tol"], patience=st["patience"], max_steps=st["max_steps"]
    )
    t = time.perf_counter()
    res = ij.flow_then_newton(net, X, Y, flow=flow, newton=newton)
    seconds = time.perf_counter() - t
    end = net.with_edge_weights(res.theta[0])
    infinite = bool(res.weightnorm[0] >= st["maxnorm"])
    _, cos = ch.first_layer_distances(end)
    return dict(
        activation=act,
        bias=bias,
        r=r,
        seed=seed,
        study=dict(
            t_flow=float(rec["t_flow"][i]),
            flow_steps=int(rec["flow_steps"][i]),
            weightnorm_flow_max=float(rec["weightnorm_flow_max"][i]),
            weightnorm=float(rec["weightnorm"][i]),
            infinite=bool(rec["infinite"][i]),
            stopped_by=str(rec["stopped_by"][i]),
            min_cos=float(rec["min_cos"][i]),
            mse=float(rec["mse"][i]),
        ),
        rerun=dict(
            t_flow=float(res.t_flow[0]),
            flow_steps=int(res.flow_steps[0]),
            weightnorm_flow_max=float(res.weightnorm_flow_max[0]),
            passed_maxnorm_ode=bool(res.passed_maxnorm_ode[0]),
            weightnorm=float(res.weightnorm[0]),
            infinite=infinite,
            confirmed=infinite and bool(ch.confirm_channel(end, X, Y, maxnorm=st["maxnorm"])[0]),
            stopped_by=str(ij.result_name(res.result)[0]),
            min_cos=float(cos),
            mse=2 * float(res.loss[0]),
            seconds=seconds,
        ),
    )


def figure(runs: list[dict], t1_study: float, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 4))
    for k, r in enumerate(runs):
        a, b = r["study"], r["rerun"]
        ax.plot(
            [np.log10(a["t_flow"]), np.log10(b["t_flow"])],
            [a["weightnorm_flow_max"], b["weightnorm_flow_max"]],
            color="0.6",
            lw=0.8,
        )
        ax.scatter(
            np.log10(a["t_flow"]),
            a["weightnorm_flow_max"],
            color="C0",
            s=16,
            label=f"study (t1 = {t1_study:.0e})" if k == 0 else None,
        )
        ax.scatter(np.log10(b["t_flow"]), b["weightnorm_flow_max"], color="C3", s=16, label="rerun" if k == 0 else None)
    ax.axhline(1e3, color="k", lw=0.6, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("log10 of the flow time reached by the ODE phase")
    ax.set_ylabel("largest weightnorm of the ODE phase")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", required=True, help="a channels_loss_levels.py JSON with per-run records")
    ap.add_argument("--t1", type=float, default=1e300, help="the rerun's flow-time budget")
    ap.add_argument("--max-runs", type=int, default=8, help="rerun at most this many end states (in record order)")
    ap.add_argument(
        "--controller", default="default", help="default, pid, recovering or horizon:K (the flow's step sizes)"
    )
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/channels_t1.json)")
    args = ap.parse_args()
    if args.max_runs < 1:
        raise SystemExit(f"--max-runs must be >= 1; got {args.max_runs}.")
    if args.controller != "default":
        arm_recovery(args.controller, "--controller")  # refused before any work
    try:
        d = json.loads(Path(args.study).read_text())
        rec, st = d["records"], d["settings"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"--study must be a channels_loss_levels.py JSON with records and settings: {e!r}.") from None
    if args.t1 <= st["t1"]:
        raise SystemExit(f"--t1 must exceed the study's t1 ({st['t1']:g}); got {args.t1:g}.")
    path = output_path(args.out, "channels_t1.json")
    X, Y = ij.rosenbrock_grid()
    if X.shape[0] != st["n_samples"]:
        raise SystemExit(f"The study used {st['n_samples']} samples, not the default grid's {X.shape[0]}.")
    picked = candidates(rec, st)
    shared = distinct(rec, picked)
    t = time.perf_counter()
    runs = []
    for i in list(shared)[: args.max_runs]:
        runs.append(rerun(rec, st, i, X, Y, args.t1, args.controller) | dict(runs_sharing_end_state=shared[i]))
        b = runs[-1]["rerun"]
        print(
            f"{runs[-1]['activation']} bias={runs[-1]['bias']} r={runs[-1]['r']} seed={runs[-1]['seed']}: "
            f"t {runs[-1]['study']['t_flow']:.2g} -> {b['t_flow']:.2g}, weightnorm "
            f"{runs[-1]['study']['weightnorm_flow_max']:.3g} -> {b['weightnorm_flow_max']:.3g}, "
            f"passed {b['passed_maxnorm_ode']}, infinite {b['infinite']}; {b['seconds']:.0f} s",
            flush=True,
        )
        figure(runs, st["t1"], path.with_suffix(".png"))
        write_json(
            path,
            dict(
                benchmark="channels_t1",
                study=args.study,
                study_t1=st["t1"],
                t1=args.t1,
                controller=args.controller,
                candidates=len(picked),
                end_states=len(shared),
                runs=runs,
                not_run=len(shared) - len(runs),
                summary=dict(
                    rerun=len(runs),
                    passed_maxnorm_ode=sum(r["rerun"]["passed_maxnorm_ode"] for r in runs),
                    infinite_before=sum(r["study"]["infinite"] for r in runs),
                    infinite_after=sum(r["rerun"]["infinite"] for r in runs),
                    confirmed_after=sum(r["rerun"]["confirmed"] for r in runs),
                ),
                total_seconds=time.perf_counter() - t,
            ),
        )


if __name__ == "__main__":
    main()
