"""What a neighbour on the other core costs the CLI's default sweep: one sweep process
(`invariant-jax sweep --graph example --n-inits N`, one CPU device, a compilation cache
filled first) alone, and beside each of:

- `bare`: the bare gradient loop of `benchmarks/_bare.py` (the loop whose 2-process /
  1-process ratio is the machine's own ratio in `sweep_cores.py`: tight arithmetic that
  shares nothing);
- `stream`: NumPy copying a 256 MiB array over and over (memory bandwidth);
- `sweep`: a second sweep process of the same work, into its own folder (the 2-process
  arm of `sweep_cores.py`, minus the shared store).

Each neighbour starts first and runs until the measured sweep has ended. Arms alternate
within a round, and the order flips every round. Recorded per arm: the measured sweep's
engine seconds and CPU seconds (`wait4`), and the slowdown of each over the same round's
`alone` (CPU seconds: the measured process's own, from the OS), and whether the
neighbour was still running when the measured sweep ended. If the sweep slows by more beside a second
sweep than beside the bare loop or the stream, the cores' shared resources, not idle
time or the store, are what keeps the 2-core ratio below 2.

Usage: python benchmarks/sweep_neighbors.py [--n-inits 30000] [--rounds 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from sweep_cores import _printed  # noqa: E402 (benchmarks/sweep_cores.py)

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
STREAM = "import numpy as np\na = np.ones(2**25); b = np.empty_like(a)\nwhile True: np.copyto(b, a)\n"


def _env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(JAX_NUM_CPU_DEVICES="1", OPENBLAS_NUM_THREADS="1", JAX_COMPILATION_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _sweep_cmd(n: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "invariant_jax", "sweep", "--graph", "example", "--n-inits", str(n)] + [
        "--out",
        str(out),
        "--no-progress",
        "--no-figures",
    ]


def _bare_cmd(seconds: float, config: dict) -> list[str]:
    return [sys.executable, str(BENCH / "_bare.py"), "--loop", str(seconds), "--config", json.dumps(config)]


def _measure(n: int, work: Path, env: dict) -> dict:
    out = work / f"run_{time.monotonic_ns()}"
    t = time.perf_counter()
    proc = subprocess.Popen(_sweep_cmd(n, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, err = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"the sweep failed:\n{err[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    not_ok = sum(v for k, v in summary.items() if k.startswith("status_") and k != "status_ok")
    return dict(wall_s=wall, engine_s=_printed(stdout), not_ok=not_ok)


def arm(name: str, n: int, work: Path, env: dict, config: dict) -> dict:
    neighbour = None
    if name == "bare":  # long enough to outlast the measured sweep; stopped when it ends
        neighbour = subprocess.Popen(_bare_cmd(600, config), env=env, stdout=subprocess.PIPE, text=True)
    elif name == "stream":
        neighbour = subprocess.Popen([sys.executable, "-c", STREAM], env=env)
    elif name == "sweep":
        neighbour = subprocess.Popen(
            _sweep_cmd(10 * n, work / f"neighbour_{time.monotonic_ns()}"),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    if neighbour is not None:
        time.sleep(8.0)  # (past its start-up: imports, compiling or the cache)
    before = os.times()
    row = dict(neighbour=name, **_measure(n, work, env))
    after = os.times()
    row["cpu_s"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if neighbour is not None:
        row["neighbour_ran_throughout"] = neighbour.poll() is None  # (still running when the sweep ended)
        neighbour.kill()
        neighbour.wait()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-inits", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/sweep_neighbors.json)")
    args = ap.parse_args()
    out = output_path(args.out, "sweep_neighbors.json")
    arms = ["alone", "bare", "stream", "sweep"]
    with tempfile.TemporaryDirectory(prefix="ij-sweep-neighbours-") as tmp:
        work = Path(tmp)
        env = _env(work / "cache")
        # fill the compilation cache, and read the sweep's config for the bare loop
        _measure(2000, work, env)
        config = json.loads(next(work.glob("run_*/manifest.json")).read_text())["config"]
        rows = []
        for r in range(args.rounds):
            for name in arms if r % 2 == 0 else arms[::-1]:
                row = dict(round=r, **arm(name, args.n_inits, work, env, config))
                rows.append(row)
                print(row, flush=True)
    alone = {r["round"]: r for r in rows if r["neighbour"] == "alone"}
    for row in rows:
        a = alone[row["round"]]
        row["engine_over_alone"] = row["engine_s"] / a["engine_s"]
        row["cpu_over_alone"] = row["cpu_s"] / a["cpu_s"]
    summary = {
        name: dict(
            engine_over_alone=statistics.median(r["engine_over_alone"] for r in rows if r["neighbour"] == name),
            cpu_over_alone=statistics.median(r["cpu_over_alone"] for r in rows if r["neighbour"] == name),
        )
        for name in arms
    }
    write_json(
        out,
        dict(
            benchmark="sweep_neighbors",
            workload=f"invariant-jax sweep --graph example --n-inits {args.n_inits}, one CPU device, cache filled",
            settings=vars(args),
            rows=rows,
            summary=summary,
        ),
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
