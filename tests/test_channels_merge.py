"""`benchmarks/channels_merge.py --seeds-per-width`: each width keeps its smallest seeds."""

import sys
from pathlib import Path

import numpy as np
import pytest

from invariant_jax import channels as ch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from channels_merge import first_seeds  # noqa: E402


def _study(cells) -> ch.ConvergenceStudy:
    rows = [(a, b, r, s) for a, b, r, seeds in cells for s in seeds]
    cols = zip(*rows)
    rec = {k: np.asarray(v) for k, v in zip(("activation", "bias", "r", "seed"), cols)}
    return ch.ConvergenceStudy(records=dict(rec, loss=np.zeros(len(rows))), settings={}, seconds=0.0)


def test_first_seeds_keeps_each_widths_smallest_seeds_by_brute_force():
    cells = [("g", False, 1, [3, 0, 2, 1]), ("g", False, 2, [5, 4, 0, 1, 2, 3]), ("g", True, 2, [9, 7, 8, 6])]
    out = first_seeds(_study(cells), [2, 3])
    got = sorted(zip(out.records["bias"].tolist(), out.records["r"].tolist(), out.records["seed"].tolist()))
    want = sorted((b, r, s) for _, b, r, seeds in cells for s in sorted(seeds)[: {1: 2, 2: 3}[r]])
    assert got == want and len(got) == 8
    assert out.settings["seeds_per_width"] == {1: 2, 2: 3}
    with pytest.raises(SystemExit, match="fewer than the 5"):
        first_seeds(_study(cells), [2, 5])
    with pytest.raises(SystemExit, match="2 widths"):
        first_seeds(_study(cells), [2])
