"""Pruning by singularities beyond one hidden layer: a deep MLP and a random DAG.

Breast Cancer (standardised, stratified 75/25 split, seed 0), BCE on logits, ReLU, bias
edges from a constant node, full-batch gradient descent (lr 0.2), 5 initializations
vmapped in one loop. Two graphs where the rows of J_G overlap (hidden-to-hidden edges),
so the nuclear norm of J_G is no longer a group lasso:

- `mlp`: 30-20-20-1 (40 hidden nodes, 1061 edges);
- `dag`: `ij.random_dag(30, 40, 1, 0.15, 0, bias=True)`: 40 hidden nodes in a random
  order, each forward pair an edge with probability 0.15 (skip connections from inputs to
  deep nodes, between hidden nodes of any depth, and to the output), 364 edges.

Arms: none; L2 (gradient, weight decay); L1 (proximal: soft-thresholding); group lasso per
neuron (fan-in groups, proximal); nuclear (the working-set forward-backward step of
`ij.fit` with the nuclear norm and `ij.TrainOptions(proximal=True)`, see docs/pruning.md); and, per seed,
the unregularized and L2 nets magnitude-pruned to the size the nuclear arm reached. A
neuron is cut off when every edge joining it to the rest is exactly 0 (tol = 0). One more
two nuclear runs use minibatches of 64, with SGD (lr 0.05) and with Adam (lr 0.01; the
proximal step in Adam's metric), to show the step works there too.

Per arm: rank of J_G (at tol 0 from the cut-off groups, and numerically from the SVD, as
`ij.jacobian_rank`), cut-off neurons, neurons `ij.prune` removes at tol 0 and why, test
accuracy before and after pruning, max |f_pruned - f| on all 569 samples. For the nuclear
arm, on the final weights: `singular_point(g, c)` finds a singular point, `jacobian_rank`
= H - (cut-off groups), `sum_{v in W} c_v` per group (0 up to round-off at the final
weights; against c(0) the training's drift), and `connectivity(g, c)` freezes no boundary
edge of a cut-off group. Then ms/epoch per arm (compiled first, best of 3), as ratios to
the unregularized loop.

Run: `python benchmarks/pruning_dag.py [--small] [--graphs mlp dag]`; writes
`benchmarks/results/pruning_dag.json` (the two graphs may run as two processes; each keeps
the other's results in the file).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
from pathlib import Path

import jax

from _output import command, output_path, provenance  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402

ARMS = {  # name: (regularizer, strength, proximal, optimizer, learning rate, batch size)
    "none": (None, 0.0, False, "sgd", 0.2, None),
    "l2": ("l2", 1e-3, False, "sgd", 0.2, None),
    "l1": ("l1", 3e-3, True, "sgd", 0.2, None),
    "group_lasso": ("group_lasso", 1e-2, True, "sgd", 0.2, None),
    "nuclear": ("nuclear", 1e-2, True, "sgd", 0.2, None),
    "nuclear_sgd_mb64": ("nuclear", 1e-2, True, "sgd", 0.05, 64),
    "nuclear_adam_mb64": ("nuclear", 1e-2, True, "adam", 1e-2, 64),
}
GRAPHS = {
    "mlp": "ij.mlp([30, 20, 20, 1], bias=True)",
    "dag": "ij.random_dag(30, 40, 1, 0.15, 0, bias=True)",
}


def make_graph(name):
    return ij.mlp([30, 20, 20, 1], bias=True) if name == "mlp" else ij.random_dag(30, 40, 1, 0.15, 0, bias=True)


def _acc(net, X, Y) -> float:
    return float(jnp.mean((net.forward(X) > 0) == (Y > 0.5)))


def _one(nets, i):
    return jax.tree.map(lambda a: a[i], nets)


def train(nets, d, arm, *, epochs, log_every):
    reg, lam, prox, opt, lr, bs = ARMS[arm]
    return ij.fit(
        nets,
        d.X_train,
        d.Y_train,
        X_test=d.X_test,
        Y_test=d.Y_test,
        loss=ij.Objective("bce", regularizer=reg, strength=lam),
        options=ij.TrainOptions(
            optimizer=opt, learning_rate=lr, epochs=epochs, log_every=log_every, batch_size=bs, proximal=prox, tol=0.0
        ),
        key=jr.key(1),
    )


def singular_checks(net, c0) -> dict:
    """Item 3 of the issue on one trained network."""
    g = net.graph
    groups = ij.singular_subnetworks(net, 0.0)
    c = np.asarray(ij.conserved_quantities(net))
    hidx = {v: k for k, v in enumerate(g.hidden)}
    scale = float(ij.conservation_scale(net))
    sums = [float(sum(c[hidx[v]] for v in W)) for W in groups]
    sums0 = [float(sum(c0[hidx[v]] for v in W)) for W in groups]
    sp = ij.singular_point(g, c, tol=1e-9 * max(scale, 1e-300) * len(g.hidden))
    conn = ij.connectivity(net)
    boundary = {k for W in groups for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)}
    return {
        "n_groups": len(groups),
        "group_sizes": sorted(len(W) for W in groups),
        "jacobian_rank": int(ij.jacobian_rank(net)),
        "H_minus_groups": len(g.hidden) - len(groups),
        "max_abs_group_sum_c_final": max((abs(s) for s in sums), default=0.0),
        "max_abs_group_sum_c0": max((abs(s) for s in sums0), default=0.0),
        "drift_c": float(np.max(np.abs(c - c0))),
        "conservation_scale": scale,
        "singular_point_found": bool(sp.found),
        "singular_point_group_size": len(sp.group) if sp.found else 0,
        "frozen_boundary_edges": len(boundary & set(conn.frozen_index)),
        "connectivity_result": ij.result_name(
            conn.result
        ),  # "lp_disagrees": the LP and the combinatorial verdict differ
        "connectivity_message": conn.message,
        "n_frozen_edges": len(conn.frozen_index),
    }


def run_graph(name, d, seeds, epochs, log_every, progress):
    X_all = np.concatenate([d.X_train, d.X_test])
    g = make_graph(name)
    H = len(g.hidden)
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(jr.split(jr.key(0), seeds))
    c0 = np.asarray(ij.conserved_quantities(nets))
    trained = {}
    for arm in ARMS:
        t = time.perf_counter()
        trained[arm] = train(nets, d, arm, epochs=epochs, log_every=log_every)
        progress(f"{name}/{arm}: {time.perf_counter() - t:.1f} s")
    rows = []
    for arm, res in trained.items():
        per = []
        for i in range(seeds):
            net = _one(res.network, i)
            pruned, rep = ij.prune(net, 0.0, X=X_all)
            k = len(pruned.graph.hidden)
            row = {
                "seed": i,
                "rank": int(res.log.rank[i, -1]),
                "jacobian_rank": int(ij.jacobian_rank(net)),
                "cut_off": int(res.log.n_cut_off[i, -1]),
                "removed": H - k,
                "removed_reasons": rep.counts(),
                "edges_nonzero": int(np.sum(np.asarray(net.edge_weights()) != 0)),
                "loss": float(res.log.loss[i, -1]),
                "test_acc": _acc(net, d.X_test, d.Y_test),
                "test_acc_pruned": _acc(pruned, d.X_test, d.Y_test),
                "max_abs_change": rep.max_abs_change,
                "finite": bool(res.success[i]),  # the weights stayed finite (not training_diverged)
            }
            if arm == "nuclear":
                mag_none, _ = ij.magnitude_prune(_one(trained["none"].network, i), k)
                mag_l2, _ = ij.magnitude_prune(_one(trained["l2"].network, i), k)
                row["test_acc_none_magnitude_pruned"] = _acc(mag_none, d.X_test, d.Y_test)
                row["test_acc_l2_magnitude_pruned"] = _acc(mag_l2, d.X_test, d.Y_test)
            if arm.startswith("nuclear"):
                row["singular"] = singular_checks(net, c0[i])
            per.append(row)
        keys = [k for k, v in per[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "seed"]
        agg = {k: (float(np.mean([p[k] for p in per])), float(np.std([p[k] for p in per]))) for k in keys}
        rows.append(
            {
                "arm": arm,
                "settings": dict(
                    zip(("regularizer", "strength", "proximal", "optimizer", "lr", "batch_size"), ARMS[arm])
                ),
                "mean_std": agg,
                "per_seed": per,
                "curve_n_cut_off_mean": np.asarray(res.log.n_cut_off).mean(0).tolist(),
                "curve_epochs": np.asarray(res.log.epochs[0]).tolist(),
            }
        )
    return g, nets, rows


def timing(nets, d, t_epochs=100, repeats=5):
    """ms/epoch per full-batch arm, compiled first, arms interleaved, best of `repeats`:
    wall time, and CPU time of this process (`time.process_time`, all its threads), which
    other jobs on a shared machine disturb less."""
    arms = [a for a in ARMS if ARMS[a][5] is None]
    for a in arms:
        train(nets, d, a, epochs=t_epochs, log_every=t_epochs)  # compile
    best = {a: np.inf for a in arms}
    best_cpu = {a: np.inf for a in arms}
    for _ in range(repeats):
        for a in arms:
            t, c = time.perf_counter(), time.process_time()
            r = train(nets, d, a, epochs=t_epochs, log_every=t_epochs)
            jax.block_until_ready(r.network.weights)
            best[a] = min(best[a], time.perf_counter() - t)
            best_cpu[a] = min(best_cpu[a], time.process_time() - c)
    ms = {a: best[a] / t_epochs * 1e3 for a in arms}
    cpu = {a: best_cpu[a] / t_epochs * 1e3 for a in arms}
    return ms, {a: ms[a] / ms["none"] for a in arms}, cpu, {a: cpu[a] / cpu["none"] for a in arms}


def _lock_path(out) -> Path:
    """A lock file outside the repository, one per output path."""
    import hashlib
    import tempfile

    return (
        Path(tempfile.gettempdir())
        / f"pruning_dag_{hashlib.sha1(str(Path(out).resolve()).encode()).hexdigest()[:12]}.lock"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="2 seeds, 400 epochs (a quick check)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument(
        "--timing-only",
        action="store_true",
        help="only re-measure ms/epoch, replacing the timing fields of --out for --graphs",
    )
    ap.add_argument(
        "--graphs",
        nargs="+",
        default=list(GRAPHS),
        choices=list(GRAPHS),
        help="which graphs to run; results for other graphs already in --out are kept",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/pruning_dag.json, ignored "
        "by git; pass benchmarks/results/pruning_dag.json to replace the committed results)",
    )
    args = ap.parse_args(argv)
    args.out = str(output_path(args.out, "pruning_dag.json"))
    seeds, epochs = (2, 400) if args.small else (args.seeds, args.epochs)
    log_every = epochs // 20
    d = ij.breast_cancer()
    t0 = time.perf_counter()
    out = {
        "command": command() if argv is None else " ".join(["python benchmarks/pruning_dag.py", *argv]),
        "provenance": provenance(),
        "setup": {
            "data": "sklearn breast_cancer, standardised, stratified 75/25 split seed 0",
            "activation": "relu, bias edges from a constant node",
            "loss": "BCE on logits",
            "epochs": epochs,
            "seeds": seeds,
            "cut_off_tol": 0.0,
            "graphs": GRAPHS,
            "jax_backend": jax.default_backend(),
            "note": "timings measured on a shared 2-core machine (other jobs running)",
        },
        "graphs": {},
    }
    if args.timing_only:
        old = json.loads(Path(args.out).read_text())
        for name in args.graphs:
            g = make_graph(name)
            nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(jr.split(jr.key(0), seeds))
            ms, ratio, cpu, cpu_ratio = timing(nets, d)
            old["graphs"][name].update(
                timing_ms_per_epoch=ms,
                timing_ratio_to_none=ratio,
                timing_cpu_ms_per_epoch=cpu,
                timing_cpu_ratio_to_none=cpu_ratio,
                timing_command=out["command"],
            )
            print(
                name,
                "wall ms/epoch",
                {a: round(v, 2) for a, v in ms.items()},
                "ratio",
                {a: round(v, 2) for a, v in ratio.items()},
            )
            print(
                name,
                "cpu ms/epoch",
                {a: round(v, 2) for a, v in cpu.items()},
                "ratio",
                {a: round(v, 2) for a, v in cpu_ratio.items()},
                flush=True,
            )
        with open(_lock_path(args.out), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cur = json.loads(Path(args.out).read_text())
            cur["graphs"].update({k: old["graphs"][k] for k in args.graphs})
            tmp = Path(args.out).with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cur, indent=1))
            tmp.replace(args.out)
        return
    for name in args.graphs:
        g, nets, rows = run_graph(name, d, seeds, epochs, log_every, lambda m: print(m, flush=True))
        ms, ratio, cpu, cpu_ratio = timing(nets, d)
        H = len(g.hidden)
        out["graphs"][name] = {
            "command": out["command"],
            "wall_s": time.perf_counter() - t0,
            "n_hidden": H,
            "n_edges": len(g.edges),
            "rows": rows,
            "timing_ms_per_epoch": ms,
            "timing_ratio_to_none": ratio,
            "timing_cpu_ms_per_epoch": cpu,
            "timing_cpu_ratio_to_none": cpu_ratio,
        }
        print(f"\n{name}: {GRAPHS[name]}  H={H}, E={len(g.edges)}, {seeds} seeds, {epochs} epochs, cut-off tol 0")
        head = (
            f"{'arm':>18} {'rank J':>7} {'svd rank':>8} {'cut/' + str(H):>7} {'pruned':>7} {'test acc':>9} "
            f"{'after':>7} {'max|df|':>8} {'ms/ep':>6} {'x none':>6}"
        )
        print(head)
        print("-" * len(head))
        for r in rows:
            m = r["mean_std"]
            a = r["arm"]
            print(
                f"{a:>18} {m['rank'][0]:>7.1f} {m['jacobian_rank'][0]:>8.1f} {m['cut_off'][0]:>7.1f} "
                f"{m['removed'][0]:>7.1f} {m['test_acc'][0]:>9.4f} {m['test_acc_pruned'][0]:>7.4f} "
                f"{m['max_abs_change'][0]:>8.1e} {ms.get(a, float('nan')):>6.2f} {ratio.get(a, float('nan')):>6.2f}"
            )
        nuc = next(r for r in rows if r["arm"] == "nuclear")["mean_std"]
        print(
            f"magnitude pruning to the nuclear arm's size: none nets {nuc['test_acc_none_magnitude_pruned'][0]:.4f}, "
            f"L2 nets {nuc['test_acc_l2_magnitude_pruned'][0]:.4f} (nuclear after pruning "
            f"{nuc['test_acc_pruned'][0]:.4f})"
        )
        for r in rows:
            if r["arm"].startswith("nuclear"):
                s = [p["singular"] for p in r["per_seed"]]
                print(
                    f"{r['arm']}: singular_point found {sum(x['singular_point_found'] for x in s)}/{seeds}; "
                    f"jacobian_rank == H - groups {sum(x['jacobian_rank'] == x['H_minus_groups'] for x in s)}/{seeds}; "
                    f"max |sum_W c(final)| {max(x['max_abs_group_sum_c_final'] for x in s):.1e}, "
                    f"max |sum_W c(0)| {max(x['max_abs_group_sum_c0'] for x in s):.2f} (drift of c up to "
                    f"{max(x['drift_c'] for x in s):.2f}); frozen boundary edges "
                    f"{sum(x['frozen_boundary_edges'] for x in s)}, connectivity LP disagreements "
                    f"{sum(x['connectivity_result'] != 'successful' for x in s)}"
                )
    out["wall_s"] = time.perf_counter() - t0
    out["provenance"] = provenance()  # with the end time
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(args.out), "w") as lock:  # two runs (--graphs) may share --out
        fcntl.flock(lock, fcntl.LOCK_EX)
        if Path(args.out).exists():
            old = json.loads(Path(args.out).read_text())
            out["graphs"] = {
                **{k: v for k, v in old.get("graphs", {}).items() if k not in out["graphs"]},
                **out["graphs"],
            }
        tmp = Path(args.out).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(args.out)
    print(f"wrote {args.out} ({out['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
