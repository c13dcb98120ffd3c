"""The built documentation site in a real headless browser: `benchmarks/check_site.py` builds
it with mkdocs --strict, serves it on localhost and loads every nav page in Chromium
(`--dump-dom`): each page loads with its title, each API page lists the public names its
`:::` directives assign to it, and no internal link, resource or fragment is broken (no 404).
Skipped without Chromium (CI has none; Debian: `apt-get install chromium`) or without the
docs tools (`pip install -e '.[docs]' -c constraints.txt`). The browser test takes about a
minute, so it is marked slow: `pytest -m slow tests/test_site_browser.py` runs it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import check_site  # noqa: E402


def test_every_public_name_is_assigned_an_api_page():
    """Cheap, no browser: the assignment the browser check relies on covers `ij.__all__`."""
    import invariant_jax as ij

    pages, unassigned = check_site.api_assignment()
    assert not unassigned, f"public names no API page's ::: directives assign: {unassigned}"
    names = [n for p in pages.values() for n in p]
    assert sorted(names) == sorted(n for n in ij.__all__ if not n.startswith("__") and n != "channels")
    assert check_site.page_url("index.md") == "/" and check_site.page_url("api/graph.md") == "/api/graph/"
    assert ("Flat channels", "channels.md") in check_site.nav_pages()


@pytest.mark.slow  # about a minute (18 Chromium starts): run with -m slow
def test_site_in_headless_chromium(tmp_path):
    if check_site.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); CI has none")
    if not check_site.have_mkdocs():
        pytest.skip("the docs tools are not installed (pip install -e '.[docs]' -c constraints.txt)")
    out = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "check_site.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    import json

    rep = json.loads(out.read_text())
    assert len(rep["pages"]) == len(check_site.nav_pages()) and not rep["failures"]
    assert sum(p.get("public_names", 0) for p in rep["pages"]) > 100
