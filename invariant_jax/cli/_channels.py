"""`invariant-jax channels`: how often training ends in a flat channel, by the paper's
method (flow then Newton, the default) or the flow-only frequency study."""

from __future__ import annotations

import jax.random as jr
import numpy as np

from .._checks import check_integer, check_positive
from ..activations import get_activation
from ..channels import (
    ConvergenceStudy,
    FlowPhaseOptions,
    FrequencyGrid,
    NewtonOptions,
    StudyGrid,
    channel_frequency,
    convergence_study,
)
from ..datasets import gp_data
from ..options import SolverOptions
from ._common import check_output_path, write_json
from ._parsers import CHANNEL_DEFAULTS


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers; got {text!r}.") from None


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers; got {text!r}.") from None


def _grid(args) -> tuple[list[str], list[float], list[int]]:
    """The activations, roughness values and widths, checked before any work."""
    acts = [a.strip() for a in args.activations.split(",") if a.strip()]
    for a in acts:
        if not get_activation(a).smooth:
            raise ValueError(
                f"--activations: {a!r} is not smooth; flat channels need a smooth activation "
                "(softplus, erf, g, tanh, gelu)."
            )
    rough = _floats(args.roughness, "--roughness")
    if not rough:
        raise ValueError("--roughness: give at least one roughness s.")
    for s in rough:
        check_positive("--roughness: every roughness s (length scale 1/s)", s)
    widths = _ints(args.widths, "--widths")
    if not widths:
        raise ValueError("--widths: give at least one width.")
    for w in widths:
        check_integer("--widths: every width (a channel needs two neurons)", w, minimum=2)
    return acts, rough, widths


def run(args) -> int:
    out = check_output_path(args.out, "--out", overwrite=args.overwrite)  # before the study, not after it
    acts, rough, widths = _grid(args)
    opts = {
        k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in CHANNEL_DEFAULTS[args.method].items()
    }
    if args.method == "flow":
        print(
            "flow-only study (ij.channel_frequency): gradient flow to --t1, then detect_channels. Not the "
            "paper's method: finite-time flow rarely reaches a channel; the default --method newton is."
        )
        grid = FrequencyGrid(
            activations=tuple(acts),
            roughness=tuple(rough),
            widths=tuple(widths),
            n_inits=args.n_inits,
            n_samples=args.n_samples,
            dim=args.dim,
            bias=not args.no_bias,
            seed=args.seed,
            data_seed=args.data_seed,
        )
        solver = SolverOptions(args.solver, rtol=opts["rtol"], atol=opts["atol"], max_steps=args.max_steps)
        st = channel_frequency(
            grid=grid,
            t1=opts["t1"],
            solver=solver,
            maxnorm=args.maxnorm,
            pair_tol=args.pair_tol,
            engine=args.engine,
            progress=not args.no_progress,
        )
        print(
            f"{args.n_inits} Glorot-normal inits per cell, {args.n_samples} samples, dim {args.dim}, "
            f"t1={opts['t1']:g} (gradient-flow time of L = (1/2N) sum (f - y)^2), solver {args.solver}"
        )
        print(st.table())
        n_fail = int(np.sum(~st.success))
        if n_fail:
            print(f"{n_fail} trajectories failed (e.g. max steps); raise --max-steps or loosen --rtol.")
        result = st.to_dict()
    else:
        st = _newton_study(args, acts, rough, widths, opts)
        print(
            f"flow then Newton (ij.flow_then_newton, the paper's method): {args.n_inits} inits per cell "
            f"(MLPGradientFlow glorot), {args.n_samples} samples per GP target, dim {args.dim}; Kvaerno5 flow "
            f"to t1={opts['t1']:g} at rtol={opts['rtol']:g}, atol={opts['atol']:g}, then trust-region Newton; "
            f"infinite: weightnorm >= {args.maxnorm:g}; confirmed: a channel pair matching its GLU limit"
        )
        print(st.table(by=("label", "activation", "r")))
        result = st.to_dict()
    if out is not None:
        print(f"wrote {write_json(out, result)}")
    return 0


def _newton_study(args, acts, rough, widths, opts):
    """`convergence_study` (flow then Newton) on one GP target per roughness value,
    labelled `s=<value>`, concatenated."""
    grid = StudyGrid(widths=widths, activations=acts, biases=(not args.no_bias,), n_seeds=args.n_inits, seed=args.seed)
    flow = FlowPhaseOptions(
        t1=opts["t1"],
        rtol=opts["rtol"],
        atol=opts["atol"],
        max_flow_steps=args.max_flow_steps,
        flow_stop="stop",
        n_record=0,
        engine="sweep" if args.engine == "auto" else args.engine,
    )
    newton = NewtonOptions(maxnorm=args.maxnorm, max_steps=args.max_newton_steps)
    parts = []
    for k, s in enumerate(rough):
        X, Y = gp_data(args.n_samples, args.dim, roughness=float(s), key=jr.fold_in(jr.key(args.data_seed), k))
        parts.append(
            convergence_study(
                X,
                Y,
                grid=grid,
                flow=flow,
                newton=newton,
                label=f"s={s:g}",
                channel_cos=args.pair_tol,
                progress=not args.no_progress,
            )
        )
    return ConvergenceStudy.concatenate(parts)
