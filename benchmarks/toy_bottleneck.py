"""The toy experiment of the ReLU paper: an out-bottleneck whose output weight must
change sign.

Graph: x0, x1 -> k -> y, plus a skip x0 -> y. `k` has one outgoing edge (an
out-bottleneck) and no pure ancestors, so `k -> y` is frozen iff
`c_k = theta_{x0 k}^2 + theta_{x1 k}^2 - theta_{k y}^2 < 0`. The teacher has
`theta_{k y} = -1`, so the target `-relu(x0 + 0.5 x1) + 0.3 x0` needs a negative
`theta_{k y}`. Three kinds of initialization (Glorot, then `theta_{k y}` rescaled):

- `frozen-wrong`: `theta_{k y} > 0` and `c_k < 0` (ratio `theta_ky^2 / |w_k|^2` in
  U(1.2, 3)): the sign can never change, so the target cannot be learnt;
- `balanced-wrong`: `theta_{k y} > 0` but `c_k > 0` (ratio in U(0.1, 0.9)): free to change;
- `right-sign`: `theta_{k y} < 0` (ratio in U(0.1, 3)).

Each runs exact gradient flow (Tsit5, rtol = atol = 1e-6, time of the loss
`(1/2N) sum (f - y)^2`): by default (`--method kink`) the kink-aware flow
(`ij.kink_aware_flow`'s integrator, Tsit5 inside, one trajectory after the other in one
compiled `lax.map`), with `--method plain` plain gradient flow in one `jit(vmap)`;
`--method both` runs both and stores the plain run's summary under `plain`. Plain Tsit5
chatters where the field jumps (the kink of `k` is where the frozen-wrong runs stall), so
most frozen-wrong runs end at `max_steps`; `max_steps_hit` counts them. A run *learns* (beats the frozen bound) when its final loss is below
half the best loss reachable with `theta_{k y} >= 0` (the least-squares fit of the skip
alone; any non-negative `k` contribution only adds to the residual of a target whose
`k`-part is non-positive); `exact_fit` counts final losses below 1e-6.

`reachability` compares `ij.reachability(init, teacher)` (a positively rescaled copy of
the teacher in the init's component of `H_G(c0)`) with the outcomes and lists every
disagreement; on this graph (one hidden node, no twins) it is the t = 0 verdict, since
rescaling keeps signs. `natural_glorot` is the frozen-wrong rate of plain Glorot draws (no
rescaling), from one batched `ij.component_of`. Writes `benchmarks/results/toy_bottleneck.json`.
"""

from __future__ import annotations

import argparse
import time

import jax

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402

KINDS = ("frozen-wrong", "balanced-wrong", "right-sign")
RATIOS = {"frozen-wrong": (1.2, 3.0, 1.0), "balanced-wrong": (0.1, 0.9, 1.0), "right-sign": (0.1, 3.0, -1.0)}


def toy_graph() -> ij.DAG:
    return ij.DAG.from_edges([("x0", "k"), ("x1", "k"), ("k", "y"), ("x0", "y")], inputs=["x0", "x1"], outputs=["y"])


def toy_teacher() -> np.ndarray:
    """The teacher's edge weights: `-relu(x0 + 0.5 x1) + 0.3 x0`."""
    g = toy_graph()
    th = np.zeros(len(g.edges))
    th[g.edges.index(("x0", "k"))], th[g.edges.index(("x1", "k"))] = 1.0, 0.5
    th[g.edges.index(("k", "y"))], th[g.edges.index(("x0", "y"))] = -1.0, 0.3
    return th


def toy_data(n_samples: int = 64, seed: int = 5):
    g = toy_graph()
    th = toy_teacher()
    X = jr.normal(jr.key(seed), (n_samples, 2))
    Y = ij.DAGNetwork(g, edge_weights=th).forward(X)
    # best loss with theta_ky >= 0: least squares on the skip x0 -> y alone
    x0 = np.asarray(X[:, 0])
    y = np.asarray(Y[:, 0])
    a = x0 @ y / (x0 @ x0)
    return X, Y, float(np.mean((a * x0 - y) ** 2) / 2)


def toy_inits(n_per_kind: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Edge weights `(3 n, E)` (kinds in KINDS order) and the kind index of each row."""
    g = toy_graph()
    rng = np.random.default_rng(seed)
    keys = jr.split(jr.key(seed), 3 * n_per_kind)
    th = np.array(eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(keys).edge_weights())
    ky = g.edges.index(("k", "y"))
    win = [g.edges.index(("x0", "k")), g.edges.index(("x1", "k"))]
    kind = np.repeat(np.arange(3), n_per_kind)
    for i, name in enumerate(KINDS):
        lo, hi, sign = RATIOS[name]
        sl = kind == i
        ratio = rng.uniform(lo, hi, sl.sum())
        th[sl, ky] = sign * np.sqrt(ratio * np.sum(th[sl][:, win] ** 2, axis=1))
    return th, kind


def natural_frozen_wrong(n: int = 100_000, seed: int = 1) -> dict:
    """How often a plain Glorot draw (no rescaling) is frozen with the wrong sign
    (`theta_ky > 0` and `c_k < 0`): one batched `ij.component_of` over `n` draws."""
    g = toy_graph()
    nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(jr.split(jr.key(seed), n))
    comp = ij.component_of(nets)
    ky = g.edges.index(("k", "y"))
    wrong = comp.signs[:, ky] > 0
    p = float(wrong.mean())
    return {
        "n_draws": n,
        "seed": seed,
        "init": "glorot",
        "frozen": float(comp.frozen[:, ky].mean()),
        "frozen_wrong": p,
        "frozen_wrong_stderr": float(np.sqrt(p * (1 - p) / n)),
        "frozen_right": float((comp.signs[:, ky] < 0).mean()),
    }


def reachability_verdicts(th: np.ndarray) -> np.ndarray:
    """`ij.reachability(init, teacher)` for each initialization row: can a rescaled copy of
    the teacher lie in the init's component of `H_G(c0)`?"""
    g = toy_graph()
    teacher = ij.DAGNetwork(g, "relu", edge_weights=toy_teacher())
    return np.array([ij.reachability(ij.DAGNetwork(g, "relu", edge_weights=t), teacher).reachable for t in th])


def _disagreements(th, kind, reach, success, loss_final) -> list[dict]:
    g = toy_graph()
    ky = g.edges.index(("k", "y"))
    c = (th**2) @ g.incidence().T
    return [
        {
            "run": int(i),
            "kind": KINDS[kind[i]],
            "c_k": float(c[i, 0]),
            "theta_ky0": float(th[i, ky]),
            "reachable": bool(reach[i]),
            "learnt": bool(success[i]),
            "loss_final": float(loss_final[i]),
        }
        for i in np.flatnonzero(reach != success)
    ]


def run_toy(n_per_kind: int = 100, *, t1: float = 30.0, n_save: int = 25, seed: int = 0, method: str = "plain") -> dict:
    """The toy study; `method`: "plain" (gradient flow, one `jit(vmap)`) or "kink"
    (the kink-aware flow, one compiled `lax.map`)."""
    g = toy_graph()
    X, Y, L_nonneg = toy_data()
    th, kind = toy_inits(n_per_kind, seed)
    ky = g.edges.index(("k", "y"))
    verdict = np.array([ky in ij.connectivity(g, (t**2) @ g.incidence().T, lp="none").frozen_index for t in th])

    saveat = ij.SaveTimes(n_save=n_save, spacing="log")
    options = ij.SolverOptions(rtol=1e-6, atol=1e-6, max_steps=20_000)
    maxsteps = ij.RESULTS.max_steps_reached

    if method == "plain":

        @eqx.filter_jit
        def run(th):
            def one(t):
                f = ij.gradient_flow(ij.DAGNetwork(g, edge_weights=t), X, Y, t1, saveat=saveat, solver=options)
                return (
                    f.ts,
                    f.losses,
                    f.thetas[:, ky],
                    f.loss_final,
                    f.success,
                    f.drift_relative,
                    f.result == maxsteps,
                    jnp.zeros((), int),
                    f.stats["num_steps"],
                    jnp.zeros((), bool),
                )

            return jax.vmap(one)(th)
    elif method == "kink":
        from invariant_jax.kinks import make_kink_integrator

        net0 = ij.DAGNetwork(g, "relu", edge_weights=th[0])
        integ = make_kink_integrator(net0, X, Y, t1, options=options, saveat=saveat)

        @eqx.filter_jit
        def run(th):
            def one(t):
                kf = integ.flow(net0, t, integ.run(t), "mse")
                f = kf.flow
                n = f.ts.shape[0] - 1 if f.ts.shape[0] > n_save else f.ts.shape[0]  # saves (+ the final state)
                return (
                    f.ts[:n],
                    f.losses[:n],
                    f.thetas[:n, ky],
                    f.loss_final,
                    kf.success,
                    f.drift_relative,
                    f.result == maxsteps,
                    kf.num_events,
                    f.stats["num_steps"],
                    kf.result == ij.RESULTS.max_events_reached,
                )

            return jax.lax.map(one, th)
    else:
        raise ValueError(f"method must be 'plain' or 'kink'; got {method!r}.")

    t0 = time.perf_counter()
    ts, losses, sign_w, loss_final, ok, drift, hit, events, steps, exhausted = (
        np.asarray(a) for a in jax.block_until_ready(run(jnp.asarray(th)))
    )
    wall = time.perf_counter() - t0
    success = loss_final < 0.5 * L_nonneg
    predicted_fail = verdict & (th[:, ky] > 0)
    reach = reachability_verdicts(th)
    out = {
        "graph_edges": [list(e) for e in g.edges],
        "n_per_kind": n_per_kind,
        "t1": t1,
        "method": {
            "plain": "gradient flow, Tsit5, rtol = atol = 1e-6, max_steps 20,000",
            "kink": "kink-aware flow, Tsit5 inside, rtol = atol = 1e-6, max_steps 20,000 per segment",
        }[method],
        "time_convention": "gradient-flow time of L = (1/2N) sum (f - y)^2",
        "loss_nonneg_bound": L_nonneg,
        "wall_s_including_compile": wall,
        "ts": ij.log_times(0.0, t1, n_save).tolist(),
        "kinds": {},
        "verdict_accuracy": float(np.mean(predicted_fail == ~success)),
        "frozen_wrong_all_fail": bool(np.all(~success[predicted_fail])),
        "reachability": {
            "verdict": "ij.reachability(init, teacher): a positively rescaled copy of the teacher lies in the "
            "init's component of H_G(c0) (no twin neurons in this graph)",
            "accuracy": float(np.mean(reach == success)),
            "same_as_t0_verdict": bool(np.all(reach == ~predicted_fail)),
            "n_disagreements": int(np.sum(reach != success)),
            "disagreements": _disagreements(th, kind, reach, success, loss_final),
        },
        "max_drift_relative": float(np.nanmax(np.where(ok, drift, np.nan))),
    }
    for i, name in enumerate(KINDS):
        sl = kind == i
        out["kinds"][name] = {
            "n": int(sl.sum()),
            "frozen_at_t0": float(verdict[sl].mean()),
            "solver_success": float(ok[sl].mean()),
            "max_steps_hit": float(hit[sl].mean()),
            "max_events_hit": float(exhausted[sl].mean()),
            "steps_median": float(np.median(steps[sl])),
            "events_median": float(np.median(events[sl])),
            "learnt": float(success[sl].mean()),
            "exact_fit": float((loss_final[sl] < 1e-6).mean()),
            "final_loss_quantiles": np.quantile(loss_final[sl], [0.05, 0.25, 0.5, 0.75, 0.95]).tolist(),
            "frac_theta_ky_negative_over_time": np.nanmean(
                np.where(np.isfinite(sign_w[sl]), sign_w[sl] < 0, np.nan), axis=0
            ).tolist(),
            "frac_theta_ky_sign_changed": float(
                np.mean(np.any(np.isfinite(sign_w[sl]) & (np.sign(sign_w[sl]) != np.sign(sign_w[sl][:, :1])), axis=1))
            ),
            "final_losses": loss_final[sl].tolist(),
        }
    out["_arrays"] = {
        "ts": ts,
        "losses": losses,
        "theta_ky": sign_w,
        "kind": kind,
        "verdict": verdict,
        "success": success,
        "loss_final": loss_final,
    }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-per-kind", type=int, default=100)
    p.add_argument("--t1", type=float, default=30.0)
    p.add_argument(
        "--method",
        choices=["kink", "plain", "both"],
        default="both",
        help="kink-aware flow, plain gradient flow, or both (the top level is the kink-aware run)",
    )
    p.add_argument(
        "--n-natural", type=int, default=100_000, help="plain Glorot draws for the natural frozen-wrong rate"
    )
    p.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/toy_bottleneck.json, ignored by git; "
        "pass benchmarks/results/toy_bottleneck.json to replace the committed results)",
    )
    args = p.parse_args()
    res = run_toy(args.n_per_kind, t1=args.t1, method="plain" if args.method == "plain" else "kink")
    res.pop("_arrays")
    res["natural_glorot"] = natural_frozen_wrong(args.n_natural)
    if args.method == "both":
        plain = run_toy(args.n_per_kind, t1=args.t1, method="plain")
        plain.pop("_arrays")
        res["plain"] = {
            k: plain[k]
            for k in (
                "method",
                "wall_s_including_compile",
                "verdict_accuracy",
                "frozen_wrong_all_fail",
                "max_drift_relative",
            )
        }
        res["plain"]["kinds"] = {
            name: {k: v for k, v in r.items() if k != "final_losses"} for name, r in plain["kinds"].items()
        }
    print(
        f"toy bottleneck: {args.n_per_kind} inits per kind, t1 = {args.t1:g} "
        f"(best loss with theta_ky >= 0: {res['loss_nonneg_bound']:.4f}); {res['wall_s_including_compile']:.1f} s"
    )
    print(
        f"{'method':>6} {'kind':>15} {'frozen@0':>9} {'learnt':>7} {'fit<1e-6':>8} {'solver ok':>9} {'max_steps':>9} "
        f"{'median loss':>12} {'theta_ky<0 at end':>17} {'sign changed':>12}"
    )
    for method, rr in (("kink" if args.method != "plain" else "plain", res), ("plain", res.get("plain"))):
        for name, r in (rr or {"kinds": {}})["kinds"].items():
            print(
                f"{method:>6} {name:>15} {r['frozen_at_t0']:>9.2f} {r['learnt']:>7.2f} {r['exact_fit']:>8.2f} "
                f"{r['solver_success']:>9.2f} {r['max_steps_hit']:>9.2f} "
                f"{r['final_loss_quantiles'][2]:>12.3e} {r['frac_theta_ky_negative_over_time'][-1]:>17.2f} "
                f"{r['frac_theta_ky_sign_changed']:>12.2f}"
            )
    print(
        f"verdict at t=0 (frozen with wrong sign => fails) accuracy: {res['verdict_accuracy']:.3f}; "
        f"every frozen-wrong init failed: {res['frozen_wrong_all_fail']}"
    )
    rr = res["reachability"]
    print(
        f"reachability verdict (rescaled teacher in the init's component) accuracy: {rr['accuracy']:.3f} "
        f"({rr['n_disagreements']} disagreements; identical to the t=0 verdict: {rr['same_as_t0_verdict']})"
    )
    for d in rr["disagreements"]:
        print(
            f"  run {d['run']:>3} {d['kind']:>15} c_k = {d['c_k']:+.3f} theta_ky(0) = {d['theta_ky0']:+.3f} "
            f"reachable = {d['reachable']} learnt = {d['learnt']} final loss = {d['loss_final']:.4f}"
        )
    nat = res["natural_glorot"]
    print(
        f"plain Glorot draws ({nat['n_draws']}): frozen {nat['frozen']:.3f}, frozen with the wrong sign "
        f"(theta_ky > 0, c_k < 0) {nat['frozen_wrong']:.4f} +- {nat['frozen_wrong_stderr']:.4f}"
    )
    out = write_json(output_path(args.out, "toy_bottleneck.json"), res)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
