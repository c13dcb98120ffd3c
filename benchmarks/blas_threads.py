"""BLAS/LAPACK threads and the implicit solvers on CPU: OpenBLAS's default (one thread per
core) against one thread, side by side, on an otherwise idle and on a busy machine.

The implicit solvers factor a matrix at every step (Gauss4: the `2E x 2E` Newton matrix;
Kvaerno5: `E x E`) through SciPy's OpenBLAS, which JAX's CPU LAPACK kernels call. The
CLI and the benchmarks run them with one BLAS thread (`invariant_jax.cli._common.
one_blas_thread`, `benchmarks/_output.py`); this measures why.

Workloads, each in a fresh process per arm (the thread count is fixed when OpenBLAS
loads), arms alternating within each round:
- light: the README example, `kink_aware_flow` of a 5-20-1 ReLU MLP with bias (default
  Gauss4 inside), t1 = 2;
- heavy: `gradient_flow` with Kvaerno5 of a 10-40-1 softplus MLP with bias, 50 points,
  t1 = 1, rtol = atol = 1e-8 (its size E is in the JSON);
- and one 240 x 240 LU factorization (`jax.scipy.linalg.lu_factor`).
For each: the first call (compile and run) and `--repeats` warm calls (median and the
slowest: the busy machine's tail is the point). `--busy` lists how many extra processes
spin on the cores meanwhile (0: none; the default adds one per core).

Usage: python benchmarks/blas_threads.py [--rounds 2] [--repeats 5] [--busy 0 2]
    [--out benchmarks/results/blas_threads.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)


def child(repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import invariant_jax as ij

    def timed(fn):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        first = time.perf_counter() - t
        warm = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(fn())
            warm.append(time.perf_counter() - t)
        return dict(first_s=first, warm_median_s=float(np.median(warm)), warm_max_s=max(warm), warm_s=warm)

    g = ij.mlp([5, 20, 1], bias=True)  # the README's example, as benchmarks/first_calls.py runs it
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1), init="glorot")
    light = timed(lambda: ij.kink_aware_flow(net, X, Y, 2.0))

    g2 = ij.mlp([10, 40, 1], bias=True)
    X2, Y2, _ = ij.teacher_student(g2, 50, key=jax.random.key(0))
    net2 = ij.DAGNetwork(g2, "softplus", key=jax.random.key(1), init="glorot")
    heavy = timed(lambda: ij.gradient_flow(net2, X2, Y2, 1.0, solver="kvaerno5", rtol=1e-8, atol=1e-8))

    M = jnp.eye(240) + 0.01 * jax.random.normal(jax.random.PRNGKey(0), (240, 240))
    lu = jax.jit(jax.scipy.linalg.lu_factor)
    factor = timed(lambda: lu(M))

    from threadpoolctl import threadpool_info

    threads = {os.path.basename(i["filepath"]): i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    return dict(light=light, heavy=heavy, lu240=factor, blas_threads=threads, E_heavy=int(net2.edge_weights().size))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--busy", type=int, nargs="+", default=[0, os.cpu_count() or 1])
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/blas_threads.json)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.repeats)))
        return
    cores = os.cpu_count() or 1
    arms = {"default": str(cores), "one": "1"}  # OpenBLAS's default is one thread per core
    rows = []
    for busy in args.busy:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            for r in range(args.rounds):
                order = list(arms) if r % 2 == 0 else list(arms)[::-1]
                for arm in order:
                    env = dict(os.environ, OPENBLAS_NUM_THREADS=arms[arm])
                    load = list(os.getloadavg())
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", "--repeats", str(args.repeats)],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    rec = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.append(dict(busy=busy, round=r, arm=arm, load_average_before=load, **rec))
                    print(
                        f"busy {busy} round {r} {arm:7s}: light warm {rec['light']['warm_median_s']:.3f} s "
                        f"(max {rec['light']['warm_max_s']:.3f}), heavy warm {rec['heavy']['warm_median_s']:.3f} s "
                        f"(max {rec['heavy']['warm_max_s']:.3f}), lu240 {rec['lu240']['warm_median_s'] * 1e3:.2f} ms",
                        flush=True,
                    )
        finally:
            for p in spinners:
                p.kill()
    summary = []
    for busy in args.busy:
        for work in ("light", "heavy", "lu240"):
            row = dict(busy=busy, workload=work)
            for arm in arms:
                rs = [x[work] for x in rows if x["busy"] == busy and x["arm"] == arm]
                row[f"{arm}_first_s"] = [x["first_s"] for x in rs]
                row[f"{arm}_warm_median_s"] = [x["warm_median_s"] for x in rs]
                row[f"{arm}_warm_max_s"] = max(x["warm_max_s"] for x in rs)
            row["warm_median_ratio_default_over_one"] = sum(row["default_warm_median_s"]) / sum(
                row["one_warm_median_s"]
            )
            row["warm_max_ratio_default_over_one"] = row["default_warm_max_s"] / row["one_warm_max_s"]
            summary.append(row)
    write_json(
        output_path(args.out, "blas_threads.json"),
        dict(
            benchmark="blas_threads",
            settings=dict(rounds=args.rounds, repeats=args.repeats, busy=args.busy, cores=cores, arms=arms),
            workloads=dict(
                light="README example: kink_aware_flow, mlp([5, 20, 1], bias=True) relu, 20 teacher points "
                "(key 0), Glorot init key 1, t1 = 2, default Gauss4 inside",
                heavy="gradient_flow, kvaerno5, mlp([10, 40, 1], bias=True) softplus, 50 teacher points (key 0), "
                "Glorot init key 1, t1 = 1, "
                "rtol = atol = 1e-8",
                lu240="jax.scipy.linalg.lu_factor of a 240 x 240 matrix",
            ),
            summary=summary,
            rows=rows,
        ),
    )


if __name__ == "__main__":
    main()
