import os
import sys
import time
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
# the CLI's own compilation cache folder stays unused in tests (no writes to ~/.cache):
# the tests' processes share the session's temporary cache (JAX_COMPILATION_CACHE_DIR,
# set in the root conftest.py), which the CLI keeps when JAX already has one
os.environ["INVARIANT_JAX_NO_CACHE"] = "1"

ROOT = Path(__file__).resolve().parent.parent


# `make test` runs the files in parallel (pytest-xdist, `-n logical --dist loadfile
# --no-loadscope-reorder`): each file runs whole on one worker (its module fixtures compile
# once; a docs page's blocks share one namespace), and the workers take files in collection
# order. The files that cost most start first, so that no long one is left for the end
# while the other worker idles: the order is read from the seconds per file of the last
# timed clean-clone run (`benchmarks/test_suite_time.py`, its committed JSON); a file not
# listed there runs after these, in collection order.
def _slowest_first() -> list[str]:
    import json

    path = ROOT / "benchmarks" / "results" / "test_suite_time.json"
    try:
        seconds = json.loads(path.read_text())["seconds_per_file"]
    except (OSError, ValueError, KeyError):
        return []
    return sorted(seconds, key=lambda name: -seconds[name])


SLOWEST_FIRST = _slowest_first()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist only: the files in `SLOWEST_FIRST` order, then the rest as
    collected (a stable sort, so the tests inside a file keep their order)."""
    if not hasattr(config, "workerinput"):  # a plain run keeps pytest's order
        return
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(item):
        try:
            name = Path(item.path).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            name = ""
        return rank.get(name, len(rank))

    items.sort(key=key)


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
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
        ).execute()
        print(f"{name} executed in {time.perf_counter() - t:.1f}s (small size)", file=sys.stderr)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        text = "\n".join(o.get("text", "") for o in outputs)
        return text, sum("image/png" in o.get("data", {}) for o in outputs)

    return run
