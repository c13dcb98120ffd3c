"""Reading a results folder back: `load_sweep`."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ._config import SweepConfig
from ._result import SweepResult, result_from_records, with_columns
from ._store import ResultsStore


class SweepStoreWarning(UserWarning):
    """What the store did to a results folder: a damaged file set aside, a manifest rebuilt."""


def load_sweep(out: str | Path) -> tuple[SweepConfig, SweepResult]:
    """Read a results folder: its `SweepConfig` and every finished record.

    Reads Parquet folders and the `.npz` folders of earlier versions. A damaged chunk is
    skipped with a warning naming it (`run_sweep(..., resume=True)` recomputes it); a
    chunk of another sweep, or two different records for one index, raise `ValueError`
    naming the files. A lost or damaged manifest, or one whose config disagrees with every
    chunk, is rebuilt from the chunks (in memory, with a warning). Missing initializations
    are never silent: a `SweepStoreWarning` gives how many and which, and names the chunks
    that a finished claim lists but that are gone.
    """
    if not Path(out).is_dir():
        raise FileNotFoundError(f"{str(out)!r} is not a results folder (no such directory).")
    store = ResultsStore(out)
    man, why = store.manifest_or_rebuild()
    if man is None:
        raise FileNotFoundError(f"{str(out)!r} holds no sweep: {why}, and no chunk to rebuild it from.")
    if why is not None:
        warnings.warn(
            f"{why}: config read from {man['rebuilt_from']}; `--resume` rewrites the manifest.",
            SweepStoreWarning,
            stacklevel=2,
        )
    store.manifest = man
    config = SweepConfig.from_dict(man["config"])
    rec = store.load_records()
    if rec is None:
        raise ValueError(f"{str(out)!r} holds no finished trajectories yet; run it with --resume.")
    _warn_missing(store, config, rec["index"])
    return config, result_from_records(with_columns(config, config.build_graph(), rec), {}, config.rtol, config.atol)


def _ranges(idx) -> str:
    """`[0, 1, 2, 5, 7, 8]` -> `"0-2, 5, 7-8"` (at most 8 runs)."""
    runs, start = [], None
    for a, b in zip(idx, list(idx[1:]) + [None]):
        start = a if start is None else start
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = None
    return ", ".join(runs[:8]) + (f", ... ({len(runs) - 8} more runs)" if len(runs) > 8 else "")


def _warn_missing(store: ResultsStore, config: SweepConfig, index: np.ndarray) -> None:
    missing = sorted(set(range(config.n_inits)) - {int(i) for i in index})
    lost = store.lost_chunks()
    if not missing and not lost:
        return
    msg = f"{str(store.folder)!r}: {len(index)} of {config.n_inits} initializations have records"
    if missing:
        msg += f"; missing: {_ranges(missing)}"
    if lost:
        msg += (
            f"; chunks listed as finished but gone: {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''} "
            "(deleted or moved by hand)"
        )
    msg += ". `invariant-jax sweep --resume` computes the missing ones (a sweep still running adds them itself)."
    warnings.warn(msg, SweepStoreWarning, stacklevel=3)
