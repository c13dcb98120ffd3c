"""The CLI's default sweep on one CPU device against one per core, side by side: wall
time, engine time, peak memory and trajectories per second of
`invariant-jax sweep --graph example --n-inits N` (the demo DAG, exact ReLU flow), each
in a fresh process.

Each arm is a fresh `python -m invariant_jax sweep` with `JAX_NUM_CPU_DEVICES=K` (the CLI
otherwise gives JAX one device per core) into a new temporary folder, without the
persistent compilation cache (so the first call's compiling is in the wall time, as for
a new user). Arms alternate within a round, and the order flips every round. Recorded per
arm: wall time of the whole command (engine, summaries, table; figures off), the
engine's own seconds, the child's peak RSS (`wait4`), the trajectories per second, and
the status counts from the folder's `summary.json` (every non-`ok` trajectory, the
moonshot's goal is none). The JSON's `ratio` is trajectories per second of the most
devices over one device, per round (issue 27's goal: >= 1.8 on 2 cores).

`--warm` adds, after the arms above, each arm again in a fresh process whose new, empty
compilation cache a 64-init sweep filled first (`warm_up_wall_s`): the CLI's disk cache
serving a second run, so the ratio without compiling.

Usage: python benchmarks/sweep_cores.py [--n-inits 100000] [--devices 1 2] [--rounds 1] [--warm]
    [--out benchmarks/results/sweep_cores.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ROOT = Path(__file__).resolve().parent.parent


def arm(devices: int, n_inits: int, work: Path, warm: bool = False) -> dict:
    out = work / f"run_{devices}dev_{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(JAX_NUM_CPU_DEVICES=str(devices), INVARIANT_JAX_NO_CACHE="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    warm_up = None
    if warm:  # a new empty compilation cache, filled by a 64-init sweep first (the CLI's disk cache)
        del env["INVARIANT_JAX_NO_CACHE"]
        env["JAX_COMPILATION_CACHE_DIR"] = str(work / f"cache_{devices}dev_{time.monotonic_ns()}")
        cmd = [sys.executable, "-m", "invariant_jax", "sweep", "--graph", "example", "--n-inits", "64"]
        t = time.perf_counter()
        cmd += ["--out", str(out) + "_warm_up", "--no-progress", "--no-figures"]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        warm_up = time.perf_counter() - t
    cmd = [sys.executable, "-m", "invariant_jax", "sweep", "--graph", "example", "--n-inits", str(n_inits)]
    cmd += ["--out", str(out), "--no-progress", "--no-figures"]
    load = list(os.getloadavg())
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the sweep with {devices} devices failed:\n{err[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    statuses = {k: summary[k] for k in summary if k.startswith("status_")}
    return dict(
        devices=devices,
        n_inits=n_inits,
        compilation_cache="filled by a 64-init sweep first" if warm else "none",
        warm_up_wall_s=warm_up,
        wall_s=wall,
        engine_s=summary["engine_seconds"],
        peak_rss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        trajectories_per_s=n_inits / wall,
        engine_trajectories_per_s=n_inits / summary["engine_seconds"],
        engine_devices=summary["engine_devices"],
        not_ok=n_inits - statuses["status_ok"],
        statuses=statuses,
        ambiguous_events=summary.get("ambiguous_events"),
        load_average_before=load,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-inits", type=int, default=100_000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--warm",
        action="store_true",
        help="also each arm again with a compilation cache that a 64-init sweep filled first (in a fresh "
        "process, as the CLI's disk cache serves a second run): the ratio without compiling",
    )
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/sweep_cores.json)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ij-sweep-cores-") as tmp:
        for r in range(args.rounds):
            for warm in (False, True) if args.warm else (False,):
                for d in args.devices if r % 2 == 0 else args.devices[::-1]:
                    row = dict(round=r, **arm(d, args.n_inits, Path(tmp), warm))
                    rows.append(row)
                    print(
                        f"round {r} devices {d} cache {row['compilation_cache']}: wall {row['wall_s']:.1f} s, "
                        f"engine {row['engine_s']:.1f} s, {row['trajectories_per_s']:.0f} traj/s, "
                        f"peak {row['peak_rss_mb']:.0f} MB, not ok {row['not_ok']}",
                        flush=True,
                    )
    most, one = max(args.devices), min(args.devices)
    ratio = []
    for r in range(args.rounds):
        for cache in dict.fromkeys(x["compilation_cache"] for x in rows):
            by = {x["devices"]: x for x in rows if x["round"] == r and x["compilation_cache"] == cache}
            ratio.append(
                dict(
                    round=r,
                    compilation_cache=cache,
                    wall=by[most]["trajectories_per_s"] / by[one]["trajectories_per_s"],
                    engine=by[most]["engine_trajectories_per_s"] / by[one]["engine_trajectories_per_s"],
                )
            )
    write_json(
        output_path(args.out, "sweep_cores.json"),
        dict(
            benchmark="sweep_cores",
            workload="invariant-jax sweep --graph example (the demo DAG, exact ReLU flow, CLI defaults), "
            "figures off, no compilation cache",
            settings=dict(n_inits=args.n_inits, devices=args.devices, rounds=args.rounds),
            rows=rows,
            ratio=ratio,
        ),
    )


if __name__ == "__main__":
    main()
