"""`invariant-jax check`: run flows from a few initializations and report the drift of c."""

from __future__ import annotations

import argparse

import equinox as eqx
import jax.random as jr
import numpy as np

from .._results import RESULTS, is_success, result_code, result_message
from ..flow import check_conservation
from ..network import DAGNetwork
from ..options import SolverOptions
from ._common import add_data_args, add_graph_args, graph_from_args, teacher_data


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="check that gradient flow conserves c = B~ theta^2",
                       description="Run gradient flow from several random initializations and report, per "
                       "trajectory, the drift of c = B~ theta^2 in units of the tolerance and the "
                       "residual of the identity B~(theta * grad L) = 0.")
    add_graph_args(p)
    add_data_args(p)
    add_check_args(p)
    p.set_defaults(run=run)


def add_check_args(p) -> None:
    p.add_argument("--activation", default="relu")
    p.add_argument("--init", default="glorot")
    p.add_argument("--n-inits", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t1", type=float, default=1.0)
    p.add_argument("--rtol", type=float, default=1e-10)
    p.add_argument("--atol", type=float, default=1e-10)
    p.add_argument("--solver", default="tsit5")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--force", action="store_true", help="measure even for a non-homogeneous activation")


def run(args) -> int:
    if args.n_inits < 1:
        raise ValueError(f"--n-inits must be >= 1; got {args.n_inits}.")
    g = graph_from_args(args)
    X, Y = teacher_data(g, args, args.activation)
    keys = jr.split(jr.key(args.seed), args.n_inits)
    nets = eqx.filter_vmap(lambda k: DAGNetwork(g, args.activation, key=k, init=args.init))(keys)
    opts = SolverOptions(args.solver, rtol=args.rtol, atol=args.atol, max_steps=args.max_steps)
    rep = check_conservation(nets, X, Y, t1=args.t1, solver=opts, force=args.force)
    print(f"graph: {g}  activation: {args.activation}  data: {X.shape[0]} teacher samples  "
          f"t1={args.t1:g} (gradient-flow time of L = (1/2N) sum ||f - y||^2)")
    print(f"solver: {args.solver}  rtol={args.rtol:g}  atol={args.atol:g}  float64")
    print(rep.table())
    verdict = _verdict(rep, args)
    if not rep.homogeneous:
        verdict += " (activation not positively homogeneous: no law expected)"
    print(f"c = B~ theta^2: {verdict}")
    return 0 if (rep.passed or not rep.homogeneous) else 1


def _verdict(rep, args) -> str:
    """Name the real failure: failed trajectories (step budget, non-finite values) come
    before drift, which is judged on the trajectories that finished."""
    n = len(rep.drift)
    codes = np.asarray(result_code(rep.result))
    drifted = codes == int(result_code(RESULTS.drift_exceeded))  # judged below, on finished ones
    failed = [i for i in range(n) if not (bool(is_success(codes[i])) or drifted[i])]
    nonfinite = [i for i in range(n) if not (np.isfinite(rep.loss_final[i]) and np.isfinite(rep.drift[i]))]
    parts = []
    if failed:
        budget = [i for i in failed if int(rep.num_steps[i]) >= args.max_steps]
        msgs = sorted({str(result_message(codes[i])) for i in failed})
        what = (f"{len(budget)} of {n} trajectories used the whole step budget (--max-steps {args.max_steps}); "
                "raise --max-steps, shorten --t1 or loosen --rtol/--atol" if budget else
                f"{len(failed)} of {n} trajectories failed ({'; '.join(msgs)})")
        parts.append(what)
    if nonfinite:
        parts.append(f"{len(nonfinite)} of {n} trajectories reached non-finite values (inits {nonfinite}); "
                     "lower --t1 or the learning problem's scale")
    ok = [i for i in range(n) if i not in failed and i not in nonfinite]
    if ok:
        worst = float(np.max(np.asarray(rep.drift_in_tol)[ok]))
        if worst > 100:
            parts.append(f"drift up to {worst:.3g} tolerance units (> 100) on the finished trajectories: "
                         "NOT conserved to solver tolerance")
        elif parts:
            parts.append(f"the {len(ok)} finished trajectories drift at most {worst:.3g} tolerance units")
    if not parts:
        return "conserved to solver tolerance"
    return "; ".join(parts)


def build_default_args():
    p = argparse.ArgumentParser()
    add_graph_args(p)
    add_data_args(p)
    add_check_args(p)
    return p.parse_args([])
