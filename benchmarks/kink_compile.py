"""Compile time of one `ij.kink_aware_flow` (Tsit5 and Gauss4 inside), and the run time
of the compiled call.

Workload: issue 13's ReLU workload -- a 5-20-1 relu MLP without bias, 20 teacher points
(key 1234), init PRNGKey(0), t1 = 1, float64, rtol = atol = 1e-8, default `KinkOptions`.
`--graph example` takes the demo DAG instead, `--graph sliding` the tests' constructed
sliding case (one pair slides for most of the flow: the Filippov solve's run time).
Per solver, in one process: the program that `kink_aware_flow` jits, compiled ahead of
time (`compile_s` = wall time of `lower` (trace + lower to StableHLO) + `compile` (XLA)),
then `--repeats` runs of the compiled program after one warm-up run (median and best
wall time, `jax.block_until_ready`). Each is also measured in process CPU time
(`time.process_time`, all threads), which a loaded machine disturbs less than wall time.

`--before PATH` measures two versions of the package side by side: the script reruns
itself in fresh processes with `PYTHONPATH=PATH` (the old code, e.g. an exported copy of
`main`) and with this checkout, alternating `--rounds` times (so machine load hits both
alike), or with `--parallel` both at the same time, and records each run's load average. The persistent compilation cache is off
(a library user's default).

`--ablate` compiles the whole program once per piece with that piece replaced by a stub
(the event resolution, its pivots, its node-origin exit, the Gauss restart), each in a
fresh process: what each piece adds to the whole.

`--parts` compiles the pieces of one segment one by one instead (the trajectory loop,
one segment on an abstract state, the field, its Jacobian, the event condition, the Flow
record): where the compile time goes.

Usage: python benchmarks/kink_compile.py [--solvers tsit5 gauss4] [--repeats 5] [--parts]
       [--before /tmp/old_checkout --rounds 2 [--parallel]] [--out benchmarks/results/kink_compile.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)

import numpy as np  # noqa: E402

from _output import output_path, write_json  # noqa: E402

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "xla_compile_s",
}


GRAPH = "mlp"  # `--graph`: "mlp" (the workload above), "example" (the demo DAG) or "sliding"
WORKLOADS = {
    "mlp": "5-20-1 relu mlp (no bias), 20 teacher points (key 1234), init PRNGKey(0), t1=1",
    "example": "the demo DAG (SweepConfig(graph='example')): its data, sweep init 0, t1=1",
    "sliding": "tests/test_kinks.py's sliding_case (x -> h -> y, 2 samples; one pair slides from t ~ 1), t1=4",
}


def workload(solver: str):
    """`(net, integrator, theta0)`: what `kink_aware_flow(net, X, Y, t1, solver=opts,
    saveat=ij.SaveTimes(n_save=11))` compiles and runs, on the workload above (`GRAPH`)."""
    import jax.numpy as jnp

    import invariant_jax as ij
    from invariant_jax.kinks import make_kink_integrator

    t1 = 1.0
    if GRAPH == "sliding":  # the tests' constructed case: one pair slides for most of the flow
        g = ij.mlp([2, 1, 1], bias=False)
        net = ij.DAGNetwork(g, "relu", edge_weights=jnp.array([0.3, 0.2, 1.0]))
        X, Y, t1 = jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([-1.0, 1.0]), 4.0
    elif GRAPH == "example":  # the CLI's default sweep: the demo DAG, its data, init 0
        cfg = ij.sweep.SweepConfig(graph="example", n_inits=1)
        X, Y = cfg.build_data()
        net = ij.sweep.sweep_network(cfg, 0)
    else:
        g = ij.mlp([5, 20, 1], bias=False)
        X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(1234))
        net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(0))
    opts = ij.SolverOptions(solver, rtol=1e-8, atol=1e-8, max_steps=10_000)
    integ = make_kink_integrator(net, X, Y, t1, options=opts, saveat=ij.SaveTimes(n_save=11))
    return net, integ, net.edge_weights().astype(integ.prob.X.dtype)


def measure(solver: str, repeats: int) -> dict:
    """One solver's compile and run times in this process: `kink_aware_flow`'s jitted
    program compiled ahead of time (`lower`, then `compile`), then run `repeats` times."""
    from invariant_jax.kinks import integrate_kink_flow

    acc = {v: 0.0 for v in _EVENTS.values()}

    def listen(event, duration, **kw):
        if event in _EVENTS:
            acc[_EVENTS[event]] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    net, integ, theta0 = workload(solver)
    t, c = time.perf_counter(), time.process_time()
    lowered = integrate_kink_flow.lower(integ, net, theta0, "mse")
    t_lower, c_lower = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    t_compile, c_compile = time.perf_counter() - t, time.process_time() - c
    events = dict(acc)
    runs, cpu_runs = [], []
    for _ in range(repeats + 1):  # the first run warms up
        t, c = time.perf_counter(), time.process_time()
        kf = jax.block_until_ready(compiled(integ, net, theta0, "mse"))
        runs.append(time.perf_counter() - t)
        cpu_runs.append(time.process_time() - c)
    runs, cpu_runs = runs[1:], cpu_runs[1:]
    return dict(
        solver=solver,
        compile_s=t_lower + t_compile,
        trace_lower_s=t_lower,
        xla_s=t_compile,
        compile_cpu_s=c_lower + c_compile,
        trace_lower_cpu_s=c_lower,
        xla_cpu_s=c_compile,
        **{f"event_{k}": v for k, v in events.items()},
        run_median_s=float(np.median(runs)),
        run_best_s=float(min(runs)),
        run_cpu_median_s=float(np.median(cpu_runs)),
        steps=int(kf.flow.stats["num_steps"]),
        events=int(kf.num_events),
        sliding_entries=int(kf.num_sliding_entries),
    )


def measure_parts(solver: str) -> list[dict]:
    """Compile time of the pieces of one segment, each jitted alone on abstract inputs (so
    XLA cannot fold the initial state's constants): where the compile time of the whole
    goes. Each piece is inlined wherever the segment uses it, so the pieces overlap and
    do not add up to the whole."""
    from invariant_jax.kinks import integrate_kink_flow

    net, integ, theta0 = workload(solver)
    state = jax.eval_shape(integ.init, theta0)
    final = jax.eval_shape(integ.run, theta0)
    parts = {
        "whole program (integrate_kink_flow)": (lambda i, th: integrate_kink_flow(i, net, th, "mse"), (integ, theta0)),
        "the trajectory loop (run)": (lambda i, th: i.run(th), (integ, theta0)),
        "one segment": (lambda i, s: i.segment(s), (integ, state)),
        "the field (pattern or Filippov)": (lambda i, s: i.prob.field(s.theta, s.P, s.slots, s.ties), (integ, state)),
        "Jacobian of the field (jacfwd)": (
            lambda i, s: jax.jacfwd(lambda th: i.prob.field(th, s.P, s.slots, s.ties)[0])(s.theta),
            (integ, state),
        ),
        "event condition and field": (
            lambda i, s: i.prob.cond_and_field(s.theta, s.P, s.slots, s.ties, s.margin),
            (integ, state),
        ),
        "Flow record (flow)": (lambda i, th, f: i.flow(net, th, f, "mse"), (integ, theta0, final)),
    }
    rows = []
    for name, (fn, fargs) in parts.items():
        t, c = time.perf_counter(), time.process_time()
        lowered = jax.jit(fn).lower(*fargs)
        t_lower, c_lower = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        lowered.compile()
        rows.append(
            dict(
                solver=solver,
                part=name,
                trace_lower_s=t_lower,
                xla_s=time.perf_counter() - t,
                trace_lower_cpu_s=c_lower,
                xla_cpu_s=time.process_time() - c,
                load_average_after=list(os.getloadavg()),
            )
        )
        r = rows[-1]
        print(f"  {solver:<7} {name:<40} trace+lower {t_lower:5.1f} s  xla {r['xla_s']:5.1f} s", file=sys.stderr)
    return rows


# `--ablate`: the whole program compiled with one piece replaced by a stub (what the
# piece costs to compile is the difference). The stubs keep the modes data-dependent,
# so XLA cannot fold the sliding branches away (a restart that never changes `slots`
# would let it).
PIECES = {
    "nothing": ("tsit5", "gauss4"),
    "event resolution (resolve_event)": ("tsit5", "gauss4"),
    "its pivots (resolve; one rates call kept)": ("tsit5", "gauss4"),
    "its node-origin exit (leave_origin)": ("tsit5", "gauss4"),
    "Gauss restart (the segment's refinement)": ("gauss4",),
}


def _stub(piece: str) -> None:
    """Replace `piece` (a key of `PIECES`) by a stub in this process."""

    import equinox as eqx
    import jax.numpy as jnp

    from invariant_jax.kinks import _driver, _modes

    if piece == "event resolution (resolve_event)":

        def restart(self, c, t_ev, th):
            M = self.prob.max_sliding
            slots = jnp.where(th[:M] > 1e6, jnp.arange(M), -1)
            P = self.prob.pre_activations(th) > 0
            return eqx.tree_at(
                lambda c: (c.t, c.theta, c.P, c.slots, c.n_events), c, (t_ev, th, P, slots, c.n_events + 1)
            )

        _driver.KinkIntegrator._restart = restart
    elif piece == "its pivots (resolve; one rates call kept)":

        def resolve(prob, th, P, slots, cand, proj, surface_tol):
            ties = _modes.slot_ties(proj, slots) if proj is not None else _modes.no_ties(0, th.dtype)
            lam, u, _ = prob.rates(th, P, slots, ties)
            return P ^ (u < 0), slots, jnp.zeros((cand.size,), bool), lam

        _modes.resolve = resolve
    elif piece == "its node-origin exit (leave_origin)":
        _modes.leave_origin = lambda prob, th, th_prev, P, slots, margin, Zev, ztol, surface_tol: (
            th,
            P,
            slots,
            margin,
            Zev,
        )
    elif piece == "Gauss restart (the segment's refinement)":
        segment = _driver.solve_segment
        _driver.solve_segment = lambda *a, **k: segment(*a, **{**k, "refine": False})
    elif piece != "nothing":
        raise ValueError(f"unknown piece {piece!r}")


def ablate(args) -> list[dict]:
    """Each piece of `PIECES` stubbed in a fresh process, per solver, `--rounds` times."""
    rows = []
    for rnd in range(args.rounds):
        for piece, solvers in PIECES.items():
            for s in (s for s in args.solvers if s in solvers):
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child",
                    "--repeats",
                    "1",
                    "--solvers",
                    s,
                    "--without",
                    piece,
                ]
                out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])[0]
                rows.append(dict(round=rnd + 1, without=piece, **r))
                print(
                    f"  round {rnd + 1} {s:<7} without {piece:<52} compile {r['compile_s']:5.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def child(args) -> list[dict]:
    if args.without:
        _stub(args.without)
    rows = []
    for s in args.solvers:
        load = list(os.getloadavg())
        r = measure(s, args.repeats)
        r["load_average_before"] = load
        r["load_average_after"] = list(os.getloadavg())
        rows.append(r)
        print(
            f"  {s:<7} compile {r['compile_s']:6.1f} s (trace+lower {r['trace_lower_s']:.1f}, xla {r['xla_s']:.1f}; "
            f"CPU {r['compile_cpu_s']:.1f} s)  run {r['run_median_s'] * 1e3:7.1f} ms (CPU {r['run_cpu_median_s'] * 1e3:.1f}) "
            f"({r['steps']} steps, {r['events']} events)  load {load[0]:.1f}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--solvers", nargs="+", default=["tsit5", "gauss4"])
    ap.add_argument(
        "--graph", choices=sorted(WORKLOADS), default="mlp", help="the workload: 5-20-1 MLP, demo DAG, or sliding"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--before", default=None, help="PYTHONPATH of the old code to measure side by side")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of before/after (with --before)")
    ap.add_argument("--parallel", action="store_true", help="with --before: run before and after at the same time")
    ap.add_argument("--parts", action="store_true", help="compile the pieces of a segment one by one instead")
    ap.add_argument(
        "--ablate", action="store_true", help="compile the whole program with each piece stubbed, in fresh processes"
    )
    ap.add_argument("--without", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    global GRAPH
    GRAPH = args.graph
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.ablate:
        write_json(
            output_path(args.out, "kink_compile_ablation.json"),
            dict(
                benchmark="kink_compile_ablation",
                workload="5-20-1 relu mlp (no bias), 20 teacher points (key 1234), init PRNGKey(0), t1=1, "
                "rtol=atol=1e-8, n_save=11, default KinkOptions, float64; persistent compilation cache off",
                note="compile_s of the whole kink_aware_flow program with one piece replaced by a stub (fresh process "
                "each); the piece's cost is the difference from 'nothing'. The stubs compute other numbers, so only "
                "the compile times mean anything",
                rows=ablate(args),
            ),
        )
        return
    if args.parts:
        rows = [r for s in args.solvers for r in measure_parts(s)]
        write_json(
            output_path(args.out, "kink_compile_parts.json"),
            dict(
                benchmark="kink_compile_parts",
                workload="5-20-1 relu mlp (no bias), 20 teacher points (key 1234), init PRNGKey(0), t1=1, "
                "rtol=atol=1e-8, n_save=11, default KinkOptions, float64; persistent compilation cache off",
                note="each piece jitted alone on abstract inputs; pieces are inlined where used, so they overlap",
                rows=rows,
            ),
        )
        return
    meta = dict(
        platform=platform.platform(),
        cpu_count=os.cpu_count(),
        jax=jax.__version__,
        backend=jax.default_backend(),
        workload=WORKLOADS[args.graph] + ", rtol=atol=1e-8, n_save=11, default KinkOptions, float64",
        note="measured on a shared 2-core machine (other jobs running: see the load averages); "
        "compile_s = lower + compile wall time, compile_cpu_s the same in process CPU time; persistent compilation cache off",
    )
    if args.before is None:
        rows = [dict(code="this checkout", **r) for r in child(args)]
    else:
        here = str(Path(__file__).resolve().parent.parent)
        base = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--repeats",
            str(args.repeats),
            "--graph",
            args.graph,
            "--solvers",
            *args.solvers,
        ]
        rows = []
        for rnd in range(args.rounds):
            codes = (("before", args.before), ("after", here))
            if args.parallel:  # both at once: the same machine load for both
                print(f"round {rnd + 1}: before and after at once", file=sys.stderr, flush=True)
                procs = [
                    (
                        label,
                        subprocess.Popen(
                            base, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE, text=True
                        ),
                    )
                    for label, path in codes
                ]
                outs = [(label, p.communicate()[0]) for label, p in procs]
                assert all(p.returncode == 0 for _, p in procs)
            else:
                outs = []
                for label, path in codes:
                    print(f"round {rnd + 1}: {label} ({path})", file=sys.stderr, flush=True)
                    outs.append(
                        (
                            label,
                            subprocess.run(
                                base,
                                env={**os.environ, "PYTHONPATH": path},
                                check=True,
                                stdout=subprocess.PIPE,
                                text=True,
                            ).stdout,
                        )
                    )
            for label, out in outs:
                rows += [dict(code=label, round=rnd + 1, **r) for r in json.loads(out.strip().splitlines()[-1])]
        meta["before"] = args.before
    print(
        f"{'code':<14} {'solver':<7} {'compile s':>9} {'CPU s':>7} {'xla CPU s':>9} {'trace+lower CPU s':>17} "
        f"{'run ms':>8} {'run CPU ms':>10} {'events':>6} {'load':>5}"
    )
    for r in rows:
        print(
            f"{r['code']:<14} {r['solver']:<7} {r['compile_s']:>9.1f} {r['compile_cpu_s']:>7.1f} {r['xla_cpu_s']:>9.1f} "
            f"{r['trace_lower_cpu_s']:>17.1f} {r['run_median_s'] * 1e3:>8.1f} {r['run_cpu_median_s'] * 1e3:>10.1f} "
            f"{r['events']:>6} {r['load_average_before'][0]:>5.1f}"
        )
    write_json(
        output_path(args.out, "kink_compile.json"),
        dict(benchmark="kink_compile", settings=vars(args), meta=meta, rows=rows),
    )


if __name__ == "__main__":
    main()
