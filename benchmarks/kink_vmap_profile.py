"""The kink-aware engine's vmap mode on a CPU, as a proxy for an accelerator: how many
sequential loop iterations a batch of slots runs in lockstep, how many of them each slot
needed, and how big the compiled loop bodies are.

Workload (default): `sweep_throughput.py`'s `heavy` (5-20-1 ReLU without bias, teacher
`PRNGKey(3)`, inits `PRNGKey(i)`, 20 points, t1 = 1, Tsit5 inside at rtol = atol = 1e-8).
`--slots` trajectories start together and advance one segment per iteration of
`jax.vmap(KinkIntegrator.segment)` (what the engine's vmap mode runs, without refilling),
until all are done or `--max-seconds` has passed. Per iteration: the slots still going,
the largest and the mean number of solver steps a going slot took in that segment (the
step loop runs as many trips as the largest; with the lanes not named every slot
computes every trip, with them named only the slots still stepping), and the wall
time. Summary: `lockstep_efficiency` = steps the slots needed / (slots going x
largest), summed over iterations (`steps_paid` is that denominator: the trips times the
slots, not the arithmetic done); wall time per needed step.

From the optimized HLO of the vmapped segment (`compiled.as_text()`): every `while`
loop, its nesting depth and the number of instructions in its body computation (the
fused operations one iteration launches; on an accelerator each is about one kernel).

Side by side in the same run: `KinkEngine` in exact and in vmap mode on the same
`--slots` trajectories (one per slot): first call and warm call, compilations, solver
steps, wall over the bare arithmetic (`bare_step_us`: 6 pattern-frozen gradients per
lane-step, timed as one vmapped gradient over the lanes), and the largest difference of
the final weights. `--select-arm` adds the lockstep run with the lanes not named (every
branch a batched `lax.cond`, the engine's vmap mode before `kinks.lane_cond`).

`--workload example`: the demo DAG instead (light). After the warm call each engine
runs `NEW_SIZE` = 37 trajectories, a batch size it has not seen (compilations counted).

Usage: python benchmarks/kink_vmap_profile.py [--workload heavy] [--slots 256]
    [--max-seconds 300] [--select-arm] [--out benchmarks/results/kink_vmap_profile.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.kinks import LANES, make_kink_integrator  # noqa: E402
from invariant_jax.sweep import KinkEngine, SweepConfig, init_theta  # noqa: E402

TOL, T1, N_SAMPLES, N_SAVE = 1e-8, 1.0, 20, 11  # sweep_throughput.py's


def heavy(n):
    """sweep_throughput.py's `heavy` workload (that script parses its flags at import)."""
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, N_SAMPLES, key=jax.random.PRNGKey(3))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(n))  # = PRNGKey(i), i < n
    thetas = jax.vmap(lambda k: ij.DAGNetwork(g, "relu", key=k).edge_weights())(keys)
    return g, X, Y, thetas


def example(n):
    """The demo DAG of `invariant-jax sweep --graph example` (its data, its first `n`
    initial weights, seed 0): light, mostly short trajectories."""
    cfg = SweepConfig(graph="example", n_inits=n)
    g = cfg.build_graph()
    X, Y = cfg.build_data(g)
    thetas = jax.vmap(lambda i: init_theta(cfg, g, i))(jnp.arange(n))
    return g, jnp.asarray(X), jnp.asarray(Y), thetas


WORKLOADS = {
    "heavy": (
        heavy,
        "sweep_throughput.py heavy: 5-20-1 relu (no bias), teacher PRNGKey(3), inits PRNGKey(i), 20 points",
    ),
    "example": (example, "the demo DAG (invariant-jax sweep --graph example, seed 0, its data and inits)"),
}

NEW_SIZE = 37
"""After the warm call, a run of this many trajectories (a batch size not seen before)."""


def hlo_loops(text: str) -> list[dict]:
    """Every `while` of an optimized HLO module: its body computation, nesting depth and
    instruction count (instructions in the body computation itself; a fusion counts once)."""
    comps, name = {}, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            name = head.group(1)
            comps[name] = []
        elif line.startswith("}"):
            name = None
        elif name is not None and "=" in line:
            comps[name].append(line)
    bodies = {}
    for comp, lines in comps.items():
        for line in lines:
            m = re.search(r"\bwhile\(.*body=%?([\w.\-]+)", line)
            if m:
                bodies[m.group(1)] = comp
    calls = {
        c: set(
            re.findall(
                r"(?:calls|body|condition|to_apply|true_computation|false_computation|branch_computations)=\{?%?([\w.\-]+)",
                " ".join(ls),
            )
        )
        for c, ls in comps.items()
    }

    def depth(comp, seen=()):
        # how many while bodies enclose `comp` (through any chain of calls)
        parents = [p for p, cs in calls.items() if comp in cs and p not in seen]
        best = 0
        for p in parents:
            best = max(best, depth(p, seen + (comp,)) + (1 if p in bodies else 0))
        return best

    return sorted(
        (
            dict(
                body=b,
                depth=depth(b) + 1,
                instructions=len(comps.get(b, [])),
                fusions=sum(" fusion(" in line for line in comps.get(b, [])),
            )
            for b in bodies
        ),
        key=lambda r: (r["depth"], -r["instructions"]),
    )


def bare_step_s(integ, thetas) -> float:
    """The bare arithmetic of one Tsit5 step of one lane: 6 pattern-frozen gradients, timed
    as one vmapped gradient over all the lanes (the fastest of 20), per lane."""
    prob = integ.prob
    D = jax.jit(jax.vmap(lambda th: prob.D_of(prob.pre_activations(th) > 0)))(thetas)
    grad = jax.jit(jax.vmap(prob.grad))
    jax.block_until_ready(grad(thetas, D))
    best = min(_timed(lambda: jax.block_until_ready(grad(thetas, D))) for _ in range(20))
    return 6 * best / thetas.shape[0]


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def lockstep(integ, thetas, lanes: bool, max_seconds: float) -> dict:
    """`--slots` trajectories in lockstep, one vmapped segment per iteration (no refill):
    compile time, per-iteration slots going, steps (largest, mean) and wall time, the
    HLO loops. `lanes`: the lanes are named (`KinkProblem.lanes`, as the engine's vmap
    mode since `kinks.lane_cond`), else every branch is a batched `lax.cond`."""
    prob = dataclasses.replace(integ.prob, lanes=LANES if lanes else None)
    integ = dataclasses.replace(integ, one_site=False, prob=prob)  # as the engine's vmap mode
    vmap = functools.partial(jax.vmap, axis_name=LANES)
    states = jax.jit(vmap(integ.init))(thetas)
    t = time.perf_counter()
    compiled = jax.jit(vmap(integ.segment)).lower(states).compile()
    compile_s = time.perf_counter() - t
    loops = hlo_loops(compiled.as_text())
    iters = []
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < max_seconds:
        going = ~np.asarray(states.done)
        if not going.any():
            break
        before = np.asarray(states.steps)
        t = time.perf_counter()
        states = jax.block_until_ready(compiled(states))
        wall = time.perf_counter() - t
        d = (np.asarray(states.steps) - before)[going]
        iters.append(dict(going=int(going.sum()), steps_max=int(d.max()), steps_mean=float(d.mean()), wall_s=wall))
        print(f"{'lanes' if lanes else 'select'} segment {len(iters)}: {iters[-1]}", flush=True)
    needed = sum(r["going"] * r["steps_mean"] for r in iters)
    paid = sum(r["going"] * r["steps_max"] for r in iters)
    wall = sum(r["wall_s"] for r in iters)
    summary = dict(
        lanes_named=lanes,
        compile_s=compile_s,
        iterations=len(iters),
        finished=int(np.asarray(states.done).sum()),
        steps_needed=needed,
        steps_paid=paid,
        lockstep_efficiency=needed / paid if paid else None,
        wall_s=wall,
        wall_per_needed_step_us=1e6 * wall / needed if needed else None,
        events_max=int(jnp.max(states.n_events)),
    )
    print(summary, flush=True)
    return dict(summary=summary, loops=loops, iterations=iters)


def engine_runs(net, X, Y, thetas, slots: int) -> dict:
    """`KinkEngine` in exact and in vmap mode, side by side: `slots` slots, one
    trajectory per slot; first call (compiling) and warm call, compilations counted,
    solver steps summed from the records; then a run of `NEW_SIZE` trajectories."""
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, **kw: compiles.append(d) if event == "/jax/core/compile/backend_compile_duration" else None
    )
    out = {}
    for mode in ("exact", "vmap"):
        eng = KinkEngine(
            net,
            X,
            Y,
            T1,
            lambda i: thetas[i],
            slots=slots,
            exact=mode == "exact",
            options=ij.SolverOptions("tsit5", rtol=TOL, atol=TOL, max_steps=10_000),
            saveat=ij.SaveTimes(n_save=N_SAVE),
        )
        row = {}
        for call in ("first", "warm"):
            steps, finals = [], {}

            def keep(r, steps=steps, finals=finals):
                steps.append(int(np.sum(r["num_steps"])))
                finals.update({int(k): r["theta_final"][j] for j, k in enumerate(r["index"])})

            compiles.clear()
            t = time.perf_counter()
            st = eng.run(np.arange(thetas.shape[0]), on_results=keep)
            row[call] = dict(
                wall_s=time.perf_counter() - t, compilations=len(compiles), compile_s=sum(compiles), calls=st.calls
            )
        row["steps"] = sum(steps)
        row["theta_final"] = np.stack([finals[i] for i in range(thetas.shape[0])])
        compiles.clear()
        t = time.perf_counter()
        st = eng.run(np.arange(min(NEW_SIZE, thetas.shape[0])), on_results=lambda r: None)
        row[f"new_size_{NEW_SIZE}"] = dict(
            wall_s=time.perf_counter() - t, compilations=len(compiles), compile_s=sum(compiles), calls=st.calls
        )
        out[mode] = row
        print(mode, {k: v for k, v in row.items() if k != "theta_final"}, flush=True)
    diff = float(np.abs(out["exact"].pop("theta_final") - out["vmap"].pop("theta_final")).max())
    out["vmap_over_exact_warm"] = out["vmap"]["warm"]["wall_s"] / out["exact"]["warm"]["wall_s"]
    out["vmap_over_exact_first"] = out["vmap"]["first"]["wall_s"] / out["exact"]["first"]["wall_s"]
    out["max_abs_theta_final_difference"] = diff
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="heavy")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="per lockstep arm")
    ap.add_argument(
        "--select-arm", action="store_true", help="also the lockstep run without named lanes (every branch a select)"
    )
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/kink_vmap_profile.json)")
    args = ap.parse_args()
    make, described = WORKLOADS[args.workload]
    g, X, Y, thetas = make(args.slots)
    net = ij.DAGNetwork(g, "relu", edge_weights=thetas[0])
    integ = make_kink_integrator(
        net,
        X,
        Y,
        T1,
        options=ij.SolverOptions("tsit5", rtol=TOL, atol=TOL, max_steps=10_000),
        saveat=ij.SaveTimes(n_save=N_SAVE),
    )
    engines = engine_runs(net, X, Y, thetas, args.slots)
    bare = bare_step_s(integ, thetas)
    for mode in ("exact", "vmap"):
        engines[mode]["wall_over_bare_warm"] = engines[mode]["warm"]["wall_s"] / (engines[mode]["steps"] * bare)
    arms = {"lanes": lockstep(integ, thetas, True, args.max_seconds)}
    if args.select_arm:
        arms["select"] = lockstep(integ, thetas, False, args.max_seconds)
    for name, arm in arms.items():
        print(name, arm["summary"])
        for r in arm["loops"]:
            print(
                f"  while body {r['body']}: depth {r['depth']}, {r['instructions']} instructions ({r['fusions']} fusions)"
            )
    write_json(
        output_path(args.out, "kink_vmap_profile.json"),
        dict(
            benchmark="kink_vmap_profile",
            workload=f"{described}, t1 = {T1}, Tsit5 inside at rtol = atol = {TOL}",
            settings=dict(
                workload=args.workload, slots=args.slots, max_seconds=args.max_seconds, select_arm=args.select_arm
            ),
            bare_step_us=1e6 * bare,
            engines=engines,
            lockstep=arms,
        ),
    )


if __name__ == "__main__":
    main()
