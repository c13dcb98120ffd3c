"""Shampine's filtered error estimate (`ij.FilteredError`) against the plain one, side by
side on Fig. 2(c, d)'s committed runs of the flat-channels paper (issue 28: the settled
hover's step count).

For each mu, both solvers (`--solvers`, default `kvaerno5_newton` and
`kvaerno5_newton_filtered`) run our gradient flow from the start of the authors' ODE
phase to their last saved time, with their `maxnorm` penalty (`--penalty unscaled`, as
`channels_saddle_split.py` finds their runs used), and are compared with all their saved
rows. The default mus are the runs that hover at `maxnorm` for long (heavy: -1.6, -1,
1.4, 2.2), the quick ones (light: -2, 0.5) and the two that start on a saddle of the mu
line (mu = 0, 1: one hidden neuron with output weight 0).

Per run: steps and rejected steps, the first call's wall time with its XLA compilations
(count and seconds, `jax.monitoring`), a warm second call when the first took under
`--warm-below` seconds, rows reached, the largest distance to their rows, and the MSE and
norm at the last row. Tasks (mu, solver) share `--workers` processes; a worker that ran
the same shapes and solver before compiles nothing, which the counts show.

`--resume FILE` keeps the runs of an earlier output of this script made with the same
settings (their commit, rtol, max_steps, maxnorm) and runs only the tasks it lacks; each
run records the commit it ran at. `--again MU:SOLVER,...` reruns some of the kept tasks
as a check that the two commits compute the same: the JSON's `again` compares their
steps, rejected steps and result.

Usage: python benchmarks/filtered_error.py --repo /path/to/channels-to-infinity.git
       [--mus=1,-1.6,-1,0,2.2,1.4,-2,0.5] [--solvers kvaerno5_newton,kvaerno5_newton_filtered]
       [--rtol 1e-8] [--max-steps 20000] [--warm-below 60] [--workers 2]
       [--resume benchmarks/results/filtered_error.json --again -1:kvaerno5_newton]
       [--out benchmarks/results/filtered_error.json]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

import numpy as np

from _output import CompileCounter, output_path, provenance, write_json  # benchmarks/_output.py
from channels_saddle_split import _read, _theta, penalty_strength, their_files

MUS = "1,-1.6,-1,0,2.2,1.4,-2,0.5"  # the longest first: two workers finish together
SOLVERS = "kvaerno5_newton,kvaerno5_newton_filtered"
_COUNTER = None  # one per worker process


def one_run(
    repo: str,
    commit: str,
    path: str,
    mu: float,
    solver: str,
    rtol: float,
    max_steps: int,
    warm_below: float,
    maxnorm: float,
) -> dict:
    global _COUNTER
    import jax

    jax.config.update("jax_enable_x64", True)
    import warnings

    import invariant_jax as ij
    import invariant_jax.channels as ch

    warnings.filterwarnings("ignore", category=ij.NoConservationLaw)
    _COUNTER = _COUNTER or CompileCounter()
    r = _read(repo, commit, path)["res"]
    X, Y = np.asarray(r["input"]).T, np.asarray(r["target"]).T
    n = len(Y)
    net = ij.DAGNetwork(ij.mlp([2, 3, 1]), "g", edge_weights=_theta(r["init"]))
    ts = np.array([float(t) for t in r["trajectory"]])
    P = np.array([_theta(p) for p in r["trajectory"].values()])
    their_loss = np.asarray(r["loss_curve"])[: len(ts)]

    def flow():
        t0 = time.perf_counter()
        f = ij.gradient_flow(
            net,
            X,
            Y,
            2 * n * ts[-1],
            loss=ij.Objective("mse", regularizer=ch.MaxnormPenalty(maxnorm), strength=penalty_strength("unscaled", n)),
            solver=ij.SolverOptions(solver, rtol=rtol, atol=rtol, max_steps=max_steps),
            saveat=ij.SaveTimes(2 * n * ts),
            throw=False,
        )
        f.thetas.block_until_ready()
        return f, time.perf_counter() - t0

    _COUNTER.reset()
    f, first = flow()
    compiled = dict(n=_COUNTER.n, seconds=_COUNTER.seconds)
    warm = flow()[1] if first < warm_below else None
    reached = np.all(np.isfinite(np.asarray(f.thetas)), axis=1)  # rows past a failure are not saved
    Q = np.asarray(f.thetas)[reached]
    dist = np.linalg.norm(Q - P[reached], axis=1)
    mse = jax.jit(lambda th: 2 * ij.network_loss(net.with_edge_weights(th), X, Y))
    return dict(
        mu=mu,
        solver=solver,
        result=str(ij.result_name(f.result)),
        success=bool(f.success),
        steps=int(np.asarray(f.stats["num_steps"])),
        rejected_steps=int(np.asarray(f.stats["num_rejected_steps"])),
        first_call_seconds=first,
        compilations=compiled,
        warm_seconds=warm,
        rows_reached=int(reached.sum()),
        rows=len(ts),
        max_distance=float(dist.max()),
        max_relative_distance=float((dist / np.linalg.norm(P[reached], axis=1)).max()),
        distance_at_last=float(dist[-1]),
        loss_at_last=dict(theirs=float(their_loss[reached][-1]), ours=float(mse(Q[-1]))),
        weightnorm_at_last=dict(theirs=float(np.linalg.norm(P[reached][-1])), ours=float(np.linalg.norm(Q[-1]))),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", required=True, help="git directory of flavio-martinelli/channels-to-infinity")
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--mus", default=MUS, help="comma-separated mu of their files")
    p.add_argument("--solvers", default=SOLVERS, help="comma-separated names in ij.SOLVERS")
    p.add_argument("--rtol", type=float, default=1e-8, help="rtol = atol")
    p.add_argument("--max-steps", type=int, default=20_000)
    p.add_argument("--warm-below", type=float, default=60.0, help="a warm second call when the first took less (s)")
    p.add_argument("--maxnorm", type=float, default=1e3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--resume", default=None, help="an earlier output: keep its runs, run only the missing tasks")
    p.add_argument("--again", default="", help="with --resume: MU:SOLVER,... of its runs to rerun as a check")
    p.add_argument("--out", default=None, help="default: benchmarks/results/local/filtered_error.json")
    args = p.parse_args()
    import invariant_jax as ij

    solvers = args.solvers.split(",")
    unknown = [s for s in solvers if s not in ij.SOLVERS]
    if unknown:
        raise SystemExit(f"--solvers {unknown}: not solver names; use names from {sorted(ij.SOLVERS)}.")
    out = output_path(args.out, "filtered_error.json")
    commit, files = their_files(args.repo, args.commit)
    mus = [float(m) for m in args.mus.split(",")]
    missing = [m for m in mus if m not in files]
    if missing:
        raise SystemExit(f"--mus {missing}: no such file; the files have mu in {sorted(files)}.")
    tasks = [(m, s) for m in mus for s in solvers]
    kept, resumed, again = _resumed(args, commit, tasks)
    if all(k in kept and k not in again for k in tasks):
        raise SystemExit(f"--resume {args.resume}: it has every task already; give --again MU:SOLVER to rerun some.")
    t = time.perf_counter()
    runs = []
    here = provenance()["commit"]
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                one_run, args.repo, commit, files[m], m, s, args.rtol, args.max_steps, args.warm_below, args.maxnorm
            )
            for m, s in tasks
            if (m, s) not in kept or (m, s) in again
        ]
        for f in as_completed(futures):
            run = dict(f.result(), commit=here)
            runs.append(run)
            print(
                f"mu = {run['mu']:g}, {run['solver']}: {run['steps']} steps ({run['rejected_steps']} rejected), "
                f"{run['rows_reached']}/{run['rows']} rows, max distance {run['max_distance']:.1e}, "
                f"{run['first_call_seconds']:.0f} s",
                flush=True,
            )
            write_json(
                out,
                dict(
                    their_repo="flavio-martinelli/channels-to-infinity",
                    their_commit=commit,
                    solvers=solvers,
                    rtol=args.rtol,
                    max_steps=args.max_steps,
                    maxnorm=args.maxnorm,
                    penalty="unscaled",
                    warm_below=args.warm_below,
                    wall_seconds=time.perf_counter() - t,
                    complete=len(runs) == len(futures),
                    resumed_from=resumed,
                    again=_compared(runs, kept, again),
                    runs=sorted(  # an --again task's kept run stays; its rerun is in `again`
                        [r for r in runs if (r["mu"], r["solver"]) not in again] + list(kept.values()),
                        key=lambda r: (r["mu"], solvers.index(r["solver"])),
                    ),
                ),
            )


def _resumed(args, commit, tasks):
    """`(kept runs by (mu, solver), where they came from, tasks to run again)` of `--resume`."""
    if args.resume is None:
        if args.again:
            raise SystemExit("--again reruns tasks of --resume; give --resume FILE too.")
        return {}, None, set()
    try:
        old = json.loads(open(args.resume).read())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--resume {args.resume}: cannot read it as this script's JSON ({e}).") from None
    want = dict(their_commit=commit, rtol=args.rtol, max_steps=args.max_steps, maxnorm=args.maxnorm)
    differ = {k: (old.get(k), v) for k, v in want.items() if old.get(k) != v}
    if differ:
        raise SystemExit(f"--resume {args.resume}: made with other settings (theirs, ours): {differ}.")
    made_at = old["provenance"]["commit"]
    kept = {(r["mu"], r["solver"]): dict(r, commit=r.get("commit", made_at)) for r in old["runs"]}
    kept = {k: r for k, r in kept.items() if k in tasks}
    again = set()
    for item in filter(None, args.again.split(",")):
        mu, _, solver = item.partition(":")
        try:
            mu = float(mu)
        except ValueError:
            raise SystemExit(f"--again {item}: expected MU:SOLVER, e.g. -1:kvaerno5_newton.") from None
        if (mu, solver) not in kept:
            raise SystemExit(f"--again {item}: not a run of {args.resume}; it has {sorted(kept)}.")
        again.add((mu, solver))
    source = dict(path=args.resume, commit=made_at, dirty=old["provenance"].get("dirty"), command=old["command"])
    return kept, source, again


def _compared(runs, kept, again):
    """Each `--again` task's steps, rejected steps and result, kept against rerun."""
    new = {(r["mu"], r["solver"]): r for r in runs}
    out = []
    for k in sorted(again & set(new)):
        a, b = kept[k], new[k]
        out.append(
            dict(
                mu=k[0],
                solver=k[1],
                **{f: dict(kept=a[f], rerun=b[f]) for f in ("steps", "rejected_steps", "result", "max_distance")},
                same=all(a[f] == b[f] for f in ("steps", "rejected_steps", "result")),
            )
        )
    return out


if __name__ == "__main__":
    main()
