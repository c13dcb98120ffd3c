"""A sweep's summary computed a chunk at a time (`sweep/_stream.py`) against NumPy on the
whole columns: `np.median` on hostile values (clusters, ties, signed zeros, infinities,
NaN, integers) however they are split into chunks and however few values a selection
may collect; and a folder's summary and `table.csv` against the same computed from all
its records loaded at once."""

import json

import numpy as np
import pytest

import invariant_jax.sweep._stream as stream
import invariant_jax.sweep._summary as summary
from invariant_jax.sweep import (
    BatchOptions,
    SweepConfig,
    load_sweep,
    manifest_for,
    run_sweep,
    status_is_success,
    summarize_sweep,
    with_columns,
)
from invariant_jax.sweep._result import FIELDS
from invariant_jax.sweep._store import ResultsStore

_RNG = np.random.default_rng(0)
_CASES = {
    "empty": np.zeros(0),
    "one": np.array([2.5]),
    "two": np.array([3.0, -1.0]),
    "normal": _RNG.normal(size=10_001),
    "normal even": _RNG.normal(size=10_000),
    "tiny negative": -np.abs(_RNG.normal(size=999)) * 1e-300,
    "one cluster": 1.0 + 1e-12 * _RNG.normal(size=5_000),
    "ties": _RNG.integers(0, 3, 8_000).astype(float),
    "mostly zero": np.concatenate([np.zeros(7_000), _RNG.random(50)]),
    "one value": np.full(4_000, 3.25),
    "infinities": np.array([np.inf, -np.inf, 1.0, 2.0, np.inf]),
    "nan": np.array([1.0, np.nan, 2.0]),
    "signed zeros": np.array([-0.0, 0.0, -0.0, 1.0]),
    "integers": _RNG.integers(0, 60, 9_999),
    "large integers": _RNG.integers(0, 1 << 40, 3_000),
    "negative integers": _RNG.integers(-5, 5, 3_001),
}


def _median(x: np.ndarray, parts: int) -> tuple[float, int]:
    chunks = [{"v": p} for p in np.array_split(x, parts)]
    m = stream.ExactMedian(lambda c: c["v"])
    for c in chunks:
        m.add(c)
    reads = []
    stream.resolve_medians([m], lambda: reads.append(1) or chunks)
    return m.value(), len(reads)


@pytest.mark.parametrize("name", sorted(_CASES))
@pytest.mark.parametrize("collect", [1 << 18, 16])
def test_exact_median_is_numpys(name, collect, monkeypatch):
    """Equal to `np.median` of the whole column (NaN where it is NaN), split into 1 or 7
    chunks; with `collect = 16` a selection must narrow its bucket over several passes
    before it may collect it."""
    monkeypatch.setattr(stream, "_COLLECT", collect)
    x = _CASES[name]
    want = np.median(x) if x.size else np.nan
    for parts in (1, 7):
        got, passes = _median(x, parts)
        assert got == want or (np.isnan(got) and np.isnan(want)), (name, parts, got, want)
        assert passes <= 4  # (16 bits a pass: at most 64 bits)


def test_integer_medians_need_no_second_pass():
    """Steps and events (small non-negative integers) are counted one by one: the first
    pass finds their median."""
    x = _CASES["integers"]
    got, passes = _median(x, 5)
    assert got == np.median(x) and passes == 0


_CFG = dict(n_inits=40, t1=0.5, n_samples=10, n_save=11, kink_aware=False)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A folder of 40 trajectories whose records are rewritten into chunks of 7 records
    with indices spread over the whole sweep, out of order, one index written twice."""
    cfg = SweepConfig.from_dict(_CFG)
    res = run_sweep(cfg, batch=BatchOptions(slots=4, steps_per_call=8, progress=False))
    folder = tmp_path_factory.mktemp("stream") / "run"
    store = ResultsStore(folder)
    store.open(manifest_for(cfg))
    rec = {k: np.asarray(res.result_codes if k == "result" else getattr(res, k)) for k in FIELDS}
    rec.update(with_columns(cfg, cfg.build_graph(), rec))
    order = np.concatenate([_RNG.permutation(40), [5]])
    for a in range(0, len(order), 7):
        rows = order[a : a + 7]
        store.write_chunk({k: v[rows] for k, v in rec.items()})
    return cfg, folder


def test_folder_summary_is_numpy_on_the_loaded_columns(swept, monkeypatch):
    """Counts, extremes and medians of a folder summary equal NumPy's over the columns of
    `load_sweep` (each index once), with blocks of 8 indices and medians narrowing over
    passes; its `table.csv` equals the one of the loaded results, byte for byte."""
    monkeypatch.setattr(summary, "FOLDER_BLOCK", 8)
    monkeypatch.setattr(stream, "_COLLECT", 4)
    cfg, folder = swept
    _, res = load_sweep(folder)
    s = summarize_sweep(cfg, folder)
    a = s.aggregate
    ok = status_is_success(res.status)
    drift_in_tol = np.asarray(res.drift_in_tol)
    assert a["initializations"] == 40 == len(np.unique(res.index))
    assert a["steps_median"] == np.median(res.num_steps)
    assert (a["steps_min"], a["steps_max"]) == (res.num_steps.min(), res.num_steps.max())
    assert a["drift_tol_median"] == np.median(drift_in_tol[ok])
    assert a["drift_tol_max"] == np.max(drift_in_tol[ok])
    assert a["loss_final_median"] == np.median(res.loss_final[ok])
    assert a["fraction_within_100_tol"] == np.mean(drift_in_tol[ok] <= 100)
    whole = summarize_sweep(cfg, res)
    assert json.dumps(whole.aggregate, sort_keys=True) == json.dumps(a, sort_keys=True)
    assert s.table(5) == whole.table(5) and s.table(40) == whole.table(40)
    s.to_csv(folder.parent / "streamed.csv")
    whole.to_csv(folder.parent / "whole.csv")
    assert (folder.parent / "streamed.csv").read_bytes() == (folder.parent / "whole.csv").read_bytes()
    assert s._first is not None and len(s._first["index"]) == summary.TABLE_ROWS + 12  # check_rows = 32


def test_write_output_copies_a_file_with_its_hash(swept, tmp_path):
    """An output given as a file is copied and listed with its SHA-256, as its bytes are."""
    cfg, folder = swept
    store = ResultsStore(folder)
    src = tmp_path / "t.csv"
    src.write_bytes(b"a,b\n" + b"1,2\n" * 300_000)
    store.write_output(folder / "x.csv", src)
    store.write_output(folder / "y.csv", src.read_bytes())
    assert (folder / "x.csv").read_bytes() == src.read_bytes()
    hashes = json.loads((folder / "manifest.json").read_text())["output_sha256"]
    assert hashes["x.csv"] == hashes["y.csv"]
