"""`channels_t1.py --controller` and `channels_step_control.py --arms` refuse a value that
names no controller before any work: the message names the flag, and no results file is
written. `--controller default` takes the controller the study recorded."""

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


def test_default_controller_is_the_studys():
    """`channels_t1.py --controller default` reruns a study with the controller its settings
    record (`recovery`: an `ij.StepRecovery`'s fields, or None for `PIDController`); a
    study that records none gets the flow phase's default. The other values name theirs."""
    import invariant_jax as ij

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import channels_t1 as t

    assert t.controller_options({}, "default") == {}
    assert t.controller_options({"recovery": None}, "default") == {"recovery": None}
    got = t.controller_options({"recovery": {"growth": 2.0, "horizon": 10.0}}, "default")["recovery"]
    assert got == ij.StepRecovery(2.0, horizon=10.0)
    assert t.controller_options({"recovery": None}, "horizon:100")["recovery"] == ij.StepRecovery(1.5, horizon=100.0)
    assert t.controller_options({}, "pid") == {"recovery": None}
    assert t.controller_options({}, "recovering")["recovery"] == ij.StepRecovery(1.5)
