"""Where one flat-channels run's wall time goes: gradients, Hessians, linear algebra,
compilation and the rest, each counted and timed against its bare cost.

Runs of the loss-levels g-without-bias group (2-r-1 `g` network without bias, the 101 x 101
Rosenbrock grid, `ch.study_inits`; `--runs r:seed`). Per run, per flow solver (`--solvers`,
names in `ij.SOLVERS`, or with `:pid` for `diffrax.PIDController`'s step sizes, as
`channels_flow_budget.py` takes them; side by side on the same run) and phase:

- the **flow phase**: `ch.flow_phase` with the studies' stop at `maxnorm`
  (`flow_stop="stop"`, loop engine, `--max-flow-steps`);
- the **Newton phase**: `ij.newton_phase` from that flow's end, default `NewtonOptions`.

Each Newton iteration of an implicit stage evaluates one Jacobian, so the flow's Hessian
count over its attempted steps (accepted and rejected) is its stage iterations per step;
Kvaerno5 has 6 implicit stages per step.

Each phase is timed twice, its first call (compile and run) and warm. Then it runs once
more, untimed, after `jax.clear_caches()`, with the package's structured gradient, its
structured Hessian and the Newton phase's loss wrapped in `jax.debug.callback` counters
(patched in this process only; the numbers computed are the same). The bare costs are
each function compiled alone (median of repeats): the structured gradient, the structured
Hessian, the field with its Jacobian in one trace (what each Newton iteration of a stage
evaluates), the loss with its gradient (`jax.value_and_grad`, what the Newton phase's
optimiser evaluates), the flow's LU solve of `I - h gamma J` (E x E) and the Newton
phase's `eigh` plus its damped solve; each less the cost of calling a compiled function
that does almost nothing (`call_overhead`), which a call alone pays and a step inside a
compiled loop does not. So

    warm wall = gradients x bare + Hessians x bare + linear algebra x bare + the rest,
    first call = warm wall + compile.

"The rest" is everything else: diffrax's and optimistix's control flow, the error
estimates, the host round trips between Newton chunks. The issue's goal is that gradients
and Hessians make at least 70% of the warm wall.

Usage: PYTHONPATH=. python benchmarks/channels_breakdown.py [--runs 2:2,5:0,2:0]
       [--solvers kvaerno5_newton,kvaerno5_newton_diffrax_stages] [--max-flow-steps 2000] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import lineax as lx  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels._converge as converge  # noqa: E402 (patched for the counting run)
import invariant_jax.losses as losses  # noqa: E402 (patched for the counting run)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from channels_flow_budget import arm_options  # noqa: E402
from channels_hover import study_run  # noqa: E402
from converge_cost import median_ms  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402

COUNTS = {"gradient": 0, "hessian": 0, "loss": 0}


def _counted(make, key):
    """`make(...)` (a function builder) whose built function bumps `COUNTS[key]` per call."""

    def build(*args, **kwargs):
        f = make(*args, **kwargs)

        def counted(theta):
            jax.debug.callback(lambda: COUNTS.__setitem__(key, COUNTS[key] + 1))
            return f(theta)

        return counted

    return build


def counting(run):
    """`run()` once more, retraced with counters on the arithmetic; the counts."""
    saved = (losses._structured_grad, losses._structured_hessian, converge.edge_loss_fn)
    losses._structured_grad = _counted(saved[0], "gradient")
    losses._structured_hessian = _counted(saved[1], "hessian")
    converge.edge_loss_fn = _counted(saved[2], "loss")
    jax.clear_caches()
    try:
        for k in COUNTS:
            COUNTS[k] = 0
        jax.block_until_ready(run())
        jax.effects_barrier()
        return dict(COUNTS)
    finally:
        losses._structured_grad, losses._structured_hessian, converge.edge_loss_fn = saved
        jax.clear_caches()


def median_s(f, *a):
    return 1e-3 * median_ms(f, *a, repeats=21)


def bare_costs(net, X, Y, theta) -> dict:
    """Seconds per call of each piece compiled alone, less the call overhead."""
    E = theta.size
    A = jnp.asarray(np.random.default_rng(0).standard_normal((E, E)))
    S = A @ A.T + jnp.eye(E)
    b = jnp.ones(E)
    L = losses.edge_loss_fn(net, X, Y)
    damped = lx.AutoLinearSolver(well_posed=False)

    def newton_linear_algebra(H, g):  # `_ExactNewton`: |eigenvalues|, then the damped solve
        lam, V = jnp.linalg.eigh(H)
        op = lx.MatrixLinearOperator((V * jnp.abs(lam)) @ V.T + jnp.eye(E), lx.positive_semidefinite_tag)
        return lx.linear_solve(op, g, damped).value

    G = losses.gradient_fn(net, X, Y)
    overhead = median_s(jax.jit(lambda th: th * 2.0), theta)
    raw = dict(
        gradient=median_s(jax.jit(G), theta),
        hessian=median_s(jax.jit(losses.hessian_fn(net, X, Y)), theta),
        # a Newton iteration of a stage: the field and its Jacobian, one trace (shared work merged)
        gradient_and_jacobian=median_s(jax.jit(lambda th: (G(th), jax.jacfwd(G)(th))), theta),
        loss_and_gradient=median_s(jax.jit(jax.value_and_grad(L)), theta),
        lu_solve=median_s(jax.jit(lambda M, v: jnp.linalg.solve(M, v)), jnp.eye(E) - 0.1 * S, b),
        newton_linear_algebra=median_s(jax.jit(newton_linear_algebra), S, b),
    )
    return dict({k: max(v - overhead, 0.0) for k, v in raw.items()}, call_overhead=overhead)


def timed(run):
    t = time.perf_counter()
    jax.block_until_ready(run())
    return time.perf_counter() - t


def breakdown(first, warm, counts, bare, phase) -> dict:
    if phase == "flow":
        # each Newton iteration of a stage: the field with its Jacobian (a gradient and a
        # Hessian in one trace, counted once each) and one LU solve; other field evaluations
        # are gradients alone. The pair's bare cost is split in proportion to the two alone.
        pairs, alone = counts["hessian"], counts["gradient"] - counts["hessian"]
        share = bare["gradient"] / (bare["gradient"] + bare["hessian"])
        parts = dict(
            gradients=alone * bare["gradient"] + pairs * bare["gradient_and_jacobian"] * share,
            hessians=pairs * bare["gradient_and_jacobian"] * (1 - share),
            linear_algebra=pairs * bare["lu_solve"],
        )
    else:  # each optimiser step: the loss and its gradient; each Hessian: eigh and the damped solve
        parts = dict(
            gradients=counts["loss"] * bare["loss_and_gradient"],
            hessians=counts["hessian"] * bare["hessian"],
            linear_algebra=counts["hessian"] * bare["newton_linear_algebra"],
        )
    parts["rest"] = warm - sum(parts.values())
    arithmetic = parts["gradients"] + parts["hessians"]
    return dict(
        first_call=first,
        warm=warm,
        compile=first - warm,
        counts=counts,
        seconds=parts,
        fraction_of_warm={k: v / warm for k, v in parts.items()},
        arithmetic_fraction=arithmetic / warm,
    )


def run_row(net, Xc, Yc, flow, newton, bare) -> dict:
    """One run with one flow solver: both phases timed (first call, warm), counted, broken down."""
    res = ch.flow_phase(net, Xc, Yc, flow)
    end = res.theta_final[0]
    runs = dict(
        flow=lambda: ch.flow_phase(net, Xc, Yc, flow).theta_final,
        newton=lambda: ij.newton_phase(net.with_edge_weights(end[None]), Xc, Yc, options=newton).theta,
    )
    nres = ij.newton_phase(net.with_edge_weights(end[None]), Xc, Yc, options=newton)
    row = dict(
        E=int(end.size),
        flow_steps=int(res.n_steps[0]),
        flow_result=str(ij.result_name(res.result)[0]),
        flow_weightnorm_max=float(res.weightnorm_max[0]),
        newton_steps=int(nres.n_steps[0]),
        newton_result=str(ij.result_name(nres.result)[0]),
        bare_seconds=bare,
    )
    for phase, run in runs.items():
        jax.clear_caches()
        first = timed(run)
        warm = timed(run)
        row[phase] = breakdown(first, warm, counting(run), bare, phase)
        b = row[phase]
        print(
            f"  {phase}: first {first:.2f} s, warm {warm:.2f} s; counts {b['counts']}; "
            f"arithmetic {100 * b['arithmetic_fraction']:.0f}% of warm, "
            + ", ".join(f"{k} {100 * v:.0f}%" for k, v in b["fraction_of_warm"].items()),
            flush=True,
        )
    row["flow"]["stage_iterations_per_step"] = row["flow"]["counts"]["hessian"] / max(row["flow_steps"], 1)
    row["run"] = {k: row["flow"][k] + row["newton"][k] for k in ("first_call", "warm", "compile")}
    arith = sum(row[p]["seconds"]["gradients"] + row[p]["seconds"]["hessians"] for p in runs)
    row["run"]["arithmetic_fraction_of_warm"] = arith / row["run"]["warm"]
    row["run"]["compile_fraction_of_first_call"] = row["run"]["compile"] / row["run"]["first_call"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="2:2,5:0,2:0", help="r:seed pairs of the g-without-bias group")
    ap.add_argument("--solvers", default="kvaerno5_newton", help="flow solvers, names in ij.SOLVERS")
    ap.add_argument("--max-flow-steps", type=int, default=2000)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/...)")
    args = ap.parse_args()
    path = output_path(args.out, "channels_breakdown.json")
    warnings.simplefilter("ignore", ij.NoConservationLaw)
    X, Y = ij.rosenbrock_grid(10**4)
    start, rows = time.perf_counter(), []
    solvers = args.solvers.split(",")
    flows = {s: arm_options(s, flow_stop="stop", max_flow_steps=args.max_flow_steps) for s in solvers}
    newton = ij.NewtonOptions()
    for pair in args.runs.split(","):
        r, seed = (int(v) for v in pair.split(":"))
        net = study_run(r, seed)
        Xc, Yc = losses.check_data(net.graph, X, Y)
        bare = bare_costs(net, Xc, Yc, net.edge_weights())
        for solver, flow in flows.items():
            rows.append(run_row(net, Xc, Yc, flow, newton, bare) | dict(r=r, seed=seed, solver=solver))
            b = rows[-1]["flow"]
            print(
                f"r={r} seed={seed} {solver}: {rows[-1]['flow_steps']} steps, "
                f"{b['counts']['hessian'] / rows[-1]['flow_steps']:.1f} stage iterations per step, "
                f"warm {b['warm']:.2f} s ({1e3 * b['warm'] / rows[-1]['flow_steps']:.1f} ms per step)",
                flush=True,
            )
    write_json(
        path,
        dict(
            benchmark="channels_breakdown",
            flow_options=dict(solvers=solvers, flow_stop="stop", max_flow_steps=args.max_flow_steps),
            newton_options=newton.settings(),
            total_seconds=time.perf_counter() - start,
            runs=rows,
        ),
    )


if __name__ == "__main__":
    main()
