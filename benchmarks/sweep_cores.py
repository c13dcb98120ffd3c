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
moonshot's goal is none). The JSON's `ratio` is trajectories per second of each arm
over one device in one process, per round (issue 27's goal: >= 1.8 on 2 cores).

`--processes K` adds an arm of K processes with one device each, started together into
one folder, each taking its share of the indices as a job array's task does
(`SLURM_ARRAY_TASK_ID/_COUNT`; the store's several-writer path). Its wall time runs
until the last one exits, its engine seconds are the largest of theirs, its CPU seconds
and peak RSS are summed and the largest.

`--warm` adds, after the arms above, each arm again in a fresh process whose new, empty
compilation cache a 64-init sweep filled first (`warm_up_wall_s`): the CLI's disk cache
serving a second run, so the ratio without compiling. A device joins a run only when
the work left outlasts its compiling, so a 64-init sweep compiles on one device, and the
second run compiles the others; `--warm-up-inits N` fills the cache with an `N`-init
sweep instead (large enough, every device's programs).

`--bare K` adds each arm's distance to its bare arithmetic (`benchmarks/_bare.py`): the
gradient and event-condition evaluations of the first K inits, counted in an
instrumented one-slot run, priced at a tight compiled loop's cost, scaled to the arm's
steps (`steps_total`, from its `table.csv`), shared among its cores: `engine_over_bare`
and `wall_over_bare` (1 would be every core doing nothing but the arithmetic).
`--core-ratio SECONDS` adds the machine's own ratio: the bare gradient loop in one
process, then in one process per core at once (the ceiling of the sweep's ratio).

`--slots S1 S2 ...` runs every arm at each `--slots` (the CLI's default otherwise); the
ratios are then taken at equal slots, and also between each arm's best slots
(`slots: "best"`). `--warm-only` keeps only the warm arms. `--graph-args` sweeps another
graph than the demo DAG (`"--graph mlp --widths 5,20,1"`).

Usage: python benchmarks/sweep_cores.py [--n-inits 100000] [--devices 1 2] [--processes 2] [--slots 64 256]
    [--rounds 1] [--warm] [--warm-only] [--bare 1000] [--core-ratio 20] [--graph-args "--graph example"]
    [--out benchmarks/results/sweep_cores.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyarrow import csv as pa_csv

from _bare import config_work, core_ratio  # benchmarks/_bare.py
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ("--graph", "example")  # the CLI's default sweep (`--graph-args` replaces it)


def _printed(stdout: str, key: str = "engine_seconds") -> float:
    """A number the CLI prints in its summary (`engine_seconds`, `engine_host_seconds`)."""
    return float(next(ln.split(":")[1] for ln in stdout.splitlines() if ln.strip().startswith(f"{key}:")))


def arm(
    devices: int,
    n_inits: int,
    work: Path,
    warm: bool = False,
    processes: int = 1,
    slots=None,
    graph=GRAPH,
    warm_up_inits: int = 64,
) -> dict:
    """One arm: `processes` CLI processes with `devices` CPU devices each, into one folder
    (several processes share it as a job array's tasks do: `SLURM_ARRAY_TASK_ID/_COUNT`),
    with `--slots slots` (`None`: the CLI's choice)."""
    out = work / f"run_{processes}proc_{devices}dev_{time.monotonic_ns()}"
    slots_arg = [] if slots is None else ["--slots", str(slots)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(JAX_NUM_CPU_DEVICES=str(devices), INVARIANT_JAX_NO_CACHE="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    warm_up = None
    if warm:  # a new empty compilation cache, filled by a small sweep first (the CLI's disk cache)
        del env["INVARIANT_JAX_NO_CACHE"]
        env["JAX_COMPILATION_CACHE_DIR"] = str(work / f"cache_{processes}proc_{devices}dev_{time.monotonic_ns()}")
        cmd = [sys.executable, "-m", "invariant_jax", "sweep", *graph, "--n-inits", str(warm_up_inits)]
        t = time.perf_counter()
        cmd += ["--out", str(out) + "_warm_up", "--no-progress", "--no-figures", *slots_arg]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        warm_up = time.perf_counter() - t
    cmd = [sys.executable, "-m", "invariant_jax", "sweep", *graph, "--n-inits", str(n_inits)]
    cmd += ["--out", str(out), "--no-progress", "--no-figures", *slots_arg]
    load = list(os.getloadavg())
    t = time.perf_counter()
    procs = []
    for i in range(processes):
        task = dict(SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_TASK_COUNT=str(processes)) if processes > 1 else {}
        logs = (open(work / f"{out.name}_{i}.out", "w+"), open(work / f"{out.name}_{i}.err", "w+"))
        procs.append((subprocess.Popen(cmd, env={**env, **task}, stdout=logs[0], stderr=logs[1], text=True), logs))
    rss, cpu, engine, host = [], 0.0, [], []
    for proc, (so, se) in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        so.seek(0), se.seek(0)
        stdout, err = so.read(), se.read()
        so.close(), se.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the sweep with {processes} x {devices} devices failed:\n{err[-3000:]}")
        rss.append(usage.ru_maxrss / 1024)
        cpu += usage.ru_utime + usage.ru_stime
        engine.append(_printed(stdout))
        host.append(_printed(stdout, "engine_host_seconds"))
    wall = time.perf_counter() - t
    summary = json.loads((out / "summary.json").read_text())  # the last writer's: every record
    steps = pa_csv.read_csv(out / "table.csv", convert_options=pa_csv.ConvertOptions(include_columns=["num_steps"]))
    config = json.loads((out / "manifest.json").read_text())["config"]
    statuses = {k: summary[k] for k in summary if k.startswith("status_")}
    return dict(
        processes=processes,
        devices=devices,
        slots=slots,
        n_inits=n_inits,
        compilation_cache=f"filled by a {warm_up_inits}-init sweep first" if warm else "none",
        warm_up_wall_s=warm_up,
        wall_s=wall,
        engine_s=max(engine),
        engine_s_per_process=engine,
        engine_host_s_per_process=host,
        peak_rss_mb=max(rss),
        peak_rss_mb_per_process=rss,
        cpu_s=cpu,
        trajectories_per_s=n_inits / wall,
        engine_trajectories_per_s=n_inits / max(engine),
        engine_devices=summary["engine_devices"],
        records=sum(statuses.values()),
        not_ok=n_inits - statuses["status_ok"],
        statuses=statuses,
        steps_total=int(steps["num_steps"].to_numpy().sum()),
        steps_median=summary.get("steps_median"),
        steps_max=summary.get("steps_max"),
        ambiguous_events=summary.get("ambiguous_events"),
        trajectories_with_ambiguous_events=summary.get("trajectories_with_ambiguous_events"),
        trajectories_flagged=summary.get("trajectories_flagged"),
        trajectories_flagged_at_a_two_fold=summary.get("trajectories_flagged_at_a_two_fold"),
        trajectories_flagged_without_consistent_modes=summary.get("trajectories_flagged_without_consistent_modes"),
        failures=summary.get("failures"),
        flagged=summary.get("flagged"),
        load_average_before=load,
        _config=config,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-inits", type=int, default=100_000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument(
        "--processes", type=int, default=None, help="also an arm of this many processes with one device each"
    )
    ap.add_argument(
        "--slots", type=int, nargs="+", default=None, help="each arm at each of these --slots (default: the CLI's)"
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--warm",
        action="store_true",
        help="also each arm again with a compilation cache that a 64-init sweep filled first (in a fresh "
        "process, as the CLI's disk cache serves a second run): the ratio without compiling",
    )
    ap.add_argument("--warm-only", action="store_true", help="only the warm arms of --warm")
    ap.add_argument(
        "--warm-up-inits",
        type=int,
        default=64,
        help="the sweep that fills the cache of --warm (64: too small for a second device to join and compile, "
        "so a second run compiles it; large enough, every device's programs are cached)",
    )
    ap.add_argument(
        "--graph-args", default=" ".join(GRAPH), help='the sweep\'s graph options (e.g. "--graph mlp --widths 5,20,1")'
    )
    ap.add_argument(
        "--bare",
        type=int,
        default=None,
        metavar="K",
        help="also each arm's distance to its bare arithmetic: evaluations counted on the first K inits "
        "(kink-aware sweeps), priced by a tight compiled loop, scaled by the arm's steps",
    )
    ap.add_argument(
        "--core-ratio",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also the machine's own ratio: the bare gradient loop in one process, then in one per core at once",
    )
    ap.add_argument("--out", default=None, help="JSON path (committed: benchmarks/results/sweep_cores.json)")
    args = ap.parse_args()
    graph = shlex.split(args.graph_args)
    if args.bare and not _kink_aware(graph):
        raise SystemExit(
            f"--bare counts kink-aware sweeps; --graph-args {args.graph_args!r} is not one. Leave --bare out."
        )
    slots = args.slots or [None]
    arms = [(1, d, s) for s in slots for d in args.devices]
    arms += [(args.processes, 1, s) for s in slots] if args.processes else []
    caches = (True,) if args.warm_only else (False, True) if args.warm else (False,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ij-sweep-cores-") as tmp:
        for r in range(args.rounds):
            for warm in caches:
                for k, d, sl in arms if r % 2 == 0 else arms[::-1]:
                    row = dict(
                        round=r,
                        **arm(
                            d,
                            args.n_inits,
                            Path(tmp),
                            warm,
                            processes=k,
                            slots=sl,
                            graph=graph,
                            warm_up_inits=args.warm_up_inits,
                        ),
                    )
                    rows.append(row)
                    print(
                        f"round {r} {k} process(es) x {d} device(s), slots {sl or 'default'}, cache "
                        f"{row['compilation_cache']}: wall {row['wall_s']:.1f} s, engine {row['engine_s']:.1f} s, "
                        f"{row['trajectories_per_s']:.0f} traj/s, not ok {row['not_ok']}",
                        flush=True,
                    )
    config = rows[0].get("_config")
    for x in rows:
        x.pop("_config", None)
    bare = config_work(config, args.bare) if args.bare else None
    for x in rows if bare else ():
        x["bare_s"] = bare["bare_s_per_step"] * x["steps_total"]
        per_core = x["bare_s"] / (x["processes"] * x["devices"])
        x.update(engine_over_bare=x["engine_s"] / per_core, wall_over_bare=x["wall_s"] / per_core)
    machine = core_ratio(config, os.cpu_count() or 1, args.core_ratio) if args.core_ratio else None
    write_json(
        output_path(args.out, "sweep_cores.json"),
        dict(
            benchmark="sweep_cores",
            workload=f"invariant-jax sweep {args.graph_args} (exact ReLU flow, CLI defaults otherwise; --graph "
            "example is the demo DAG), figures off",
            settings=dict(
                n_inits=args.n_inits,
                devices=args.devices,
                processes=args.processes,
                slots=args.slots,
                rounds=args.rounds,
                warm_only=args.warm_only,
                warm_up_inits=args.warm_up_inits,
                graph_args=args.graph_args,
                bare=args.bare,
                core_ratio_seconds=args.core_ratio,
            ),
            rows=rows,
            ratio=_ratios(rows, args.rounds, min(args.devices)),
            bare=bare,
            machine_core_ratio=machine,
        ),
    )


def _kink_aware(graph: list[str]) -> bool:
    """Whether `invariant-jax sweep` with these options runs the kink-aware flow (the
    given flags as `SweepConfig` fields; the CLI's other checks come when it runs)."""
    from invariant_jax.cli import build_parser
    from invariant_jax.sweep import SweepConfig

    given = vars(build_parser().parse_args(["sweep", *graph]))
    if isinstance(given.get("widths"), str):
        given["widths"] = [int(w) for w in given["widths"].split(",")]
    return SweepConfig(**{k: v for k, v in given.items() if k in SweepConfig.keys()}).kink_aware


def _ratios(rows: list[dict], rounds: int, base_devices: int) -> list[dict]:
    """Trajectories per second of each arm over one process of `base_devices` devices at
    the same slots, per round and cache; and (`slots: "best"`) each device count's best
    slots over the base's best."""
    ratio = []
    for r in range(rounds):
        for cache in dict.fromkeys(x["compilation_cache"] for x in rows):
            group = [x for x in rows if x["round"] == r and x["compilation_cache"] == cache]
            by = {(x["processes"], x["devices"], x["slots"]): x for x in group}
            for (k, d, sl), x in by.items():
                one = by[(1, base_devices, sl)]
                if (k, d) != (1, base_devices):
                    ratio.append(_ratio(r, cache, k, d, sl, x, one))
            if len({x["slots"] for x in group}) > 1:
                best = {}
                for x in group:
                    key = (x["processes"], x["devices"])
                    if key not in best or x["engine_trajectories_per_s"] > best[key]["engine_trajectories_per_s"]:
                        best[key] = x
                for (k, d), x in best.items():
                    if (k, d) != (1, base_devices):
                        ratio.append(_ratio(r, cache, k, d, "best", x, best[(1, base_devices)]))
    return ratio


def _ratio(r, cache, k, d, slots, x, one) -> dict:
    return dict(
        round=r,
        compilation_cache=cache,
        processes=k,
        devices=d,
        slots=slots,
        slots_of=[x["slots"], one["slots"]],
        wall=x["trajectories_per_s"] / one["trajectories_per_s"],
        engine=x["engine_trajectories_per_s"] / one["engine_trajectories_per_s"],
    )


if __name__ == "__main__":
    main()
