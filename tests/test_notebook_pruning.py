"""Execute notebooks/pruning.ipynb at small size with nbclient."""

import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent


def test_pruning_notebook_runs_small(monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("IJ_NOTEBOOK_SMALL", "1")
    nb = nbformat.read(ROOT / "notebooks" / "pruning.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    t = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    elapsed = time.perf_counter() - t
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    # the nuclear arm disconnects neurons and the pruning is lossless
    line = next(l for l in text.splitlines() if l.strip().startswith("nuclear:"))
    cut = eval(line.split("cut off")[1])
    assert min(cut) >= 10
    assert "max |f_pruned - f|" in text
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert figures >= 2
    print(f"notebook executed in {elapsed:.1f}s (small size)", file=sys.stderr)
