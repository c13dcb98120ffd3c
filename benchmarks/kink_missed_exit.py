"""A sliding exit missed inside one step: init 12 of `kink_sweep.py`'s workload.

5-20-1 ReLU MLP (no bias), 20 teacher points (key 1234), the init `PRNGKey(12)`, t1 = 1,
float64. The kink-aware flow (`ij.kink_aware_flow`) at each of `--arms` (`solver:tol`,
rtol = atol = tol): events, sliding exits, the event times and the distance of theta(1)
to the reference arm (`--reference`, Tsit5 at 1e-12). The independent check: the smooth
net (`ij.smoothed_relu(beta)`, Kvaerno5 at 1e-12) at each of `--betas`, its distance to
the reference and to the flow at Tsit5 1e-8. Its gradient flow converges to the exact
one like 1 / beta (docs/solvers.md), so the arm the smooth distances fall towards is
the right one.

    PYTHONPATH=. python benchmarks/kink_missed_exit.py --out benchmarks/results/kink_missed_exit.json
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ARMS = "tsit5:1e-8,tsit5:1e-9,tsit5:1e-10,tsit5:1e-11,tsit5:1e-12,gauss4:1e-6,gauss4:1e-12,dopri8:1e-13"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default=ARMS, help="solver:tol pairs of the kink-aware flow")
    ap.add_argument("--reference", default="tsit5:1e-12", help="the arm the others are measured against")
    ap.add_argument("--betas", default="1e5,3e5,1e6", help="smoothed-relu sharpnesses")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/kink_missed_exit.json)")
    args = ap.parse_args()
    arms = args.arms.split(",")
    if args.reference not in arms:
        raise SystemExit(f"--reference {args.reference!r} must be one of --arms.")
    parsed = {a: (a.split(":")[0], float(a.split(":")[1])) for a in arms}
    betas = [float(b) for b in args.betas.split(",")]
    path = output_path(args.out, "kink_missed_exit.json")

    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(1234))
    net = ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(12))
    start = time.perf_counter()
    flows = {}
    for a, (solver, tol) in parsed.items():
        flows[a] = ij.kink_aware_flow(net, X, Y, 1.0, solver=solver, rtol=tol, atol=tol)
    ref = np.asarray(flows[args.reference].theta_final)
    loose = np.asarray(flows["tsit5:1e-8"].theta_final) if "tsit5:1e-8" in flows else None
    rows = []
    for a, k in flows.items():
        times = np.asarray(k.event_times)
        rows.append(
            dict(
                arm=a,
                solver=parsed[a][0],
                tol=parsed[a][1],
                result=str(ij.result_name(k.result)),
                events=int(k.num_events),
                sliding_exits=int(k.num_sliding_exits),
                event_times=times[np.isfinite(times)].tolist(),
                distance_to_reference=float(np.max(np.abs(np.asarray(k.theta_final) - ref))),
            )
        )
        print(
            f"{a}: {rows[-1]['events']} events, {rows[-1]['distance_to_reference']:.2e} from the reference", flush=True
        )
    smooth = []
    for beta in betas:
        sm = ij.DAGNetwork(g, ij.smoothed_relu(beta), edge_weights=net.edge_weights())
        opts = ij.SolverOptions("kvaerno5", rtol=1e-12, atol=1e-12, max_steps=200_000)
        fl = ij.gradient_flow(sm, X, Y, 1.0, solver=opts, saveat=ij.SaveTimes(n_save=2))
        th = np.asarray(fl.theta_final)
        smooth.append(
            dict(
                beta=beta,
                result=str(ij.result_name(fl.result)),
                distance_to_reference=float(np.max(np.abs(th - ref))),
                distance_to_tsit5_1e8=None if loose is None else float(np.max(np.abs(th - loose))),
            )
        )
        print(f"beta {beta:g}: {smooth[-1]}", flush=True)
    write_json(
        path,
        dict(
            benchmark="kink_missed_exit",
            workload="5-20-1 relu mlp (no bias), 20 teacher points (key 1234), init PRNGKey(12), t1 = 1",
            reference=args.reference,
            smooth_solver="kvaerno5, rtol = atol = 1e-12",
            rows=rows,
            smooth=smooth,
            seconds=time.perf_counter() - start,
        ),
    )


if __name__ == "__main__":
    main()
