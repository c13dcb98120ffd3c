"""The figure of `docs/topology.md`: the invariant set `H_G(c)` of the toy out-bottleneck
graph (`x0, x1 -> k -> y`, skip `x0 -> y`; `benchmarks/toy_bottleneck.py`) for one
disconnected `c_k < 0` and one connected `c_k > 0`, on the three weights that touch `k`,
coloured by component (`ij.plot_invariant_set`: points of `P(c)` from LP vertices plus
random input-output paths, random signs), with gradient-flow trajectories (plain Tsit5,
rtol = atol = 1e-8, toy data and teacher `theta_ky = -1`, t1 = 30; a flow that stops at
`max_steps` on a kink is drawn up to its last save) drawn inside.

In `(theta_x0k, theta_x1k, theta_ky)`, `H_G(c)` is the hyperboloid
`theta_x0k^2 + theta_x1k^2 - theta_ky^2 = c_k` (the skip weight is free): two sheets when
`c_k < 0` (the sign of `theta_ky` is frozen), one sheet when `c_k > 0`. Writes the PNG and a
JSON with each trajectory's start and end component, final loss and the largest drift of `c`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax

from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from toy_bottleneck import toy_data, toy_graph  # noqa: E402


def toy_init(g, c_k: float, a: float, b_frac: float, d_sign: float, s: float) -> np.ndarray:
    """Weights on `H_G(c)` with `theta_x0k = a`, `theta_x1k = b_frac * a`, sign of
    `theta_ky` given, `theta_ky^2 = a^2 + b^2 - c_k`."""
    b = b_frac * a
    th = np.zeros(len(g.edges))
    th[g.edges.index(("x0", "k"))], th[g.edges.index(("x1", "k"))] = a, b
    th[g.edges.index(("k", "y"))] = d_sign * np.sqrt(a * a + b * b - c_k)
    th[g.edges.index(("x0", "y"))] = s
    return th


CASES = {  # c_k: initializations (a, b / a, sign of theta_ky, skip)
    -0.5: [(0.6, 0.5, 1.0, 0.1), (0.3, -1.0, 1.0, -0.2), (0.5, 0.8, -1.0, 0.0)],
    0.5: [(0.9, 0.4, 1.0, 0.1), (0.8, -0.7, 1.0, -0.2), (0.8, 0.5, -1.0, 0.0)],
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t1", type=float, default=30.0)
    p.add_argument("--png", default="docs/topology_invariant_set.png")
    p.add_argument("--out", default=None, help="JSON (default: benchmarks/results/local/topology_figure.json)")
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = toy_graph()
    X, Y, _ = toy_data()
    axes_edges = [("x0", "k"), ("x1", "k"), ("k", "y")]
    fig = plt.figure(figsize=(11, 5))
    rows = []
    for j, (ck, inits) in enumerate(CASES.items()):
        trajs = []
        for a, bf, ds, s in inits:
            th0 = toy_init(g, ck, a, bf, ds, s)
            net = ij.DAGNetwork(g, "relu", edge_weights=th0)
            f = ij.gradient_flow(
                net,
                X,
                Y,
                args.t1,
                saveat=ij.SaveTimes(n_save=200),
                solver=ij.SolverOptions(rtol=1e-8, atol=1e-8, max_steps=100_000),
            )
            th = np.asarray(f.thetas)
            th = th[np.all(np.isfinite(th), axis=1)]  # saves after a stop (max_steps at a kink) are not filled
            trajs.append(th)
            comp = ij.component_of(g, th[[0, -1]])
            rows.append(
                {
                    "c_k": ck,
                    "theta0": th0.tolist(),
                    "theta_final": th[-1].tolist(),
                    "label_start": comp.labels[0],
                    "label_end": comp.labels[1],
                    "loss_final": float(f.loss_final),
                    "result": ij.result_name(f.result),
                    "max_c_drift": float(np.max(np.abs((th**2) @ g.incidence().T - ck))),
                }
            )
        ax = fig.add_subplot(1, 2, j + 1, projection="3d")
        ij.plot_invariant_set(g, [ck], edges=axes_edges, trajectories=trajs, n=4000, seed=j, ax=ax)
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.png, dpi=110)
    for r in rows:
        print(
            f"c_k = {r['c_k']:+.1f}: {r['label_start']:>10} -> {r['label_end']:>10}, final loss "
            f"{r['loss_final']:.4f}, {r['result']}, max |c(t) - c| = {r['max_c_drift']:.1e}"
        )
    out = write_json(
        output_path(args.out, "topology_figure.json"), {"t1": args.t1, "png": args.png, "trajectories": rows}
    )
    print(f"wrote {args.png} and {out}")


if __name__ == "__main__":
    main()
