"""Sweep throughput and distance to the bare arithmetic, for plain and kink-aware sweeps.

Workloads (ReLU, float64, 20 teacher points, t1 = 1, rtol = atol = 1e-8, Tsit5):

- `heavy`: 5-20-1 MLP without bias, teacher key `PRNGKey(3)`, inits `PRNGKey(i)`: the
  median plain trajectory takes ~2,500 Tsit5 steps (trajectories slide along kinks, where
  Tsit5 chatters). Chosen by a scan of teacher keys 0-3, 7, 1234 (the `kink_sweep.py`
  workload, key 1234, has median ~220 and a heavy tail);
- `light`: 5-20-1 MLP without bias, teacher key `key(1)`, inits `fold_in(key(0), i)`
  (median ~250 steps).

Arms, side by side in one process, each compiled (on two trajectories) before it is
timed:

- `engine`: `Engine`, exact per-slot program (CPU) or vmap over slots (`--vmap`, GPU);
- `engine-vmap`: `Engine` in vmap mode (on CPU only with `--also-vmap-engine`): once
  the queue is empty the batch narrows to the live slots (widths `slots / 8^k`; a run
  of n < slots trajectories starts at width n);
- `engine-vmap-full`: the same without narrowing (`compact = False`, the engine before
  the narrowing): every slot is stepped until the slowest trajectory is done;
- `naive`: `jax.jit(jax.vmap(gradient_flow))` over the whole batch;
- `kink`: `KinkEngine` (kink-aware flow, Tsit5 inside), exact (CPU) or vmap (GPU): the
  exact method. With `--kink-reference-segments` also the same engine with each segment
  run by `diffrax.diffeqsolve` (the implementation before `kinks/_segment.py`), side by side.

**Error column.** Each arm's final weights against a kink-aware reference at
rtol = atol = 1e-12 (Tsit5 inside; the plain arms cannot resolve the kinks and stay at
~1e-5, the kink-aware arm at the tolerance); `err_vs_ref_max` is the largest
`max |theta_final - reference|` over the trajectories.

**Timing.** Each arm is compiled (engines: `warm_up()`, every program at every batch
width, then two trajectories), then timed `--repeats` times; `seconds` is the fastest
run (other jobs on a shared machine only slow a run down), all runs are in
`seconds_all` and `wall_over_bare_range`. `cpu_seconds` is this process's least CPU
time of a timed run (`time.process_time`, all threads): on a loaded machine it moves less
than wall time; `cpu_over_bare` divides it by the bare cost measured the same way.

**Bare cost.** Each arm's vector-field-evaluation equivalents are counted: Tsit5 stages
(6 per step, accepted or rejected, +3 per trajectory to start); for the kink-aware arm,
in a separately compiled, instrumented run (`solvers._EVAL_HOOK`), every gradient, every
JVP/VJP row of the Filippov solve, and every event-condition evaluation (a forward pass,
priced at the measured forward cost). The count times the measured cost of one gradient
evaluation in a tight jitted loop, unbatched (exact mode) or per trajectory at the arm's
batch width (vmap modes), is the bare cost; the table reports wall time / bare cost.
Writes `benchmarks/results/sweep_throughput.json` (or `--out`).

    .venv/bin/python benchmarks/sweep_throughput.py                      # CPU: heavy, 64 and 256 inits
    .venv/bin/python benchmarks/sweep_throughput.py --inits 64 --workloads heavy light \
        --arms engine engine-vmap engine-vmap-full naive kink --kink-reference-segments \
        --out benchmarks/results/sweep_throughput.json                  # CPU, n_inits = slots
    .venv/bin/python benchmarks/sweep_throughput.py --inits 256 --slots 64 --workloads heavy \
        --arms engine engine-vmap engine-vmap-full naive --repeats 1 --no-error \
        --out benchmarks/results/sweep_throughput_256.json              # CPU, n_inits > slots
    .venv/bin/python benchmarks/sweep_throughput.py --inits 4096 --arms engine engine-vmap-full naive \
        --repeats 1 --no-error --out benchmarks/results/sweep_throughput_gpu_plain.json   # GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--inits", type=int, nargs="+", default=None, help="batch sizes (default: 64 256 on CPU, 4096 on GPU)"
    )
    p.add_argument("--workloads", nargs="+", default=["heavy"], choices=["heavy", "light"])
    p.add_argument(
        "--arms",
        nargs="+",
        default=["engine", "naive", "kink"],
        choices=["engine", "engine-vmap", "engine-vmap-full", "naive", "kink"],
    )
    p.add_argument("--slots", type=int, default=None, help="engine slots (default 64 CPU, 4096 GPU)")
    p.add_argument("--steps-per-call", type=int, default=128)
    p.add_argument("--vmap", action="store_true", help="engines: vmap over slots (default on GPU)")
    p.add_argument("--also-vmap-engine", action="store_true", help="CPU: also time the engines in vmap mode")
    p.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="timed runs per arm after compiling (seconds = the fastest; all are recorded)",
    )
    p.add_argument(
        "--kink-reference-segments",
        action="store_true",
        help="also time the kink-aware arm with its segments run by diffrax.diffeqsolve (the "
        "implementation before kinks/_segment.py), side by side",
    )
    p.add_argument(
        "--no-error", action="store_true", help="skip the error column (a kink-aware reference at tolerance 1e-12)"
    )
    p.add_argument(
        "--count-inits",
        type=int,
        default=64,
        help="kink arm: count evaluations on this many inits (scaled by steps to all)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="JSON path (default: benchmarks/results/local/sweep_throughput.json, ignored by git; "
        "pass benchmarks/results/sweep_throughput.json to replace the committed results)",
    )
    return p.parse_args()


args = _args()

import jax  # noqa: E402

from _bare import N_SAMPLES, BareCosts, count_kink_work, workload  # noqa: E402 (benchmarks/_bare.py)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax.sweep import Engine, KinkEngine, make_problem  # noqa: E402

TOL, T1, N_SAVE = 1e-8, 1.0, 11
LOAD_START = list(os.getloadavg())
GPU = jax.default_backend() != "cpu"


def run_engine(eng, n):
    """(compile seconds, [(wall, cpu) seconds of each timed run], records, EngineStats)."""
    t = time.perf_counter()
    if hasattr(eng, "warm_up"):
        eng.warm_up(n)  # every program at every batch width of a run of n
    eng.run(np.arange(2), on_results=lambda r: None)  # compile (+ two trajectories)
    compile_s = time.perf_counter() - t
    secs = []
    for _ in range(max(args.repeats, 1)):
        parts = []
        t, c = time.perf_counter(), time.process_time()
        st = eng.run(np.arange(n), on_results=parts.append)
        secs.append((time.perf_counter() - t, time.process_time() - c))
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(rec["index"])
    return compile_s, secs, {k: v[order] for k, v in rec.items()}, st


def run_naive(template, X, Y, thetas):
    def one(th):
        f = ij.gradient_flow(
            template.with_edge_weights(th), X, Y, T1, rtol=TOL, atol=TOL, saveat=ij.SaveTimes(n_save=N_SAVE)
        )
        return f.theta_final, f.stats["num_steps"]

    t = time.perf_counter()
    compiled = jax.jit(jax.vmap(one)).lower(thetas).compile()
    compile_s = time.perf_counter() - t
    secs = []
    for _ in range(max(args.repeats, 1)):
        t, c = time.perf_counter(), time.process_time()
        th, steps = jax.block_until_ready(compiled(thetas))
        secs.append((time.perf_counter() - t, time.process_time() - c))
    return compile_s, secs, np.asarray(th), np.asarray(steps)


def kink_engine(template, X, Y, thetas, *, slots, exact, tol=TOL, reference_segments=False):
    eng = KinkEngine(
        template,
        X,
        Y,
        T1,
        lambda i: thetas[i],
        slots=slots,
        exact=exact,
        options=ij.SolverOptions("tsit5", rtol=tol, atol=tol, max_steps=10_000),
        saveat=ij.SaveTimes(n_save=N_SAVE),
    )
    if reference_segments:  # before compiling: the engine's programs trace eng.integrator
        eng.integrator = dataclasses.replace(eng.integrator, reference_solve=True)
    return eng


def reference_weights(template, X, Y, thetas):
    """Final weights of the kink-aware flow at rtol = atol = 1e-12 (Tsit5 inside): the
    reference of the error column."""
    eng = kink_engine(template, X, Y, thetas, slots=min(64, thetas.shape[0]), exact=True, tol=1e-12)
    parts = []
    eng.run(np.arange(thetas.shape[0]), on_results=parts.append)
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(rec["index"])
    return rec["theta_final"][order], rec["status"][order]


def timing(secs):
    """`seconds` (fastest timed run: other jobs on a shared machine only slow a run down),
    the list of all timed runs, and the least process CPU time of a run."""
    return dict(
        seconds=float(min(w for w, _ in secs)),
        seconds_all=[float(w) for w, _ in secs],
        cpu_seconds=float(min(c for _, c in secs)),
        cpu_seconds_all=[float(c) for _, c in secs],
    )


def count_work(template, X, Y, thetas):
    """(gradient-equivalents, condition evaluations, steps) per trajectory, from an
    instrumented exact-mode run of the kink arm's engine with one slot
    (`_bare.count_kink_work`)."""
    make = lambda: kink_engine(template, X, Y, thetas, slots=1, exact=True)  # noqa: E731
    return count_kink_work(make, range(thetas.shape[0]))


def main():
    ns = args.inits or ([4096] if GPU else [64, 256])
    slots_default = args.slots or (4096 if GPU else 64)
    vmap_mode = args.vmap or GPU
    rows = []
    for wl in args.workloads:
        g, X, Y, thetas_all = workload(wl, max(ns))
        template = ij.DAGNetwork(g, "relu", edge_weights=thetas_all[0])
        for n in ns:
            thetas = thetas_all[:n]
            slots = min(slots_default, n) if vmap_mode else slots_default
            costs = BareCosts(template, X, Y, [1, slots, n])
            row = dict(workload=wl, network="mlp 5-20-1 (no bias)", n_inits=n, slots=slots, edges=len(g.edges))
            arms = []
            init = lambda i, th=thetas: th[i]  # noqa: E731
            problem = make_problem(
                template, X, Y, T1, options=ij.SolverOptions(rtol=TOL, atol=TOL), saveat=ij.SaveTimes(n_save=N_SAVE)
            )
            plain_modes = (
                ([("engine", vmap_mode, True)] if "engine" in args.arms else [])
                + (
                    [("engine-vmap", True, True)]
                    if ("engine-vmap" in args.arms or args.also_vmap_engine) and not vmap_mode
                    else []
                )
                + ([("engine-vmap-full", True, False)] if "engine-vmap-full" in args.arms else [])
            )
            steps = None
            for name, vm, compact in plain_modes:
                eng = Engine(problem, init, slots=slots, steps_per_call=args.steps_per_call, exact=not vm)
                eng.compact = compact
                c, secs, rec, st = run_engine(eng, n)
                s = min(w for w, _ in secs)
                costs.measure()
                steps = rec["num_steps"]
                evals = 6 * int(steps.sum()) + 3 * n
                bare = evals * costs[slots if vm else 1]["grad"]
                arms.append(
                    dict(
                        arm=name,
                        mode="vmap" if vm else "exact",
                        compile_s=c,
                        **timing(secs),
                        traj_per_s=n / s,
                        widths=eng.widths(n),
                        slot_iterations=st.slot_iterations,
                        steps_total=int(steps.sum()),
                        steps_median=float(np.median(steps)),
                        steps_max=int(steps.max()),
                        evaluations=evals,
                        bare_s=bare,
                        wall_over_bare=s / bare,
                        _width=slots if vm else 1,
                        work_efficiency=st.work_efficiency,
                        failures=int(np.sum(~ij.sweep.status_is_success(rec["status"]))),
                        theta_final=rec["theta_final"],
                    )
                )
                _print(rows + [dict(row, arms=arms)])
            if "naive" in args.arms:
                c, secs, th, sb = run_naive(template, X, Y, thetas)
                s = min(w for w, _ in secs)
                costs.measure()
                evals = 6 * int(sb.sum()) + 3 * n
                bare = evals * costs[n]["grad"]
                arms.append(
                    dict(
                        arm="naive jit(vmap(gradient_flow))",
                        mode="vmap",
                        compile_s=c,
                        **timing(secs),
                        traj_per_s=n / s,
                        steps_total=int(sb.sum()),
                        steps_median=float(np.median(sb)),
                        steps_max=int(sb.max()),
                        evaluations=evals,
                        bare_s=bare,
                        wall_over_bare=s / bare,
                        _width=n,
                        work_efficiency=float(sb.mean() / sb.max()),
                        theta_final=th,
                    )
                )
                steps = sb if steps is None else steps
                _print(rows + [dict(row, arms=arms)])
            if "kink" in args.arms:
                kink_modes = (
                    [(vmap_mode, False)]
                    + ([(True, False)] if args.also_vmap_engine and not vmap_mode else [])
                    + ([(vmap_mode, True)] if args.kink_reference_segments else [])
                )
                for vm, ref_seg in kink_modes:
                    eng = kink_engine(template, X, Y, thetas, slots=slots, exact=not vm, reference_segments=ref_seg)
                    c, secs, rec, st = run_engine(eng, n)
                    s = min(w for w, _ in secs)
                    costs.measure()
                    name = "kink-aware (tsit5 inside" + (", diffeqsolve segments)" if ref_seg else ")")
                    arms.append(
                        dict(
                            arm=name,
                            mode="vmap" if vm else "exact",
                            compile_s=c,
                            **timing(secs),
                            traj_per_s=n / s,
                            steps_total=int(rec["num_steps"].sum()),
                            steps_median=float(np.median(rec["num_steps"])),
                            steps_max=int(rec["num_steps"].max()),
                            events_total=int(rec["num_events"].sum()),
                            segments_total=int((rec["num_events"] + 1).sum()),
                            ms_per_segment=1e3 * s / int((rec["num_events"] + 1).sum()),
                            sliding_trajectories=int(np.sum(rec["num_sliding_entries"] > 0)),
                            work_efficiency=st.work_efficiency,
                            failures=int(np.sum(~ij.sweep.status_is_success(rec["status"]))),
                            theta_final=rec["theta_final"],
                            _steps=rec["num_steps"],
                        )
                    )
                    _print(rows + [dict(row, arms=arms)])
                k = min(args.count_inits, n)
                per = count_work(template, X, Y, thetas[:k])
                for a in arms:
                    if a["arm"].startswith("kink"):
                        scale = a["steps_total"] / max(per[:, 2].sum(), 1)  # 1 when k == n
                        w = slots if a["mode"] == "vmap" else 1
                        n_grad, n_cond = per[:, 0].sum() * scale, per[:, 1].sum() * scale
                        a.update(
                            evaluations=float(n_grad),
                            condition_evaluations=float(n_cond),
                            _width=w,
                            counted_on=k,
                            bare_s=n_grad * costs[w]["grad"] + n_cond * costs[w]["forward"],
                        )
                        a["wall_over_bare"] = a["seconds"] / a["bare_s"]
            if not args.no_error:
                ref_theta, ref_status = reference_weights(template, X, Y, thetas)
                row["reference"] = dict(
                    method="kink-aware flow, Tsit5 inside, rtol = atol = 1e-12, exact engine",
                    failures=int(np.sum(~ij.sweep.status_is_success(ref_status))),
                )
                for a in arms:
                    err = np.max(np.abs(np.asarray(a["theta_final"]) - ref_theta), axis=1)
                    a.update(err_vs_ref_max=float(np.max(err)), err_vs_ref_median=float(np.median(err)))
            costs.measure()
            for a in arms:  # bare cost from the least-disturbed measurement of the whole run
                if "_width" in a:
                    w = a.pop("_width")
                    a["bare_s"] = (
                        a["evaluations"] * costs[w]["grad"] + a.get("condition_evaluations", 0) * costs[w]["forward"]
                    )
                    a["wall_over_bare"] = a["seconds"] / a["bare_s"]
                    a["bare_cpu_s"] = (
                        a["evaluations"] * costs[w]["grad_cpu"]
                        + a.get("condition_evaluations", 0) * costs[w]["forward_cpu"]
                    )
                    a["cpu_over_bare"] = a["cpu_seconds"] / a["bare_cpu_s"]
                    a["wall_over_bare_range"] = [
                        x / a["bare_s"] for x in (min(a["seconds_all"]), max(a["seconds_all"]))
                    ]
            row.update(
                grad_cost_us={str(w): costs[w]["grad"] * 1e6 for w in costs.best},
                grad_cpu_cost_us={str(w): costs[w]["grad_cpu"] * 1e6 for w in costs.best},
                forward_cost_us={str(w): costs[w]["forward"] * 1e6 for w in costs.best},
            )
            naive = next((a for a in arms if a["arm"].startswith("naive")), None)
            for a in arms:
                if naive is not None:
                    a["vs_naive"] = a["traj_per_s"] / naive["traj_per_s"]
                    a["cpu_vs_naive"] = naive["cpu_seconds"] / a["cpu_seconds"]
                a.pop("_steps", None)
            for a in arms:
                a.pop("theta_final", None)
            row["arms"] = arms
            rows.append(row)
            _print(rows)
    meta = dict(
        benchmark="sweep_throughput",
        tol=TOL,
        t1=T1,
        n_samples=N_SAMPLES,
        n_save=N_SAVE,
        solver="Tsit5",
        activation="relu",
        float64=True,
        backend=jax.default_backend(),
        devices=[str(d) for d in jax.devices()],
        machine=platform.machine(),
        cpu_count=os.cpu_count(),
        jax=jax.__version__,
        steps_per_call=args.steps_per_call,
        repeats=args.repeats,
        command="PYTHONPATH=. python " + " ".join(sys.argv),
        load_average_start=LOAD_START,
        load_average_end=list(os.getloadavg()),
        note="wall/bare: wall seconds / (evaluation equivalents x measured seconds per gradient "
        "(per forward pass for kink event conditions) at the arm's batch width). Measured on a "
        "shared machine; ratios are side by side in one process; seconds = the fastest of the "
        "timed runs (all in seconds_all); cpu_seconds = the least process CPU time of a timed run "
        "(cpu_over_bare, cpu_vs_naive from it). err_vs_ref_*: max |theta_final - reference| per "
        "trajectory (max, median over trajectories), reference = the kink-aware flow at "
        "rtol = atol = 1e-12.",
    )
    write_json(output_path(args.out, "sweep_throughput.json"), dict(meta=meta, results=rows), default=float)


def _print(rows):
    head = (
        f"{'workload':>8} {'n':>5} {'slots':>5} {'arm':>30} {'mode':>5} {'compile s':>9} {'traj/s':>8} "
        f"{'vs naive':>8} {'cpu vs':>6} {'steps med/max':>14} {'events':>6} {'wall/bare':>9} {'cpu/bare':>8} "
        f"{'err vs ref':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        naive = next((a for a in r["arms"] if a["arm"].startswith("naive")), None)
        for a in r["arms"]:
            vs = a["traj_per_s"] / naive["traj_per_s"] if naive else float("nan")
            cvs = naive["cpu_seconds"] / a["cpu_seconds"] if naive else float("nan")
            print(
                f"{r['workload']:>8} {r['n_inits']:>5} {r['slots']:>5} {a['arm']:>30} {a['mode']:>5} "
                f"{a['compile_s']:>9.1f} {a['traj_per_s']:>8.2f} {vs:>8.2f} {cvs:>6.2f} "
                f"{a['steps_median']:>7.0f}/{a['steps_max']:<6} {a.get('events_total', ''):>6} "
                f"{a.get('wall_over_bare', float('nan')):>9.2f} {a.get('cpu_over_bare', float('nan')):>8.2f} "
                f"{a.get('err_vs_ref_max', float('nan')):>10.1e}"
            )
    print(flush=True)


if __name__ == "__main__":
    main()
