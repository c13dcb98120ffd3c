"""The numbers in README.md, docs/*.md and benchmarks/*.md that come from committed
results, written from those JSON files.

A page holds a generated block as

    <!-- generated: NAME -->
    ...text written by BLOCKS[NAME]...
    <!-- end generated -->

`python benchmarks/docs_tables.py` rewrites every block from the JSON files it reads;
`--check` changes nothing and exits 1, naming each block that differs (the suite runs the
check: tests/test_docs_numbers.py). So a number in a block cannot drift from its file.

Usage: python benchmarks/docs_tables.py [--check]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from _output import _is_output  # noqa: E402 (benchmarks/_output.py: paths that are outputs, not code)

PAGES = [
    ROOT / "README.md",
    HERE / "README.md",
    HERE / "channels_history.md",
    HERE / "sweep_history.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _command(rec: dict) -> str:
    cmd = rec.get("command") or (rec.get("meta") or {}).get("command") or ""
    return cmd if isinstance(cmd, str) else ""


def _loaded(load: float, cores: int) -> bool:
    """Whether a run's load average says other work shared its cores."""
    return load > cores


def _commit(rec: dict) -> str:
    prov = rec.get("provenance") or {}
    if prov.get("commit"):
        if prov.get("dirty") and prov.get("dirty_paths") and all(_is_output(p) for p in prov["dirty_paths"]):
            return prov["commit"][:7] + " (dirty: figures only, " + ", ".join(prov["dirty_paths"]) + ")"
        return prov["commit"][:7] + (" (dirty)" if prov.get("dirty") else "")
    if prov.get("committed_in"):
        return f"committed in {prov['committed_in'][:7]}; code not recorded"
    return "not recorded"


def results_index() -> str:
    """Every committed results file with the command that wrote it and its commit."""
    rows = ["| file | command | commit |", "|---|---|---|"]
    for path in sorted(RESULTS.glob("*.json")) + sorted((RESULTS / "parts").glob("*.json")):
        rec = json.loads(path.read_text())
        cmd = _command(rec).replace("|", "\\|")
        rows.append(f"| `{path.relative_to(RESULTS).as_posix()}` | `{cmd}` | {_commit(rec)} |")
    return "\n".join(rows) + "\n"


JUMP_STUDIES = [
    ("g with bias", "channels_loss_levels_paper_g_bias_cpu_seeds100.json"),
    ("softplus without bias", "channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json"),
    ("softplus with bias", "channels_loss_levels_paper_softplus_bias_cpu_seeds100.json"),
    ("roughness (softplus r = 4, bias)", "channels_roughness_paper_cpu_runs100.json"),
]


def jump_filter() -> str:
    """How many runs the authors' jump filter keeps, per study, overall and among the
    runs that end infinite (`weightnorm >= maxnorm`)."""
    rows = [
        "| study | runs kept by the filter | infinite runs kept | flow phase alone past `maxnorm` |",
        "|---|---|---|---|",
    ]
    for label, name in JUMP_STUDIES:
        study = _load(name)
        rec, settings = study["records"], study["settings"]
        kept = [c is not None and c < settings["jump_max_cos"] for c in rec["jump_cos"]]
        inf = rec["infinite"]
        maxnorm = settings["maxnorm"]
        flow_past = sum(w is not None and w >= maxnorm for w in rec["weightnorm_flow"])
        n_inf = sum(inf)
        rows.append(
            f"| {label} (`{name}`) | {sum(kept)} / {len(kept)} | "
            f"{sum(k and i for k, i in zip(kept, inf))} / {n_inf} | {flow_past} / {len(kept)} |"
        )
    return "\n".join(rows) + "\n"


def test_suite_time() -> str:
    """README's Quickstart sentence on how long `make test` takes, from the timed clean clone."""
    rec = _load("test_suite_time.json")
    s = rec["summary"]
    assert s["make_test_exit_code"] == 0, "test_suite_time.json records a failing make test; time a green one"
    return (
        f"From a clean clone of {rec['cloned_commit'][:7]} on this project's 2-core machine "
        f"(load average {s['load_average_before']:.1f} before it started): the install took "
        f"{s['install_s']:.0f} s and `make test` {s['make_test_s']:.0f} s "
        f"({s['passed']} passed, {s['skipped']} skipped, then {s['exactness_passed']} exactness "
        f"tests under SSE4_2), from `{rec['command']}` "
        f"(`benchmarks/results/test_suite_time.json`, with per-file times).\n"
    )


def _on_cpu(prov: dict) -> str:
    """ ", on a 2-core <model>" from a provenance that records the CPU model (older ones do not)."""
    model = prov.get("cpu_model")
    return f", on a {prov['cpu_count']}-core {model}" if model else ""


FIRST_CALLS = "first_calls_program_size.json"
"""The latest fresh-process first calls of README's example (README's Cost paragraph)."""


def first_calls() -> str:
    """README's Cost paragraph: fresh-process first calls of its example."""
    rec = _load(FIRST_CALLS)
    s = rec["summary"]
    load = rec["provenance"]["load_average"][0]
    shared = (
        f"On a shared machine at load average {load:.1f} (other jobs on its 2 cores, so each time is "
        "several times a quiet machine's), "
        if load > 2
        else ""
    )
    prov = rec["provenance"]
    threads = set((prov.get("blas_threads") or {}).values())  # libraries the parent loaded
    inherited = (prov.get("blas_thread_variables") or {}).get("OPENBLAS_NUM_THREADS")  # what its children got
    blas = "with one BLAS thread, " if threads <= {1} and (threads or inherited == "1") else ""
    lead = f"{shared}{blas}"
    return (
        f"{lead[:1].upper() + lead[1:]}importing takes {s['import_s']:.1f} s; the first `gradient_flow` call "
        f"{s['gradient_flow_first_s']:.1f} s (nearly all compiling) and the same call again "
        f"{s['gradient_flow_again_s']:.3f} s; the first `ij.kink_aware_flow(net, X, Y, 2.0)` "
        f"{s['kink_aware_flow_first_s']:.1f} s ({s['kink_aware_flow_first_compile_s']:.1f} s of it compiling) "
        f"and again {s['kink_aware_flow_again_s']:.3f} s "
        f"(medians of {rec['rounds']} rounds at {rec['provenance']['commit'][:7]}{_on_cpu(prov)}; `{rec['command']}`, "
        f"`benchmarks/results/{FIRST_CALLS}`).{_first_calls_before(rec)}\n"
    )


def _first_calls_before(rec: dict) -> str:
    """The code measured beside it (`--before`), if any: its first calls in the same rounds."""
    if "before" not in rec:
        return ""
    b, s = rec["before"], rec["before"]["summary"]
    commit = (b["commit"] or "?")[:7] + (" (dirty)" if b["dirty"] else "")
    return (
        f" In the same rounds the code of {commit} took {s['kink_aware_flow_first_s']:.1f} s for the first "
        f"`kink_aware_flow` call ({s['kink_aware_flow_first_compile_s']:.1f} s compiling, "
        f"{s['kink_aware_flow_again_s']:.3f} s again) and "
        f"{s['gradient_flow_first_s']:.1f} s for the first `gradient_flow` call."
    )


def first_calls_compile_options() -> str:
    """docs/solvers.md: the single-flow compiler options' first calls, side by side with the
    code before them: on every CPU, on one, and beside a busy process."""
    return _first_calls_table(("first_calls.json", "first_calls_one_cpu.json", "first_calls_busy.json"))


def first_calls_program_size() -> str:
    """docs/solvers.md: the first calls of the smaller kink-aware program, side by side
    with the code before it."""
    return _first_calls_table(
        (FIRST_CALLS, "first_calls_program_size_one_cpu.json", "first_calls_program_size_busy.json")
    )


def _first_calls_table(names) -> str:
    """First calls of `first_calls.py` files, each beside its `--before` code."""
    rows = [
        "| where | code, this / before | first `kink_aware_flow` (compiling) | again | first `gradient_flow` |",
        "|---|---|---|---|---|",
    ]
    cmds = []
    for name in names:
        rec = _load(name)
        s, b = rec["summary"], rec["before"]["summary"]
        where = f"{len(rec['cpus'])} CPUs" if len(rec["cpus"]) > 1 else "one CPU"
        busy = rec.get("busy", 0)
        where += f", {busy} process{'es' if busy > 1 else ''} spinning" if busy else ", quiet"
        codes = f"{rec['provenance']['commit'][:7]} / {(rec['before']['commit'] or '?')[:7]}"
        rows.append(
            f"| {where} | {codes} | {s['kink_aware_flow_first_s']:.1f} s ({s['kink_aware_flow_first_compile_s']:.1f}) / "
            f"{b['kink_aware_flow_first_s']:.1f} s ({b['kink_aware_flow_first_compile_s']:.1f}) | "
            f"{s['kink_aware_flow_again_s']:.3f} / {b['kink_aware_flow_again_s']:.3f} s | "
            f"{s['gradient_flow_first_s']:.1f} / {b['gradient_flow_first_s']:.1f} s |"
        )
        cmds.append(f"`{rec['command']}` (`benchmarks/results/{name}`, {rec['rounds']} rounds)")
    return (
        "Medians over rounds, each measurement in a fresh process, the two codes alternating: "
        + "; ".join(cmds)
        + ".\n\n"
        + "\n".join(rows)
        + "\n"
    )


def _blas_rows(rec: dict) -> dict:
    """blas_threads.json's summary by (spinning processes, workload)."""
    return {(r["busy"], r["workload"]): r for r in rec["summary"]}


def blas_threads() -> str:
    """docs/solvers.md: OpenBLAS's default threads against one, idle and with every core busy."""
    rec = _load("blas_threads.json")
    st = rec["settings"]
    names = {"light": "README `kink_aware_flow` (Gauss4)", "heavy": "Kvaerno5 `gradient_flow`", "lu240": "240 x 240 LU"}
    unit = {"light": (1, "s"), "heavy": (1, "s"), "lu240": (1e3, "ms")}
    rows = [
        "| spinning processes | workload | warm median, default / one | slowest warm, default / one | first call, "
        "default / one |",
        "|---|---|---|---|---|",
    ]
    med = statistics.median
    for r in rec["summary"]:
        k, u = unit[r["workload"]]
        f = lambda x: f"{x * k:.2f} {u}" if x * k < 10 else f"{x * k:.1f} {u}"  # noqa: E731
        rows.append(
            f"| {r['busy']} | {names[r['workload']]} | {f(med(r['default_warm_median_s']))} / "
            f"{f(med(r['one_warm_median_s']))} | {f(r['default_warm_max_s'])} / {f(r['one_warm_max_s'])} | "
            f"{f(med(r['default_first_s']))} / {f(med(r['one_first_s']))} |"
        )
    return (
        f"Measured (`{rec['command']}`, {_commit_of(rec)}, `benchmarks/results/blas_threads.json`; "
        f"{st['cores']} cores; each arm in a fresh process, {st['rounds']} rounds of {st['repeats']} warm calls, "
        f"medians over rounds; default = OpenBLAS's {st['arms']['default']} threads):\n\n" + "\n".join(rows) + "\n"
    )


def blas_threads_readme() -> str:
    """README's Cost note: the README example's warm call with busy cores, default BLAS threads against one."""
    rec = _load("blas_threads.json")
    busy = max(r["busy"] for r in rec["summary"])
    r = _blas_rows(rec)[busy, "light"]
    med = statistics.median
    return (
        f"With {busy} other processes keeping the cores busy, the warm `kink_aware_flow` call above took "
        f"{med(r['default_warm_median_s']):.2f} s (slowest {r['default_warm_max_s']:.2f} s) with OpenBLAS's "
        f"default threads and {med(r['one_warm_median_s']):.2f} s (slowest {r['one_warm_max_s']:.2f} s) with one "
        f'(`benchmarks/results/blas_threads.json`; docs/solvers.md, "BLAS threads").\n'
    )


def channels_solvers() -> str:
    """docs/channels.md: Kvaerno5 against Tsit5 on the stiff toy channel."""
    rec = _load("channels_solvers.json")
    rows = rec["rows"]
    hs = sorted({r["horizon"] for r in rows})
    by = {(r["horizon"], r["solver"]): r for r in rows}
    steps = lambda s: " / ".join(f"{by[h, s]['steps']}" for h in hs)  # noqa: E731
    ratio = " / ".join(f"{by[h, 'tsit5']['seconds'] / by[h, 'kvaerno5']['seconds']:.0f}x" for h in hs)
    same = all(abs(by[h, "tsit5"]["loss_final"] - by[h, "kvaerno5"]["loss_final"]) < 1e-8 for h in hs)
    return (
        f"Measured (`{rec['command']}`, toy channel at eps = {rec['start_eps']:.3f}, rtol = atol = 1e-8, "
        f"load average {rec['provenance']['load_average'][0]:.1f} on 2 cores): Kvaerno5 needs {steps('kvaerno5')} "
        f"steps for horizons {' / '.join(f'{h:.0e}' for h in hs)}, Tsit5 {steps('tsit5')} steps, "
        f"{ratio} the wall time{', same final loss to 1e-8' if same else ''}.\n"
    )


def _budget_cells(runs: list, key: str) -> dict:
    cells = {}
    for r in runs:
        cells.setdefault(r[key], []).append(r)
    return cells


def _flow_budget_arms(arms: dict) -> list[str]:
    """The side-by-side table of a `channels_flow_budget.py` run with several arms."""
    lines = [
        f"Side by side (`{arms['command']}`, {_commit_of(arms)}; {arms['wall_budget']:.0f} s per run; the arms "
        "alternate run by run):",
        "",
        "| arm (solver, `:pid`: recovery=None) | runs | passed maxnorm | solver steps (sum) | wall (sum) | per width r: passed / runs |",
        "|---|---|---|---|---|---|",
    ]
    for s in arms["solvers"]:
        a = arms["arms"][s]
        rs = [r for r in arms["runs"] if r["solver"] == s]
        per = ", ".join(
            f"{w}: {sum(r['passed'] for r in c)}/{len(c)}" for w, c in sorted(_budget_cells(rs, "r").items())
        )
        lines.append(f"| `{s}` | {a['n']} | {a['passed']} | {a['steps_sum']} | {a['wall_sum']:.0f} s | {per} |")
    return lines


def channels_flow_budget_stages() -> str:
    """docs/channels.md: the flow phase's first passage of maxnorm, `kvaerno5_newton`'s
    stages solved in `y` against diffrax's stage solves."""
    arms = _load("channels_flow_budget_levels_stages.json")
    lines = _flow_budget_arms(arms)
    first, *others = arms["solvers"]
    a = arms["arms"][first]
    lines += [
        "",
        f"`{first}` against "
        + "; against ".join(
            f"`{o}`: steps {a['steps_sum']} / {b['steps_sum']} ({a['steps_sum'] / b['steps_sum']:.2f}x), wall "
            f"{a['wall_sum']:.0f} / {b['wall_sum']:.0f} s ({a['wall_sum'] / b['wall_sum']:.2f}x)"
            for o in others
            for b in [arms["arms"][o]]
        )
        + ". Compilation (a cell's first call less the same run warm), by width: "
        + "; ".join(
            f"{c}: "
            + " / ".join(
                f"{f['compile_estimate']:.1f}"
                for s in arms["solvers"]
                for f in arms["first_calls"]
                if f["solver"] == s and f["cell"] == c
            )
            + " s"
            for c in dict.fromkeys(f["cell"] for f in arms["first_calls"])
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def channels_flow_budget() -> str:
    """docs/channels.md: the flow phase's first passage of maxnorm, chord against Newton stage
    solves side by side, and the Newton solve on the whole g-without-bias group, run by run
    against the committed study's verdicts."""
    arms = _load("channels_flow_budget_levels_arms.json")
    full = _load("channels_flow_budget_levels_newton.json")
    study = _load("channels_loss_levels_paper_g_nobias.json")["records"]
    lines = _flow_budget_arms(arms)
    crawl = sorted(
        r["weightnorm"] for r in arms["runs"] if r["solver"] == "kvaerno5" and not r["passed"] and r["t_flow"] < 1e12
    )
    if crawl:
        lines += [
            "",
            f"The {len(crawl)} `kvaerno5` runs that neither passed nor reached `t1` ended their budget at "
            f"`weightnorm` {crawl[0]:.3g} to {crawl[-1]:.3g} (median {statistics.median_high(crawl):.3g}).",
        ]
    old = {(r, s): inf for r, s, inf in zip(study["r"], study["seed"], study["infinite"])}
    runs = full["runs"]
    lines += [
        "",
        f"The whole group with the Newton stage solve (`{full['command']}`; "
        f"{full['wall_budget']:.0f} s per run), against the committed study "
        "(`channels_loss_levels_paper_g_nobias.json`, whose verdicts the Newton phase decided after "
        "1000 chord steps), run by run:",
        "",
        "| r | runs | ODE phase passed maxnorm | Fig. 4 numerator (passed, closest pair cos < 1e-2) "
        "| the study's infinite runs | same verdict | steps to pass: median / max | wall to pass: median / max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w, c in sorted(_budget_cells(runs, "r").items()):
        hit = [r for r in c if r["passed"]]
        fig4 = sum(r["min_cos"] < 1e-2 for r in hit)
        inf = sum(bool(old[w, r["seed"]]) for r in c)
        same = sum(bool(old[w, r["seed"]]) == r["passed"] for r in c)
        st = sorted(r["steps"] for r in hit)
        wt = sorted(r["wall"] for r in hit)
        steps = f"{statistics.median_high(st)} / {st[-1]}" if st else "-"
        wall = f"{statistics.median_high(wt):.1f} / {wt[-1]:.1f} s" if wt else "-"
        lines.append(f"| {w} | {len(c)} | {len(hit)} | {fig4} | {inf} | {same}/{len(c)} | {steps} | {wall} |")
    differ = [r for r in runs if bool(old[r["r"], r["seed"]]) != r["passed"]]
    if differ:
        lines += [
            "",
            "Where the verdicts differ: "
            + "; ".join(
                f"r = {r['r']} seed {r['seed']} is {'finite' if r['passed'] else 'infinite'} in the study; its ODE "
                f"phase {'passed' if r['passed'] else 'did not pass'} `maxnorm` and ended at t = {r['t_flow']:.3g}, "
                f"`weightnorm` {r['weightnorm']:.3g}, closest pair at cosine distance {r['min_cos']:.2g}"
                for r in differ
            )
            + ".",
        ]
    lines += ["", _budget_curves(full, "width")]
    return "\n".join(lines) + "\n"


def channels_flow_budget_roughness() -> str:
    """docs/channels.md: the roughness study's ODE phase with the Newton stage solve, run by run
    against the committed study's verdicts."""
    rough = _load("channels_flow_budget_roughness_newton.json")
    study = _load("channels_roughness_paper_cpu_runs100.json")["records"]
    old = {
        (lab, t, s): (inf, ch, stop)
        for lab, t, s, inf, ch, stop in zip(
            study["label"],
            study["teacher"],
            study["seed"],
            study["infinite"],
            study["channel_paper"],
            study["stopped_by"],
        )
    }
    lines = [
        f"The roughness study's runs with the Newton stage solve (`{rough['command']}`; "
        f"{rough['wall_budget']:.0f} s per run), against the committed study "
        "(`channels_roughness_paper_cpu_runs100.json`: 1000 chord steps, then Newton), run by run:",
        "",
        "| scaling s | runs | ODE phase passed maxnorm | Fig. 4 numerator | the study's infinite runs "
        "| its channels (infinite, cos < 1e-2) | same infinite verdict | passed here, finite there "
        "| infinite there, not passed here | steps to pass: median / max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sc, c in sorted(_budget_cells(rough["runs"], "scaling").items()):
        hit = [r for r in c if r["passed"]]
        prev = [old[f"s={sc:g}", r["teacher"], r["init"]] for r in c]
        same = sum(bool(p[0]) == r["passed"] for p, r in zip(prev, c))
        st = sorted(r["steps"] for r in hit)
        steps = f"{statistics.median_high(st)} / {st[-1]}" if st else "-"
        lines.append(
            f"| {sc:g} | {len(c)} | {len(hit)} | {sum(r['min_cos'] < 1e-2 for r in hit)} | "
            f"{sum(bool(p[0]) for p in prev)} | {sum(bool(p[1]) for p in prev)} | {same}/{len(c)} "
            f"| {sum(r['passed'] and not p[0] for p, r in zip(prev, c))} "
            f"| {sum(bool(p[0]) and not r['passed'] for p, r in zip(prev, c))} | {steps} |"
        )
    before = [old[f"s={r['scaling']:g}", r["teacher"], r["init"]] for r in rough["runs"]]
    late = [p[2] for p, r in zip(before, rough["runs"]) if r["passed"] and not p[0]]
    counts = ", ".join(f"{k} {late.count(k)}" for k in sorted(set(late)))
    lines += [
        "",
        f"How the study's Newton phase had ended the {len(late)} runs that pass here but were finite there: "
        f"{counts or 'none'}.",
        "",
        _budget_curves(rough, "study"),
    ]
    return "\n".join(lines) + "\n"


def _loss_levels_newton(new_name: str, old_name: str) -> str:
    """A loss-levels group run again through flow then Newton with the Newton stage solve, the
    authors' criteria beside ours, against the committed study on the same seeds."""
    rec = _load(new_name)
    old = _load(old_name)["records"]
    new = rec["records"]
    prev = {
        (r, s): (inf, ch, cf, stop, wn)
        for r, s, inf, ch, cf, stop, wn in zip(
            old["r"],
            old["seed"],
            old["infinite"],
            old["channel_paper"],
            old["confirmed"],
            old["stopped_by"],
            old["weightnorm"],
        )
    }
    lines = [
        f"Flow then Newton, the study's pipeline with the Newton stage solve (`{rec['command']}`, "
        f"commit {_commit(rec)}; {rec['total_seconds'] / 60:.0f} min, seeds in rounds of {rec['settings']['seeds_per_round']} "
        f"until the time budget), against the committed study on the same seeds (`{old_name}`):",
        "",
        "| r | runs | ODE phase passed maxnorm | infinite (before: the study) | paper channel (before) "
        "| confirmed (before) | jump filter keeps | authors' Fig. 4 criterion among kept |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rec["summary"]:
        r = row["r"]
        m = [i for i, w in enumerate(new["r"]) if w == r]
        before = [prev[r, new["seed"][i]] for i in m]
        ode = sum(bool(new["passed_maxnorm_ode"][i]) for i in m)
        lines.append(
            f"| {r} | {row['n']} | {ode} | {row['infinite']} ({sum(bool(b[0]) for b in before)}) "
            f"| {row['channel_paper']} ({sum(bool(b[1]) for b in before)}) "
            f"| {row['confirmed']} ({sum(bool(b[2]) for b in before)}) | {row['kept']} "
            f"| {row['authors_channel']} / {row['kept']} |"
        )
    differ = [
        f"r = {r}, seed {sd}: {prev[r, sd][3]} at `weightnorm` {prev[r, sd][4]:.4g} before, "
        f"{new['stopped_by'][i]} at {new['weightnorm'][i]:.4g} now"
        for i, (r, sd) in enumerate(zip(new["r"], new["seed"]))
        if bool(new["infinite"][i]) != bool(prev[r, sd][0])
    ]
    stops = {k: new["stopped_by"].count(k) for k in sorted(set(new["stopped_by"]))}
    lines += [
        "",
        f"Newton phase stops now: {', '.join(f'{k} {v}' for k, v in stops.items())}. "
        f"Verdicts that differ from the study ({len(differ)} of {len(new['r'])}): "
        + ("; ".join(differ) if differ else "none")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def channels_loss_levels_newton() -> str:
    """docs/channels.md: the g-without-bias group through the whole pipeline again."""
    return _loss_levels_newton("channels_loss_levels_newton_g_nobias.json", "channels_loss_levels_paper_g_nobias.json")


def channels_loss_levels_newton_softplus_bias() -> str:
    """docs/channels.md: the softplus-with-bias group through the whole pipeline again."""
    return _loss_levels_newton(
        "channels_loss_levels_newton_softplus_bias.json", "channels_loss_levels_paper_softplus_bias_cpu_seeds100.json"
    )


def channels_loss_levels_newton_softplus_nobias() -> str:
    """docs/channels.md: the softplus-without-bias group through the whole pipeline again."""
    return _loss_levels_newton(
        "channels_loss_levels_newton_softplus_nobias.json",
        "channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json",
    )


def channels_loss_levels_newton_g_bias() -> str:
    """docs/channels.md: the g-with-bias group through the whole pipeline again."""
    return _loss_levels_newton(
        "channels_loss_levels_newton_g_bias.json", "channels_loss_levels_paper_g_bias_cpu_seeds100.json"
    )


AUTHORS_SEEDS = (
    ("g", "no", "channels_loss_levels_newton_g_nobias"),
    ("softplus", "no", "channels_loss_levels_newton_softplus_nobias"),
    ("softplus", "yes", "channels_loss_levels_newton_softplus_bias"),
    ("g", "yes", "channels_loss_levels_newton_g_bias"),
)


def channels_loss_levels_authors_seeds() -> str:
    """docs/channels.md: the loss-levels groups at the authors' seeds per width (10 / 20 / 40 /
    80 / 160 for r = 1..5), beside the same groups at 100 seeds per width."""
    lines = [
        "| activation | bias | r | seeds (theirs) | % infinite [95%] | paper criterion | confirmed "
        "| authors' Fig. 4 criterion among kept | % infinite at 100 seeds [95%] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    commands = []
    for act, bias, stem in AUTHORS_SEEDS:
        rec = _load(f"{stem}_authors_seeds.json")
        hundred = {c["r"]: c for c in _load(f"{stem}.json")["summary"]}
        extra = [m["command"] for m in rec["merged_from"] if not m["path"].endswith(f"{stem}.json")]
        commands.append(
            f"`{rec['command']}` (commit {_commit(rec)}), its new part from " + ", ".join(f"`{c}`" for c in extra)
        )
        for c in rec["summary"]:
            h = hundred[c["r"]]
            lines.append(
                f"| {act} | {bias} | {c['r']} | {c['n']} | {_pct_ci(c['infinite_fraction'], c['infinite_ci'])} "
                f"| {c['channel_paper']} | {c['confirmed']} | {c['authors_channel']} / {c['kept']} "
                f"| {_pct_ci(h['infinite_fraction'], h['infinite_ci'])} |"
            )
    return "Merged by " + "; ".join(commands) + ":\n\n" + "\n".join(lines) + "\n"


def channels_step_control() -> str:
    """docs/solvers.md: step-size control after a failed step, on channel passages and on
    the split-saddle hovers."""
    rec = _load("channels_step_control.json")
    arms = rec["arms"]
    mus = [s["mu"] for s in arms[0]["saddle_split"]]
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}); the study runs "
        + ", ".join(f"r = {s['r']} seed {s['seed']}" for s in arms[0]["study_runs"])
        + ":",
        "",
        "| controller | study runs: steps, passed maxnorm | Jacobians | warm s | split saddle, mu = "
        + " / ".join(f"{m:g}" for m in mus)
        + ": steps (rejected) | split saddle: first call s |",
        "|---|---|---|---|---|---|",
    ]
    for a in arms:
        t, st, sd = a["totals"], a["study_runs"], a["saddle_split"]
        lines.append(
            f"| {a['arm']} | {t['study_steps']}, {t['study_passed']} of {len(st)} | {t['study_jacobians']} "
            f"| {sum(s['warm_seconds'] for s in st):.1f} | "
            + " / ".join(f"{s['steps']} ({s['rejected']})" for s in sd)
            + " | "
            + " / ".join(f"{s['first_call_seconds']:.0f}" for s in sd)
            + " |"
        )
    return "\n".join(lines) + "\n"


def channels_deep() -> str:
    """docs/channels.md: the loss-levels pipeline on MLPs with two and three hidden layers."""
    rec = _load("channels_deep.json")
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}): {rec['activation']}, "
        f"{'with' if rec['bias'] else 'without'} biases, {rec['data']}; flow phase `{rec['flow']['solver']}` "
        f'(`flow_stop="{rec["flow"]["flow_stop"]}"`, {rec["flow"]["flow_wall_time"]:.0f} s per run), then up to '
        f"{rec['newton']['max_steps']} Newton iterations, `maxnorm` {rec['newton']['maxnorm']:g}:",
        "",
        "| network | edges | runs | infinite | ODE phase passed maxnorm | undecided | runs with a channel "
        "| ... in layer 1 / 2 / 3 | merging pairs in layer 1 / 2 / 3 | runs with a group of 3+ "
        "| saddles (min eigenvalue < -1e-8) | stopped by | wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in rec["architectures"]:
        s = a["summary"]
        per = lambda d: " / ".join(str(v) for v in d.values())  # noqa: E731
        lines.append(
            f"| {'-'.join(map(str, s['sizes']))} | {s['edges']} | {s['runs']} | {s['infinite']} "
            f"| {s['passed_maxnorm_ode']} | {s['undecided']} | {s['runs_with_channel']} "
            f"| {per(s['runs_with_channel_per_layer'])} | {per(s['merging_pairs_per_layer'])} "
            f"| {s['runs_with_group']} | {s['saddles']} | {_stopped(s['stopped_by'])} | {s['seconds']:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def channels_scaling() -> str:
    """docs/channels.md: the authors' Fig. 4 design (pooled D_in x r, fresh data per seed)."""
    rec = _load("channels_scaling.json")
    fl, nw = rec["flow"], rec["newton"]
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}): {rec['activation']} with biases; {rec['data']}; "
        f'flow phase `{fl["solver"]}` (`flow_stop="{fl["flow_stop"]}"`, {fl["flow_wall_time"]:.0f} s per run), '
        f"then up to {nw['max_steps']} Newton iterations or {nw['max_time']:.0f} s, `maxnorm` {nw['maxnorm']:g}. "
        "The authors' criterion counts, among the runs their jump filter keeps, those whose ODE phase "
        f"passed `maxnorm` with a closest first-layer pair at cosine distance < {rec['channel_cos']:g}:",
        "",
        "| D_in | r | edges | runs | ODE phase passed maxnorm | kept by jump filter | authors' Fig. 4 criterion "
        "among kept | infinite | confirmed channel | undecided | saddles (min eigenvalue < -1e-8) | stopped by | wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    tot = Counter()
    for c in rec["cells"]:
        s = c["summary"]
        for k in ("runs", "kept", "undecided", "saddles"):
            tot[k] += s[k]
        for k in ("passed_maxnorm_ode", "authors_channel", "infinite", "confirmed"):
            tot[k] += s[k]["k"]
        lines.append(
            f"| {s['din']} | {s['r']} | {s['edges']} | {s['runs']} | {s['passed_maxnorm_ode']['k']} | {s['kept']} "
            f"| {s['authors_channel']['k']} / {s['kept']} | {s['infinite']['k']} | {s['confirmed']['k']} "
            f"| {s['undecided']} | {s['saddles']} | {_stopped(s['stopped_by'])} | {s['seconds']:.0f} s |"
        )
    lines.append(
        f"| all | | | {tot['runs']} | {tot['passed_maxnorm_ode']} | {tot['kept']} "
        f"| {tot['authors_channel']} / {tot['kept']} | {tot['infinite']} | {tot['confirmed']} "
        f"| {tot['undecided']} | {tot['saddles']} | | {rec['total_seconds']:.0f} s |"
    )
    if rec["not_run"]:
        lines += ["", "Cells not run (budget): " + ", ".join(f"D_in={d} r={r}" for d, r in rec["not_run"]) + "."]
    return "\n".join(lines) + "\n"


def channels_scaling_t1() -> str:
    """docs/channels.md: the Fig. 4 cells whose flow ended at `t1 = 1e12`, run again side by
    side with `t1 = 1e12` and the authors' 1e300 on one machine (two files, one per `t1`)."""
    arms = [_load(f"channels_scaling_t1_{t}.json") for t in ("1e12", "1e300")]
    lines = [f"`{a['command']}` (commit {_commit(a)})" + (";" if k == 0 else ".") for k, a in enumerate(arms)]
    lines += [
        "",
        "| D_in | r | seed | t1 | flow time reached | flow steps | largest weightnorm of the ODE phase | passed maxnorm "
        "| closest-pair cosine | verdict | stopped by |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    passed = [0, 0]
    for cells in zip(*(a["cells"] for a in arms)):
        s = cells[0]["summary"]
        for runs in zip(*(c["runs"] for c in cells)):
            for k, (a, r) in enumerate(zip(arms, runs)):
                passed[k] += bool(r["passed_maxnorm_ode"])
                verdict = "infinite" if r["infinite"] else "finite"
                lines.append(
                    f"| {s['din']} | {s['r']} | {r['seed']} | {a['flow']['t1']:g} | {r['t_flow']:.3g} | {r['flow_steps']} "
                    f"| {r['weightnorm_flow_max']:.4g} | {'yes' if r['passed_maxnorm_ode'] else 'no'} "
                    f"| {r['min_cos']:.2g} | {verdict} | {r['stopped_by']} |"
                )
    n = sum(len(c["runs"]) for c in arms[0]["cells"])
    lines += ["", f"ODE phase passed `maxnorm`: {passed[0]} of {n} runs at t1 = 1e12, {passed[1]} of {n} at 1e300."]
    return "\n".join(lines) + "\n"


def channels_paper_run() -> str:
    """docs/channels.md: the authors' committed scaling run, rerun from their init on their data."""
    rec = _load("channels_paper_run.json")
    src, st = rec["source"], rec["setting"]
    ids = ", ".join(f"{i['point']} {i['theirs']:.12g} ({i['rel_diff']:.0e})" for i in rec["identities"])
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}), reading `{src['path']}` at the authors' commit "
        f"{src['commit'][:7]}: D_in = {st['din']}, r = {st['r']}, activation `{st['activation']}`, biases, "
        f"{st['n_samples']} inputs. Our MSE at their three points equals their recorded losses "
        f"(their value, our relative difference): {ids}.",
        "",
        "| | ODE phase end: theirs | ours | final: theirs | ours |",
        "|---|---|---|---|---|",
    ]
    ode, fin = rec["rows"]["ode_end"], rec["rows"]["final"]

    def row(label, key, fmt):
        vals = [d.get(key) for d in (ode["theirs"], ode["ours"], fin["theirs"], fin["ours"])]
        cells = ["-" if v is None else fmt(v) for v in vals]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    short = lambda v: f"{v:.3g}"  # noqa: E731
    row("MSE", "mse", lambda v: f"{v:.13g}")
    row("weightnorm", "weightnorm", lambda v: f"{v:.8g}")
    row("closest first-layer pair (cosine distance)", "closest_pair_cos", short)
    row("that pair", "pair", lambda v: f"{v[0]}, {v[1]}")
    row("its class (`detect_channels`)", "pair_class", str)
    row("its `c = a_i + a_j`", "pair_c", lambda v: f"{v:.7g}")
    row("its `eps = norm(w_i - w_j) / 2`", "pair_eps", lambda v: f"{v:.7g}")
    row("confirmed channel (`ch.confirm_channel`)", "confirmed_channel", lambda v: "yes" if v else "no")
    row("GLU error", "glu_error", short)
    row("iterations", "iterations", str)
    row("stopped by", "stopped_by", str)
    row("seconds (ours: compilation included)", "seconds", lambda v: f"{v:.1f}")
    lines += [
        "",
        f"Distance between their point and ours, relative (cosine): ODE phase end {ode['relative_distance']:.2g} "
        f"({ode['cosine_distance']:.2g}), final {fin['relative_distance']:.2g} ({fin['cosine_distance']:.2g}); "
        f"their optimizer moved their point by {fin['their_ode_end_to_final']:.2g} (relative). "
        f"Our run: {rec['seconds']:.0f} s in all.",
    ]
    hv = rec["hover"]
    lines += [
        "",
        f"Excess `weightnorm - maxnorm` at the ODE phase's end: theirs {hv['theirs_excess']:.3g}, ours "
        f"{hv['ours_excess']:.3g}; where the loss's pull at their point balances the penalty without "
        f"`n_samples` {hv['balance_without_n_samples']:.3g}, with it {hv['balance_with_n_samples']:.3g}.",
    ]
    return "\n".join(lines) + "\n"


def _out_of_steps(result: str) -> bool:
    """A run's result that ran out of solver steps: its name, or (files before it was
    recorded by name) the message of diffrax's RESULTS repr."""
    return result == "max_steps_reached" or "maximum number of solver steps" in result


def channels_saddle_split() -> str:
    """docs/channels.md: Fig. 2(c, d)'s committed runs against our flow, row by row."""
    rec = _load("channels_saddle_split.json")
    runs = rec["runs"]
    worst = max(max(r["identities"].values()) for r in runs)
    upto = "all their rows" if rec["t_cut"] is None else f"their rows up to their time {rec['t_cut']:g}"
    form = {"unscaled": "`(nx - maxnorm)^3/3`, without `n_samples`", "n_samples": "`(nx - maxnorm)^3/3 * n_samples`"}
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}), reading {len(runs)} files at the authors' commit "
        f"{rec['their_commit'][:7]}; {rec['wall_seconds'] / 60:.0f} minutes on 2 processes. The reading's "
        f"{sum(len(r['identities']) for r in runs)} identities (MSE at their points against their records, along "
        f"their first-order phase against `loss_trj`, `xs` against the split of `x`) hold to {worst:.0e} "
        f"(relative; `xs` exactly). Our flow: `{rec['solver']}`, rtol = atol = {rec['rtol']:g}, at most "
        f"{rec['max_steps']} steps, with their penalty {form[rec['penalty']]}, maxnorm = {rec['maxnorm']:g}; "
        f"{upto}. Norms are Euclidean; the hover's excess is `weightnorm - maxnorm` at the last row "
        "(theirs, ours) and the excess at which each penalty form balances the loss gradient's pull there.",
        "",
        "| mu | their ODE phase: stopped by, iterations, seconds | our steps (rejected), seconds "
        "| rows compared (to their t) | max distance (relative) | max \\|MSE diff\\| "
        "| MSE at the last row: theirs / ours | norm there: theirs / ours "
        "| hover excess: theirs / ours / balance without, with `n_samples` | our negative eigenvalues at `xs` "
        "| their ODE end: closest pair, our class, confirmed | their final MSE |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        end, ode, hv = r["their_ode_end"], r["their_ode"], r["hover"]
        pair = "-" if end["closest_pair"] is None else f"{end['closest_pair'][0]}, {end['closest_pair'][1]}"
        if hv["predicted_excess"] is None:
            hover = "- (below maxnorm)"
        else:
            pe = hv["predicted_excess"]
            hover = f"{hv['theirs_excess']:.6f} / {hv['ours_excess']:.6f} / {pe['unscaled']:.6f}, {pe['n_samples']:.1e}"
        lines.append(
            f"| {r['mu']:g} | {ode['stopped_by']}, {ode['iterations']}, {ode['seconds']:.0f} "
            f"| {r['our_steps']} ({r['our_rejected_steps']}), {r['our_seconds']:.0f} "
            f"| {r['rows_compared']} ({r['t_last_compared']:.3g}"
            f"{', our step budget' if _out_of_steps(r['our_result']) else ''}) | "
            f"{r['max_distance']:.1e} ({r['max_relative_distance']:.0e}) | {r['max_loss_diff']:.0e} | "
            f"{r['loss_at_last']['theirs']:.10f} / {r['loss_at_last']['ours']:.10f} | "
            f"{r['weightnorm_at_last']['theirs']:.6f} / {r['weightnorm_at_last']['ours']:.6f} | {hover} | "
            f"{r['n_negative_eigenvalues']} | {pair}, {end['kind']}, {'yes' if end['confirmed_channel'] else 'no'} | "
            f"{r['their_final_loss']:.10f} |"
        )
    return "\n".join(lines) + "\n"


def stage_tolerance() -> str:
    """docs/solvers.md: `kvaerno5_newton` with its stages solved in `y`, on the hover with
    an exact solution and on the authors' Fig. 2(c, d) runs."""
    hover = _load("filtered_error_hover.json")
    rows = {(r["t1"], r["solver"]): r for r in hover["rows"]}
    plain, old = "kvaerno5_newton", "kvaerno5_newton, diffrax's stage solves"

    def cell(r):
        return f"{r['steps']} ({r['rejected_steps']})" + ("" if r["success"] else ", out of steps")

    horizons = sorted({t for t, _ in rows})
    split = _load("channels_saddle_split.json")
    esc = [r for r in split["runs"] if r["mu"] < 0 or r["mu"] > 1]
    ends = [r for r in split["runs"] if r["mu"] in (0, 1)]

    def span(xs, fmt="{:.0f}"):
        return f"{fmt.format(min(xs))} to {fmt.format(max(xs))}"

    rej = [r["our_rejected_steps"] / r["our_steps"] * 100 for r in esc]
    lines = [
        f"The hover with an exact solution (`filtered_error_hover.json`, {_commit_of(hover)}; rtol = atol = "
        f"{_tol(hover['rtol'])}): steps (rejected) of `{plain}` / with diffrax's stage solves, by horizon: "
        + "; ".join(f"{t:g}: {cell(rows[(t, plain)])} / {cell(rows[(t, old)])}" for t in horizons)
        + ".",
        "",
        f"The authors' Fig. 2(c, d) runs (`channels_saddle_split.json`, commit {_commit(split)}; `{split['solver']}`, "
        f"rtol = atol = {split['rtol']:g}, to their last row): on the {len(esc)} runs that escape the split saddle, "
        f"{span([r['our_steps'] for r in esc])} steps ({span(rej)}% rejected) and "
        f"{span([r['our_seconds'] for r in esc])} s, within {max(r['max_distance'] for r in esc):.1e} of every "
        f"row of theirs; their ODE: {span([r['their_ode']['iterations'] for r in esc])} iterations, "
        f"{span([r['their_ode']['seconds'] for r in esc])} s. Fewer steps than their ODE on "
        f"{sum(r['our_steps'] < r['their_ode']['iterations'] for r in esc)} of {len(esc)}; their seconds over ours "
        f"{span([r['their_ode']['seconds'] / r['our_seconds'] for r in esc], '{:.1f}')}. "
        + " ".join(
            f"mu = {r['mu']:g}: {r['our_steps']} steps ({r['our_rejected_steps']} rejected), `{r['our_result']}`, "
            f"{r['rows_compared']} of their rows reached (to their t = {r['t_last_compared']:.2g})."
            for r in ends
        ),
    ]
    return "\n".join(lines) + "\n"


def channels_t1() -> str:
    """docs/channels.md: studies' runs cut off at t1 = 1e12, rerun with only t1 changed."""
    lines = []
    for name in ("channels_t1.json", "channels_t1_g_bias.json"):
        rec = _load(name)
        s = rec["summary"]
        lines += [
            f"`{rec['command']}` (commit {_commit(rec)}): of `{Path(rec['study']).name}`'s runs, "
            f"{rec['candidates']} ended the flow at t1 = {rec['study_t1']:g} short of `maxnorm` with a merged "
            f"closest pair; they share {rec['end_states']} end states, and the first run of each was rerun "
            f"with t1 = {rec['t1']:g}, every other setting the study's:",
            "",
            "| activation | bias | r | seed | runs sharing its end state | study: flow time, steps, ODE max "
            "weightnorm | verdict | rerun: flow time, steps, ODE max weightnorm | ODE passed maxnorm | verdict "
            "| confirmed | wall |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rec["runs"]:
            a, b = r["study"], r["rerun"]

            def verdict(x):
                return ("infinite" if x["infinite"] else "finite") + f" ({x['stopped_by']})"

            lines.append(
                f"| {r['activation']} | {'yes' if r['bias'] else 'no'} | {r['r']} | {r['seed']} "
                f"| {r['runs_sharing_end_state']} | {a['t_flow']:.2g}, {a['flow_steps']}, "
                f"{a['weightnorm_flow_max']:.4g} | {verdict(a)} | {b['t_flow']:.2g}, {b['flow_steps']}, "
                f"{b['weightnorm_flow_max']:.4g} | {'yes' if b['passed_maxnorm_ode'] else 'no'} | {verdict(b)} "
                f"| {'yes' if b['confirmed'] else 'no'} | {b['seconds']:.0f} s |"
            )
        lines += [
            "",
            f"Rerun: {s['rerun']} end states; ODE phase passed `maxnorm` in {s['passed_maxnorm_ode']}; "
            f"infinite {s['infinite_before']} before, {s['infinite_after']} after; confirmed after "
            f"{s['confirmed_after']}.",
        ]
        if rec["not_run"]:
            lines.append(f"End states not rerun (`--max-runs`): {rec['not_run']}.")
        lines.append("")
    return "\n".join(lines[:-1]) + "\n"


T1_CONTROLLERS = (
    ("the flow phase's (recovering, no horizon)", "channels_t1_g_bias.json"),
    ("`diffrax.PIDController`", "channels_t1_g_bias_pid.json"),
    ("recovering, `horizon=100`", "channels_t1_g_bias_horizon100.json"),
)


def kink_missed_exit() -> str:
    """docs/sweep.md: init 12 of kink_sweep.py's workload, its exact flow at each tolerance
    against the smooth limit."""
    rec = _load("kink_missed_exit.json")
    ref = next(r for r in rec["rows"] if r["arm"] == rec["reference"])
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}): {rec['workload']}; distances are "
        f"`max |theta(1) - theta_ref(1)|`, the reference the kink-aware flow at {rec['reference']}.",
        "",
        "| kink-aware flow | events | sliding exits | events near t = 0.63 | distance to the reference |",
        "|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        near = ", ".join(f"{t:.5f}" for t in r["event_times"] if 0.62 < t < 0.7)
        lines.append(
            f"| {r['solver']}, {_tol(r['tol'])} | {r['events']} | {r['sliding_exits']} | {near} | "
            f"{_e(r['distance_to_reference'])} |"
        )
    lines += [
        "",
        "The smooth net (`ij.smoothed_relu(beta)`, " + rec["smooth_solver"] + "), its distance to the reference / "
        "to the flow at Tsit5 1e-8: "
        + "; ".join(
            f"beta = {s['beta']:g}: {_e(s['distance_to_reference'])} / {_e(s['distance_to_tsit5_1e8'])}"
            for s in rec["smooth"]
        )
        + f" (the reference has {ref['events']} events).",
    ]
    return "\n".join(lines) + "\n"


def kink_accuracy_scan() -> str:
    """docs/sweep.md: every trajectory at the sweep's tolerance against 1e-12, and the
    worst ones against the smooth net."""
    rec = _load("kink_accuracy_scan.json")
    tol, ref = rec["tol"], rec["reference_tol"]
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}{_on_cpu(rec['provenance'])}): the exact ReLU flow "
        f"(Tsit5 inside, exact mode) at rtol = atol = {_tol(tol)} against the same flow at {_tol(ref)}; "
        f"error: `max |theta(t1) - theta_ref(t1)|`; an outlier: an error above {rec['outlier_factor']:g} "
        "tolerances.",
        "",
        "| workload | inits | slide | not ok (flow / reference) | with ambiguous events | "
        "error median / 99% / 99.9% / max | outliers | event counts differ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, w in rec["workloads"].items():
        q = w["error_quantiles"]
        lines.append(
            f"| {name} | {w['n_inits']:,} | {w['sliding_trajectories']:,} | {w['not_ok']} / {w['not_ok_reference']} | "
            f"{w['ambiguous_trajectories']} / {w['ambiguous_trajectories_reference']} | "
            f"{_e(q['0.5'])} / {_e(q['0.99'])} / {_e(q['0.999'])} / {_e(w['error_max'])} (init {w['error_max_index']}) | "
            f"{w['outliers']} | {w['event_counts_differ']} |"
        )
    lines += [
        "",
        "The worst trajectories against the smooth net (`ij.smoothed_relu(beta)`, Kvaerno5 at 1e-12), "
        "its distance at t1 to the flow / to the reference:",
        "",
    ]
    for name, w in rec["workloads"].items():
        for s in w["smooth"]:
            d = "; ".join(f"beta = {b}: {_e(x['flow'])} / {_e(x['reference'])}" for b, x in s["distances"].items())
            lines.append(f"- {name} init {s['index']} (error {_e(s['error'])}): {d}.")
    return "\n".join(lines) + "\n"


def channels_t1_controllers() -> str:
    """docs/channels.md: the g-with-bias t1 reruns with three step-size controllers."""
    recs = [(label, _load(name)) for label, name in T1_CONTROLLERS]
    lines = [
        "; ".join(f"{label}: `{rec['command']}` (commit {_commit(rec)})" for label, rec in recs) + ".",
        "",
        "| r | seed | " + " | ".join(f"{label}: steps, t reached, wall" for label, _ in recs) + " |",
        "|---|---|" + "---|" * len(recs),
    ]
    runs = [rec["runs"] for _, rec in recs]
    for row in zip(*runs, strict=True):
        assert len({(x["r"], x["seed"]) for x in row}) == 1, "the files rerun other end states"
        cells = [f"{x['rerun']['flow_steps']}, {x['rerun']['t_flow']:.2g}, {x['rerun']['seconds']:.0f} s" for x in row]
        lines.append(f"| {row[0]['r']} | {row[0]['seed']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Summed over the runs: "
        + "; ".join(
            f"{label}: {sum(x['rerun']['flow_steps'] for x in rs)} steps, {sum(x['rerun']['seconds'] for x in rs):.0f} s, "
            f"{sum(x['rerun']['t_flow'] >= 1e299 for x in rs)} of {len(rs)} reached 1e300"
            for (label, _), rs in zip(recs, runs, strict=True)
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def channels_groups() -> str:
    """docs/channels.md: groups of 3+ merging neurons in the loss-levels studies' end points."""
    rec = _load("channels_groups.json")
    tol = rec["glu_tol"]
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}), over the end points with r >= 3 of "
        + ", ".join(f"`{n}` ({rec['scanned'][n]})" for n in rec["studies"])
        + ":",
        "",
        "| activation | bias | r | groups (runs) | sizes | merged (spread < norm of w / 10) "
        f"| group fits its limit (< {100 * tol:g}%) | median group error | median spread / norm of w "
        "| pair-confirmed runs among them |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rec["summary"]:
        lines.append(
            f"| {c['activation']} | {'yes' if c['bias'] else 'no'} | {c['r']} | {c['groups']} ({c['runs_with_group']}) "
            f"| {', '.join(map(str, c['sizes']))} | {c['merged']} | {c['group_fits']} | {c['median_group_error']:.2g} "
            f"| {c['median_relative_spread']:.2g} | {c['pair_confirmed']} |"
        )
    rows = rec["groups"]
    both = sum(x["relative_spread"] < 0.1 and x["group_error"] < tol for x in rows)
    merged = sum(x["relative_spread"] < 0.1 for x in rows)
    fits = sum(x["group_error"] < tol for x in rows)
    lines += [
        "",
        f"Of the {len(rows)} groups, {merged} are merged (spread under a tenth of the norm of `w`) and {fits} fit their "
        f"limit to {100 * tol:g}%; {both} are both. The studies without groups in the table found none "
        f"({rec['seconds']:.0f} s).",
    ]
    return "\n".join(lines) + "\n"


def channels_hover() -> str:
    """docs/channels.md: the penalized flow phase's hover past maxnorm, its cost and what it moves."""
    rec = _load("channels_hover.json")
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}); the default flow phase (penalty, {rec['solver']}), warm calls:",
        "",
        "| r | seed | passage: steps, flow time | hover_steps = 100: steps, flow time, result, weightnorm at the end "
        "| warm wall: passage / with the hover | the hover alone: steps taken (of at most), rejected, flow time "
        "| loss moved (relative) | closest pair moved (relative) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rec["runs"]:
        p0 = row["flow_phase"][0]
        ph = next((f for f in row["flow_phase"] if f["hover_steps"] == 100), row["flow_phase"][-1])
        pr = row.get("hover_probe")
        probe = (
            f"{pr['accepted'] + pr['rejected']} ({pr['steps']}), {pr['rejected']}, {pr['t_start']:.3g} to {pr['t_end']:.3g} "
            f"| {pr['loss_change_relative']:.0e} | {pr['min_cos_change_relative']:.0e}"
            if pr
            else "- | - | -"
        )
        lines.append(
            f"| {row['r']} | {row['seed']} | {p0['steps']}, {p0['t_flow']:.3g} "
            f"| {ph['steps']}, {ph['t_flow']:.3g}, `{ph['result']}`, {ph['weightnorm']:.6g} "
            f"| {p0['wall']:.1f} / {ph['wall']:.1f} s | {probe} |"
        )
    steps = [
        (r["hover_probe"]["t_end"] - r["hover_probe"]["t_start"]) / r["hover_probe"]["accepted"]
        for r in rec["runs"]
        if r.get("hover_probe")
    ]
    first = next(r for r in rec["runs"] if r.get("stage_newton"))
    seqs = "; ".join(
        f"h = {st['h']:.0e}: " + ", ".join(f"{it['step']:.1e}" for it in st["iterations"][:6])
        for st in first["stage_newton"]
    )
    lines += [
        "",
        f"The hover's accepted steps average {min(steps):.1e} to {max(steps):.1e} in flow time. One implicit "
        f"stage where the hover of r = {first['r']}, seed {first['seed']} stands (its end after "
        f"{first['stage_start']['hover_steps']} hover steps, `weightnorm` {first['stage_start']['weightnorm']:.6g}, "
        f"{'below' if first['stage_start']['weightnorm'] < rec['maxnorm'] else 'above'} `maxnorm`; Newton from "
        f"`z = 0`, gamma = {rec['stage_gamma']}), the Newton step per iteration: "
        f"{seqs}, ...",
    ]
    return "\n".join(lines) + "\n"


def channels_breakdown() -> str:
    """docs/channels.md: one run's wall time split into arithmetic, linear algebra, compile
    and the rest, per flow solver side by side."""
    rec = _load("channels_breakdown.json")
    lines = [
        f"`{rec['command']}` (commit {_commit(rec)}); the flow phase as the studies run it "
        f'(`flow_stop="{rec["flow_options"]["flow_stop"]}"`, loop engine) with each flow solver '
        "(`:pid`: `recovery=None`), then the Newton phase from its end:",
        "",
        "| r | seed | flow solver | flow: steps, result | Newton: iterations, result "
        "| Jacobians (flow), per step | bare ms: gradient / Hessian / both in one trace | flow warm s "
        "| gradients + Hessians, bare, share of it | LU solves, share | first call: flow + Newton "
        "| warm: flow + Newton | compile share of the first call |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rec["runs"]:
        f, n, b, run = row["flow"], row["newton"], row["bare_seconds"], row["run"]
        fr = f["fraction_of_warm"]
        lines.append(
            f"| {row['r']} | {row['seed']} | `{row['solver']}` | {row['flow_steps']}, `{row['flow_result']}` "
            f"| {row['newton_steps']}, `{row['newton_result']}` | {f['counts']['hessian']}, "
            f"{f['stage_iterations_per_step']:.1f} "
            f"| {1e3 * b['gradient']:.2f} / {1e3 * b['hessian']:.2f} / {1e3 * b['gradient_and_jacobian']:.2f} "
            f"| {f['warm']:.2f} | {_pct(fr['gradients'] + fr['hessians'])}% | {_pct(fr['linear_algebra'])}% "
            f"| {f['first_call']:.1f} + {n['first_call']:.1f} s | {f['warm']:.2f} + {n['warm']:.2f} s "
            f"| {_pct(run['compile_fraction_of_first_call'])}% |"
        )
    first = rec["flow_options"]["solvers"][0]

    def total(solver):
        rows = [row for row in rec["runs"] if row["solver"] == solver]
        return (
            sum(r["flow_steps"] for r in rows),
            sum(r["flow"]["counts"]["hessian"] for r in rows),
            sum(r["flow"]["warm"] for r in rows),
        )

    lines += [
        "",
        "Summed over the runs, flow phase, steps / Jacobians / warm wall: "
        + "; ".join("`{}` {} / {} / {:.1f} s".format(s, *total(s)) for s in rec["flow_options"]["solvers"])
        + ".",
    ]
    rec = dict(rec, runs=[row for row in rec["runs"] if row["solver"] == first])
    # compiling once per study (networks padded to the largest width) against once per width
    by_r = {row["r"]: row for row in rec["runs"]}
    lo, hi = min(by_r), max(by_r)
    compile_s = {r: row["run"]["compile"] for r, row in by_r.items()}
    bare = {r: row["bare_seconds"]["gradient"] + row["bare_seconds"]["hessian"] for r, row in by_r.items()}
    study = _load("channels_loss_levels_newton_g_nobias.json")
    cells = [c for c in study["cell_seconds"] if c["r"] == lo]
    cell_s = sum(c["seconds"] for c in cells)
    lines += [
        "",
        f"Compiling once per study instead of once per width: a run's compile (first call less warm, "
        f"flow + Newton) is {compile_s[lo]:.1f} s at r = {lo} and {compile_s[hi]:.1f} s at r = {hi}, paid once "
        f"per width and process. Padded to r = {hi}, every evaluation at r = {lo} would cost r = {hi}'s: a "
        f"bare gradient plus Hessian is {1e3 * bare[lo]:.2f} ms at r = {lo} and {1e3 * bare[hi]:.2f} ms at "
        f"r = {hi} ({bare[hi] / bare[lo]:.1f}x). The `g`-without-bias study through this pipeline spent "
        f"{cell_s:.0f} s on its {sum(c['n_seeds'] for c in cells)} runs at r = {lo} "
        f"(`channels_loss_levels_newton_g_nobias.json`, compiles included).",
    ]
    return "\n".join(lines) + "\n"


def _budget_curves(rec: dict, per: str) -> str:
    """One sentence: runs passed within step and wall budgets, and the compile times."""
    a = rec["arms"][rec["solvers"][0]]
    by_steps = ", ".join(f"{p['budget']}: {p['passed']}" for p in a["by_steps"] if p["budget"] <= 10**4)
    by_wall = ", ".join(f"{p['budget']} s: {p['passed']}" for p in a["by_wall"])
    comp = [f["compile_estimate"] for f in rec["first_calls"]]
    once = f"{min(comp):.1f}-{max(comp):.1f} s, once per {per}" if len(comp) > 1 else f"{comp[0]:.1f} s, once"
    return (
        f"Runs passed within a budget, of {a['n']}: by solver steps {by_steps}; by wall time {by_wall}. "
        f"The {a['n']} runs took {a['wall_sum']:.0f} s of flow; compilation (first call minus warm) {once}."
    )


def rank_invariance() -> str:
    """docs/topology.md: rank of J_G along gradient flow from generic and singular inits."""
    rec = _load("rank_invariance.json")
    st = rec["settings"]
    rows = [
        "| solver | rtol = atol | step budget | generic flows | solver success (`t1` reached) | all 9 saved states finite "
        "| full rank at every reached time | rank end = start / differs | min `s_min(J_G)` "
        "| min `s_min` / node norm | wall (with compiling) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["runs"]:
        rows.append(
            f"| {r['solver']} | {r['rtol']:g} | {r['max_steps']} | {r['n_generic']} | "
            f"{r['fraction_solver_success']:.1%} | {r['fraction_all_saved_times_reached']:.1%} | "
            f"{r['rank_full_at_every_reached_time']} / {r['n_generic']} | "
            f"{r['rank_end_equal_start']} / {r['rank_end_not_equal_start']} | {r['min_s_min']:.3g} | "
            f"{r['min_s_min_over_node_norm']:.3g} | {r['wall_flow_s']:.0f} s |"
        )
    H = st["n_hidden"]
    groups = " and ".join(f"`{{{', '.join(x['group'])}}}`" for x in rec["runs"][0]["singular_inits"])
    bad = [
        f"{r['solver']} rtol {r['rtol']:g}: {x['group']} rank {x['rank_min']}-{x['rank_max']}, boundary "
        f"exactly 0 {x['boundary_exactly_zero']}"
        for r in rec["runs"]
        for x in r["singular_inits"]
        if not (
            x["rank_min"] == x["rank_max"] == x["graph_rank_start"] == x["graph_rank_end"] == H - 1
            and x["boundary_exactly_zero"]
        )
    ]
    sing = (
        f"The two singular inits ({groups} cut off) keep rank {H - 1} = `H - 1` (SVD at every reached "
        f"time, graph method at the first and last) with their boundary edges exactly 0, in every row"
        if not bad
        else "The singular inits did NOT all keep rank `H - 1`: " + "; ".join(bad)
    )
    load = rec["runs"][0]["load_average_before"][0]
    note = f" {rec['note']}." if rec.get("note") else ""
    end = rec["provenance"]["load_average"][0]
    return (
        f"Measured (`{rec['command']}`, commit {_commit(rec)}, load average {load:.1f} at the start and "
        f"{end:.1f} at the end on 2 cores; "
        f"`benchmarks/results/rank_invariance.json`, with every flow's ranks, success and `s_min`): "
        f"`{st['graph_call']}`, `t1 = {st['t1']:g}`, {st['n_save']} saved times, full rank "
        f"= {H} (the number of hidden nodes).{note}\n\n" + "\n".join(rows) + f"\n\n{sing}.\n"
    )


def _dur(sec: float | None) -> str:
    if sec is None:
        return "not run"
    if sec < 1e-3:
        return f"{sec * 1e3:.2f} ms"
    if sec < 1.0:
        return f"{sec * 1e3:.2g} ms" if sec < 0.1 else f"{sec * 1e3:.0f} ms"
    return f"{sec:.1f} s" if sec < 10 else f"{sec:.0f} s"


def topology_scale() -> str:
    """docs/topology.md's Scale section: the topology tools on random DAGs of 10 to 10^3
    hidden nodes, 10^5 verdicts on the demo DAG, issue 30's singular-point case."""
    rec = _load("topology_scale.json")
    st, rows = rec["settings"], rec["graphs"]
    load = rec["provenance"]["load_average"][0]
    out = [
        f"Measured (`{rec['command']}`, commit {_commit(rec)}; median of {st['repeats']} warm calls "
        f"on a shared 2-core CPU, load average {load:.1f} when written):",
        "",
        "| hidden nodes | edges | bottlenecks | `connectivity` (no LP) | with the LP | `component_of` "
        '| `singular_subnetworks` | `jacobian_rank` (SVD) | `jacobian_rank(method="graph")` |',
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['n_hidden']} | {r['n_edges']} | {r['n_out_bottlenecks'] + r['n_in_bottlenecks']} | "
            f"{_dur(r['connectivity_s'])} | {_dur(r.get('connectivity_lp_s'))} | {_dur(r['component_of_s'])} | "
            f"{_dur(r['singular_subnetworks_s'])} | {_dur(r.get('jacobian_rank_s'))} | "
            f"{_dur(r['jacobian_rank_graph_s'])} |"
        )
    big = rows[-1]
    svd_rows = [r for r in rows if "rank_svd" in r]
    zeroed = [r for r in rows if "zeroed_rank_svd" in r]
    agree = sum(r["rank_svd_equals_graph"] and r["rank_identity_holds"] for r in svd_rows)
    zagree = sum(r["zeroed_rank_svd_equals_graph"] for r in zeroed)
    b = rec["batched"]
    i30 = rec["issue30_singular"]
    secs = [x["seconds"] for x in i30]
    out += [
        "",
        f"- At {big['n_hidden']} hidden nodes and {big['n_edges']} edges: `connectivity` "
        f"{_dur(big['connectivity_s'])} (first call on the graph {_dur(big['connectivity_first_s'])}, "
        f"which includes the cached searches), `jacobian_rank` by the SVD "
        f'{_dur(big.get("jacobian_rank_s"))}, by `method="graph"` {_dur(big["jacobian_rank_graph_s"])}.',
        f"- Rank checks: on {agree} of {len(svd_rows)} graphs the SVD rank, the graph rank and "
        f"`H - len(singular_subnetworks(net))` are equal. With every edge of 5% of the hidden nodes and a "
        f"third of the other edges set to 0 (cut-off groups: "
        f"{', '.join(str(r['zeroed_n_groups']) for r in rows)}), the graph rank equals `H - groups` on "
        f"{sum(r['zeroed_rank_graph_identity_holds'] for r in rows)} of {len(rows)} graphs and the SVD's "
        f"on {zagree} of {len(zeroed)} (the SVD run up to 300 hidden nodes); it takes "
        f"{_dur(big['zeroed_jacobian_rank_graph_s'])} at {big['n_hidden']}.",
        f"- {b['n']} verdicts on the demo DAG: `component_of` on all of them in {_dur(b['component_of_s'])} "
        f"({b['per_verdict_us']:.1f} us per verdict; `frozen_mask` alone {_dur(b['frozen_mask_s'])}), "
        f"{b['n_labels']} distinct labels. {b['lp_sample']} rows drawn at random and re-decided one at a "
        f'time by `connectivity(..., lp="all")` agree, {b["lp_agree"]} of {b["lp_sample"]}.',
        f"- Issue 30's case (`random_dag(3, 30, 1, 0.2)`, graph seeds 0-{len(i30) - 1}): `singular_point` "
        f"decides it in {min(secs):.2f}-{max(secs):.2f} s; verdicts "
        + ", ".join(f"seed {x['graph_seed']} {x['verdict']}" for x in i30)
        + ".",
        "- `singular_point` per graph (subset sums up to 40 nodes per hidden component, else the "
        "MILP): "
        + ", ".join(
            f"{r['n_hidden']}: {r.get('singular_point', 'not run')}"
            + (f" ({r['singular_point_s']:.1f} s)" if "singular_point_s" in r else "")
            for r in rows
        )
        + f" (MILP time limit {st['singular_time_limit']:g} s).",
    ]
    return "\n".join(out) + "\n"


LOSS_LEVEL_STUDIES = [  # (group, file): the loss-levels study at the paper's settings, 100 seeds per cell
    ("g, no bias", "channels_loss_levels_paper_g_nobias.json"),
    ("g, bias", "channels_loss_levels_paper_g_bias_cpu_seeds100.json"),
    ("softplus, no bias", "channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json"),
    ("softplus, bias", "channels_loss_levels_paper_softplus_bias_cpu_seeds100.json"),
]


def _pct(x: float) -> str:
    """A percentage to two significant figures, as the channel tables print them."""
    x = 100 * x
    if x == 0:
        return "0"
    return f"{x:.0f}" if x >= 9.95 else f"{x:.1f}"


def _pct_ci(frac: float, ci) -> str:
    return f"{_pct(frac)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _stopped(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def channels_loss_levels() -> str:
    """docs/channels.md: the loss-levels study at the paper's settings, every cell of the four
    merged files: infinite runs and what they are."""
    rows = [
        "| activation | bias | r | runs | % infinite [Wilson 95%] | confirmed channel | sharpened neuron "
        "| other infinite | % duplicates [95%] | loss levels |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, name in LOSS_LEVEL_STUDIES:
        for c in _load(name)["summary"]:
            sharp = c.get("sharpened")
            other = "-" if sharp is None else str(c["infinite"] - c["confirmed"] - sharp)
            rows.append(
                f"| {c['activation']} | {'yes' if c['bias'] else 'no'} | {c['r']} | {c['n']} | "
                f"{_pct_ci(c['infinite_fraction'], c['infinite_ci'])} | {c['confirmed']} | "
                f"{'-' if sharp is None else sharp} | {other} | "
                f"{_pct_ci(c['duplicate_fraction'], c['duplicate_ci'])} | {c['n_levels']} |"
            )
    recs = [_load(name) for _, name in LOSS_LEVEL_STUDIES]
    n = sum(c["n"] for r in recs for c in r["summary"])
    return (
        "\n".join(rows)
        + f"\n\n{n} runs (`benchmarks/results/"
        + "`, `benchmarks/results/".join(name for _, name in LOSS_LEVEL_STUDIES)
        + "`). Wall time with compiling: "
        + "; ".join(f"{g} {r['total_seconds']:.0f} s" for (g, _), r in zip(LOSS_LEVEL_STUDIES, recs))
        + " (summed over the parts of a merged file).\n"
    )


NO_VERDICT = ("max_steps", "max_time", "nonfinite")  # Newton-phase stops that decide nothing


def _undecided(rec: dict, **cell) -> int:
    """Runs of a cell (records matching `cell`) that are not infinite and whose Newton phase
    stopped at a budget or a non-finite state: no verdict (as `ConvergenceStudy.summary`)."""
    r = rec["records"]
    return sum(
        1
        for i, stop in enumerate(r["stopped_by"])
        if stop in NO_VERDICT and not r["infinite"][i] and all(r[k][i] == v for k, v in cell.items())
    )


def channels_loss_levels_details() -> str:
    """docs/channels.md: per cell of the loss-levels study, how runs stopped and the authors'
    post-processing (the `g`-without-bias file predates the jump-filter records)."""
    rows = [
        "| activation | bias | r | paper criterion | unique (Hungarian) | kept by jump filter "
        "| authors' Fig. 4 channel | undecided (budget, not infinite) | stopped by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, name in LOSS_LEVEL_STUDIES:
        rec = _load(name)
        for c in rec["summary"]:
            get = lambda k: str(c[k]) if k in c else "-"  # noqa: E731
            und = _undecided(rec, activation=c["activation"], bias=c["bias"], r=c["r"])
            rows.append(
                f"| {c['activation']} | {'yes' if c['bias'] else 'no'} | {c['r']} | {c['channel_paper']} | "
                f"{get('n_unique')} | {get('kept')} | {get('authors_channel')} | {und} | {_stopped(c['stopped_by'])} |"
            )
    return "\n".join(rows) + "\n"


def channels_roughness() -> str:
    """docs/channels.md: the roughness study at 10^4 samples, 100 runs per scaling."""
    rec = _load("channels_roughness_paper_cpu_runs100.json")
    spread = rec["teacher_spread"]
    rows = [
        "| scaling s | infinite [Wilson 95%] | paper's channel criterion [Wilson 95%] | teacher bootstrap 95% "
        "| undecided (budget, not infinite) | confirmed channels | sharpened neuron | stopped by |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ss = sorted(rec["summary"], key=lambda c: float(c["label"].removeprefix("s=")))
    for i, c in enumerate(ss):
        s = c["label"].removeprefix("s=")
        tag = " (smoothest)" if i == 0 else " (roughest)" if i == len(ss) - 1 else ""
        lo, hi = spread[c["label"]]["channel_paper_ci_teacher_bootstrap"]
        rows.append(
            f"| {s}{tag} | {100 * c['infinite_fraction']:.0f}% [{100 * c['infinite_ci'][0]:.1f}, "
            f"{100 * c['infinite_ci'][1]:.1f}] | {100 * c['channel_paper_fraction']:.0f}% "
            f"[{100 * c['channel_paper_ci'][0]:.1f}, {100 * c['channel_paper_ci'][1]:.1f}] | "
            f"[{100 * lo:.0f}, {100 * hi:.0f}] | {_undecided(rec, label=c['label'])} | {c['confirmed']} | "
            f"{c['sharpened']} | {_stopped(c['stopped_by'])} |"
        )
    per = "; ".join(
        f"s = {c['label'].removeprefix('s=')}: {','.join(map(str, spread[c['label']]['channel_paper_per_teacher']))}"
        for c in ss
    )
    per_teacher = {c["n"] // spread[c["label"]]["teachers"] for c in ss}
    dup = sum(c["duplicate"] for c in ss)
    n = sum(c["n"] for c in ss)
    return (
        "\n".join(rows) + f"\n\nPaper's-criterion channels per teacher ({'/'.join(map(str, sorted(per_teacher)))} "
        f"runs each): {per}. Duplicate neurons: {dup} in {n} runs. Wall time with compiling, summed over "
        f"the parts: {rec['total_seconds']:.0f} s (`benchmarks/results/channels_roughness_paper_cpu_runs100.json`).\n"
    )


def sweep_batch_sizes() -> str:
    """docs/sweep.md: one engine called with one batch size after another."""
    rec = _load("sweep_batch_sizes.json")
    by = {a: [r for r in rec["rows"] if r["arm"] == a] for a in ("kink", "plain")}
    (b, a) = rec["loadavg_before_after"]
    k0, p0 = by["kink"][0], by["plain"][0]
    later = lambda arm: ", ".join(f"{r['wall_seconds']:.2f}" for r in by[arm][1:])  # noqa: E731
    comp = sum(r["compilations"] for arm in by for r in by[arm][1:])
    return (
        f"Measured (`benchmarks/results/sweep_batch_sizes.json`; heavy workload, 5-20-1, Tsit5 at "
        f"1e-8, {rec['settings']['slots']} slots, exact mode; the shared 2-core machine at a load average of "
        f"{b[0]:.1f} before and {a[0]:.1f} after"
        f"{', so the seconds are inflated' if _loaded(max(b[0], a[0]), rec['provenance'].get('cpu_count', 2)) else ''}): "
        f"the first call (n = {k0['n']}) "
        f"compiled {k0['compilations']} programs for the kink-aware engine (ReLU; {k0['compile_seconds']:.1f} s "
        f"of compiling, {k0['wall_seconds']:.1f} s wall) and {p0['compilations']} for the plain one (softplus; "
        f"{p0['compile_seconds']:.1f} s, {p0['wall_seconds']:.1f} s wall). The {len(by['kink']) - 1} calls after it "
        f"(n = {', '.join(str(r['n']) for r in by['kink'][1:])}) compiled "
        f"{'nothing' if comp == 0 else f'{comp} programs'}: kink-aware {later('kink')} s wall; plain "
        f"{later('plain')} s.\n"
    )


def sweep_recompile() -> str:
    """docs/sweep.md: a second data set through a fresh engine vs the reused one."""
    rec = _load("sweep_recompile.json")
    st = rec["settings"]
    fresh = [r for r in rec["rows"] if r["engine"].startswith("fresh") and r["call"] > 1][0]
    reused = [r for r in rec["rows"] if r["engine"] == "reused"][0]
    return (
        f"Measured on the shared 2-core machine (`benchmarks/sweep_recompile.py`, "
        f"`benchmarks/results/sweep_recompile.json`; Kvaerno5, {st['inits']} softplus "
        f"`mlp([2, {st['r']}, 1])` inits on a {st['samples']}-sample GP teacher, {st['steps']} steps each): "
        f"a new teacher with a fresh engine (what every call did before) took {fresh['compilations']} "
        f"compilations, {fresh['compile_seconds']:.1f} s of compiling and {fresh['wall_seconds']:.1f} s of wall "
        f"time; with the engine reused, {reused['compilations']} compilations and {reused['wall_seconds']:.1f} s:\n"
    )


def _compile_ab(files: tuple[tuple[str, str], ...]) -> str:
    """A table of `kink_compile.py --before` runs (one file per workload): median compile
    and run times of the code before and after, side by side."""
    med = statistics.median
    lines = [
        "| workload | solver | compile before (s) | compile after (s) | CPU before (s) | CPU after (s) "
        "| run before (ms) | run after (ms) | events |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cmds, loads, rounds = [], [], set()
    for name, workload in files:
        rec = _load(name)
        cmds.append(f"`{rec['command']}` at {rec['provenance']['commit'][:7]}")
        loads += [r["load_average_before"][0] for r in rec["rows"]]
        rounds.add(rec["settings"]["rounds"])
        for solver in rec["settings"]["solvers"]:
            b, a = (
                [r for r in rec["rows"] if r["code"] == code and r["solver"] == solver] for code in ("before", "after")
            )

            def m(rows, key, scale=1.0):
                return med(r[key] for r in rows) * scale

            events = sorted({r["events"] for r in b + a})
            lines.append(
                f"| {workload} | {solver} | {m(b, 'compile_s'):.1f} | {m(a, 'compile_s'):.1f} "
                f"| {m(b, 'compile_cpu_s'):.1f} | {m(a, 'compile_cpu_s'):.1f} "
                f"| {m(b, 'run_median_s', 1e3):.1f} | {m(a, 'run_median_s', 1e3):.1f} "
                f"| {', '.join(map(str, events))} |"
            )
    paths = ", ".join(f"`benchmarks/results/{name}`" for name, _ in files)
    return (
        f"Medians of {'/'.join(map(str, sorted(rounds)))} alternating rounds, each measurement in a fresh "
        f"process without the compilation cache; compile = trace + lower + XLA, wall and process CPU time; "
        f"load average {min(loads):.1f} to {max(loads):.1f} before each ({'; '.join(cmds)}; {paths}):\n\n"
        + "\n".join(lines)
        + "\n"
    )


def kink_compile_newton() -> str:
    """docs/sweep.md: one `kink_aware_flow`'s compile, the code before and after the Newton
    matrix, stage-loop and clip-floor changes, side by side on three workloads."""
    return _compile_ab(
        (
            ("kink_compile_newton.json", "5-20-1 MLP"),
            ("kink_compile_newton_example.json", "demo DAG"),
            ("kink_compile_newton_sliding.json", "sliding case"),
        )
    )


def kink_compile_restart() -> str:
    """docs/sweep.md: the same, before and after the event restart moved into the loop."""
    return _compile_ab(
        (
            ("kink_compile_restart_mlp.json", "5-20-1 MLP"),
            ("kink_compile_restart_example.json", "demo DAG"),
            ("kink_compile_restart_sliding.json", "sliding case"),
        )
    )


def kink_compile_field_once() -> str:
    """docs/sweep.md: the same, before and after the Gauss step evaluated its field in one
    place (the field at the step's start and end joined the stage loop)."""
    return _compile_ab(
        (
            ("kink_compile_field_once_mlp.json", "5-20-1 MLP"),
            ("kink_compile_field_once_example.json", "demo DAG"),
            ("kink_compile_field_once_sliding.json", "sliding case"),
        )
    )


def kink_compile_program_size() -> str:
    """docs/sweep.md: the same, before and after the smaller program (the weight matrix a
    gather, level inputs slices, the restart's sliding weights from the segment)."""
    return _compile_ab(
        (
            ("kink_compile_program_size_mlp.json", "5-20-1 MLP"),
            ("kink_compile_program_size_example.json", "demo DAG"),
            ("kink_compile_program_size_sliding.json", "sliding case"),
        )
    )


def gauss_sweep_modes() -> str:
    """docs/sweep.md: Gauss4 inside kink-aware sweeps in exact and vmap mode, this code
    and the checkouts it was measured beside (`gauss_sweep_modes.py --before`)."""
    rec = _load("gauss_sweep_modes.json")
    codes = [(rec["provenance"]["commit"][:7], rec["summary"])]
    codes += [(b["commit"][:7], b["summary"]) for b in rec["before"]]
    head = " | ".join(f"{c} first (s) | {c} again (s)" for c, _ in codes)
    lines = [f"| workload | mode | n | {head} | programs | identical |", "|---" * (5 + 2 * len(codes)) + "|"]
    for arm in rec["summary"]:
        workload, mode = arm.split()
        cells = " | ".join(f"{x[arm]['first_s']:.1f} | {x[arm]['again_s']:.1f}" for _, x in codes)
        programs = sorted({f"{x[arm]['first_programs']:g} / {x[arm]['again_programs']:g}" for _, x in codes})
        size = _arm_size(rec, workload)
        lines.append(
            f"| {workload} | {mode} | {size} | {cells} | {', '.join(programs)} "
            f"| {'yes' if rec['identical_results'][arm] else 'no'} |"
        )
    return (
        f"Medians of {rec['rounds']} alternating rounds, each arm in a fresh process without the compilation "
        f"cache; first call (trace, compile, run) and the same call again; programs: compiled by the first "
        f"/ the second call; identical: the final weights bit for bit, every round of every code "
        f"(`{rec['command']}` at {rec['provenance']['commit'][:7]}, `benchmarks/results/gauss_sweep_modes.json`):\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _arm_size(rec: dict, workload: str) -> str:
    """The number of trajectories of a `gauss_sweep_modes.py` workload, from its command
    (the docs quote runs that give both sizes)."""
    flag = f"--{workload}-inits"
    words = rec["command"].split()
    if flag not in words:
        raise ValueError(f"gauss_sweep_modes.json: its command gives no {flag}; rerun it with {flag} N")
    return words[words.index(flag) + 1]


def _rate(x: float) -> str:
    """Trajectories per second: three figures below 10, one decimal to 100, whole above."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _times(x: float) -> str:
    """A speed-up: two decimals below 2, one to 100, whole above."""
    return f"{x:.0f}x" if x >= 100 else f"{x:.1f}x" if x >= 2 else f"{x:.2f}x"


def _bare(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _e(x: float) -> str:
    """1.2e-5, not 1.2e-05."""
    m, e = f"{x:.1e}".split("e")
    return f"{m}e{int(e)}"


def _arm(a: dict) -> str:
    """A sweep_throughput.py arm as the docs name it."""
    if a["arm"].startswith("naive"):
        return "naive `jit(vmap(gradient_flow))`"
    if a["arm"].startswith("kink"):
        return (
            "kink-aware, `diffeqsolve` segments"
            if "diffeqsolve" in a["arm"]
            else f"kink-aware, {'vmap' if a['mode'] == 'vmap' else 'exact'}"
        )
    if a["mode"] == "exact":
        return "engine, exact"
    w = a.get("widths")
    if w is None:  # a row transcribed from a printed table, before the engine narrowed
        return "engine, vmap"
    return "engine, vmap, full width" if len(w) <= 1 else f"engine, vmap (narrows {', '.join(map(str, w))})"


def _load_range(meta: dict) -> str:
    s, e = meta["load_average_start"][0], meta["load_average_end"][0]
    return f"load average {s:.1f} at the start and {e:.1f} at the end"


def _first_round_ratios(rec: dict, text) -> str:
    """`sweep_cores.py`'s ratios of round 0, each as `text(ratio)`, joined by "; "."""
    return "; ".join(text(q) for q in rec["ratio"] if q["round"] == 0)


HOST_WORK = (
    "Host work: the time the engine's device loops spent on the host's work after their first call "
    "(harvests, writing records, refills; summary.json's `engine_host_seconds`), summed over devices and "
    "processes. A device runs its next call meanwhile, except during its harvest and refill."
)


def sweep_cores(name: str = "sweep_cores.json") -> str:
    """docs/sweep.md's devices paragraph: the CLI's demo-DAG sweep on one CPU device and on one per core,
    compiling in the run and (with `--warm`) with a filled compilation cache."""
    rec = _load(name)
    rows = [r for r in rec["rows"] if r["round"] == 0]
    n = rec["settings"]["n_inits"]
    host = all("engine_host_s_per_process" in r for r in rows)  # (files from before 0845c4f: no host column)
    lines = [
        f"`invariant-jax sweep --graph example --n-inits {n:,}` (figures off) at {_commit(rec)}{_on_cpu(rec['provenance'])}, each arm a "
        f"fresh process; `{rec['command']}` (`benchmarks/results/{name}`).",
        "",
        "| compilation cache | processes x devices | wall | engine | trajectories/s | peak RSS | load before |"
        + (" host work |" if host else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if host else ""),
    ]
    for r in rows:
        cache = r.get("compilation_cache", "none")
        if r.get("warm_up_wall_s") is not None:
            cache += f" (warm-up {r['warm_up_wall_s']:.0f} s)"
        lines.append(
            f"| {cache} | {r.get('processes', 1)} x {r['devices']} | {r['wall_s']:.0f} s | {r['engine_s']:.0f} s | "
            f"{r['trajectories_per_s']:,.0f} | {r['peak_rss_mb'] / 1024:.2f} GB | {r['load_average_before'][0]:.1f} |"
            + (f" {sum(r['engine_host_s_per_process']):.1f} s |" if host else "")
        )
    lines.append("")
    if host:
        lines += [HOST_WORK, ""]
    ratios = _first_round_ratios(
        rec,
        lambda q: (
            f"{q.get('processes', 1)} x {q.get('devices', max(rec['settings']['devices']))}, "
            f"{q.get('compilation_cache', 'none')}: {q['wall']:.2f}x ({q['engine']:.2f}x in the engine)"
        ),
    )
    lines.append(
        "Over 1 x 1, trajectories per second: "
        f"{ratios}. Goal: 1.8. With several processes the peak RSS is the largest process's."
    )
    lines += _bare_lines(rec, rows)
    return "\n".join(lines) + "\n"


def sweep_cores_overlap() -> str:
    """docs/sweep.md: engine seconds before and after the device loops handed on their
    harvests while the next call ran (two runs of `sweep_cores.py`, one after the other)."""
    runs = [("before", _load("sweep_cores_overlap_before.json")), ("after", _load("sweep_cores_overlap_after.json"))]
    lines = [
        "| devices | " + " | ".join(f"engine, {label} ({_commit(rec)})" for label, rec in runs) + " | after / before |",
        "|---|---|---|---|",
    ]
    for d in runs[0][1]["settings"]["devices"]:
        e = [next(r["engine_s"] for r in rec["rows"] if r["devices"] == d) for _, rec in runs]
        lines.append(f"| {d} | {e[0]:.1f} s | {e[1]:.1f} s | {e[1] / e[0]:.3f} |")
    ratio = [
        next(r["engine_s"] for r in rec["rows"] if r["devices"] == 1)
        / next(r["engine_s"] for r in rec["rows"] if r["devices"] == 2)
        for _, rec in runs
    ]
    cmds = "; ".join(f"`{rec['command']}` at {_commit(rec)}" for _, rec in runs)
    return "\n".join(lines) + (
        f"\n\nTwo devices over one, in the engine: {ratio[0]:.2f}x before, {ratio[1]:.2f}x after. "
        f"100,000 inits, compilation cache filled by a 40,000-init sweep first, one run each, one after the "
        f"other{_on_cpu(runs[1][1]['provenance'])}: {cmds} (`benchmarks/results/sweep_cores_overlap_before.json`, "
        "`benchmarks/results/sweep_cores_overlap_after.json`).\n"
    )


def _bare_lines(rec: dict, rows: list[dict], bare: bool = True) -> list[str]:
    """The paragraphs on a `sweep_cores.py` file's bare arithmetic (`--bare`, where
    `bare`) and the machine's own core ratio (`--core-ratio`), where it has them."""
    b, m = rec.get("bare") if bare else None, rec.get("machine_core_ratio")
    out = []
    if b:
        arms = "; ".join(
            f"{r.get('processes', 1)} x {r['devices']}: engine {r['engine_over_bare']:.2f}x, wall {r['wall_over_bare']:.2f}x"
            for r in rows
        )
        out += [
            "",
            f"The bare arithmetic (`--bare {b['counted_inits']}`): the first {b['counted_inits']:,} trajectories, "
            f"counted in an instrumented one-slot run, make {b['gradients_per_step']:.2f} gradient evaluations "
            f"and {b['conditions_per_step']:.2f} event-condition evaluations per solver step; alone in a compiled "
            f"loop a gradient costs {b['gradient_us']:.2f} us and a condition {b['forward_us']:.2f} us, so "
            f"{b['bare_s_per_step'] * 1e6:.1f} us per step. Each arm's time over its steps' bare cost shared "
            f"among its cores (1: every core doing nothing but this arithmetic): {arms}.",
        ]
    if m:
        out += [
            "",
            f"The machine's own ratio (`--core-ratio {m['seconds_each']:g}`): that gradient loop in "
            f"{m['processes']} processes at once gave {m['ratio']:.2f}x its throughput in one "
            f"({m['gradients_per_s_one']:,.0f} gradients/s alone).",
        ]
    return out


def sweep_first_call() -> str:
    """docs/sweep.md: a cold 64-init CLI sweep on one and two CPU devices, at the
    per-device loops and before them (one `shard_map`, c352292)."""
    return _sweep_first_calls(
        (("sweep_first_call_c352292.json", "one `shard_map`"), ("sweep_first_call.json", "per-device loops"))
    )


def sweep_first_call_program_size() -> str:
    """docs/solvers.md: the same cold sweep with the smaller kink-aware program, and before it."""
    return _sweep_first_calls(
        (
            ("sweep_first_call_program_size_before.json", "before"),
            ("sweep_first_call_program_size.json", "smaller program"),
        )
    )


def _sweep_first_calls(files) -> str:
    """Cold 64-init CLI sweeps (`sweep_cores.py`), one row per file and device count."""
    lines = [
        "| engine | devices | wall (rounds 0, 1) | engine seconds (rounds 0, 1) |",
        "|---|---|---|---|",
    ]
    commands = []
    for name, label in files:
        rec = _load(name)
        for d in sorted({r["devices"] for r in rec["rows"]}):
            rows = sorted((r for r in rec["rows"] if r["devices"] == d), key=lambda r: r["round"])
            wall = ", ".join(f"{r['wall_s']:.1f} s" for r in rows)
            eng = ", ".join(f"{r['engine_s']:.1f} s" for r in rows)
            lines.append(f"| {label} at {_commit(rec)} | {d} | {wall} | {eng} |")
        commands.append(f"`{rec['command']}` (`benchmarks/results/{name}`)")
    # (a file of several device counts alternates them in each round; files ran one after another)
    several = any(len({r["devices"] for r in _load(name)["rows"]}) > 1 for name, _ in files)
    head = (
        f"`invariant-jax sweep --graph example --n-inits 64` (figures off, no compilation cache: the first "
        f"call compiles){_on_cpu(_load(files[-1][0])['provenance'])}, each arm a fresh process, "
        + ("two rounds in alternating order: " if several else "two rounds each, one file after the other: ")
    )
    return head + "; ".join(commands) + ".\n\n" + "\n".join(lines) + "\n"


def sweep_cores_slots() -> str:
    """docs/sweep.md: the 1- and 2-device sweeps at several `--slots`, warm cache."""
    rec = _load("sweep_cores_slots.json")
    rows = [r for r in rec["rows"] if r["round"] == 0]
    n = rec["settings"]["n_inits"]
    slots = sorted({r["slots"] for r in rows})
    devices = sorted({r["devices"] for r in rows})
    head = "| devices | " + " | ".join(f"{s} slots" for s in slots) + " |"
    lines = [
        f"Engine seconds of `invariant-jax sweep --graph example --n-inits {n:,} --slots S` (figures off, "
        f"compilation cache filled by a 64-init sweep first) at {_commit(rec)}{_on_cpu(rec['provenance'])}, "
        f"each arm a fresh process, one run each; `{rec['command']}` (`benchmarks/results/sweep_cores_slots.json`).",
        "",
        head,
        "|---|" + "---|" * len(slots),
    ]
    for d in devices:
        by = {r["slots"]: r for r in rows if r["devices"] == d}
        lines.append(f"| {d} | " + " | ".join(f"{by[s]['engine_s']:.1f} s" for s in slots) + " |")
    lines.append("")
    ratios = _first_round_ratios(
        rec,
        lambda q: (
            f"at {q['slots']} slots"
            f"{'' if q['slots'] != 'best' else ' (' + ' over '.join(map(str, q['slots_of'])) + ')'}: {q['engine']:.2f}x"
        ),
    )
    lines.append(f"2 devices over 1, engine trajectories per second: {ratios}. Goal: 1.8.")
    again = _load("sweep_cores_slots_round2.json")
    runs = "; ".join(
        f"{r['devices']} device{'s' if r['devices'] > 1 else ''} at {r['slots']} slots {r['engine_s']:.1f} s"
        for r in again["rows"]
    )
    lines += [
        "",
        f"The second run ({_commit(again)}; `{again['command']}`, committed as "
        f"`benchmarks/results/sweep_cores_slots_round2.json`): {runs}.",
        "",
        "Other workloads, 2 devices, each row one fresh process:",
        "",
        "| workload | inits | compilation cache | round | slots | wall | engine | steps median, max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    commands = []
    for name in ("small", "mlp", "mlp_t10"):
        other = _load(f"sweep_cores_slots_{name}.json")
        graph = other["settings"].get("graph_args", "--graph example")
        for r in other["rows"]:
            lines.append(
                f"| `{graph}` | {r['n_inits']:,} | {r['compilation_cache']} | {r['round']} | {r['slots']} | "
                f"{r['wall_s']:.1f} s | {r['engine_s']:.1f} s | {r['steps_median']:.0f}, {r['steps_max']} |"
            )
        commands.append(f"`{other['command']}` at {_commit(other)}")
    lines += ["", "Commands: " + "; ".join(commands) + "."]
    return "\n".join(lines) + "\n"


def sweep_million() -> str:
    """docs/sweep.md's million paragraph: the CLI's default sweep at 10^6 inits, one run."""
    rec = _load("sweep_million.json")
    r = rec["rows"][0]
    st = ", ".join(f"{k.removeprefix('status_')} {v:,}" for k, v in sorted(r["statuses"].items()) if v)
    text = (
        f"`invariant-jax sweep --graph example --n-inits {r['n_inits']:,}` (figures off, no compilation cache, "
        f"{r['devices']} CPU devices) at {_commit(rec)}{_on_cpu(rec['provenance'])}: {r['wall_s']:.0f} s wall "
        f"(engine {r['engine_s']:.0f} s, "
        f"{r['trajectories_per_s']:,.0f} trajectories/s), peak RSS {r['peak_rss_mb'] / 1024:.1f} GB; statuses: {st}; "
        f"{r['ambiguous_events']:,} ambiguous events{_flagged(r)}. "
        + (
            f"Host work {sum(r['engine_host_s_per_process']):.0f} s (below). "
            if "engine_host_s_per_process" in r
            else ""
        )
        + f"Load average {r['load_average_before'][0]:.1f} before; "
        f"`{rec['command']}` (`benchmarks/results/sweep_million.json`).\n"
    )
    b = rec.get("bare")
    if b:
        bare = r["bare_s"]
        text += (
            f"\nIts {r['steps_total']:,} solver steps cost {bare:.0f} s of bare arithmetic on one core "
            f"({b['bare_s_per_step'] * 1e6:.1f} us per step: {b['gradients_per_step']:.2f} gradients at "
            f"{b['gradient_us']:.2f} us and {b['conditions_per_step']:.2f} event conditions at "
            f"{b['forward_us']:.2f} us, counted on the first {b['counted_inits']:,} trajectories), "
            f"{bare / r['devices']:.0f} s on {r['devices']} cores: the engine took {r['engine_over_bare']:.2f}x that "
            f"and the whole command {r['wall_over_bare']:.2f}x. Two minutes for the whole command (issue 27's goal) "
            f"is {120 / (bare / r['devices']):.2f}x this arithmetic alone on every core.\n"
        )
    text += "".join(line + "\n" for line in _bare_lines(rec, [], bare=False))
    if "engine_host_s_per_process" in r:
        text += f"\n{HOST_WORK}\n"
    small = _load("sweep_hundred_thousand.json")
    s = small["rows"][0]
    return text + (
        f"\nThe same at {s['n_inits']:,} ({_commit(small)}): {s['wall_s']:.0f} s wall, peak RSS "
        f"{s['peak_rss_mb'] / 1024:.2f} GB; ten times the initializations took "
        f"{r['wall_s'] / s['wall_s']:.1f}x the time and {r['peak_rss_mb'] / s['peak_rss_mb']:.1f}x the memory "
        f"(`{small['command']}`).\n"
    )


SWEEP_MEMORY = (
    ("before", "sweep_memory_1e5_before.json"),
    ("before", "sweep_memory_1e6_before.json"),
    ("after", "sweep_memory_1e5.json"),
    ("after", "sweep_memory_1e6.json"),
)


def sweep_memory() -> str:
    """docs/sweep.md's memory paragraph: the CLI's default sweep at 10^5 and 10^6 inits,
    with the summary that kept the table's columns (before) and the one that streams."""
    lines = [
        "| summary | commit | inits | wall | engine | peak RSS | load before |",
        "|---|---|---|---|---|---|---|",
    ]
    peaks: dict[str, list[float]] = {}
    commands = []
    for arm, name in SWEEP_MEMORY:
        rec = _load(name)
        r = rec["rows"][0]
        peaks.setdefault(arm, []).append(r["peak_rss_mb"])
        lines.append(
            f"| {arm} | {_commit(rec)} | {r['n_inits']:,} | {r['wall_s']:.0f} s | {r['engine_s']:.0f} s | "
            f"{r['peak_rss_mb'] / 1024:.2f} GB | {r['load_average_before'][0]:.1f} |"
        )
        commands.append(f"`{rec['command']}` (`benchmarks/results/{name}`)")
    ratio = "; ".join(f"{arm} {p[1] / p[0]:.2f}x" for arm, p in peaks.items())
    rest = "; ".join(
        f"{arm} {_load(name)['rows'][0]['wall_s'] - _load(name)['rows'][0]['engine_s']:.0f} s"
        for arm, name in SWEEP_MEMORY
        if _load(name)["rows"][0]["n_inits"] == 1_000_000
    )
    rec = _load(SWEEP_MEMORY[-1][1])
    return (
        f"`invariant-jax sweep --graph example --n-inits N` (figures off, no compilation cache, 2 CPU devices)"
        f"{_on_cpu(rec['provenance'])}, one run each.\n\n"
        + "\n".join(lines)
        + f"\n\nPeak RSS at 10^6 over 10^5: {ratio}. Wall time outside the engine at 10^6 (start-up, "
        f"summary, table.csv): {rest}. Commands: " + "; ".join(commands) + ".\n"
    )


def _flagged(row: dict) -> str:
    """`" in k trajectories (inits ...)"`: the successes with ambiguous events of a
    `sweep_cores.py` row, where it recorded them."""
    if row.get("flagged") is None:
        return ""
    listed = [str(f["index"]) for f in row["flagged"]]
    # (files from before `trajectories_flagged`: every trajectory with one ended `ok` when none failed)
    n = row.get("trajectories_flagged", row["trajectories_with_ambiguous_events"] if row["not_ok"] == 0 else None)
    more = (n or len(listed)) - 10
    inits = ", ".join(listed[:10]) + (f" and {more} more, in `summary.json`" if more > 0 else "")
    if n is None:
        return f", {len(row['flagged'])} of them listed as flagged (inits {inits})"
    word = "init" if len(row["flagged"]) == 1 else "inits"
    causes = (
        f"{row['trajectories_flagged_at_a_two_fold']:,} at a two-fold, "
        f"{row['trajectories_flagged_without_consistent_modes']:,} without consistent modes; "
        if row.get("trajectories_flagged_at_a_two_fold") is not None
        else ""
    )
    return f", in {n:,} trajector{'y' if n == 1 else 'ies'} that ended `ok`" + (
        f" ({causes}{word} {inits})" if inits else ""
    )


def coupled_pairs() -> str:
    """docs/solvers.md: the non-ok inits of the million sweep, run again one by one."""
    rec = _load("coupled_pairs.json")
    betas = rec["settings"]["betas"]
    head = "| init | result | events | ambiguous | most sliding | at 1e-10: ok, ambiguous | " + " | ".join(
        f"to smooth, beta = {b:g}" for b in betas
    )
    out = [head + " |", "|" + "---|" * (6 + len(betas))]
    for r in rec["rows"]:
        dist = " | ".join(
            "failed" if r["smooth_distance"][f"{b:g}"] is None else f"{r['smooth_distance'][f'{b:g}']:.1e}"
            for b in betas
        )
        out.append(
            f"| {r['index']} | {r['result']} | {r['events']} | {r['ambiguous']} | {r['max_sliding_pairs']} | "
            f"{'yes' if r['tight']['success'] else 'no'}, {r['tight']['ambiguous']} | {dist} |"
        )
    out.append("")
    out.append(
        f"At {_commit(rec)}: `{rec['command']}` (`benchmarks/results/coupled_pairs.json`). The result, events "
        "and pairs come from the sweep's own options. The distance is `max |theta_beta(t) - theta_kink(t)|` "
        "over the 6 times in [0, 1] that the exact flow at 1e-10 reached (Tsit5 inside), with both flows at "
        "rtol = atol = 1e-10."
    )
    if "initial_pattern" in rec:
        p = rec["initial_pattern"]
        out[-1] += (
            f" Of the sweep's first {p['inits']:,} inits, {p['inits_with_a_wrong_pair']:,} had some pair whose sign "
            f"with every node linear (the initial pattern before 86a1b4e) differs from its own "
            f"({p['wrong_pairs']:,} of {p['pairs']:,} pairs)."
        )
    out[-1] += "\n"
    return "\n".join(out)


def sweep_throughput() -> str:
    """docs/sweep.md: every arm of the CPU throughput benchmark, 64 inits in 64 slots."""
    rec = _load("sweep_throughput.json")
    m = rec["meta"]
    w0 = rec["results"][0]
    g, c = w0["grad_cost_us"], w0["grad_cpu_cost_us"]
    n = w0["n_inits"]
    busy = m["load_average_start"][0] > 2 or m["load_average_end"][0] > 2
    old_segments = any("diffeqsolve" in a["arm"] for w in rec["results"] for a in w["arms"])
    out = [
        f"Measured on the shared 2-core machine (`{rec['command']}`, {_commit_of(rec)}"
        f"{_on_cpu(rec['provenance'])}), {n} inits in {w0['slots']} slots, {m['steps_per_call']} steps per call, "
        f"{_load_range(m)}{' (other jobs ran)' if busy else ''}. Each arm is compiled first (`Engine.warm_up()`: "
        f"every program at every batch width, then two trajectories; `compile s`, the first call), then timed "
        f"{m['repeats']} times; the table gives the faster run (the JSON has all). Wall time on a loaded machine "
        "mostly measures the load, so the table also gives the process's CPU time "
        "against naive vmap (`cpu vs naive`) and against the bare cost measured the same way (`cpu / bare`). "
        f"Gradient cost ({w0['workload']}): {g['1']:.1f} us wall, {c['1']:.1f} us CPU unbatched; "
        f'{g[str(n)]:.1f} us wall, {c[str(n)]:.1f} us CPU per trajectory {n}-wide. "error" is the largest '
        f"`max |theta(t1) - ref|` over the {n} trajectories, against the kink-aware flow at rtol = atol = 1e-12. "
        "`engine, vmap, full width` is vmap mode without narrowing (the engine before it narrowed), side by side.",
        *(
            [
                "The file's `diffeqsolve segments` arm is left out: it ran the lean segments too (`KinkEngine` "
                "built its programs from the integrator it was constructed with until b781332, so the benchmark's "
                "replaced integrator was ignored; its error equals the lean arm's to every digit). That comparison "
                "is below, from its own file."
            ]
            if old_segments
            else []
        ),
        "",
        "| workload | arm | compile s | traj/s | vs naive | cpu vs naive | steps median / max | events "
        "| wall / bare | cpu / bare | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in rec["results"]:
        for a in (a for a in w["arms"] if "diffeqsolve" not in a["arm"]):
            out.append(
                f"| {w['workload']} | {_arm(a)} | {a['compile_s']:.1f} | {_rate(a['traj_per_s'])} | "
                f"{_times(a['vs_naive'])} | {_times(a['cpu_vs_naive'])} | {a['steps_median']:,.0f} / "
                f"{a['steps_max']:,} | {a.get('events_total', '')} | {_bare(a['wall_over_bare'])} | "
                f"{_bare(a['cpu_over_bare'])} | {_e(a['err_vs_ref_max'])} |"
            )
    return "\n".join(out) + "\n"


def sweep_throughput_segments() -> str:
    """docs/sweep.md: the kink-aware engine's lean segments against `diffeqsolve` segments."""
    rec = _load("sweep_throughput_segments.json")
    w0 = rec["results"][0]
    out = [
        f"`{rec['command']}` (`benchmarks/results/sweep_throughput_segments.json`, at {_commit(rec)}"
        f"{_on_cpu(rec['provenance'])}; {w0['n_inits']} inits in {w0['slots']} slots, the faster of "
        f"{rec['meta']['repeats']} timed runs, {_load_range(rec['meta'])}):",
        "",
        "| workload | segments | compile s | traj/s | ms per segment | steps | events | wall / bare | cpu / bare "
        "| error max / median |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in rec["results"]:
        for a in w["arms"]:
            kind = "`diffeqsolve`" if "diffeqsolve" in a["arm"] else "lean (`_segment.py`)"
            out.append(
                f"| {w['workload']} | {kind} | {a['compile_s']:.1f} | {_rate(a['traj_per_s'])} | "
                f"{a['ms_per_segment']:.2f} | {a['steps_total']:,} | {a['events_total']:,} | "
                f"{_bare(a['wall_over_bare'])} | {_bare(a['cpu_over_bare'])} | {_e(a['err_vs_ref_max'])} / "
                f"{_e(a['err_vs_ref_median'])} |"
            )
    return "\n".join(out) + "\n"


def kink_restart_step() -> str:
    """docs/solvers.md: how a segment starts and where it looks for events, three rules at two tolerances."""
    rec = _load("kink_restart_step.json")
    out = [
        f"`{rec['command']}` (`benchmarks/results/kink_restart_step.json`, at {_commit(rec)}"
        f"{_on_cpu(rec['provenance'])}). Per trajectory, the means; gradients and conditions counted on the "
        "inits shown as counted; first call: the engine built, compiled and run on two inits; warm: the whole "
        "batch; events differ: trajectories whose event count is not the reference's; error: "
        "`max |theta(t1) - ref|` against the kink-aware flow at 1e-12 (default rule):",
        "",
        "| workload | tol | rule | steps | rejected | gradients | conditions | bare us | first call s "
        "| warm s | events differ | error median / p90 / max |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "default": "proposed step, checked inside",
        "ends_only": "proposed step, step ends only",
        "reselect": "fresh first step, step ends only",
    }
    for name, w in rec["workloads"].items():
        for r in w["rows"]:
            out.append(
                f"| {name} ({w['n_inits']:,} inits, {r['counted_inits']:,} counted) | {_tol(r['tol'])} | "
                f"{names[r['rule']]} | {r['steps_per_traj']:.2f} | {r['rejected_per_traj']:.2f} | "
                f"{r['gradients_per_traj']:.1f} | {r['conditions_per_traj']:.1f} | {r['bare_us_per_traj']:.0f} | "
                f"{r['first_call_s']:.1f} | {r['warm_s']:.2f} | {r['events_differ']} | {_e(r['err_median'])} / "
                f"{_e(r['err_p90'])} / {_e(r['err_max'])} |"
            )
    return "\n".join(out) + "\n"


def kink_sliding_exits() -> str:
    """docs/solvers.md: sliding weights checked inside each step, against the crossing part only."""
    rec = _load("kink_sliding_exits.json")
    out = [
        f"`{rec['command']}` (`benchmarks/results/kink_sliding_exits.json`, at {_commit(rec)}"
        f"{_on_cpu(rec['provenance'])}). Per trajectory, the means; gradients, conditions and bare cost per "
        "counted trajectory, counted on inits that slide; first call: the engine built, compiled and run on two "
        "inits; warm: the whole batch (exact mode, 64 slots, one device):",
        "",
        "| workload | tol | rule | steps | events | trajectories that slide | counted | gradients | conditions "
        "| bare us | first call s | warm s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {"default": "whole condition inside while sliding", "crossing_only": "crossing part inside only"}
    for name, w in rec["workloads"].items():
        for r in w["rows"]:
            out.append(
                f"| {name} ({w['n_inits']:,} inits) | {_tol(r['tol'])} | {names[r['rule']]} | "
                f"{r['steps_per_traj']:.2f} | {r['events_per_traj']:.3f} | {r['sliding_trajectories']:,} | "
                f"{r['counted_sliding_inits']} | {r['gradients_per_counted_traj']:.1f} | "
                f"{r['conditions_per_counted_traj']:.1f} | {r['bare_us_per_counted_traj']:.0f} | "
                f"{r['first_call_s']:.1f} | {r['warm_s']:.2f} |"
            )
    differ = [(name, d) for name, w in rec["workloads"].items() for d in w["differ"]]
    out += [
        "",
        "Trajectories whose event count differs between the rules, against the reference (the default rule at "
        "rtol = atol = 1e-12); error: `max |theta(t1) - ref|`:",
        "",
        "| workload | tol | init | events: reference / whole / crossing only | sliding time: reference / whole / "
        "crossing only | error: whole / crossing only |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in differ:
        out.append(
            f"| {name} | {_tol(d['tol'])} | {d['index']} | {d['events_reference']} / {d['events_default']} / "
            f"{d['events_crossing_only']} | {d['sliding_time_reference']:.4f} / {d['sliding_time_default']:.4f} / "
            f"{d['sliding_time_crossing_only']:.4f} | {_e(d['error_default'])} / {_e(d['error_crossing_only'])} |"
        )
    if not differ:
        out.append("| (none) | | | | | |")
    comp = _load("kink_compile_sliding_inside.json")
    med = {
        (code, solver): statistics.median(
            r["compile_s"] for r in comp["rows"] if r["code"] == code and r["solver"] == solver
        )
        for code in ("before", "after")
        for solver in comp["settings"]["solvers"]
    }
    out += [
        "",
        f"Compile time of one `kink_aware_flow` on the 5-20-1 MLP (`{comp['command']}`, at {_commit(comp)}; "
        f"`--before`: the code without the check, {comp['settings']['rounds']} rounds alternating, medians): "
        + "; ".join(
            f"{solver.capitalize()} inside {med[('before', solver)]:.1f} s without, {med[('after', solver)]:.1f} s with"
            for solver in comp["settings"]["solvers"]
        )
        + ".",
    ]
    return "\n".join(out) + "\n"


def sweep_neighbors() -> str:
    """docs/sweep.md: what a neighbour on the other core costs one sweep process."""
    rec = _load("sweep_neighbors.json")
    names = {
        "alone": "nothing",
        "bare": "the bare gradient loop",
        "stream": "a 256 MiB memory copy",
        "sweep": "a second sweep",
    }
    out = [
        f"`{rec['command']}` (`benchmarks/results/sweep_neighbors.json`, at {_commit(rec)}"
        f"{_on_cpu(rec['provenance'])}): {rec['workload']}; {rec['settings']['rounds']} rounds, arms alternating; "
        "medians over rounds of the measured sweep's engine seconds and CPU seconds over the same round's "
        "`alone`:",
        "",
        "| on the other core | engine s, per round | engine over alone | CPU over alone |",
        "|---|---|---|---|",
    ]
    for name, label in names.items():
        rows = [r for r in rec["rows"] if r["neighbour"] == name]
        per_round = ", ".join(f"{r['engine_s']:.1f}" for r in rows)
        out.append(
            f"| {label} | {per_round} | "
            f"{rec['summary'][name]['engine_over_alone']:.3f} | {rec['summary'][name]['cpu_over_alone']:.3f} |"
        )
    return "\n".join(out) + "\n"


def sweep_throughput_256() -> str:
    """docs/sweep.md: more inits than slots (256 in 64)."""
    rec = _load("sweep_throughput_256.json")
    w = rec["results"][0]
    eng = w["arms"][0]
    out = [
        f"**More inits than slots** (`{rec['command']}`, `benchmarks/results/sweep_throughput_256.json`, "
        f"{_commit_of(rec)}{_on_cpu(rec['provenance'])}, {w['n_inits']} inits in {w['slots']} slots, "
        f"{rec['meta']['repeats']} timed run per arm, "
        f"{_load_range(rec['meta'])}; exact engine's steps median {eng['steps_median']:,.0f}, max "
        f"{eng['steps_max']:,}):",
        "",
        "| arm | traj/s | vs naive | cpu vs naive | wall / bare | cpu / bare |",
        "|---|---|---|---|---|---|",
    ]
    for a in w["arms"]:
        name = _arm(a) + (f", {w['n_inits']} wide" if a["arm"].startswith("naive") else "")
        out.append(
            f"| {name} | {_rate(a['traj_per_s'])} | {_times(a['vs_naive'])} | {_times(a['cpu_vs_naive'])} | "
            f"{_bare(a['wall_over_bare'])} | {_bare(a['cpu_over_bare'])} |"
        )
    return "\n".join(out) + "\n"


def sweep_throughput_small_n() -> str:
    """docs/sweep.md: fewer trajectories than slots; each engine against naive vmap."""
    rec = _load("sweep_throughput_small_n.json")
    m = rec["meta"]
    ns = sorted({w["n_inits"] for w in rec["results"]})
    out = [
        f"**Fewer trajectories than slots** (`{rec['command']}`, `benchmarks/results/sweep_throughput_small_n.json`, "
        f"{_commit_of(rec)}{_on_cpu(rec['provenance'])}: {', '.join(map(str, ns[:-1]))} and {ns[-1]} inits in "
        f"{rec['results'][0]['slots']} slots, {m['repeats']} repeats, the fastest kept, {_load_range(m)}). "
        "Speed against naive vmap (its wall time in brackets):",
        "",
        "| workload | n | engine, exact | engine, vmap (widths) | naive vmap |",
        "|---|---|---|---|---|",
    ]
    for w in rec["results"]:
        by = {a["arm"]: a for a in w["arms"]}
        naive = [a for a in w["arms"] if a["arm"].startswith("naive")][0]
        v = by["engine-vmap"]
        out.append(
            f"| {w['workload']} | {w['n_inits']} | {by['engine']['vs_naive']:.2f}x | {v['vs_naive']:.2f}x "
            f"({', '.join(map(str, v['widths']))}) | 1 ({_dur(naive['seconds'])}) |"
        )
    return "\n".join(out) + "\n"


def kink_sweep() -> str:
    """docs/sweep.md: the ReLU sweep with the plain engine and the kink-aware one."""
    rec = _load("kink_sweep.json")
    rows = rec["rows"]
    eng, kt, kg = rows
    comp = ", ".join(f"{r['compile_plus_2_s']:.2g} s" for r in rows[:-1]) + f" and {rows[-1]['compile_plus_2_s']:.2g} s"

    def label(r):
        kind = "engine" if r["arm"].startswith("engine") else "kink-aware"
        return kind + ", " + r["arm"].split()[1].capitalize() + " " + r["arm"].split()[2]

    out = [
        f"**Measured** (`benchmarks/kink_sweep.py`, `benchmarks/results/kink_sweep.json`; shared 2-core "
        f"machine, load average {rec['meta']['load_average_end'][0]:.1f} at the end). The workload is the ReLU "
        f"sweep workload: {rec['workload']}, {rec['n_inits']} inits, {rec['slots']} slots. Errors are "
        f"`max |theta(t1) - ref|` against the reference ({rec['reference']}), which `work_precision.py` checks against the "
        f"smooth limit. {rec['trajectories_sliding']} of the {rec['n_inits']} trajectories slide. Seconds exclude "
        f"compiling (the JSON's `compile_plus_2_s`: {comp}).",
        "",
        "| arm | seconds | steps (total / max) | error median / max | drift of c (relative, max) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {label(r)} | {r['seconds']:.3g} | {r['steps_total']:,} / {r['steps_max']:,} | "
            f"{_e(r['err_median'])} / {_e(r['err_max'])} | {_e(r['drift_rel_max'])} |"
        )
    out += [
        "",
        f"With Tsit5 inside, the kink-aware sweep was {eng['seconds'] / kt['seconds']:.0f}x faster than the "
        f"plain engine and {eng['err_median'] / kt['err_median']:.0f}x (median) to "
        f"{eng['err_max'] / kt['err_max']:.0f}x (max) more accurate at the same tolerance. The plain engine's "
        f"worst error on trajectories *without* sliding was {_e(eng['err_max_not_sliding'])}: the kinks cost "
        "Tsit5 its order too. Gauss4 inside keeps `c` to round-off, at the price of a Jacobian and an LU per "
        f"step ({1e3 * kg['seconds'] / kg['steps_total']:.0f} ms per step in this run"
        f"{', on the loaded machine' if _loaded(rec['meta']['load_average_end'][0], rec['meta']['cpu_count']) else ''}).",
    ]
    if "err_max_init" in kt:
        out[-1] += (
            f" The largest error with Tsit5 inside is init {kt['err_max_init']}'s, with Gauss4 inside init "
            f"{kg['err_max_init']}'s."
        )
    return "\n".join(out) + "\n"


def sweep_throughput_gpu() -> str:
    """docs/sweep.md: the heavy workload on one GPU, 4096 slots, vmap mode."""
    rec = _load("sweep_throughput_gpu.json")
    w = rec["results"][0]
    rows = sorted(rec["engine_naive_printed"], key=lambda a: not a["arm"].startswith("naive"))
    out = ["| arm | compile s | traj/s | steps median / max | wall / bare |", "|---|---|---|---|---|"]
    for a in rows:
        out.append(
            f"| {_arm(a)} | {a['compile_s']:.1f} | {a['traj_per_s']:.1f} | {a['steps_median']:,.0f} / "
            f"{a['steps_max']:,} | {_bare(a['wall_over_bare'])} |"
        )
    for a in w["arms"]:
        out.append(
            f"| kink-aware (Tsit5 inside), vmap | {a['compile_s']:.1f} | {a['traj_per_s']:.1f} | "
            f"{a['steps_median']:,.0f} / {a['steps_max']:,} ({a['events_total']:,} events) | "
            f"{a['wall_over_bare']:.0f} |"
        )
    return "\n".join(out) + "\n"


def _ms(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _s(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def converge_cost() -> str:
    """docs/channels.md: the flow and Newton phases before and after the structured Hessian."""
    rec = _load("converge_cost_cpu.json")
    rows, st = rec["rows"], rec["settings"]
    col = lambda f: " | ".join(f(r) for r in rows)  # noqa: E731

    def flow(r):
        before, after = r["flow"]["before"]["ms_per_step"], r["flow"]["after"]["ms_per_step"]
        return f"{_ms(before)} -> {_ms(after)} ms (x{before / after:.1f})"

    nt = lambda r, k: f"{_s(r['newton'][k]['seconds'])} s"  # noqa: E731

    def comp(r):
        f = [r["flow"][k]["compile_s"] for k in ("before", "after")]
        n = [v["compile_s"] for v in r["newton"].values()]
        return f"{_span(f, '{:.1f}'.format, '-')} s / {_span(n, '{:.1f}'.format, '-')} s"

    out = [
        "| | " + col(lambda r: f"r = {r['r']} (E = {r['E']})") + " |",
        "|---|" + "---|" * len(rows),
        "| gradient (`jax.grad`) | " + col(lambda r: f"{_ms(r['bare_ms']['grad_autodiff'])} ms") + " |",
        "| Hessian: `jax.hessian` -> structured | "
        + col(lambda r: f"{_ms(r['bare_ms']['hessian_autodiff'])} -> {_ms(r['bare_ms']['hessian_structured'])} ms")
        + " |",
        "| flow phase, one Kvaerno5 step (one Jacobian, about 15 gradients) | " + col(flow) + " |",
        f"| Newton, {st['seeds']} runs x up to {st['newton_steps']} steps: one vmapped batch + `jax.hessian` | "
        + col(lambda r: nt(r, "before"))
        + " |",
        "| same, one vmapped batch + structured Hessian | " + col(lambda r: nt(r, "vmap_structured")) + " |",
        "| same, one run at a time + structured Hessian (the CPU default now) | "
        + col(
            lambda r: nt(r, "after") + f" (x{r['newton']['before']['seconds'] / r['newton']['after']['seconds']:.0f})"
        )
        + " |",
        "| compile (flow / Newton), once per cell | " + col(comp) + " |",
    ]
    return "\n".join(out) + "\n"


def channels_optimizers() -> str:
    """docs/channels.md: SGD and Adam from the loss-levels study's inits (softplus, no bias, r = 4)."""
    out = [
        "| optimiser | lr | batch | infinite | merging pair, opposite diverging output weights [95%] "
        "| median weightnorm (max) | median MSE | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    made = []
    for opt in ("sgd", "adam"):
        rec = _load(f"channels_optimizers_softplus_nobias_r4_{opt}.json")
        made.append(f"{'SGD' if opt == 'sgd' else 'Adam'} ({_commit_of(rec)})")
        for r in rec["rows"]:
            lo, hi = r["channel_like_ci"]
            e = math.log10(r["lr"])
            lr = f"1e{round(e)}" if abs(e - round(e)) < 1e-9 and r["lr"] < 0.05 else f"{r['lr']:g}"
            out.append(
                f"| {'SGD' if opt == 'sgd' else 'Adam'} | {lr} | {r['batch_size'] or 'full'} | "
                f"{r['infinite']}/{r['n']} | {r['channel_like']} [{100 * lo:.0f}, {100 * hi:.0f}]% | "
                f"{r['median_weightnorm']:.2f} ({r['max_weightnorm']:.1f}) | {r['median_mse']:.3f} | "
                f"{r['seconds']:.0f} |"
            )
    return (
        "\n".join(out) + "\n\nThe two runs (the `s` column compares rows of one run only): " + ", ".join(made) + ".\n"
    )


def channels_eos() -> str:
    """docs/channels.md: full-batch GD in the channel at four learning rates (edge of stability)."""
    rec = _load("channels_eos.json")
    out = [
        "| lr | 2/lr | sharpness start -> max | late median / (2/lr) | eps start -> end "
        "| loss decrease per update before the edge |",
        "|---|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        f = r["loss_decrease_per_update_vs_eps_before_edge"]
        fit = (
            f"~ eps^{f['exponent']:.2f} ({f['n']} points: no meaningful error bar)"
            if f["n"] <= 3
            else f"~ eps^{f['exponent']:.3f} +- {f['stderr']:.3f}"
        )
        tl = r["two_over_lr"]
        out.append(f"| {r['lr']:g} | {tl:.2f}" if tl < 10 else f"| {r['lr']:g} | {tl:.1f}")
        out[-1] += (
            f" | {r['sharpness_start']:.2f} -> {r['sharpness_max']:.2f} | {r['late_ratio_to_2_over_lr']:.3f}"
            f"{'' if r['reached_edge'] else ' (never reaches the edge)'} | {r['eps_start']:.3f} -> "
            f"{r['eps_end']:.3f} | {fit} |"
        )
    fi = rec["fits"]
    g, sb, se = (
        fi["grad_norm_vs_eps"],
        fi["sharpness_vs_inv_eps_before_edge"],
        fi["sharpness_vs_inv_eps_at_edge_across_lrs"],
    )
    out += [
        "",
        f"Fits over all learning rates before the edge: gradient norm `~ eps^{g['exponent']:.3f} +- {g['stderr']:.3f}`; "
        f"sharpness `~ (1/eps)^{sb['exponent']:.3f} +- {sb['stderr']:.3f}`; at the edge across the {se['n']} learning "
        f"rates that reach it, sharpness `~ (1/eps)^{se['exponent']:.2f} +- {se['stderr']:.2f}`.",
    ]
    return "\n".join(out) + "\n"


def channels_paper_data_fig6() -> str:
    """docs/channels.md: Fig. 6a-b's committed data (function.csv, losslandscape.csv,
    projected_dynamics.csv) against ours (benchmarks/channels_paper_data.py)."""
    rec = _load("channels_paper_data.json")
    fun, land, traj = rec["functions"], rec["landscape"], rec["projected_dynamics"]["trajectories"]
    out = ["| file, quantity | rows | ours | max \\|ours - theirs\\| |", "|---|---|---|---|"]
    for name, c in fun["columns"].items():
        how = (
            "`toy_target`" if name == "target" else f"GLU at our w = {c['w']:.6f} (c = {c['c']:.6f}, a = {c['a']:.2e})"
        )
        out.append(f"| `function.csv` {name} | all {fun['n_rows']} | {how} | {c['max_abs_diff']:.1e} |")
    out.append(
        f"| `losslandscape.csv` loss, gamma {land['gamma_range'][0]:g}..{land['gamma_range'][1]:g}, "
        f"proj {land['proj_range'][0]:g}..{land['proj_range'][1]:g} | all {land['n_rows']} | loss minimised over the "
        f"plane's 2-D complement | {land['max_abs_diff']:.1e} (relative {land['max_rel_diff']:.1e}); "
        f"ours lower by > 1e-8 on {land['rows_ours_lower_by_1e_8']} rows, higher on "
        f"{land['rows_ours_higher_by_1e_8']} |"
    )
    out.append(
        f"| the same, loss on the plane itself (not minimised) | all {land['n_rows']} | - | "
        f"{land['max_abs_diff_plane_not_minimised']:.1e} |"
    )
    out += [
        "",
        "| curve (`projected_dynamics.csv`) | ours | start distance | max distance of their rows to our curve "
        "(rows compared) | Hausdorff | end, theirs (gamma, proj) | end, ours (flows: at their last gamma) "
        "| channel theirs / ours |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, c in traj.items():
        ch = "-" if c["channel_theirs"] is None else f"{c['channel_theirs'][-1]} / {c['channel_ours'][-1]}"
        out.append(
            f"| `{'saddle' if t == 'saddle' else 'flow_' + t}` | {c['kind']} | {c['start_distance']:.0e} | "
            f"{c['max_distance_theirs_to_ours']:.2e} ({c['rows_covered']}/{c['n_rows']}) | {c['hausdorff']:.2e} | "
            f"{c['end_theirs'][0]:.4g}, {c['end_theirs'][1]:.4f} | {c['end_ours'][0]:.4g}, {c['end_ours'][1]:.4f} | "
            f"{ch} |"
        )
    return "\n".join(out) + "\n"


def channels_recipe_setting() -> str:
    """docs/getting_started.md: the loss-levels cells (paper's settings, 100 seeds each) with the
    highest confirmed-channel fraction, the setting the channel recipe points to."""
    cells = [(c, name) for _, name in LOSS_LEVEL_STUDIES for c in _load(name)["summary"]]
    best = max(c["confirmed"] / c["n"] for c, _ in cells)
    top = [(c, name) for c, name in cells if c["confirmed"] / c["n"] == best]
    c0, name0 = top[0]
    rs = ", ".join(str(c["r"]) for c, _ in top)
    files = sorted({name for _, name in top})
    second = max(c["confirmed"] / c["n"] for c, _ in cells if c["confirmed"] / c["n"] < best)
    return (
        f"The highest confirmed-channel fraction of the loss-levels study ({len(cells)} cells of "
        f"{c0['n']} seeds at the paper's settings) is {c0['confirmed']}/{c0['n']} ({_pct(best)}%, Wilson 95% "
        f"[{_pct(c0['confirmed_ci'][0])}, {_pct(c0['confirmed_ci'][1])}]): {c0['activation']}, "
        f"{'with' if c0['bias'] else 'no'} bias, r = {rs} (`benchmarks/results/"
        + "`, `benchmarks/results/".join(files)
        + f"`). The next best cell confirms {_pct(second)}%.\n"
    )


WP_METHODS = {
    "tsit5": "Tsit5",
    "dopri8": "Dopri8",
    "kvaerno5": "Kvaerno5",
    "kvaerno5_hessian": "`kvaerno5_hessian`",
    "gauss2": "Gauss2",
    "gauss4": "Gauss4",
    "gauss6": "Gauss6",
    "kink+tsit5": "kink-aware + Tsit5",
    "kink+gauss4": "kink-aware + Gauss4",
}


def _commit_of(rec: dict) -> str:
    """`commit abc1234`, or what is known for a file written before results recorded it."""
    return ("commit " if (rec.get("provenance") or {}).get("commit") else "") + _commit(rec)


def _tol(t: float) -> str:
    """1e-4, not 1e-04."""
    return f"{t:.0e}".replace("e-0", "e-")


def _init(case: str) -> str:
    """`relu_init9` -> `PRNGKey(9)`."""
    return f"PRNGKey({case.rsplit('init', 1)[1]})"


def _run_on(prov: dict) -> str:
    """A run's wall time, machine and load, from its provenance (`not recorded` for the files
    written before results recorded them)."""
    if not prov.get("finished"):
        return "wall time, machine and load not recorded"
    t = datetime.datetime.fromisoformat
    minutes = (t(prov["finished"]) - t(prov["started"])).total_seconds() / 60
    return (
        f"{minutes:.0f} min on a shared {prov['cpu_count']}-core machine, load average "
        f"{prov['load_average'][0]:.1f} when written"
    )


def _wp_matrix(rec: dict, case: str) -> list[str]:
    """One case of work_precision.json: a row per method, a column per tolerance, `evaluations /
    error` in a cell (or the step budget it ran out of)."""
    by = {(r["method"], r["tol"]): r for r in rec["rows"] if r["case"] == case}
    tols = rec["tolerances"]
    methods = list(dict.fromkeys(r["method"] for r in rec["rows"] if r["case"] == case))

    def cell(r):
        return f"{r['nfe']:,} / {_err(r['error'])}" if r["ok"] else f"out of {r.get('max_steps', r['steps']):,} steps"

    out = ["| method | " + " | ".join(_tol(t) for t in tols) + " |", "|---" * (len(tols) + 1) + "|"]
    out += [f"| {WP_METHODS[m]} | " + " | ".join(cell(by[m, t]) for t in tols) + " |" for m in methods]
    return out


def _err(x: float) -> str:
    return "0" if x == 0 else _e(x)


def _span(xs: list[float], fmt=None, sep: str = " to ") -> str:
    """`lo to hi` of `xs` formatted by `fmt` (default `_e`), or one value where both read the same."""
    lo, hi = (fmt or _e)(min(xs)), (fmt or _e)(max(xs))
    return lo if lo == hi else f"{lo}{sep}{hi}"


def work_precision_setup() -> str:
    """docs/solvers.md: how the committed work-precision run was made, and its inits."""
    rec = _load("work_precision.json")
    prov, steps = rec["provenance"], rec["screen_steps"]
    budgets = sorted({r["max_steps"] for r in rec["rows"] if "max_steps" in r}, reverse=True)
    slow = " and ".join(f"PRNGKey({i}) ({steps[i]:,} steps)" for i in rec["slow_inits"])
    return (
        f"Measured (`{rec['command']}`, {_commit_of(rec)}; {_run_on(prov)}; "
        "`benchmarks/results/work_precision.json`, plotted in `benchmarks/results/work_precision.png`).\n\n"
        f"- Network and data: {rec['workload']}.\n"
        f"- Inits: Tsit5 at 1e-8 is run on {len(steps)} inits. Their step counts range from {min(steps):,} to "
        f"{max(steps):,}. The slowest decile is {slow}; the median init is PRNGKey({rec['median_init']}).\n"
        f"- Tolerances: rtol = atol = {', '.join(_tol(t) for t in rec['tolerances'])}.\n"
        f"- Step budgets: {' and '.join(f'{b:,}' for b in budgets)} steps (the smaller one for plain implicit "
        "solvers on ReLU, which stall at the first kink).\n"
    )


def work_precision_reference() -> str:
    """docs/solvers.md: the ReLU reference against the smooth limit and against brute force."""
    rec = _load("work_precision.json")
    refs = {k: v for k, v in rec["references"].items() if "smooth_limit_distance" in v}
    betas = list(next(iter(refs.values()))["smooth_limit_distance"])
    out = [
        "| init | events | sliding entries | most pairs sliding at once | "
        + " | ".join(f"beta = {float(b):.0e}".replace("e+0", "e") for b in betas)
        + " | brute-force Tsit5 at 1e-13: steps, distance |",
        "|---" * (len(betas) + 5) + "|",
    ]
    factors = []
    for case, r in refs.items():
        d = r["smooth_limit_distance"]
        factors += [d[a] / d[b] for a, b in zip(betas, betas[1:]) if d[a] and d[b]]
        bf = f"{r['brute_force_steps']:,}{'' if r['brute_force_ok'] else ' (out of steps)'}"
        out.append(
            f"| {_init(case)} | {r['events']} | {r['sliding_entries']} | {r['max_sliding_pairs']} | "
            + " | ".join("failed" if d[b] is None else _e(d[b]) for b in betas)
            + f" | {bf}, {_e(r['brute_force_distance'])} |"
        )
    first = bool(factors) and 5 <= min(factors) and max(factors) <= 20
    return (
        f"The reference is {' / '.join(sorted({r['kind'] for r in refs.values()}))} (the kink-aware flow). Its distance at `t1` to "
        "the smooth limit (`softplus(beta z) / beta`, Kvaerno5 at 1e-10) and to brute force:\n\n"
        + "\n".join(out)
        + (
            f"\n\nEach tenfold increase of beta shrank the distance to the smooth limit by a factor of "
            f"{min(factors):.1f} to {max(factors):.1f}"
            + (": first-order convergence in `1/beta`.\n" if first else ".\n")
            if factors
            else "\n\nA smooth-limit run failed: no convergence rate to report.\n"
        )
    )


def work_precision_relu() -> str:
    """docs/solvers.md: evaluations and error per method and tolerance on every ReLU case, and
    the drift of c."""
    rec = _load("work_precision.json")
    slow = [f"relu_init{i}" for i in rec["slow_inits"]]
    out = []
    for case in [*slow, f"relu_init{rec['median_init']}"]:
        kind = "slowest decile" if case in slow else "median init"
        out += [f"**{_init(case)}** ({kind}; evaluations / error):", "", *_wp_matrix(rec, case), ""]
    drift = []
    for m in dict.fromkeys(r["method"] for r in rec["rows"] if r["case"] in slow):
        rows = [r for r in rec["rows"] if r["case"] in slow and r["method"] == m and r["ok"]]
        if rows:
            tols = [_tol(t) for t in sorted({r["tol"] for r in rows}, reverse=True)]
            drift.append(f"{WP_METHODS[m]} {_span([r['drift_rel'] for r in rows])} (tol {', '.join(tols)})")
    kinds = {r["kind"] for c, r in rec["references"].items() if c.startswith("relu")}
    for m, t in dict.fromkeys((r["method"], r["tol"]) for r in rec["rows"] if r["case"] in slow and r["error"] == 0):
        own = " (the reference's own method and tolerance)" if f"{m} at {_tol(t)}" in kinds else ""
        out += [f"Error 0 for {WP_METHODS[m]} at {_tol(t)}{own}.", ""]
    out.append("**Drift** of `c` (relative) on the slowest decile, where a method finished: " + "; ".join(drift) + ".")
    return "\n".join(out) + "\n"


def work_precision_goal() -> str:
    """docs/solvers.md: evaluations for kink-aware to reach Tsit5's error (the JSON's `goal`)."""
    rec = _load("work_precision.json")
    by = {(g["case"], g["tsit5_tol"], g["method"]): g for g in rec["goal"]}
    keys = list(dict.fromkeys((g["case"], g["tsit5_tol"]) for g in rec["goal"]))

    def ratio(x):
        return f"{x:.0f}x" if x >= 10 else f"{x:.2g}x"

    def cell(g):
        return "not reached" if g["kink_nfe"] is None else f"{g['kink_nfe']:,} ({ratio(g['ratio'])})"

    out = [
        "| init | Tsit5 tol | Tsit5 error | Tsit5 evaluations | kink-aware + Tsit5 (ratio) | kink-aware + Gauss4 (ratio) |",
        "|---|---|---|---|---|---|",
    ]
    for case, tol in keys:
        t = by[case, tol, "kink+tsit5"]
        out.append(
            f"| {_init(case)} | {_tol(tol)} | {_e(t['tsit5_error'])} | {t['tsit5_nfe']:,} | {cell(t)} | "
            f"{cell(by[case, tol, 'kink+gauss4'])} |"
        )
    cases = list(dict.fromkeys(c for c, _ in keys))
    tight = {c: min(t for cc, t in keys if cc == c) for c in cases}
    best = {m: [by[c, tight[c], m]["ratio"] for c in cases] for m in ("kink+tsit5", "kink+gauss4")}
    fmt = lambda xs: " and ".join("-" if x is None else ratio(x) for x in xs)  # noqa: E731
    met = all(x is not None and x >= 10 for x in best["kink+tsit5"])
    crude = [by[c, t, "kink+tsit5"]["ratio"] for c, t in keys if t != tight[c]]
    crude = [x for x in crude if x is not None]
    events = [rec["references"][c]["events"] for c in cases]
    return (
        "\n".join(out)
        + "\n\nAt Tsit5's tightest finished tolerance ("
        + " and ".join(_tol(tight[c]) for c in cases)
        + f"), kink-aware + Tsit5 needed {fmt(best['kink+tsit5'])} fewer evaluations for Tsit5's error "
        + ("(the 10x goal is met" if met else "(the 10x goal is not met")
        + f" on {'both' if len(cases) == 2 else 'these'} inits), kink-aware + Gauss4 {fmt(best['kink+gauss4'])}."
        + (
            f" At Tsit5's cruder tolerances the ratio is {ratio(min(crude))} to {ratio(max(crude))}"
            + (": Tsit5 is cheaper there" if max(crude) < 1 else " (Tsit5 is cheaper where it is below 1)")
            + f". Kink-aware pays a fixed cost per event ({' and '.join(map(str, events))} events here), whatever "
            "the tolerance.\n"
            if crude
            else "\n"
        )
    )


def work_precision_softplus() -> str:
    """docs/solvers.md: the softplus case (smooth, one init)."""
    rec = _load("work_precision.json")
    case = next(c for c in rec["references"] if c.startswith("softplus"))
    by = {(r["method"], r["tol"]): r for r in rec["rows"] if r["case"] == case}
    ratio = [by["kvaerno5", t]["nfe"] / by["dopri8", t]["nfe"] for t in rec["tolerances"]]
    return (
        f"**Softplus** ({_init(case)}, reference {rec['references'][case]['kind']}; evaluations / error):\n\n"
        + "\n".join(_wp_matrix(rec, case))
        + f"\n\nKvaerno5 costs {min(ratio):.0f}-{max(ratio):.0f}x the evaluations of Dopri8 at the same tolerance.\n"
    )


def work_precision_stiff() -> str:
    """docs/solvers.md: Tsit5, Kvaerno5 and Kvaerno5 with the exact Hessian on the stiff channel."""
    rec = _load("work_precision.json")
    sc = rec["stiff_channel"]
    by = {r["method"]: r for r in sc["rows"]}
    lo, hi = sc["hessian_eigs"]
    out = [
        f"Measured (`{rec['command']}`, {_commit_of(rec)}, key `stiff_channel` of "
        f"`benchmarks/results/work_precision.json`; wall times after compiling, shared 2-core machine). Hessian "
        f"eigenvalues range from {lo:.2g} to {hi:.0f}.",
        "",
        "| solver | steps | evaluations | wall time |",
        "|---|---|---|---|",
    ]
    for r in sc["rows"]:
        steps = f"{r['steps']:,}" + ("" if r["ok"] else " (failed)")
        out.append(f"| {WP_METHODS[r['method']]} | {steps} | {r['nfe']:,} | {r['wall_s']:.2f} s |")
    k, h, t = by["kvaerno5"], by["kvaerno5_hessian"], by["tsit5"]
    same = k["steps"] == h["steps"] and k["nfe"] == h["nfe"]
    out += [
        "",
        f"`kvaerno5_hessian` took {'the same' if same else 'other'} steps and evaluations as Kvaerno5 and "
        f"{h['wall_s'] / k['wall_s']:.2f}x its wall time"
        + (
            " (its LU ignores the symmetric tag): no gain from the variant"
            if same and h["wall_s"] >= k["wall_s"]
            else ""
        )
        + f". Tsit5 took {t['steps'] / k['steps']:.0f}x Kvaerno5's steps and {t['wall_s'] / k['wall_s']:.0f}x its "
        "wall time.",
    ]
    return "\n".join(out) + "\n"


def filtered_error() -> str:
    """docs/solvers.md: `ij.FilteredError` beside the plain estimate on Fig. 2's committed runs."""
    rec = _load("filtered_error.json")
    plain, filtered = rec["solvers"]
    by = {(r["mu"], r["solver"]): r for r in rec["runs"]}
    ran = sorted({r["mu"] for r in rec["runs"]})
    mus = [mu for mu in ran if (mu, plain) in by and (mu, filtered) in by]
    missing = (
        ""
        if rec["complete"]
        else (
            f" **Incomplete:** the run stopped at its time limit with {len(rec['runs'])} of its runs done; "
            + (
                f"mu = {_mus([mu for mu in ran if mu not in mus])} finished for one solver only, and "
                if len(mus) < len(ran)
                else ""
            )
            + "the mus it did not reach are not in the table."
        )
    )

    def cell(r):
        warm = "-" if r["warm_seconds"] is None else f"{r['warm_seconds']:.1f} s"
        failed = "" if r["success"] else f", **{r['rows_reached']} of {r['rows']} rows** (max_steps)"
        return (
            f"{r['steps']} ({r['rejected_steps']}){failed} | {r['first_call_seconds']:.0f} s "
            f"({r['compilations']['seconds']:.0f} s compiling) | {warm} | {r['max_distance']:.1e}"
        )

    src = rec.get("resumed_from")
    if src:
        old = [r for r in rec["runs"] if r.get("commit") == src["commit"]]
        wall = (
            f"{rec['wall_seconds'] / 60:.0f} minutes of wall time for the {len(rec['runs']) - len(old)} runs made "
            f"at {_commit_of(rec)}, the others kept from an earlier output (`--resume`): {len(old)} runs made at "
            f"{src['commit'][:7]} by `{src['command']}`"
        )
        for a in rec.get("again", []):
            k, r = a["steps"], a["rejected_steps"]
            wall += (
                f"; mu = {a['mu']:g} with `{a['solver']}` run again at {_commit_of(rec)} took {k['rerun']} steps "
                f"({r['rerun']} rejected, `{a['result']['rerun']}`) against {k['kept']} ({r['kept']}, "
                f"`{a['result']['kept']}`) there"
            )
    else:
        wall = f"{rec['wall_seconds'] / 60:.0f} minutes of wall time in all"
    out = [
        f"`{rec['command']}` ({_commit_of(rec)}), reading the authors' commit {rec['their_commit'][:7]}; "
        f"rtol = atol = {_tol(rec['rtol'])}, at most {rec['max_steps']} steps, their penalty without `n_samples`, "
        f"maxnorm = {rec['maxnorm']:g}; every run to their last saved time; {wall} "
        f"(shared 2-core machine). Per solver: steps (rejected), first call (its XLA compilation), "
        f"a warm second call where the first took under {rec['warm_below']:g} s, and the largest distance to their "
        "saved rows. A worker that had compiled the same program for an earlier run compiles nothing (0 s)." + missing,
        "",
        f"| mu | `{plain}`: steps | first call | warm | distance | `{filtered}`: steps | first call | warm | distance "
        "| steps, plain / filtered | MSE at the last row: theirs / plain / filtered |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mu in mus:
        a, b = by[(mu, plain)], by[(mu, filtered)]
        mse = (
            f"{a['loss_at_last']['theirs']:.10f} / {a['loss_at_last']['ours']:.10f} / {b['loss_at_last']['ours']:.10f}"
        )
        ratio = f"{a['steps'] / b['steps']:.2f}" if a["success"] and b["success"] else "-"
        out.append(f"| {mu:g} | {cell(a)} | {cell(b)} | {ratio} | {mse} |")

    def same_end(r):  # the last row's MSE as theirs, to 1e-8 (relative)
        return abs(r["loss_at_last"]["ours"] - r["loss_at_last"]["theirs"]) <= 1e-8 * r["loss_at_last"]["theirs"]

    both = [mu for mu in mus if by[(mu, plain)]["success"] and by[(mu, filtered)]["success"]]
    fewer = [mu for mu in both if by[(mu, filtered)]["steps"] < by[(mu, plain)]["steps"]]
    more = [mu for mu in both if by[(mu, filtered)]["steps"] > by[(mu, plain)]["steps"]]
    ratios = [by[(mu, plain)]["steps"] / by[(mu, filtered)]["steps"] for mu in fewer]
    said = [
        (
            f"Where both finished, the filtered estimate took fewer steps at mu = {_mus(fewer)} "
            f"({min(ratios):.1f}x to {max(ratios):.1f}x fewer)"
            if fewer
            else "Where both finished, the filtered estimate never took fewer steps"
            if both
            else "No mu finished with both solvers"
        )
        + (f" and more at mu = {_mus(more)}" if more else "")
        + "."
    ]
    for name, other in ((plain, filtered), (filtered, plain)):
        for mu in mus:
            r, o = by[(mu, name)], by[(mu, other)]
            if not r["success"]:
                said.append(
                    f"At mu = {mu:g}, `{name}` ran out of steps after {r['rows_reached']} of {r['rows']} rows, "
                    f"where `{other}` {'finished' if o['success'] else 'ran out too'}."
                )
            if r["success"] and not same_end(r):
                said.append(
                    f"At mu = {mu:g}, `{name}` ended at MSE {r['loss_at_last']['ours']:.10f}, not at theirs "
                    f"({r['loss_at_last']['theirs']:.10f}), {r['distance_at_last']:.3g} from their last row."
                )
    return "\n".join(out) + "\n\n" + " ".join(said) + "\n"


def filtered_error_steps() -> str:
    """docs/solvers.md: every attempted step at one mu, three arms, and the probed steps' true error."""
    rec = _load("filtered_error_steps.json")
    out = [
        f"`{rec['command']}` ({_commit_of(rec)}), reading the authors' commit {rec['their_commit'][:7]}: mu = "
        f"{rec['mu']:g}, rtol = atol = {_tol(rec['rtol'])}, {rec['max_steps']} attempted steps per arm. Probes: "
        f"accepted steps with {rec['probe_after']:g} <= t < {rec['probe_before']:g}, evenly spaced, each integrated "
        f"again over the same h at rtol = atol = {_tol(rec['reference_rtol'])}; true error: the scaled RMS distance "
        "of the step's y1 to that reference (above 1: the step missed its tolerance).",
        "",
        "| arm | stage tolerance in y | t reached | rejected: stage solve | rejected: estimate | accepted with raw "
        "estimate > 1 | probed steps | true error > 1 | largest true error | median true / estimate that decided |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["runs"]:
        groups = r["probed"].values()
        n = sum(g["steps"] for g in groups)
        above = sum(g["true_above_1"] for g in groups)
        largest = max((g["max_true"] for g in groups if g["max_true"] is not None), default=float("nan"))
        key = "median_true_over_filtered" if r["estimate"] == "filtered" else "median_true_over_raw"
        ratios = [f"{g[key]:.2g}" for g in r["probed"].values() if g[key] is not None]
        tol = "diffrax's (atol in f)" if r["stage_tolerance"] is None else f"{r['stage_tolerance']:g} x step's"
        out.append(
            f"| `{r['arm']}` | {tol} | {r['t_end']:.2g} | {r['rejected_stage_solve']} | {r['rejected_estimate']} | "
            f"{r['accepted_with_raw_above_1']} | {n} | {above} | {largest:.2g} | {' / '.join(ratios)} |"
        )
    note = (
        "The last column gives the median over the probed steps the raw estimate accepted too, "
        "then over those only the filter accepted (where there are any)."
    )
    return "\n".join(out) + "\n\n" + note + "\n"


def filtered_error_hover(name: str = "filtered_error_hover.json") -> str:
    """docs/solvers.md: both estimates on the two-weight hover with an exact solution."""
    rec = _load(name)
    out = [
        f"`{rec['command']}` ({_commit_of(rec)}); rtol = {_tol(rec['rtol'])}, atol = {_tol(rec['atol'])}, at most "
        f"{rec['max_steps']} steps. "
        "Error: the largest |difference| from the exact solution over the saved times the run reached.",
        "",
        "| t1 | solver | steps (rejected) | first call (compiling) | warm | largest error | error at the last time "
        "reached | saved times reached |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        errs = [e for e in r["errors"].values() if e is not None]
        steps = f"{r['steps']} ({r['rejected_steps']})" + ("" if r["success"] else ", max_steps")
        out.append(
            f"| {r['t1']:g} | `{r['solver']}` | {steps} | {r['first_call_seconds']:.1f} s "
            f"({r['compilations']['seconds']:.1f} s) | {r['warm_seconds'] * 1e3:.0f} ms | {max(errs):.1e} | "
            f"{errs[-1]:.1e} | {len(errs)} of {len(r['errors'])} |"
        )
    return "\n".join(out) + "\n"


def _mus(mus: list) -> str:
    return ", ".join(f"{m:g}" for m in mus)


def _strength(x: float) -> str:
    return "0" if x == 0 else _tol(x)


def _change(x: float) -> str:
    """max |f_pruned - f|: 0, or one significant figure."""
    return "0" if x == 0 else f"{x:.0e}".replace("e-0", "e-")


PRUNING_ARMS = {
    "none": "none",
    "l2": "L2",
    "l1": "L1 (prox)",
    "nuclear": "nuclear (prox)",
    "nuclear-subgrad": "nuclear (subgradient)",
}


def pruning_breast_cancer() -> str:
    """docs/pruning.md: the one-hidden-layer Breast Cancer study, its table and the numbers
    the comparison with the paper rests on."""
    rec = _load("pruning_breast_cancer.json")
    st = rec["setup"]
    H = 20  # the hidden width of st["net"], a 30-20-1 MLP
    assert st["net"].startswith("30-20-1"), st["net"]
    rows = [
        f"| arm | strength | rank J_G | cut off /{H} | test acc | after pruning | max \\|f_p - f\\| "
        "| none, magnitude-pruned to same size | L2 (1e-3), same |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        m = {k: v[0] for k, v in r["mean_std"].items()}
        cut = f"{m['cut_off']:.1f}"
        if m["cut_off_tol_1e-3"] != m["cut_off"]:
            cut += f" ({m['cut_off_tol_1e-3']:.1f} at tol 1e-3)"
        mag = (
            f"{m['test_acc_none_magnitude_pruned']:.3f} | {m['test_acc_l2_magnitude_pruned']:.3f}"
            if m["cut_off"] > 0
            else " | "
        )
        rows.append(
            f"| {PRUNING_ARMS[r['arm']]} | {_strength(r['strength'])} | {m['rank']:.1f} | {cut} | {m['test_acc']:.3f} | "
            f"{m['test_acc_pruned']:.3f} | {_change(m['max_abs_change'])} | {mag} |"
        )
    by = {(r["arm"], r["strength"]): {k: v[0] for k, v in r["mean_std"].items()} for r in rec["rows"]}
    nuc, l1, sub = by["nuclear", 0.01], by["l1", 0.01], by["nuclear-subgrad", 0.01]
    small = by["nuclear", 0.003]
    plain = [m["cut_off"] for (a, _), m in by.items() if a in ("none", "l2")]
    dacc = max(abs(m["test_acc_pruned"] - m["test_acc"]) for m in by.values())
    acc = "did not change test accuracy" if dacc == 0 else f"changed test accuracy by at most {dacc:.3f}"
    loss2 = [100 * (nuc["test_acc"] - nuc[f"test_acc_{a}_magnitude_pruned"]) for a in ("none", "l2")]
    return (
        f"Measured (`{rec['command']}`, {_commit_of(rec)}): {st['net']}, {st['loss']}, {st['optimizer']}, "
        f"{st['epochs']} epochs, {st['seeds']} seeds, cut-off at tol = {st['cut_off_tol']:g} (exact zeros from "
        f"proximal steps for {' and '.join(st['proximal'])}). Means over {st['seeds']} seeds:\n\n"
        + "\n".join(rows)
        + "\n\n"
        f"- Cut off at strength 1e-2: nuclear {nuc['cut_off']:.1f}/{H}, L1 {l1['cut_off']:.1f}/{H}; none and L2 "
        f"at most {max(plain):.1f}/{H}.\n"
        f"- Pruning the cut-off neurons {acc} and changed the outputs by at most "
        f"{_change(max(m['max_abs_change'] for m in by.values()))}.\n"
        f"- Plain subgradient of the nuclear norm (strength 1e-2): {sub['cut_off']:.1f}/{H} cut off at tol 0, "
        f"{sub['cut_off_tol_1e-3']:.1f}/{H} at tol 1e-3.\n"
        f"- Magnitude pruning to the nuclear arm's size at strength 1e-2 (rank {nuc['rank']:.1f}) loses "
        f"{min(loss2):.1f}-{max(loss2):.1f} points of test accuracy against the nuclear nets pruned losslessly "
        f"({nuc['test_acc_pruned']:.3f}); at strength 3e-3 (rank {small['rank']:.1f}) the magnitude-pruned L2 nets "
        f"score {small['test_acc_l2_magnitude_pruned']:.3f} and the none nets "
        f"{small['test_acc_none_magnitude_pruned']:.3f}, against {small['test_acc_pruned']:.3f} for the nuclear nets.\n"
    )


def _dag_arm(r: dict) -> str:
    s = r["settings"]
    name = {None: "none", "l2": "L2", "l1": "L1", "group_lasso": "group lasso, fan-in", "nuclear": "nuclear"}[
        s["regularizer"]
    ]
    if s["proximal"]:
        name += " (working set)" if s["regularizer"] == "nuclear" else " (prox)"
    if (s["optimizer"], s["lr"], s["batch_size"]) != ("sgd", 0.2, None):
        name += f", {'SGD' if s['optimizer'] == 'sgd' else s['optimizer'].capitalize()} lr {s['lr']:g}"
        name += f", batch {s['batch_size']}" if s["batch_size"] else ""
    return f"**{name}**" if r["arm"] == "nuclear" else name


def pruning_dag() -> str:
    """docs/pruning.md: the deep MLP and the random DAG, every arm, the magnitude baseline and
    the singular-point checks of the nuclear arms."""
    rec = _load("pruning_dag.json")
    st = rec["setup"]
    out = [
        f"Measured (`{'` and `'.join(dict.fromkeys(g['command'] for g in rec['graphs'].values()))}`, {_commit_of(rec)}): "
        f"{st['data']}, {st['activation']}, {st['loss']}, {st['seeds']} seeds vmapped, {st['epochs']} epochs, "
        f"full-batch GD lr 0.2 unless stated, cut-off at tol = {st['cut_off_tol']:g}. Means over {st['seeds']} seeds.",
    ]
    for name, g in rec["graphs"].items():
        H = g["n_hidden"]
        ms, wr = g["timing_ms_per_epoch"], g["timing_ratio_to_none"]
        cpu, cr = g["timing_cpu_ms_per_epoch"], g["timing_cpu_ratio_to_none"]
        out += [
            "",
            f"**{name}** (`{st['graphs'][name]}`, H = {H}, E = {g['n_edges']}):",
            "",
            f"| arm | strength | rank J_G (tol 0) | SVD rank | cut off /{H} | removed by prune | test acc | after pruning "
            "| max \\|f_p - f\\| | ms/epoch, wall (x none) | CPU ms/epoch (x none) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in g["rows"]:
            m, a = r["mean_std"], r["arm"]
            t = f"{ms[a]:.1f} ({wr[a]:.2f}) | {cpu[a]:.1f} ({cr[a]:.2f})" if a in ms else " | "
            out.append(
                f"| {_dag_arm(r)} | {r['settings']['strength']:g} | {m['rank'][0]:.1f} | {m['jacobian_rank'][0]:.1f} | "
                f"{m['cut_off'][0]:.1f} ± {m['cut_off'][1]:.1f} | {m['removed'][0]:.1f} | {m['test_acc'][0]:.3f} | "
                f"{m['test_acc_pruned'][0]:.3f} | {_change(m['max_abs_change'][0])} | {t} |"
            )
        nuc = next(r for r in g["rows"] if r["arm"] == "nuclear")
        mn = {k: v[0] for k, v in nuc["mean_std"].items()}
        seeds = [p["cut_off"] for p in nuc["per_seed"]]
        out += [
            "",
            f"Magnitude pruning to the nuclear arm's size (per seed): none nets "
            f"{mn['test_acc_none_magnitude_pruned']:.3f}, L2 nets {mn['test_acc_l2_magnitude_pruned']:.3f}, against "
            f"{mn['test_acc_pruned']:.3f} for the nuclear nets pruned losslessly. The nuclear arm cut off "
            f"{min(seeds)} to {max(seeds)} neurons per seed.",
        ]
        for r in g["rows"]:
            if not r["arm"].startswith("nuclear"):
                continue
            s = [p["singular"] for p in r["per_seed"]]
            sizes = sorted({n for x in s for n in x["group_sizes"]})
            out.append(
                f"- {r['arm']}: seeds with cut-off groups {sum(x['n_groups'] > 0 for x in s)}/{len(s)}; "
                f"jacobian_rank = H - groups on {sum(x['jacobian_rank'] == x['H_minus_groups'] for x in s)}/{len(s)}; "
                f"groups {[x['n_groups'] for x in s]} of sizes {sizes}, max |sum_W c(final)| "
                f"{max(x['max_abs_group_sum_c_final'] for x in s):.1e}; max |sum_W c(0)| "
                f"{max(x['max_abs_group_sum_c0'] for x in s):.2f}, drift of c up to {max(x['drift_c'] for x in s):.2f}; "
                f"singular_point found {sum(x['singular_point_found'] for x in s)}/{len(s)}; frozen boundary edges "
                f"{sum(x['frozen_boundary_edges'] for x in s)}; LP disagreements "
                f"{sum(x['connectivity_result'] != 'successful' for x in s)}"
            )
    return "\n".join(out) + "\n"


def pruning_dag_cost() -> str:
    """docs/pruning.md: cost per epoch of each arm, from pruning_dag.json's timing runs."""
    rec = _load("pruning_dag.json")
    g = rec["graphs"]
    cpu = {k: g[k]["timing_cpu_ms_per_epoch"] for k in ("mlp", "dag")}
    cr = {k: g[k]["timing_cpu_ratio_to_none"] for k in ("mlp", "dag")}
    wr = {k: g[k]["timing_ratio_to_none"] for k in ("mlp", "dag")}
    others = [cr[k][a] for k in cr for a in ("l2", "l1", "group_lasso")]
    # (a --timing-only run records its own command; a full run timed as part of it)
    cmds = list(dict.fromkeys(g[k].get("timing_command", g[k]["command"]) for k in ("mlp", "dag")))
    return (
        f"Cost per epoch ({rec['setup']['seeds']} seeds vmapped, best of 5 runs of 100 epochs, the defaults of "
        "`timing()` in `benchmarks/pruning_dag.py`; compiled first, arms interleaved; "
        + " and ".join(f"`{c}`" for c in cmds)
        + f", {_commit(rec)}): in CPU time of the process, "
        f"the working-set step costs **{cr['mlp']['nuclear']:.2f}x** the unregularized loop on the MLP "
        f"({cpu['mlp']['nuclear']:.1f} vs {cpu['mlp']['none']:.1f} ms) and **{cr['dag']['nuclear']:.2f}x** on the DAG "
        f"({cpu['dag']['nuclear']:.1f} vs {cpu['dag']['none']:.1f} ms); L2, L1 and group lasso cost "
        f"{min(others):.2f}-{max(others):.2f}x. Wall-clock ratios were {wr['mlp']['nuclear']:.2f}x and "
        f"{wr['dag']['nuclear']:.2f}x.\n"
    )


def _kink_vmap_engines(rec: dict) -> list[str]:
    S, eng = rec["settings"]["slots"], rec["engines"]
    new = next(k for k in eng["exact"] if k.startswith("new_size_"))
    n_new = new.rsplit("_", 1)[1]
    lines = [
        f"{rec['workload']}; {S:,} trajectories in {S:,} slots, at {_commit(rec)}{_on_cpu(rec['provenance'])}, one "
        f"process: `{rec['command']}`.",
        "",
        "| `KinkEngine` | first call | compilations (compiling) | warm call | solver steps | warm wall / bare "
        f"| then {n_new} trajectories (compilations) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in ("exact", "vmap"):
        e = eng[mode]
        lines.append(
            f"| {mode} mode | {e['first']['wall_s']:.1f} s | {e['first']['compilations']} "
            f"({e['first']['compile_s']:.1f} s) | {e['warm']['wall_s']:.2f} s | {e['steps']:,} | "
            f"{e['wall_over_bare_warm']:.0f}x | {e[new]['wall_s']:.2f} s ({e[new]['compilations']}) |"
        )
    lines += [
        "",
        f"Vmap over exact mode: {eng['vmap_over_exact_warm']:.1f}x warm, {eng['vmap_over_exact_first']:.1f}x on the "
        f"first call. Largest difference of the final weights between the modes: "
        f"{eng['max_abs_theta_final_difference']:.1e}. Bare: {rec['bare_step_us']:.1f} us per lane-step (6 "
        "pattern-frozen gradients, timed as one vmapped gradient over the lanes).",
    ]
    return lines


def kink_vmap_profile() -> str:
    """docs/sweep.md: the kink-aware engine in vmap mode against exact mode (heavy and demo-DAG workloads), and its lockstep segments."""
    rec = _load("kink_vmap_profile.json")
    lines = [*_kink_vmap_engines(rec), "(`benchmarks/results/kink_vmap_profile.json`; goal on this workload: 3x warm.)"]
    light = _load("kink_vmap_profile_example.json")
    lines += ["", *_kink_vmap_engines(light), "(`benchmarks/results/kink_vmap_profile_example.json`.)"]
    lines += [
        "",
        "The heavy workload's trajectories started together, one vmapped segment per iteration, no refill:",
        "",
        "| lanes | compile | iterations | finished | steps needed / trip count x lanes going (ratio) | wall | per needed step |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in rec["lockstep"].values():
        m = arm["summary"]
        label = "named (`lane_cond`)" if m["lanes_named"] else "not named (every branch a select)"
        lines.append(
            f"| {label} | {m['compile_s']:.1f} s | {m['iterations']} | {m['finished']:,} | "
            f"{m['steps_needed']:,.0f} / {m['steps_paid']:,} ({m['lockstep_efficiency']:.2f}) | {m['wall_s']:.1f} s | "
            f"{m['wall_per_needed_step_us']:.0f} us |"
        )
    return "\n".join(lines) + "\n"


BLOCKS = {
    "results-index": results_index,
    "jump-filter": jump_filter,
    "test-suite-time": test_suite_time,
    "first-calls": first_calls,
    "first-calls-compile-options": first_calls_compile_options,
    "first-calls-program-size": first_calls_program_size,
    "sweep-first-call-program-size": sweep_first_call_program_size,
    "blas-threads": blas_threads,
    "blas-threads-readme": blas_threads_readme,
    "channels-solvers": channels_solvers,
    "channels-flow-budget": channels_flow_budget,
    "channels-flow-budget-stages": channels_flow_budget_stages,
    "channels-flow-budget-roughness": channels_flow_budget_roughness,
    "channels-loss-levels-newton": channels_loss_levels_newton,
    "channels-loss-levels-newton-softplus-bias": channels_loss_levels_newton_softplus_bias,
    "channels-loss-levels-newton-g-bias": channels_loss_levels_newton_g_bias,
    "channels-loss-levels-newton-softplus-nobias": channels_loss_levels_newton_softplus_nobias,
    "channels-loss-levels-authors-seeds": channels_loss_levels_authors_seeds,
    "channels-step-control": channels_step_control,
    "channels-deep": channels_deep,
    "channels-groups": channels_groups,
    "channels-scaling": channels_scaling,
    "channels-scaling-t1": channels_scaling_t1,
    "channels-paper-run": channels_paper_run,
    "channels-saddle-split": channels_saddle_split,
    "stage-tolerance": stage_tolerance,
    "channels-t1": channels_t1,
    "channels-t1-controllers": channels_t1_controllers,
    "kink-missed-exit": kink_missed_exit,
    "kink-accuracy-scan": kink_accuracy_scan,
    "channels-hover": channels_hover,
    "channels-breakdown": channels_breakdown,
    "rank-invariance": rank_invariance,
    "topology-scale": topology_scale,
    "channels-loss-levels": channels_loss_levels,
    "channels-loss-levels-details": channels_loss_levels_details,
    "channels-roughness": channels_roughness,
    "sweep-batch-sizes": sweep_batch_sizes,
    "sweep-recompile": sweep_recompile,
    "kink-compile-newton": kink_compile_newton,
    "kink-compile-restart": kink_compile_restart,
    "kink-compile-field-once": kink_compile_field_once,
    "kink-compile-program-size": kink_compile_program_size,
    "gauss-sweep-modes": gauss_sweep_modes,
    "sweep-cores": sweep_cores,
    "sweep-cores-warm": lambda: sweep_cores("sweep_cores_warm.json"),
    "sweep-cores-overlap": sweep_cores_overlap,
    "sweep-first-call": sweep_first_call,
    "sweep-million": sweep_million,
    "sweep-memory": sweep_memory,
    "sweep-cores-slots": sweep_cores_slots,
    "coupled-pairs": coupled_pairs,
    "sweep-throughput": sweep_throughput,
    "kink-vmap-profile": kink_vmap_profile,
    "sweep-throughput-256": sweep_throughput_256,
    "sweep-throughput-segments": sweep_throughput_segments,
    "kink-restart-step": kink_restart_step,
    "kink-sliding-exits": kink_sliding_exits,
    "sweep-neighbors": sweep_neighbors,
    "sweep-throughput-small-n": sweep_throughput_small_n,
    "kink-sweep": kink_sweep,
    "sweep-throughput-gpu": sweep_throughput_gpu,
    "converge-cost": converge_cost,
    "channels-optimizers": channels_optimizers,
    "channels-eos": channels_eos,
    "channels-paper-data-fig6": channels_paper_data_fig6,
    "channels-recipe-setting": channels_recipe_setting,
    "work-precision-setup": work_precision_setup,
    "work-precision-reference": work_precision_reference,
    "work-precision-relu": work_precision_relu,
    "work-precision-goal": work_precision_goal,
    "work-precision-softplus": work_precision_softplus,
    "work-precision-stiff": work_precision_stiff,
    "filtered-error": filtered_error,
    "filtered-error-hover": filtered_error_hover,
    "filtered-error-hover-loose": lambda: filtered_error_hover("filtered_error_hover_loose.json"),
    "filtered-error-steps": filtered_error_steps,
    "pruning-breast-cancer": pruning_breast_cancer,
    "pruning-dag": pruning_dag,
    "pruning-dag-cost": pruning_dag_cost,
}


def render(text: str, missing: list | None = None) -> str:
    """`text` with every generated block written anew. A block whose results file does not
    exist is left as it is and its name appended to `missing` (an error if `None`)."""

    def one(m):
        name = m.group("name")
        if name not in BLOCKS:
            raise KeyError(f"unknown generated block {name!r}; known: {sorted(BLOCKS)}")
        try:
            return m.group(1) + BLOCKS[name]() + m.group(4)
        except FileNotFoundError as e:
            if missing is None:
                raise
            missing.append(f"{name} ({Path(e.filename).name} missing)")
            return m.group(0)

    return BLOCK.sub(one, text)


def stale_blocks() -> list[str]:
    """`page: block` for every generated block whose text differs from its file."""
    out = []
    for page in PAGES:
        text = page.read_text()
        missing = []
        new = render(text, missing)
        out += [f"{page.relative_to(ROOT)}: {m}" for m in missing]
        if new != text:
            old_blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
            new_blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(new)}
            out += [f"{page.relative_to(ROOT)}: {n}" for n in old_blocks if old_blocks[n] != new_blocks.get(n)]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs from its file")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_blocks()
        for s in stale:
            print(f"stale: {s} (run python benchmarks/docs_tables.py)")
        return 1 if stale else 0
    for page in PAGES:
        text = page.read_text()
        missing = []
        new = render(text, missing)
        for m in missing:
            print(f"{page.relative_to(ROOT)}: left as it is: {m}")
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
