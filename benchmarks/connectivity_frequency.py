"""How often does a random initialization disconnect the invariant set H_G(c)?

Only `c = B~ theta^2` at t = 0 is needed, so each architecture draws 10^5
initializations with one `jit(vmap)` of `ij.init_edge_weights`, and `ij.frozen_mask`
decides all of them at once. Architectures: MLPs 3-6-6-6-6-2 with one width-1 layer at
each depth (and without), the 2-3-3-1 / 2-3-3-2 pair of the paper, random DAGs at
several edge densities; Glorot vs Kaiming. A sub-sample is cross-checked against
`ij.connectivity` (min cuts) and its LP, and the three paths are timed per c.
Writes `benchmarks/results/connectivity_frequency.json`.
"""

from __future__ import annotations

import argparse
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax.network import init_edge_weights  # noqa: E402


def architectures(n_dags: int = 3) -> list[tuple[str, ij.DAG]]:
    archs = [("mlp 3-6-6-6-6-2", ij.mlp([3, 6, 6, 6, 6, 2]))]
    for depth in range(1, 5):
        w = [3, 6, 6, 6, 6, 2]
        w[depth] = 1
        archs.append((f"mlp width-1 at layer {depth}", ij.mlp(w)))
    archs += [("mlp 2-3-3-1", ij.mlp([2, 3, 3, 1])), ("mlp 2-3-3-2", ij.mlp([2, 3, 3, 2]))]
    for p in (0.2, 0.35, 0.5, 0.7):
        for s in range(n_dags):
            archs.append((f"random dag p={p} #{s}", ij.random_dag(3, 10, 2, p, 1000 + s)))
    return archs


def sample_c(g: ij.DAG, n: int, init: str, seed: int = 0, chunk: int = 50_000) -> np.ndarray:
    B = jnp.asarray(g.incidence())
    f = jax.vmap(lambda k: init_edge_weights(g, k, init) ** 2 @ B.T)
    f = jax.jit(f) if n >= 20_000 else f  # small runs: skip the compile
    keys = jr.split(jr.key(seed), n)
    return np.concatenate([np.asarray(f(keys[i : i + chunk])) for i in range(0, n, chunk)])


def frequency_table(
    n_inits: int = 100_000, inits=("glorot", "kaiming"), n_dags: int = 3, progress: bool = True, only=None
) -> list[dict]:
    """Disconnection frequency per architecture; `only`: keep architectures whose name
    contains one of these strings."""
    rows = []
    archs = [(n, g) for n, g in architectures(n_dags) if only is None or any(o in n for o in only)]
    for name, g in tqdm(archs, disable=not progress, desc="architectures"):
        row = {
            "arch": name,
            "hidden": len(g.hidden),
            "edges": len(g.edges),
            "out_bottlenecks": len(g.out_bottlenecks),
            "in_bottlenecks": len(g.in_bottlenecks),
        }
        for init in inits:
            cs = sample_c(g, n_inits, init)
            m = ij.frozen_mask(g, cs)
            k = m.sum(1)
            row[init] = {
                "disconnected": float((k > 0).mean()),
                "mean_frozen": float(k.mean()),
                "max_frozen": int(k.max()),
            }
        rows.append(row)
    return rows


def timing_and_agreement(n: int = 200) -> dict:
    """Per-c time of the three verdicts on example_dag and a random DAG, and agreement."""
    out = {}
    for name, g in (("example_dag", ij.example_dag()), ("random dag p=0.35", ij.random_dag(3, 10, 2, 0.35, 1000))):
        cs = sample_c(g, n, "glorot", seed=1)
        ij.frozen_mask(g, cs[:2])
        ij.connectivity(g, cs[0])
        t = time.perf_counter()
        fm = ij.frozen_mask(g, cs)
        t_batch = (time.perf_counter() - t) / n
        t = time.perf_counter()
        ref = [ij.connectivity(g, c, lp="none") for c in cs]
        t_cut = (time.perf_counter() - t) / n
        t = time.perf_counter()
        cand = sorted({cd.edge_index for cd in ref[0].conditions})
        lp = [ij.lp_min_q(g, c, cand) for c in cs]
        t_lp = (time.perf_counter() - t) / n
        agree_cut = all(set(np.flatnonzero(fm[i])) == set(r.frozen_index) for i, r in enumerate(ref))
        agree_lp = all(set(np.flatnonzero(lp[i] > r.tol)) == set(r.frozen_index) for i, r in enumerate(ref))
        out[name] = {
            "n": n,
            "us_per_c_frozen_mask": 1e6 * t_batch,
            "us_per_c_mincut": 1e6 * t_cut,
            "us_per_c_lp": 1e6 * t_lp,
            "mincut_over_batch": t_cut / t_batch,
            "lp_over_mincut": t_lp / t_cut,
            "agree_mincut": agree_cut,
            "agree_lp": agree_lp,
        }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-inits", type=int, default=100_000)
    p.add_argument("--n-dags", type=int, default=3)
    p.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/connectivity_frequency.json, ignored by git; "
        "pass benchmarks/results/connectivity_frequency.json to replace the committed results)",
    )
    args = p.parse_args()
    t = time.perf_counter()
    timing = timing_and_agreement()
    rows = frequency_table(args.n_inits, n_dags=args.n_dags)
    wall = time.perf_counter() - t
    print(
        f"{'architecture':>28} {'H':>3} {'E':>4} {'out-bn':>6} {'in-bn':>5} {'P(disc) glorot':>15} {'P(disc) kaiming':>16}"
    )
    for r in rows:
        print(
            f"{r['arch']:>28} {r['hidden']:>3} {r['edges']:>4} {r['out_bottlenecks']:>6} {r['in_bottlenecks']:>5} "
            f"{r['glorot']['disconnected']:>15.4f} {r['kaiming']['disconnected']:>16.4f}"
        )
    print(
        f"\n{'graph':>20} {'frozen_mask us/c':>17} {'min-cut us/c':>13} {'LP us/c':>9} {'cut/batch':>10} {'LP/cut':>7} agree"
    )
    for name, r in timing.items():
        print(
            f"{name:>20} {r['us_per_c_frozen_mask']:>17.2f} {r['us_per_c_mincut']:>13.0f} {r['us_per_c_lp']:>9.0f} "
            f"{r['mincut_over_batch']:>10.0f} {r['lp_over_mincut']:>7.1f} {r['agree_mincut'] and r['agree_lp']}"
        )
    res = {
        "n_inits": args.n_inits,
        "rows": rows,
        "timing": timing,
        "wall_s": wall,
        "note": "c = B~ theta^2 at t=0; theta from ij.init_edge_weights; disconnected = some frozen edge",
    }
    write_json(output_path(args.out, "connectivity_frequency.json"), res)
    print(f"({wall:.0f} s)")


if __name__ == "__main__":
    main()
