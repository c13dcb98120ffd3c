"""`invariant-jax connectivity`: explain, in words, the topology of H_G(c) for a graph and
a c read from a file or drawn from an initialization seed."""

from __future__ import annotations

import json
from pathlib import Path

import jax.random as jr
import numpy as np

from .._results import result_message, result_name
from ..invariants import conserved_quantities, singular_point
from ..network import DAGNetwork
from ..sweep import sweep_network
from ..topology import connectivity, plot_invariant_set
from ._common import check_output_path, graph_from_args


def read_c(path: str | Path):
    """Read c from JSON (list or {label: value}) or from 'label value' text lines."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"c file {str(path)!r} does not exist.")
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = {}
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'label value'; got {raw!r}.") from None
            try:
                data[parts[0]] = float(parts[1])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: {parts[1]!r} is not a number.") from None
    if isinstance(data, dict):
        return {str(k): float(v) for k, v in data.items()}
    if isinstance(data, list):
        return [float(v) for v in data]
    raise ValueError(f"{path}: expected a JSON list or object; got {type(data).__name__}.")


def _from_sweep(folder, index: int):
    """`(graph, c0, description)` of row `index` of the sweep in `folder`."""
    net = sweep_network(folder, index)
    c = np.asarray(conserved_quantities(net), dtype=np.float64)
    return net.graph, c, f"c0 of initialization {index} of the sweep in {folder}"


def _c_from_args(args):
    """`(graph, c, description)` from --graph and --c FILE, or a --seed initialization."""
    g = graph_from_args(args)
    if args.c_file is not None:
        c = read_c(args.c_file)
        if isinstance(c, dict):  # labels in files are strings; match graph labels by str()
            by_str = {str(v): v for v in g.hidden}
            c = {by_str.get(k, k): val for k, val in c.items()}
        return g, c, f"c from {args.c_file}"
    net = DAGNetwork(g, "relu", key=jr.key(args.seed), init=args.init, scale=args.scale)
    c = np.asarray(conserved_quantities(net), dtype=np.float64)
    return g, c, f"c = B~ theta^2 of a {args.init} initialization (seed {args.seed}, scale {args.scale:g})"


PLOT_MAX_EDGES = 200


def _plot(g, c, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_invariant_set(g, c, n=3000)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=110)
    plt.close(ax.figure)
    print(f"wrote {path}: H_G(c) on three edge weights, coloured by component")


def run(args) -> int:
    plot_path = check_output_path(args.plot, "--plot", overwrite=args.overwrite)  # before any work
    if plot_path is not None and not str(args.plot).lower().endswith(".png"):
        raise ValueError(f"--plot writes a PNG; give a file name ending in .png (got {args.plot!r}).")
    if args.from_sweep is not None:
        if args.c_file is not None:
            raise ValueError("Give either --c FILE or --from-sweep DIR, not both.")
        g, c, source = _from_sweep(args.from_sweep, args.index)
    else:
        g, c, source = _c_from_args(args)
    if plot_path is not None and not 3 <= len(g.edges) <= PLOT_MAX_EDGES:
        raise ValueError(
            f"--plot draws graphs with 3 to {PLOT_MAX_EDGES} edges; this one has {len(g.edges)}. "
            "Use ij.plot_invariant_set(g, c, edges=[...]) in Python for a chosen projection."
        )
    r = connectivity(g, c, tol=args.tol, lp=args.lp)
    print(f"graph: {g}; {source}")
    print("c: " + ", ".join(f"{v!s}={x:.4g}" for v, x in zip(g.hidden, r.c)))
    print(f"out-bottlenecks: {list(map(str, g.out_bottlenecks))}; in-bottlenecks: {list(map(str, g.in_bottlenecks))}")
    print(r.explain())
    if args.singular:
        if not (args.time_limit > 0 and np.isfinite(args.time_limit)):
            raise ValueError(f"--time-limit must be a positive number of seconds; got {args.time_limit!r}.")
        sp = singular_point(g, r.c, tol=args.tol, time_limit=args.time_limit, progress=True)
        if not sp.success:
            print(f"singular points: {result_name(sp.result)} ({sp.message}) {result_message(sp.result)}")
        elif sp.found:
            assert sp.group is not None  # found: the cut-off group is set
            print(
                f"H_G(c) contains a singular point: the group {sorted(map(str, sp.group))} can be cut off "
                f"(witness residual {sp.residual:.2g})."
            )
        else:
            print("H_G(c) contains no singular point: J_G has full rank everywhere on it.")
    if plot_path is not None:
        _plot(g, r.c, plot_path)
    if not r.success:
        print(f"{result_name(r.result)}: {r.message} {result_message(r.result)}")
    return 0 if r.success else 1
