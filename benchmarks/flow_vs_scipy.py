"""One gradient-flow trajectory in diffrax vs scipy.integrate.solve_ivp, and a vmapped batch.

Same network (5-20-1 MLP), data (20 teacher points), solver order (5(4) Dormand-Prince
pair: diffrax Tsit5 / SciPy RK45) and tolerance (rtol = atol = 1e-8), t1 = 1, float64.

- diffrax: `ij.gradient_flow` under `eqx.filter_jit`, compiled before timing;
- SciPy: `solve_ivp(RK45)` calling a jitted JAX gradient (compiled before timing);
- vmap: `jit(vmap(gradient_flow))` over 64 initializations, per-trajectory time.

Usage: python benchmarks/flow_vs_scipy.py [--n-inits 8] [--batch 64] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import invariant_jax as ij  # noqa: E402

TOL, T1 = 1e-8, 1.0


def timed(fn, *args):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t


def bench(activation: str, n_inits: int, batch: int) -> dict:
    g = ij.mlp([5, 20, 1])
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.key(0), activation=activation)
    keys = jax.random.split(jax.random.key(1), batch)
    make = lambda k: ij.DAGNetwork(g, activation, key=k)  # noqa: E731

    run = eqx.filter_jit(
        lambda n: ij.gradient_flow(
            n, X, Y, T1, saveat=ij.SaveTimes(n_save=2), solver=ij.SolverOptions(rtol=TOL, atol=TOL, max_steps=400_000)
        )
    )
    run(make(keys[0]))  # compile
    net0 = make(keys[0])
    grad = jax.jit(jax.grad(ij.edge_loss_fn(net0, X, Y)))
    grad(net0.edge_weights()).block_until_ready()  # compile

    rows = []
    for i in range(n_inits):
        net = make(keys[i])
        f, t_dx = timed(run, net)
        theta0 = np.asarray(net.edge_weights())
        t = time.perf_counter()
        sol = solve_ivp(
            lambda t, y: -np.asarray(grad(jnp.asarray(y))), (0, T1), theta0, method="RK45", rtol=TOL, atol=TOL
        )
        t_sp = time.perf_counter() - t
        err = float(np.max(np.abs(sol.y[:, -1] - np.asarray(f.theta_final))))
        rows.append(
            dict(
                init=i,
                diffrax_s=t_dx,
                scipy_s=t_sp,
                diffrax_steps=int(f.stats["num_steps"]),
                scipy_steps=int(sol.t.size - 1),
                scipy_rhs=int(sol.nfev),
                max_abs_diff=err,
                ok=bool(f.success),
            )
        )

    nets = eqx.filter_vmap(make)(keys)
    vrun = eqx.filter_jit(
        eqx.filter_vmap(
            lambda n: ij.gradient_flow(
                n,
                X,
                Y,
                T1,
                saveat=ij.SaveTimes(n_save=2),
                solver=ij.SolverOptions(rtol=TOL, atol=TOL, max_steps=400_000),
            )
        )
    )
    vrun(nets)  # compile
    fl, t_v = timed(vrun, nets)
    steps = np.asarray(fl.stats["num_steps"])
    dx = sum(r["diffrax_s"] for r in rows) / n_inits
    sp = sum(r["scipy_s"] for r in rows) / n_inits
    return dict(
        activation=activation,
        per_init=rows,
        diffrax_s_per_traj=dx,
        scipy_s_per_traj=sp,
        vmap_s_per_traj=t_v / batch,
        scipy_over_diffrax=sp / dx,
        diffrax_over_vmap=dx / (t_v / batch),
        vmap_batch=batch,
        vmap_steps_min_median_max=[int(steps.min()), int(np.median(steps)), int(steps.max())],
        vmap_useful_work=float(steps.sum() / (steps.max() * batch)),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-inits", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/flow_vs_scipy.json, ignored by git; "
        "pass benchmarks/results/flow_vs_scipy.json to replace the committed results)",
    )
    a = ap.parse_args()
    results = [bench(act, a.n_inits, a.batch) for act in ("relu", "softplus")]
    print(
        f"{'act':>9} {'diffrax s/traj':>14} {'scipy s/traj':>12} {'vmap s/traj':>11} "
        f"{'scipy/dx':>8} {'dx/vmap':>7} {'steps dx (min/med/max)':>24} {'vmap useful':>11}"
    )
    for r in results:
        st = [p["diffrax_steps"] for p in r["per_init"]]
        print(
            f"{r['activation']:>9} {r['diffrax_s_per_traj']:>14.4f} {r['scipy_s_per_traj']:>12.4f} "
            f"{r['vmap_s_per_traj']:>11.4f} {r['scipy_over_diffrax']:>8.1f} {r['diffrax_over_vmap']:>7.2f} "
            f"{f'{min(st)}/{int(np.median(st))}/{max(st)}':>24} {r['vmap_useful_work']:>11.1%}"
        )
        worst = max(p["max_abs_diff"] for p in r["per_init"])
        print(f"{'':>9} max |theta_diffrax - theta_scipy| at t1 over inits: {worst:.1e}")
    meta = dict(
        benchmark="flow_vs_scipy",
        tol=TOL,
        t1=T1,
        network="mlp 5-20-1",
        n_samples=20,
        devices=[str(d) for d in jax.devices()],
        machine=platform.machine(),
        cpu_count=__import__("os").cpu_count(),
        jax=jax.__version__,
        solver="Tsit5 vs SciPy RK45",
    )
    write_json(output_path(a.out, "flow_vs_scipy.json"), dict(meta=meta, results=results), indent=2)


if __name__ == "__main__":
    main()
