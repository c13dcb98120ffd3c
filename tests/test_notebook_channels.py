"""Execute notebooks/flat_channels.ipynb at small size with nbclient."""

import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent


def test_flat_channels_notebook_runs_small(monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("IJ_NOTEBOOK_SMALL", "1")
    nb = nbformat.read(ROOT / "notebooks" / "flat_channels.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    t = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    elapsed = time.perf_counter() - t
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    # the jump procedure's fitted exponents are printed and close to 2
    line = next(l for l in text.splitlines() if l.startswith("sharpness ~"))
    p = float(line.split("p =")[1].split("+-")[0])
    assert abs(p - 2) < 0.1
    assert "channel minimum" in text and "GLU convergence rate" in text
    assert "escape from gamma" in text
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert figures >= 5
    print(f"notebook executed in {elapsed:.1f}s (small size)", file=sys.stderr)
