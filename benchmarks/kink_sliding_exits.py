"""Sliding weights checked inside each step, against the crossing part only: two rules
side by side.

- `default`: at `INTERIOR_POINTS` inside each step the event condition is checked, the
  whole of it while pairs slide (their weights `lam` leaving `(0, 1)`: a Filippov solve
  per point), its crossing part otherwise (a forward pass per point);
- `crossing_only`: the crossing part only (`KinkIntegrator(interior_sliding=False)`; the
  rule from cb3d6ec to 2909e6b), so a sliding weight that leaves `(0, 1)` and comes back
  within one step is not seen.

Workloads (ReLU, float64, Tsit5 inside, exact mode): `demo`, the CLI's default sweep's
first `--demo-inits` inits (light-tailed; a few percent of its trajectories slide), and
`heavy`, the 5-20-1 workload of `sweep_throughput.py` (`_bare.workload`; heavy-tailed,
its trajectories slide). At each of `--tols` (rtol = atol), per rule, in one process:
the first call (engine built, compiled and run on two inits), the warm time of the whole
batch (`KinkEngine`, exact mode, 64 slots, one device; the fastest of `--repeats`), the
steps and events per trajectory, and the gradients and condition evaluations counted in
an instrumented one-slot run on the first `--count-inits` inits that slide
(`_bare.count_kink_work`), priced by `_bare.BareCosts`. Every trajectory whose event
count differs between the rules is run again at rtol = atol = 1e-12 with the default
rule (the reference), and listed with both rules' event counts and their
`max |theta(t1) - reference|`.

    PYTHONPATH=. python benchmarks/kink_sliding_exits.py --out benchmarks/results/kink_sliding_exits.json
"""

from __future__ import annotations

import argparse
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--demo-inits", type=int, default=20_000)
p.add_argument("--heavy-inits", type=int, default=64)
p.add_argument("--count-inits", type=int, default=100, help="sliding inits whose evaluations are counted")
p.add_argument("--repeats", type=int, default=2)
p.add_argument("--tols", type=float, nargs="+", default=[1e-5, 1e-6, 1e-8], help="rtol = atol of each arm")
p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/kink_sliding_exits.json)")
args = p.parse_args()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from _bare import BareCosts, count_kink_work, kink_engine, kink_workloads, run_sorted  # noqa: E402 (benchmarks/_bare.py)
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.sweep import status_is_success  # noqa: E402

RULES = {"default": True, "crossing_only": False}  # interior_sliding


def engine(prob, rule, *, tol, slots=64):
    return kink_engine(prob, tol=tol, slots=slots, interior_sliding=RULES[rule])


def arm(prob, rule, tol, costs, sliding):
    n = prob[-1]
    t = time.perf_counter()
    eng = engine(prob, rule, tol=tol)
    run_sorted(eng, range(2))
    first = time.perf_counter() - t
    warm = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        rec = run_sorted(eng, range(n))
        warm.append(time.perf_counter() - t)
    counted = sliding[: args.count_inits]
    work = count_kink_work(lambda: engine(prob, rule, tol=tol, slots=1), counted)
    row = dict(
        rule=rule,
        tol=tol,
        first_call_s=first,
        warm_s=min(warm),
        warm_s_all=warm,
        not_ok=int(np.sum(~status_is_success(rec["status"]))),
        steps_per_traj=float(rec["num_steps"].mean()),
        events_per_traj=float(rec["num_events"].mean()),
        sliding_trajectories=int(np.sum(rec["sliding_time"] > 0)),
        counted_sliding_inits=len(counted),
        gradients_per_counted_traj=float(work[:, 0].mean()),
        conditions_per_counted_traj=float(work[:, 1].mean()),
        bare_us_per_counted_traj=1e6 * costs.of(work) / len(counted),
    )
    return row, rec


def main():
    out = output_path(args.out, "kink_sliding_exits.json")
    result = dict(rules=list(RULES), workloads={})
    for name, prob in kink_workloads(args.demo_inits, args.heavy_inits).items():
        net, X, Y, n = prob[0], prob[1], prob[2], prob[-1]
        costs = BareCosts(net, X, Y, [1], reps=20000)
        costs.measure()
        # the inits that slide (at the default tolerance's first arm) are the ones counted
        probe = run_sorted(engine(prob, "default", tol=args.tols[0]), range(n))
        sliding = [int(i) for i in np.flatnonzero(probe["sliding_time"] > 0)]
        rows, differ = [], []
        for tol in args.tols:
            recs = {}
            for rule in RULES:
                row, recs[rule] = arm(prob, rule, tol, costs, sliding)
                rows.append(row)
                print(name, {k: v for k, v in row.items() if k != "warm_s_all"}, flush=True)
            ne = {r: recs[r]["num_events"] for r in RULES}
            idx = np.flatnonzero(ne["default"] != ne["crossing_only"])
            if len(idx):
                ref = run_sorted(engine(prob, "default", tol=1e-12), idx)
                for j, i in enumerate(idx):
                    entry = dict(tol=tol, index=int(i), events_reference=int(ref["num_events"][j]))
                    for r in RULES:
                        entry[f"events_{r}"] = int(ne[r][i])
                        entry[f"sliding_time_{r}"] = float(recs[r]["sliding_time"][i])
                        entry[f"error_{r}"] = float(np.max(np.abs(recs[r]["theta_final"][i] - ref["theta_final"][j])))
                    entry["sliding_time_reference"] = float(ref["sliding_time"][j])
                    differ.append(entry)
                    print(name, entry, flush=True)
        by = {(r["rule"], r["tol"]): r for r in rows}
        keys = ("warm_s", "gradients_per_counted_traj", "conditions_per_counted_traj", "bare_us_per_counted_traj")
        ratios = {  # `default` over `crossing_only` at each tolerance
            f"{tol:g}": {k: by[("default", tol)][k] / by[("crossing_only", tol)][k] for k in keys} for tol in args.tols
        }
        result["workloads"][name] = dict(
            n_inits=n,
            sliding_inits=len(sliding),
            gradient_us=1e6 * costs[1]["grad"],
            rows=rows,
            ratios=ratios,
            differ=differ,
        )
        print(name, "default over crossing_only:", ratios, flush=True)
    write_json(out, result)


if __name__ == "__main__":
    main()
