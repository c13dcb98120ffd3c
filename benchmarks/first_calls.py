"""What a user waits for on the first calls: README's example (5-20-1 ReLU MLP with bias,
20 teacher-student points, t1 = 2, rtol = atol = 1e-8), each measurement in a fresh Python
process (no compilation cache, nothing warm):

- `import invariant_jax`;
- the first `ij.gradient_flow(...)` call (trace, compile, run) and the same call again;
- the first `ij.kink_aware_flow(net, X, Y, 2.0)` call (its default inner solver) and again.

Each call also records its compile time (`*_compile_s`: tracing, lowering and XLA, summed
over every program it compiled, from JAX's monitoring events; `*_xla_s`: XLA alone).

Rounds alternate the measurements, so a change of machine load hits all of them; the
table gives the median and range over rounds. `--before PATH` (a checkout of other code,
e.g. a clean clone of an older commit) measures its two first calls too, in the same
rounds, each right after this code's: the side-by-side cost of a change, on a machine
whose speed drifts from day to day. README's Cost paragraph is generated from the JSON
(`benchmarks/docs_tables.py`).

`--cpus 0` runs each measurement on one CPU: XLA compiles on several threads, so that
is a one-core machine's first call. `--busy N` keeps N processes spinning meanwhile, on
any CPU (other work on the machine).

Usage: python benchmarks/first_calls.py [--rounds 3] [--before PATH] [--cpus LIST] [--busy N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _output import checkout, output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time
t = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import invariant_jax as ij
out = {"import_s": time.perf_counter() - t, "package": os.path.dirname(ij.__file__)}
what = sys.argv[1]
if what != "import":
    g = ij.mlp([5, 20, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 20, key=jax.random.key(0))
    net = ij.DAGNetwork(g, "relu", key=jax.random.key(1), init="glorot")
    if what == "gradient_flow":
        call = lambda: ij.gradient_flow(net, X, Y, t1=2.0, rtol=1e-8, atol=1e-8)
    else:
        call = lambda: ij.kink_aware_flow(net, X, Y, 2.0)
    compiling = {"trace": 0.0, "lower": 0.0, "xla": 0.0}
    events = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "xla",
    }

    def listen(event, duration, **kw):
        if event in events:
            compiling[events[event]] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    for key in ("first", "again"):
        for k in compiling:
            compiling[k] = 0.0
        t = time.perf_counter()
        f = call()
        jax.block_until_ready(f.theta_final)
        out[key + "_s"] = time.perf_counter() - t
        out[key + "_compile_s"] = sum(compiling.values())  # every program the call traced and compiled
        out[key + "_xla_s"] = compiling["xla"]
    out["success"] = bool(f.success)
print("RESULT " + json.dumps(out))
"""

WHAT = ("import", "gradient_flow", "kink_aware_flow")


def measure(what: str, root: Path = ROOT, cpus: set[int] | None = None) -> dict:
    return run_child(CHILD, [what], root, cpus)


def run_child(code: str, args: list[str], root: Path = ROOT, cpus: set[int] | None = None) -> dict:
    """Run `code` in a fresh Python process that imports the package of the checkout
    `root` (no compilation cache), on the CPUs `cpus` (default: those of this process),
    and return the dict it printed after `RESULT `, which must name the package it
    imported (`package`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    # (run in `root`: `python -c` puts the working folder first on sys.path, before
    # PYTHONPATH, so from another checkout's folder it imported that checkout's package)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"{args}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    out = json.loads(line[0][len("RESULT ") :])
    if Path(out["package"]).resolve() != (root / "invariant_jax").resolve():
        raise RuntimeError(f"{args}: measured the package at {out['package']}, not the one in {root}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per measurement")
    ap.add_argument("--before", default=None, help="a checkout of other code, measured in the same rounds")
    ap.add_argument(
        "--cpus",
        default=None,
        help="comma-separated CPU numbers each measurement runs on (default: every CPU of this process); "
        "XLA compiles on several threads, so one CPU shows a one-core machine's first calls",
    )
    ap.add_argument(
        "--busy",
        type=int,
        default=0,
        help="processes that spin (`while True: pass`) through all the measurements, on any CPU: "
        "a machine with other work on it (default 0)",
    )
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/first_calls.json)")
    args = ap.parse_args(argv)
    cpus = None if args.cpus is None else {int(c) for c in args.cpus.split(",")}
    if cpus is not None and not cpus <= os.sched_getaffinity(0):
        raise SystemExit(f"--cpus {args.cpus}: this process may run on CPUs {sorted(os.sched_getaffinity(0))} only")
    path = output_path(args.out, "first_calls.json")
    before = None if args.before is None else Path(args.before).resolve()
    if before is not None and not (before / "invariant_jax" / "__init__.py").is_file():
        raise SystemExit(f"--before {args.before}: no invariant_jax package there; give a checkout's root folder")
    runs = {w: [] for w in WHAT}
    runs_before = {w: [] for w in WHAT[1:]}
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for r in range(args.rounds):
            for w in WHAT:
                runs[w].append(measure(w, cpus=cpus))
                print(f"round {r}: {w} {runs[w][-1]}", flush=True)
                if before is not None and w in runs_before:
                    runs_before[w].append(measure(w, before, cpus))
                    print(f"round {r}: {w} (before) {runs_before[w][-1]}", flush=True)
    finally:
        for p in spinners:
            p.kill()
    summary = {"import_s": statistics.median(x["import_s"] for x in runs["import"]), **_summary(runs)}
    print(json.dumps(summary, indent=1))
    rec = {
        "benchmark": "first_calls",
        "workload": "README example: mlp([5, 20, 1], bias=True), relu, "
        "20 teacher points (key 0), glorot init (key 1), t1 = 2, rtol = atol = 1e-8 "
        "(kink_aware_flow: its defaults)",
        "rounds": args.rounds,
        "cpus": sorted(os.sched_getaffinity(0) if cpus is None else cpus),
        "busy": args.busy,
        "runs": runs,
        "summary": summary,
    }
    if before is not None:
        rec["before"] = {
            **checkout(before),
            "runs": runs_before,
            "summary": _summary(runs_before),
        }
    write_json(path, rec)


def _summary(runs: dict) -> dict:
    """Median and range over rounds of each call's times."""
    summary = {}
    for w in WHAT[1:]:
        assert all(x["success"] for x in runs[w]), f"{w} failed"
        for key in ("first_s", "first_compile_s", "first_xla_s", "again_s", "again_compile_s"):
            vals = [x[key] for x in runs[w]]
            summary[f"{w}_{key}"] = statistics.median(vals)
            summary[f"{w}_{key}_range"] = [min(vals), max(vals)]
    return summary


if __name__ == "__main__":
    main()
