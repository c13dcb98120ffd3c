"""`invariant-jax connectivity`: explain, in words, the topology of H_G(c) for a graph and
a c read from a file or drawn from an initialization seed."""

from __future__ import annotations

import json
from pathlib import Path

import jax.random as jr
import numpy as np

from .._results import result_message, result_name
from ..invariants import conserved_quantities, singular_point
from ..network import INITIALIZERS, DAGNetwork
from ..sweep import sweep_network
from ..topology import connectivity
from ._common import add_graph_args, graph_from_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "connectivity", help="explain the connected components of H_G(c) in words",
        description="Say whether the invariant set H_G(c) = {theta : B~ theta^2 = c} is connected, "
        "which edges are frozen (can never change sign under gradient flow) and why: the "
        "bottleneck, the set S whose balance condition fails and sum_S c. c comes from --c FILE, "
        "from row --index of a sweep's results folder (--from-sweep DIR; its graph too), or from a "
        "random initialization (--seed, --init, --scale). The LP verdict (HiGHS) is checked "
        "against the combinatorial one.")
    add_graph_args(p)
    p.add_argument("--c", dest="c_file", default=None,
                   help="file with c: JSON (a list in graph.hidden order, or {label: value}), or text "
                   "lines 'label value' (default: draw c from an initialization)")
    p.add_argument("--from-sweep", metavar="DIR", default=None,
                   help="explain a row of the sweep in DIR: its graph and the c0 of initialization --index")
    p.add_argument("--index", type=int, default=0, help="with --from-sweep: the row's initialization index")
    p.add_argument("--seed", type=int, default=0,
                   help="initialization seed when --c and --from-sweep are not given (key(seed), not a sweep's "
                        "init: use --from-sweep DIR --index I for that)")
    p.add_argument("--init", default="glorot", choices=INITIALIZERS)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--tol", type=float, default=None, help="sums within tol of 0 count as 0 (default: see docs)")
    p.add_argument("--lp", default="candidates", choices=("candidates", "all", "none"))
    p.add_argument("--singular", action="store_true", help="also decide whether H_G(c) contains a singular point "
                   "(exact subset-sum enumeration per hidden component of <= 40 nodes, else a MILP bounded by "
                   "--time-limit)")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds for the singular-point MILP when it is needed (default: 60); then 'undecided'")
    p.set_defaults(run=run)


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


def run(args) -> int:
    if args.from_sweep is not None:
        if args.c_file is not None:
            raise ValueError("Give either --c FILE or --from-sweep DIR, not both.")
        g, c, source = _from_sweep(args.from_sweep, args.index)
    else:
        g, c, source = _c_from_args(args)
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
            print(f"H_G(c) contains a singular point: the group {sorted(map(str, sp.group))} can be cut off "
                  f"(witness residual {sp.residual:.2g}).")
        else:
            print("H_G(c) contains no singular point: J_G has full rank everywhere on it.")
    if not r.success:
        print(f"{result_name(r.result)}: {r.message} {result_message(r.result)}")
    return 0 if r.success else 1
