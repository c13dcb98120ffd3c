"""Where a sweep's slots run: the devices (`engine_devices`), the mode and slot count
(`choose_device_mode`), and one program per device (`PerDevice`).

`PerDevice` runs the same jitted program on each device's share of the slots, dispatched
asynchronously, so the devices run side by side and never wait for each other. The
engine uses it for implicit solvers instead of `jax.shard_map`: inside `shard_map` JAX
gives every array the manual mesh's sharding, and lineax's structure checks reject the
Newton operators that lack it (patrick-kidger/lineax#185).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.tree_util as jtu
from jax.sharding import NamedSharding


class Blocks:
    """A pytree of slots kept on the devices between calls, one block per device (the
    engine's state, which is not split and joined again at every call)."""

    def __init__(self, blocks: list, sharding: NamedSharding):
        self.blocks = blocks
        self.sharding = sharding

    def joined(self):
        """The pytree of global arrays, split over the devices as `sharding` splits them."""
        return jtu.tree_map(lambda *b: join(self.sharding, b), *self.blocks)

    @property
    def width(self) -> int:
        """The number of slots."""
        return sum(jtu.tree_leaves(b)[0].shape[0] for b in self.blocks)


class PerDevice:
    """`fn` run on each device of `sharding` (a `NamedSharding` over one axis of the
    slots). The first `n_rep` arguments are the same on every device (copied there once
    per distinct array); the others are split along their first axis, one block per
    device, as `sharding` splits them (global arrays, or `Blocks`). The outputs are joined
    into global arrays the same way, except the state, which stays on the devices as
    `Blocks`: the whole output (`state_at=None`) or its element `state_at`. `donate`:
    argument positions whose buffers the program may reuse (`jax.jit`'s `donate_argnums`)."""

    def __init__(
        self,
        fn: Callable,
        sharding: NamedSharding,
        *,
        n_rep: int = 1,
        donate: tuple[int, ...] = (),
        state_at: int | None = None,
    ):
        self.fn = jax.jit(fn, donate_argnums=donate)
        self.sharding = sharding
        self.n_rep = n_rep
        self.state_at = state_at
        self._copies: dict = {}  # (position, device index) -> (leaves, their copies there)

    def __call__(self, *args):
        n = len(self.sharding.mesh.devices.flat)
        per_device = [self._args(args, k) for k in range(n)]  # all blocks before any is donated
        outs = [self.fn(*a) for a in per_device]
        if self.state_at is None:
            return Blocks(outs, self.sharding)
        joined = [
            Blocks([o[i] for o in outs], self.sharding) if i == self.state_at else self._joined([o[i] for o in outs])
            for i in range(len(outs[0]))
        ]
        return tuple(joined)

    def _args(self, args, k: int) -> list:
        rep = [self._replicated(i, a, k) for i, a in enumerate(args[: self.n_rep])]
        return rep + [_block(a, k) for a in args[self.n_rep :]]

    def _replicated(self, i: int, tree, k: int):
        leaves, treedef = jtu.tree_flatten(tree)
        kept = self._copies.get((i, k))
        if kept is None or len(kept[0]) != len(leaves) or any(a is not b for a, b in zip(kept[0], leaves)):
            device = self.sharding.mesh.devices.flat[k]
            copies = [jax.device_put(a, device) if isinstance(a, jax.Array) else a for a in leaves]
            kept = self._copies[(i, k)] = (leaves, copies)
        return jtu.tree_unflatten(treedef, kept[1])

    def _joined(self, blocks: list):
        return jtu.tree_map(lambda *b: join(self.sharding, b), *blocks)


def _block(tree, k: int):
    """Device `k`'s block of a split argument (`Blocks`, or a pytree of global arrays)."""
    return tree.blocks[k] if isinstance(tree, Blocks) else jtu.tree_map(lambda a: a.addressable_data(k), tree)


def join(sharding: NamedSharding, blocks) -> jax.Array:
    """One global array from one block per device, split along the first axis."""
    shape = (sum(b.shape[0] for b in blocks),) + blocks[0].shape[1:]
    return jax.make_array_from_single_device_arrays(shape, sharding, list(blocks))


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

    **Returns:** `(exact, slots, line)`, `line` saying what was chosen and why (the sweep
    header prints it).
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
    return bool(exact), int(slots), line
