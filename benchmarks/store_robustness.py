"""The results store under the cases of issue 15: a folder shared by two writers, damaged
and foreign files, lost manifests, careless output paths, and unclear errors.

For each case: was it handled cleanly (a clear error naming the problem and nothing
deleted, or a complete result), and how many finished records were lost. Run it against
any version of the package (PYTHONPATH) to compare:

    PYTHONPATH=. python benchmarks/store_robustness.py --label after --work /tmp/store_cases \
        --out benchmarks/results/store_robustness_after.json

It writes benchmarks/results/local/store_robustness_<label>.json (or `--out`). Not a timing benchmark: it
takes about 8 minutes on a shared 2-core machine (compilation and the two-writer cases).
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
import numpy as np

from invariant_jax.cli import main
from invariant_jax.sweep import SweepConfig, load_sweep, run_sweep

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)

ap = argparse.ArgumentParser()
ap.add_argument("--label", default="current")
ap.add_argument("--work", default="/tmp/store_robustness")
ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/local/store_robustness_<label>.json)")
args = ap.parse_args()
ROOT = Path(args.work).resolve()
shutil.rmtree(ROOT, ignore_errors=True)
ROOT.mkdir(parents=True)
CFG = dict(n_inits=16, t1=0.5, n_samples=10, n_save=11)
KW = dict(slots=2, steps_per_call=8, progress=False)
rows = []


def cli(argv):
    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(argv)
        return rc, out.getvalue(), err.getvalue(), None
    except BaseException as e:  # a traceback reaching the user
        return None, out.getvalue(), err.getvalue(), e


def record(case, clean, lost, note, unit="records"):
    rows.append(dict(case=case, clean=bool(clean), lost=int(lost), unit=unit, note=note[:110]))
    print(f"{case:42s} clean={clean!s:5s} lost={lost:3d} {unit:10s} {note[:110]}", flush=True)


def chunks(out):
    return sorted(p for p in (out / "chunks").glob("chunk-*"))


def n_records(out):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return len(load_sweep(out)[1])
    except Exception:
        return 0


def finished(name):
    out = ROOT / name
    run_sweep(SweepConfig(**CFG), out, flush_seconds=0.0, **KW)
    return out


def guard(case, fn):
    only = os.environ.get("CASES")
    if only and not any(w in case for w in only.split(",")):
        return
    try:
        fn()
    except BaseException as e:
        record(case, False, 0, f"script error {type(e).__name__}: {e}")


# 1 demo into a folder with user files
def c1():
    d = ROOT / "d"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    rc, o, e, exc = cli(["demo", "--n-inits", "2", "--out", str(d)])
    kept = (d / "notes.txt").exists()
    record("demo --out DIR holding notes.txt", rc == 2 and kept and exc is None, 0 if kept else 1,
           f"rc={rc} user file kept={kept} {e.strip()[-80:]}", unit="user files")


# 2 demo --out "" in a directory with a file
def c2():
    d = ROOT / "cwd"
    d.mkdir()
    (d / "keep.txt").write_text("x")
    old = os.getcwd()
    os.chdir(d)
    try:
        rc, o, e, exc = cli(["demo", "--n-inits", "2", "--out", ""])
    finally:
        os.chdir(old)
    kept = (d / "keep.txt").exists()
    record('demo --out "" (cwd holds keep.txt)', rc == 2 and kept and exc is None, 0 if kept else 1,
           f"rc={rc} kept={kept} {e.strip()[-80:]}", unit="user files")


CHILD = r"""
import sys, json, jax
jax.config.update("jax_enable_x64", True)
from invariant_jax.sweep import SweepConfig, run_sweep
cfg = SweepConfig(**json.loads(sys.argv[1]))
run_sweep(cfg, sys.argv[2], resume=True, slots=int(sys.argv[3]), steps_per_call=16, chunk_size=int(sys.argv[4]),
          progress=False)
"""


# 3/4 concurrent resumes
def concurrent(case, slots, chunk_size, n):
    out = ROOT / f"conc{chunk_size}"
    cfg = dict(graph="mlp", widths=[5, 8, 1], n_inits=n, t1=1.0)  # the repro
    procs = []
    for s in slots:
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg), str(out), str(s), str(chunk_size)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        # the next writer starts once this one has written 2 chunks (as `sleep 9` in the issue)
        t0 = time.monotonic()
        while (len(list((out / "chunks").glob("chunk-*"))) < 2 * len(procs) and procs[-1].poll() is None
               and time.monotonic() - t0 < 300):
            time.sleep(0.05)
    rcs = [p.wait() for p in procs]
    got = n_records(out)
    record(case, all(r == 0 for r in rcs) and got == n, n - got, f"exit codes {rcs}; {got} of {n} records")


# 5-7 damaged chunks
def damaged(case, how):
    out = finished(f"dmg_{how}")
    victim = chunks(out)[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2] if how == "truncate" else os.urandom(len(data)))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--out", str(out)])
    named = victim.name in (e + " ".join(str(x.message) for x in w) + str(exc))
    got = n_records(out)
    record(case, rc == 0 and named and got == CFG["n_inits"], CFG["n_inits"] - got,
           f"rc={rc} named={named} exc={type(exc).__name__ if exc else None}: {str(exc)[:50]}")


def flags():
    return ["--t1", "0.5", "--n-samples", "10", "--n-save", "11", "--n-inits", str(CFG["n_inits"]),
            "--slots", "2", "--steps-per-call", "8", "--no-progress", "--no-figures"]


# 8 foreign chunk
def c8():
    out = finished("foreign")
    other = ROOT / "other"
    run_sweep(SweepConfig(**{**CFG, "t1": 0.2}), other, **KW)
    alien = chunks(other)[0]
    dest = out / "chunks" / ("chunk-zz-alien" + alien.suffix)
    shutil.copy(alien, dest)
    rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--out", str(out)])
    refused = rc == 2 and dest.name in e
    record("foreign chunk (t1=0.2 into t1=0.5)", refused and exc is None, 0, f"rc={rc} refused by name={refused}")


# 9/10 manifest lost / garbage
def manifest(case, how):
    out = finished(f"man_{how}")
    m = out / "manifest.json"
    if how == "deleted":
        m.unlink()
    else:
        m.write_text("garbage")
    rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--out", str(out)])
    got = n_records(out)
    record(case, rc == 0 and got == CFG["n_inits"], CFG["n_inits"] - got, f"rc={rc} {e.strip()[-90:]}")


# 11/12 output paths before work
def outpath(case, argv, target_mod, target_name):
    import importlib

    mod = importlib.import_module(target_mod)
    calls = []
    orig = getattr(mod, target_name)

    def spy(*a, **k):
        calls.append(1)
        raise RuntimeError("work started")

    setattr(mod, target_name, spy)
    try:
        rc, o, e, exc = cli(argv)
    finally:
        setattr(mod, target_name, orig)
    record(case, rc == 2 and not calls and exc is None, 0, f"rc={rc} work started={bool(calls)} {e.strip()[-60:]}")


# 13 strict summary.json
def c13():
    out = ROOT / "strict"
    rc, o, e, exc = cli(["sweep", "--n-inits", "2", "--max-steps", "2", "--t1", "0.5", "--n-samples", "10", "--n-save",
                         "11", "--slots", "2", "--no-progress", "--no-figures", "--out", str(out)])
    text = (out / "summary.json").read_text() if (out / "summary.json").exists() else ""
    strict = "NaN" not in text and bool(text)
    record("summary.json strict JSON (all failed)", strict, 0, f"NaN in file={'NaN' in text}")


# 14 check verdict
def c14():
    rc, o, e, exc = cli(["check", "--max-steps", "10", "--n-inits", "2"])
    last = o.strip().splitlines()[-1] if o.strip() else ""
    record("check --max-steps 10 names the budget", "step budget" in last and "NOT within" not in last, 0, last[-100:])


# 15 chunk mode
def c15():
    out = finished("mode")
    mode = chunks(out)[0].stat().st_mode & 0o777
    record("chunk file mode", mode != 0o600, 0, oct(mode))


# 16-19 graph files
def graphs():
    for case, content in [("graph file: binary garbage", b"\x89PNG\r\n\x1a\n\x00\xff\xfe"),
                          ("graph file: roles, no edges", b"inputs: a\noutputs: b\n"),
                          ("graph file: unused input", b"inputs: a z\noutputs: b\na b\n"),
                          ("graph file: a directory", None)]:
        g = ROOT / f"g{len(rows)}.txt"
        if content is None:
            g.mkdir()
        else:
            g.write_bytes(content)
        out = ROOT / f"gout{len(rows)}"
        rc, o, e, exc = cli(["sweep", "--graph", str(g), "--out", str(out), "--no-progress", "--n-inits", "2",
                             "--t1", "0.2", "--no-figures", "--n-samples", "5", "--n-save", "3"])
        good = rc == 2 and exc is None and any(w in e for w in ("no edge", "not a text", "directory", "appear in no"))
        record(case, good, 0, f"rc={rc} exc={type(exc).__name__ if exc else None} {e.strip()[-70:]}")


# 20 bad --slots before manifest
def c20():
    out = ROOT / "slots0"
    rc, o, e, exc = cli(["sweep", "--n-inits", "2", "--slots", "0", "--out", str(out), "--no-progress"])
    record("--slots 0 refused before the folder", rc == 2 and not (out / "manifest.json").exists(), 0,
           f"rc={rc} manifest written={(out / 'manifest.json').exists()}")


guard("demo user files", c1)
guard("demo empty out", c2)
guard("concurrent CLI", lambda: concurrent("2 writers resume one folder (slots 8, 3)", (8, 3), 1024, 64))
guard("concurrent API", lambda: concurrent("2 writers, API, chunk_size 2", (8, 3), 2, 64))
guard("truncated", lambda: damaged("damaged chunk (truncated) + --resume", "truncate"))
guard("garbage", lambda: damaged("damaged chunk (random bytes) + --resume", "garbage"))
guard("foreign", c8)
guard("manifest deleted", lambda: manifest("manifest.json deleted + --resume", "deleted"))
guard("manifest garbage", lambda: manifest("manifest.json garbage + --resume", "garbage"))
blocker = ROOT / "blocker"
blocker.write_text("x")
guard("channels dir", lambda: outpath("channels --out DIR", ["channels", "--out", str(ROOT)],
                                      "invariant_jax.channels", "channel_frequency"))
guard("prune dir", lambda: outpath("prune --json DIR", ["prune", "--json", str(ROOT)], "invariant_jax.cli._prune", "fit"))
guard("prune unwritable", lambda: outpath("prune --json under a file", ["prune", "--json", str(blocker / "x.json")],
                                          "invariant_jax.cli._prune", "fit"))
guard("strict", c13)
guard("check", c14)
guard("mode", c15)
guard("graphs", graphs)
guard("slots", c20)
lost = {u: sum(r["lost"] for r in rows if r["unit"] == u) for u in ("records", "user files")}
print(f"TOTAL cases {len(rows)} clean {sum(r['clean'] for r in rows)} records lost {lost['records']} "
      f"user files lost {lost['user files']}")
write_json(output_path(args.out, f"store_robustness_{args.label}.json"),
           {"label": args.label, "cases": len(rows), "clean": sum(r["clean"] for r in rows),
            "records_lost": lost["records"], "user_files_lost": lost["user files"], "rows": rows})
