"""Where a sweep's slots run: the devices (`engine_devices`), the mode and slot count
(`choose_device_mode`), and what the per-device loops of one run share (`RunQueue`,
`worth_joining`).

On several devices each device runs its own host loop over its own slots (the same
compiled programs, compiled once per device), all taking from one queue: a device
harvests and refills as soon as its own slots are done, never waiting for another's.
A device whose programs are not compiled yet joins a run only when the work left would
outlast its compilation (`worth_joining`), and compiles in the background meanwhile, so
a small sweep costs no more than on one device.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import jax
import numpy as np

JOIN_FACTOR = 2.0
"""A device that must compile first joins a run when the work left, at the running
devices' measured rate, would last `JOIN_FACTOR` times its compilation (it compiles
beside the running devices, slowed by them; `worth_joining`)."""


def worth_joining(remaining: float, rate: float, compile_s: float, factor: float = JOIN_FACTOR) -> bool:
    """Whether a device that must first compile for `compile_s` seconds should join a
    run with `remaining` trajectories left (`inf`: unknown) that the running devices
    finish at `rate` trajectories per second: when the work left would last `factor`
    times the compilation."""
    if remaining <= 0:
        return False
    if math.isinf(remaining) or compile_s <= 0:
        return True
    return rate > 0 and remaining / rate > factor * compile_s


class RunQueue:
    """The queue and the callbacks of one `SweepEngine.run`, shared by its device loops.
    Every method holds one lock, so the caller's `more`, `on_results`, `progress` and
    `should_stop` are never called concurrently. `expected`: the trajectories the run
    is to finish (default: the `indices`, or unknown with `more`)."""

    def __init__(
        self,
        indices,
        *,
        on_results: Callable[[dict], None],
        progress: Callable[[dict], None] | None,
        should_stop: Callable[[], bool] | None,
        more: Callable[[], np.ndarray] | None,
        expected: int | None,
    ):
        self.indices = np.asarray(indices, dtype=np.int64)
        self.q = 0
        self._more = more
        self._on_results, self._progress, self._should_stop = on_results, progress, should_stop
        self.expected = float(len(self.indices) if more is None else math.inf) if expected is None else float(expected)
        self.done = 0  # trajectories harvested
        self.stopped = False  # should_stop said so, or a device loop failed
        self.error: BaseException | None = None
        self.lock = threading.RLock()

    def take(self, k: int) -> np.ndarray:
        """Up to `k` indices from the queue (asking `more` when it is empty)."""
        with self.lock:
            parts = []
            while k > 0 and not self.stopped:
                if self.q == len(self.indices):
                    if self._more is None:
                        break
                    self.indices, self.q = np.asarray(self._more(), dtype=np.int64), 0
                    if not self.indices.size:
                        self._more = None
                        break
                n = min(k, len(self.indices) - self.q)
                parts.append(self.indices[self.q : self.q + n])
                self.q, k = self.q + n, k - n
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def prefetch(self, k: int) -> None:
        """Ask `more` now if fewer than `k` indices are queued, so that the next `take`
        does not (a device loop calls this while its device works: `more` writes the
        finished records, and the device would wait for it)."""
        with self.lock:
            if self._more is None or self.stopped or len(self.indices) - self.q >= k:
                return
            new = np.asarray(self._more(), dtype=np.int64)
            if not new.size:
                self._more = None
            self.indices, self.q = np.concatenate([self.indices[self.q :], new]), 0

    @property
    def exhausted(self) -> bool:
        """Nothing left to queue, now or later."""
        with self.lock:
            return self.stopped or (self.q == len(self.indices) and self._more is None)

    def deliver(self, rec: dict) -> None:
        """A harvest: to `on_results`, then `progress`."""
        with self.lock:
            self.done += len(rec["index"])
            self._on_results(rec)
            if self._progress is not None:
                self._progress(rec)

    def check_stop(self) -> bool:
        """Whether the run stops (`should_stop()` said so once, or a loop failed)."""
        with self.lock:
            if not self.stopped and self._should_stop is not None and self._should_stop():
                self.stopped = True
            return self.stopped

    def fail(self, error: BaseException) -> None:
        """A device loop failed: every loop stops, and the run raises `error`."""
        with self.lock:
            self.stopped = True
            if self.error is None:
                self.error = error


class Joiner:
    """The devices of a run beyond the first: those compiled already start at once, the
    others (in the background, compiling first) once `worth_joining` says so, judged
    after each harvest of the first device's loop. `loop(device, queue)` runs a device's
    loop; `compile(device)` compiles its programs."""

    def __init__(self, devices: list, ready: set, queue: RunQueue, loop: Callable, compile: Callable, compile_s):
        self.waiting = [d for d in devices if d not in ready]
        self.queue, self._loop, self._compile, self._compile_s = queue, loop, compile, compile_s
        self.threads: list[threading.Thread] = []
        self._t0 = time.perf_counter()
        for d in devices:
            if d in ready:
                self._start(d, compiled=True)

    def _start(self, device, compiled: bool) -> None:
        def target():
            try:
                if not compiled:
                    self._compile(device)
                if not self.queue.exhausted:
                    self._loop(device, self.queue)
            except BaseException as e:  # noqa: BLE001 (raised again by the run, in the caller's thread)
                self.queue.fail(e)

        t = threading.Thread(target=target, name=f"sweep-{device}", daemon=False)
        t.start()
        self.threads.append(t)

    def first_ready(self) -> None:
        """The first device's programs are compiled: its rate is measured from now."""
        self._t0 = time.perf_counter()

    def consider(self) -> None:
        """After a harvest of the first device: start the waiting devices if worth it."""
        if not self.waiting or self.queue.exhausted:
            return
        q = self.queue
        rate = q.done / max(time.perf_counter() - self._t0, 1e-9)
        if worth_joining(q.expected - q.done, rate, self._compile_s()):
            for d in self.waiting:
                self._start(d, compiled=False)
            self.waiting = []

    def finish(self) -> None:
        """Wait for the started devices (they stop once the queue is exhausted). A signal
        while waiting (Ctrl-C, SIGTERM) stops them, and is raised once they have stopped,
        so that no device's loop outlives the run."""
        raised: BaseException | None = None
        for t in self.threads:
            while t.is_alive():
                try:
                    t.join()
                except BaseException as e:  # noqa: BLE001 (raised below, once every loop has stopped)
                    self.queue.fail(e)
                    raised = raised or e
        if raised is not None:
            raise raised


def engine_devices(devices=None, *, exact: bool = True) -> list:
    """The devices a sweep runs on: `devices`, or (`None`) every local device. Vmap mode
    on CPUs runs on one device: batched LAPACK calls (the Filippov solve of sliding
    pairs, implicit solvers' LU) split a large batch over XLA's intra-op threads and wait
    for them, and with one CPU device per core every such thread runs a device's program,
    so none is left to do the work and the sweep hangs. Several CPU devices given in vmap
    mode are an error; exact mode (each slot unbatched) has no batched calls."""
    chosen = list(jax.local_devices() if devices is None else devices)
    kept = _one_cpu_for_vmap(chosen, exact)
    if devices is not None and len(kept) < len(chosen):
        raise ValueError(
            f"vmap mode (exact=False) on {len(chosen)} CPU devices can hang: batched LAPACK calls wait for "
            "XLA's CPU threads, which all run device programs. Use exact mode (exact=True, the CPU default), "
            "or one device: devices=jax.devices()[:1] (the default for vmap mode on CPUs)."
        )
    return kept


def _one_cpu_for_vmap(devices: list, exact: bool) -> list:
    # vmap mode on several CPU devices: the first only (`engine_devices` says why)
    return devices[:1] if not exact and len(devices) > 1 and devices[0].platform == "cpu" else devices


CPU_SLOTS = 256
"""Slots of a sweep on CPUs (exact mode: an idle slot costs nothing there). 256 against 64
took 13% and 11% less engine time on 2 devices and 5% and 3% on 1, in two runs of
`benchmarks/sweep_cores.py --slots` (docs/sweep.md, "How many slots")."""
ACCELERATOR_SLOTS_PER_DEVICE = 4096
"""Slots per GPU/TPU in vmap mode (the width `benchmarks/sweep_throughput.py` measured on an H200)."""


def choose_device_mode(*, exact: bool | None = None, slots: int | None = None, devices=None) -> tuple[bool, int, str]:
    """Exact or vmap mode, and the slot count, for the devices JAX runs on: the one place
    they are decided (the CLI, and `BatchOptions.engine_keywords` for the Python entry points).

    On CPUs: exact mode (each slot's own program, bit-for-bit results, an idle slot costs
    nothing) with `CPU_SLOTS` (256) slots. On GPUs/TPUs: vmap mode (one batched step for all slots; a
    loop of per-slot kernels would leave the accelerator idle) with 4096 slots per device.
    A mode or slot count the user gave is kept.

    **Arguments:**

    - `exact`: `True`/`False` as given by `--exact`/`--vmap`, or `None` to choose.
    - `slots`: `--slots`, or `None` to choose.
    - `devices`: the devices (default `jax.devices()`); each has a `.platform`.

    **Returns:** `(exact, slots, line)`, `line` saying what was chosen and why, and on
    several devices when they join (`worth_joining`; the sweep header prints it).
    """
    devices = list(jax.devices() if devices is None else devices)
    platform = devices[0].platform
    accelerator = platform != "cpu"
    chosen = []
    if exact is None:
        exact = not accelerator
        chosen.append("mode")
    if len(_one_cpu_for_vmap(devices, exact)) < len(devices):  # as the engine does (`engine_devices`)
        devices = devices[:1]
        chosen.append("one device for vmap mode")
    if slots is None:
        slots = ACCELERATOR_SLOTS_PER_DEVICE * len(devices) if accelerator and not exact else CPU_SLOTS
        chosen.append("slots")
    given = [w for w in ("mode", "slots") if w not in chosen]
    why = "; ".join(
        ([f"{' and '.join(chosen)} chosen for {platform}"] if chosen else [])
        + ([f"{' and '.join(given)} as given"] if given else [])
    )
    line = (
        f"{'exact' if exact else 'vmap'} mode, {slots} slots on {len(devices)} {platform} "
        f"device{'s' if len(devices) != 1 else ''} ({why})"
    )
    if len(devices) > 1:
        line += "; a device not compiled yet joins once the work left outlasts its compiling"
    return bool(exact), int(slots), line
