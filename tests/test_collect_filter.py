"""The root conftest's collection filter: under a `-m` expression that can only select
`exactness` tests (`make test`'s second run), files that never mention the marker are not
imported. `_needs_marker` is checked against brute force with Python's own `and`/`or`/
`not` over every truth assignment, and `pytest_ignore_collect` on files written here."""

import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def root_conftest(pytestconfig):
    """The root conftest.py as pytest loaded it."""
    for plugin in pytestconfig.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == ROOT / "conftest.py":
            return plugin
    pytest.fail("the root conftest.py is not loaded")


def _brute_force(expr: str, marker: str) -> bool:
    """True when no assignment with `marker` False makes `expr` true (Python's evaluator)."""
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", expr)) - {"and", "or", "not"})
    others = [n for n in names if n != marker]
    for values in itertools.product((False, True), repeat=len(others)):
        env = dict(zip(others, values), **{marker: False})
        if eval(expr, {"__builtins__": {}}, env):  # noqa: S307 (fixed expressions above)
            return False
    return True


EXPRESSIONS = [
    "exactness",
    "exactness and not slow",
    "not slow and exactness",
    "(exactness or slow) and not slow",
    "exactness or slow",
    "not exactness",
    "not slow",
    "slow",
    "exactness or not exactness",
    "(exactness and slow) or (exactness and gpu)",
    "not (not exactness)",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_needs_marker_matches_brute_force(root_conftest, expr):
    assert root_conftest._needs_marker(expr, "exactness") == _brute_force(expr, "exactness")


def test_the_brute_force_sees_both_answers():
    answers = {_brute_force(e, "exactness") for e in EXPRESSIONS}
    assert answers == {True, False}


def _config(expr):
    return SimpleNamespace(getoption=lambda name, default=None: expr if name == "markexpr" else default)


def test_ignore_collect_skips_only_files_without_the_marker(root_conftest, tmp_path):
    plain = tmp_path / "test_plain.py"
    plain.write_text("def test_x():\n    pass\n")
    marked = tmp_path / "test_marked.py"
    marked.write_text("import pytest\n\n@pytest.mark.exactness\ndef test_x():\n    pass\n")
    page = tmp_path / "page.md"
    page.write_text("# no marker here\n")
    conftest = tmp_path / "conftest.py"
    conftest.write_text("")
    data = tmp_path / "data.json"
    data.write_text("{}")
    ignore = root_conftest.pytest_ignore_collect

    narrow = _config("exactness and not slow")
    assert ignore(plain, narrow) is True
    assert ignore(page, narrow) is True
    assert ignore(marked, narrow) is None
    assert ignore(conftest, narrow) is None  # conftests always load
    assert ignore(data, narrow) is None
    assert ignore(tmp_path, narrow) is None  # folders are walked
    for wide in ("", "exactness or slow", "not slow"):
        assert ignore(plain, _config(wide)) is None
