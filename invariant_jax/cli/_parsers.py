"""The command line's parsers: every subcommand's flags, with no JAX import, so that
`invariant-jax --help` and argument errors answer at once. Each subcommand's work lives
in `cli/_<name>.py` (`run(args)`), imported only after parsing."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from .._defaults import KINK_MAX_STEPS, MAX_STEPS

SUBCOMMANDS = ["demo", "check", "sweep", "prune", "connectivity", "channels"]

_SHARED = {"MAX_STEPS": MAX_STEPS, "KINK_MAX_STEPS": KINK_MAX_STEPS}
"""The shared defaults (`_defaults.py`, JAX-free) that option classes name as field defaults."""


def config_defaults() -> dict:
    """`SweepConfig`'s defaults that are literals, read from the source without importing
    it (it imports JAX): the defaults `--help` shows for `sweep`, `demo` and `check`. The
    plain fields' come from `SweepConfig`, the option tables' (`rtol`, `n_save`, `loss`,
    ...) from the option objects it holds (`SolverOptions`, `SaveTimes`, `StopRules`,
    `Objective`). Each default stays written once, in the class that owns it."""
    root = Path(__file__).resolve().parent.parent
    out = _literal_defaults(root / "options.py", ("SolverOptions", "SaveTimes", "StopRules", "Objective"))
    out.update(_literal_defaults(root / "sweep" / "_config.py", ("SweepConfig",)))
    return out


def _literal_defaults(path: Path, classes: tuple[str, ...]) -> dict:
    """The literal field defaults of `classes` in the source file `path` (a name of a
    shared default in `_defaults` counts as its value; other expressions are skipped: the
    flag's help says them)."""
    out = {}
    for cls in ast.parse(path.read_text()).body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in classes):
            continue
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if isinstance(node.value, ast.Name) and node.value.id in _SHARED:  # a shared default
                    out[node.target.id] = _SHARED[node.value.id]
                    continue
                try:
                    out[node.target.id] = ast.literal_eval(node.value)
                except ValueError:  # not a literal (e.g. an option object): skipped
                    continue
    return out


def add_graph_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("graph")
    g.add_argument(
        "--graph", default="example", help="builder name (example, mlp, random) or an edge-list file (default: example)"
    )
    g.add_argument("--widths", default="5,8,1", help="mlp widths, comma-separated (default: 5,8,1)")
    g.add_argument("--bias", action="store_true", help="add a bias (constant) node")
    g.add_argument("--n-inputs", type=int, default=3)
    g.add_argument("--n-hidden", type=int, default=8)
    g.add_argument("--n-outputs", type=int, default=1)
    g.add_argument("--edge-prob", type=float, default=0.4)
    g.add_argument("--graph-seed", type=int, default=0)


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--n-samples", type=int, default=20, help="teacher-student samples (default: 20)")
    g.add_argument("--data-seed", type=int, default=1)


NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def accept_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """Let `--atol -1e-8` reach the validator (argparse takes `-1e-8` for an option and
    says "expected one argument"): negative numbers in any notation are values."""
    parser._negative_number_matcher = NEGATIVE_NUMBER  # argparse's own hook for '-1', '-.5'
    parser._has_negative_number_optionals = []


DEMO_OUT = "runs/demo"


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="run the built-in sweep (example DAG, teacher-student data) into runs/demo",
        description="The default sweep: gradient flow from 256 initializations of the example DAG "
        "(skip connections and an out-bottleneck) on teacher-student data. Prints the summary table "
        f"and writes the results folder and figures to {DEMO_OUT}, replacing an earlier demo there (and only "
        "a demo: a folder holding another sweep, or any file the store did not write, is refused).",
    )
    p.add_argument("--out", default=DEMO_OUT, help=f"results folder (default {DEMO_OUT})")
    p.add_argument("--n-inits", type=int, default=256)
    p.add_argument(
        "--no-kink-aware",
        dest="kink_aware",
        action="store_false",
        default=None,
        help="plain integration across the ReLU kinks instead of the exact kink-aware flow",
    )


N_INITS = 4  # check's own default: a few initializations (a sweep's is SweepConfig.n_inits)


def add_check_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="check that gradient flow conserves c = B~ theta^2",
        description="Run gradient flow from several random initializations and report, per "
        "trajectory, the drift of c = B~ theta^2 in units of the tolerance and the "
        "residual of the identity B~(theta * grad L) = 0. Initialization i is the sweep's "
        "(fold_in(key(seed), i)), integrated as `sweep` does: kink-aware for relu / leaky_relu "
        "unless --no-kink-aware, with the sweep's defaults for every option not given.",
    )
    add_graph_args(p)
    add_data_args(p)
    add_check_args(p)


def add_check_args(p) -> None:
    """The flow options; their defaults are `SweepConfig`'s (shown in --help), except
    `--n-inits` (a few)."""
    p.add_argument("--activation", default=None, help="hidden activation")
    p.add_argument("--init", default=None, help="glorot, kaiming or normal")
    p.add_argument("--n-inits", type=int, default=N_INITS)
    p.add_argument("--seed", type=int, default=None, help="init i uses fold_in(key(seed), i), as in sweep")
    p.add_argument("--t1", type=float, default=None, help="final gradient-flow time")
    p.add_argument("--rtol", type=float, default=None)
    p.add_argument("--atol", type=float, default=None)
    p.add_argument("--solver", default=None, help="(kink-aware: the solver inside each activation pattern)")
    p.add_argument("--max-steps", type=int, default=None, help="step budget per trajectory")
    kink = p.add_mutually_exclusive_group()  # both at once is an error, as in sweep
    kink.add_argument(
        "--kink-aware",
        dest="kink_aware",
        action="store_true",
        default=None,
        help="relu/leaky_relu (the default there, as in sweep): integrate within activation patterns, "
        "locate kinks as events, follow sliding modes",
    )
    kink.add_argument(
        "--no-kink-aware",
        dest="kink_aware",
        action="store_false",
        default=None,
        help="relu/leaky_relu: plain integration across the kinks (not exact there)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="measure even for an activation without a conservation law (rows then say 'no law')",
    )


DEFAULT_OUT = "runs/sweep"


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="gradient flow from many initializations: statistics, figures, results folder",
        description="Run exact gradient flow from many random initializations with a continuous-"
        "batching engine, write every trajectory's record to a resumable results folder, and "
        "summarise conservation drift, rank of J_G, connectivity of H_G(c0), bottleneck sign "
        "changes, final loss and steps. Options come from flags, a TOML --config, or the built-in "
        "default (the example DAG with skip connections and a bottleneck, on teacher-student data). "
        "Flags override the TOML file. Time is gradient-flow time of L = (1/2N) sum ||f - y||^2.",
    )
    add_sweep_args(p)


_S = argparse.SUPPRESS  # sweep's flags: absent from the namespace unless given


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """`sweep`'s flags, in `--help`'s order. Every default is `SUPPRESS`: a flag not given
    leaves the TOML file's value (or `SweepConfig`'s default) in place."""
    p.add_argument("--config", default=_S, help="TOML file of sweep options (keys as the flags, with _)")
    _add_sweep_graph_args(p.add_argument_group("graph"))
    _add_sweep_network_args(p.add_argument_group("networks and data"))
    f = p.add_argument_group("flow")
    _add_sweep_flow_args(f)
    _add_sweep_stop_args(f)
    _add_sweep_kink_args(f)
    e = p.add_argument_group("engine and output")
    _add_sweep_engine_args(e)
    _add_sweep_store_args(e)
    _add_sweep_mode_args(e)
    _add_sweep_display_args(e)


def _add_sweep_graph_args(g) -> None:
    g.add_argument("--graph", default=_S, help="builder (example, mlp, random) or an edge-list file; default example")
    g.add_argument("--widths", default=_S, help="mlp widths, comma-separated (default 5,8,1)")
    g.add_argument("--bias", action="store_true", default=_S, help="add a bias node (mlp, random)")
    g.add_argument("--n-inputs", type=int, default=_S)
    g.add_argument("--n-hidden", type=int, default=_S)
    g.add_argument("--n-outputs", type=int, default=_S)
    g.add_argument("--edge-prob", type=float, default=_S)
    g.add_argument("--graph-seed", type=int, default=_S)


def _add_sweep_network_args(n) -> None:
    n.add_argument("--activation", default=_S, help="hidden activation (default relu)")
    n.add_argument("--init", default=_S, help="glorot (default), kaiming or normal")
    n.add_argument("--scale", type=float, default=_S, help="multiplies the initializer's std (default 1)")
    n.add_argument("--n-samples", type=int, default=_S, help="teacher-student samples (default 20)")
    n.add_argument("--data-seed", type=int, default=_S)


def _add_sweep_flow_args(f) -> None:
    f.add_argument("--n-inits", type=int, default=_S, help="number of initializations (default 256)")
    f.add_argument("--seed", type=int, default=_S, help="init i uses fold_in(key(seed), i) (default 0)")
    f.add_argument("--t1", type=float, default=_S, help="final gradient-flow time (default 1)")
    f.add_argument("--solver", default=_S, help="tsit5 (default), dopri5, dopri8, ...")
    f.add_argument("--rtol", type=float, default=_S, help="default 1e-8")
    f.add_argument("--atol", type=float, default=_S, help="default 1e-8")
    f.add_argument("--max-steps", type=int, default=_S, help=f"step budget per trajectory (default {MAX_STEPS})")
    f.add_argument("--n-save", type=int, default=_S, help="times at which drift is measured (default 101)")


def _add_sweep_stop_args(f) -> None:  # StopRules and weight decay
    f.add_argument("--grad-norm-tol", type=float, default=_S, help="stop a trajectory once |grad L| < this")
    f.add_argument("--loss-floor", type=float, default=_S, help="stop a trajectory once its loss < this")
    f.add_argument("--max-param-norm", type=float, default=_S, help="stop a trajectory once |theta| > this")
    f.add_argument("--weight-decay", type=float, default=_S)


def _add_sweep_kink_args(f) -> None:  # KinkOptions
    kink = f.add_mutually_exclusive_group()  # `--kink-aware --no-kink-aware` is an error, not "the last wins"
    kink.add_argument(
        "--kink-aware",
        action="store_true",
        default=_S,
        help="relu/leaky_relu (the default there, unless a stopping rule or weight decay is set): "
        "integrate within activation patterns, locate kinks as events, follow sliding modes "
        "(--solver is then the solver inside a pattern, e.g. gauss4)",
    )
    kink.add_argument(
        "--no-kink-aware",
        dest="kink_aware",
        action="store_false",
        default=_S,
        help="relu/leaky_relu: plain integration across the kinks (not exact there)",
    )
    f.add_argument(
        "--max-events",
        type=int,
        default=_S,
        help="kink-aware: cap on located kink events per trajectory (default 1000; ij.KinkOptions)",
    )
    f.add_argument(
        "--max-sliding",
        type=int,
        default=_S,
        help="kink-aware: most (sample, node) pairs sliding at once (default 16; 0 disables sliding)",
    )
    f.add_argument(
        "--event-tol",
        type=float,
        default=_S,
        help="kink-aware: time tolerance of the event root finder (default 1e-13)",
    )
    f.add_argument(
        "--surface-tol",
        type=float,
        default=_S,
        help="kink-aware: |z| <= surface_tol * max|z| at an event counts as on the surface (default 1e-9)",
    )


def _add_sweep_engine_args(e) -> None:  # the results folder and the batch
    e.add_argument("--out", default=_S, help=f"results folder (default {DEFAULT_OUT})")
    e.add_argument(
        "--slots",
        type=int,
        default=_S,
        help="trajectories integrated at once (default 64; in vmap mode on a GPU/TPU 4096 per device)",
    )
    e.add_argument(
        "--steps-per-call",
        type=int,
        default=_S,
        help="steps (kink-aware: segments) between harvests (default 64; kink-aware --vmap 4)",
    )


def _add_sweep_store_args(e) -> None:  # the folder's state and its writers
    e.add_argument("--resume", action="store_true", default=_S, help="finish the sweep in --out")
    e.add_argument(
        "--overwrite",
        action="store_true",
        default=_S,
        help="delete the files an earlier sweep wrote in --out first (a folder holding other files is refused)",
    )
    e.add_argument(
        "--process-index",
        type=int,
        default=_S,
        help="this writer's place among --process-count writers sharing --out (default: "
        "jax.process_index(), or the job-array task: SLURM_ARRAY_TASK_ID, SGE_TASK_ID)",
    )
    e.add_argument(
        "--process-count",
        type=int,
        default=_S,
        help="number of writers (default: jax.process_count(), or SLURM_ARRAY_TASK_COUNT, ...); "
        "writers claim blocks of work, so a fast one helps a slow one",
    )
    e.add_argument(
        "--status",
        metavar="DIR",
        default=_S,
        help="print the progress of the sweep in DIR across all writers, and exit",
    )


def _add_sweep_mode_args(e) -> None:
    mode = e.add_mutually_exclusive_group()
    mode.add_argument(
        "--vmap",
        dest="exact",
        action="store_false",
        default=_S,
        help="vmap over slots instead of the exact per-slot program (the default on a GPU/TPU; on CPUs it runs on one device)",
    )
    mode.add_argument(
        "--exact",
        dest="exact",
        action="store_true",
        default=_S,
        help="the exact per-slot program, bit for bit (the default on a CPU)",
    )


def _add_sweep_display_args(e) -> None:  # what is printed and drawn
    e.add_argument("--no-progress", dest="progress", action="store_false", default=_S)
    e.add_argument("--rows", type=int, default=_S, help="rows of the printed table (default 20)")
    e.add_argument("--no-figures", dest="figures", action="store_false", default=_S)
    e.add_argument(
        "--trajectories",
        type=int,
        default=_S,
        help="example trajectories re-integrated for figures/trajectories.png (default 3; 0: none)",
    )


def add_prune_parser(sub) -> None:
    p = sub.add_parser(
        "prune",
        help="train with a regularizer, prune cut-off neurons, report",
        description="Train an MLP (ReLU, BCE on logits) on a built-in or CSV binary-classification "
        "data set with a chosen regularizer, remove the hidden neurons that zero weights cut off "
        "(lossless), and compare with magnitude pruning to the same size.",
    )
    p.add_argument(
        "--data",
        default="breast_cancer",
        help="built-in data set (breast_cancer) or a numeric CSV file (default: breast_cancer)",
    )
    p.add_argument("--target", default="-1", help="CSV label column: name or position (default: last)")
    p.add_argument("--test-fraction", type=float, default=0.25)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--hidden", default="20", help="hidden widths, comma-separated (default: 20)")
    p.add_argument("--no-bias", action="store_true", help="no bias node")
    p.add_argument("--regularizer", default="nuclear", help="none, l1, l2 or nuclear (default: nuclear)")
    p.add_argument("--strength", type=float, default=1e-2)
    p.add_argument("--optimizer", default="sgd", help="an optimizer name in ij.OPTIMIZERS (default: sgd)")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--epochs", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=None, help="default: full batch")
    p.add_argument(
        "--subgradient", action="store_true", help="use the regularizer's (sub)gradient instead of its proximal map"
    )
    p.add_argument(
        "--tol",
        type=float,
        default=0.0,
        help="|theta| <= tol counts as zero, in the training log (rank, cut-off neurons) and when "
        "pruning (default 0: exact zeros, which the proximal steps give)",
    )
    p.add_argument(
        "--dead-on-data", action="store_true", help="also remove neurons that never fire on the training data"
    )
    p.add_argument(
        "--baseline",
        default="none",
        help="also train this arm (none, l2 or off) from the same seed and magnitude-prune it "
        "to the same size (default: none, i.e. unregularized)",
    )
    p.add_argument("--baseline-strength", type=float, default=1e-3, help="strength of an l2 baseline")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--json",
        default=None,
        help="write the report to this JSON file (an existing file is refused unless --overwrite)",
    )
    p.add_argument(
        "--figure",
        default=None,
        help="write a PNG of the loss, the cut-off neuron count and the "
        "rank of J_G over epochs to this file (an existing file is refused without --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json / --figure file")


def add_connectivity_parser(sub) -> None:
    p = sub.add_parser(
        "connectivity",
        help="explain the connected components of H_G(c) in words",
        description="Say whether the invariant set H_G(c) = {theta : B~ theta^2 = c} is connected, "
        "which edges are frozen (can never change sign under gradient flow) and why: the "
        "bottleneck, the set S whose balance condition fails and sum_S c. c comes from --c FILE, "
        "from row --index of a sweep's results folder (--from-sweep DIR; its graph too), or from a "
        "random initialization (--seed, --init, --scale). The LP verdict (HiGHS) is checked "
        "against the combinatorial one.",
    )
    add_graph_args(p)
    p.add_argument(
        "--c",
        dest="c_file",
        default=None,
        help="file with c: JSON (a list in graph.hidden order, or {label: value}), or text "
        "lines 'label value' (default: draw c from an initialization)",
    )
    p.add_argument(
        "--from-sweep",
        metavar="DIR",
        default=None,
        help="explain a row of the sweep in DIR: its graph and the c0 of initialization --index",
    )
    p.add_argument("--index", type=int, default=0, help="with --from-sweep: the row's initialization index")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="initialization seed when --c and --from-sweep are not given (key(seed), not a sweep's "
        "init: use --from-sweep DIR --index I for that)",
    )
    p.add_argument("--init", default="glorot", help="glorot, kaiming or normal (ij.DAGNetwork's init)")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--tol", type=float, default=None, help="sums within tol of 0 count as 0 (default: see docs)")
    p.add_argument("--lp", default="candidates", choices=("candidates", "all", "none"))
    p.add_argument(
        "--singular",
        action="store_true",
        help="also decide whether H_G(c) contains a singular point "
        "(exact subset-sum enumeration per hidden component of <= 40 nodes, else a MILP bounded by "
        "--time-limit)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds for the singular-point MILP when it is needed (default: 60); then 'undecided'",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="draw H_G(c) (points of it on three edge weights, coloured by component; "
        "ij.plot_invariant_set) to this PNG; graphs of at most 200 edges",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")


METHODS = ("newton", "flow")

# each method's own defaults: the paper's (flow then Newton) and the flow-only study's
CHANNEL_DEFAULTS = {"newton": dict(t1=1e12, rtol=1e-3, atol=1e-6), "flow": dict(t1=1e4, rtol=1e-7, atol=1e-7)}


def add_channels_parser(sub) -> None:
    p = sub.add_parser(
        "channels",
        help="how often training ends in a flat channel, vs target roughness, width and activation",
        description="Train mlp([dim, width, 1]) from many initializations on Matern-3/2 Gaussian-process "
        "targets of roughness s (length scale 1/s) and count how often training ends in a flat channel. "
        "--method newton (the default, the paper's method): gradient flow (Kvaerno5) then trust-region "
        "Newton (ij.flow_then_newton), a run is infinite when weightnorm = sum(theta^2)/(2E) reaches "
        "--maxnorm, and a channel is confirmed when its pair matches the GLU limit (ij.channels."
        "confirm_channel). --method flow: the flow-only study (ij.channel_frequency; gradient flow to --t1, "
        "then detect_channels): finite-time flow rarely gets far enough into a channel, so it finds few by "
        "design; it is not the paper's method. Time is gradient-flow time of L = (1/2N) sum (f - y)^2.",
    )
    p.add_argument(
        "--method",
        default="newton",
        choices=METHODS,
        help="newton: flow then Newton (the paper's method); flow: the flow-only study",
    )
    p.add_argument("--activations", default="softplus,erf", help="comma-separated smooth activations")
    p.add_argument("--roughness", default="0.1,0.5,2,10", help="comma-separated GP roughness values s")
    p.add_argument("--widths", default="2,4", help="comma-separated hidden widths (>= 2)")
    p.add_argument("--n-inits", type=int, default=4)
    p.add_argument("--n-samples", type=int, default=32)
    p.add_argument("--dim", type=int, default=1, help="input dimension")
    p.add_argument("--no-bias", action="store_true", help="networks without bias edges")
    p.add_argument("--t1", type=float, default=None, help="final gradient-flow time (default: newton 1e12, flow 1e4)")
    p.add_argument("--rtol", type=float, default=None, help="(default: newton 1e-3, flow 1e-7)")
    p.add_argument("--atol", type=float, default=None, help="(default: newton 1e-6, flow 1e-7)")
    p.add_argument(
        "--maxnorm",
        type=float,
        default=1e3,
        help="a run is infinite, and a channel's norm large enough, once weightnorm = sum(theta^2)/(2E) "
        "reaches this (paper: 1e3; both methods)",
    )
    p.add_argument("--max-flow-steps", type=int, default=2000, help="newton: solver steps of the flow phase")
    p.add_argument("--max-newton-steps", type=int, default=2000, help="newton: Newton iterations")
    p.add_argument("--solver", default="kvaerno5", help="flow: the solver")
    p.add_argument("--max-steps", type=int, default=20_000, help="flow: step budget per trajectory")
    p.add_argument(
        "--pair-tol",
        type=float,
        default=1e-2,
        help="a pair's input weights merge below this cosine distance (paper: 1e-2; both methods)",
    )
    p.add_argument("--engine", default="auto", choices=["auto", "sweep", "vmap"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument(
        "--out",
        default=None,
        help="write the study as JSON to this path (an existing file is refused unless --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--no-progress", action="store_true")
