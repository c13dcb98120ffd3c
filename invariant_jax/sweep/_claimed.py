"""One writer's share of a sweep in a results folder: claim blocks of indices, run them,
write their records, until the whole sweep is done (`run_claimed`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ._columns import trajectory_columns
from ._config import SweepConfig
from ._engines import add_stats, progress_bar
from ._options import StoreOptions
from ._result import stats_dict
from ._store import BUSY, DONE, ResultsStore


def default_block_size(n_inits: int) -> int:
    """Initializations per claim: about 64 blocks per sweep, between 1 and 256."""
    return max(1, min(256, -(-int(n_inits) // 64)))


class _Writer:
    """The state of one writer: which indices are done, the records not yet written, and
    the chunks written so far."""

    def __init__(
        self,
        config: SweepConfig,
        engine,
        store: ResultsStore,
        options: StoreOptions,
        progress: bool,
        on_chunk: Callable[[Path], None] | None,
    ):
        self.n = n = config.n_inits
        self.config, self.engine, self.store, self.options, self.on_chunk = config, engine, store, options, on_chunk
        self.graph = config.build_graph()
        self.done = np.zeros(n, bool)
        self.done[store.done_indices()] = True
        store.new_indices()  # mark the chunks read so far as seen
        self.bar, self.update = progress_bar(n, int(self.done.sum()), progress)
        self.buffer: list[dict] = []
        self.written: list[str] = []  # every chunk this writer wrote, in order
        self.last = time.monotonic()

    def refresh(self) -> None:
        """Count the indices other writers finished meanwhile as done."""
        new = self.store.new_indices()
        new = new[(new >= 0) & (new < self.n)]
        fresh = np.unique(new[~self.done[new]])
        self.done[fresh] = True
        if self.bar is not None and fresh.size:
            self.bar.update(int(fresh.size))

    def flush(self) -> None:
        """Write the buffered records as one chunk."""
        if self.buffer:
            rec = {k: np.concatenate([b[k] for b in self.buffer]) for k in self.buffer[0]}
            # the tidy table's derived columns (topology, ranks, names) for pandas/DuckDB users
            rec.update(trajectory_columns(self.graph, rec, rtol=self.config.rtol, atol=self.config.atol))
            path = self.store.write_chunk(rec)
            self.written.append(path.name)
            if self.on_chunk is not None:
                self.on_chunk(path)
        self.buffer.clear()
        self.last = time.monotonic()

    def on_results(self, rec) -> None:
        """Buffer a harvest; write chunks of `chunk_size`, and all of it every `flush_seconds`."""
        size = self.options.chunk_size
        self.done[rec["index"]] = True
        for s in range(0, len(rec["index"]), size):
            self.buffer.append({k: v[s : s + size] for k, v in rec.items()})
            if sum(len(b["index"]) for b in self.buffer) >= size:
                self.flush()
        if time.monotonic() - self.last >= self.options.flush_seconds:
            self.flush()
        self.update(rec)

    def claim_round(self, claims, pending: list[int], blocks: list[np.ndarray], target: int, mine: list[int]):
        """Claim blocks of `pending` (appended to `mine`, so that an interrupt releases them)
        until `target` indices are to do: `(todo, busy)`, `busy` the blocks to look at
        again (claimed by others, or not looked at)."""
        todo: list[np.ndarray] = []
        busy: list[int] = []
        for k in pending:
            if sum(map(len, todo)) >= target:
                busy.append(k)  # not looked at this round
                continue
            if self.done[blocks[k]].all():
                continue
            got = claims.try_claim(k)
            if got == DONE:
                self.refresh()
                if self.done[blocks[k]].all():
                    continue
                got = claims.try_claim(k, force=True)  # its records were lost (quarantined)
            if got == BUSY:
                busy.append(k)
                continue
            self.refresh()  # another writer may have finished part of it meanwhile
            rest = blocks[k][~self.done[blocks[k]]]
            if rest.size == 0:
                claims.mark_done(k, [])
                continue
            mine.append(k)
            todo.append(rest)
        return todo, busy


def run_claimed(
    config: SweepConfig,
    engine,
    store: ResultsStore,
    *,
    pi: int,
    pc: int,
    progress: bool,
    options: StoreOptions,
    on_chunk,
) -> dict:
    """Claim blocks of indices, run them, write their records, until the sweep is done
    (writer `pi` of `pc` starts at block `pi * n_blocks / pc`). **Returns:** the stats."""
    n = config.n_inits
    w = _Writer(config, engine, store, options, progress, on_chunk)
    assert store.manifest is not None, "open the store first"
    bs = int(store.manifest.get("block_size") or default_block_size(n))
    n_blocks = -(-n // bs)
    blocks = [np.arange(k * bs, min(n, (k + 1) * bs)) for k in range(n_blocks)]
    start = (pi * n_blocks) // pc
    pending = [(start + j) % n_blocks for j in range(n_blocks)]
    pending = [k for k in pending if not w.done[blocks[k]].all()]
    target = 2 * engine.slots  # indices per round: enough to keep every slot busy
    stale = options.stale_seconds
    claims = store.claims(stale_seconds=stale, heartbeat_seconds=min(5.0, stale / 4))
    stats = None
    claims.start()
    mine: list[int] = []

    since: dict[int, int] = {}  # block -> chunks written before it was claimed

    def finish_blocks() -> None:
        # write what is buffered, then mark done the blocks whose records are all written
        # (each lists the chunks written since it was claimed)
        w.flush()
        for k in [k for k in mine if w.done[blocks[k]].all()]:
            claims.mark_done(k, w.written[since.pop(k) :])
            mine.remove(k)

    def more() -> np.ndarray:
        # the engine's queue runs low: the next round, claimed while its slots still work
        nonlocal pending
        finish_blocks()
        todo, pending = w.claim_round(claims, pending, blocks, target, mine)
        since.update((k, len(w.written)) for k in mine if k not in since)
        return np.concatenate(todo) if todo else np.zeros(0, np.int64)

    try:
        while pending:
            first = more()
            if not first.size:
                if pending:  # the rest is claimed by live writers: wait, and take over the dead
                    time.sleep(min(1.0, stale / 10))
                    w.refresh()
                continue
            # (expected: what is left of the whole sweep, which decides whether another device joins)
            left = int(n - w.done.sum())
            stats = add_stats(stats, engine.run(first, on_results=w.on_results, more=more, expected=left))
            finish_blocks()
    finally:
        try:
            w.flush()  # may raise again (a full disk, an on_chunk that raises): release anyway
        finally:
            for k in mine:  # interrupted: give the unfinished blocks back at once
                claims.release(k)
            claims.stop()  # else the heartbeat thread keeps this writer's claims alive forever
            if w.bar is not None:
                w.bar.close()
    return stats_dict(stats, engine)
