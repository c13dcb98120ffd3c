"""The package, the tests and the benchmarks pass `ruff check` under the rules of
pyproject.toml's `[tool.ruff]` and are formatted by `ruff format` (a few seconds each).
The package passes `mypy` under pyproject.toml's `[tool.mypy]` (seconds with its cache,
under a minute without)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is not installed: pip install -e '.[test]' -c constraints.txt",
)
def test_ruff_check_passes():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "invariant_jax", "tests", "benchmarks", "tools"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"ruff check found problems (fix with `ruff check --fix`, then by hand):\n{proc.stdout}{proc.stderr}"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is not installed: pip install -e '.[test]' -c constraints.txt",
)
def test_ruff_format_leaves_the_code_unchanged():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "invariant_jax",
            "tests",
            "benchmarks",
            "tools",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"ruff format would change these files (run `ruff format`):\n{proc.stdout}{proc.stderr}"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed: pip install -e '.[test]' -c constraints.txt",
)
def test_mypy_passes():
    proc = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, (
        f"mypy found problems in invariant_jax (configured in pyproject.toml's "
        f"[tool.mypy]):\n{proc.stdout}{proc.stderr}"
    )
