"""Merge loss-levels study parts (`channels_loss_levels.py` JSONs of one method run over
other seeds, widths or sessions, e.g. with `--first-seed`) into one JSON and PNG.

The parts must share the method (`ConvergenceStudy.METHOD_SETTINGS`: tolerances,
budgets, criteria, grid, init) and hold disjoint runs; otherwise nothing is written and
the error names the difference. The summary (% infinite / duplicates with Wilson 95%
intervals, confirmed channels, loss levels) is recomputed over all runs. The output must
not be one of the inputs.

`--seeds-per-width 10,20,40,80,160` keeps, of each cell of width r, its first n_r seeds
(the r-th number, for the r-th width in increasing order): the authors' scheme in
`scripts/simulations/loss_levels.jl`, 10 / 20 / 40 / 80 / 160 seeds for r = 1..5.

Usage: python benchmarks/channels_merge.py PART.json [PART.json ...] [--seeds-per-width N,N,...]
       [--out MERGED.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from channels_loss_levels import figures  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402


def add_sharpened(study, doc, path):
    """The `sharpened` column (`ch.sharpened_neuron`) of a part written before it existed,
    recomputed from its final weights on the grid its command used."""
    import shlex

    import jax
    import jax.numpy as jnp
    import numpy as np

    import invariant_jax as ij

    jax.config.update("jax_enable_x64", True)
    words = shlex.split(doc.get("command") or "")
    grid = int(words[words.index("--grid") + 1]) if "--grid" in words else 10**4
    X, _ = ij.rosenbrock_grid(grid)
    rec = study.records
    if X.shape[0] != doc.get("n_grid") or set(rec["label"].tolist()) != {"rosenbrock"}:
        print(f"{path}: no sharpened column (its data set could not be rebuilt); the merge leaves it out")
        return
    out = []
    for i in range(len(rec["loss"])):
        if not rec["infinite"][i] or rec["confirmed"][i]:
            out.append(False)
            continue
        g = ij.mlp([2, int(rec["r"][i]), 1], bias=bool(rec["bias"][i]))
        net = ij.DAGNetwork(g, str(rec["activation"][i]), edge_weights=jnp.asarray(rec["theta"][i]))
        out.append(ch.sharpened_neuron(net, X)[0])
    rec["sharpened"] = np.asarray(out)
    print(f"{path}: sharpened column recomputed ({sum(out)} of {int(rec['infinite'].sum())} infinite runs)")


def _ran(study, cell) -> bool:
    """Whether another part ran all the seeds of a cell that one part did not run."""
    seeds = set(range(cell["first_seed"], cell["first_seed"] + cell["n_seeds"]))
    m = study.select(activation=cell["activation"], bias=cell["bias"], r=cell["r"])
    return seeds <= set(study.records["seed"][m].tolist())


def first_seeds(study, per_width: list[int]):
    """`study` with, of each cell of its k-th width (in increasing order), only the
    `per_width[k]` smallest seeds; a cell with fewer runs is an error."""
    rec = study.records
    widths = sorted({int(r) for r in rec["r"].tolist()})
    if len(per_width) != len(widths):
        raise SystemExit(f"--seeds-per-width gives {len(per_width)} counts for the {len(widths)} widths {widths}.")
    n_of = dict(zip(widths, per_width))
    keep = np.zeros(len(rec["loss"]), bool)
    for cell in sorted({(a, b, int(r)) for a, b, r in zip(rec["activation"], rec["bias"], rec["r"])}, key=str):
        m = np.flatnonzero(study.select(activation=cell[0], bias=cell[1], r=cell[2]))
        n = n_of[cell[2]]
        if len(m) < n:
            raise SystemExit(f"cell {cell} has {len(m)} runs, fewer than the {n} that --seeds-per-width asks for.")
        keep[m[np.argsort(rec["seed"][m], kind="stable")[:n]]] = True
    settings = dict(study.settings, n_seeds=sorted(set(per_width)), seeds_per_width=n_of)
    return ch.ConvergenceStudy(records={k: v[keep] for k, v in rec.items()}, settings=settings, seconds=study.seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", type=Path)
    ap.add_argument(
        "--seeds-per-width",
        default=None,
        help="comma-separated seed counts, one per width in increasing order: keep each cell's first seeds",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/local/channels_loss_levels_merged.json); the PNG goes beside it",
    )
    args = ap.parse_args()
    out = output_path(args.out, "channels_loss_levels_merged.json").resolve()
    if out in {p.resolve() for p in args.parts}:
        raise SystemExit(f"--out {args.out} is one of the inputs; write the merge to a new file.")
    docs = []
    for p in args.parts:
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"cannot read {p}: {e}") from None
        if d.get("benchmark") != "channels_loss_levels":
            raise SystemExit(f"{p} is not a channels_loss_levels result (benchmark={d.get('benchmark')!r}).")
        docs.append(d)
    parts = [ch.ConvergenceStudy.from_dict(d) for d in docs]
    for p, d, st in zip(args.parts, docs, parts):
        if "sharpened" not in st.records:  # a part written before the column existed
            add_sharpened(st, d, p)
    common = set.intersection(*(set(st.records) for st in parts))
    parts = [
        ch.ConvergenceStudy(
            records={k: v for k, v in st.records.items() if k in common}, settings=st.settings, seconds=st.seconds
        )
        for st in parts
    ]
    try:
        study = ch.ConvergenceStudy.merge(parts)
    except ValueError as e:
        raise SystemExit(f"not merged: {e}") from None
    if args.seeds_per_width:
        study = first_seeds(study, [int(v) for v in args.seeds_per_width.split(",")])
    print(study.table())
    merged = dict(
        benchmark="channels_loss_levels",
        devices=sorted({str(x) for d in docs for x in d.get("devices", [])}),
        platform=docs[0].get("platform"),
        jax=docs[0].get("jax"),
        merged_from=[
            dict(
                path=str(p),
                command=d.get("command"),
                total_seconds=d.get("total_seconds"),
                devices=d.get("devices"),
                platform=d.get("platform"),
                runs=len(d["records"]["loss"]),
            )
            for p, d in zip(args.parts, docs)
        ],
        total_seconds=sum(float(d.get("total_seconds", 0.0)) for d in docs),
        n_grid=docs[0].get("n_grid"),
        cell_seconds=[c for d in docs for c in d.get("cell_seconds", [])],
        cells_not_run=[c for d in docs for c in d.get("cells_not_run", []) if not _ran(study, c)],
        summary=study.summary(),
        **study.to_dict(),
    )
    write_json(out, json.loads(json.dumps(merged, default=str)))
    figures(study, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
