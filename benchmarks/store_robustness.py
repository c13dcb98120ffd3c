"""The results store under the cases of issues 15 and 30: a folder shared by two writers,
damaged and foreign files, lost manifests, careless output paths, unclear errors (issue
15); user files in quarantine/ and claims/, a user's manifest.json, demo over a sweep,
--resume --overwrite, prune --json over a file, two configs racing into one folder, a
hand-edited manifest, a missing chunk, SIGTERM / Ctrl-C, a full disk, and the front door
(graphs, flags, TOML and CSV files, rtol >= 1, non-finite weights) (issue 30).

For each case: was it handled cleanly (a clear error naming the problem and nothing
deleted, or a complete result), its outcome in issue 30's classes (clear early error /
correct / unclear / traceback / silently accepted / user file lost or overwritten /
hang), and how many finished records or user files were lost. Run it against
any version of the package (PYTHONPATH) to compare:

    PYTHONPATH=. python benchmarks/store_robustness.py --label after --work /tmp/store_cases \
        --out benchmarks/results/store_robustness_after.json

It writes benchmarks/results/local/store_robustness_<label>.json (or `--out`). Not a timing benchmark: it
takes about N minutes on a shared 2-core machine (compilation, the two-writer cases and
the signal cases run subprocesses). `CASES=word,word` runs only the cases whose guard name
contains a word.
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

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.cli import main  # noqa: E402
from invariant_jax.sweep import BatchOptions, StoreOptions, SweepConfig, load_sweep, run_sweep  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--label", default="current")
ap.add_argument("--work", default="/tmp/store_robustness")
ap.add_argument(
    "--out", default=None, help="JSON path (default: benchmarks/results/local/store_robustness_<label>.json)"
)
args = ap.parse_args()
ROOT = Path(args.work).resolve()
shutil.rmtree(ROOT, ignore_errors=True)
ROOT.mkdir(parents=True)
CFG = dict(n_inits=16, t1=0.5, n_samples=10, n_save=11)
KW = dict(batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
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


ERR, OK, UNCLEAR, TB, SILENT, LOST, HANG = (
    "clear early error",
    "correct",
    "unclear",
    "traceback",
    "silently accepted",
    "user file lost or overwritten",
    "hang",
)
OUTCOMES = (ERR, OK, UNCLEAR, TB, SILENT, LOST, HANG)  # issue 30's classes


def classify(clean, lost, *, expect, rc=None, exc=None):
    """One of issue 30's classes: a clean case is a clear early error (`expect="error"`) or
    correct (`expect="result"`); otherwise a lost file or record, a traceback, silent
    acceptance (exit 0 where an error was due) or unclear."""
    if clean:
        return ERR if expect == "error" else OK
    if lost:
        return LOST
    if exc is not None and not isinstance(exc, SystemExit):
        return TB
    if expect == "error" and rc == 0:
        return SILENT
    return UNCLEAR


def record(case, clean, lost, note, unit="records", *, outcome=None, expect="error", rc=None, exc=None, issue=15):
    outcome = outcome or classify(clean, lost, expect=expect, rc=rc, exc=exc)
    rows.append(
        dict(case=case, issue=issue, clean=bool(clean), outcome=outcome, lost=int(lost), unit=unit, note=note[:160])
    )
    print(f"{case:48s} {outcome:30s} lost={lost:3d} {unit:10s} {note[:160]}", flush=True)


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
    run_sweep(SweepConfig.from_dict(CFG), out, store=StoreOptions(flush_seconds=0.0), **KW)
    return out


def guard(case, fn):
    only = os.environ.get("CASES")
    if only and not any(w in case for w in only.split(",")):
        return
    try:
        fn()
    except BaseException as e:
        record(case, False, 0, f"script error {type(e).__name__}: {e}", outcome=TB, exc=e)


# 1 demo into a folder with user files
def c1():
    d = ROOT / "d"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    rc, o, e, exc = cli(["demo", "--n-inits", "2", "--out", str(d)])
    kept = (d / "notes.txt").exists()
    record(
        "demo --out DIR holding notes.txt",
        rc == 2 and kept and exc is None,
        0 if kept else 1,
        f"rc={rc} user file kept={kept} {e.strip()[-80:]}",
        unit="user files",
        rc=rc,
        exc=exc,
    )


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
    record(
        'demo --out "" (cwd holds keep.txt)',
        rc == 2 and kept and exc is None,
        0 if kept else 1,
        f"rc={rc} kept={kept} {e.strip()[-80:]}",
        unit="user files",
        rc=rc,
        exc=exc,
    )


CHILD = r"""
import sys, json, jax
jax.config.update("jax_enable_x64", True)
from invariant_jax.sweep import BatchOptions, StoreOptions, SweepConfig, run_sweep
cfg = SweepConfig.from_dict(json.loads(sys.argv[1]))
run_sweep(cfg, sys.argv[2], resume=True, batch=BatchOptions(slots=int(sys.argv[3]), steps_per_call=16, progress=False),
          store=StoreOptions(chunk_size=int(sys.argv[4])))
"""


# 3/4 concurrent resumes
def concurrent(case, slots, chunk_size, n):
    out = ROOT / f"conc{chunk_size}"
    cfg = dict(graph="mlp", widths=[5, 8, 1], n_inits=n, t1=1.0)  # the issue's repro
    procs = []
    for s in slots:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(cfg), str(out), str(s), str(chunk_size)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        # the next writer starts once this one has written 2 chunks (as `sleep 9` in the issue)
        t0 = time.monotonic()
        while (
            len(list((out / "chunks").glob("chunk-*"))) < 2 * len(procs)
            and procs[-1].poll() is None
            and time.monotonic() - t0 < 300
        ):
            time.sleep(0.05)
    rcs = [p.wait() for p in procs]
    got = n_records(out)
    record(
        case, all(r == 0 for r in rcs) and got == n, n - got, f"exit codes {rcs}; {got} of {n} records", expect="result"
    )


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
    record(
        case,
        rc == 0 and named and got == CFG["n_inits"],
        CFG["n_inits"] - got,
        f"rc={rc} named={named} exc={type(exc).__name__ if exc else None}: {str(exc)[:50]}",
        expect="result",
        rc=rc,
        exc=exc,
    )


def flags():
    return [
        "--t1",
        "0.5",
        "--n-samples",
        "10",
        "--n-save",
        "11",
        "--n-inits",
        str(CFG["n_inits"]),
        "--slots",
        "2",
        "--steps-per-call",
        "8",
        "--no-progress",
        "--no-figures",
    ]


# 8 foreign chunk
def c8():
    out = finished("foreign")
    other = ROOT / "other"
    run_sweep(SweepConfig.from_dict({**CFG, "t1": 0.2}), other, **KW)
    alien = chunks(other)[0]
    dest = out / "chunks" / ("chunk-zz-alien" + alien.suffix)
    shutil.copy(alien, dest)
    rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--out", str(out)])
    refused = rc == 2 and dest.name in e
    record(
        "foreign chunk (t1=0.2 into t1=0.5)",
        refused and exc is None,
        0,
        f"rc={rc} refused by name={refused}",
        rc=rc,
        exc=exc,
    )


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
    record(
        case,
        rc == 0 and got == CFG["n_inits"],
        CFG["n_inits"] - got,
        f"rc={rc} {e.strip()[-90:]}",
        expect="result",
        rc=rc,
        exc=exc,
    )


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
    record(
        case,
        rc == 2 and not calls and exc is None,
        0,
        f"rc={rc} work started={bool(calls)} {e.strip()[-60:]}",
        rc=0 if calls else rc,
        exc=exc,
    )


# 13 strict summary.json
def c13():
    out = ROOT / "strict"
    rc, o, e, exc = cli(
        [
            "sweep",
            "--n-inits",
            "2",
            "--max-steps",
            "2",
            "--t1",
            "0.5",
            "--n-samples",
            "10",
            "--n-save",
            "11",
            "--slots",
            "2",
            "--no-progress",
            "--no-figures",
            "--out",
            str(out),
        ]
    )
    text = (out / "summary.json").read_text() if (out / "summary.json").exists() else ""
    strict = "NaN" not in text and bool(text)
    record(
        "summary.json strict JSON (all failed)",
        strict,
        0,
        f"NaN in file={'NaN' in text}",
        expect="result",
        rc=rc,
        exc=exc,
    )


# 14 check verdict
def c14():
    rc, o, e, exc = cli(["check", "--max-steps", "10", "--n-inits", "2"])
    last = o.strip().splitlines()[-1] if o.strip() else ""
    record(
        "check --max-steps 10 names the budget",
        "step budget" in last and "NOT within" not in last,
        0,
        last[-100:],
        expect="result",
        rc=rc,
        exc=exc,
    )


# 15 chunk mode
def c15():
    out = finished("mode")
    mode = chunks(out)[0].stat().st_mode & 0o777
    record("chunk file mode", mode != 0o600, 0, oct(mode), expect="result")


# 16-19 graph files
def graphs():
    for case, content in [
        ("graph file: binary garbage", b"\x89PNG\r\n\x1a\n\x00\xff\xfe"),
        ("graph file: roles, no edges", b"inputs: a\noutputs: b\n"),
        ("graph file: unused input", b"inputs: a z\noutputs: b\na b\n"),
        ("graph file: a directory", None),
    ]:
        g = ROOT / f"g{len(rows)}.txt"
        if content is None:
            g.mkdir()
        else:
            g.write_bytes(content)
        out = ROOT / f"gout{len(rows)}"
        rc, o, e, exc = cli(
            [
                "sweep",
                "--graph",
                str(g),
                "--out",
                str(out),
                "--no-progress",
                "--n-inits",
                "2",
                "--t1",
                "0.2",
                "--no-figures",
                "--n-samples",
                "5",
                "--n-save",
                "3",
            ]
        )
        good = rc == 2 and exc is None and any(w in e for w in ("no edge", "not a text", "directory", "appear in no"))
        record(case, good, 0, f"rc={rc} exc={type(exc).__name__ if exc else None} {e.strip()[-70:]}", rc=rc, exc=exc)


# 20 bad --slots before manifest
def c20():
    out = ROOT / "slots0"
    rc, o, e, exc = cli(["sweep", "--n-inits", "2", "--slots", "0", "--out", str(out), "--no-progress"])
    record(
        "--slots 0 refused before the folder",
        rc == 2 and not (out / "manifest.json").exists(),
        0,
        f"rc={rc} manifest written={(out / 'manifest.json').exists()}",
        rc=rc,
        exc=exc,
    )


# ---------------------------------------------------------------- issue 30's cases
# Each case runs on any version (PYTHONPATH); the outcome is what the user sees: a clear
# error before any work, a correct result, or a loss.


def spied(modname, name):
    """Run `fn` with `modname.name` replaced by a spy that stops the work: returns the
    context manager and the list of calls (a call means the work started)."""
    import importlib

    calls = []

    @contextlib.contextmanager
    def ctx():
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            yield
            return
        *owner_path, attr = name.split(".")
        for part in owner_path:  # "SweepEngine.run": a method of a class in the module
            mod = getattr(mod, part, None)
        if mod is None or not hasattr(mod, attr):
            yield
            return
        orig = getattr(mod, attr)

        def spy(*a, **k):
            calls.append(1)
            raise RuntimeError("work started")

        setattr(mod, attr, spy)
        try:
            yield
        finally:
            setattr(mod, attr, orig)

    return ctx, calls


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def stale_claims(out):
    bad = 0
    for p in (out / "claims").glob("*.json") if (out / "claims").is_dir() else []:
        try:
            bad += not json.loads(p.read_text()).get("done")
        except Exception:
            bad += 1
    return bad


def user_file_case(case, where):
    """Repro 1: a user file in quarantine/ or claims/, then --resume and --overwrite."""
    out = finished("u_" + where.replace("/", "_"))
    p = out / where
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(b"user data")
    res = [cli(["sweep", *flags(), flag, "--out", str(out)]) for flag in ("--resume", "--overwrite")]
    kept = p.is_file() and p.read_bytes() == b"user data"
    named = all(r[0] == 2 and where in r[2] for r in res)
    exc = next((r[3] for r in res if r[3] is not None), None)
    record(
        case,
        kept and named,
        0 if kept else 1,
        f"rc={[r[0] for r in res]} kept={kept} {res[-1][2].strip()[-90:]}",
        unit="user files",
        rc=res[0][0],
        exc=exc,
        issue=30,
    )


def foreign_manifest():
    """Repro 2: a user's manifest.json in a fresh folder, then a sweep and --overwrite."""
    out = ROOT / "u_manifest"
    out.mkdir()
    (out / "manifest.json").write_text('{"my": "own manifest"}')
    res = [cli(["sweep", *flags(), *extra, "--out", str(out)]) for extra in ([], ["--overwrite"])]
    kept = (out / "manifest.json").read_text() == '{"my": "own manifest"}'
    named = all(r[0] == 2 and "manifest.json" in r[2] for r in res)
    record(
        "user manifest.json: sweep, then --overwrite",
        kept and named,
        0 if kept else 1,
        f"rc={[r[0] for r in res]} kept={kept} {res[0][2].strip()[-90:]}",
        unit="user files",
        rc=res[0][0],
        exc=res[0][3],
        issue=30,
    )


def user_claim():
    """Repro 2: a user's claims/block-0000000.json in a fresh folder."""
    out = ROOT / "u_claim"
    (out / "claims").mkdir(parents=True)
    p = out / "claims" / "block-0000000.json"
    p.write_text('{"mine": true}')
    rc, o, e, exc = cli(["sweep", *flags(), "--out", str(out)])
    kept = p.read_text() == '{"mine": true}'
    record(
        "user claims/block-0000000.json: sweep",
        kept and rc == 2 and p.name in e,
        0 if kept else 1,
        f"rc={rc} kept={kept} {e.strip()[-90:]}",
        unit="user files",
        rc=rc,
        exc=exc,
        issue=30,
    )


def demo_over_sweep():
    """Repro 3: `demo --out DIR` where DIR holds another sweep."""
    out = finished("demo_over")
    before = snapshot(out)
    rc, o, e, exc = cli(["demo", "--n-inits", "2", "--out", str(out)])
    gone = [k for k in before if k.startswith("chunks/") and not (out / k).exists()]
    lost = CFG["n_inits"] if gone else 0
    record(
        "demo --out DIR holding another sweep",
        rc == 2 and snapshot(out) == before,
        lost,
        f"rc={rc} chunks deleted={len(gone)} {e.strip()[-80:]}",
        rc=rc,
        exc=exc,
        issue=30,
    )


def resume_overwrite(api):
    """Repro 4: `--resume --overwrite` (CLI or run_sweep) on a finished sweep."""
    out = finished("ro_api" if api else "ro_cli")
    before = snapshot(out)
    if api:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_sweep(SweepConfig.from_dict(CFG), out, resume=True, overwrite=True, **KW)
            rc, e, exc = 0, "", None
        except ValueError as x:
            rc, e, exc = 2, str(x), None
    else:
        rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--overwrite", "--out", str(out)])
    gone = [k for k in before if k.startswith("chunks/") and not (out / k).exists()]
    record(
        f"--resume --overwrite ({'run_sweep' if api else 'CLI'})",
        rc == 2 and "contradict" in e and not gone,
        CFG["n_inits"] if gone else 0,
        f"rc={rc} finished chunks deleted={len(gone)} {e.strip()[-70:]}",
        rc=rc,
        exc=exc,
        issue=30,
    )


def prune_json(case, target, existing):
    ctx, calls = spied("invariant_jax.cli._prune", "fit")
    if existing:
        target.write_text("my report")
    with ctx():
        rc, o, e, exc = cli(["prune", "--json", str(target)])
    kept = target.read_text() == "my report" if existing else not target.parent.exists()
    words = "already exists" if existing else "does not exist"
    # the spy stops the work; when it is called, the command had accepted the path
    record(
        case,
        rc == 2 and not calls and words in e and kept,
        0 if kept else 1,
        f"rc={rc} work started={bool(calls)} kept={kept} {e.strip()[-70:]}",
        unit="user files",
        rc=0 if calls else rc,
        exc=exc if not calls else None,
        issue=30,
    )


RACER = r"""
import sys, json, jax
jax.config.update("jax_enable_x64", True)
from invariant_jax.sweep import BatchOptions, SweepConfig, run_sweep
try:
    run_sweep(SweepConfig.from_dict(json.loads(sys.argv[1])), sys.argv[2],
              batch=BatchOptions(slots=2, steps_per_call=8, progress=False))
except ValueError as e:
    print("REFUSED", e, file=sys.stderr)
    sys.exit(2)
"""


def chunk_hashes(out):
    import pyarrow.parquet as pq

    hashes = []
    for p in chunks(out):
        try:
            meta = pq.read_schema(p).metadata or {}
            hashes.append(json.loads(meta.get(b"invariant_jax", b"{}")).get("config_hash"))
        except Exception:
            hashes.append(None)
    return hashes


def racing_configs():
    """Repro 6: two configs started at once into one new folder."""
    out = ROOT / "race"
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, json.dumps({**CFG, "seed": s}), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in (0, 1)
    ]
    res = [p.communicate() + (p.returncode,) for p in procs]
    wall = time.monotonic() - t0
    rcs = [r[2] for r in res]
    refused = [r for r in res if r[2] == 2 and "REFUSED" in r[1] and "different" in r[1]]
    hashes = set(chunk_hashes(out))
    mixed = len(hashes) > 1
    record(
        "2 configs at once into one new folder",
        len(refused) == 1 and 0 in rcs and not mixed,
        CFG["n_inits"] if mixed else 0,
        f"exit codes {rcs}; config hashes in chunks={len(hashes)}; {wall:.0f} s",
        rc=0 if rcs == [0, 0] else 2,
        issue=30,
    )


def edited_manifest():
    """Repro 7: the manifest's config edited by hand, then --resume."""
    out = finished("edited")
    m = out / "manifest.json"
    man = json.loads(m.read_text())
    man["config"]["t1"] = 0.25
    m.write_text(json.dumps(man))
    before = {k: v for k, v in snapshot(out).items() if k.startswith("chunks/")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc, o, e, exc = cli(["sweep", *flags(), "--resume", "--out", str(out)])
    got = n_records(out)
    kept = all((out / k).is_file() for k in before)
    ok = rc == 0 and got == CFG["n_inits"] and kept
    advice = "--overwrite" in e
    record(
        "manifest config edited by hand + --resume",
        ok,
        0 if kept else CFG["n_inits"],
        f"rc={rc} records={got} advises --overwrite={advice} {e.strip()[-70:]}",
        expect="result",
        outcome=None if ok or exc is not None or not kept else UNCLEAR,
        rc=rc,
        exc=exc,
        issue=30,
    )


def missing_chunk():
    """Repro 8: load_sweep on a folder missing a chunk."""
    out = finished("missing")
    chunks(out)[0].unlink()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            got, exc = len(load_sweep(out)[1]), None
        except Exception as x:
            got, exc = 0, x
    said = [str(x.message) for x in w if "missing" in str(x.message)]
    record(
        "load_sweep with a chunk missing",
        bool(said) and exc is None,
        0,
        f"{got} of {CFG['n_inits']} records; warned={bool(said)} {(said or [''])[0][:80]}",
        expect="result",
        outcome=SILENT if not said and exc is None else None,
        exc=exc,
        issue=30,
    )


SIGNALLED = r"""
import sys, jax
jax.config.update("jax_enable_x64", True)
from invariant_jax.cli import main
sys.exit(main(sys.argv[1:]))
"""


def signal_case(sig):
    """Ctrl-C (SIGINT) or SIGTERM in the middle of a CLI sweep."""
    import signal as _signal

    out = ROOT / f"sig{sig}"
    argv = ["sweep", *flags(), "--out", str(out)]
    argv[argv.index("--n-inits") + 1] = "100000"
    p = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    t0 = time.monotonic()
    while (
        p.poll() is None and time.monotonic() - t0 < 240 and not chunks(out)
        if (out / "chunks").is_dir()
        else p.poll() is None and time.monotonic() - t0 < 240
    ):
        time.sleep(0.2)  # until the first records are on disk (compiled and running)
    time.sleep(5.0)
    at_signal, waited = n_records(out), time.monotonic() - t0
    p.send_signal(sig)
    try:
        o, e = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        o, e = p.communicate()
        record(f"{_signal.Signals(sig).name} during a sweep", False, 0, "no exit within 120 s", outcome=HANG, issue=30)
        return
    lines = [x for x in e.strip().splitlines() if x.strip()]
    got, stale = n_records(out), stale_claims(out)
    one_line = len(lines) == 1 and "progress saved" in lines[0] and "--resume" in lines[0]
    ok = one_line and got > at_signal and stale == 0
    tb = "Traceback" in e
    record(
        f"{_signal.Signals(sig).name} during a sweep",
        ok,
        0,
        f"rc={p.returncode} stderr lines={len(lines)} records on disk at the signal {at_signal} (after {waited:.0f} s), "
        f"after it {got}; stale claims={stale} "
        f"{(lines or [''])[-1][-70:]}",
        expect="result",
        outcome=None if ok else TB if tb else UNCLEAR,
        issue=30,
    )


def full_disk():
    """ENOSPC while writing a chunk: one line naming the folder, no empty temporaries."""
    import invariant_jax.sweep._store._chunks as chunks_mod

    real = chunks_mod.atomic_write_bytes

    def full(path, write):
        def partial(f):
            f.write(b"PAR1")
            raise OSError(28, "No space left on device")

        real(path, partial)

    chunks_mod.atomic_write_bytes = full
    out = ROOT / "full"
    try:
        rc, o, e, exc = cli(["sweep", *flags(), "--out", str(out)])
    finally:
        chunks_mod.atomic_write_bytes = real
    lines = e.strip().splitlines()
    empty = [p for p in out.rglob("*") if p.name.endswith(".tmp") or (p.is_file() and p.stat().st_size == 0)]
    ok = exc is None and len(lines) == 1 and str(out) in lines[0] and not empty
    record(
        "full disk (ENOSPC) while writing a chunk",
        ok,
        0,
        f"rc={rc} exc={type(exc).__name__ if exc else None} stderr lines={len(lines)} temporaries={len(empty)}",
        rc=rc,
        exc=exc,
        issue=30,
    )


def front(case, fn, *, expect="error", words=()):
    """A front-door case run in-process: `fn()` returns `(rc, message, exc, work_started)`."""
    rc, msg, exc, started = fn()
    if expect == "error":
        ok = not started and exc is None and rc == 2 and all(w in msg for w in words)
        outcome = None
        if not ok and exc is None and not started and rc == 2:
            outcome = UNCLEAR  # refused, but without the words that name the problem
    else:
        ok = exc is None and rc == 0 and not msg
        outcome = None
    record(
        case,
        ok,
        0,
        f"rc={rc} work started={started} exc={type(exc).__name__ if exc else None} {msg.strip()[-100:]}",
        expect=expect,
        rc=0 if started else rc,
        exc=exc,
        outcome=outcome,
        issue=30,
    )


ENGINE = ("invariant_jax.sweep._engine", "SweepEngine.run")  # reached: the sweep compiles and runs


def run_cli(argv, spy=ENGINE, folder=None):
    def go():
        ctx, calls = spied(*spy)
        with ctx():
            rc, o, e, exc = cli(argv)
        if isinstance(exc, SystemExit):  # argparse's own refusal
            rc, exc = exc.code, None
        if isinstance(exc, RuntimeError) and "work started" in str(exc):
            exc = None
        left = folder is not None and folder.exists()
        return rc, e + (" [folder left behind]" if left else ""), exc, bool(calls) or left

    return go


def run_api(fn):
    def go():
        try:
            fn()
            return 0, "", None, True
        except (ValueError, TypeError, FileNotFoundError) as x:
            return 2, f"{type(x).__name__}: {x}", None, False
        except Exception as x:
            return None, str(x), x, False

    return go


def front_door():
    import invariant_jax as ij

    small = ["--n-inits", "2", "--t1", "0.2", "--n-samples", "5", "--n-save", "3", "--no-progress", "--no-figures"]
    g = ROOT / "nohidden.txt"
    g.write_text("inputs: a\noutputs: b\na b\n")
    out = ROOT / "fd_nohidden"
    guard(
        "fd no hidden",
        lambda: front(
            "graph without hidden nodes (sweep)",
            run_cli(["sweep", "--graph", str(g), *small, "--out", str(out)], folder=out),
            words=("hidden",),
        ),
    )
    guard(
        "fd strings",
        lambda: front(
            "DAG.from_edges(['xa', 'ay'])",
            run_api(lambda: ij.DAG.from_edges(["xa", "ay"], inputs=["x"], outputs=["y"])),
        ),
    )
    guard(
        "fd unused output",
        lambda: front(
            "DAG.from_edges: output in no edge",
            run_api(lambda: ij.DAG.from_edges([("x", "h"), ("h", "y")], inputs=["x"], outputs=["y", "z"])),
        ),
    )
    for case, extra in [
        ("--seed 2**64", ["--seed", str(2**64)]),
        ("--steps-per-call 2**31", ["--steps-per-call", str(2**31)]),
        ("--scale 1e200", ["--scale", "1e200"]),
        ("--atol -1e-8", ["--atol", "-1e-8"]),
        ("--kink-aware --no-kink-aware", ["--kink-aware", "--no-kink-aware"]),
    ]:
        o = ROOT / ("fd" + "".join(c for c in case if c.isalnum()))
        words = ("--atol", "must be") if extra[0] == "--atol" else ("not allowed",) if "kink" in case else (extra[0],)
        guard(
            "fd " + case,
            lambda case=case, extra=extra, o=o, words=words: front(
                f"sweep {case}", run_cli(["sweep", *small, *extra, "--out", str(o)], folder=o), words=words
            ),
        )
    for cmd in ("sweep", "check", "connectivity"):
        o = ROOT / f"fdseed_{cmd}"
        argv = [cmd, "--seed=-1"] + (["--out", str(o), *small] if cmd == "sweep" else [])
        spy = {"sweep": ENGINE, "check": ENGINE, "connectivity": ("invariant_jax.cli._connectivity", "connectivity")}[
            cmd
        ]
        guard(
            "fd seed " + cmd,
            lambda cmd=cmd, argv=argv, spy=spy, o=o: front(
                f"{cmd} --seed=-1", run_cli(argv, spy=spy, folder=o if cmd == "sweep" else None), words=("seed",)
            ),
        )
    guard(
        "fd rtol",
        lambda: front(
            "SolverOptions(rtol=1.0) / SweepConfig(rtol=1.0)",
            run_api(lambda: (ij.SolverOptions(rtol=1.0), SweepConfig(rtol=1.0))),
        ),
    )
    toml = {
        "beside": "seed = 3\n[sweep]\nn_inits = 2\n",
        "unknown table": "n_inits = 2\n[solver]\nrtol = 1e-3\n",
        "binary": b"\x89PNG\r\n\x1a\n\x00\xff",
        "syntax error": "n_inits = 2\nseed = = 3\n",
    }
    for name, content in toml.items():
        f = ROOT / f"cfg_{name.replace(' ', '_')}.toml"
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
        o = ROOT / f"fdcfg_{name.replace(' ', '_')}"
        guard(
            "fd toml " + name,
            lambda f=f, o=o, name=name: front(
                f"sweep --config: TOML {name}",
                run_cli(["sweep", "--config", str(f), "--out", str(o), "--no-progress"], folder=o),
                words=(str(f),),
            ),
        )
        guard(
            "fd from_toml " + name,
            lambda f=f, name=name: front(
                f"SweepConfig.from_toml: TOML {name}", run_api(lambda: SweepConfig.from_toml(f)), words=(str(f),)
            ),
        )
    bom = ROOT / "cfg_bom.toml"
    bom.write_bytes("\ufeffn_inits = 2\nseed = 3\n".encode())
    guard(
        "fd toml bom",
        lambda: front(
            "SweepConfig.from_toml: TOML with a BOM",
            run_api(lambda: SweepConfig.from_toml(bom) == SweepConfig(n_inits=2, seed=3) or 1 / 0),
            expect="result",
        ),
    )
    guard(
        "fd toml dir",
        lambda: front(
            "sweep --config DIR",
            run_cli(
                ["sweep", "--config", str(ROOT), "--out", str(ROOT / "fdcfgdir"), "--no-progress"],
                folder=ROOT / "fdcfgdir",
            ),
            words=("directory",),
        ),
    )
    csv_front_door()
    guard("fd kink", kink_non_finite)


def csv_front_door():
    import invariant_jax as ij

    body = "".join(f"{i / 7:.6f},{(i * 3) % 5},{i % 2}\n" for i in range(24))
    bom = ROOT / "bom.csv"
    bom.write_text(body, encoding="utf-8-sig")

    def rows_kept():
        d = ij.load_csv(bom)
        if d.X_train.shape[0] + d.X_test.shape[0] != 24:
            raise AssertionError(f"{d.X_train.shape[0] + d.X_test.shape[0]} of 24 rows read")

    def bom_case():
        try:
            rows_kept()
            return 0, "", None, False
        except AssertionError as x:  # a row silently dropped
            return 0, "", None, str(x)
        except Exception as x:
            return None, str(x), x, False

    def bom_record():
        rc, msg, exc, dropped = bom_case()
        record(
            "load_csv: UTF-8 BOM, numeric first row",
            exc is None and not dropped,
            0,
            dropped or (msg[-100:] if msg else "24 of 24 rows"),
            expect="result",
            outcome=SILENT if dropped else None,
            rc=rc,
            exc=exc,
            issue=30,
        )

    guard("fd csv bom", bom_record)
    for name, content in {
        "binary (NUL)": b"a,b,y\n1,2,0\n3,\x00\x01,1\n",
        "not UTF-8": "a,b,y\n1,2,0\n3,\xe9,1\n".encode("latin-1"),
        "unterminated quote": ("a,b,y\n" + body + '1,"2,0\n').encode(),
        "stray quote": ('a,b,y\n1,2,0\n"1"x,2,0\n' + body).encode(),
    }.items():
        f = ROOT / f"csv_{len(rows)}.csv"
        f.write_bytes(content)
        guard(
            "fd csv " + name,
            lambda f=f, name=name: front(f"load_csv: {name}", run_api(lambda: ij.load_csv(f)), words=(str(f), "line")),
        )
    guard("fd csv dir", lambda: front("load_csv(DIR)", run_api(lambda: ij.load_csv(ROOT)), words=("directory",)))


def kink_non_finite():
    import equinox as eqx
    import jax.numpy as jnp

    import invariant_jax as ij

    g = ij.mlp([2, 1, 1], bias=False)
    net = ij.DAGNetwork(g, "relu", edge_weights=jnp.array([0.3, 0.2, 1.0]))
    u, v = g.edges[1]
    net = eqx.tree_at(lambda n: n.weights, net, net.weights.at[g.index[u], g.index[v]].set(jnp.nan))
    X, Y = jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([-1.0, 1.0])
    t0 = time.monotonic()
    rc, msg, exc, started = run_api(lambda: ij.kink_aware_flow(net, X, Y, 1.0, solver="tsit5"))()
    front(
        "kink_aware_flow with a NaN weight",
        lambda: (rc, msg + f" ({time.monotonic() - t0:.1f} s)", exc, started),
        words=("not finite",),
    )


def package_under_test() -> dict:
    """The invariant_jax these cases ran against (PYTHONPATH picks a version): its folder
    and that folder's git commit."""
    import invariant_jax

    where = Path(invariant_jax.__file__).resolve().parent.parent
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"path": str(where), "commit": commit}


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
guard(
    "channels dir",
    lambda: outpath(
        "channels --out DIR", ["channels", "--out", str(ROOT)], "invariant_jax.channels", "channel_frequency"
    ),
)
guard(
    "prune dir", lambda: outpath("prune --json DIR", ["prune", "--json", str(ROOT)], "invariant_jax.cli._prune", "fit")
)
guard(
    "prune unwritable",
    lambda: outpath(
        "prune --json under a file", ["prune", "--json", str(blocker / "x.json")], "invariant_jax.cli._prune", "fit"
    ),
)
guard("strict", c13)
guard("check", c14)
guard("mode", c15)
guard("graphs", graphs)
guard("slots", c20)
# issue 30: the reproduced losses, signals and full disks, the front door
guard(
    "user quarantine",
    lambda: user_file_case("user file quarantine/notes.txt: --resume, --overwrite", "quarantine/notes.txt"),
)
guard("user claims", lambda: user_file_case("user file claims/notes.txt: --resume, --overwrite", "claims/notes.txt"))
guard("user manifest", foreign_manifest)
guard("user claim block", user_claim)
guard("demo over sweep", demo_over_sweep)
guard("resume overwrite cli", lambda: resume_overwrite(False))
guard("resume overwrite api", lambda: resume_overwrite(True))
guard("prune existing", lambda: prune_json("prune --json EXISTING_FILE", ROOT / "report.json", True))
guard("prune missing", lambda: prune_json("prune --json MISSING/DIR/r.json", ROOT / "nope" / "sub" / "r.json", False))
guard("race", racing_configs)
guard("edited manifest", edited_manifest)
guard("missing chunk", missing_chunk)
guard("sigterm", lambda: signal_case(15))
guard("sigint", lambda: signal_case(2))
guard("full disk", full_disk)
front_door()
lost = {u: sum(r["lost"] for r in rows if r["unit"] == u) for u in ("records", "user files")}
counts = {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}
by_issue = {i: {o: sum(r["outcome"] == o for r in rows if r["issue"] == i) for o in OUTCOMES} for i in (15, 30)}
print(
    f"TOTAL cases {len(rows)} clean {sum(r['clean'] for r in rows)} records lost {lost['records']} "
    f"user files lost {lost['user files']}"
)
for o in OUTCOMES:
    print(f"  {o:32s} {counts[o]:3d}  (issue 15's cases {by_issue[15][o]}, issue 30's {by_issue[30][o]})")
write_json(
    output_path(args.out, f"store_robustness_{args.label}.json"),
    {
        "label": args.label,
        "cases": len(rows),
        "clean": sum(r["clean"] for r in rows),
        "records_lost": lost["records"],
        "user_files_lost": lost["user files"],
        "outcomes": counts,
        "outcomes_by_issue": {str(k): v for k, v in by_issue.items()},
        "package": package_under_test(),
        "rows": rows,
    },
)
