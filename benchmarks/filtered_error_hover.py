"""`ij.FilteredError` against the plain estimate, each with its stages solved to a tenth
of the step's tolerance in `y` (`ij.StageTolerance`) and with diffrax's own stage solves,
on a two-weight hover with an exact solution: steps, rejected steps, first call (with its
compilations) and warm call, and the error against the exact solution at each saved time
(up to 1e15), for several horizons. Where the plain estimate starts to stall depends on the CPU's round-off.

The hover (`hover_loss`): an outward pull `-log r` held by a stiff wall
`s (r - R)^3 / 3` above `R = 10` (`s = 1e3`), while the angle creeps towards 2 along
`(phi - 2)^4`. In polar coordinates `r` and `phi` decouple: `r' = 1/r - s (r - R)_+^2`
(SciPy's Radau, then `r = r*` to round-off) and `(phi - 2)^-2 = 1/4 + 8 int_0^t r^-2 dt`
exactly (`hover_exact`). `tests/test_solvers.py` uses both.

Usage: python benchmarks/filtered_error_hover.py [--horizons 1e12,1e14,1e15,1e16,1e20]
       [--max-steps 20000] [--rtol 1e-8] [--atol 1e-8] [--out benchmarks/results/filtered_error_hover.json]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _output import CompileCounter, output_path, write_json  # benchmarks/_output.py

R, S = 10.0, 1e3
SAVE = (1e2, 1e4, 1e8, 1e12, 1e14, 1e15)
# the two registered solvers (their stages solved to a tenth of the step's tolerance in
# y, `ij.StageTolerance`), and each with diffrax's own stage solves (atol in f)
SOLVERS = (
    "kvaerno5_newton",
    "kvaerno5_newton_filtered",
    "kvaerno5_newton, diffrax's stage solves",
    "filtered, diffrax's stage solves",
)


def _solver(name: str):
    import invariant_jax as ij

    if name == SOLVERS[2]:
        return ij.newton_kvaerno5(None, 10)
    if name == SOLVERS[3]:
        return ij.FilteredError(ij.newton_kvaerno5(None, 10), stage_tolerance=None)
    return ij.get_solver(name)


def hover_loss(z):
    import jax.numpy as jnp

    r, phi = jnp.linalg.norm(z), jnp.arctan2(z[1], z[0])
    return -jnp.log(r) + (phi - 2.0) ** 4 + S * jnp.maximum(r - R, 0.0) ** 3 / 3


def hover_exact(ts) -> np.ndarray:
    """The exact solution from `(1, 0)` at times `ts >= 200`, shape `(len(ts), 2)`."""
    from scipy.integrate import quad, solve_ivp
    from scipy.optimize import brentq

    r_star = brentq(lambda r: 1 / r - S * (r - R) ** 2, R, R + 1)
    T = 200.0  # r = r* to round-off from here on
    wall = lambda t, r: 1 / r - S * np.maximum(r - R, 0) ** 2  # noqa: E731
    r = solve_ivp(wall, (0, T), [1.0], method="Radau", rtol=1e-12, atol=1e-12, dense_output=True)
    head = quad(lambda t: r.sol(t)[0] ** -2, 0, T, limit=500, epsabs=1e-13, epsrel=1e-13)[0]
    phi = 2 - (0.25 + 8 * (head + (np.asarray(ts, float) - T) / r_star**2)) ** -0.5
    return r_star * np.stack([np.cos(phi), np.sin(phi)], axis=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--horizons", default="1e12,1e14,1e15,1e16,1e20", help="comma-separated t1")
    p.add_argument("--max-steps", type=int, default=20_000)
    p.add_argument("--rtol", type=float, default=1e-8)
    p.add_argument("--atol", type=float, default=1e-8)
    p.add_argument("--out", default=None, help="default: benchmarks/results/local/filtered_error_hover.json")
    args = p.parse_args()
    out = output_path(args.out, "filtered_error_hover.json")
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp

    counter = CompileCounter()
    term = diffrax.ODETerm(lambda t, z, a: -jax.grad(hover_loss)(z))
    rows = []
    for t1 in [float(h) for h in args.horizons.split(",")]:
        ts = [t for t in SAVE if t <= t1]
        exact = hover_exact(ts)
        for name in SOLVERS:

            def solve():
                t0 = time.perf_counter()
                sol = diffrax.diffeqsolve(
                    term,
                    _solver(name),
                    0.0,
                    t1,
                    None,
                    jnp.array([1.0, 0.0]),
                    saveat=diffrax.SaveAt(ts=jnp.array(ts)),
                    stepsize_controller=diffrax.PIDController(rtol=args.rtol, atol=args.atol),
                    max_steps=args.max_steps,
                    throw=False,
                )
                sol.ys.block_until_ready()
                return sol, time.perf_counter() - t0

            counter.reset()
            sol, first = solve()
            compiled = dict(n=counter.n, seconds=counter.seconds)
            warm = solve()[1]
            err = np.max(np.abs(np.asarray(sol.ys) - exact), axis=1)
            rows.append(
                dict(
                    t1=t1,
                    solver=name,
                    success=bool(sol.result == diffrax.RESULTS.successful),
                    steps=int(sol.stats["num_steps"]),
                    rejected_steps=int(sol.stats["num_rejected_steps"]),
                    first_call_seconds=first,
                    compilations=compiled,
                    warm_seconds=warm,
                    errors={f"{t:g}": (float(e) if np.isfinite(e) else None) for t, e in zip(ts, err)},
                )
            )
            print(f"t1 = {t1:g}, {name}: {rows[-1]['steps']} steps, errors {rows[-1]['errors']}", flush=True)
    write_json(out, dict(rtol=args.rtol, atol=args.atol, max_steps=args.max_steps, R=R, s=S, rows=rows))


if __name__ == "__main__":
    main()
