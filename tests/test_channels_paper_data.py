"""docs/channels.md's comparison with the authors' committed data is the committed JSON
(benchmarks/results/channels_paper_data.json, written by benchmarks/channels_paper_data.py):
the table below is rendered from the file and must appear verbatim in the docs, and the
file's own numbers are consistent (the max difference covers every tabled row)."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "channels_paper_data.json"


def render(d: dict) -> str:
    """The markdown table of docs/channels.md's "Checked against the authors' data"."""
    lai = d["loss_at_infinity"]
    lines = [
        "| quantity | theirs | ours | difference |",
        "|---|---|---|---|",
        f"| loss at infinity, all {lai['n_rows']} rows w = {lai['w_range'][0]:g}..{lai['w_range'][1]:g} | "
        f"`loss_at_infinity.csv` | `2 L0(w)` | max {lai['max_abs_diff']:.1e} (relative {lai['max_rel_diff']:.1e}) |",
    ]
    for r in d["optima"]:
        lines.append(
            f"| {r['point']}: w, loss | {r['w_theirs']:.6f}, {r['loss_theirs']:.6e} | "
            f"{r['w_ours']:.6f}, {r['loss_ours']:.6e} ({r['kind_ours']}) | "
            f"{abs(r['w_ours'] - r['w_theirs']):.1e}, {abs(r['loss_ours'] - r['loss_theirs']):.1e} |"
        )
    for name, c in d["channel_curves"].items():
        if c["predicted_slope"] == 0:
            got = f"relative change {c['relative_change_total']:.1e} over the curve, {c['relative_change_last_two']:.1e} in its last step"
        else:
            got = f"log-log slope {c['fitted_slope']:.3f} (last segment {c['last_segment_slope']:.3f})"
        lines.append(
            f"| `{name}.csv` vs 1/eps | {got} | predicted slope {c['predicted_slope']:+.0f} | "
            f"{'-' if c['predicted_slope'] == 0 else format(c['fitted_slope'] - c['predicted_slope'], '+.3f')} |"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def data():
    return json.loads(RESULT.read_text())


def test_docs_table_is_the_committed_json(data):
    docs = (ROOT / "docs" / "channels.md").read_text()
    assert render(data) in docs, "regenerate the table: print(render(json)) from tests/test_channels_paper_data.py"
    assert data["source"]["commit"] in docs


def test_json_is_consistent(data):
    lai = data["loss_at_infinity"]
    diffs = np.array([r["ours"] - r["theirs"] for r in lai["rows"]])
    assert np.allclose(diffs, [r["diff"] for r in lai["rows"]], rtol=0, atol=1e-18)
    assert np.max(np.abs(diffs)) <= lai["max_abs_diff"]
    assert len(lai["rows"]) == -(-lai["n_rows"] // 100)  # every 100th row (the recorded --stride)
    assert "--repo" in data["command"] and len(data["source"]["commit"]) == 40
