"""Kvaerno5 (implicit) vs Tsit5 (explicit) on a stiff flat channel: the two-erf-neuron toy
model on its population loss (Gauss-Hermite, 401 nodes), starting from a point inside the
channel at w ~ 0.61 (sharpness ~ 1/eps^2), integrated for a growing horizon.

Both solvers run under `eqx.filter_jit(gradient_flow)`, compiled before timing, with the
same PID tolerances (rtol = atol = 1e-8) and step budget. Time is gradient-flow time of
the population MSE `(1/2) E (f - y)^2`.

Usage: python benchmarks/channels_solvers.py [--horizons 1e2,1e3,1e4,1e5] [--max-steps 200000]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.channels import channel_coordinates, toy_data, toy_network  # noqa: E402
from invariant_jax.losses import hessian  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizons", default="1e2,1e3,1e4,1e5")
    ap.add_argument("--max-steps", type=int, default=200_000)
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/channels_solvers.json; the committed file is "
        "benchmarks/results/channels_solvers.json)",
    )
    args = ap.parse_args()
    X, Y, loss = toy_data()
    net = toy_network(
        0.6743, 0.5440, 8.64, -6.98, convention="erf"
    )  # a point in the toy channel at w ~ 0.61 (eps ~ 0.065)
    pair = channel_coordinates(net, 0, 1)
    sharp = float(jnp.linalg.eigvalsh(hessian(net, X, Y, loss=loss))[-1])
    rows = []
    for T in [float(t) for t in args.horizons.split(",")]:
        for solver in ("kvaerno5", "tsit5"):
            run = eqx.filter_jit(
                lambda n: ij.gradient_flow(
                    n,
                    X,
                    Y,
                    T,
                    loss=loss,
                    saveat=ij.SaveTimes(n_save=2),
                    solver=ij.SolverOptions(solver, rtol=1e-8, atol=1e-8, max_steps=args.max_steps),
                )
            )
            jax.block_until_ready(run(net))  # compile
            t = time.perf_counter()
            f = jax.block_until_ready(run(net))
            dt = time.perf_counter() - t
            rows.append(
                dict(
                    horizon=T,
                    solver=solver,
                    seconds=dt,
                    steps=int(f.num_steps),
                    ok=bool(f.success),
                    t_final=float(f.t_final),
                    loss_final=float(f.loss_final),
                    status=ij.result_message(f.result) if not bool(f.success) else "",
                )
            )
    print(f"toy channel start: eps = {float(pair.eps):.3e}, sharpness = {sharp:.3e}, rtol = atol = 1e-8, float64")
    head = f"{'t1':>8} {'solver':>9} {'ok':>3} {'steps':>8} {'seconds':>9} {'t reached':>10} {'loss':>14} {'tsit5/kv5 time':>15}"
    print(head + "\n" + "-" * len(head))
    for k in range(0, len(rows), 2):
        kv, ts = rows[k], rows[k + 1]
        for r in (kv, ts):
            ratio = f"{ts['seconds'] / kv['seconds']:.1f}x" if r is ts else ""
            print(
                f"{r['horizon']:>8.0e} {r['solver']:>9} {'y' if r['ok'] else 'n':>3} {r['steps']:>8d} "
                f"{r['seconds']:>9.3f} {r['t_final']:>10.3e} {r['loss_final']:>14.10f} {ratio:>15}"
            )
    out = dict(
        benchmark="channels_solvers",
        platform=platform.platform(),
        jax=jax.__version__,
        devices=[str(d) for d in jax.devices()],
        start_eps=float(pair.eps),
        start_sharpness=sharp,
        rows=rows,
    )
    write_json(output_path(args.out, "channels_solvers.json"), out)


if __name__ == "__main__":
    main()
