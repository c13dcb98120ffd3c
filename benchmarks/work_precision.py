"""Work-precision of gradient-flow solvers on ReLU (with crossings and a sliding mode)
and softplus networks, and Kvaerno5 (+ exact Hessian) against Tsit5 on a stiff channel.

For each tolerance (rtol = atol) and method: error of theta(t1) against a tight
reference, vector-field evaluations, wall time, and relative drift of c = B~ theta^2 at
t1. Evaluations are counted by `invariant_jax.solvers.count_evaluations`: one per
gradient evaluation and one per tangent direction of a forward-mode Jacobian (so an
implicit solver's Jacobian of an E-dimensional field costs E). Every method runs with
that counting hook, so wall times include the same per-evaluation callback overhead.

Workload: 5-20-1 ReLU MLP (no bias), 20 teacher-student points, t1 = 1. Tsit5 at 1e-8
is run on `--inits` initializations; the slowest decile (by steps) and the median one
get the full work-precision sweep. Softplus: the same graph, one init.

Reference (ReLU): the kink-aware integrator with Tsit5 inside at rtol = atol = 1e-12.
It is checked independently against the smooth limit: the gradient flow of the same
net with softplus(beta z) / beta (Kvaerno5, 1e-10) for beta = 1e3, 1e4, 1e5, whose
distance to the reference must fall like 1/beta (recorded under `references`). A
brute-force Tsit5 at 1e-13 is also run and its distance recorded: on sliding modes it
chatters, runs out of steps and is *not* a valid reference.

    python benchmarks/work_precision.py [--inits 20] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax

from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax import solvers  # noqa: E402
from invariant_jax.kinks import kink_aware_flow  # noqa: E402

COUNT = [0]
solvers._EVAL_HOOK = lambda n: COUNT.__setitem__(0, COUNT[0] + int(n))

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results")


def field_for(net, X, Y, count=True):
    L = ij.edge_loss_fn(net, X, Y)

    def f(t, theta, args):
        if count:
            theta = solvers.count_evaluations(theta)
        return -jax.grad(L)(theta)

    return f


def make_runner(name, field, t1, max_steps):
    solver = ij.get_solver(name)

    @eqx.filter_jit
    def run(theta0, tol):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            solver,
            0.0,
            t1,
            None,
            theta0,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=max_steps,
            throw=False,
        )
        return sol.ys[-1], sol.stats["num_steps"], ij.result_code(sol.result)

    return run


def timed(fn):
    COUNT[0] = 0
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, COUNT[0], time.perf_counter() - t


def drift_rel(net, theta):
    c0 = ij.conserved_quantities(net)
    c1 = ij.conserved_quantities(net.with_edge_weights(theta))
    return float(jnp.max(jnp.abs(c1 - c0)) / ij.conservation_scale(net))


def sweep(label, net, X, Y, t1, methods, kink_methods, tols, ref, max_steps):
    theta0 = net.edge_weights()
    rows = []
    field = field_for(net, X, Y)
    for m in methods:
        # Plain implicit solvers on ReLU reject step after step at the kinks (the stage
        # equation is discontinuous there): a smaller budget records that failure sooner.
        implicit_on_kinks = net.is_positively_homogeneous and m in ("kvaerno5", "gauss2", "gauss4", "gauss6")
        budget = 500 if implicit_on_kinks else max_steps
        run = make_runner(m, field, t1, budget)
        run(theta0, jnp.asarray(tols[0]))  # compile (counted evaluations discarded)
        for tol in tols:
            (th, steps, res), nfe, wall = timed(lambda: run(theta0, jnp.asarray(tol)))
            ok = int(res) == 0
            rows.append(
                dict(
                    case=label,
                    method=m,
                    tol=tol,
                    ok=ok,
                    steps=int(steps),
                    max_steps=budget,
                    nfe=nfe,
                    wall_s=wall,
                    error=float(jnp.max(jnp.abs(th - ref))) if ok else None,
                    drift_rel=drift_rel(net, th) if ok else None,
                )
            )
    for m in kink_methods:
        inner = m.split("+")[1]
        kink_aware_flow(
            net,
            X,
            Y,
            t1,
            solver=ij.SolverOptions(inner, rtol=tols[0], atol=tols[0], max_steps=max_steps),
            saveat=ij.SaveTimes(n_save=2),
        )
        for tol in tols:
            kf, nfe, wall = timed(
                lambda: kink_aware_flow(
                    net,
                    X,
                    Y,
                    t1,
                    solver=ij.SolverOptions(inner, rtol=tol, atol=tol, max_steps=max_steps),
                    saveat=ij.SaveTimes(n_save=2),
                )
            )
            ok = bool(kf.success)
            th = kf.flow.theta_final
            rows.append(
                dict(
                    case=label,
                    method=m,
                    tol=tol,
                    ok=ok,
                    steps=int(kf.flow.num_steps),
                    nfe=nfe,
                    wall_s=wall,
                    error=float(jnp.max(jnp.abs(th - ref))) if ok else None,
                    drift_rel=float(kf.flow.drift_relative),
                    events=int(kf.num_events),
                    sliding_entries=int(kf.num_sliding_entries),
                    ambiguous=int(kf.num_ambiguous),
                    max_sliding_pairs=int(kf.max_sliding_pairs),
                )
            )
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inits", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="fewer tolerances and methods")
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/work_precision.json, ignored by git; "
        "the PNG goes next to it; "
        "pass benchmarks/results/work_precision.json to replace the committed results)",
    )
    args = ap.parse_args()
    t1 = 1.0
    tols = [1e-4, 1e-6, 1e-8, 1e-10] if args.quick else [1e-4, 1e-6, 1e-8, 1e-10, 1e-12]
    relu_methods = ["tsit5", "dopri8", "kvaerno5", "gauss4"]  # plain Gauss on ReLU: steps collapse at kinks
    smooth_methods = ["tsit5", "dopri8", "kvaerno5", "gauss2", "gauss4", "gauss6"]
    kink_methods = ["kink+tsit5", "kink+gauss4"]
    if args.quick:
        relu_methods = ["tsit5", "dopri8"]
        smooth_methods = ["tsit5", "dopri8", "kvaerno5", "gauss4"]
    max_steps = 60_000  # Tsit5 needs 41,468 steps at 1e-8 on the slowest init
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(1234))

    # 1. Tsit5 at 1e-8 over the inits: find the slowest decile.
    nets = [ij.DAGNetwork(g, "relu", key=jax.random.PRNGKey(s)) for s in range(args.inits)]
    run = make_runner("tsit5", field_for(nets[0], X, Y, count=False), t1, 100_000)
    screen = []
    for net in tqdm(nets, desc="screen (tsit5 1e-8)"):
        _, steps, res = run(net.edge_weights(), jnp.asarray(1e-8))
        screen.append(int(steps))
    order = np.argsort(screen)[::-1]
    n_slow = max(1, args.inits // 10)
    slow = [int(i) for i in order[:n_slow]]
    median = int(order[len(order) // 2])
    print("tsit5 steps at 1e-8 per init:", screen)
    print("slowest decile:", slow, "median:", median)

    results = dict(
        workload="5-20-1 relu mlp, 20 teacher points, t1=1",
        tolerances=tols,
        screen_steps=screen,
        slow_inits=slow,
        median_init=median,
        rows=[],
        references={},
    )
    cases = [(f"relu_init{i}", nets[i]) for i in slow] + ([] if args.quick else [(f"relu_init{median}", nets[median])])
    cases.append(("softplus_init0", ij.DAGNetwork(g, "softplus", key=jax.random.PRNGKey(0))))
    for label, net in tqdm(cases, desc="cases"):
        if net.is_positively_homogeneous:
            rf = kink_aware_flow(
                net,
                X,
                Y,
                t1,
                solver=ij.SolverOptions("tsit5", rtol=1e-12, atol=1e-12, max_steps=max_steps),
                saveat=ij.SaveTimes(n_save=2),
            )
            ref = rf.flow.theta_final
            bf = ij.gradient_flow(
                net,
                X,
                Y,
                t1,
                saveat=ij.SaveTimes(n_save=2),
                solver=ij.SolverOptions(rtol=1e-13, atol=1e-13, max_steps=100_000),
            )
            results["references"][label] = dict(
                kind="kink+tsit5 at 1e-12",
                events=int(rf.num_events),
                sliding_entries=int(rf.num_sliding_entries),
                max_sliding_pairs=int(rf.max_sliding_pairs),
                ambiguous=int(rf.num_ambiguous),
                sliding_time=float(rf.sliding_time),
                ok=bool(rf.success),
                smooth_limit_distance=smooth_limit(net, X, Y, t1, ref),
                brute_force_ok=bool(bf.success),
                brute_force_steps=int(bf.num_steps),
                brute_force_distance=float(jnp.max(jnp.abs(bf.theta_final - ref))),
            )
            km, methods = kink_methods, relu_methods
        else:
            ref = ij.gradient_flow(
                net, X, Y, t1, solver="dopri8", rtol=1e-13, atol=1e-13, saveat=ij.SaveTimes(n_save=2)
            ).theta_final
            results["references"][label] = dict(kind="dopri8 at 1e-13")
            km, methods = [], smooth_methods
        results["rows"] += sweep(label, net, X, Y, t1, methods, km, tols, ref, max_steps)

    results["stiff_channel"] = stiff_channel()
    results["goal"] = goal(results)
    report(results)
    out = write_json(output_path(args.out, "work_precision.json"), results)
    plot(results, out.with_suffix(".png"))


def goal(results):
    """Evaluations to reach Tsit5's accuracy at each tolerance, kink-aware vs Tsit5, on
    the slowest-decile inits."""
    out = []
    rows = results["rows"]
    for i in results["slow_inits"]:
        label = f"relu_init{i}"
        ts = [r for r in rows if r["case"] == label and r["method"] == "tsit5" and r["ok"]]
        for km in ("kink+tsit5", "kink+gauss4"):
            ks = [r for r in rows if r["case"] == label and r["method"] == km and r["ok"]]
            for r in ts:
                good = [k["nfe"] for k in ks if k["error"] is not None and k["error"] <= r["error"]]
                out.append(
                    dict(
                        case=label,
                        method=km,
                        tsit5_tol=r["tol"],
                        tsit5_error=r["error"],
                        tsit5_nfe=r["nfe"],
                        kink_nfe=min(good) if good else None,
                        ratio=(r["nfe"] / min(good)) if good else None,
                    )
                )
    return out


def smooth_limit(net, X, Y, t1, ref, betas=(1e3, 1e4, 1e5)):
    """max |theta_beta(t1) - ref| for the softplus(beta z)/beta net (Kvaerno5 at 1e-10):
    an independent check of the ReLU reference, O(1/beta) if it is right."""
    out = {}
    for beta in betas:
        sm = ij.DAGNetwork(net.graph, ij.smoothed_relu(beta), edge_weights=net.edge_weights())
        fl = ij.gradient_flow(
            sm,
            X,
            Y,
            t1,
            saveat=ij.SaveTimes(n_save=2),
            solver=ij.SolverOptions("kvaerno5", rtol=1e-10, atol=1e-10, max_steps=200_000),
        )
        out[f"{beta:g}"] = float(jnp.max(jnp.abs(fl.theta_final - ref))) if bool(fl.success) else None
    return out


def stiff_channel():
    """Two softplus neurons with nearly equal input weights and large opposite output
    weights (a flat channel): stiff. Tsit5 vs Kvaerno5 vs Kvaerno5 with the exact
    Hessian, rtol = atol = 1e-6, t1 = 50."""
    g = ij.mlp([2, 2, 1], bias=False)
    # edges: x0->h0, x0->h1, x1->h0, x1->h1, h0->y, h1->y (canonical order)
    theta = jnp.asarray([1.0, 1.0 + 1e-2, -0.5, -0.5 - 1e-2, 30.0, -30.0])
    net = ij.DAGNetwork(g, "softplus", edge_weights=theta)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(7), activation="softplus")
    H = jax.hessian(ij.edge_loss_fn(net, X, Y))(theta)
    ev = np.linalg.eigvalsh(np.asarray(H))
    rows = []
    field = field_for(net, X, Y)
    for m in ("tsit5", "kvaerno5", "kvaerno5_hessian"):
        run = make_runner(m, field, 50.0, 200_000)
        run(theta, jnp.asarray(1e-6))
        (th, steps, res), nfe, wall = timed(lambda: run(theta, jnp.asarray(1e-6)))
        rows.append(dict(method=m, steps=int(steps), nfe=nfe, wall_s=wall, ok=int(res) == 0))
    return dict(hessian_eigs=[float(ev.min()), float(ev.max())], rows=rows)


def report(results):
    print(
        f"\n{'case':<16} {'method':<12} {'tol':>7} {'ok':>3} {'steps':>7} {'nfe':>8} {'wall s':>8} {'error':>9} {'drift':>9}"
    )
    for r in results["rows"]:
        e = "-" if r["error"] is None else f"{r['error']:.1e}"
        d = "-" if r["drift_rel"] is None else f"{r['drift_rel']:.1e}"
        print(
            f"{r['case']:<16} {r['method']:<12} {r['tol']:>7.0e} {int(r['ok']):>3} {r['steps']:>7} {r['nfe']:>8} "
            f"{r['wall_s']:>8.3f} {e:>9} {d:>9}"
        )
    print("\nreferences:", json.dumps(results["references"], indent=1))
    print("\nGoal (slowest decile): evaluations to reach Tsit5's error")
    for g in results["goal"]:
        ratio = "-" if g["ratio"] is None else f"{g['ratio']:.1f}x"
        print(
            f"  {g['case']:<14} {g['method']:<12} tsit5 tol {g['tsit5_tol']:.0e}: tsit5 {g['tsit5_nfe']} vs {g['kink_nfe']} -> {ratio}"
        )
    sc = results["stiff_channel"]
    print("\nStiff channel (softplus, Hessian eigenvalues", sc["hessian_eigs"], ")")
    for r in sc["rows"]:
        print(f"  {r['method']:<18} steps {r['steps']:>7} nfe {r['nfe']:>8} wall {r['wall_s']:.3f}s ok {r['ok']}")


def plot(results, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in results["rows"]})
    methods = sorted({r["method"] for r in results["rows"]})
    color = {m: f"C{i}" for i, m in enumerate(methods)}  # one colour per method in every panel
    fig, axes = plt.subplots(2, len(cases), figsize=(4.2 * len(cases), 7), squeeze=False)
    for j, case in enumerate(cases):
        failed = []
        for m in methods:
            rows = [r for r in results["rows"] if r["case"] == case and r["method"] == m]
            rs = [r for r in rows if r["ok"] and r["error"]]
            if rows and not rs:
                failed.append(m)
            if not rs:
                continue
            err = [max(r["error"], 1e-16) for r in rs]
            axes[0, j].loglog([r["nfe"] for r in rs], err, "o-", label=m, ms=3, color=color[m])
            axes[1, j].loglog([max(r["wall_s"], 1e-5) for r in rs], err, "o-", label=m, ms=3, color=color[m])
        axes[0, j].set_title(case + (f"\n(failed at every tol: {', '.join(failed)})" if failed else ""), fontsize=9)
        axes[0, j].set_xlabel("vector-field evaluations")
        axes[1, j].set_xlabel("wall time [s]")
        axes[0, j].set_ylabel("error of theta(t1)")
        axes[1, j].set_ylabel("error of theta(t1)")
        axes[0, j].legend(fontsize=7)  # methods differ per case
    fig.tight_layout()
    save_figure(fig, png, dpi=110)


if __name__ == "__main__":
    main()
