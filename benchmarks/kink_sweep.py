"""Kink-aware sweeps vs the plain engine on the ReLU sweep workload.

5-20-1 ReLU MLP (no bias), 20 teacher points (key 1234), inits PRNGKey(0..n-1), t1 = 1,
float64 (the work-precision workload). Side by side, after compiling each engine on
two trajectories:

- (a) the continuous-batching engine, Tsit5, rtol = atol = 1e-8 (`sweep_flows`);
- (b) the kink-aware engine, Tsit5 inside, 1e-8;
- (c) the kink-aware engine, Gauss4 inside, 1e-6.

Per trajectory: distance of theta(t1) to the reference (kink-aware, Tsit5 inside, 1e-12;
validated against the smooth limit in `work_precision.py`), relative drift of c, steps
and events. Writes `benchmarks/results/kink_sweep.json`.

    .venv/bin/python benchmarks/kink_sweep.py [--n-inits 40] [--slots 8]
"""

from __future__ import annotations

import argparse
import os
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax.sweep import Engine, KinkEngine, make_problem  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
compile_s = [0.0]  # of the last run_engine call


def run_engine(engine, n):
    t = time.perf_counter()
    engine.run(np.arange(2), on_results=lambda r: None)  # compile (+ two trajectories)
    compile_s[0] = time.perf_counter() - t
    parts = []
    t = time.perf_counter()
    engine.run(np.arange(n), on_results=parts.append)
    sec = time.perf_counter() - t
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(rec["index"])
    return {k: v[order] for k, v in rec.items()}, sec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-inits", type=int, default=40)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/kink_sweep.json, ignored by git; "
        "pass benchmarks/results/kink_sweep.json to replace the committed results)",
    )
    args = ap.parse_args()
    n = args.n_inits
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(1234))
    thetas = jnp.stack([ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(s)).edge_weights() for s in range(n)])
    template = ij.DAGNetwork(g, "relu", edge_weights=thetas[0])
    init = lambda i: thetas[i]  # noqa: E731

    arms = {}
    plain = Engine(
        make_problem(
            template, X, Y, 1.0, options=ij.SolverOptions(rtol=1e-8, atol=1e-8), saveat=ij.SaveTimes(n_save=11)
        ),
        init,
        slots=args.slots,
    )
    arms["engine tsit5 1e-8"] = run_engine(plain, n) + (compile_s[0],)
    for name, solver, tol in (("kink tsit5 1e-8", "tsit5", 1e-8), ("kink gauss4 1e-6", "gauss4", 1e-6)):
        eng = KinkEngine(
            template,
            X,
            Y,
            1.0,
            init,
            slots=args.slots,
            options=ij.SolverOptions(solver, rtol=tol, atol=tol),
            saveat=ij.SaveTimes(n_save=11),
        )
        arms[name] = run_engine(eng, n) + (compile_s[0],)

    ref = KinkEngine(
        template,
        X,
        Y,
        1.0,
        init,
        slots=args.slots,
        saveat=ij.SaveTimes(n_save=2),
        options=ij.SolverOptions("tsit5", rtol=1e-12, atol=1e-12, max_steps=10_000),
    )
    ref_rec, _ = run_engine(ref, n)
    th_ref = ref_rec["theta_final"]
    sliding = ref_rec["num_sliding_entries"] > 0

    rows = []
    for name, (rec, sec, comp) in arms.items():
        err = np.max(np.abs(rec["theta_final"] - th_ref), axis=1)
        row = dict(
            arm=name,
            compile_plus_2_s=comp,
            seconds=sec,
            traj_per_s=n / sec,
            steps_total=int(rec["num_steps"].sum()),
            steps_max=int(rec["num_steps"].max()),
            ok=int(np.sum(ij.sweep.status_is(rec["status"], "ok"))),
            err_median=float(np.median(err)),
            err_max=float(err.max()),
            err_max_init=int(np.argmax(err)),
            err_max_sliding=float(err[sliding].max()) if sliding.any() else None,
            err_max_not_sliding=float(err[~sliding].max()) if (~sliding).any() else None,
            drift_rel_max=float(rec["drift_relative"].max()),
        )
        if "num_events" in rec:
            row.update(
                events_total=int(rec["num_events"].sum()),
                ambiguous_total=int(rec["num_ambiguous"].sum()),
                max_sliding_pairs=int(rec["max_sliding_pairs"].max()),
            )
        rows.append(row)
    res = dict(
        workload=f"5-20-1 relu mlp (no bias), 20 teacher points (key 1234), inits PRNGKey(0..{n - 1}), t1=1",
        reference="kink-aware, Tsit5 inside, rtol=atol=1e-12",
        slots=args.slots,
        n_inits=n,
        trajectories_sliding=int(sliding.sum()),
        max_sliding_pairs=int(ref_rec["max_sliding_pairs"].max()),
        ambiguous_in_reference=int(ref_rec["num_ambiguous"].sum()),
        rows=rows,
        meta=dict(
            jax=jax.__version__,
            backend=jax.default_backend(),
            cpu_count=os.cpu_count(),
            load_average_end=list(os.getloadavg()),
            note="compile_plus_2_s: first engine run on two trajectories (compiling its programs); "
            "measured on a shared machine",
        ),
    )
    print(f"{n} inits, {int(sliding.sum())} slide (reference)")
    print(
        f"{'arm':<18} {'compile':>7} {'s':>7} {'traj/s':>7} {'steps':>8} {'max':>7} {'err med':>8} {'err max':>8} "
        f"{'max slid':>8} {'max not':>8} {'drift':>8}"
    )
    for r in rows:
        print(
            f"{r['arm']:<18} {r['compile_plus_2_s']:>7.1f} {r['seconds']:>7.2f} {r['traj_per_s']:>7.2f} "
            f"{r['steps_total']:>8} {r['steps_max']:>7} "
            f"{r['err_median']:>8.1e} {r['err_max']:>8.1e} {r['err_max_sliding'] or 0:>8.1e} "
            f"{r['err_max_not_sliding'] or 0:>8.1e} {r['drift_rel_max']:>8.1e}"
        )
    write_json(output_path(args.out, "kink_sweep.json"), res)


if __name__ == "__main__":
    main()
