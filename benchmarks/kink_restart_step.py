"""How a kink-aware segment starts and where it looks for events: three rules side by side.

- `default`: each segment after the first starts with the step the controller proposed
  after the event's step (the step `diffeqsolve` would have taken next had the event not
  stopped it), and the crossing part of the event condition is also checked at
  `INTERIOR_POINTS` inside each step, so a pair that crosses its surface and back within
  one step is seen (since cb3d6ec);
- `ends_only`: the same step, the condition at step ends only (`KinkIntegrator(
  interior_check=False)`; the default of b781332);
- `reselect`: each segment selects its first step afresh, as `diffeqsolve` with
  `dt0=None` does (diffrax's initial step selection: two more gradients, and a first
  step that is often short), the condition at step ends only (`reselect_step=True,
  interior_check=False`; the default before b781332).

Workloads (ReLU, float64, Tsit5 inside, exact mode):

- `demo`: the CLI's default sweep (`invariant-jax sweep --graph example`: `SweepConfig()`),
  its first `--demo-inits` inits: light-tailed (a median of about 12 steps);
- `heavy`: the 5-20-1 workload of `sweep_throughput.py` (`_bare.workload`), 11 saves:
  heavy-tailed (trajectories slide along kinks).

Fewer steps give a larger error at the same tolerance, so each rule runs at each of
`--tols` (rtol = atol): compare the rules at equal error, not only at equal tolerance.
For each workload, tolerance and rule, in one process: the first call (engine built,
compiled and run on two inits) and the warm time of the whole batch (`KinkEngine`, exact
mode, 64 slots, one device; the fastest of `--repeats`); per trajectory the steps,
rejected steps and events from the records, and the gradients and event-condition
evaluations counted in an instrumented one-slot run (`_bare.count_kink_work`; on the
first `--count-inits`; the interior checks are forward passes of the crossing part of the
condition, counted as conditions); the bare cost of those counts (`_bare.BareCosts`);
the error, `max |theta_final - reference|` per trajectory, the reference the kink-aware
flow at rtol = atol = 1e-12 (default rules); the number of trajectories whose event count
differs from the reference's; the conservation drift. `ratios` divides each rule's
numbers by `default`'s at each tolerance.

    PYTHONPATH=. python benchmarks/kink_restart_step.py --out benchmarks/results/kink_restart_step.json
"""

from __future__ import annotations

import argparse
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--demo-inits", type=int, default=1000)
p.add_argument("--heavy-inits", type=int, default=64)
p.add_argument("--count-inits", type=int, default=300, help="inits whose evaluations are counted (per workload)")
p.add_argument("--repeats", type=int, default=3)
p.add_argument("--tols", type=float, nargs="+", default=[1e-8, 1e-9], help="rtol = atol of each arm")
p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/kink_restart_step.json)")
args = p.parse_args()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from _bare import BareCosts, count_kink_work, kink_engine, kink_workloads, run_sorted  # noqa: E402 (benchmarks/_bare.py)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.sweep import STATUSES  # noqa: E402

RULES = {  # (reselect_step, interior_check)
    "default": (False, True),
    "ends_only": (False, False),
    "reselect": (True, False),
}


def engine(prob, rule, *, slots=64, tol=None):
    reselect, interior = RULES[rule]
    return kink_engine(prob, tol=tol, slots=slots, reselect_step=reselect, interior_check=interior)


def run(eng, n):
    return run_sorted(eng, np.arange(n))


def arm(prob, rule, tol, reference, costs):
    n = prob[-1]
    t = time.perf_counter()
    eng = engine(prob, rule, tol=tol)
    run(eng, 2)
    first = time.perf_counter() - t
    warm = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        rec = run(eng, n)
        warm.append(time.perf_counter() - t)
    k = min(args.count_inits, n)
    work = count_kink_work(lambda: engine(prob, rule, slots=1, tol=tol), range(k))
    err = np.max(np.abs(rec["theta_final"] - reference["theta_final"]), axis=1)
    return dict(
        rule=rule,
        tol=tol,
        first_call_s=first,
        warm_s=min(warm),
        warm_s_all=warm,
        statuses={STATUSES[s]: int(c) for s, c in zip(*np.unique(rec["status"], return_counts=True))},
        steps_per_traj=float(rec["num_steps"].mean()),
        rejected_per_traj=float(rec["num_rejected_steps"].mean()),
        events_per_traj=float(rec["num_events"].mean()),
        events_differ=int(np.sum(rec["num_events"] != reference["num_events"])),
        counted_inits=k,
        gradients_per_traj=float(work[:, 0].mean()),
        conditions_per_traj=float(work[:, 1].mean()),
        bare_us_per_traj=1e6 * costs.of(work) / k,
        err_max=float(err.max()),
        err_median=float(np.median(err)),
        err_p90=float(np.quantile(err, 0.9)),
        drift_max=float(np.max(np.abs(rec["drift"]))),
    )


def main():
    out = output_path(args.out, "kink_restart_step.json")
    result = dict(rules=list(RULES), workloads={})
    for name, prob in kink_workloads(args.demo_inits, args.heavy_inits).items():
        net, X, Y, n = prob[0], prob[1], prob[2], prob[-1]
        reference = run(engine(prob, "default", tol=1e-12), n)
        costs = BareCosts(net, X, Y, [1], reps=20000)
        costs.measure()
        rows = [arm(prob, rule, tol, reference, costs) for tol in args.tols for rule in RULES]
        keys = ("warm_s", "steps_per_traj", "gradients_per_traj", "conditions_per_traj", "bare_us_per_traj")
        by = {(r["rule"], r["tol"]): r for r in rows}
        ratios = {  # each rule over `default` at each tolerance
            f"{tol:g}": {rule: {k: by[(rule, tol)][k] / by[("default", tol)][k] for k in keys} for rule in RULES}
            for tol in args.tols
        }
        result["workloads"][name] = dict(n_inits=n, gradient_us=1e6 * costs[1]["grad"], rows=rows, ratios=ratios)
        for r in rows:
            print(name, {k: v for k, v in r.items() if k != "warm_s_all"}, flush=True)
        print(name, "over default:", ratios, flush=True)
    write_json(out, result)


if __name__ == "__main__":
    main()
