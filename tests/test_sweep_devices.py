"""`invariant-jax sweep` gives JAX one CPU device per usable core (`use_cpu_cores`), and
keeps a device count the user chose; with two forced CPU devices, `choose_device_mode`
picks exact mode and `CPU_SLOTS` slots and counts both (each case is a fresh process)."""

import os
import subprocess
import sys

from invariant_jax.cli._sweep import use_cpu_cores
from invariant_jax.sweep import CPU_SLOTS

_CHILD = r"""
import os, sys
from invariant_jax.cli._sweep import use_cpu_cores
from invariant_jax.sweep import choose_device_mode
n = use_cpu_cores()
import jax
print(n, len(jax.devices("cpu")), len(os.sched_getaffinity(0)))
print(len(jax.devices()), choose_device_mode())
"""


def _run(env):
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    r = subprocess.run([sys.executable, "-c", _CHILD], env={**base, **env}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    counts, mode = r.stdout.strip().splitlines()[-2:]
    return (*counts.split(), mode)


def test_one_cpu_device_per_core_unless_told():
    n, devices, cores, _ = _run({})
    assert n == devices == cores  # an independent count: the process's CPU affinity
    n, devices, _, _ = _run({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert (n, devices) == ("None", "1")
    # two forced CPU devices (tests/test_sweep_device_mode.py tests the choice without a process)
    n, devices, _, mode = _run({"JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"})
    assert (n, devices) == ("None", "2")
    s = CPU_SLOTS
    join = "a device not compiled yet joins once the work left outlasts its compiling"
    assert mode == f"2 (True, {s}, 'exact mode, {s} slots on 2 cpu devices (mode and slots chosen for cpu); {join}')"


def test_leaves_running_backends_alone():
    import jax

    before = len(jax.devices())
    assert use_cpu_cores({}) is None  # this process's backends already run (pytest imported JAX)
    assert len(jax.devices()) == before


_TWO_DEVICES = r"""
import jax
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_enable_x64", True)
import equinox as eqx, numpy as np, invariant_jax as ij
from invariant_jax.sweep import BatchOptions, Engine, KinkEngine, make_problem
n = 40
key = jax.random.split(jax.random.key(0), n)
nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(ij.mlp([2, 3, 1]), "tanh", key=k))(key)
relu = eqx.filter_vmap(lambda k: ij.DAGNetwork(ij.mlp([2, 3, 1]), "relu", key=k))(key)
X = np.random.default_rng(0).normal(size=(10, 2)); Y = np.sin(X[:, :1])
table = lambda b: np.asarray(eqx.filter_vmap(lambda m: m.edge_weights())(b))
first = lambda b: jax.tree.map(lambda a: a[0] if a.ndim == 3 else a, b)

def run(build, devices):
    # every device compiled first (warm_up), so both take trajectories from the start
    eng = build(devices)
    eng.warm_up()
    out = []
    st = eng.run(np.arange(n), on_results=out.append)
    rec = {k: np.concatenate([o[k] for o in out]) for k in out[0]}
    order = np.argsort(rec["index"])
    return {k: v[order] for k, v in rec.items()}, st

flow = lambda s: lambda d: Engine(
    make_problem(first(nets), X, Y, 0.5, options=ij.SolverOptions(s)), init_table=table(nets), slots=4, devices=d
)
kink = lambda d: KinkEngine(
    first(relu), X, Y, 0.5, init_table=table(relu), slots=4, devices=d,
    options=ij.SolverOptions("gauss4", max_steps=10_000),
)
two_devices, one_device = jax.devices(), jax.devices()[:1]
for name, build in (("kvaerno5", flow("kvaerno5")), ("tsit5", flow("tsit5")), ("kink gauss4", kink)):
    (two, st2), (one, st1) = run(build, two_devices), run(build, one_device)
    assert (st2.devices, st1.devices) == (2, 1), (name, st2, st1)
    for k in ("theta_final", "num_steps", "result"):
        np.testing.assert_array_equal(two[k], one[k], err_msg=f"{name}: {k}")
    if name == "kvaerno5":
        ref = eqx.filter_vmap(lambda m: ij.gradient_flow(m, X, Y, 0.5, solver="kvaerno5").theta_final)(nets)
        np.testing.assert_allclose(two["theta_final"], ref, rtol=0, atol=1e-6)
# an error in a callback, in whichever device's loop: the run raises it and stops every loop
eng = flow("tsit5")(two_devices)
eng.warm_up()
calls = []
def fail(rec):
    calls.append(len(rec["index"]))
    if len(calls) == 3:
        raise RuntimeError("boom")
try:
    eng.run(np.arange(n), on_results=fail)
    raise SystemExit("the callback's error was lost")
except RuntimeError as e:
    assert str(e) == "boom"
assert len(run(lambda d: eng, two_devices)[0]["index"]) == n  # the engine still runs
# a small run on a device not compiled yet: it does not join (its compilation would outlast the work)
small = flow("tsit5")(two_devices)
st = small.run(np.arange(n), on_results=lambda rec: None)
assert st.devices == 1 and small._ready == {jax.devices()[0]}, (st, small._ready)
vmap = ij.sweep_flows(nets, X, Y, 0.5, solver="kvaerno5", batch=BatchOptions(slots=4, exact=False))
assert vmap.stats["devices"] == 1
np.testing.assert_allclose(vmap.theta_final, ref, rtol=0, atol=1e-6)
try:
    BatchOptions(exact=False, devices=jax.devices())
    raise SystemExit("vmap mode on two CPU devices was accepted")
except ValueError as e:
    assert "can hang" in str(e) and "exact=True" in str(e) and "devices=jax.devices()[:1]" in str(e), e
print("ok")
"""


def test_two_devices_equal_one():
    """Kvaerno5 and the kink-aware Gauss4 (lineax's LU inside) and Tsit5, each device
    running its own loop, on two forced CPU devices: exact mode equals one device bit
    for bit, both devices take work, and Kvaerno5 agrees with `gradient_flow` (inside
    `shard_map`, as the engine ran before, the implicit solvers failed lineax's
    structure check). Vmap mode runs on one CPU device by default, and refuses two
    given ones (batched LAPACK calls can hang there)."""
    # (other XLA flags are kept, e.g. --xla_cpu_max_isa: the bit-for-bit claim must hold there too)
    base = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    flags = [f for f in base.pop("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env = {**base, "XLA_FLAGS": " ".join(flags)}
    r = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


_SIGTERM_TWO_DEVICES = r"""
import os, signal, sys, threading
import jax
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_enable_x64", True)
import numpy as np
from invariant_jax.sweep import BatchOptions, StoreOptions, SweepConfig, SweepInterrupted, load_sweep, run_sweep
from invariant_jax.sweep._engines import config_engine
cfg = SweepConfig(graph="example", n_inits=200_000)
graph = cfg.build_graph()
X, Y = cfg.build_data(graph)
batch = BatchOptions(progress=False)
config_engine(cfg, graph, X, Y, batch=batch).warm_up()  # the sweep's engine: both devices run from the start
threading.Timer(4.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
try:
    run_sweep(cfg, sys.argv[1], batch=batch, store=StoreOptions(flush_seconds=0.0))
    raise SystemExit("the sweep was not interrupted")
except SweepInterrupted as e:
    assert e.signal == "SIGTERM", e
assert threading.active_count() <= 2, threading.enumerate()  # no device loop left running (the timer may be)
_, part = load_sweep(sys.argv[1])
assert 0 < len(part) < cfg.n_inits, len(part)
assert len(np.unique(part.index)) == len(part)
# the records both devices wrote equal one device's run of the same indices, bit for bit
pick = part.index[:: max(1, len(part) // 64)]
one = config_engine(cfg, graph, X, Y, batch=BatchOptions(progress=False, devices=jax.devices()[:1]))
got = []
one.run(pick, on_results=got.append)
ref = {k: np.concatenate([g[k] for g in got]) for k in got[0]}
order = np.argsort(ref["index"])
at = np.searchsorted(part.index, ref["index"][order])
np.testing.assert_array_equal(part.theta_final[at], ref["theta_final"][order])
np.testing.assert_array_equal(part.num_steps[at], ref["num_steps"][order])
print("ok", len(part))
"""


def test_sigterm_stops_both_devices_and_keeps_their_records(tmp_path):
    """SIGTERM during a sweep on two forced CPU devices, both running: the sweep raises
    `SweepInterrupted`, no device's loop outlives it, every claim is released, and the
    records in the folder (written by either device's loop) equal a one-device run of
    the same indices bit for bit."""
    import json

    base = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    flags = [f for f in base.pop("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-c", _SIGTERM_TWO_DEVICES, str(out)],
        env={**base, "XLA_FLAGS": " ".join(flags)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0 and r.stdout.strip().startswith("ok"), r.stderr[-3000:]
    claims = [json.loads(p.read_text()) for p in (out / "claims").glob("*.json")]
    assert all(c.get("done") for c in claims), claims[:3]  # a released claim is deleted, a held one is not done
