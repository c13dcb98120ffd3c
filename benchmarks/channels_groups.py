"""Channels of three or more neurons in the committed loss-levels studies.

Beyond the paper (issue 28): every end point stored in the loss-levels studies (the
records' `theta`, on `ij.rosenbrock_grid()`) is searched for groups of three or more
first-layer neurons whose input weights merge (`ch.detect_channels(net).groups`, cosine
distance < 1e-2). Each group is merged as one unit (`ch.group_coordinates`): its output
against its gated-linear limit `c sigma(w.u) + (V u) sigma'(w.u)` (`ch.group_limit`;
relative error, max norm over the grid), its `spread` (`max ||w_i - w||`, and over
`||w||`: cosine distance alone also groups parallel input weights of different norms, which
do not merge), and the loss
of the network with the group collapsed into that limit (`ch.collapse_channel`) beside the
run's own. The run's pair verdict (`confirmed`: a merging pair whose GLU limit fits to 1%)
and the worst pair GLU error it recorded (`glu_error`) stand beside, so that a group the
pair test fails on is visible. No flow is run: only the stored end points are read.

Usage: python benchmarks/channels_groups.py [--out benchmarks/results/channels_groups.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
import invariant_jax.channels as ch  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax.losses import network_loss  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STUDIES = (  # the loss-levels studies whose records keep the end points
    "channels_loss_levels_paper_g_bias_cpu_seeds100.json",
    "channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json",
    "channels_loss_levels_paper_softplus_bias_cpu_seeds100.json",
)
GLU_TOL = 1e-2  # confirm_channel's fit tolerance


def groups_of(name: str, X, Y) -> tuple[list, int]:
    rec = json.loads((RESULTS / name).read_text())["records"]
    rows, scanned = [], 0
    for i, theta in enumerate(rec["theta"]):
        th = np.asarray(theta, float)
        if rec["r"][i] < 3 or not np.all(np.isfinite(th)):
            continue
        scanned += 1
        g = ij.mlp([X.shape[1], rec["r"][i], 1], bias=bool(rec["bias"][i]))
        net = ij.DAGNetwork(g, rec["activation"][i], edge_weights=th)
        groups = ch.detect_channels(net).groups
        loss = float(network_loss(net, X, Y)) if groups else float("nan")
        for members in groups:
            grp = ch.group_coordinates(net, members)
            out, lim = np.asarray(ch.group_output(grp, X)), np.asarray(grp.limit(X))
            rows.append(
                dict(
                    study=name,
                    activation=rec["activation"][i],
                    bias=bool(rec["bias"][i]),
                    r=int(rec["r"][i]),
                    seed=int(rec["seed"][i]),
                    size=len(members),
                    neurons=[int(k) for k in members],
                    spread=float(grp.spread),
                    relative_spread=float(grp.spread / np.linalg.norm(np.asarray(grp.w))),
                    c=float(grp.c[0]),
                    V_norm=float(np.linalg.norm(np.asarray(grp.V))),
                    group_error=float(np.max(np.abs(out - lim)) / max(np.max(np.abs(lim)), 1e-300)),
                    loss=loss,
                    collapsed_loss_gap=float(network_loss(ch.collapse_channel(net, grp), X, Y)) - loss,
                    infinite=bool(rec["infinite"][i]),
                    confirmed=bool(rec["confirmed"][i]),
                    pair_glu_error=float(rec["glu_error"][i]),
                    channel_paper=bool(rec["channel_paper"][i]),
                )
            )
    return rows, scanned


def summarize(rows: list) -> list:
    cells = defaultdict(list)
    for row in rows:
        cells[(row["activation"], row["bias"], row["r"])].append(row)
    out = []
    for (act, bias, r), rs in sorted(cells.items()):
        fit = [x["group_error"] < GLU_TOL for x in rs]
        out.append(
            dict(
                activation=act,
                bias=bias,
                r=r,
                groups=len(rs),
                runs_with_group=len({x["seed"] for x in rs}),
                sizes=sorted({x["size"] for x in rs}),
                infinite=sum(x["infinite"] for x in rs),
                group_fits=sum(fit),
                pair_confirmed=sum(x["confirmed"] for x in rs),
                group_fits_pair_not=sum(f and not x["confirmed"] for f, x in zip(fit, rs)),
                median_group_error=float(np.median([x["group_error"] for x in rs])),
                median_pair_glu_error=float(np.nanmedian([x["pair_glu_error"] for x in rs])),
                median_spread=float(np.median([x["spread"] for x in rs])),
                median_relative_spread=float(np.median([x["relative_spread"] for x in rs])),
                merged=sum(x["relative_spread"] < 0.1 for x in rs),
                max_abs_collapsed_loss_gap=float(np.max(np.abs([x["collapsed_loss_gap"] for x in rs]))),
            )
        )
    return out


def figure(rows: list, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    for (act, bias), color in ((("softplus", False), "C0"), (("softplus", True), "C1"), (("g", True), "C2")):
        rs = [x for x in rows if x["activation"] == act and x["bias"] == bias]
        if rs:
            ax.scatter(
                [x["pair_glu_error"] for x in rs],
                [x["group_error"] for x in rs],
                s=12,
                c=color,
                label=f"{act}, {'bias' if bias else 'no bias'} ({len(rs)})",
            )
    ax.axhline(GLU_TOL, color="k", lw=0.6, ls="--")
    ax.axvline(GLU_TOL, color="k", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("worst pair's GLU error (the run's confirm_channel)")
    ax.set_ylabel("the group's error against its limit")
    ax.set_title("groups of 3+ merging neurons, loss-levels end points", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/local/channels_groups.json)")
    args = ap.parse_args()
    path = output_path(args.out, "channels_groups.json")
    t = time.perf_counter()
    X, Y = ij.rosenbrock_grid()
    rows, scanned = [], {}
    for name in STUDIES:
        found, scanned[name] = groups_of(name, X, Y)
        rows += found
        print(f"{name}: {scanned[name]} end points with r >= 3, {len(found)} groups", flush=True)
    figure(rows, path.with_suffix(".png"))
    write_json(
        path,
        dict(
            benchmark="channels_groups",
            studies=list(STUDIES),
            data=f"ij.rosenbrock_grid(): {X.shape[0]} points",
            glu_tol=GLU_TOL,
            scanned=scanned,
            summary=summarize(rows),
            groups=rows,
            seconds=time.perf_counter() - t,
        ),
    )


if __name__ == "__main__":
    main()
