"""The worst cases of the default million-init sweep, run again one by one: the 4
trajectories that did not end `ok` (`benchmarks/results/sweep_million.json` as committed
in 9a3003c), each of which slid on a pair of one sample while a pair upstream or
downstream of it on the same sample reached its surface (issue 27), init 827265,
which started from a wrong activation pattern (fixed in 86a1b4e), and init 589768, the
one trajectory of the rerun at 36327d7 that did not end `ok` (six pairs sliding on one
surface until a pair upstream split it; fixed after 9c86d57).
And the 10 trajectories of the rerun at cd1a25f that ended `ok` with an ambiguous event
(`summary.json`'s `"flagged"`), 7 of which an upstream pair's slide with the downstream
pair leaving its surface now resolves (the enumeration of `kinks._modes.resolve`).
Per init:

- the exact flow with the sweep's own options (`SweepConfig` defaults: Tsit5 inside,
  rtol = atol = 1e-8, `KinkOptions()`): result, events, ambiguous events, most pairs
  sliding at once, sliding time;
- the same flow at rtol = atol = 1e-10 against the smooth limit, the gradient flow of the
  net with relu replaced by `softplus(beta z) / beta` (Kvaerno5 at 1e-10), for
  `beta` = 1e3 and 1e4: `max |theta_beta(t) - theta_kink(t)|` over the 6 save times in
  [0, 1] that the exact flow reached (a distance that falls like `1 / beta` says the two flows are one in the limit).

Also `initial_pattern`: of the sweep's first `--pattern-inits` inits, how many have some
pair whose sign differs between the network's own pre-activations (the pattern now) and
the pre-activations with every node linear (the pattern before 86a1b4e).

Usage: python benchmarks/coupled_pairs.py [--inits 587844 384188 283863 396500 827265 589768 ...]
    [--pattern-inits 2000] [--out benchmarks/results/coupled_pairs.json]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import invariant_jax as ij  # noqa: E402
from invariant_jax.kinks import make_kink_integrator  # noqa: E402

# the 4 non-ok rows of sweep_million.json at 9a3003c; 827265; the non-ok row at 36327d7;
# the flagged rows at cd1a25f
INITS = (587844, 384188, 283863, 396500, 827265, 589768)
FLAGGED = (262377, 347397, 365718, 421077, 453201, 494841, 583752, 586962, 652985, 908617)
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
        reached = np.all(np.isfinite(np.asarray(tight.flow.thetas)), axis=1)  # saves before a stop
        d = np.max(np.abs(np.asarray(fl.thetas)[reached] - np.asarray(tight.flow.thetas)[reached]))
        row["smooth_distance"][f"{beta:g}"] = float(d) if bool(fl.success) else None
    print(row, flush=True)
    return row


def initial_patterns(cfg: ij.sweep.SweepConfig, n: int) -> dict:
    """Inits `0..n-1` whose pattern with every node linear differs from their own."""
    g = cfg.build_graph()
    X, Y = cfg.build_data(g)
    net = ij.sweep.sweep_network(cfg, 0)
    prob = make_kink_integrator(net, X, Y, cfg.t1).prob
    N, H = prob.shape
    th = jnp.stack([ij.sweep.sweep_network(cfg, i).edge_weights() for i in range(n)])
    linear = jax.vmap(lambda t: prob.Z(t, jnp.ones((N, H), t.dtype)) > 0)(th)
    own = jax.vmap(lambda t: prob.pre_activations(t) > 0)(th)
    differ = linear != own
    return {
        "inits": n,
        "inits_with_a_wrong_pair": int(jnp.sum(jnp.any(differ, axis=(1, 2)))),
        "pairs": n * N * H,
        "wrong_pairs": int(jnp.sum(differ)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inits", type=int, nargs="+", default=list(INITS + FLAGGED))
    ap.add_argument("--pattern-inits", type=int, default=2000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = ij.sweep.SweepConfig(graph="example", n_inits=1_000_000)
    rows = [one(cfg, i) for i in args.inits]
    write_json(
        output_path(args.out, "coupled_pairs.json"),
        {
            "benchmark": "coupled_pairs",
            "workload": "the non-ok and flagged inits of the default 10^6 sweep (graph example, seed 0), one kink_aware_flow each",
            "settings": {
                "inits": args.inits,
                "betas": list(BETAS),
                "saves": SAVES.tolist(),
                "sweep_solver": repr(cfg.solver),
            },
            "rows": rows,
            "initial_pattern": initial_patterns(cfg, args.pattern_inits),
        },
    )


if __name__ == "__main__":
    main()
