"""`invariant-jax sweep` chooses exact or vmap mode and the slot count for its devices
(`choose_device_mode`): exact mode and `CPU_SLOTS` slots on CPUs, vmap mode and 4096 slots per
device on an accelerator; what the user gave is kept; the sweep header says which."""

from types import SimpleNamespace

import pytest

from invariant_jax.cli import build_parser
from invariant_jax.sweep import ACCELERATOR_SLOTS_PER_DEVICE, CPU_SLOTS, choose_device_mode


def _devices(platform, n):
    return [SimpleNamespace(platform=platform, id=i) for i in range(n)]


@pytest.mark.parametrize("platform,n", [("gpu", 1), ("gpu", 4), ("tpu", 8)])
def test_accelerator_gets_vmap_and_slots_per_device(platform, n):
    exact, slots, line = choose_device_mode(devices=_devices(platform, n))
    assert exact is False and slots == ACCELERATOR_SLOTS_PER_DEVICE * n
    assert line.startswith(f"vmap mode, {slots} slots on {n} {platform} device")
    assert "mode and slots chosen for " + platform in line


def test_user_choices_are_kept():
    gpu = _devices("gpu", 2)
    assert choose_device_mode(exact=True, devices=gpu)[:2] == (True, CPU_SLOTS)
    assert choose_device_mode(slots=100, devices=gpu)[:2] == (False, 100)
    exact, slots, line = choose_device_mode(exact=False, slots=7, devices=_devices("cpu", 1))
    assert (exact, slots) == (False, 7) and "mode and slots as given" in line
    exact, slots, line = choose_device_mode(exact=False, devices=_devices("cpu", 2))
    assert (exact, slots) == (False, CPU_SLOTS)
    # vmap mode on CPUs runs on one device (engine_devices: batched LAPACK can hang on several)
    assert line.startswith(f"vmap mode, {CPU_SLOTS} slots on 1 cpu device (") and "one device for vmap mode" in line


def test_flags_reach_the_choice():
    p = build_parser()
    assert "exact" not in vars(p.parse_args(["sweep"]))  # unset: chosen for the devices
    assert vars(p.parse_args(["sweep", "--vmap"]))["exact"] is False
    assert vars(p.parse_args(["sweep", "--exact"]))["exact"] is True
    with pytest.raises(SystemExit):
        p.parse_args(["sweep", "--exact", "--vmap"])


# Two forced CPU devices in a fresh process (exact mode, CPU_SLOTS slots, both devices counted):
# tests/test_sweep_devices.py::test_one_cpu_device_per_core_unless_told, in the process it
# starts with JAX_NUM_CPU_DEVICES=2 anyway (one JAX start instead of two).


def test_python_entry_points_choose_as_the_cli():
    """`BatchOptions()` leaves mode and slots to `choose_device_mode`: the engine of
    `sweep_flows` / `run_sweep` gets what the CLI would choose; what is given is kept."""
    from invariant_jax.sweep import BatchOptions

    cpu, gpu = _devices("cpu", 2), _devices("gpu", 2)
    assert BatchOptions().engine_keywords() == dict(slots=CPU_SLOTS, exact=True, devices=None)
    assert BatchOptions(devices=cpu).engine_keywords() == dict(slots=CPU_SLOTS, exact=True, devices=tuple(cpu))
    got = BatchOptions(devices=gpu).engine_keywords()
    assert got == dict(slots=2 * ACCELERATOR_SLOTS_PER_DEVICE, exact=False, devices=tuple(gpu))
    assert BatchOptions(slots=7, exact=True, devices=gpu).engine_keywords()["slots"] == 7
    with pytest.raises(ValueError, match="can hang"):
        BatchOptions(exact=False, devices=cpu)


def test_is_implicit_sees_wrapped_solvers():
    """`is_implicit` (behind `gradient_flow`'s warning about implicit solvers on kinks)
    sees an implicit solver inside `Projected` and in every implicit named solver."""
    import diffrax
    import jax.numpy as jnp

    import invariant_jax as ij
    from invariant_jax.solvers import is_implicit

    g = ij.mlp([2, 3, 1])
    assert not is_implicit(diffrax.Tsit5()) and not is_implicit(ij.SolverOptions("dopri5").get_solver())
    assert not is_implicit(ij.Projected(diffrax.Tsit5(), jnp.zeros(3), g))
    assert is_implicit(ij.Projected(diffrax.Kvaerno5(), jnp.zeros(3), g))  # a wrapped implicit solver
    for name in ("kvaerno5", "kvaerno5_newton", "kvaerno5_newton_filtered", "gauss4"):
        assert is_implicit(ij.SolverOptions(name).get_solver()), name
