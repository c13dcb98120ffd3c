import os
import sys
import time
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
# the CLI's persistent compilation cache stays off in tests (no writes to ~/.cache)
os.environ.setdefault("INVARIANT_JAX_NO_CACHE", "1")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run_notebook(monkeypatch):
    """Execute `notebooks/<name>` at small size (IJ_NOTEBOOK_SMALL=1) with nbclient and
    return `(text outputs joined, number of PNG figures)`."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from nbclient import NotebookClient

    def run(name: str, timeout: int = 300):
        monkeypatch.setenv("IJ_NOTEBOOK_SMALL", "1")
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
        t = time.perf_counter()
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
        print(f"{name} executed in {time.perf_counter() - t:.1f}s (small size)", file=sys.stderr)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        text = "\n".join(o.get("text", "") for o in outputs)
        return text, sum("image/png" in o.get("data", {}) for o in outputs)

    return run
