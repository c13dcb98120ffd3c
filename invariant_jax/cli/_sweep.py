"""`invariant-jax sweep`: gradient flow from many initializations, persisted and summarised."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import jax

from ..sweep import (
    BatchOptions,
    ResultsStore,
    SweepConfig,
    SweepInterrupted,
    check_output_folder,
    choose_device_mode,
    dumps_strict,
    graph_fields,
    is_no_space,
    job_array_share,
    run_in_folder,
    summarize_sweep,
)
from ._common import check_option, read_config_file
from ._parsers import DEFAULT_OUT

FIGURES = (
    "drift_tol",
    "loss_by_connectivity",
    "disconnected",
    "rank",
    "steps",
    "kink_events",
    "status",
    "overview",
    "graph",
    "trajectories",
)
"""Names (`figures/<name>.png`) a sweep may write; panels with nothing to show are not written."""
_ENGINE_KEYS = (
    "out",
    "slots",
    "steps_per_call",
    "resume",
    "overwrite",
    "progress",
    "exact",
    "rows",
    "figures",
    "trajectories",
    "process_index",
    "process_count",
)


def use_cpu_cores(environ=None) -> int | None:
    """Give JAX one CPU device per core this process may use, so that a sweep on a CPU
    splits its slots among every core (`SweepEngine` uses all local devices). Runs before
    JAX starts its backends; it leaves alone a count the user chose
    (`XLA_FLAGS=--xla_force_host_platform_device_count=K` or `JAX_NUM_CPU_DEVICES=K`;
    `K = 1` keeps one device). **Returns:** the count set, or `None` when it left it alone
    (chosen by the user, or JAX's backends already running, e.g. called from Python)."""
    env = os.environ if environ is None else environ
    if "xla_force_host_platform_device_count" in env.get("XLA_FLAGS", "") or env.get("JAX_NUM_CPU_DEVICES"):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        jax.config.update("jax_num_cpu_devices", int(cores))
    except RuntimeError:  # the backends are already initialized: keep what JAX has
        return None
    return int(cores)


def _graph_fields(value: str) -> dict:
    return graph_fields(value)  # a builder name is kept; a file becomes graph="edges" + its edge list


def config_from_args(args) -> tuple:
    """(SweepConfig, engine options) from parsed flags, an optional TOML file and defaults."""
    given = vars(args).copy()
    given.pop("run", None)
    given.pop("command", None)
    values: dict = {}
    if "config" in given:
        values.update(read_config_file(given.pop("config")))
    values.update(given)
    for name, value in sorted(values.items()):
        check_option(name, value)  # TOML values meet the same checks as flags
    engine = {k: values.pop(k) for k in _ENGINE_KEYS if k in values}
    if "graph" in values:
        values.update(_graph_fields(str(values["graph"])))
    if isinstance(values.get("widths"), str):
        try:
            values["widths"] = [int(w) for w in values["widths"].split(",")]
        except ValueError:
            raise ValueError(f"--widths must be comma-separated integers; got {values['widths']!r}.") from None
    known = set(SweepConfig.keys())
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"Unknown sweep option(s) {unknown}; known: {sorted(known | set(_ENGINE_KEYS))}.")
    return SweepConfig.from_dict(values), engine


def run(args) -> int:
    if "status" in vars(args):
        return print_status(vars(args)["status"])
    config, engine = config_from_args(args)
    return run_config(config, **engine)


def print_status(folder) -> int:
    """`--status DIR`: records done, writers and their heartbeats, claims, quarantined files."""
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"--status: {str(folder)!r} is not a folder.")
    st = ResultsStore(folder).status()
    print(
        f"sweep {st['folder']} (config {st['config_hash']}): {st['done']} of {st['n_inits']} "
        f"initializations done, {st['remaining']} to go"
    )
    if st["manifest"] != "ok":
        print(f"  manifest: {st['manifest']} (--resume rebuilds it from the chunks)")
    for w, n in sorted(st["records_by_writer"].items()):
        print(f"  records written by {w}: {n}")
    for w in st["writers"]:
        state = "running" if w["alive"] else "gone (its claims are taken over by the next --resume)"
        print(
            f"  writer {w.get('host')}:{w.get('pid')}:{w.get('id')} {state}, heartbeat {w['heartbeat_age_s']:g} s ago"
        )
    b = st["blocks"]
    print(
        f"  claimed blocks: {b['done']} done, {b['live']} in progress, {b['stale']} stale "
        "(taken over by the next --resume)"
    )
    for q in st["quarantined"]:
        print(f"  quarantined: {q}")
    for d in st["damaged"]:
        print(f"  damaged (set aside by the next --resume): {d}")
    if st["missing"] and not any(w["alive"] for w in st["writers"]):
        shown = ", ".join(map(str, st["missing"][:20])) + (" ..." if len(st["missing"]) > 20 else "")
        print(f"  missing initializations ({len(st['missing'])}, no writer running): {shown}; --resume computes them")
    for c in st["lost_chunks"]:
        print(f"  lost: {c} (a finished claim lists it, but it is gone; --resume recomputes its records)")
    for c in st["other_sweep_chunks"]:
        print(f"  chunk of another sweep (not counted): {c}")
    for f in st["foreign"]:
        print(f"  not written by the store (every command refuses this folder until it is moved): {f}")
    return 0


def _job_share(process_index, process_count):
    if process_index is None and process_count is None:
        return None, None
    env = job_array_share()
    if process_count is None:
        if env is None:
            raise ValueError("--process-index needs --process-count (no job-array variables found).")
        process_count = env[1]
    if process_index is None:
        process_index = env[0] if env is not None else 0
    if not (0 <= process_index < process_count):
        raise ValueError(f"Need 0 <= --process-index < --process-count; got {process_index}, {process_count}.")
    return process_index, process_count


def run_config(
    config,
    *,
    out=DEFAULT_OUT,
    slots=None,
    steps_per_call=None,
    resume=False,
    overwrite=False,
    progress=True,
    exact=None,
    rows=20,
    figures=True,
    trajectories=3,
    process_index=None,
    process_count=None,
    tag=None,
) -> int:
    """Run a sweep, print its summary, and write table.csv, summary.json and figures.

    `exact` and `slots` left `None` are chosen for the devices (`choose_device_mode`:
    exact mode and 256 slots on CPUs, vmap mode and 4096 slots per device on GPUs/TPUs);
    the header says which. `trajectories` example flows are re-integrated for
    `figures/trajectories.png`. Ctrl-C and SIGTERM save the finished records and return
    130 / 143 with one line ("progress saved; rerun with --resume"); a full disk is one
    line naming the folder."""
    out = check_output_folder(out)
    if resume and overwrite:
        raise ValueError(
            "--resume and --overwrite contradict each other: --resume keeps the finished records, "
            "--overwrite deletes them. Pass one of them."
        )
    process_index, process_count = _job_share(process_index, process_count)
    print(
        f"sweep: graph={config.graph} activation={config.activation} init={config.init} "
        f"n_inits={config.n_inits} t1={config.t1:g} solver={config.solver.solver} rtol={config.rtol:g} "
        f"atol={config.atol:g}{' kink-aware' if config.kink_aware else ''} float64 -> {out}"
    )
    exact, slots, mode_line = choose_device_mode(exact=exact, slots=slots)
    print(f"engine: {mode_line}")
    try:
        batch = BatchOptions(slots=slots, steps_per_call=steps_per_call, exact=exact, progress=progress)
        _, stats = run_in_folder(
            config,
            out,
            resume=resume,
            overwrite=overwrite,
            batch=batch,
            process_index=process_index,
            process_count=process_count,
            tag=tag,
        )
        summary = summarize_sweep(config, out, stats=stats)  # from the chunks: the weights stay on disk
        print(summary.table(max_rows=rows))
        print(summary.aggregate_table())
        for line in summary.failure_kinds() + summary.failure_lines() + summary.flagged_lines():
            print(line)
        _write_outputs(ResultsStore(out), summary, figures, trajectories)
    except SweepInterrupted as e:
        print(f"invariant-jax sweep: {e.signal}: progress saved in {str(out)!r}; rerun with --resume", file=sys.stderr)
        return 143 if e.signal == "SIGTERM" else 130
    except OSError as e:
        if is_no_space(e):
            raise ValueError(
                f"No space left on the device holding {str(out)!r} ({e.strerror}); the finished "
                "records are kept: free some space and rerun with --resume."
            ) from None
        raise
    print(f"results: {out}/manifest.json, {out}/chunks/*.parquet, {out}/table.csv, {out}/summary.json")
    return 0  # failed trajectories are data (status column), not an error


def _write_outputs(store: ResultsStore, summary, figures: bool, trajectories: int = 3) -> None:
    """table.csv, summary.json and the figures, each listed in the manifest with its
    SHA-256 before it is written (so that `--overwrite` can prove the store wrote it)."""
    out = store.folder
    with tempfile.TemporaryDirectory() as tmp:
        summary.to_csv(Path(tmp) / "table.csv")
        store.write_output(out / "table.csv", Path(tmp) / "table.csv")  # copied in blocks
        text = dumps_strict(
            {**summary.aggregate, "failures": summary.failures, "flagged": summary.flagged}, indent=2, sort_keys=True
        )
        store.write_output(out / "summary.json", text.encode())
        if figures:
            paths = [
                store.write_output(out / "figures" / p.name, p.read_bytes())
                for p in summary.save_figures(Path(tmp) / "figures", trajectories=trajectories)
            ]
            print(f"figures: {', '.join(str(p) for p in paths)}")
