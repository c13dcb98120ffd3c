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
    assert mode == f"2 (True, {s}, 'exact mode, {s} slots on 2 cpu devices (mode and slots chosen for cpu)')"


def test_leaves_running_backends_alone():
    import jax

    before = len(jax.devices())
    assert use_cpu_cores({}) is None  # this process's backends already run (pytest imported JAX)
    assert len(jax.devices()) == before


_IMPLICIT_TWO_DEVICES = r"""
import jax
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_enable_x64", True)
import equinox as eqx, numpy as np, invariant_jax as ij
from invariant_jax.sweep import BatchOptions
nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(ij.mlp([2, 3, 1]), "tanh", key=k))(jax.random.split(jax.random.key(0), 6))
X = np.random.default_rng(0).normal(size=(10, 2)); Y = np.sin(X[:, :1])
run = lambda s="kvaerno5", **b: ij.sweep_flows(nets, X, Y, 0.5, solver=s, batch=BatchOptions(slots=4, **b))
for k in ("theta_final", "num_steps"):  # an explicit solver (one shard_map over both devices)
    np.testing.assert_array_equal(getattr(run("tsit5"), k), getattr(run("tsit5", devices=jax.devices()[:1]), k))
two, one, vmap = run(), run(devices=jax.devices()[:1]), run(exact=False)
assert (two.stats["devices"], one.stats["devices"], vmap.stats["devices"]) == (2, 1, 1)
try:
    BatchOptions(exact=False, devices=jax.devices())
    raise SystemExit("vmap mode on two CPU devices was accepted")
except ValueError as e:
    assert "can hang" in str(e) and "exact=True" in str(e) and "devices=jax.devices()[:1]" in str(e), e
for k in ("theta_final", "loss_final", "num_steps", "result_codes"):
    np.testing.assert_array_equal(getattr(two, k), getattr(one, k), err_msg=k)
ref = eqx.filter_vmap(lambda n: ij.gradient_flow(n, X, Y, 0.5, solver="kvaerno5").theta_final)(nets)
relu = eqx.filter_vmap(lambda k: ij.DAGNetwork(ij.mlp([2, 3, 1]), "relu", key=k))(jax.random.split(jax.random.key(1), 6))
kink = lambda **b: ij.sweep_flows(relu, X, Y, 0.5, solver="gauss4", kinks=True, batch=BatchOptions(slots=4, **b))
k2, k1 = kink(), kink(devices=jax.devices()[:1])
for k in ("theta_final", "loss_final", "num_steps", "result_codes"):
    np.testing.assert_array_equal(getattr(k2, k), getattr(k1, k), err_msg=k)
np.testing.assert_allclose(vmap.theta_final, ref, rtol=0, atol=1e-6)
np.testing.assert_allclose(two.theta_final, ref, rtol=0, atol=1e-6)
print("ok")
"""


def test_an_implicit_solver_runs_on_two_devices():
    """Kvaerno5 and the kink-aware Gauss4 (lineax's LU inside; one program per device)
    and Tsit5 (one `shard_map`) on two forced CPU devices: exact mode equals one device
    bit for bit, and Kvaerno5 agrees with `gradient_flow`
    (inside `shard_map` both failed lineax's structure check). Vmap mode runs on one CPU device
    by default, and refuses two given ones (batched LAPACK calls can hang there)."""
    # (other XLA flags are kept, e.g. --xla_cpu_max_isa: the bit-for-bit claim must hold there too)
    base = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    flags = [f for f in base.pop("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env = {**base, "XLA_FLAGS": " ".join(flags)}
    r = subprocess.run(
        [sys.executable, "-c", _IMPLICIT_TWO_DEVICES], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
