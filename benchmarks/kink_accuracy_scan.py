"""Accuracy of the exact ReLU flow over many initializations: every trajectory at the
sweep's tolerance against the same flow at rtol = atol = 1e-12, and the worst ones
against the smooth net.

Workloads (ReLU, float64, Tsit5 inside, exact mode, one device; `_bare.kink_workloads`):
`demo`, the CLI's default sweep's first `--demo-inits` inits, and `heavy`, the 5-20-1
workload of `sweep_throughput.py`. At `--tol` (rtol = atol) and at `--reference-tol`,
per trajectory: `error = max |theta(t1) - theta_ref(t1)|`, the events, ambiguous events
and status of both. Reported: the error's quantiles, the trajectories whose error is
above `--outlier` times the tolerance (the outliers), and those whose event counts
differ. The independent check: for the `--smooth` worst trajectories, the smooth net
(`ij.smoothed_relu(beta)`, Kvaerno5 at 1e-12) at each of `--betas`, its distance at
t1 to both flows. It converges to the exact flow like 1 / beta (docs/solvers.md), so
the flow its distances fall towards is the right one.

    PYTHONPATH=. python benchmarks/kink_accuracy_scan.py --out benchmarks/results/kink_accuracy_scan.json
"""

from __future__ import annotations

import argparse
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--demo-inits", type=int, default=20_000)
p.add_argument("--heavy-inits", type=int, default=64)
p.add_argument("--tol", type=float, default=1e-8, help="rtol = atol of the flows checked")
p.add_argument("--reference-tol", type=float, default=1e-12)
p.add_argument("--outlier", type=float, default=1e3, help="an error above this many tolerances is an outlier")
p.add_argument("--smooth", type=int, default=3, help="worst trajectories per workload checked against the smooth net")
p.add_argument("--betas", type=float, nargs="+", default=[1e4, 1e5])
p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/kink_accuracy_scan.json)")
args = p.parse_args()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _bare import kink_engine, kink_workloads, run_sorted  # noqa: E402 (benchmarks/_bare.py)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.sweep import status_is_success  # noqa: E402

KEYS = ("num_events", "num_ambiguous", "sliding_time")


def smooth_distances(prob, i, flows):
    """The smooth net's distance at t1 to each of `flows` (`{name: theta(t1)}`), per beta."""
    net, X, Y, t1, init = prob[:5]
    theta0 = np.asarray(init(i))
    out = {}
    for beta in args.betas:
        sm = ij.DAGNetwork(net.graph, ij.smoothed_relu(beta), edge_weights=theta0)
        opts = ij.SolverOptions("kvaerno5", rtol=1e-12, atol=1e-12, max_steps=400_000)
        fl = ij.gradient_flow(sm, X, Y, float(t1), solver=opts, saveat=ij.SaveTimes(n_save=2))
        th = np.asarray(fl.theta_final)
        out[f"{beta:g}"] = dict(
            result=str(ij.result_name(fl.result)),
            **{name: float(np.max(np.abs(th - f))) for name, f in flows.items()},
        )
    return out


def scan(name, prob):
    n = prob[-1]
    t = time.perf_counter()
    rec = run_sorted(kink_engine(prob, tol=args.tol), range(n))
    seconds = time.perf_counter() - t
    t = time.perf_counter()
    ref = run_sorted(kink_engine(prob, tol=args.reference_tol), range(n))
    ref_seconds = time.perf_counter() - t
    err = np.max(np.abs(rec["theta_final"] - ref["theta_final"]), axis=1)
    q = np.quantile(err, [0.5, 0.9, 0.99, 0.999])
    outliers = np.flatnonzero(err > args.outlier * args.tol)
    differ = np.flatnonzero(rec["num_events"] != ref["num_events"])
    rows = []
    for i in np.union1d(outliers, differ):
        row = dict(index=int(i), error=float(err[i]))
        for k in KEYS:
            row[k] = [float(rec[k][i]), float(ref[k][i])]
        rows.append(row)
    worst = [int(i) for i in np.argsort(-err)[: args.smooth]]
    smooth = []
    for i in worst:
        flows = {"flow": rec["theta_final"][i], "reference": ref["theta_final"][i]}
        smooth.append(dict(index=i, error=float(err[i]), distances=smooth_distances(prob, i, flows)))
        print(name, smooth[-1], flush=True)
    summary = dict(
        n_inits=n,
        seconds_with_compile=seconds,
        reference_seconds_with_compile=ref_seconds,
        not_ok=int(np.sum(~status_is_success(rec["status"]))),
        not_ok_reference=int(np.sum(~status_is_success(ref["status"]))),
        ambiguous_trajectories=int(np.sum(rec["num_ambiguous"] > 0)),
        ambiguous_trajectories_reference=int(np.sum(ref["num_ambiguous"] > 0)),
        sliding_trajectories=int(np.sum(ref["sliding_time"] > 0)),
        error_quantiles={"0.5": q[0], "0.9": q[1], "0.99": q[2], "0.999": q[3]},
        error_max=float(err.max()),
        error_max_index=int(np.argmax(err)),
        outliers=len(outliers),
        event_counts_differ=len(differ),
        rows=rows,
        smooth=smooth,
    )
    print(name, {k: v for k, v in summary.items() if k not in ("rows", "smooth")}, flush=True)
    return summary


def main():
    out = output_path(args.out, "kink_accuracy_scan.json")
    workloads = kink_workloads(args.demo_inits, args.heavy_inits)
    result = dict(
        tol=args.tol,
        reference_tol=args.reference_tol,
        outlier_factor=args.outlier,
        betas=args.betas,
        workloads={name: scan(name, prob) for name, prob in workloads.items()},
    )
    write_json(out, result)


if __name__ == "__main__":
    main()
