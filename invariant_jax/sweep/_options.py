"""The option objects of the sweep entry points: how the engine runs a batch
(`BatchOptions`) and how `run_sweep` writes its results folder (`StoreOptions`). Neither
changes a computed number; both are validated once, on construction."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from .._checks import check_integer, check_positive
from ._devices import choose_device_mode, engine_devices

INT32_MAX = 2**31 - 1
"""The engine's counters are int32: the largest slot count, `steps_per_call` or chunk size."""


def check_count(name: str, v) -> None:
    """Raise unless `v` is an integer in `[1, 2**31 - 1]` (the engine's counters are int32)."""
    check_integer(name, v, minimum=1)
    if v > INT32_MAX:
        raise ValueError(f"{name} must be at most {INT32_MAX} (the engine counts in int32); got {v!r}.")


def _devices(devices):
    return None if devices is None else tuple(devices)


class BatchOptions(eqx.Module):
    """How the continuous-batching engine runs a sweep. These settings never change the
    results (one compiled program per setting; `exact=True` results are bit-identical
    across slot counts, `steps_per_call`, resume and device counts).

    **Fields:**

    - `slots`: trajectories integrated at once (an integer >= 1; rounded up to a multiple
        of the devices; `None`: 256 on CPUs, 4096 per device in vmap mode on GPUs/TPUs).
    - `steps_per_call`: loop iterations between harvests (`None`: 64 solver steps;
        kink-aware: 64 segments in exact mode, 4 under vmap so finished slots refill soon).
    - `exact`: evaluate each slot with the unbatched program (an idle slot costs nothing
        on CPU, and results do not depend on the number of slots), or (`False`) vmap over
        slots, which suits GPUs (`None`: exact on CPUs, vmap on GPUs/TPUs).
    - `devices`: JAX devices to split the slots among, each running its own loop (`None`:
        all local devices; in vmap mode on CPUs one, since batched LAPACK calls can hang
        on several: `engine_devices`).
    - `progress`: show a progress bar (`None`: the entry point's default, off for
        `sweep_flows`, on for `run_sweep`).
    """

    slots: int | None = None
    steps_per_call: int | None = None
    exact: bool | None = None
    devices: tuple | None = eqx.field(default=None, converter=_devices)
    progress: bool | None = None

    def __check_init__(self):
        for name in ("slots", "steps_per_call"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        for name in ("exact", "progress"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"{name} must be True, False or None; got {getattr(self, name)!r}.")
        if self.devices is not None and not self.devices:
            raise ValueError("devices is empty; pass None (all local devices) or a list of JAX devices.")
        if self.devices is not None and self.exact is not None:
            engine_devices(self.devices, exact=bool(self.exact))  # vmap mode on several CPUs: an error

    def engine_keywords(self) -> dict:
        """The engine's `slots`, `exact` and `devices`, with `exact` and `slots` chosen for
        the devices where `None` (`choose_device_mode`, as the CLI chooses them)."""
        exact, slots, _ = choose_device_mode(exact=self.exact, slots=self.slots, devices=self.devices)
        return dict(slots=slots, exact=exact, devices=self.devices)

    def show_progress(self, default: bool) -> bool:
        """`progress`, or `default` where it was left `None`."""
        return default if self.progress is None else bool(self.progress)


class StoreOptions(eqx.Module):
    """How `run_sweep` writes and shares its results folder. They never change the
    records, only when and in which files they are written.

    **Fields:**

    - `flush_seconds`: finished records are written at least this often (a finite
        number >= 0; 0 writes after every harvest).
    - `chunk_size`: and in chunks of at most this many records (an integer >= 1).
    - `stale_seconds`: a claim whose writer's heartbeat is older than this is taken over
        (positive; a writer on the same host whose process is gone is taken over at once).
    """

    flush_seconds: float = 2.0
    chunk_size: int = 1024
    stale_seconds: float = 120.0

    def __check_init__(self):
        check_positive("flush_seconds", self.flush_seconds, allow_zero=True)
        check_count("chunk_size", self.chunk_size)
        check_positive("stale_seconds", self.stale_seconds)


BATCH_KEYWORDS = ("slots", "steps_per_call", "exact", "devices", "progress")
"""The old thin keywords of `sweep_flows` / `run_sweep` that `BatchOptions` now holds."""

STORE_KEYWORDS = ("flush_seconds", "chunk_size", "stale_seconds")
"""The old thin keywords of `run_sweep` that `StoreOptions` now holds."""


def deprecated_replacements(where: str) -> dict[str, str]:
    """`take_deprecated`'s replacement texts for the engine and store keywords of `where`."""
    out = {k: f"pass batch=ij.sweep.BatchOptions({k}=...) instead" for k in BATCH_KEYWORDS}
    if where == "run_sweep":
        out.update({k: f"pass store=ij.sweep.StoreOptions({k}=...) instead" for k in STORE_KEYWORDS})
    return out


def fold_options(cls, given, old: dict, names: tuple[str, ...], where: str):
    """`given` (an instance of `cls`, or `None` for the default) with the deprecated
    keywords in `old` that belong to `cls` (`names`) folded in; they go only without `given`."""
    mine = {k: old.pop(k) for k in names if k in old}
    if given is None:
        return cls(**mine)
    if not isinstance(given, cls):
        raise TypeError(f"{where}: expected a {cls.__name__} (or None); got {given!r}.")
    if mine:
        raise ValueError(
            f"{where}: pass {', '.join(sorted(mine))} inside {cls.__name__}(...), not as keywords as well."
        )
    return given
