"""Rank invariance of `J_G` along gradient flow: many generic initializations (and two
singular ones) flowed in one vmapped solve, the rank of `J_G = 2 B~ diag(theta)` and its
smallest singular value at every saved time.

Graph: `ij.mlp([2, 4, 3, 1], bias=True)` (ReLU), 16 teacher-student points
(`ij.teacher_student(g, 16, key=jr.key(0))`), inits `ij.DAGNetwork(g, key=k)` (Glorot) for
`k in jr.split(jr.key(1), 2 + n)`. The first two inits are made singular: the boundary edges
of `{h1_0, h2_0}` (a 2-node sub-network), resp. of `{h1_3}` (one neuron), are set to 0; the
other `n` are generic (a singular one has probability 0). Each is flowed by
`ij.gradient_flow(net, X, Y, t1=4, saveat=ij.SaveTimes(n_save=9), solver=ij.SolverOptions(solver, rtol=rtol,
atol=rtol, max_steps=...))`, all in one `eqx.filter_vmap`.

Per flow it records: diffrax's success flag (`t1` reached); how many of the 9 saved states are
finite (a ReLU flow can exhaust the step budget where units switch; `ij.gradient_flow` then
puts the state where it stopped, at `t_final < t1`, in the last slot and leaves inf at the
saved times after the stop that it did not reach, so "all saved times reached" in the JSON
means all 9 states finite, the last possibly at `t_final`); the rank of `J_G` at every
reached saved time (including the stop) by the SVD
(`ij.jacobian_rank`, `numpy.linalg.matrix_rank`'s threshold) and exactly by the graph
(`ij.jacobian_rank(..., method="graph")`, exact zeros) at the first and the last reached
time; the smallest singular value `s_min(J_G)` and `s_min` over the smallest row norm of `J_G`
(the smallest node-weight norm), minimised over the reached times. Summaries per solver /
rtol: fractions, minima, counts of flows whose rank at the end equals / differs from the rank
at the start, and wall time.

`tests/test_singular.py` runs the same study (12 generic inits by default, `n = 1000` under
`-m slow`) from `flow_batch` and `analyse` here, and asserts what is exact.

Usage: `PYTHONPATH=. python benchmarks/rank_invariance.py [--n 1000] [--config tsit5:1e-6:20000[:N] ...]
[--out benchmarks/results/rank_invariance.json]`
"""

from __future__ import annotations

import argparse
import os
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402

GRAPH = ij.mlp([2, 4, 3, 1], bias=True)
GROUPS = [frozenset({"h1_0", "h2_0"}), frozenset({"h1_3"})]  # cut off at the first two inits
T1, N_SAVE = 4.0, 9


def cut_off(g, theta, W):
    """`theta` with every edge that has exactly one endpoint in `W` set to 0."""
    theta = np.array(theta, dtype=np.float64)
    for k, (u, v) in enumerate(g.edges):
        if (u in W) != (v in W):
            theta[k] = 0.0
    return theta


def flow_batch(
    n_generic: int, solver: str, rtol: float, t1: float = T1, n_save: int = N_SAVE, max_steps: int = 100_000
) -> dict:
    """Flows (one vmapped solve) from one init per cut-off group in `GROUPS` followed by
    `n_generic` generic inits. Returns NumPy arrays: `thetas` `(n, T, E)`, `s` `(n, T, H)`
    singular values of `J_G`, `rank` `(n, T)` (`ij.jacobian_rank`, SVD), `rownorm` `(n, T)`
    the smallest row norm of `J_G`, `success` `(n,)`, `losses` `(n, T)`."""
    g = GRAPH
    X, Y, _ = ij.teacher_student(g, 16, key=jr.key(0))
    keys = jr.split(jr.key(1), len(GROUPS) + n_generic)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(keys)
    theta = np.array(nets.edge_weights())
    for i, W in enumerate(GROUPS):
        theta[i] = cut_off(g, theta[i], W)
    nets = nets.with_edge_weights(jnp.asarray(theta))
    opts = ij.SolverOptions(solver, rtol=rtol, atol=rtol, max_steps=max_steps)

    @eqx.filter_jit
    def run(nets):
        def one(net):
            f = ij.gradient_flow(net, X, Y, t1, saveat=ij.SaveTimes(n_save=n_save), solver=opts)
            along = net.with_edge_weights(f.thetas)  # (T,) networks
            J = ij.jacobian(along)
            s = jnp.linalg.svd(J, compute_uv=False)
            rownorm = jnp.min(jnp.linalg.norm(J, axis=2), axis=1)
            return {
                "thetas": f.thetas,
                "s": s,
                "rank": ij.jacobian_rank(along),
                "rownorm": rownorm,
                "success": f.success,
                "losses": f.losses,
            }

        return eqx.filter_vmap(one)(nets)

    return {k: np.asarray(v) for k, v in run(nets).items()}


def analyse(out: dict) -> dict:
    """Per-flow quantities at the *reached* saved times (finite `thetas`). Returns NumPy
    arrays over flows: `valid` `(n, T)`, `n_reached`, `rank_start`, `rank_end` (SVD, at
    the first and the last reached time), `rank_min`, `rank_max` (SVD over reached times),
    `graph_rank_start`, `graph_rank_end` (`method="graph"`), `s_min` (min over reached
    times), `ratio` (min of `s_min / rownorm`), `success`, `losses_first`, `losses_last`;
    and, for the singular inits, `boundary_zero` (every boundary edge of its group exactly
    0 at every reached time) and `groups_start`, `groups_end` (`ij.singular_subnetworks`)."""
    g = GRAPH
    thetas, s, rank, rownorm = out["thetas"], out["s"], out["rank"], out["rownorm"]
    n, T, _ = thetas.shape
    valid = np.all(np.isfinite(thetas), axis=-1)
    n_reached = valid.sum(1)
    last = np.where(valid.any(1), T - 1 - np.argmax(valid[:, ::-1], axis=1), 0)
    rows = np.arange(n)
    big = np.iinfo(np.int64).max
    s_min = np.where(valid, s.min(-1), np.inf).min(1)
    with np.errstate(divide="ignore", invalid="ignore"):  # a cut-off neuron's row of J_G is 0
        ratio = np.where(valid, s.min(-1) / np.where(valid, rownorm, 1.0), np.inf).min(1)
    template = ij.DAGNetwork(g, key=jr.key(0))
    ends = np.stack([thetas[:, 0], thetas[rows, last]], 1)  # (n, 2, E)
    graph_rank = ij.jacobian_rank(template.with_edge_weights(np.where(np.isfinite(ends), ends, 0.0)), method="graph")
    res = {
        "valid": valid,
        "n_reached": n_reached,
        "rank_start": rank[:, 0],
        "rank_end": rank[rows, last],
        "rank_min": np.where(valid, rank, big).min(1),
        "rank_max": np.where(valid, rank, -1).max(1),
        "graph_rank_start": graph_rank[:, 0],
        "graph_rank_end": graph_rank[:, 1],
        "s_min": s_min,
        "ratio": ratio,
        "success": out["success"].astype(bool),
        "losses_first": out["losses"][:, 0],
        "losses_last": out["losses"][rows, last],
    }
    res["boundary_zero"], res["groups_start"], res["groups_end"] = [], [], []
    for i, W in enumerate(GROUPS):
        boundary = [k for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)]
        res["boundary_zero"].append(bool(np.all(thetas[i][valid[i]][:, boundary] == 0.0)))
        for key, th in (("groups_start", thetas[i, 0]), ("groups_end", thetas[i, last[i]])):
            res[key].append(ij.singular_subnetworks(template.with_edge_weights(th)))
    return res


def summary(a: dict, n_singular: int = len(GROUPS)) -> dict:
    """The numbers of `analyse` for the generic inits (after the `n_singular` first flows)
    and for the singular ones."""
    H = len(GRAPH.hidden)
    gen = slice(n_singular, None)
    ok, valid = a["success"][gen], a["valid"][gen]
    same = a["rank_end"][gen] == a["rank_start"][gen]
    gsame = a["graph_rank_end"][gen] == a["graph_rank_start"][gen]
    return {
        "n_generic": int(len(ok)),
        "fraction_solver_success": float(ok.mean()),
        "fraction_budget_exhausted": float(1 - ok.mean()),
        "fraction_all_saved_times_reached": float(valid.all(1).mean()),
        "fraction_saved_times_reached": float(valid.mean()),
        "min_saved_times_reached": int(a["n_reached"][gen].min()),
        "min_s_min": float(a["s_min"][gen].min()),
        "min_s_min_over_node_norm": float(a["ratio"][gen].min()),
        "rank_start_counts": {str(k): int(v) for k, v in zip(*np.unique(a["rank_start"][gen], return_counts=True))},
        "rank_end_equal_start": int(same.sum()),
        "rank_end_not_equal_start": int((~same).sum()),
        "rank_full_at_every_reached_time": int(((a["rank_min"][gen] == H) & (a["rank_max"][gen] == H)).sum()),
        "graph_rank_end_equal_start": int(gsame.sum()),
        "graph_rank_end_not_equal_start": int((~gsame).sum()),
        "successful_rank_end_equal_start": int((same & ok).sum()),
        "successful_rank_end_not_equal_start": int((~same & ok).sum()),
        "final_loss_below_initial": int((a["losses_last"][gen] < a["losses_first"][gen]).sum()),
        "singular_inits": [
            {
                "group": sorted(W),
                "success": bool(a["success"][i]),
                "saved_times_reached": int(a["n_reached"][i]),
                "boundary_exactly_zero": a["boundary_zero"][i],
                "rank_start": int(a["rank_start"][i]),
                "rank_end": int(a["rank_end"][i]),
                "rank_min": int(a["rank_min"][i]),
                "rank_max": int(a["rank_max"][i]),
                "graph_rank_start": int(a["graph_rank_start"][i]),
                "graph_rank_end": int(a["graph_rank_end"][i]),
                "groups_start": [sorted(x) for x in a["groups_start"][i]],
                "groups_end": [sorted(x) for x in a["groups_end"][i]],
                "loss_first": float(a["losses_first"][i]),
                "loss_last": float(a["losses_last"][i]),
            }
            for i, W in enumerate(GROUPS)
        ],
    }


def per_flow(a: dict, n_singular: int = len(GROUPS)) -> dict:
    """Columns, one entry per generic flow."""
    gen = slice(n_singular, None)
    return {
        "success": a["success"][gen].astype(int).tolist(),
        "saved_times_reached": a["n_reached"][gen].tolist(),
        "rank_start": a["rank_start"][gen].tolist(),
        "rank_end": a["rank_end"][gen].tolist(),
        "graph_rank_start": a["graph_rank_start"][gen].tolist(),
        "graph_rank_end": a["graph_rank_end"][gen].tolist(),
        "s_min": [float(f"{x:.4g}") for x in a["s_min"][gen]],
        "s_min_over_node_norm": [float(f"{x:.4g}") for x in a["ratio"][gen]],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="generic initializations per configuration")
    p.add_argument(
        "--config",
        action="append",
        default=None,
        help="SOLVER:RTOL:MAX_STEPS[:N] (repeatable; N overrides --n for that configuration; "
        "default tsit5:1e-6:20000, the slow test's)",
    )
    p.add_argument("--no-per-flow", action="store_true", help="leave out the per-flow columns")
    p.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/rank_invariance.json; "
        "pass benchmarks/results/rank_invariance.json to replace the committed results)",
    )
    args = p.parse_args()
    configs = args.config or ["tsit5:1e-6:20000"]
    load_start = list(os.getloadavg())
    runs = []
    for cfg in configs:
        solver, rtol, max_steps, *n = cfg.split(":")
        rtol, max_steps, n = float(rtol), int(max_steps), int(n[0]) if n else args.n
        t0 = time.perf_counter()
        out = flow_batch(n, solver, rtol, max_steps=max_steps)
        wall_flow = time.perf_counter() - t0
        t0 = time.perf_counter()
        a = analyse(out)
        wall_analyse = time.perf_counter() - t0
        s = summary(a)
        run = {
            "solver": solver,
            "rtol": rtol,
            "atol": rtol,
            "max_steps": max_steps,
            "t1": T1,
            "n_save": N_SAVE,
            "n_flows": len(a["success"]),
            "wall_flow_s": wall_flow,
            "wall_analyse_s": wall_analyse,
            "load_average_before": load_start if not runs else None,
            "load_average_after": list(os.getloadavg()),
            **s,
        }
        if not args.no_per_flow:
            run["per_flow"] = per_flow(a)
        runs.append(run)
        print(
            f"{solver} rtol={rtol:g} max_steps={max_steps}: {s['n_generic']} generic flows in {wall_flow:.0f} s "
            f"(with compiling); solver success {s['fraction_solver_success']:.3f}, all saved times reached "
            f"{s['fraction_all_saved_times_reached']:.3f}; rank end == start {s['rank_end_equal_start']}, "
            f"!= {s['rank_end_not_equal_start']}; full rank at every reached time "
            f"{s['rank_full_at_every_reached_time']}; min s_min {s['min_s_min']:.3g}, min s_min / node norm "
            f"{s['min_s_min_over_node_norm']:.3g}; singular inits: "
            + "; ".join(
                f"{x['group']} rank {x['rank_start']}->{x['rank_end']}, boundary exactly 0 {x['boundary_exactly_zero']}"
                for x in s["singular_inits"]
            ),
            flush=True,
        )
    res = {
        "settings": {
            "n": args.n,
            "configs": configs,
            "graph": repr(GRAPH),
            "graph_call": "ij.mlp([2, 4, 3, 1], bias=True)",
            "n_hidden": len(GRAPH.hidden),
            "n_edges": len(GRAPH.edges),
            "groups": [sorted(W) for W in GROUPS],
            "data": "ij.teacher_student(g, 16, key=jr.key(0))",
            "init_keys": "jr.split(jr.key(1), 2 + n)",
            "t1": T1,
            "n_save": N_SAVE,
        },
        "note": None
        if all(r["n_generic"] >= 1000 for r in runs)
        else "configurations with fewer than the slow test's 1000 generic inits: "
        + ", ".join(f"{r['solver']} rtol {r['rtol']:g} (n = {r['n_generic']})" for r in runs if r["n_generic"] < 1000),
        "runs": runs,
        "devices": [str(d) for d in jax.devices()],
    }
    write_json(output_path(args.out, "rank_invariance.json"), res)


if __name__ == "__main__":
    main()
