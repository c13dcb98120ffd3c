"""The user guide and API reference build with mkdocs --strict, and the API pages list
every public name. Needs the docs tools (mkdocs-material, mkdocstrings[python]); skipped
without them."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import invariant_jax as ij

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict_and_list_every_public_name(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path / "site"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    text = "".join(p.read_text() for p in (site / "api").rglob("*.html"))
    missing = [
        n
        for n in ij.__all__
        if not n.startswith("__") and n != "channels" and not re.search(r'id="[^"]*\b' + re.escape(n) + r'"', text)
    ]
    assert not missing, f"public names without an API entry: {missing}"
    for page in ("getting_started", "sweep", "topology", "solvers", "pruning", "channels"):
        assert (site / page / "index.html").is_file(), page
