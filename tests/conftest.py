import os
import sys
import time
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
# the CLI's persistent compilation cache stays off in tests (no writes to ~/.cache)
os.environ["INVARIANT_JAX_NO_CACHE"] = "1"

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _compilation_cache_isolated():
    """No test leaves JAX's persistent compilation cache switched on (or its options
    changed) for the tests after it: the options are put back after every test."""
    from invariant_jax.cli._common import compilation_cache_settings, restore_compilation_cache

    saved = compilation_cache_settings()
    yield
    restore_compilation_cache(saved)


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
