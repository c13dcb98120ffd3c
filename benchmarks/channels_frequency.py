"""The frequency study: fraction of Glorot-normal initializations of mlp([1, width, 1],
bias) whose gradient flow ends in a flat channel, vs GP roughness s (Matérn-3/2, length
scale 1/s), width and activation (softplus, erf). Kvaerno5 with a Newton stage solve
(`FREQUENCY_SOLVER`), rtol = atol = 1e-7, flows to t1 (gradient-flow time of
L = (1/2N) sum (f - y)^2), then `detect_channels` on the final state ("channel": all
criteria incl. weightnorm >= maxnorm; "+cand.": also merging pairs with diverging
opposite output weights below it).

Scales unchanged: raise --n-inits / --n-samples / --t1 (the batch is one vmap per cell;
explicit solvers go through the sharded sweep engine).

Usage: python benchmarks/channels_frequency.py [--n-inits 4] [--t1 1e6] [--widths 2,4]
       [--solver kvaerno5_newton]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.channels import FrequencyGrid, channel_frequency  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-inits", type=int, default=4)
    ap.add_argument("--n-samples", type=int, default=32)
    ap.add_argument("--widths", default="2,4")
    ap.add_argument("--t1", type=float, default=1e6)
    ap.add_argument("--maxnorm", type=float, default=1e3, help="weightnorm criterion of detect_channels")
    ap.add_argument("--pair-tol", type=float, default=1e-2)
    ap.add_argument(
        "--solver", default="kvaerno5_newton", help="a name in ij.SOLVERS (kvaerno5: diffrax's chord stage solve)"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/channels_frequency.json; the committed file is "
        "benchmarks/results/channels_frequency.json)",
    )
    args = ap.parse_args()
    t = time.perf_counter()
    grid = FrequencyGrid(
        n_inits=args.n_inits, n_samples=args.n_samples, widths=tuple(int(w) for w in args.widths.split(","))
    )
    st = channel_frequency(
        grid=grid,
        t1=args.t1,
        solver=ij.SolverOptions(args.solver, rtol=1e-7, atol=1e-7, max_steps=50_000),
        maxnorm=args.maxnorm,
        pair_tol=args.pair_tol,
        progress=True,
    )
    dt = time.perf_counter() - t
    print(st.table())
    n = st.channel.size
    print(
        f"{n} flows in {dt:.1f} s ({dt / n:.2f} s per flow, compilation included); failed: {int((~st.success).sum())}"
    )
    out = dict(
        benchmark="channels_frequency",
        platform=platform.platform(),
        jax=jax.__version__,
        seconds=dt,
        n_flows=n,
        **st.to_dict(),
    )
    write_json(output_path(args.out, "channels_frequency.json"), out)


if __name__ == "__main__":
    main()
