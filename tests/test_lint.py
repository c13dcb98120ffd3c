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


PATHS = ("invariant_jax", "tests", "benchmarks", "tools")


def _tool(module: str, *args: str, timeout: int = 120) -> str | None:
    """Run `python -m module args` from the repository root: its output if it failed, else None."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install -e '.[test]' -c constraints.txt")
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    return None if proc.returncode == 0 else proc.stdout + proc.stderr


def test_ruff_check_passes():
    out = _tool("ruff", "check", "--no-cache", *PATHS)
    assert out is None, f"ruff check found problems (fix with `ruff check --fix`, then by hand):\n{out}"


def test_ruff_format_leaves_the_code_unchanged():
    out = _tool("ruff", "format", "--check", "--no-cache", *PATHS)
    assert out is None, f"ruff format would change these files (run `ruff format`):\n{out}"


def test_mypy_passes():
    out = _tool("mypy", timeout=300)
    assert out is None, f"mypy found problems in invariant_jax (configured in pyproject.toml's [tool.mypy]):\n{out}"
