"""Sweeps across processes: resume after SIGKILL, sharding over 4 (forced) CPU devices,
several writers resuming one folder at once, and `jax.distributed` with 2 processes.
Each compares against an uninterrupted single-process run in this process. Each starts
fresh Pythons and compiles, so all are `slow` (run with `-m slow`)."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from invariant_jax.sweep import BatchOptions, SweepConfig, run_sweep

CFG = dict(n_inits=24, t1=0.5, n_samples=10, n_save=11, kink_aware=False)
KEYS = ("index", "theta0", "theta_final", "loss_final", "drift", "num_steps", "status", "t_final", "result_codes")

CHILD = r"""
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from invariant_jax.sweep import BatchOptions, StoreOptions, SweepConfig, run_sweep
cfg = SweepConfig.from_dict(json.loads(sys.argv[1]))
mode, out = sys.argv[2], sys.argv[3]
if mode == "slow":  # a sweep that writes a chunk per harvest and dawdles after each
    run_sweep(cfg, out, batch=BatchOptions(slots=2, steps_per_call=8, progress=False),
              store=StoreOptions(flush_seconds=0.0), on_chunk=lambda p: time.sleep(0.25))
elif mode.startswith("resume"):  # one of several writers resuming one folder, with its own slots
    r = run_sweep(cfg, out, resume=True, batch=BatchOptions(slots=int(mode[6:]), steps_per_call=8, progress=False),
                  store=StoreOptions(flush_seconds=0.0))
    print(json.dumps({"n": len(r), "useful_steps": r.stats["useful_steps"]}))
elif mode.startswith("dist"):  # process p of 2 under jax.distributed (CPU, 127.0.0.1)
    p, port = map(int, mode[4:].split(":"))
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=p,
                               initialization_timeout=120)
    assert (jax.process_index(), jax.process_count()) == (p, 2)
    r = run_sweep(cfg, out, batch=BatchOptions(slots=2, steps_per_call=8, progress=False),
                  store=StoreOptions(flush_seconds=0.0))
    print(json.dumps({"n": len(r), "useful_steps": r.stats["useful_steps"]}))
else:
    assert jax.device_count() == 4, jax.devices()
    batch = BatchOptions(slots=4, steps_per_call=8, progress=False)
    # every device compiled first, so all four take trajectories (a device that must compile
    # joins only a run whose work outlasts its compiling)
    from invariant_jax.sweep._engines import config_engine
    graph = cfg.build_graph()
    config_engine(cfg, graph, *cfg.build_data(graph), batch=batch).warm_up()
    r = run_sweep(cfg, batch=batch)
    assert r.stats["devices"] == 4, r.stats
    np.savez(out, **{k: getattr(r, k) for k in KEYS})
""".replace("KEYS", repr(KEYS))


@pytest.fixture(scope="module")
def reference():
    return run_sweep(SweepConfig.from_dict(CFG), batch=BatchOptions(slots=2, steps_per_call=8, progress=False))


def _child(mode, out, env=None, cfg=CFG):
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(cfg), mode, str(out)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.exactness
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, reference):
    out = tmp_path / "run"
    proc = _child("slow", out)
    deadline = time.monotonic() + 240
    try:
        while len(list((out / "chunks").glob("chunk-*.parquet"))) < 3:
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
    resumed = run_sweep(
        SweepConfig.from_dict(CFG), out, resume=True, batch=BatchOptions(slots=2, steps_per_call=8, progress=False)
    )
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
        reference = run_sweep(SweepConfig.from_dict(cfg), batch=BatchOptions(slots=2, progress=False))
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


def _records_on_disk(out):
    from invariant_jax.sweep._store import read_chunk

    return np.concatenate([read_chunk(f)[0]["index"] for f in sorted((out / "chunks").glob("chunk-*"))])


def _check_folder(out, reference, results):
    from invariant_jax.sweep import load_sweep

    _, merged = load_sweep(out)
    assert list(merged.index) == list(range(CFG["n_inits"]))  # every index exactly once
    for k in KEYS:  # the same compiled program: bit-identical to one process's run
        np.testing.assert_array_equal(getattr(merged, k), getattr(reference, k), err_msg=k)
    on_disk = _records_on_disk(out)
    assert set(on_disk.tolist()) == set(range(CFG["n_inits"]))
    # claims: every record computed once (a takeover could duplicate a block; none expected here)
    assert len(on_disk) == CFG["n_inits"], np.bincount(on_disk)
    assert sum(r["useful_steps"] for r in results) == int(reference.num_steps.sum())
    assert all(r["n"] == CFG["n_inits"] for r in results)  # each writer returns the whole sweep


def _results_of(procs):
    """Wait for every child sweep; each prints its result as JSON on its last line."""
    results = []
    for p in procs:
        o, e = p.communicate(timeout=400)
        assert p.returncode == 0, e.decode()[-3000:]
        results.append(json.loads(o.decode().strip().splitlines()[-1]))
    return results


@pytest.mark.slow
def test_concurrent_resumes_lose_no_record(tmp_path, reference):
    """Repro: two sweeps resuming into one folder wrote the same chunk names and lost
    records (63 of 64 left). Three writers with different slot counts start together."""
    out = tmp_path / "run"
    procs = [_child(f"resume{slots}", out) for slots in (2, 3, 4)]
    _check_folder(out, reference, _results_of(procs))


@pytest.mark.slow
def test_jax_distributed_two_processes_share_one_folder(tmp_path, reference):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    env = {"JAX_PLATFORMS": "cpu"}
    procs = [_child(f"dist{p}:{port}", out, env=env) for p in (0, 1)]
    _check_folder(out, reference, _results_of(procs))
