"""Step-size control after a failed step, on the two regimes of the flat-channels flows.

A failed step (an implicit stage solve that did not converge) is retried at `factormin`
times its size. `diffrax.PIDController` then grows the step by up to 10 per step, back to
where the stage solves fail; `ij.RecoveringPIDController` grows it by at most `recovery`
(1.5) per step until the next failure, and with a `horizon` only while the step starts
within `horizon` failed step sizes of the failure. Arms (`--arms`): `pid`, `recovering`
(no horizon: the flow phase's controller) and `horizon:K`.

The two regimes:

- **channel passages**: study runs of the loss-levels `g`-without-bias group (`--runs
  r:seed`, as `channels_breakdown.py` runs them: `ch.flow_phase`, `flow_stop="stop"`,
  loop engine, 2000 steps), where the step size is bounded by where Newton converges.
  Per run: steps, whether the flow passed `maxnorm`, and the Jacobians (stage Newton
  iterations over all attempted steps, counted as `channels_breakdown.py` counts them);
- **hovers to t ~ 1e300**: the authors' split-saddle runs (Fig. 2(c, d),
  `channels_saddle_split.py`'s `one_run` at rtol = atol = 1e-8; `--mus`), whose steps grow
  by decades. Per run: steps, rejected steps and the largest distance to their rows.

The controller is the arm's `ij.StepRecovery` (`FlowPhaseOptions(recovery=)`,
`SolverOptions(recovery=)`; None for `pid`), each arm in a fresh process. Walls are first
calls (compilation included) and, for the study runs, warm calls.

Usage: PYTHONPATH=. python benchmarks/channels_step_control.py --repo <channels-to-infinity git dir>
       [--arms pid,recovering,horizon:10,horizon:100] [--runs 3:0,3:2,4:0,4:2,5:0,5:2]
       [--mus=-1.6,0,1] [--out PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import channels_saddle_split as split  # noqa: E402 (loads no JAX)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)


def arm_recovery(arm: str, flag: str = "--arms"):
    """The arm's `ij.StepRecovery` (growth 1.5; `horizon:K`: with horizon K), None for
    `pid`; anything else is refused (naming `flag`)."""
    import invariant_jax as ij

    if arm == "pid":
        return None
    if arm == "recovering":
        return ij.StepRecovery(1.5)
    try:
        k = float(arm.split(":", 1)[1]) if arm.startswith("horizon:") else 0.0
    except ValueError:
        k = 0.0
    try:
        if not k > 0:
            raise ValueError
        return ij.StepRecovery(1.5, horizon=k)
    except ValueError:
        raise SystemExit(f"{flag}: {arm!r} is not pid, recovering or horizon:K with K > 0.") from None


def run_arm(arm: str, runs: list[tuple[int, int]], repo: str, mus: list[float]) -> dict:
    """One arm in this (fresh) process: the study runs, then the split-saddle runs."""
    import warnings

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import invariant_jax as ij
    import invariant_jax.losses as losses
    from channels_breakdown import counting
    from channels_flow_budget import arm_options
    from channels_hover import study_run
    from invariant_jax import channels as ch

    warnings.simplefilter("ignore", ij.NoConservationLaw)
    recovery = arm_recovery(arm)
    X, Y = ij.rosenbrock_grid(10**4)
    flow = arm_options("kvaerno5_newton", flow_stop="stop", max_flow_steps=2000, recovery=recovery)
    study = []
    for r, seed in runs:
        net = study_run(r, seed)
        Xc, Yc = losses.check_data(net.graph, X, Y)
        go = lambda: ch.flow_phase(net, Xc, Yc, flow)  # noqa: E731
        t = time.perf_counter()
        res = jax.block_until_ready(go())
        first = time.perf_counter() - t
        t = time.perf_counter()
        jax.block_until_ready(go())
        warm = time.perf_counter() - t
        study.append(
            dict(
                r=r,
                seed=seed,
                steps=int(res.n_steps[0]),
                passed_maxnorm=bool(np.asarray(res.weightnorm_max)[0] >= ch.MAXNORM),
                result=str(ij.result_name(res.result)[0]),
                jacobians=counting(lambda: go().theta_final)["hessian"],
                first_call_seconds=first,
                warm_seconds=warm,
            )
        )
        print(f"{arm} r={r} seed={seed}: {study[-1]['steps']} steps, {study[-1]['jacobians']} Jacobians", flush=True)
    commit, files = split.their_files(repo, "HEAD")
    saddle = []
    for mu in mus:
        s = split.one_run(
            repo, commit, files[mu], mu, np.inf, 1e-8, 20_000, "kvaerno5_newton", 1e3, "unscaled", recovery=recovery
        )
        saddle.append(
            dict(
                mu=mu,
                steps=s["our_steps"],
                rejected=s["our_rejected_steps"],
                result=s["our_result"],
                max_distance=s["max_distance"],
                first_call_seconds=s["our_seconds"],
            )
        )
        print(f"{arm} mu={mu:g}: {s['our_steps']} steps ({s['our_rejected_steps']} rejected)", flush=True)
    return dict(
        arm=arm,
        study_runs=study,
        saddle_split=saddle,
        totals=dict(
            study_jacobians=sum(s["jacobians"] for s in study),
            study_steps=sum(s["steps"] for s in study),
            study_passed=sum(s["passed_maxnorm"] for s in study),
            saddle_steps=sum(s["steps"] for s in saddle),
        ),
        their_commit=commit,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="git directory of flavio-martinelli/channels-to-infinity")
    ap.add_argument("--arms", default="pid,recovering,horizon:10,horizon:100")
    ap.add_argument("--runs", default="3:0,3:2,4:0,4:2,5:0,5:2", help="r:seed pairs of the g-without-bias group")
    ap.add_argument("--mus", default="-1.6,0,1", help="split-saddle runs by mu")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/...)")
    args = ap.parse_args()
    arms = args.arms.split(",")
    for a in arms:
        arm_recovery(a)  # refused before any work
    runs = [tuple(int(v) for v in p.split(":")) for p in args.runs.split(",")]
    mus = [float(m) for m in args.mus.split(",")]
    try:  # their files, read before any work
        files = split.their_files(args.repo, "HEAD")[1]
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"--repo {args.repo}: not a git directory of channels-to-infinity.") from None
    missing = [m for m in mus if m not in files]
    if missing:
        raise SystemExit(f"--mus {missing}: no such split-saddle file; theirs have mu in {sorted(files)}.")
    path = output_path(args.out, "channels_step_control.json")
    start, rows = time.perf_counter(), []
    for arm in arms:  # a fresh process per arm, so that each arm's first calls compile
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            rows.append(pool.submit(run_arm, arm, runs, args.repo, mus).result())
        print(f"{arm}: {rows[-1]['totals']}", flush=True)
    write_json(
        path,
        dict(
            benchmark="channels_step_control",
            recovery=1.5,
            factormin=0.2,
            study_runs="loss-levels g without bias, flow_stop='stop', loop engine, 2000 steps",
            saddle_split="the authors' Fig. 2(c, d) runs, rtol = atol = 1e-8, unscaled penalty",
            total_seconds=time.perf_counter() - start,
            arms=rows,
        ),
    )


if __name__ == "__main__":
    main()
