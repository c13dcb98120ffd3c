"""`sweep_flows` on a second data set of the same shapes: compilations and wall time with
the compiled engine reused (the default since the fix) against a fresh engine (what every
call did before: the data and initial weights were constants of per-call programs).

The workload is the channels studies' flow phase: Kvaerno5 (rtol 1e-3, atol 1e-6) from
MLPGradientFlow-Glorot inits of `mlp([2, r, 1])` on GP teachers, one teacher per call.
All three calls run in one process: call 1 compiles, call 2 (new teacher) reuses the
engine, call 3 (another teacher) clears the engine cache first and compiles again.

Usage: python benchmarks/sweep_recompile.py [--samples 500] [--r 4] [--inits 8] [--steps 200] [--out ...]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import CompileCounter, output_path, write_json  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402
from invariant_jax.sweep import BatchOptions, clear_engines  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--inits", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200, help="max Kvaerno5 steps per flow")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    compiles = CompileCounter()
    g = ij.mlp([2, args.r, 1], bias=True)
    rows = []
    for call, (teacher, fresh) in enumerate(((0, False), (1, False), (2, True))):
        X, Y = ij.gp_data(args.samples, 2, roughness=2.0, key=jr.key(100 + teacher))
        thetas = jax.vmap(lambda k: ch.mlpgf_glorot(g, k))(jr.split(jr.key(teacher), args.inits))
        nets = eqx.filter_vmap(ij.DAGNetwork(g, "softplus", edge_weights=thetas[0]).with_edge_weights)(thetas)
        if fresh:
            clear_engines()
        compiles.reset()
        t = time.perf_counter()
        res = ij.sweep_flows(
            nets,
            X,
            Y,
            1e12,
            solver=ij.SolverOptions("kvaerno5", rtol=1e-3, atol=1e-6, max_steps=args.steps),
            saveat=ij.SaveTimes(n_save=2),
            batch=BatchOptions(slots=args.inits),
        )
        jax.block_until_ready(res.theta_final)
        dt = time.perf_counter() - t
        rows.append(
            dict(
                call=call + 1,
                teacher=teacher,
                engine="fresh (as before the fix)" if call != 1 else "reused",
                compilations=compiles.n,
                compile_seconds=compiles.seconds,
                wall_seconds=dt,
                solver_steps=int(np.sum(res.num_steps)),
            )
        )
        r = rows[-1]
        print(
            f"call {r['call']} (teacher {teacher}, {r['engine']}): {r['compilations']} compilations "
            f"({r['compile_seconds']:.1f} s), wall {dt:.1f} s, {r['solver_steps']} solver steps",
            flush=True,
        )
    path = output_path(args.out, "sweep_recompile.json")
    write_json(
        path,
        dict(
            benchmark="sweep_recompile",
            platform=platform.platform(),
            devices=[str(d) for d in jax.devices()],
            jax=jax.__version__,
            settings=vars(args),
            note="measured on a shared 2-core machine; call 1 and 3 compile, call 2 reuses",
            rows=rows,
        ),
    )


if __name__ == "__main__":
    main()
