"""How the topology tools scale: `connectivity`, `component_of`, `singular_subnetworks`
and `jacobian_rank` on random DAGs from 10 to 10^3 hidden nodes (up to about 10^4
edges), and `component_of` / `frozen_mask` batched over 10^5 conserved vectors on the
demo DAG (with an LP cross-check on a sample).

Graphs: `ij.random_dag(3, H, 2, p, key=H)` with `p = min(1, 2 * degree / H)`, so
`E ~ degree * H` (default `degree` 10: about 10^4 edges at 10^3 hidden nodes). Weights: Glorot
(`ij.DAGNetwork(g, "relu", key=...)`). Per graph, each function is called once to warm up
(compile, caches) and then timed `--repeats` times (the median is reported, with the
first call). `connectivity` is timed without the LP (`lp="none"`: the combinatorial
verdict, one min cut per bottleneck) and, separately, with the default LP on the
bottleneck edges up to `--lp-max-hidden` hidden nodes. `singular_subnetworks` is the
union-find over the non-zero edges (linear time); `jacobian_rank` is timed both ways: the
default SVD of the `H x E` matrix `J_G` in JAX (cubic), and `method="graph"` (connected
components of the non-zero edges, linear), and on every graph the two ranks and the identity
`rank J_G = H - len(singular_subnetworks)` are checked against each other.

The same weights with every edge of 5% of the hidden nodes and a third of the other edges set
exactly to 0 (so that cut-off groups appear) are ranked by `method="graph"` too, and by the
SVD up to 300 hidden nodes.

Batched: `--n-batch` (default 10^5) networks on `ij.example_dag()` (Glorot, and a
quarter with their bottleneck out-weights scaled up so that many rows are frozen), their
labels with one `ij.component_of` call; `--n-lp` rows are re-decided one at a time by
`ij.connectivity(..., lp="all")` (the exact LP over every edge), which must agree.

`singular_point` (does `H_G(c)` contain a singular point at all) is decided per graph with
its default method (subset sums per hidden component up to 40 nodes, else a MILP bounded by
`--singular-time-limit`); "undecided" is reported as such. Issue 30's case (`connectivity
--singular` on `random_dag(3, 30, 1, 0.2)`, which ran for more than 300 s) is timed on
`--n-issue30` graph seeds.

Writes `benchmarks/results/topology_scale.json`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402


def _time(fn, repeats: int) -> dict:
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"first_s": first, "median_s": statistics.median(times) if times else first, "result": out}


def one_graph(
    H: int,
    degree: float,
    repeats: int,
    lp_max_hidden: int,
    svd_max_hidden: int,
    singular_max_hidden: int,
    singular_time_limit: float,
) -> dict:
    p = min(1.0, 2.0 * degree / H)
    t0 = time.perf_counter()
    g = ij.random_dag(3, H, 2, p, key=H)
    build = time.perf_counter() - t0
    net = ij.DAGNetwork(g, "relu", key=jr.key(H))
    row = {
        "n_hidden": H,
        "n_edges": len(g.edges),
        "edge_prob": p,
        "graph_build_s": build,
        "n_out_bottlenecks": len(g.out_bottlenecks),
        "n_in_bottlenecks": len(g.in_bottlenecks),
    }
    r = _time(lambda: ij.connectivity(net, lp="none"), repeats)
    row["connectivity_s"], row["connectivity_first_s"] = r["median_s"], r["first_s"]
    row["n_frozen"] = len(r["result"].frozen_edges)
    if H <= lp_max_hidden:
        r = _time(lambda: ij.connectivity(net), max(1, repeats // 2))
        row["connectivity_lp_s"], row["lp_agrees"] = r["median_s"], bool(r["result"].success)
    r = _time(lambda: ij.component_of(net), repeats)
    row["component_of_s"], row["component_of_first_s"] = r["median_s"], r["first_s"]
    row["label_matches_connectivity"] = r["result"].frozen_edges == ij.connectivity(net, lp="none").frozen_edges
    if H <= singular_max_hidden:  # does H_G(c) contain a singular point (issue 30: hung at H = 30)
        t0 = time.perf_counter()
        sp = ij.singular_point(g, r["result"].c, time_limit=singular_time_limit)
        row["singular_point_s"] = time.perf_counter() - t0
        row["singular_point"] = ij.result_name(sp.result) if not sp.success else ("found" if sp.found else "none")
        row["singular_point_candidates"] = sp.candidates
    r = _time(lambda: ij.singular_subnetworks(net), repeats)
    row["singular_subnetworks_s"] = r["median_s"]
    n_groups = len(r["result"])
    r = _time(lambda: int(ij.jacobian_rank(net, method="graph")), repeats)
    row["jacobian_rank_graph_s"], row["jacobian_rank_graph_first_s"] = r["median_s"], r["first_s"]
    row["rank_graph"] = r["result"]
    row["rank_graph_identity_holds"] = r["result"] == H - n_groups
    if H <= svd_max_hidden:
        rank = jax.jit(lambda n: ij.jacobian_rank(n))
        r = _time(lambda: int(jax.block_until_ready(rank(net))), repeats)
        row["jacobian_rank_s"], row["jacobian_rank_first_s"] = r["median_s"], r["first_s"]
        row["rank_svd"] = r["result"]
        row["rank_identity_holds"] = r["result"] == H - n_groups
        row["rank_svd_equals_graph"] = r["result"] == row["rank_graph"]
    # the same weights with every edge of 5% of the hidden nodes and a third of the other
    # edges set exactly to 0 (so cut-off groups appear): the graph rank, checked against
    # the identity and against the SVD up to 300 hidden nodes
    rng = np.random.default_rng(H)
    theta = np.array(net.edge_weights())
    cut = set(rng.choice(len(g.hidden), size=max(1, H // 20), replace=False).tolist())
    hid = {v: i for i, v in enumerate(g.hidden)}
    touches = np.array([hid.get(u) in cut or hid.get(v) in cut for u, v in g.edges])
    theta[touches | (rng.random(len(theta)) < 1 / 3)] = 0.0
    zeroed = net.with_edge_weights(theta)
    r = _time(lambda: int(ij.jacobian_rank(zeroed, method="graph")), repeats)
    row["zeroed_jacobian_rank_graph_s"], row["zeroed_rank_graph"] = r["median_s"], r["result"]
    row["zeroed_n_groups"] = len(ij.singular_subnetworks(zeroed))
    row["zeroed_rank_graph_identity_holds"] = r["result"] == H - row["zeroed_n_groups"]
    if H <= min(300, svd_max_hidden):
        row["zeroed_rank_svd"] = int(ij.jacobian_rank(zeroed))
        row["zeroed_rank_svd_equals_graph"] = row["zeroed_rank_svd"] == r["result"]
    return row


def issue30_cases(n_graphs: int, time_limit: float) -> list[dict]:
    """Issue 30's hang: `connectivity --singular` on `random_dag(3, 30, 1, 0.2)` (the CLI's
    graph and Glorot init), graph seeds 0..n_graphs-1: `ij.singular_point` as the CLI calls it."""
    rows = []
    for s in range(n_graphs):
        g = ij.random_dag(3, 30, 1, 0.2, key=s)
        c = np.asarray(ij.conserved_quantities(ij.DAGNetwork(g, "relu", key=jr.key(0))), dtype=np.float64)
        t0 = time.perf_counter()
        sp = ij.singular_point(g, c, time_limit=time_limit)
        wall = time.perf_counter() - t0
        rows.append(
            {
                "graph_seed": s,
                "n_edges": len(g.edges),
                "seconds": wall,
                "candidates": sp.candidates,
                "verdict": ij.result_name(sp.result) if not sp.success else ("found" if sp.found else "none"),
                "residual_over_tol": (sp.residual / sp.tol) if sp.found else None,
            }
        )
    return rows


def batched(n: int, n_lp: int, seed: int = 0) -> dict:
    g = ij.example_dag()
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(jr.split(jr.key(seed), n))
    th = np.array(nets.edge_weights())
    rng = np.random.default_rng(seed)
    boost = rng.random(n) < 0.25
    for v in g.out_bottlenecks:
        (k,) = g.out_edges(v)
        th[boost, k] *= 3.0
    ij.component_of(g, th[:10])  # warm-up
    t0 = time.perf_counter()
    comp = ij.component_of(g, th)
    wall = time.perf_counter() - t0
    labels = comp.labels
    t0 = time.perf_counter()
    mask = ij.frozen_mask(g, comp.c)
    wall_mask = time.perf_counter() - t0
    sample = rng.choice(n, size=min(n_lp, n), replace=False)
    agree = 0
    t0 = time.perf_counter()
    for i in sample:
        r = ij.connectivity(g, comp.c[i], lp="all")
        agree += int(
            set(np.flatnonzero(comp.frozen[i])) == set(r.frozen_index)
            and set(r.frozen_index) == {g.edges.index(e) for e in r.lp_frozen_edges}
        )
    wall_lp = time.perf_counter() - t0
    values, counts = np.unique(labels, return_counts=True)
    top = sorted(zip(counts.tolist(), values.tolist()), reverse=True)[:8]
    return {
        "graph": repr(g),
        "n": n,
        "component_of_s": wall,
        "frozen_mask_s": wall_mask,
        "per_verdict_us": 1e6 * wall / n,
        "n_frozen_rows": int(comp.frozen.any(1).sum()),
        "mask_equals_component_of": bool(np.array_equal(mask, comp.frozen)),
        "n_labels": len(values),
        "top_labels": [{"label": lab, "count": c} for c, lab in top],
        "lp_sample": int(len(sample)),
        "lp_agree": agree,
        "lp_sample_s": wall_lp,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", default="10,30,100,300,1000", help="hidden-node counts, comma-separated")
    p.add_argument("--degree", type=float, default=10.0, help="about E / H for the random DAGs")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--lp-max-hidden", type=int, default=300, help="time connectivity with its LP up to this size")
    p.add_argument("--svd-max-hidden", type=int, default=1000, help="time jacobian_rank (SVD) up to this size")
    p.add_argument("--singular-max-hidden", type=int, default=1000, help="decide ij.singular_point up to this size")
    p.add_argument("--singular-time-limit", type=float, default=20.0, help="its MILP time limit (s)")
    p.add_argument("--n-issue30", type=int, default=5, help="graph seeds of issue 30's singular-point case")
    p.add_argument("--n-batch", type=int, default=100_000)
    p.add_argument("--n-lp", type=int, default=200, help="batched rows re-decided by the LP")
    p.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/topology_scale.json; "
        "pass benchmarks/results/topology_scale.json to replace the committed results)",
    )
    args = p.parse_args()
    sizes = [int(x) for x in args.hidden.split(",")]
    rows = []
    print(
        f"{'H':>5} {'E':>6} {'bneck':>5} {'frozen':>6} {'conn ms':>9} {'conn+LP ms':>10} {'comp ms':>9} "
        f"{'sing ms':>8} {'rank ms':>9} {'graph ms':>8} {'svd=graph=H-groups':>18} {'sing.point':>10} {'s':>6}"
    )
    for H in sizes:
        r = one_graph(
            H,
            args.degree,
            args.repeats,
            args.lp_max_hidden,
            args.svd_max_hidden,
            args.singular_max_hidden,
            args.singular_time_limit,
        )
        rows.append(r)
        f = lambda k: f"{1e3 * r[k]:.1f}" if k in r else "-"  # noqa: E731
        print(
            f"{H:>5} {r['n_edges']:>6} {r['n_out_bottlenecks'] + r['n_in_bottlenecks']:>5} {r['n_frozen']:>6} "
            f"{f('connectivity_s'):>9} {f('connectivity_lp_s'):>10} {f('component_of_s'):>9} "
            f"{f('singular_subnetworks_s'):>8} {f('jacobian_rank_s'):>9} {f('jacobian_rank_graph_s'):>8} "
            f"{str(r.get('rank_identity_holds', '-') and r.get('rank_svd_equals_graph', '-')):>18} "
            f"{r.get('singular_point', '-'):>10} {r.get('singular_point_s', float('nan')):>6.2f}",
            flush=True,
        )
    i30 = issue30_cases(args.n_issue30, args.singular_time_limit)
    for r in i30:
        print(
            f"issue 30 case: random_dag(3, 30, 1, 0.2, key={r['graph_seed']}), E = {r['n_edges']}: singular_point "
            f"{r['verdict']} in {r['seconds']:.2f} s ({r['candidates']} candidate groups checked by LP)"
        )
    b = batched(args.n_batch, args.n_lp)
    print(
        f"batched on the demo DAG: {b['n']} networks, component_of {b['component_of_s']:.2f} s "
        f"({b['per_verdict_us']:.1f} us per verdict), frozen_mask {b['frozen_mask_s']:.2f} s; "
        f"{b['n_frozen_rows']} rows with a frozen edge, {b['n_labels']} distinct labels; LP agrees on "
        f"{b['lp_agree']} of {b['lp_sample']} sampled rows ({b['lp_sample_s']:.1f} s)"
    )
    res = {
        "settings": vars(args),
        "graphs": rows,
        "issue30_singular": i30,
        "batched": b,
        "devices": [str(d) for d in jax.devices()],
    }
    out = write_json(output_path(args.out, "topology_scale.json"), res)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
