"""How the penalized flow phase hovers at `maxnorm`, and what the hover costs.

Study runs of the loss-levels g-without-bias group (2-r-1 `g` network without bias, the
101 x 101 Rosenbrock grid, `ch.study_inits`), one process, three measurements per run:

- **the flow phase** (`ch.flow_phase`, the default penalty and Newton stage solve, loop
  engine) for each `--hover-steps` value, its first call and then warm: whether it passed
  `maxnorm`, solver steps, flow time, result, `weightnorm` at the end and its maximum,
  data loss, closest-pair cosine distance, wall seconds;
- **the hover alone**, from the passage point (the end of `hover_steps=0`), run by
  `ij.gradient_flow` on the penalized loss for `--probe-steps` solver steps: accepted and
  rejected steps, the flow time it covered, and how far the loss, `weightnorm` and the
  closest pair moved;
- **one implicit stage where the hover stands**: from the end of the largest
  `hover_steps` (a hovering state; it may lie a little below `maxnorm`), Newton's
  iteration on the stage equation `z = h gamma F(y + z)` (`gamma = 0.26`, Kvaerno5's
  diagonal; `F` the penalized field, its Jacobian by `jax.jacfwd`) for several `h`, from
  `z = 0`: the residual, the step and `max |z|` per iteration. Where the penalty's
  gradient (quadratic in `weightnorm - maxnorm`) dominates, Newton halves its step per
  iteration instead of converging quadratically.

Usage: PYTHONPATH=. python benchmarks/channels_hover.py [--runs 2:2,3:0,4:1,5:0]
       [--hover-steps 0,100] [--probe-steps 1000] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402

MAXNORM = 1e3
GAMMA = 0.26  # Kvaerno5's diagonal coefficient
STAGE_H = (1e5, 1e6, 1e7)


def study_run(r: int, seed: int) -> ij.DAGNetwork:
    g = ij.mlp([2, r, 1], bias=False)
    return ij.DAGNetwork(g, "g", edge_weights=ch.study_inits(g, seed + 1)[seed])


def describe(net, theta, loss) -> dict:
    return dict(
        weightnorm=float(ch.weightnorm(theta)),
        loss=float(loss),
        min_cos=float(ch.closest_pair_distance(net, theta)),
    )


def flow_row(net, X, Y, hover_steps: int) -> dict:
    flow = ij.FlowPhaseOptions(hover_steps=hover_steps, n_record=0, engine="loop")
    t = time.perf_counter()
    res = ch.flow_phase(net, X, Y, flow)
    wall = time.perf_counter() - t
    theta = res.theta_final[0]
    return dict(
        hover_steps=hover_steps,
        passed=bool(res.weightnorm_max[0] >= MAXNORM),
        steps=int(res.n_steps[0]),
        t_flow=float(res.t_final[0]),
        result=str(ij.result_name(res.result)[0]),
        weightnorm_max=float(res.weightnorm_max[0]),
        wall=wall,
        theta=np.asarray(theta),
        **describe(net, theta, res.loss_final[0]),
    )


def hover_probe(net, X, Y, start: dict, steps: int) -> dict:
    """The penalized flow from the passage point for `steps` solver steps."""
    obj = ij.Objective("mse", regularizer=ch.MaxnormPenalty(MAXNORM), strength=1.0)
    flow = ij.FlowPhaseOptions()  # the flow phase's solver, tolerances and step-size controller
    solver = ij.SolverOptions(flow.solver, rtol=flow.rtol, atol=flow.atol, max_steps=steps, recovery=flow.recovery)
    t = time.perf_counter()
    f = ij.gradient_flow(
        net.with_edge_weights(jnp.asarray(start["theta"])), X, Y, 1e12, t0=start["t_flow"], solver=solver, loss=obj
    )
    wall = time.perf_counter() - t
    end = describe(net, f.theta_final, f.loss_final)
    return dict(
        steps=steps,
        accepted=int(f.stats["num_accepted_steps"]),
        rejected=int(f.stats["num_rejected_steps"]),
        t_start=start["t_flow"],
        t_end=float(f.t_final),
        result=str(ij.result_name(f.result)),
        wall_first_call=wall,
        start={k: start[k] for k in ("weightnorm", "loss", "min_cos")},
        end=end,
        loss_change_relative=abs(end["loss"] - start["loss"]) / start["loss"],
        min_cos_change_relative=abs(end["min_cos"] - start["min_cos"]) / start["min_cos"],
    )


def stage_newton(net, X, Y, theta, iterations: int = 15) -> list[dict]:
    """Newton on one implicit stage `z = h gamma F(theta + z)`, from `z = 0`."""
    field = ij.flow_field(net, regularizer=ch.MaxnormPenalty(MAXNORM), strength=1.0)
    Xc, Yc = ij.losses.check_data(net.graph, X, Y)
    F = jax.jit(lambda th: field(0.0, th, (Xc, Yc)))
    DF = jax.jit(jax.jacfwd(lambda th: field(0.0, th, (Xc, Yc))))
    y = jnp.asarray(theta)
    out = []
    for h in STAGE_H:
        hg, z, rows = GAMMA * h, jnp.zeros_like(y), []
        for _ in range(iterations):
            R = z - hg * F(y + z)
            J = np.eye(y.size) - hg * np.asarray(DF(y + z))
            dz = np.linalg.solve(J, np.asarray(R))
            z = z - dz
            rows.append(
                dict(
                    residual=float(jnp.max(jnp.abs(R))),
                    step=float(np.max(np.abs(dz))),
                    z=float(jnp.max(jnp.abs(z))),
                    weightnorm=float(ch.weightnorm(y + z)),
                )
            )
        out.append(dict(h=h, iterations=rows))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="2:2,3:0,4:1,5:0", help="r:seed pairs of the g-without-bias group")
    ap.add_argument("--hover-steps", default="0,100", help="FlowPhaseOptions.hover_steps values (0 first)")
    ap.add_argument("--probe-steps", type=int, default=1000, help="solver steps of the hover-alone probe")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/...)")
    args = ap.parse_args()
    hovers = [int(h) for h in args.hover_steps.split(",")]
    if hovers[0] != 0:
        raise SystemExit("--hover-steps must start with 0 (the passage point the probes start from).")
    path = output_path(args.out, "channels_hover.json")
    X, Y = ij.rosenbrock_grid(10**4)
    start, rows = time.perf_counter(), []
    warnings.simplefilter("ignore", ij.NoConservationLaw)
    for pair in args.runs.split(","):
        r, seed = (int(v) for v in pair.split(":"))
        net = study_run(r, seed)
        row = dict(r=r, seed=seed, flow_phase=[])
        for h in hovers:
            cold = flow_row(net, X, Y, h)
            warm = flow_row(net, X, Y, h)
            warm["first_call"] = cold["wall"]
            row["flow_phase"].append(warm)
            print(
                f"r={r} seed={seed} hover_steps={h}: {warm['result']}, {warm['steps']} steps, t {warm['t_flow']:.4g}, "
                f"weightnorm {warm['weightnorm']:.6g} (max {warm['weightnorm_max']:.6g}), "
                f"{warm['first_call']:.1f} s first, {warm['wall']:.1f} s warm",
                flush=True,
            )
        passage = row["flow_phase"][0]
        if passage["passed"]:
            row["hover_probe"] = hover_probe(net, X, Y, passage, args.probe_steps)
            hovering = row["flow_phase"][-1]
            row["stage_start"] = dict(hover_steps=hovering["hover_steps"], weightnorm=hovering["weightnorm"])
            row["stage_newton"] = stage_newton(net, X, Y, hovering["theta"])
            p = row["hover_probe"]
            print(
                f"  hover alone, {p['steps']} steps: {p['rejected']} rejected, t {p['t_start']:.4g} -> {p['t_end']:.4g}, "
                f"loss moved {p['loss_change_relative']:.1e}, closest pair {p['min_cos_change_relative']:.1e} (relative)",
                flush=True,
            )
        for f in row["flow_phase"]:
            f.pop("theta")
        rows.append(row)
    write_json(
        path,
        dict(
            benchmark="channels_hover",
            maxnorm=MAXNORM,
            solver="kvaerno5_newton, rtol 1e-3, atol 1e-6 (FlowPhaseOptions defaults)",
            stage_gamma=GAMMA,
            total_seconds=time.perf_counter() - start,
            runs=rows,
        ),
    )


if __name__ == "__main__":
    main()
