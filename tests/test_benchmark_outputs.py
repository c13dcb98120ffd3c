"""A benchmark replaces only what it wrote (`benchmarks/_output.py`): a user's file at
`--out` is refused before any work, and one that appears during a run is kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys
sys.path.insert(0, "benchmarks")
import _output as o
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = sys.argv[1]
mine, other, user = f"{d}/mine.json", f"{d}/other.json", f"{d}/user.json"
fig = plt.figure()
fig.savefig(f"{d}/mine.png", metadata={"Description": "PYTHONPATH=. python benchmarks/foo.py --out x"})
fig.savefig(f"{d}/plain.png")
out = {
    "mine": o.written_by(mine, "benchmarks/foo.py"),
    "mine_other_script": o.written_by(mine, "benchmarks/fo.py"),
    "other": o.written_by(other, "benchmarks/foo.py"),
    "user": o.written_by(user, "benchmarks/foo.py"),
    "absent": o.written_by(f"{d}/absent.json", "benchmarks/foo.py"),
    "png_metadata": o.written_by(f"{d}/mine.png", "benchmarks/foo.py"),
    "png_plain": o.written_by(f"{d}/plain.png", "benchmarks/foo.py"),
    "committed": o.replaceable("benchmarks/results/first_calls.json", None),
    "outputs": [str(p) for p in o._outputs_in(["--out", "a/b.json", "--png=c.png", "--n", "3"])],
    "written": str(o.write_json(user, {"x": 1})),
}
sys.argv[0] = "benchmarks/foo.py"  # as that script: its second write goes to the same file
out["again"] = str(o.write_json(user, {"x": 2}))
out["again_2"] = str(o.write_json(user, {"x": 3}))
print("PROBE " + json.dumps(out))
"""


def test_ownership_rules(tmp_path):
    (tmp_path / "mine.json").write_text(json.dumps({"command": "PYTHONPATH=. python benchmarks/foo.py --out m"}))
    (tmp_path / "other.json").write_text(json.dumps({"command": "python benchmarks/bar.py"}))
    (tmp_path / "user.json").write_text('{"my": "data"}')
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("PROBE ", 1)[1])
    assert out["mine"] and not out["mine_other_script"] and not out["other"] and not out["user"]
    assert out["absent"] and out["png_metadata"] and not out["png_plain"]
    assert out["committed"]  # tracked and unchanged: git keeps it
    assert out["outputs"] == ["a/b.json", "c.png", "a/b.png"]
    # the user's file is kept; the results go beside it
    assert (tmp_path / "user.json").read_text() == '{"my": "data"}'
    assert out["written"] == str(tmp_path / "user.1.json")
    assert json.loads((tmp_path / "user.1.json").read_text())["x"] == 1
    # a script that writes after every round keeps writing beside it, to one file
    assert out["again"] == out["again_2"] == str(tmp_path / "user.2.json")
    assert json.loads((tmp_path / "user.2.json").read_text())["x"] == 3


def test_user_file_at_out_refused_before_work(tmp_path):
    user = tmp_path / "results.json"
    user.write_text('{"my": "data"}')
    proc = subprocess.run(
        [sys.executable, "benchmarks/first_calls.py", "--rounds", "1", "--out", str(user)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "refusing to replace" in proc.stderr and str(user) in proc.stderr
    assert "RESULT" not in proc.stdout  # nothing was measured
    assert user.read_text() == '{"my": "data"}'


def test_dirty_flag_ignores_results_files(monkeypatch):
    """`provenance()["dirty"]`: a changed results file (a script rewriting its own committed
    JSON as it goes) or figure (one that a benchmark draws into `docs/`) is not a dirty
    tree; a changed source or docs text file is."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _output as o

    for status, dirty in (
        (" M benchmarks/results/a.json\n M benchmarks/results/a.png", False),
        (" M benchmarks/results/a.json\n M invariant_jax/flow.py", True),
        (" M benchmarks/foo.py", True),
        (" M docs/topology_invariant_set.png\n M benchmarks/results/a.json", False),
        (" M docs/topology_invariant_set.png\n M docs/topology.md", True),
        ("", False),
    ):
        stripped = status.strip()  # as _git returns it
        monkeypatch.setattr(o, "_git", lambda *a, s=stripped, **k: s if a[0] == "status" else "abc")
        assert o.provenance()["dirty"] is dirty


def test_a_dirty_tree_records_its_paths_and_diff(tmp_path, monkeypatch):
    """A dirty run records which tracked files differed and `git diff HEAD` over them, so
    the commit plus that diff is the code that ran: checked in a scratch repository by
    applying the recorded diff to a clean clone and comparing the file."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _output as o

    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "pkg.py").write_text("x = 1\n")
    (repo / "benchmarks" / "results" / "r.json").write_text("{}")
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "base"], check=True)
    monkeypatch.setattr(o, "ROOT", repo)
    assert o.provenance()["dirty"] is False and "dirty_paths" not in o.provenance()
    (repo / "benchmarks" / "results" / "r.json").write_text('{"a": 1}')
    assert o.provenance()["dirty"] is False
    (repo / "pkg.py").write_text("x = 2\n")
    p = o.provenance()
    assert p["dirty"] is True and p["dirty_paths"] == ["pkg.py"]
    clone = tmp_path / "clone"
    subprocess.run([*git, "clone", "-q", str(repo), str(clone)], check=True)
    patch = tmp_path / "d.patch"
    patch.write_text(p["dirty_diff"])
    subprocess.run([*git, "-C", str(clone), "apply", str(patch)], check=True)
    assert (clone / "pkg.py").read_text() == "x = 2\n"
    assert p["dirty_diff_bytes"] == len(p["dirty_diff"].encode())
