"""Why the filtered error estimate stalls at mu = 0 (issue 28): every attempted step of one
Fig. 2(c, d) run of the flat-channels paper, with the plain and the filtered estimate side
by side, and the true local error of the suspect steps.

`filtered_error.py` found that `kvaerno5_newton_filtered` runs out of steps at mu = 0
after 17 of the authors' 500 rows, where the plain estimate finishes. This script runs
the same flow (their start, their `maxnorm` penalty, rtol = atol = `--rtol`) for
`--max-steps` attempted steps in three arms (`ARMS`): the plain estimate with diffrax's
stage solves (`kvaerno5_newton` as it was when this ran: `newton_kvaerno5(None, 10)`
now); the filtered
one with diffrax's stage solves (`FilteredError(stage_tolerance=None)`, the solver that
stalled); and `kvaerno5_newton_filtered`, whose stages are solved to a tenth of the
step's tolerance in `y` (`ij.StageNewton`). It logs every attempt
through `jax.debug.callback`: t, h, whether the stage solves converged, both scaled
error norms (diffrax's RMS norm, the one the step-size controller compares with 1), the
weight norm, and the extreme eigenvalues of `-(J + J^T)/2` at the step's start.

Per arm it reports the attempts, the rejections by cause (stage solve failed: the
estimate is `inf`; estimate above 1), and, per decade of t, the attempts and median h.
Then it probes up to `--probes` accepted steps with `--probe-after <= t < --probe-before`, evenly spaced
among them: each is integrated again from its start over the same h at rtol = atol =
`--reference-rtol` (Kvaerno5 with Newton stage solves), and the scaled distance of the
logged `y1` to that reference is the step's true local error, beside the two estimates
and the relative change of the Jacobian over the step. The probes are summarised in two
groups: steps the raw estimate would have accepted too, and steps only the filter did.

Usage: python benchmarks/filtered_error_steps.py --repo /path/to/channels-to-infinity.git
       [--mu 0] [--rtol 1e-8] [--max-steps 3000] [--probe-after 1e9] [--probe-before 1e14] [--probes 40]
       [--reference-rtol 1e-12] [--out benchmarks/results/filtered_error_steps.json]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _output import output_path, write_json  # benchmarks/_output.py
from channels_saddle_split import _read, _theta, penalty_strength, their_files

# arm: (estimate the controller sees, FilteredError's stage_tolerance)
ARMS = {
    "kvaerno5_newton, diffrax's stage solves": ("raw", None),
    "filtered, diffrax's stage solves": ("filtered", None),
    "kvaerno5_newton_filtered": ("filtered", 0.1),
}
FIELDS = ("t", "h", "stage_solve_ok", "raw", "filtered", "weightnorm", "lambda_min", "lambda_max")


def _problem(repo: str, commit: str, path: str, maxnorm: float):
    import jax.numpy as jnp

    import invariant_jax as ij
    import invariant_jax.channels as ch
    from invariant_jax.flow import flow_field

    r = _read(repo, commit, path)["res"]
    X, Y = np.asarray(r["input"]).T, np.asarray(r["target"]).T
    net = ij.DAGNetwork(ij.mlp([2, 3, 1]), "g", edge_weights=_theta(r["init"]))
    ts = np.array([float(t) for t in r["trajectory"]])
    field = flow_field(net, regularizer=ch.MaxnormPenalty(maxnorm), strength=penalty_strength("unscaled", len(Y)))
    return field, jnp.asarray(_theta(r["init"])), (jnp.asarray(X), jnp.asarray(Y)), 2 * len(Y) * ts[-1]


def _logged_run(field, theta0, args, t1, *, filtered: bool, stage_tolerance, rtol: float, max_steps: int):
    """Every attempted step of the flow (rows of `FIELDS`, then y0 and y1)."""
    import diffrax
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import invariant_jax as ij

    log = []

    def norm(e, y0, y1):  # diffrax's RMS norm of the scaled error
        return jnp.sqrt(jnp.mean((e / (rtol + rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1)))) ** 2))

    class Logged(ij.FilteredError):
        use_filtered: bool = eqx.field(static=True, default=True)

        def step(self, terms, t0, t1, y0, args, state, made_jump):
            y1, err, dense, state, result = ij.StageTolerance.step(self, terms, t0, t1, y0, args, state, made_jump)
            ferr = self.filter(terms, t0, t1, y0, args, err)
            J = jax.jacfwd(lambda y: terms.vf(t0, y, args))(y0)
            lam = jnp.linalg.eigvalsh(jnp.where(jnp.all(jnp.isfinite(J)), -(J + J.T) / 2, 0.0))
            ok = result == diffrax.RESULTS.successful
            raw, filt = norm(err, y0, y1), norm(ferr, y0, y1)
            row = (t0, t1 - t0, ok, raw, filt, jnp.linalg.norm(y0), lam[0], lam[-1])
            jax.debug.callback(
                lambda *a: log.append(np.hstack([np.asarray(x, float).ravel() for x in a])), *row, y0, y1, ordered=True
            )
            return y1, (ferr if self.use_filtered else err), dense, state, result

    t = time.perf_counter()
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        Logged(ij.newton_kvaerno5(None, 10), stage_tolerance=stage_tolerance, use_filtered=filtered),
        0.0,
        t1,
        None,
        theta0,
        args=args,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol),
        max_steps=max_steps,
        throw=False,
    )
    jax.block_until_ready(sol.ys)
    return np.array(log), dict(
        result=str(ij.result_name(sol.result)),
        t_end=float(sol.ts[-1]),
        steps=int(sol.stats["num_steps"]),
        rejected_steps=int(sol.stats["num_rejected_steps"]),
        seconds=time.perf_counter() - t,
    )


def _summary(log: np.ndarray, filtered: bool) -> dict:
    t, h, ok, raw, filt = (log[:, i] for i in range(5))
    ok = ok.astype(bool)
    deciding = filt if filtered else raw
    accepted = ok & (deciding <= 1)
    decade = np.floor(np.log10(np.maximum(t, 1e-300))).astype(int)
    decades = []
    for d in np.unique(decade):
        m = decade == d
        decades.append(
            dict(
                decade=int(d),
                attempts=int(m.sum()),
                accepted=int((accepted & m).sum()),
                stage_solve_failed=int((~ok & m).sum()),
                median_h=float(np.median(h[m])),
                max_weightnorm=float(log[m, 5].max()),
                lambda_min=[float(log[m, 6].min()), float(log[m, 6].max())],
            )
        )
    return dict(
        attempts=len(t),
        accepted=int(accepted.sum()),
        rejected_stage_solve=int((~ok).sum()),
        rejected_estimate=int((ok & (deciding > 1)).sum()),
        accepted_with_raw_above_1=int((accepted & (raw > 1)).sum()),
        per_decade=decades,
    )


def _probes(
    field,
    args,
    log: np.ndarray,
    *,
    filtered: bool,
    rtol: float,
    after: float,
    before: float,
    n: int,
    reference_rtol: float,
) -> list[dict]:
    import diffrax
    import jax
    import jax.numpy as jnp

    import invariant_jax as ij

    d = log.shape[1] - len(FIELDS)
    t, h, ok, raw, filt = (log[:, i] for i in range(5))
    Y0, Y1 = log[:, len(FIELDS) : len(FIELDS) + d // 2], log[:, len(FIELDS) + d // 2 :]
    deciding = filt if filtered else raw
    accepted = np.flatnonzero(ok.astype(bool) & (deciding <= 1) & (t >= after) & (t < before))
    pick = accepted[np.unique(np.linspace(0, len(accepted) - 1, min(n, len(accepted))).astype(int))]

    @jax.jit
    def reference(y0, h):
        s = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            ij.newton_kvaerno5(None, 10),
            jnp.zeros_like(h),
            h,
            None,
            y0,
            args=args,
            stepsize_controller=diffrax.PIDController(rtol=reference_rtol, atol=reference_rtol),
            max_steps=100_000,
        )
        return s.ys[-1]

    jac = jax.jit(jax.jacfwd(lambda y: field(0.0, y, args)))
    out = []
    for i in pick:
        y0, y1 = Y0[i], Y1[i]
        ref = np.asarray(reference(jnp.asarray(y0), jnp.asarray(h[i])))
        scale = rtol + rtol * np.maximum(np.abs(y0), np.abs(y1))
        J0, J1 = np.asarray(jac(jnp.asarray(y0))), np.asarray(jac(jnp.asarray(y1)))
        out.append(
            dict(
                attempt=int(i),
                t=float(t[i]),
                h=float(h[i]),
                raw=float(raw[i]),
                filtered=float(filt[i]),
                true=float(np.sqrt(np.mean(((y1 - ref) / scale) ** 2))),
                jacobian_change=float(np.linalg.norm(J1 - J0) / np.linalg.norm(J0)),
            )
        )
    return out


def _probed(probes: list[dict]) -> dict:
    """The probed steps in two groups, by whether the raw estimate accepted them too."""
    out = {}
    for group, keep in (("raw_at_most_1", lambda p: p["raw"] <= 1), ("raw_above_1", lambda p: p["raw"] > 1)):
        ps = [p for p in probes if keep(p)]
        true = np.array([p["true"] for p in ps])
        out[group] = dict(
            steps=len(ps),
            true_above_1=int((true > 1).sum()),
            max_true=float(true.max()) if ps else None,
            median_true_over_raw=float(np.median(true / [p["raw"] for p in ps])) if ps else None,
            median_true_over_filtered=float(np.median(true / [p["filtered"] for p in ps])) if ps else None,
        )
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", required=True, help="git directory of flavio-martinelli/channels-to-infinity")
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--mu", type=float, default=0.0)
    p.add_argument("--rtol", type=float, default=1e-8, help="rtol = atol")
    p.add_argument("--max-steps", type=int, default=3000, help="attempted steps per arm")
    p.add_argument("--probe-after", type=float, default=1e9, help="probe accepted steps from this t on")
    p.add_argument("--probe-before", type=float, default=1e14, help="and before this t")
    p.add_argument("--probes", type=int, default=40, help="at most this many probed steps per arm")
    p.add_argument("--reference-rtol", type=float, default=1e-12)
    p.add_argument("--maxnorm", type=float, default=1e3)
    p.add_argument("--out", default=None, help="default: benchmarks/results/local/filtered_error_steps.json")
    args = p.parse_args()
    for name, v in (("--rtol", args.rtol), ("--reference-rtol", args.reference_rtol)):
        if not 0 < v < 1:
            raise SystemExit(f"{name} {v}: give a tolerance in (0, 1).")
    if args.reference_rtol >= args.rtol:
        raise SystemExit(f"--reference-rtol {args.reference_rtol} must be below --rtol {args.rtol}.")
    import jax

    jax.config.update("jax_enable_x64", True)
    import warnings

    import invariant_jax as ij

    warnings.filterwarnings("ignore", category=ij.NoConservationLaw)
    out = output_path(args.out, "filtered_error_steps.json")
    commit, files = their_files(args.repo, args.commit)
    if args.mu not in files:
        raise SystemExit(f"--mu {args.mu}: no such file; the files have mu in {sorted(files)}.")
    field, theta0, data, t1 = _problem(args.repo, commit, files[args.mu], args.maxnorm)
    runs = []
    for arm, (estimate, stage_tolerance) in ARMS.items():
        filtered = estimate == "filtered"
        log, run = _logged_run(
            field,
            theta0,
            data,
            t1,
            filtered=filtered,
            stage_tolerance=stage_tolerance,
            rtol=args.rtol,
            max_steps=args.max_steps,
        )
        run.update(arm=arm, estimate=estimate, stage_tolerance=stage_tolerance, **_summary(log, filtered))
        run["probes"] = _probes(
            field,
            data,
            log,
            filtered=filtered,
            rtol=args.rtol,
            after=args.probe_after,
            before=args.probe_before,
            n=args.probes,
            reference_rtol=args.reference_rtol,
        )
        run["probed"] = _probed(run["probes"])
        runs.append(run)
        print(
            f"{arm}: {run['steps']} attempts to t = {run['t_end']:.3g}; rejected {run['rejected_stage_solve']} "
            f"by the stage solve, {run['rejected_estimate']} by the estimate; {len(run['probes'])} probes",
            flush=True,
        )
    write_json(
        out,
        dict(
            their_repo="flavio-martinelli/channels-to-infinity",
            their_commit=commit,
            mu=args.mu,
            rtol=args.rtol,
            max_steps=args.max_steps,
            t1=t1,
            maxnorm=args.maxnorm,
            penalty="unscaled",
            probe_after=args.probe_after,
            probe_before=args.probe_before,
            reference_rtol=args.reference_rtol,
            runs=runs,
        ),
    )


if __name__ == "__main__":
    main()
