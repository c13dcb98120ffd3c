"""The trajectories of the default million-init sweep that did not end `ok`
(`benchmarks/results/sweep_million.json`: 4 of 10^6), run again one by one: each
slid on a pair of one sample while a pair upstream or downstream of it on the same
sample reached its surface (issue 27). Per init:

- the exact flow with the sweep's own options (`SweepConfig` defaults: Tsit5 inside,
  rtol = atol = 1e-8, `KinkOptions()`): result, events, ambiguous events, most pairs
  sliding at once, sliding time;
- the same flow at rtol = atol = 1e-10 against the smooth limit, the gradient flow of the
  net with relu replaced by `softplus(beta z) / beta` (Kvaerno5 at 1e-10), for
  `beta` = 1e3 and 1e4: `max |theta_beta(t) - theta_kink(t)|` over 6 save times in
  [0, 1] (a distance that falls like `1 / beta` says the two flows are one in the limit).

Usage: python benchmarks/coupled_pairs.py [--inits 587844 384188 283863 396500]
    [--out benchmarks/results/coupled_pairs.json]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import invariant_jax as ij  # noqa: E402

INITS = (587844, 384188, 283863, 396500)  # the 4 non-ok rows of sweep_million.json
BETAS = (1e3, 1e4)
SAVES = np.linspace(0.0, 1.0, 6)


def one(cfg: ij.sweep.SweepConfig, index: int) -> dict:
    g = cfg.build_graph()
    X, Y = cfg.build_data(g)
    net = ij.sweep.sweep_network(cfg, index)
    t = time.perf_counter()
    kf = jax.block_until_ready(ij.kink_aware_flow(net, X, Y, cfg.t1, solver=cfg.solver, kinks=cfg.kinks))
    wall = time.perf_counter() - t  # the first init's includes compiling
    row = {
        "index": index,
        "result": str(ij.result_name(kf.result)),
        "success": bool(kf.success),
        "t_final": float(kf.flow.t_final),
        "events": int(kf.num_events),
        "ambiguous": int(kf.num_ambiguous),
        "max_sliding_pairs": int(kf.max_sliding_pairs),
        "sliding_time": float(kf.sliding_time),
        "wall_s": wall,
    }
    tight = ij.kink_aware_flow(net, X, Y, 1.0, solver="tsit5", rtol=1e-10, atol=1e-10, saveat=SAVES)
    row["tight"] = {
        "success": bool(tight.success),
        "events": int(tight.num_events),
        "ambiguous": int(tight.num_ambiguous),
    }
    row["smooth_distance"] = {}
    for beta in BETAS:
        sm = ij.DAGNetwork(g, ij.smoothed_relu(beta), edge_weights=net.edge_weights())
        opts = ij.SolverOptions("kvaerno5", rtol=1e-10, atol=1e-10, max_steps=200_000)
        fl = ij.gradient_flow(sm, X, Y, 1.0, saveat=SAVES, solver=opts)
        d = np.max(np.abs(np.asarray(fl.thetas) - np.asarray(tight.flow.thetas)))
        row["smooth_distance"][f"{beta:g}"] = float(d) if bool(fl.success) else None
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inits", type=int, nargs="+", default=list(INITS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = ij.sweep.SweepConfig(graph="example", n_inits=1_000_000)
    rows = [one(cfg, i) for i in args.inits]
    write_json(
        output_path(args.out, "coupled_pairs.json"),
        {
            "benchmark": "coupled_pairs",
            "workload": "the non-ok inits of the default 10^6 sweep (graph example, seed 0), one kink_aware_flow each",
            "settings": {
                "inits": args.inits,
                "betas": list(BETAS),
                "saves": SAVES.tolist(),
                "sweep_solver": repr(cfg.solver),
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
