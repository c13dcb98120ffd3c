"""The bare arithmetic of a sweep, shared by the sweep benchmarks.

- `BareCosts`: seconds per gradient and per forward pass of one network, per trajectory at
  each batch width, in a tight compiled loop (the least of several measurements).
- `count_kink_work`: the gradient evaluations (every JVP/VJP row of the Filippov solve
  counts as one) and event-condition evaluations (forward passes; the checks inside each
  step count one per point) of each kink-aware
  trajectory, counted in a separately compiled, instrumented exact-mode run.
- `workload`: the heavy and light workloads of `sweep_throughput.py`.
- `core_ratio`: the machine's own k-process / 1-process throughput on the bare gradient
  loop, each process a fresh one with one CPU device: what k cores give to arithmetic
  that shares nothing.

Run as a script (`python benchmarks/_bare.py --loop SECONDS --config JSON`) it is one
process of `core_ratio`: it prints the gradients per second of its loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


class BareCosts:
    """Seconds per gradient and per forward pass (per trajectory) at each batch width, in
    a tight jitted loop. `measure()` again after other work; the minimum over the process
    is kept (other jobs on a shared machine only ever make a measurement slower)."""

    def __init__(self, net, X, Y, widths, reps=2000):
        import jax
        import jax.numpy as jnp

        import invariant_jax as ij

        theta = net.edge_weights()
        gr = jax.grad(ij.edge_loss_fn(net, X, Y))
        fwd = lambda th: net.with_edge_weights(th).evaluate(X)[1]  # noqa: E731
        self.reps, self.loops, self.best = reps, {}, {}
        for w in sorted(set(widths)):
            y = jnp.tile(theta[None], (w, 1)) * (1 + 1e-3 * jnp.arange(w)[:, None])
            g_loop = jax.jit(lambda y: jax.lax.fori_loop(0, reps, lambda i, y: y - 1e-6 * jax.vmap(gr)(y), y))
            f_loop = jax.jit(
                lambda y: jax.lax.fori_loop(
                    0, reps, lambda i, y: y * (1 - 1e-9 * jnp.sum(jax.vmap(fwd)(y), axis=(1, 2))[:, None]), y
                )
            )
            g_loop(y).block_until_ready()
            f_loop(y).block_until_ready()
            self.loops[w] = (y, g_loop, f_loop)
        self.measure()

    def measure(self):
        for w, (y, g_loop, f_loop) in self.loops.items():
            out = {}
            for name, f in (("grad", g_loop), ("forward", f_loop)):
                best = best_cpu = np.inf
                for _ in range(3):
                    t, c = time.perf_counter(), time.process_time()
                    f(y).block_until_ready()
                    best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
                out[name] = min(best / self.reps / w, self.best.get(w, {}).get(name, np.inf))
                out[name + "_cpu"] = min(best_cpu / self.reps / w, self.best.get(w, {}).get(name + "_cpu", np.inf))
            self.best[w] = out

    def __getitem__(self, w):
        return self.best[w]

    def of(self, work: np.ndarray, width: int = 1) -> float:
        """Bare seconds of `work` (rows or one row of (gradients, condition evaluations, ...))."""
        work = np.atleast_2d(work)
        return float(work[:, 0].sum() * self[width]["grad"] + work[:, 1].sum() * self[width]["forward"])


N_SAMPLES = 20  # teacher points of the `workload`s


def workload(name: str, n: int):
    """`(graph, X, Y, thetas)` of the `sweep_throughput.py` workloads, `n` inits (ReLU):

    - `heavy`: 5-20-1 MLP without bias, teacher key `PRNGKey(3)`, inits `PRNGKey(i)`;
    - `light`: 5-20-1 MLP without bias, teacher key `key(1)`, inits `fold_in(key(0), i)`.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import invariant_jax as ij

    g = ij.mlp([5, 20, 1], bias=False)
    if name == "heavy":
        X, Y, _ = ij.teacher_student(g, N_SAMPLES, key=jr.PRNGKey(3))
        keys = jax.vmap(jr.PRNGKey)(jnp.arange(n))  # = PRNGKey(i), i < n
    else:
        X, Y, _ = ij.teacher_student(g, N_SAMPLES, key=jr.key(1))
        keys = jax.vmap(lambda i: jr.fold_in(jr.key(0), i))(jnp.arange(n))
    thetas = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, "relu", key=k))(keys).edge_weights()
    return g, X, Y, thetas


def count_kink_work(make_engine, indices) -> np.ndarray:
    """`(gradients, condition evaluations, steps)` per trajectory of `indices`, from an
    exact-mode engine that `make_engine()` builds with one slot (traced here, with
    counting callbacks: build it fresh, not from a cache of compiled engines)."""
    import jax

    from invariant_jax import solvers
    from invariant_jax.kinks import KinkProblem

    counts = dict(grad=0, cond=0)
    per = []
    solvers._EVAL_HOOK = lambda k: counts.__setitem__("grad", counts["grad"] + k)
    originals = {name: getattr(KinkProblem, name) for name in ("cond_value", "crossing_value")}

    def counted(orig):
        def counted_call(self, theta, *args):  # (a forward pass each; under vmap, one per point)
            jax.debug.callback(lambda x: counts.__setitem__("cond", counts["cond"] + np.size(x)), theta[0])
            return orig(self, theta, *args)

        return counted_call

    for name, orig in originals.items():
        setattr(KinkProblem, name, counted(orig))
    try:
        eng = make_engine()
        for i in indices:
            counts.update(grad=0, cond=0)
            rec = []
            eng.run(np.asarray([i]), on_results=rec.append)
            jax.effects_barrier()
            per.append((counts["grad"], counts["cond"], int(rec[0]["num_steps"][0])))
    finally:
        solvers._EVAL_HOOK = None
        for name, orig in originals.items():
            setattr(KinkProblem, name, orig)
    return np.asarray(per)


def config_problem(config: dict):
    """`(SweepConfig, graph, X, Y, template network)` of a sweep folder's manifest config."""
    import invariant_jax as ij
    from invariant_jax.sweep import SweepConfig, init_theta

    c = SweepConfig.from_dict(config)
    g = c.build_graph()
    X, Y = c.build_data(g)[:2]
    net = ij.DAGNetwork(g, c.activation, edge_weights=np.asarray(init_theta(c, g, 0)))
    return c, g, X, Y, net


def config_work(config: dict, k: int):
    """The bare cost of a kink-aware sweep config, per trajectory: evaluations counted on
    its first `k` inits (`count_kink_work`) and priced by `BareCosts`. Returns a dict with
    the counts, the costs and `bare_s_per_step` (the counted bare seconds over the
    counted steps, to scale to a whole run by its steps)."""
    import jax

    from invariant_jax.sweep import KinkEngine, init_theta

    jax.config.update("jax_enable_x64", True)
    c, g, X, Y, net = config_problem(config)
    if not c.kink_aware:
        raise ValueError("config_work counts kink-aware sweeps; this config is not kink-aware.")

    def make():  # the engine the CLI builds (`config_engine`), with one slot on one device
        return KinkEngine(
            net,
            X,
            Y,
            c.t1,
            lambda i: init_theta(c, g, i),
            slots=1,
            exact=True,
            devices=jax.devices()[:1],
            options=c.solver_options,
            saveat=c.save_times,
            kinks=c.kink_options,
            loss=c.loss.loss,
        )

    per = count_kink_work(make, range(k))
    costs = BareCosts(net, X, Y, [1], reps=20000)
    costs.measure()
    bare = costs.of(per)
    return dict(
        counted_inits=k,
        gradients=int(per[:, 0].sum()),
        condition_evaluations=int(per[:, 1].sum()),
        steps=int(per[:, 2].sum()),
        gradients_per_step=float(per[:, 0].sum() / per[:, 2].sum()),
        conditions_per_step=float(per[:, 1].sum() / per[:, 2].sum()),
        gradient_us=1e6 * costs[1]["grad"],
        forward_us=1e6 * costs[1]["forward"],
        bare_s_per_step=bare / float(per[:, 2].sum()),
    )


def kink_workloads(demo_inits: int, heavy_inits: int) -> dict:
    """The kink-aware benchmarks' two workloads, `{name: (template, X, Y, t1, init(i),
    options, saveat, n)}`: `demo`, the CLI's default sweep (`SweepConfig()`), its first
    `demo_inits` inits; `heavy`, `workload("heavy", heavy_inits)` at Tsit5 1e-8, 11 saves."""
    import invariant_jax as ij
    from invariant_jax.sweep import SweepConfig, init_theta

    c, g, X, Y, net = config_problem(SweepConfig().to_dict())
    demo = (net, X, Y, c.t1, lambda i: init_theta(c, g, i), c.solver_options, c.save_times, demo_inits)
    hg, hX, hY, thetas = workload("heavy", heavy_inits)
    heavy_opts = ij.SolverOptions("tsit5", rtol=1e-8, atol=1e-8, max_steps=10_000)
    hnet = ij.DAGNetwork(hg, "relu", edge_weights=thetas[0])
    heavy = (hnet, hX, hY, 1.0, lambda i: thetas[i], heavy_opts, ij.SaveTimes(n_save=11), heavy_inits)
    return dict(demo=demo, heavy=heavy)


def kink_engine(prob, *, tol=None, slots: int = 64, **integrator_fields):
    """A `KinkEngine` for a `kink_workloads` entry (exact mode, one device), at rtol = atol
    = `tol` if given, with `KinkIntegrator` fields replaced (before it compiles)."""
    import dataclasses

    import jax

    from invariant_jax.sweep import KinkEngine

    net, X, Y, t1, init, options, saveat, _ = prob
    if tol is not None:
        options = dataclasses.replace(options, rtol=tol, atol=tol)
    eng = KinkEngine(
        net, X, Y, t1, init, slots=slots, exact=True, devices=jax.devices()[:1], options=options, saveat=saveat
    )
    # (the engine's programs trace eng.integrator when they first run)
    eng.integrator = dataclasses.replace(eng.integrator, **integrator_fields)
    return eng


def run_sorted(eng, indices) -> dict:
    """An engine's records of `indices`, in index order."""
    parts = []
    eng.run(np.asarray(indices), on_results=parts.append)
    rec = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(rec["index"])
    return {k: v[order] for k, v in rec.items()}


def _loop(seconds: float, config: dict) -> float:
    """Gradients per second of the bare gradient loop, run for about `seconds`."""
    import jax

    jax.config.update("jax_enable_x64", True)
    _, _, X, Y, net = config_problem(config)
    costs = BareCosts(net, X, Y, [1], reps=20000)
    y, g_loop, _ = costs.loops[1]
    calls = max(1, int(seconds / (costs[1]["grad"] * costs.reps)))
    t = time.perf_counter()
    for _ in range(calls):
        y = g_loop(y)
    y.block_until_ready()
    return calls * costs.reps / (time.perf_counter() - t)


def core_ratio(config: dict, processes: int, seconds: float = 20.0) -> dict:
    """The bare gradient loop alone, then in `processes` processes at once (each a fresh
    Python with one CPU device): the throughput ratio the machine gives to arithmetic
    that shares nothing (the ceiling of a sweep's k-core ratio)."""

    def run(k):
        env = dict(os.environ, JAX_NUM_CPU_DEVICES="1", OPENBLAS_NUM_THREADS="1")
        cmd = [sys.executable, str(Path(__file__)), "--loop", str(seconds), "--config", json.dumps(config)]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(k)]
        rates = []
        for p in procs:
            out, _ = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"the bare loop failed (exit {p.returncode})")
            rates.append(float(out.split()[-1]))
        return rates

    one, many = run(1), run(processes)
    return dict(
        processes=processes,
        seconds_each=seconds,
        gradients_per_s_one=one[0],
        gradients_per_s_each=many,
        ratio=sum(many) / one[0],
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="one process of core_ratio: the bare gradient loop")
    ap.add_argument("--loop", type=float, required=True, help="seconds to run")
    ap.add_argument("--config", required=True, help="a sweep manifest's config, as JSON")
    a = ap.parse_args()
    print(_loop(a.loop, json.loads(a.config)))
