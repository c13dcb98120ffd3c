"""How long the README's two set-up steps take from a clean clone: `git clone` of this
checkout's HEAD into a temporary folder, then `make install` (timed on its own) and
`make test` with `--durations=0`, whose per-test times are summed per file. README's
Quickstart sentence is generated from the JSON (`benchmarks/docs_tables.py`).

Usage: python benchmarks/test_suite_time.py [--commit REV] [--out PATH] [--keep]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ROOT = Path(__file__).resolve().parent.parent
DURATION = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+?)(?:::|$)", re.M)
SUMMARY = re.compile(r"(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s")


def timed(cmd: list[str], cwd: Path, *, check: bool = True, **env) -> tuple[float, str, int]:
    t = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "IJ_", "XLA_"))}, **env},
    )
    if check and proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return time.perf_counter() - t, proc.stdout + proc.stderr, proc.returncode


def per_file(output: str) -> dict[str, float]:
    files = collections.Counter()
    for seconds, test in DURATION.findall(output):
        files[test] += float(seconds)
    return {k: round(v, 1) for k, v in files.most_common()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/test_suite_time.json)")
    ap.add_argument("--commit", default="HEAD", help="the commit to clone and time (default: HEAD)")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = ap.parse_args(argv)
    path = output_path(args.out, "test_suite_time.json")
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="ij-clean-clone-"))
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(tmp / "repo")], check=True)
        repo = tmp / "repo"
        subprocess.run(["git", "checkout", "--quiet", args.commit], cwd=repo, check=True)
        cloned = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        install_s, _, _ = timed(["make", "install"], repo)
        test_s, out, code = timed(
            ["make", "test"], repo, check=False, PYTEST_ADDOPTS="--durations=0 -p no:cacheprovider"
        )
    finally:
        if args.keep:
            print(f"clone kept at {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    runs = SUMMARY.findall(out)
    failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    print("\n".join(failed))
    if len(runs) < 2:  # a failing first run stops make before the exactness run
        runs += [("0", "0", "0")] * (2 - len(runs))
    (p1, s1, t1), (p2, _, t2) = runs
    halves = out.split("slowest durations")
    summary = {
        "install_s": round(install_s, 1),
        "make_test_s": round(test_s, 1),
        "passed": int(p1),
        "skipped": int(s1 or 0),
        "suite_s": float(t1),
        "exactness_passed": int(p2),
        "exactness_s": float(t2),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "make_test_exit_code": code,
        "failed": failed,
    }
    print(summary)
    write_json(
        path,
        {
            "benchmark": "test_suite_time",
            "cloned_commit": cloned,
            "summary": summary,
            "seconds_per_file": per_file(halves[1] if len(halves) > 1 else out),
            "exactness_seconds_per_file": per_file(halves[2]) if len(halves) > 2 else {},
        },
    )


if __name__ == "__main__":
    main()
