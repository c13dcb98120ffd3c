"""Gauss4 inside kink-aware sweeps, in both engine modes: what a change to the
Gauss-Legendre step costs where a batched `lax.cond` computes both branches.

`KinkEngine`'s exact mode runs each slot unbatched, so a `lax.cond` in the solver skips
its untaken branch. Its vmap mode batches the slots, and there a `lax.cond` whose
predicate differs between lanes (or a loop whose trip count does) is a select: every lane
pays for every branch. So a saving inside the Gauss step can be one in exact mode and a
loss in vmap mode.

Workloads (`kink_vmap_profile.py`'s): `heavy`, the 5-20-1 ReLU MLP without bias (teacher
`PRNGKey(3)`, 20 points, inits `PRNGKey(i)`, t1 = 1; heavy-tailed: a few trajectories
take most of the events), and `example`, the demo DAG (`invariant-jax sweep --graph
example`, seed 0, its data and first inits; light). Each arm is
`ij.sweep_flows(nets, X, Y, t1, solver="gauss4", kinks=True, batch=BatchOptions(slots=n,
exact=...))` at rtol = atol = 1e-8, in a fresh process: the first call (trace, compile,
run) and the same call again, the compilations of each (JAX's monitoring events), and a
digest of the final weights (equal digests: bit-identical results).

Rounds alternate the arms; `--before PATH` (a checkout of other code; may be given more
than once) runs each arm again right after this code's, in the same round. The table
gives medians and ranges.

Usage: python benchmarks/gauss_sweep_modes.py [--rounds 2] [--before PATH]
    [--heavy-inits 16] [--example-inits 64] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from _output import checkout, output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from first_calls import ROOT, run_child  # noqa: E402 (benchmarks/first_calls.py)

CHILD = r"""
import hashlib, json, os, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
import invariant_jax as ij
from invariant_jax.sweep import BatchOptions, SweepConfig, init_theta

workload, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if workload == "heavy":
    g = ij.mlp([5, 20, 1], bias=False)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.PRNGKey(3))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(n))
    nets = jax.vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys)
    t1 = 1.0
else:
    cfg = SweepConfig(graph="example", n_inits=n)
    g = cfg.build_graph()
    X, Y = (jnp.asarray(a) for a in cfg.build_data(g))
    thetas = jax.vmap(lambda i: init_theta(cfg, g, i))(jnp.arange(n))
    nets = jax.vmap(lambda th: ij.DAGNetwork(g, cfg.activation, edge_weights=th))(thetas)
    t1 = cfg.t1
count = {"programs": 0, "compile_s": 0.0}

def listen(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        count["programs"] += 1
    if event in ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                 "/jax/core/compile/backend_compile_duration"):
        count["compile_s"] += duration

jax.monitoring.register_event_duration_secs_listener(listen)
batch = BatchOptions(slots=n, exact=mode == "exact")
out = {"package": os.path.dirname(ij.__file__)}
for key in ("first", "again"):
    count.update(programs=0, compile_s=0.0)
    t = time.perf_counter()
    r = ij.sweep_flows(nets, X, Y, t1, solver="gauss4", rtol=1e-8, atol=1e-8, kinks=True, batch=batch)
    out[key + "_s"] = time.perf_counter() - t
    out[key + "_programs"] = count["programs"]
    out[key + "_compile_s"] = count["compile_s"]
theta = np.ascontiguousarray(np.asarray(r.theta_final, np.float64))
out["theta_sha256"] = hashlib.sha256(theta.tobytes()).hexdigest()
out["ok"] = int(np.sum(np.asarray(ij.is_success(r.result))))
out["steps"] = int(np.sum(r.num_steps))
out["events"] = int(np.sum(r.kink["num_events"]))
print("RESULT " + json.dumps(out))
"""

KEYS = ("first_s", "first_programs", "first_compile_s", "again_s", "again_programs")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="fresh processes per arm")
    ap.add_argument("--before", action="append", default=[], help="a checkout of other code (repeatable)")
    ap.add_argument("--heavy-inits", type=int, default=16)
    ap.add_argument("--example-inits", type=int, default=64)
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/gauss_sweep_modes.json)")
    args = ap.parse_args(argv)
    path = output_path(args.out, "gauss_sweep_modes.json")
    others = [Path(b).resolve() for b in args.before]
    for b, root in zip(args.before, others):
        if not (root / "invariant_jax" / "__init__.py").is_file():
            raise SystemExit(f"--before {b}: no invariant_jax package there; give a checkout's root folder")
    arms = [
        (w, m, n) for w, n in (("heavy", args.heavy_inits), ("example", args.example_inits)) for m in ("exact", "vmap")
    ]
    codes = {"this": ROOT, **{str(root): root for root in others}}
    runs: dict = {c: {f"{w} {m}": [] for w, m, _ in arms} for c in codes}
    for r in range(args.rounds):
        for w, m, n in arms:
            for c, root in codes.items():
                out = run_child(CHILD, [w, m, str(n)], root)
                runs[c][f"{w} {m}"].append(out)
                print(f"round {r}: {c} {w} {m} n={n} {out}", flush=True)
    summary = {c: {arm: _summary(xs) for arm, xs in rs.items()} for c, rs in runs.items()}
    print(json.dumps(summary, indent=1))
    rec = {
        "benchmark": "gauss_sweep_modes",
        "workloads": {
            "heavy": f"5-20-1 relu (no bias), teacher PRNGKey(3), 20 points, inits PRNGKey(i), i < {args.heavy_inits}, t1 = 1",
            "example": f"the demo DAG (sweep --graph example, seed 0), its data, inits 0..{args.example_inits - 1}",
        },
        "call": "sweep_flows(nets, X, Y, t1, solver='gauss4', rtol=1e-8, atol=1e-8, kinks=True, "
        "batch=BatchOptions(slots=n, exact=mode == 'exact'))",
        "rounds": args.rounds,
        "runs": runs["this"],
        "summary": summary["this"],
    }
    rec["before"] = [{**checkout(root), "runs": runs[str(root)], "summary": summary[str(root)]} for root in others]
    # (per arm: every round of every code gave the same final weights, bit for bit)
    rec["identical_results"] = {
        arm: len({x["theta_sha256"] for c in runs for x in runs[c][arm]}) == 1 for arm in runs["this"]
    }
    write_json(path, rec)


def _summary(xs: list[dict]) -> dict:
    """Median and range over rounds of each time and count."""
    out = {}
    for key in KEYS:
        vals = [x[key] for x in xs]
        out[key] = statistics.median(vals)
        out[key + "_range"] = [min(vals), max(vals)]
    out["ok"], out["steps"], out["events"] = xs[0]["ok"], xs[0]["steps"], xs[0]["events"]
    return out


if __name__ == "__main__":
    sys.exit(main())
