"""`invariant-jax check`: run flows from a few initializations and report the drift of c."""

from __future__ import annotations

import argparse

import numpy as np

from .._defaults import DRIFT_TOL_UNITS
from .._results import RESULTS, is_success, result_code, result_from_code, result_message
from ..activations import get_activation
from ..flow import ConservationReport
from ..invariants import identity_residual
from ..network import DAGNetwork
from ..sweep import BatchOptions, SweepConfig, run_sweep
from ._common import graph_from_args
from ._parsers import add_check_args, add_data_args, add_graph_args

_SWEEP_FLAGS = ("activation", "init", "seed", "t1", "rtol", "atol", "solver", "max_steps", "kink_aware")


def check_config(args) -> SweepConfig:
    """The `SweepConfig` of a `check` run: its graph, data and flow flags, `SweepConfig`'s
    defaults for the flags not given."""
    given = {k: getattr(args, k) for k in _SWEEP_FLAGS if getattr(args, k, None) is not None}
    act = given.get("activation", SweepConfig.activation)
    if not get_activation(act).positively_homogeneous and not args.force:
        raise ValueError(
            f"Activation {act!r} is not positively homogeneous, so c = B~ theta^2 is not conserved "
            "and there is nothing to check. Use relu, leaky_relu or linear, or add --force to "
            "measure the drift anyway (rows then say 'no law')."
        )
    return SweepConfig(
        graph=graph_from_args(args), n_inits=args.n_inits, n_samples=args.n_samples, data_seed=args.data_seed, **given
    )


def run(args) -> int:
    if args.n_inits < 1:
        raise ValueError(f"--n-inits must be >= 1; got {args.n_inits}.")
    cfg = check_config(args)
    g = cfg.build_graph()
    X, Y = cfg.build_data(g)
    res = run_sweep(cfg, None, batch=BatchOptions(progress=False))
    template = DAGNetwork(g, cfg.activation, edge_weights=np.zeros(len(g.edges)))
    resid = np.array(
        [
            float(
                np.max(
                    np.abs(identity_residual(template.with_edge_weights(th), X, Y, loss=cfg.loss.loss, relative=True)),
                    initial=0.0,
                )
            )
            for th in res.theta0
        ]
    )
    law = bool(template.is_positively_homogeneous)
    code = np.asarray(result_code(res.result))
    if law:  # drift is an integration error only where a law holds
        code = np.where(
            np.asarray(is_success(code)) & ~(res.drift_in_tol <= DRIFT_TOL_UNITS),
            int(result_code(RESULTS.drift_exceeded)),
            code,
        )
    rep = ConservationReport(
        drift=res.drift,
        drift_relative=res.drift_relative,
        drift_in_tol=res.drift_in_tol,
        identity_residual=resid,
        num_steps=res.num_steps,
        loss_initial=res.loss_initial,
        loss_final=res.loss_final,
        result=result_from_code(code),
        rtol=cfg.rtol,
        atol=cfg.atol,
        homogeneous=law,
    )
    print(
        f"graph: {g}  activation: {cfg.activation}  data: {X.shape[0]} teacher samples  "
        f"t1={cfg.t1:g} (gradient-flow time of L = (1/2N) sum ||f - y||^2)"
    )
    method = "kink-aware (events at kinks, sliding modes)" if cfg.kink_aware else "plain"
    print(
        f"solver: {cfg.solver.solver} {method}  rtol={cfg.rtol:g}  atol={cfg.atol:g}  float64  "
        f"inits fold_in(key({cfg.seed}), i) as in sweep"
    )
    print(rep.table())
    verdict = _verdict(rep, args, cfg.max_steps)
    if not law:
        verdict = (
            "no law: the activation is not positively homogeneous, so nothing conserves c; the drift "
            "above is measured, not an error" + ("" if verdict.startswith("conserved") else f"; {verdict}")
        )
    print(f"c = B~ theta^2: {verdict}")
    return 0 if (rep.passed or not law) else 1


def _verdict(rep, args, max_steps: int) -> str:
    """Name the real failure: failed trajectories (step budget, non-finite values) come
    before drift, which is judged on the trajectories that finished."""
    n = len(rep.drift)
    codes = np.asarray(result_code(rep.result))
    drifted = codes == int(result_code(RESULTS.drift_exceeded))  # judged below, on finished ones
    failed = [i for i in range(n) if not (bool(is_success(codes[i])) or drifted[i])]
    nonfinite = [i for i in range(n) if not (np.isfinite(rep.loss_final[i]) and np.isfinite(rep.drift[i]))]
    parts = []
    if failed:
        budget = [i for i in failed if int(rep.num_steps[i]) >= max_steps]
        msgs = sorted({str(result_message(codes[i])) for i in failed})
        what = (
            f"{len(budget)} of {n} trajectories used the whole step budget (--max-steps {max_steps}); "
            "raise --max-steps, shorten --t1 or loosen --rtol/--atol"
            if budget
            else f"{len(failed)} of {n} trajectories failed ({'; '.join(msgs)})"
        )
        parts.append(what)
    if nonfinite:
        parts.append(
            f"{len(nonfinite)} of {n} trajectories reached non-finite values (inits {nonfinite}); "
            "lower --t1 or the learning problem's scale"
        )
    ok = [i for i in range(n) if i not in failed and i not in nonfinite]
    if ok and rep.homogeneous:  # without a law, drift is no error
        worst = float(np.max(np.asarray(rep.drift_in_tol)[ok]))
        if worst > 100:
            parts.append(
                f"drift up to {worst:.3g} tolerance units (> 100) on the finished trajectories: "
                "NOT conserved to solver tolerance"
            )
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
