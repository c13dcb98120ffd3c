"""`invariant-jax sweep` gives JAX one CPU device per usable core (`use_cpu_cores`), and
keeps a device count the user chose; with two forced CPU devices, `choose_device_mode`
picks exact mode and `CPU_SLOTS` slots and counts both (each case is a fresh process)."""

import os
import subprocess
import sys

from invariant_jax.cli._sweep import CPU_SLOTS, use_cpu_cores

_CHILD = r"""
import os, sys
from invariant_jax.cli._sweep import choose_device_mode, use_cpu_cores
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
