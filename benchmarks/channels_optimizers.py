"""SGD / Adam on one loss-levels cell, from the Newton study's own inits, beside its verdicts.

The paper says first-order optimisers reach channels too. `channels_loss_levels.py
--optimizers` asks that on `g` with bias, r = 4, where flow-then-Newton itself ends infinite
in only 7% of runs; this script asks it on any cell, e.g. softplus without bias, r = 4, where
flow-then-Newton ends in a confirmed channel from every seed. Each optimiser / learning rate
/ batch size runs `ij.fit` from the inits of seeds 0 .. seeds-1
(`ch.study_inits`, the loss-levels study's), and the final points are
classified with the study's criteria (`weightnorm >= 1e3`, `confirm_channel`, a merging
pair with opposite diverging output weights, whose count at init is stored as its baseline).
With `--newton` (a loss-levels JSON holding the cell) the same seeds' flow-then-Newton
verdicts are printed and stored beside them.
The JSON is written after every optimiser / learning rate.

Usage: python benchmarks/channels_optimizers.py --cell softplus,0,4 --seeds 16 --updates 20000
       [--optimizers sgd,adam] [--sgd-lrs 0.05,0.3] [--adam-lrs 1e-3,1e-2] [--batch-size 32]
       [--newton benchmarks/results/channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, write_json  # noqa: E402 (benchmarks/_output.py)
from channels_loss_levels import channel_like, optimizer_arm  # noqa: E402 (enables float64)
from invariant_jax import channels as ch  # noqa: E402


def channel_like_at_init(activation: str, bias: bool, r: int, seeds: int, n_inputs: int) -> int:
    """How many of the inits already pass the arm's merging-pair test (the baseline of its
    `channel_like` column: with 2-D inputs near-parallel rows are common at random)."""
    g = ij.mlp([n_inputs, r, 1], bias=bias)
    return sum(channel_like(ij.DAGNetwork(g, activation, edge_weights=th)) for th in ch.study_inits(g, seeds))


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"--{name} takes comma-separated numbers, e.g. 0.05,0.3; got {text!r}.") from None


def newton_reference(path: Path, activation: str, bias: bool, r: int, seeds: int, n_grid: int) -> dict:
    """Flow-then-Newton verdicts of seeds 0 .. seeds-1 of one cell of a loss-levels JSON."""
    try:
        doc = json.loads(path.read_text())
        study = ch.ConvergenceStudy.from_dict(doc)
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise SystemExit(f"--newton {path}: not a readable loss-levels JSON ({e}).") from None
    if doc.get("n_grid") != n_grid:
        raise SystemExit(
            f"--newton {path} ran on {doc.get('n_grid')} grid points, this run on {n_grid}; "
            "pass the --grid of that study."
        )
    rec = study.records
    cell = np.flatnonzero(study.select(activation=activation, bias=bias, r=r) & (rec["seed"] < seeds))
    cell = cell[np.argsort(rec["seed"][cell])]
    if len(cell) != seeds:
        raise SystemExit(
            f"--newton {path} holds {len(cell)} of seeds 0..{seeds - 1} of {activation}, bias={bias}, "
            f"r={r}; pass a study of that cell or fewer --seeds."
        )
    pick = lambda k: rec[k][cell].tolist()  # noqa: E731
    return dict(
        path=str(path),
        infinite=int(rec["infinite"][cell].sum()),
        confirmed=int(rec["confirmed"][cell].sum()),
        weightnorm=pick("weightnorm"),
        stopped_by=pick("stopped_by"),
        n_steps=pick("n_steps"),
        mse=pick("mse"),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=10**4, help="requested samples of the regular grid (paper: 10^4)")
    ap.add_argument("--cell", default="softplus,0,4", help="activation,bias(0/1),r")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--optimizers", default="sgd,adam")
    ap.add_argument("--sgd-lrs", default="0.05,0.3")
    ap.add_argument("--adam-lrs", default="1e-3,1e-2")
    ap.add_argument("--updates", type=int, default=20000, help="parameter updates per run (full batch and minibatch)")
    ap.add_argument("--batch-size", type=int, default=32, help="minibatch size (0: full batch only)")
    ap.add_argument("--maxnorm", type=float, default=1e3)
    ap.add_argument("--newton", type=Path, default=None, help="loss-levels JSON of the same cell, for its verdicts")
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--out", default=None, help="JSON path (default benchmarks/results/local/channels_optimizers_<tag>.json)"
    )
    args = ap.parse_args()
    try:
        activation, bias, r = args.cell.split(",")
        bias, r = bool(int(bias)), int(r)
    except ValueError:
        raise SystemExit(f"--cell takes activation,bias,r (e.g. softplus,0,4); got {args.cell!r}.") from None
    if args.seeds < 1 or args.updates < 1:
        raise SystemExit("--seeds and --updates must be >= 1.")
    opts = [o for o in args.optimizers.split(",") if o]
    unknown = set(opts) - {"sgd", "adam"}
    if unknown:
        raise SystemExit(f"--optimizers: unknown {sorted(unknown)}; choose from sgd, adam.")
    lrs = {o: _floats(getattr(args, f"{o}_lrs"), f"{o}-lrs") for o in opts}
    X, Y = ij.rosenbrock_grid(args.grid)
    newton = newton_reference(args.newton, activation, bias, r, args.seeds, int(X.shape[0])) if args.newton else None
    path = output_path(args.out, f"channels_optimizers_{args.tag or f'{activation}_{int(bias)}_{r}'}.json")
    out = dict(
        benchmark="channels_optimizers",
        platform=platform.platform(),
        devices=[str(d) for d in jax.devices()],
        jax=jax.__version__,
        n_grid=int(X.shape[0]),
        activation=activation,
        bias=bias,
        r=r,
        seeds=args.seeds,
        maxnorm=args.maxnorm,
        newton=newton,
        rows=[],
        channel_like_at_init=channel_like_at_init(activation, bias, r, args.seeds, int(X.shape[1])),
    )
    print(f"merging pair with opposite diverging output weights at init: {out['channel_like_at_init']}/{args.seeds}")
    if newton:
        print(
            f"flow-then-Newton on these seeds: infinite {newton['infinite']}/{args.seeds}, confirmed "
            f"{newton['confirmed']}; Newton steps median {np.median(newton['n_steps']):.0f}"
        )
    t = time.perf_counter()
    for opt in opts:
        for lr in lrs[opt]:
            out["rows"] += optimizer_arm(
                X,
                Y,
                seeds=args.seeds,
                lrs={opt: [lr]},
                epochs=args.updates,
                maxnorm=args.maxnorm,
                batch_size=args.batch_size or None,
                activation=activation,
                bias=bias,
                width=r,
            )
            out["total_seconds"] = time.perf_counter() - t
            write_json(path, out)  # after every learning rate: finished rows survive


if __name__ == "__main__":
    main()
