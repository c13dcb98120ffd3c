"""Sweeps across processes: resume after SIGKILL, and sharding over 4 (forced) CPU devices.
Both compare against an uninterrupted single-device run in this process. Each starts a
fresh Python and compiles, so both are `slow` (run with `-m slow`)."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from invariant_jax.sweep import SweepConfig, run_sweep

CFG = dict(n_inits=24, t1=0.5, n_samples=10, n_save=11)
KEYS = ("index", "theta0", "theta_final", "loss_final", "drift", "num_steps", "status", "t_final", "result")

CHILD = r"""
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from invariant_jax.sweep import SweepConfig, run_sweep
cfg = SweepConfig(**json.loads(sys.argv[1]))
mode, out = sys.argv[2], sys.argv[3]
if mode == "slow":  # a sweep that writes a chunk per harvest and dawdles after each
    run_sweep(cfg, out, slots=2, steps_per_call=8, flush_seconds=0.0, progress=False,
              on_chunk=lambda p: time.sleep(0.25))
else:
    assert jax.device_count() == 4, jax.devices()
    r = run_sweep(cfg, slots=4, steps_per_call=8, progress=False)
    assert r.stats["devices"] == 4
    np.savez(out, **{k: getattr(r, k) for k in %r})
""" % (KEYS,)


@pytest.fixture(scope="module")
def reference():
    return run_sweep(SweepConfig(**CFG), slots=2, steps_per_call=8, progress=False)


def _child(mode, out, env=None, cfg=CFG):
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg), mode, str(out)],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.exactness
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, reference):
    out = tmp_path / "run"
    proc = _child("slow", out)
    deadline = time.monotonic() + 240
    try:
        while len(list((out / "chunks").glob("chunk-*.npz"))) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the child sweep wrote no chunks in time"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    from invariant_jax.sweep._store import ResultsStore

    done = ResultsStore(out).done_indices()
    assert 0 < len(done) < CFG["n_inits"], "the kill must interrupt the sweep"
    resumed = run_sweep(SweepConfig(**CFG), out, resume=True, slots=2, steps_per_call=8, progress=False)
    todo = np.setdiff1d(np.arange(CFG["n_inits"]), done)
    # finished trajectories are loaded, not recomputed: only the rest cost steps
    assert resumed.stats["useful_steps"] == int(reference.num_steps[todo].sum())
    for k in KEYS:
        np.testing.assert_array_equal(getattr(resumed, k), getattr(reference, k), err_msg=k)


@pytest.mark.slow
@pytest.mark.exactness
@pytest.mark.parametrize("kink_aware", [False, True])
def test_four_devices_equal_one_device(tmp_path, reference, kink_aware):
    cfg = dict(CFG, graph="mlp", widths=[3, 6, 1], n_inits=8, kink_aware=True) if kink_aware else CFG
    if kink_aware:  # the kink-aware engine shards whole trajectories
        reference = run_sweep(SweepConfig(**cfg), slots=2, progress=False)
        assert int(reference.kink["num_events"].sum()) > 0
    path = tmp_path / "four.npz"
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    proc = _child("shard", path, env={"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}, cfg=cfg)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-3000:]
    with np.load(path) as z:
        for k in KEYS:
            if k == "drift":  # max |c(t) - c0| with c ~ 1: XLA may round c's last bit differently
                np.testing.assert_allclose(z[k], reference.drift, rtol=0, atol=1e-15)
            else:  # the trajectories themselves are bit-identical
                np.testing.assert_array_equal(z[k], getattr(reference, k), err_msg=k)
