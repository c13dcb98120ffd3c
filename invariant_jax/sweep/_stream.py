"""A sweep's summary statistics, computed over its records a chunk at a time, so that the
memory they take does not grow with the number of trajectories (`summarize_sweep` of a
results folder, whose records stay on disk).

- `ExactMedian`: `np.median` of a column by radix selection over passes: the first pass
  counts the values' 16 leading bits (of an order-preserving integer key), each later
  one the next 16 bits of the bucket that holds the middle, until that bucket is small
  enough to collect (usually the second pass). Small integers are counted one by one.
- `SummaryStream`: the counts, sums, extremes, medians, failures and leading rows that
  `summarize_sweep` reports, from chunks of records fed in any order.

A folder's chunks come from `ResultsStore.iter_records` (and `table.csv`'s blocks of
consecutive indices from `ResultsStore.iter_index_blocks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from .._results import STATUSES, status_is_success

_BITS = 16
_COLLECT = 1 << 18  # values a selection collects at most (2 MB of keys)
_SMALL = 1 << 24  # integers in [0, _SMALL) are counted one by one (a median's steps, events)
_TOP = np.uint64(1 << 63)


def _keys(x: np.ndarray) -> np.ndarray:
    """Unsigned integers in the order of the (non-NaN) float64 values `x`."""
    b = np.ascontiguousarray(x, np.float64).view(np.uint64)
    return np.where(b & _TOP, ~b, b | _TOP)


def _add_counts(counts: np.ndarray, x: np.ndarray) -> np.ndarray:
    new = np.bincount(x.astype(np.int64))
    if new.size > counts.size:
        new[: counts.size] += counts
        return new
    counts[: new.size] += new
    return counts


def _value(key: int) -> float:
    k = np.uint64(key)
    return float((k & ~_TOP if k & _TOP else ~k).view(np.float64))


@dataclasses.dataclass(eq=False)
class _Target:
    """A middle order statistic being selected: the `rank`-th smallest (from 0) of the
    `count` keys whose bits above `shift` are `prefix`; `value` once found."""

    prefix: int
    shift: int
    count: int
    rank: int
    value: float | None = None


class ExactMedian:
    """`np.median` of the values `pick(chunk)` gives over all chunks, equal to it (NaN if
    any value is NaN, NaN for none), in memory that does not grow with their number.
    Feed every chunk to `add` (the first pass); then, while `wants_pass`, `start_pass`,
    every chunk again to `feed`, and `end_pass` (`resolve_medians` does this); then
    `value`. Small non-negative integers (steps, events) are counted one by one and need
    no later pass."""

    def __init__(self, pick: Callable[[dict], np.ndarray]):
        self.pick = pick
        self.n = 0
        self.nan = False
        self.hist = np.zeros(1 << _BITS, np.int64)  # of the keys' leading bits
        self.counts: np.ndarray | None = np.zeros(0, np.int64)  # of each integer, while all are small
        self.targets: list[_Target] | None = None

    def add(self, chunk: dict) -> None:
        raw = np.asarray(self.pick(chunk)).ravel()
        if self.counts is not None and raw.size:
            small = np.issubdtype(raw.dtype, np.integer) and raw.min() >= 0 and raw.max() < _SMALL
            self.counts = _add_counts(self.counts, raw) if small else None
        x = raw.astype(np.float64)
        isnan = np.isnan(x)
        self.nan |= bool(isnan.any())
        x = x[~isnan]
        self.n += x.size
        self.hist += np.bincount((_keys(x) >> np.uint64(64 - _BITS)).astype(np.int64), minlength=1 << _BITS)

    @property
    def wants_pass(self) -> bool:
        if self.targets is None:
            ranks = sorted({(self.n - 1) // 2, self.n // 2}) if self.n and not self.nan else []
            if self.counts is not None:
                at = np.searchsorted(np.cumsum(self.counts), ranks, side="right")
                self.targets = [_Target(0, 0, 0, 0, float(v)) for v in at]
            else:
                self.targets = [_narrow(0, 64 - _BITS, self.hist, r) for r in ranks]
        for t in self.targets:
            if t.value is None and t.shift == 0:  # every bit known: the key is the value
                t.value = _value(t.prefix)
        return any(t.value is None for t in self.targets)

    def start_pass(self) -> None:
        """Begin a later pass: the middle's bucket is collected where it is small, else
        its next 16 bits are counted."""
        assert self.targets is not None
        self._todo = [t for t in self.targets if t.value is None]
        self._got: list[list] = [[] for _ in self._todo]
        self._hists = [np.zeros(1 << _BITS, np.int64) for _ in self._todo]
        self._span: list[list] = [[] for _ in self._todo]  # each chunk's smallest and largest key in it

    def feed(self, chunk: dict) -> None:
        x = np.asarray(self.pick(chunk), np.float64).ravel()
        k = _keys(x[~np.isnan(x)])
        for t, got, h, span in zip(self._todo, self._got, self._hists, self._span):
            inside = k[(k >> np.uint64(t.shift)) == np.uint64(t.prefix)]
            if inside.size:
                span += [int(inside.min()), int(inside.max())]
            if t.count <= _COLLECT:
                got.append(inside)
            else:
                low = (inside >> np.uint64(t.shift - _BITS)) & np.uint64((1 << _BITS) - 1)
                h += np.bincount(low.astype(np.int64), minlength=1 << _BITS)

    def end_pass(self) -> None:
        assert self.targets is not None
        for t, got, h, span in zip(self._todo, self._got, self._hists, self._span):
            if t.count <= _COLLECT:
                t.value = _value(int(np.sort(np.concatenate(got))[t.rank]))
            elif min(span) == max(span):  # (one value fills the bucket: no more passes)
                t.value = _value(span[0])
            else:
                self.targets[self.targets.index(t)] = _narrow(t.prefix, t.shift - _BITS, h, t.rank)
        del self._todo, self._got, self._hists, self._span

    def value(self) -> float:
        """The median (after the passes `wants_pass` asked for)."""
        if self.nan or not self.n:
            return float("nan")
        assert self.targets is not None and all(t.value is not None for t in self.targets)
        return float(np.mean(np.array([t.value for t in self.targets])))


def _narrow(prefix: int, shift: int, hist: np.ndarray, rank: int) -> _Target:
    """The target in the bucket of `hist` (counts of the next 16 bits under `prefix`)
    that holds the `rank`-th smallest."""
    cum = np.cumsum(hist)
    b = int(np.searchsorted(cum, rank, side="right"))
    return _Target((prefix << _BITS) | b, shift, int(hist[b]), rank - (int(cum[b - 1]) if b else 0))


def resolve_medians(found: Iterable[ExactMedian], chunks: Callable[[], Iterable[dict]]) -> None:
    """Make the passes over `chunks()` that the selections still want (each chunk read
    once per pass for all of them)."""
    found = list(found)
    while True:
        wanting = [m for m in found if m.wants_pass]
        if not wanting:
            return
        for m in wanting:
            m.start_pass()
        for chunk in chunks():
            for m in wanting:
                m.feed(chunk)
        for m in wanting:
            m.end_pass()


_NUM_STATUSES = len(STATUSES)


class _Running:
    """A running maximum or minimum that, like `np.max`, is NaN once any value is."""

    def __init__(self, op: Callable):
        self.op, self.v = op, None

    def add(self, x: np.ndarray) -> None:
        if x.size:
            m = self.op(x)
            self.v = m if self.v is None else self.op(np.array([self.v, m]))

    def get(self, empty):
        return empty if self.v is None else self.v


class _First:
    """The first `k` rows by index of the rows fed (each a dict of equal-length arrays)."""

    def __init__(self, k: int):
        self.k = k
        self.rows: dict | None = None

    def add(self, rows: dict) -> None:
        if self.k <= 0 or not len(rows["index"]):
            return
        both = rows if self.rows is None else {c: np.concatenate([self.rows[c], rows[c]]) for c in rows}
        keep = np.argsort(both["index"], kind="stable")[: self.k]
        self.rows = {c: v[keep] for c, v in both.items()}


class Streamed(NamedTuple):
    """What `SummaryStream.finish` returns: the `aggregate` numbers (`SweepSummary`'s
    names, spelled as words), and for kink-aware records `kink` (events and sliding) and
    `flags` (the flagged trajectories, by cause); `failure_counts` (`(code, count)` of
    each failing result); the `first` rows by index, the first `failures` and `flagged`
    rows (dicts of arrays, or None where there is none)."""

    aggregate: dict
    kink: dict | None
    flags: dict | None
    failure_counts: list[tuple[int, int]]
    first: dict | None
    failures: dict | None
    flagged: dict | None


class SummaryStream:
    """The counts, sums, extremes, exact medians, first failures and flagged
    trajectories, and first `head` rows (by index) of a sweep's records, fed a chunk at a
    time (`add`; in any order, each index once). `finish(chunks)` makes the medians'
    later passes over `chunks()` and returns them (`Streamed`).

    **Arguments:** `head` (rows kept), `listed` (failures and flagged rows kept),
    `fields` (the record fields kept for those), `drift_tol_units` (the drift, in
    tolerance units, that counts as within tolerance)."""

    def __init__(self, *, head: int, listed: int, fields: tuple[str, ...], drift_tol_units: float):
        self.n = 0
        self.status = np.zeros(_NUM_STATUSES, np.int64)
        self.sums: dict[str, int] = {}
        self.kink = False
        self.units = drift_tol_units
        self.max = {k: _Running(np.max) for k in ("n_components", "dt", "steps", "max_sliding_pairs", "sliding_time")}
        self.min_steps = _Running(np.min)
        self.med = {
            "dt": ExactMedian(lambda c: c["drift_in_tol"][_ok(c)]),
            "loss": ExactMedian(lambda c: c["loss_final"][_ok(c)]),
            "loss_c": ExactMedian(lambda c: c["loss_final"][_ok(c) & c["connected"]]),
            "loss_d": ExactMedian(lambda c: c["loss_final"][_ok(c) & ~c["connected"]]),
            "steps": ExactMedian(lambda c: c["num_steps"]),
        }
        self.codes: dict[int, int] = {}
        self.head = _First(head)
        self.failures, self.flagged = _First(listed), _First(listed)
        self.fields = fields

    def _sum(self, name: str, x) -> None:
        self.sums[name] = self.sums.get(name, 0) + int(np.sum(x))

    def add(self, c: dict) -> None:
        """One chunk: a dict of equal-length arrays (the summary's record fields)."""
        n = len(c["index"])
        if not n:
            return
        st = np.asarray(c["status"], np.int64)
        ok = _ok(c)
        if "num_events" in c and not self.kink:  # kink-aware records: their medians too
            self.kink = True
            self.med["events"] = ExactMedian(lambda c: c["num_events"])
            self.med["sliding"] = ExactMedian(lambda c: c["sliding_time"])
        self.n += n
        self.status += np.bincount(st, minlength=_NUM_STATUSES)[:_NUM_STATUSES]
        dt = np.asarray(c["drift_in_tol"], float)[ok]
        self._sum("disconnected", ~np.asarray(c["connected"], bool))
        self.sums["dt"] = self.sums.get("dt", 0) + dt.size
        self._sum("within", dt <= self.units)
        self._sum("rank_changed", (np.asarray(c["rank_start"]) != np.asarray(c["rank_end"])) & ok)
        self._sum("bottleneck_sign_changes", c["bottleneck_sign_changes"])
        self._sum("frozen_sign_changes", c["frozen_sign_changes"])
        for k, x in (("n_components", c["n_components"]), ("dt", dt), ("steps", c["num_steps"])):
            self.max[k].add(np.asarray(x))
        self.min_steps.add(np.asarray(c["num_steps"]))
        for m in self.med.values():
            m.add(c)
        failed = ~ok
        res = np.asarray(c["result"])
        bad = res[failed]  # (a failed status is a failing result: `status_code`)
        for code, k in zip(*np.unique(bad, return_counts=True)):
            self.codes[int(code)] = self.codes.get(int(code), 0) + int(k)
        self.head.add(c)
        keys = [k for k in self.fields if k in c]
        self.failures.add({k: c[k][failed] for k in ("index", "result", *keys)})
        if "num_events" in c:
            self._add_kink(c, ~failed, keys)

    def _add_kink(self, c: dict, succeeded: np.ndarray, keys: list[str]) -> None:
        amb = np.asarray(c["num_ambiguous"])
        for k in ("num_crossings", "num_ambiguous", "num_events"):
            self._sum(k, c[k])
        self._sum("sliding", np.asarray(c["num_sliding_entries"]) > 0)
        self._sum("ambiguous_trajectories", amb > 0)
        self.max["max_sliding_pairs"].add(np.asarray(c["max_sliding_pairs"]))
        self.max["sliding_time"].add(np.asarray(c["sliding_time"], float))
        flagged = succeeded & (amb > 0)
        self._sum("flagged", flagged)
        if "num_two_folds" in c:
            folds = np.asarray(c["num_two_folds"])
            self._sum("num_two_folds", folds)
            self._sum("flagged_folds", flagged & (folds > 0))
            self._sum("flagged_modes", flagged & (amb > folds))
        self.flagged.add({k: c[k][flagged] for k in ("index", "result", *keys)})

    def finish(self, chunks: Callable[[], Iterable[dict]]) -> Streamed:
        """The numbers, once every chunk was added; `chunks()` gives the chunks again for
        the medians' later passes."""
        resolve_medians(self.med.values(), chunks)
        med = {k: m.value() for k, m in self.med.items()}
        n, s, mx = self.n, self.sums, self.max
        nan = float("nan")
        n_dt = s.get("dt", 0)
        agg = {
            "initializations": n,
            **{f"status_{name}": int(self.status[i]) for i, name in enumerate(STATUSES)},
            "fraction_disconnected": s["disconnected"] / n if n else 0.0,
            "max_components": int(mx["n_components"].get(0)),
            "drift_tol_median": med["dt"],
            "drift_tol_max": float(mx["dt"].get(nan)),
            "fraction_within_100_tol": s["within"] / n_dt if n_dt else nan,
            "rank_changed": s.get("rank_changed", 0),
            "bottleneck_sign_changes": s.get("bottleneck_sign_changes", 0),
            "frozen_sign_changes": s.get("frozen_sign_changes", 0),
            "loss_final_median": med["loss"],
            "loss_final_median_connected": med["loss_c"],
            "loss_final_median_disconnected": med["loss_d"],
            "steps_min": int(self.min_steps.get(0)),
            "steps_median": med["steps"] if n else 0.0,
            "steps_max": int(mx["steps"].get(0)),
        }
        kink = flags = None
        if self.kink:
            kink = {
                "kink events median": med["events"] if n else 0.0,
                "kink crossings total": s.get("num_crossings", 0),
                "trajectories sliding": s.get("sliding", 0),
                "max pairs sliding at once": int(mx["max_sliding_pairs"].get(0)),
                "ambiguous events": s.get("num_ambiguous", 0),
                "trajectories with ambiguous events": s.get("ambiguous_trajectories", 0),
                **({"ambiguous events at two folds": s["num_two_folds"]} if "num_two_folds" in s else {}),
                "kink events total": s.get("num_events", 0),
                "sliding time median": med["sliding"] if n else 0.0,
                "sliding time max": float(mx["sliding_time"].get(0.0)),
            }
            flags = {"trajectories flagged": s.get("flagged", 0)}
            if "num_two_folds" in s:
                flags["trajectories flagged at a two fold"] = s["flagged_folds"]
                flags["trajectories flagged without consistent modes"] = s["flagged_modes"]
        codes = sorted(self.codes.items())
        return Streamed(agg, kink, flags, codes, self.head.rows, self.failures.rows, self.flagged.rows)


def _ok(c: dict) -> np.ndarray:
    return np.asarray(status_is_success(np.asarray(c["status"])))
