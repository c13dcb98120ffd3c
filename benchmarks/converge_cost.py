"""Where the time of one loss-levels cell goes, before and after issue 14's speed-up,
side by side in one process (measured on whatever machine runs it; on the shared 2-core
CPU the absolute numbers are disturbed by other jobs, the ratios less so).

The paper's data (modified Rosenbrock on the 101 x 101 grid), g with bias, r = 2 and 5,
MLPGradientFlow-Glorot inits. Three measurements per width:

- bare costs (compiled, median of repeats): the loss, its gradient by `jax.grad`, the
  structured gradient, the Hessian by `jax.hessian` and by `ij.losses.hessian_fn`
  (structured, exact);
- the flow phase (Kvaerno5, rtol 1e-3, atol 1e-6): `--flow-steps` steps of one run,
  "before" = `engine="vmap"` with the Jacobian by autodiff (a callable loss, which the
  structured path does not take), "after" = `engine="loop"` with the structured
  Hessian; per-step ms and compile seconds;
- the Newton phase from `--seeds` inits, `--newton-steps` steps at most: "before" = one
  vmapped batch (every run pays for the slowest) with `jax.hessian`, "after" = one run at
  a time with the structured Hessian ("vmap_structured": one batch, structured Hessian,
  to separate the two effects); wall time, steps summed and the longest run.

Usage: python benchmarks/converge_cost.py [--widths 2,5] [--flow-steps 40] [--seeds 4] [--newton-steps 60]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402
from invariant_jax.channels import flow_phase, newton_reason  # noqa: E402
from invariant_jax.losses import check_data, edge_loss_fn, gradient_fn, hessian_fn  # noqa: E402


def median_ms(f, *a, repeats=7):
    """Milliseconds per call of compiled `f(*a)`, warm: the median of `repeats` calls."""
    jax.block_until_ready(f(*a))
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*a))
        ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts))


def _timed(f):
    t = time.perf_counter()
    out = jax.block_until_ready(f())
    return out, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="2,5")
    ap.add_argument("--flow-steps", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--newton-steps", type=int, default=60)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    X, Y = ij.rosenbrock_grid(10**4)
    rows = []
    for r in [int(w) for w in args.widths.split(",")]:
        g = ij.mlp([2, r, 1], bias=True)
        thetas = ch.study_inits(g, args.seeds)
        net0 = ij.DAGNetwork(g, "g", edge_weights=thetas[0])
        Xc, Yc = check_data(g, X, Y)
        th = thetas[0]
        L = edge_loss_fn(net0, Xc, Yc)
        bare = dict(
            loss=median_ms(jax.jit(L), th),
            grad_autodiff=median_ms(jax.jit(jax.grad(L)), th),
            grad_structured=median_ms(jax.jit(gradient_fn(net0, Xc, Yc)), th),
            hessian_autodiff=median_ms(jax.jit(jax.hessian(L)), th),
            hessian_structured=median_ms(jax.jit(hessian_fn(net0, Xc, Yc)), th),
        )
        # flow phase: one run, a fixed number of steps
        one = eqx.filter_vmap(net0.with_edge_weights)(thetas[:1])
        # the stop at weightnorm = 1e3 (||theta|| = sqrt(2e3 E)), as the committed studies
        phase = ij.FlowPhaseOptions(
            t1=1e12, max_flow_steps=args.flow_steps, flow_stop="stop", n_record=0, engine="vmap"
        )
        flow = {}
        for arm, loss in (("before", ij.losses.mse), ("after", "mse")):
            run = lambda: flow_phase(one, Xc, Yc, phase, maxnorm=1e3, loss=loss).theta_final  # noqa: E731
            first, t_first = _timed(run)
            out, t_run = _timed(run)
            flow[arm] = dict(
                seconds=t_run,
                ms_per_step=1e3 * t_run / args.flow_steps,
                compile_s=t_first - t_run,
                theta=np.asarray(out[0]),
            )
        flow_agree = float(np.max(np.abs(flow["before"].pop("theta") - flow["after"].pop("theta"))))
        # Newton phase: several runs of unequal length
        nets = eqx.filter_vmap(net0.with_edge_weights)(thetas)
        newton = {}
        for arm, loss, bs in (
            ("before", ij.losses.mse, args.seeds),
            ("vmap_structured", "mse", args.seeds),
            ("after", "mse", 1),
        ):
            opts = ij.NewtonOptions(max_steps=args.newton_steps, batch_size=bs, chunk=args.newton_steps)
            go = lambda: ij.newton_phase(nets, Xc, Yc, loss=loss, options=opts).theta  # noqa: E731
            _, t_first = _timed(go)
            res = ij.newton_phase(nets, Xc, Yc, loss=loss, options=opts)
            steps = np.asarray(res.n_steps)
            newton[arm] = dict(
                seconds=res.wall_time,
                compile_s=t_first - res.wall_time,
                steps_sum=int(steps.sum()),
                steps_max=int(steps.max()),
                batch_size=bs,
                reasons=list(newton_reason(res.result)),
                ms_per_run_step=1e3 * res.wall_time / steps.sum(),
            )
        row = dict(r=r, E=int(thetas.shape[1]), bare_ms=bare, flow=flow, flow_max_abs_diff=flow_agree, newton=newton)
        rows.append(row)
        b, f, n = bare, flow, newton
        print(
            f"r={r} (E={row['E']}): bare ms: loss {b['loss']:.2f}, grad {b['grad_autodiff']:.2f} (structured "
            f"{b['grad_structured']:.2f}), Hessian {b['hessian_autodiff']:.2f} -> {b['hessian_structured']:.2f}",
            flush=True,
        )
        print(
            f"  flow ms/step {f['before']['ms_per_step']:.1f} -> {f['after']['ms_per_step']:.1f} "
            f"(x{f['before']['ms_per_step'] / f['after']['ms_per_step']:.1f}; compile {f['before']['compile_s']:.0f} s -> "
            f"{f['after']['compile_s']:.0f} s; max |theta diff| {flow_agree:.1e})",
            flush=True,
        )
        print(
            f"  newton {args.seeds} runs: {n['before']['seconds']:.2f} s -> {n['after']['seconds']:.2f} s "
            f"(x{n['before']['seconds'] / n['after']['seconds']:.1f}; one vmapped batch with the structured Hessian "
            f"{n['vmap_structured']['seconds']:.2f} s); steps sum {n['after']['steps_sum']}, "
            f"longest {n['after']['steps_max']}; ms per run-step {n['before']['ms_per_run_step']:.1f} -> "
            f"{n['after']['ms_per_run_step']:.1f}",
            flush=True,
        )
    write_json(
        output_path(args.out, "converge_cost.json"),
        dict(
            benchmark="converge_cost",
            platform=platform.platform(),
            devices=[str(d) for d in jax.devices()],
            jax=jax.__version__,
            note="measured on a shared 2-core machine when run on the CPU",
            settings=vars(args),
            rows=rows,
        ),
    )


if __name__ == "__main__":
    main()
