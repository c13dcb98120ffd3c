"""Runs every Python block of README.md and docs/*.md as a test (sybil).

- Each page is one namespace: its first block is the visible setup that later blocks
  build on, and the blocks run in order.
- Every page runs in a fresh temporary directory, so the results folders the snippets
  write (`runs/...`) never land in the repository.
- Long studies run at a tiny size: `SMALL` below lists, per page, text replacements made
  in the block before it runs (e.g. `epochs=3000` -> `epochs=30`). Each replacement must
  match its page, so a page edit that drops one fails here, and the code that runs is
  still the page's own (a renamed function or a wrong argument fails). `IJ_DOCS_FULL=1`
  runs the pages exactly as written.
- `<!-- skip: next if(not FULL, reason=...) -->` before a block runs it only with
  `IJ_DOCS_FULL=1` (blocks that compile for minutes).
- `bash` and untagged blocks are not Python; the `invariant-jax` commands in them are
  parsed and run small by tests/test_docs_cli.py.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# One persistent compilation cache for the whole test session: every pytest-xdist worker,
# the CLI subprocesses and the notebook kernels inherit it through the environment, so a
# program compiled by one of them is loaded by the others. It lives in a temporary folder
# that `make test` creates and removes (IJ_TEST_CACHE_DIR), or that a bare `pytest` makes
# here and removes at exit, so nothing leaks between runs. Every program is cached, however
# quick to compile (the suite's many small ones recur in every CLI subprocess and kernel). JAX keys each entry by the
# program, the backend and XLA_FLAGS, so the SSE4_2 rerun never loads the default build.
if not os.environ.get("IJ_TEST_CACHE_DIR"):
    os.environ["IJ_TEST_CACHE_DIR"] = tempfile.mkdtemp(prefix="ij-test-jax-cache-")
    atexit.register(shutil.rmtree, os.environ["IJ_TEST_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.environ["IJ_TEST_CACHE_DIR"])
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402 (after the cache settings it reads at import)

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parent
FULL = os.environ.get("IJ_DOCS_FULL") == "1"

# page -> [(text in a block, what runs instead)] unless IJ_DOCS_FULL=1
SMALL = {
    "docs/pruning.md": [
        ("jr.split(jr.key(0), 5)", "jr.split(jr.key(0), 2)"),
        ("epochs=3000", "epochs=20"),
        ("log_every=100", "log_every=10"),
    ],
    "docs/channels.md": [
        ("Y, 1e7, loss=loss", "Y, 1e3, loss=loss"),
        ("n_jumps=7, t_flow=1e3", "n_jumps=3, t_flow=0.0"),
        ("flow_wall_time=60.0, max_steps=2000", "flow_wall_time=5.0, max_steps=20"),
    ],
}

try:
    from sybil import Sybil
    from sybil.evaluators.python import pad
    from sybil.parsers.markdown import CodeBlockParser, SkipParser
except ImportError:  # the docs tests need the test extra; the package itself does not
    Sybil = None


def _page(path) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def _evaluate(example) -> None:
    """sybil's PythonEvaluator, after the page's `SMALL` replacements."""
    source = str(example.parsed)
    example.namespace["_page"] = _page(example.path)
    if not FULL:
        for old, new in SMALL.get(_page(example.path), []):
            source = source.replace(old, new)
    code = compile(pad(source, example.line + example.parsed.line_offset), example.path, "exec", dont_inherit=True)
    exec(code, example.namespace)
    example.namespace.pop("__builtins__", None)


def _setup(namespace):
    namespace["_cwd"] = os.getcwd()
    namespace["_tmp"] = tempfile.TemporaryDirectory(prefix="ij-docs-")
    namespace["FULL"] = FULL
    os.chdir(namespace["_tmp"].name)


def _teardown(namespace):
    os.chdir(namespace["_cwd"])
    namespace["_tmp"].cleanup()
    import matplotlib.pyplot as plt

    plt.close("all")
    page = namespace.get("_page")
    if page in SMALL:  # a page edit that drops a replaced text must update SMALL
        text = (ROOT / page).read_text()
        gone = [old for old, _ in SMALL[page] if old not in text]
        assert not gone, f"{page} no longer contains {gone}: update SMALL in conftest.py"


if Sybil is not None:
    pytest_collect_file = Sybil(
        parsers=[CodeBlockParser(language="python", evaluator=_evaluate), SkipParser()],
        patterns=["README.md", "docs/*.md"],
        setup=_setup,
        teardown=_teardown,
    ).pytest()


def _needs_marker(expr: str, marker: str) -> bool:
    """Whether the `-m` expression `expr` can select only tests that carry `marker`: it
    is False under every assignment of its other names once `marker` is False."""
    import itertools
    import re

    try:  # pytest's own parser of `-m` (pinned in constraints.txt); without it, skip nothing
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
    except Exception:
        return False
    names = sorted(set(re.findall(r"[A-Za-z_][\w.]*", expr)) - {"and", "or", "not", marker})
    for values in itertools.product((False, True), repeat=len(names)):
        truth = dict(zip(names, values), **{marker: False})
        if compiled.evaluate(lambda name, **_: truth.get(name, False)):
            return False
    return True


def pytest_ignore_collect(collection_path, config):
    """Under `-m` expressions that need the `exactness` marker (`make test`'s second run),
    skip importing the files that never mention it: every pytest-xdist worker would
    otherwise import every test module and parse every docs page again, only to deselect
    them."""
    expr = config.getoption("markexpr", "") or ""
    if "exactness" not in expr or not collection_path.is_file():
        return None
    if collection_path.suffix not in (".py", ".md") or collection_path.name == "conftest.py":
        return None
    if not _needs_marker(expr, "exactness"):
        return None
    return True if "exactness" not in collection_path.read_text(errors="replace") else None
