"""The kink-aware engine's vmap mode on a CPU, as a proxy for an accelerator: how many
sequential loop iterations a batch of slots runs in lockstep, how many of them each slot
needed, and how big the compiled loop bodies are.

Workload: `sweep_throughput.py`'s `heavy` (5-20-1 ReLU without bias, teacher
`PRNGKey(3)`, inits `PRNGKey(i)`, 20 points, t1 = 1, Tsit5 inside at rtol = atol = 1e-8).
`--slots` trajectories start together and advance one segment per iteration of
`jax.vmap(KinkIntegrator.segment)` (what the engine's vmap mode runs, without refilling),
until all are done or `--max-seconds` has passed. Per iteration: the slots still going,
the largest and the mean number of solver steps a going slot took in that segment (the
step loop runs in lockstep, so the batch pays the largest for every slot), and the wall
time. Summary: lockstep efficiency = steps the slots needed / (slots going x largest),
summed over iterations; wall time per needed step.

From the optimized HLO of the vmapped segment (`compiled.as_text()`): every `while`
loop, its nesting depth and the number of instructions in its body computation (the
fused operations one iteration launches; on an accelerator each is about one kernel).

Usage: python benchmarks/kink_vmap_profile.py [--slots 256] [--max-seconds 300]
    [--out benchmarks/results/kink_vmap_profile.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.kinks import make_kink_integrator  # noqa: E402

TOL, T1, N_SAMPLES, N_SAVE = 1e-8, 1.0, 20, 11  # sweep_throughput.py's


def heavy(n):
    """sweep_throughput.py's `heavy` workload (that script parses its flags at import)."""
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, N_SAMPLES, key=jax.random.PRNGKey(3))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(n))  # = PRNGKey(i), i < n
    thetas = jax.vmap(lambda k: ij.DAGNetwork(g, "relu", key=k).edge_weights())(keys)
    return g, X, Y, thetas


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/kink_vmap_profile.json)")
    args = ap.parse_args()
    g, X, Y, thetas = heavy(args.slots)
    net = ij.DAGNetwork(g, "relu", edge_weights=thetas[0])
    integ = make_kink_integrator(
        net,
        X,
        Y,
        T1,
        options=ij.SolverOptions("tsit5", rtol=TOL, atol=TOL, max_steps=10_000),
        saveat=ij.SaveTimes(n_save=N_SAVE),
    )
    integ = dataclasses.replace(integ, one_site=False)  # as the engine's vmap mode
    init = jax.jit(jax.vmap(integ.init))
    states = init(thetas)
    t = time.perf_counter()
    compiled = jax.jit(jax.vmap(integ.segment)).lower(states).compile()
    compile_s = time.perf_counter() - t
    loops = hlo_loops(compiled.as_text())
    iters = []
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < args.max_seconds:
        going = ~np.asarray(states.done)
        if not going.any():
            break
        before = np.asarray(states.steps)
        t = time.perf_counter()
        states = jax.block_until_ready(compiled(states))
        wall = time.perf_counter() - t
        d = (np.asarray(states.steps) - before)[going]
        iters.append(dict(going=int(going.sum()), steps_max=int(d.max()), steps_mean=float(d.mean()), wall_s=wall))
        print(f"segment {len(iters)}: {iters[-1]}", flush=True)
    needed = sum(r["going"] * r["steps_mean"] for r in iters)
    paid = sum(r["going"] * r["steps_max"] for r in iters)
    done = int(np.asarray(states.done).sum())
    summary = dict(
        slots=args.slots,
        compile_s=compile_s,
        iterations=len(iters),
        finished=done,
        steps_needed=needed,
        steps_paid=paid,
        lockstep_efficiency=needed / paid if paid else None,
        wall_s=sum(r["wall_s"] for r in iters),
        wall_per_needed_step_us=1e6 * sum(r["wall_s"] for r in iters) / needed if needed else None,
        events_max=int(jnp.max(states.n_events)),
    )
    print(summary)
    for r in loops:
        print(
            f"  while body {r['body']}: depth {r['depth']}, {r['instructions']} instructions ({r['fusions']} fusions)"
        )
    write_json(
        output_path(args.out, "kink_vmap_profile.json"),
        dict(
            benchmark="kink_vmap_profile",
            workload="sweep_throughput.py heavy: 5-20-1 relu (no bias), teacher PRNGKey(3), inits PRNGKey(i), "
            f"20 points, t1 = {T1}, Tsit5 inside at rtol = atol = {TOL}",
            settings=dict(slots=args.slots, max_seconds=args.max_seconds),
            summary=summary,
            loops=loops,
            iterations=iters,
        ),
    )


if __name__ == "__main__":
    main()
