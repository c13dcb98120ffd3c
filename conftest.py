"""Runs every Python block of README.md and docs/*.md as a test (sybil).

Each page is one namespace: its first block is the visible setup that later blocks build
on, and the blocks run in order. Every page runs in a fresh temporary directory, so the
results folders the snippets write (`runs/...`) never land in the repository. A block
preceded by `<!-- skip: next -->` is not run; `<!-- skip: next if(not FULL, reason="...") -->`
marks a long study that runs only with `IJ_DOCS_FULL=1`. Blocks without a language tag
and `bash` blocks are not Python; the `invariant-jax` commands in them are checked by
tests/test_docs_cli.py.
"""

import os
import tempfile

import jax

jax.config.update("jax_enable_x64", True)

try:
    from sybil import Sybil
    from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
except ImportError:  # the docs tests need the test extra; the package itself does not
    Sybil = None


def _setup(namespace):
    namespace["_cwd"] = os.getcwd()
    namespace["_tmp"] = tempfile.TemporaryDirectory(prefix="ij-docs-")
    namespace["FULL"] = os.environ.get("IJ_DOCS_FULL") == "1"
    os.chdir(namespace["_tmp"].name)


def _teardown(namespace):
    os.chdir(namespace["_cwd"])
    namespace["_tmp"].cleanup()
    import matplotlib.pyplot as plt

    plt.close("all")


if Sybil is not None:
    pytest_collect_file = Sybil(
        parsers=[PythonCodeBlockParser(), SkipParser()],
        patterns=["README.md", "docs/*.md"],
        setup=_setup,
        teardown=_teardown,
    ).pytest()
