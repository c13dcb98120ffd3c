"""Trajectories per second for sweeps over many initializations of a heavy-tailed ReLU workload.

Compared side by side, same networks, data, solver (Tsit5) and tolerance (rtol = atol = 1e-8,
t1 = 1, float64, teacher-student data, 20 points):

- (a) `ij.sweep_flows`: the continuous-batching engine (`exact` per-slot program on CPU,
  `--vmap` / GPU: vmap over slots);
- (b) `jax.jit(jax.vmap(diffeqsolve))` over the same batch (through `ij.gradient_flow`);
- (c) a `scipy.integrate.solve_ivp` (RK45) loop with a jitted JAX gradient, run on a
  subsample of `--scipy-subsample` initializations spread over the step-count quantiles
  (including the slowest) and extrapolated by SciPy seconds per engine step.

Work efficiency = useful solver steps / (slots x loop iterations); for (b) it is
mean(steps) / max(steps) (every batch member waits for the slowest). Everything is
compiled before it is timed. Writes `benchmarks/results/sweep_throughput.json`.

    .venv/bin/python benchmarks/sweep_throughput.py                 # CPU, 256 inits
    .venv/bin/python benchmarks/sweep_throughput.py --device gpu --n-inits 256 1024 4096
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--n-inits", type=int, nargs="+", default=None,
                   help="batch sizes (default: 256 on CPU; 256 1024 4096 on GPU)")
    p.add_argument("--widths", nargs="+", default=["5,20,1", "5,40,1"], help="network sizes")
    p.add_argument("--slots", type=int, default=None, help="engine slots (default 64 CPU, 1024 GPU)")
    p.add_argument("--steps-per-call", type=int, default=128)
    p.add_argument("--vmap", action="store_true", help="engine: vmap over slots (default on GPU)")
    p.add_argument("--scipy-subsample", type=int, default=6)
    p.add_argument("--skip-vmap-baseline", action="store_true")
    p.add_argument("--also-vmap-engine", action="store_true", help="CPU: also time the engine in vmap mode")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep_throughput.json"))
    return p.parse_args()


args = _args()
if args.device == "cpu":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import invariant_jax as ij  # noqa: E402

TOL, T1, N_SAMPLES, N_SAVE = 1e-8, 1.0, 20, 101


def workload(widths, n):
    g = ij.mlp(widths)
    X, Y, _ = ij.teacher_student(g, N_SAMPLES, key=jr.key(1))
    keys = jax.vmap(lambda i: jr.fold_in(jr.key(0), i))(jnp.arange(n))
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    return g, X, Y, nets


def run_engine(nets, X, Y, slots, exact):
    from invariant_jax.sweep._engine import Engine, make_problem

    thetas = nets.edge_weights()
    template = jax.tree.map(lambda a: a[0] if getattr(a, "ndim", 0) == 3 else a, nets)
    problem = make_problem(template, X, Y, T1, options=ij.SolverOptions(rtol=TOL, atol=TOL), saveat=ij.SaveTimes(n=N_SAVE))
    eng = Engine(problem, lambda i: thetas[i], slots=slots, steps_per_call=args.steps_per_call, exact=exact)
    eng.run(np.arange(2), on_results=lambda r: None)  # compile
    parts = []
    t = time.perf_counter()
    st = eng.run(np.arange(thetas.shape[0]), on_results=parts.append)
    sec = time.perf_counter() - t
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(rec["index"])
    return sec, {k: v[order] for k, v in rec.items()}, st, eng.slots


def run_vmap(nets, X, Y):
    template = jax.tree.map(lambda a: a[0] if getattr(a, "ndim", 0) == 3 else a, nets)

    def one(th):
        f = ij.gradient_flow(template.with_edge_weights(th), X, Y, T1, rtol=TOL, atol=TOL, n_save=N_SAVE)
        return f.theta_final, f.stats["num_steps"]

    thetas = nets.edge_weights()
    compiled = jax.jit(jax.vmap(one)).lower(thetas).compile()
    t = time.perf_counter()
    th, steps = jax.block_until_ready(compiled(thetas))
    return time.perf_counter() - t, np.asarray(th), np.asarray(steps)


def run_scipy(g, X, Y, nets, pick):
    L = ij.edge_loss_fn(ij.DAGNetwork(g, "relu", edge_weights=np.zeros(len(g.edges))), X, Y)
    grad = jax.jit(jax.grad(L))
    rhs = lambda t, th: -np.asarray(grad(th))  # noqa: E731
    thetas = np.asarray(nets.edge_weights())[pick]
    rhs(0.0, thetas[0])
    secs, steps = [], []
    for th in thetas:
        t = time.perf_counter()
        s = solve_ivp(rhs, (0.0, T1), th, method="RK45", rtol=TOL, atol=TOL)
        secs.append(time.perf_counter() - t)
        steps.append(int(s.t.size - 1))
    return np.array(secs), steps


def main():
    gpu = args.device == "gpu"
    ns = args.n_inits or ([256, 1024, 4096] if gpu else [256])
    slots = args.slots or (1024 if gpu else 64)
    exact = not (args.vmap or gpu)
    rows = []
    for w in args.widths:
        widths = [int(x) for x in w.split(",")]
        for n in ns:
            g, X, Y, nets = workload(widths, n)
            ta, ra, st, n_slots = run_engine(nets, X, Y, min(slots, n), exact)
            steps = ra["num_steps"]
            row = dict(network="mlp " + "-".join(map(str, widths)), n_inits=n, edges=len(g.edges),
                       steps_min=int(steps.min()), steps_median=float(np.median(steps)), steps_max=int(steps.max()),
                       engine_mode="exact per-slot" if exact else "vmap", slots=n_slots,
                       engine_s=ta, engine_traj_per_s=n / ta, engine_work_efficiency=st.work_efficiency,
                       engine_failures=int(np.sum(ra["status"] >= 2)))
            if not args.skip_vmap_baseline:
                tb, thb, sb = run_vmap(nets, X, Y)
                row.update(vmap_s=tb, vmap_traj_per_s=n / tb, vmap_work_efficiency=float(sb.mean() / sb.max()),
                           vmap_max_abs_diff_theta=float(np.max(np.abs(thb - ra["theta_final"]))),
                           vmap_steps_equal_fraction=float(np.mean(sb == steps)),
                           ratio_vs_vmap=tb / ta)
            if exact and args.also_vmap_engine:
                tv, rv, stv, _ = run_engine(nets, X, Y, min(slots, n), False)
                row.update(engine_vmap_s=tv, engine_vmap_traj_per_s=n / tv,
                           engine_vmap_work_efficiency=stv.work_efficiency,
                           engine_vmap_max_abs_diff_theta=float(np.max(np.abs(rv["theta_final"] - ra["theta_final"]))))
            k = min(args.scipy_subsample, n)
            if k > 0:
                # a subsample spread over the step-count distribution (quantiles 0..1, so
                # it includes the slowest trajectory); SciPy's total is extrapolated as
                # (SciPy seconds per engine step on the subsample) x (all engine steps)
                order = np.argsort(steps, kind="stable")
                pick = order[np.round(np.linspace(0, n - 1, k)).astype(int)]
                secs, sc = run_scipy(g, X, Y, nets, pick)
                total = secs.sum() / steps[pick].sum() * steps.sum()
                row.update(scipy_subsample=k, scipy_subsample_index=pick.tolist(),
                           scipy_subsample_engine_steps=steps[pick].tolist(), scipy_steps=sc,
                           scipy_subsample_s=secs.tolist(), scipy_s_extrapolated=float(total),
                           scipy_traj_per_s_extrapolated=n / total, ratio_vs_scipy=total / ta)
            rows.append(row)
            _print(rows)
    meta = dict(benchmark="sweep_throughput", tol=TOL, t1=T1, n_samples=N_SAMPLES, solver="Tsit5 (scipy: RK45)",
                activation="relu", float64=True, device=args.device, devices=[str(d) for d in jax.devices()],
                machine=platform.machine(), cpu_count=os.cpu_count(), jax=jax.__version__,
                steps_per_call=args.steps_per_call,
                note="(c) runs on scipy_subsample inits at evenly spaced quantiles of the engine's step "
                     "counts (incl. the slowest) and is extrapolated as SciPy-seconds-per-engine-step x "
                     "all engine steps.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, results=rows), indent=2))
    print(f"wrote {out}")


def _print(rows):
    head = (f"{'network':>12} {'n':>5} {'steps med/max':>14} {'(a) traj/s':>10} {'eff':>5} {'(b) traj/s':>10} "
            f"{'eff':>5} {'a/b':>6} {'(c) traj/s*':>11} {'a/c':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['network']:>12} {r['n_inits']:>5} {r['steps_median']:>7.0f}/{r['steps_max']:<6} "
              f"{r['engine_traj_per_s']:>10.2f} {r['engine_work_efficiency']:>5.2f} "
              f"{r.get('vmap_traj_per_s', float('nan')):>10.2f} {r.get('vmap_work_efficiency', float('nan')):>5.2f} "
              f"{r.get('ratio_vs_vmap', float('nan')):>6.1f} {r.get('scipy_traj_per_s_extrapolated', float('nan')):>11.3f} "
              f"{r.get('ratio_vs_scipy', float('nan')):>6.1f}")
    print("* (c) extrapolated from a subsample; see the JSON.", flush=True)


if __name__ == "__main__":
    main()
