"""The flat-channels paper's roughness study (its Fig. 4 "% channels per dataset", from
scripts/simulations/scaling.jl): Matérn-3/2 GP teachers with kernel input scalings
s = 0.1, 0.5, 2, 10 (length scale 1/s) on 2-D standard-normal inputs, softplus
networks with biases and r = 4 hidden neurons, MLPGradientFlow-Glorot inits, the same
flow + Newton pipeline and criteria as channels_loss_levels.py. The paper counts a
channel when weightnorm > 1e3 and the closest pair of first-layer rows has cosine
distance < 1e-2 (`channel_paper`); every infinite run is also checked with
`confirm_channel` (`confirmed`).

In the paper every seed draws its own inputs, teacher function and init. Here each of
`--teachers` GP draws (inputs + function) gets `--inits` initializations, trained as one
batch; runs = teachers x inits per scaling.

Full size (the paper's 10^4 samples, 100 runs per scaling) takes about 30 s per run on one
CPU core: the committed run split the scalings over two processes (`--scalings 0.1,0.5` and
`--scalings 2,10`, one per core) and merged them with `--merge`. `--first-teacher` runs the
rest of a study cut short by `--max-minutes`.

Usage: python benchmarks/channels_roughness.py [--samples 10000] [--teachers 10] [--inits 10] [--r 4]
       python benchmarks/channels_roughness.py --merge PART.json [PART.json ...] --out MERGED.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402
from invariant_jax.datasets import PAPER_GP_SCALINGS  # noqa: E402


def teacher_spread(study, n_boot=10_000, seed=0):
    """Per scaling: the counts per teacher (infinite, paper's channel criterion, confirmed)
    and a 95% interval of each fraction from a cluster bootstrap over teachers (teachers
    drawn with replacement, all their runs kept). Runs of one teacher share its data, so
    they are not independent draws; the Wilson interval of the summary treats them as if
    they were, and this one does not."""
    rec = study.records
    rng = np.random.default_rng(seed)
    out = {}
    for label in dict.fromkeys(rec["label"].tolist()):
        m = rec["label"] == label
        teachers = np.unique(rec["teacher"][m])
        row = {"teachers": len(teachers)}
        for key in ("infinite", "channel_paper", "confirmed"):
            hits = np.array([rec[key][m & (rec["teacher"] == t)].sum() for t in teachers], float)
            runs = np.array([(m & (rec["teacher"] == t)).sum() for t in teachers], float)
            draw = rng.integers(0, len(teachers), size=(n_boot, len(teachers)))
            frac = hits[draw].sum(1) / runs[draw].sum(1)
            row[f"{key}_per_teacher"] = hits.astype(int).tolist()
            row[f"{key}_ci_teacher_bootstrap"] = np.percentile(frac, [2.5, 97.5]).tolist()
        out[label] = row
    return out


def _write(path, study, scalings, seconds, teachers_requested, **extra):
    summ = study.summary(by=("label",))
    labels = study.records["label"]
    n_teachers = min(len(np.unique(study.records["teacher"][labels == f"s={s:g}"])) for s in scalings)
    out = dict(
        benchmark="channels_roughness",
        platform=platform.platform(),
        devices=[str(d) for d in jax.devices()],
        jax=jax.__version__,
        total_seconds=seconds,
        scalings=scalings,
        teachers_done=n_teachers,
        teachers_requested=teachers_requested,
        summary=summ,
        teacher_spread=teacher_spread(study),
        **extra,
        **study.to_dict(),
    )
    write_json(path, json.loads(json.dumps(out, default=str)))
    return summ


def merge(paths, out):
    """One study from parts run separately (e.g. `--scalings 0.1,0.5` and `--scalings 2,10` on
    two cores): the parts must share the method and hold disjoint runs (scaling, teacher,
    init). Parts written before the `teacher` column get it from their order (teacher-major
    within each scaling), which is checked against their seeds."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    studies = []
    for p, d in zip(paths, docs):
        st = ch.ConvergenceStudy.from_dict(d)
        rec = st.records
        if "teacher" not in rec:
            inits = int(d["settings"]["n_seeds"])
            rec["teacher"] = np.zeros(len(rec["label"]), int)
            for label in set(rec["label"].tolist()):
                idx = np.flatnonzero(rec["label"] == label)
                if idx.size % inits or not np.array_equal(
                    rec["seed"][idx], np.tile(np.arange(inits), idx.size // inits)
                ):
                    raise ValueError(
                        f"{p}: the runs of {label} are not whole teachers of {inits} inits in order; "
                        "cannot tell their teachers apart."
                    )
                rec["teacher"][idx] = np.arange(idx.size) // inits
        studies.append(st)
    study = ch.ConvergenceStudy.merge(studies)  # same method; no (scaling, teacher, init) twice
    rec = study.records
    scalings = [s for s in PAPER_GP_SCALINGS if f"s={s:g}" in set(rec["label"].tolist())]
    parts = [{k: d.get(k) for k in ("command", "total_seconds", "platform", "devices", "jax")} for d in docs]
    summ = _write(
        out,
        study,
        scalings,
        sum(d["total_seconds"] for d in docs),
        max(d.get("teachers_requested", d.get("teachers_done", 0)) for d in docs),
        parts=parts,
    )
    for row in summ:
        print(
            f"{row['label']:>8}: infinite {row['infinite']}/{row['n']}, paper channel {row['channel_paper']}, "
            f"confirmed {row['confirmed']}"
        )
    figure(summ, scalings, out)


def figure(summ, scalings, path):
    """% infinite, % channels by the paper's criterion and % confirmed channels per scaling,
    with Wilson 95% bars, as a PNG beside `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3))
    labels = [f"s={s:g}" for s in scalings]
    rows = {r["label"]: r for r in summ}
    for off, key, name in (
        (-0.27, "infinite", "infinite (weightnorm >= 1e3)"),
        (0.0, "channel_paper", "paper's channel criterion"),
        (0.27, "confirmed", "confirmed channel"),
    ):
        f = np.array([rows[lb][f"{key}_fraction"] for lb in labels]) * 100
        ci = np.array([rows[lb][f"{key}_ci"] for lb in labels]) * 100
        x = np.arange(len(labels)) + off
        ax.bar(x, f, width=0.27, label=name)
        ax.errorbar(x, f, yerr=[f - ci[:, 0], ci[:, 1] - f], fmt="none", ecolor="k", capsize=3)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of runs (Wilson 95%)")
    ax.set_xlabel("GP kernel input scaling (roughness)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path.with_suffix(".png"), dpi=110)
    print(f"wrote {path.with_suffix('.png')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10**4)
    ap.add_argument("--teachers", type=int, default=10)
    ap.add_argument("--inits", type=int, default=10)
    ap.add_argument(
        "--first-teacher",
        type=int,
        default=0,
        help="run teachers K .. --teachers - 1 only (the rest of a study cut short; merge with --merge)",
    )
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--scalings", default=",".join(str(s) for s in PAPER_GP_SCALINGS))
    ap.add_argument("--max-flow-steps", type=int, default=2000)
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument(
        "--engine",
        default="vmap",
        choices=("sweep", "vmap", "loop"),
        help="flow phase: one vmap of gradient_flow (suits a GPU), ij.sweep_flows, or one run at a time "
        "(fastest on a CPU); all compile once per data shape",
    )
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=float("inf"),
        help="train no new teacher after this many minutes (the JSON records how many ran)",
    )
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/local/channels_roughness_<tag>.json); the PNG goes beside it",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="PART.json",
        help="merge parts run separately (other scalings) into --out, then stop",
    )
    args = ap.parse_args()
    if args.merge:
        out = output_path(args.out, f"channels_roughness_{args.tag or 'merged'}.json")
        if any(Path(p).resolve() == out.resolve() for p in args.merge):
            raise SystemExit(f"--out {out} is one of the parts; write the merge elsewhere.")
        merge(args.merge, out)
        return
    scalings = [float(s) for s in args.scalings.split(",")]
    tag = args.tag or f"n{args.samples}_runs{args.teachers * args.inits}"
    print(
        f"{jax.devices()}; {args.samples} samples; {args.teachers} teachers x {args.inits} inits per scaling",
        flush=True,
    )
    t = time.perf_counter()
    path = output_path(args.out, f"channels_roughness_{tag}.json")
    parts = []
    # teachers in the order m = 0, 1, ... across the scalings, so that a time budget
    # leaves every scaling with the same number of teachers
    order = [(m, k, s) for m in range(args.first_teacher, args.teachers) for k, s in enumerate(scalings)]
    flow = ij.FlowPhaseOptions(max_flow_steps=args.max_flow_steps, flow_stop="stop", n_record=0, engine=args.engine)
    newton = ij.NewtonOptions(max_steps=args.max_steps)
    for m, k, s in order:
        if k == 0 and time.perf_counter() - t > 60 * args.max_minutes:
            break  # only between full rounds of teachers
        # the teacher's key follows the scaling's place in the paper's list, so one scaling
        # run alone (--scalings 2) draws the same teachers as the full run
        kk = list(PAPER_GP_SCALINGS).index(s) if s in PAPER_GP_SCALINGS else k
        X, Y = ij.gp_data(args.samples, args.dim, roughness=s, key=jr.fold_in(jr.key(1000 + kk), m))
        # one compilation for all teachers (same data shape)
        grid = ch.StudyGrid(widths=(args.r,), activations=("softplus",), biases=(True,), n_seeds=args.inits, seed=m)
        st = ch.convergence_study(X, Y, grid=grid, flow=flow, newton=newton, label=f"s={s:g}", progress=False)
        st.records["teacher"] = np.full(args.inits, m)
        parts.append(st)
        rec = st.records
        print(
            f"s={s:g} teacher {m}: infinite {int(rec['infinite'].sum())}/{args.inits}, paper channel "
            f"{int(rec['channel_paper'].sum())}, confirmed {int(rec['confirmed'].sum())}, median MSE "
            f"{np.median(rec['mse']):.3g} ({time.perf_counter() - t:.0f} s)",
            flush=True,
        )
        if k == len(scalings) - 1:  # a full round of teachers: write what we have
            _write(path, ch.ConvergenceStudy.concatenate(parts), scalings, time.perf_counter() - t, args.teachers)
    study = ch.ConvergenceStudy.concatenate(parts)
    summ = _write(path, study, scalings, time.perf_counter() - t, args.teachers)
    print(study.table(by=("label", "r")))
    for row in summ:
        lo, hi = row["channel_paper_ci"]
        print(
            f"{row['label']:>8}: paper channel {row['channel_paper']}/{row['n']} = {100 * row['channel_paper_fraction']:.1f}% "
            f"[{100 * lo:.1f}, {100 * hi:.1f}]; infinite {row['infinite']}, confirmed {row['confirmed']}"
        )
    figure(summ, scalings, path)


if __name__ == "__main__":
    main()
