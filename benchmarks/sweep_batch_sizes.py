"""`ij.sweep_flows` called with one batch size after another in one process: wall time
and XLA compilations per call, for the plain and the kink-aware engine.

Issue 27 measured every new batch size compiling again (kink-aware 8-11 s per new n, plain
2-3 s; warm 0.4 s / 0.12 s). Since then the initial weights are fed to the slots with the
queue in blocks of fixed shape `(slots, E)`, so only the first call of a configuration
compiles. Workload: `sweep_throughput.py`'s heavy one (5-20-1 MLP without bias, 20
teacher points, t1 = 1, Tsit5, rtol = atol = 1e-8; inits `PRNGKey(i)`), 64 slots, exact
mode: ReLU for the kink-aware arm; softplus for the plain arm (a smooth net, what the plain
engine is for: plain integration across ReLU kinks takes thousands of steps per
trajectory). The batch of size n is the first n inits, so "n again" repeats a call.

Usage: PYTHONPATH=benchmarks .venv/bin/python benchmarks/sweep_batch_sizes.py [--sizes 2 64 32 ...] [--out ...]
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import CompileCounter, output_path, write_json  # noqa: E402
from invariant_jax.sweep import BatchOptions  # noqa: E402

SIZES = (2, 64, 32, 64, 128, 256, 1, 37)


def workload(sizes, activation):
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jr.PRNGKey(3))
    keys = jax.vmap(jr.PRNGKey)(jnp.arange(max(sizes)))
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    thetas = np.asarray(nets.edge_weights())
    base = ij.DAGNetwork(g, activation, edge_weights=thetas[0])
    return X, Y, {n: base.with_edge_weights(thetas[:n]) for n in sorted(set(sizes))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--arms", nargs="+", default=["kink", "plain"], choices=["plain", "kink"])
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    compiles = CompileCounter()
    load = [list(os.getloadavg())]
    rows = []
    for arm in args.arms:
        X, Y, batches = workload(args.sizes, "relu" if arm == "kink" else "softplus")
        opts = dict(
            solver="tsit5",
            rtol=1e-8,
            atol=1e-8,
            saveat=ij.SaveTimes(n_save=11),
            batch=BatchOptions(slots=args.slots),
            kinks=arm == "kink",
        )
        seen = set()
        for call, n in enumerate(args.sizes):
            compiles.reset()
            t = time.perf_counter()
            res = ij.sweep_flows(batches[n], X, Y, 1.0, **opts)
            dt = time.perf_counter() - t
            rows.append(
                dict(
                    arm=arm,
                    call=call + 1,
                    n=n,
                    repeat=n in seen,
                    wall_seconds=dt,
                    compilations=compiles.n,
                    compile_seconds=compiles.seconds,
                    engine_seconds=res.stats["seconds"],
                    failed=int(np.sum(~res.success)),
                    work_units=int(res.stats["useful_steps"]),
                )
            )
            seen.add(n)
            r = rows[-1]
            print(
                f"{arm:5s} call {r['call']:2d} n = {n:4d}{' (again)' if r['repeat'] else '        '}: "
                f"wall {dt:7.2f} s, {r['compilations']:3d} compilations ({r['compile_seconds']:.2f} s), "
                f"engine {r['engine_seconds']:.2f} s",
                flush=True,
            )
    load.append(list(os.getloadavg()))
    path = output_path(args.out, "sweep_batch_sizes.json")
    write_json(
        path,
        dict(
            benchmark="sweep_batch_sizes",
            settings=vars(args),
            loadavg_before_after=load,
            workload="heavy: 5-20-1, no bias (kink arm relu, plain arm softplus), 20 teacher points "
            "(PRNGKey(3)), inits PRNGKey(i), "
            "t1 = 1, Tsit5 rtol = atol = 1e-8, n_save 11, exact mode",
            note="one process; call 1 of each arm compiles, the later calls should compile nothing. "
            "The machine is shared (2 cores): loadavg_before_after says how loaded it was.",
            rows=rows,
        ),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
