"""How far the flat-channels flow phase gets, as a function of its budget, with two
stage solvers side by side (issue 28, item 3).

Each run is one run of a study, its ODE phase alone (`ij.channels.flow_phase`, one run at a
time), run until `weightnorm` first reaches `maxnorm` (1e3) or until the budget ends
(`--wall` seconds per run, `--max-flow-steps`, flow time 1e12). Below `maxnorm` the
paper's penalty is zero, so this flow is the penalty flow up to the first passage. So one
long run per start gives the whole curve: a run passed `maxnorm` within a smaller budget
exactly when its first passage came within it. The curves are the fraction of runs
passed within a budget of solver steps, of wall seconds and of flow time.

The authors' Fig. 4 criterion at each budget is counted as its numerator: passed, and
the closest first-layer pair at cosine distance < 1e-2 at the first passage. The jump
filter, its denominator, needs a Newton phase from every budget's end and is not run
here; a run that passed would keep (Newton stops at `maxnorm` at once).

Studies (`--study`):
- `levels` (default): the loss-levels study's `g` without bias, r = `--widths`, the
  paper's 101 x 101 Rosenbrock grid, runs `seed = 0 .. --seeds - 1` of each width (the
  committed study's inits);
- `roughness`: the roughness study, softplus with bias, r = 4, GP teachers at the
  paper's four scalings, `--teachers` x `--inits` runs per scaling (its inits and data).

Arms (`--solvers`, names in `ij.SOLVERS`): `kvaerno5` (diffrax's chord stage solve, the
flow phase's solver until this benchmark) and `kvaerno5_newton` (the default now; its
stages solved in `y`, `kvaerno5_newton_diffrax_stages` with diffrax's stage solves). A
name with `:pid` runs the same solver with `diffrax.PIDController`'s step sizes
(`recovery=None`: after a failed step the step grows back by up to 10 at once) instead of
the default `ij.RecoveringPIDController`. The arms alternate run by run. The first run of each arm and cell is timed twice: its first
call (compilation included) and warm; the curves use the warm time.

Usage: python benchmarks/channels_flow_budget.py [--study levels|roughness] [--widths 1,2,3,4,5]
       [--seeds 10] [--solvers kvaerno5,kvaerno5_newton] [--wall 60] [--out ...]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402
from invariant_jax.datasets import PAPER_GP_SCALINGS  # noqa: E402

MAXNORM = 1e3


def levels_runs(widths, seeds):
    """(cell, label, X, Y, net) of the loss-levels group g without bias."""
    X, Y = ij.rosenbrock_grid(10**4)
    for r in widths:
        g = ij.mlp([2, r, 1], bias=False)
        thetas = ch.study_inits(g, seeds)
        for s in range(seeds):
            yield f"r={r}", dict(r=r, seed=s), X, Y, ij.DAGNetwork(g, "g", edge_weights=thetas[s])


def roughness_runs(teachers, inits, samples=10**4):
    """(cell, label, X, Y, net) of the roughness study, as channels_roughness.py draws them."""
    g = ij.mlp([2, 4, 1], bias=True)
    for m in range(teachers):
        for k, s in enumerate(PAPER_GP_SCALINGS):
            X, Y = ij.gp_data(samples, 2, roughness=s, key=jr.fold_in(jr.key(1000 + k), m))
            thetas = ch.study_inits(g, inits, seed=m)
            for i in range(inits):
                yield (
                    "r=4",
                    dict(scaling=s, teacher=m, init=i),
                    X,
                    Y,
                    ij.DAGNetwork(g, "softplus", edge_weights=thetas[i]),
                )


def arm_options(arm: str, **fields) -> ij.FlowPhaseOptions:
    """An arm's flow options (one run at a time, no record): `solver`, a name in
    `ij.SOLVERS`, or `solver:pid` for the same with `recovery=None`."""
    solver, _, controller = arm.partition(":")
    if solver not in ij.SOLVERS or controller not in ("", "pid"):
        raise SystemExit(f"--solvers: {arm!r} is not a name in ij.SOLVERS, nor one with ':pid' ({sorted(ij.SOLVERS)}).")
    if controller:
        fields["recovery"] = None
    return ij.FlowPhaseOptions(solver=solver, n_record=0, engine="loop", **fields)


def one_run(net, X, Y, options):
    """The ODE phase of one run to its first passage of `maxnorm`; wall seconds of the call."""
    t = time.perf_counter()
    res = ch.flow_phase(net, X, Y, options, maxnorm=MAXNORM)
    jax.block_until_ready(res.theta_final)
    wall = time.perf_counter() - t
    theta = np.asarray(res.theta_final)[0]
    wn = float(ch.weightnorm(theta))
    _, cos = ch.first_layer_distances(net.with_edge_weights(theta))
    return dict(
        passed=bool(wn >= MAXNORM),
        steps=int(np.asarray(res.n_steps)[0]),
        t_flow=float(np.asarray(res.t_final)[0]),
        wall=wall,
        weightnorm=wn,
        min_cos=float(cos),
        result=str(np.atleast_1d(ij.result_name(res.result))[0]),
    )


def curve(rows, key, budgets):
    """Per budget: runs passed within it (and the Fig. 4 numerator), of all runs."""
    n = len(rows)
    out = []
    for b in budgets:
        hit = [r for r in rows if r["passed"] and r[key] <= b]
        fig4 = [r for r in hit if r["min_cos"] < 1e-2]
        lo, hi = ch.wilson_interval(len(hit), n)
        out.append(dict(budget=b, passed=len(hit), fraction=len(hit) / n, ci=(lo, hi), fig4=len(fig4), n=n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", choices=("levels", "roughness"), default="levels")
    ap.add_argument("--widths", default="1,2,3,4,5", help="levels: hidden widths r")
    ap.add_argument("--seeds", type=int, default=10, help="levels: runs per width")
    ap.add_argument("--teachers", type=int, default=2, help="roughness: GP teachers per scaling")
    ap.add_argument("--inits", type=int, default=5, help="roughness: inits per teacher")
    ap.add_argument("--solvers", default="kvaerno5,kvaerno5_newton", help="arms: names in ij.SOLVERS")
    ap.add_argument("--wall", type=float, default=60.0, help="wall seconds per run (the budget)")
    ap.add_argument("--max-flow-steps", type=int, default=10**6)
    ap.add_argument("--max-minutes", type=float, default=float("inf"), help="stop starting runs after this")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/...)")
    args = ap.parse_args()
    solvers = args.solvers.split(",")
    path = output_path(args.out, f"channels_flow_budget_{args.study}.json")
    if args.study == "levels":
        runs = levels_runs([int(w) for w in args.widths.split(",")], args.seeds)
    else:
        runs = roughness_runs(args.teachers, args.inits)
    options = {
        s: arm_options(s, flow_stop="stop", flow_wall_time=args.wall, max_flow_steps=args.max_flow_steps)
        for s in solvers
    }
    rows, first_calls = [], []
    start = time.perf_counter()
    for cell, label, X, Y, net in runs:
        if time.perf_counter() - start > 60 * args.max_minutes:
            break
        for s in solvers:
            if not any(f["solver"] == s and f["cell"] == cell for f in first_calls):
                cold = one_run(net, X, Y, options[s])
                first_calls.append(dict(solver=s, cell=cell, first_call=cold["wall"]))
            row = dict(solver=s, cell=cell, **label, **one_run(net, X, Y, options[s]))
            rows.append(row)
            print(
                f"{s:>16} {label}: passed {row['passed']} in {row['steps']} steps, t {row['t_flow']:.3g}, "
                f"{row['wall']:.1f} s, weightnorm {row['weightnorm']:.4g}, min cos {row['min_cos']:.2e}",
                flush=True,
            )
    for f in first_calls:  # the first call minus the same run warm (the cell's first row)
        warm = next(r["wall"] for r in rows if r["solver"] == f["solver"] and r["cell"] == f["cell"])
        f["compile_estimate"] = f["first_call"] - warm
    step_budgets = [b for b in (100, 200, 500, 1000, 2000, 5000, 10**4, 10**5, 10**6) if b <= args.max_flow_steps]
    wall_budgets = [b for b in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600) if b <= args.wall]
    time_budgets = [10.0**k for k in range(2, 13)]
    arms = {}
    for s in solvers:
        rs = [r for r in rows if r["solver"] == s]
        arms[s] = dict(
            n=len(rs),
            passed=sum(r["passed"] for r in rs),
            steps_sum=sum(r["steps"] for r in rs),
            wall_sum=sum(r["wall"] for r in rs),
            by_steps=curve(rs, "steps", step_budgets),
            by_wall=curve(rs, "wall", wall_budgets),
            by_flow_time=curve(rs, "t_flow", time_budgets),
        )
        print(f"{s}: {arms[s]['passed']}/{len(rs)} passed maxnorm; {arms[s]['wall_sum']:.0f} s of runs")
    write_json(
        path,
        dict(
            benchmark="channels_flow_budget",
            study=args.study,
            maxnorm=MAXNORM,
            wall_budget=args.wall,
            max_flow_steps=args.max_flow_steps,
            solvers=solvers,
            total_seconds=time.perf_counter() - start,
            arms=arms,
            first_calls=first_calls,
            runs=rows,
        ),
    )


if __name__ == "__main__":
    main()
