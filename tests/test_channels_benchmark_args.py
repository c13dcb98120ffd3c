"""`channels_t1.py --controller` and `channels_step_control.py --arms` refuse a value that
names no controller before any work: the message names the flag, and no results file is
written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "script, args, flag",
    [
        ("channels_t1.py", ["--study", "missing.json", "--controller", "horizon:0"], "--controller"),
        ("channels_t1.py", ["--study", "missing.json", "--controller", "pidd"], "--controller"),
        ("channels_step_control.py", ["--repo", ".", "--arms", "pid,horizon:-1"], "--arms"),
        ("channels_step_control.py", ["--repo", ".", "--arms", "horizon:nan"], "--arms"),
        ("channels_t1.py", ["--study", "missing.json", "--controller", "horizon:inf"], "--controller"),
    ],
)
def test_a_bad_controller_is_refused_before_any_work(tmp_path, script, args, flag):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert f"{flag}: " in proc.stderr and "is not pid, recovering or horizon:K" in proc.stderr
    assert not out.exists()
