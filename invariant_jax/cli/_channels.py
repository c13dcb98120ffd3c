"""`invariant-jax channels`: the frequency study (how often gradient flow from
Glorot-normal initializations ends in a flat channel) from flags."""

from __future__ import annotations

from ..activations import get_activation
from ..channels import channel_frequency
from ._common import check_output_path, write_json


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


def add_parser(sub) -> None:
    p = sub.add_parser(
        "channels", help="frequency of flat channels vs target roughness, width and activation",
        description="Run gradient flow from Glorot-normal initializations of mlp([dim, width, 1]) on "
        "Matern-3/2 Gaussian-process targets of roughness s (length scale 1/s), and count how often "
        "the flow ends in a flat channel (detect_channels). Time is gradient-flow time of "
        "L = (1/2N) sum (f - y)^2.")
    p.add_argument("--activations", default="softplus,erf", help="comma-separated smooth activations")
    p.add_argument("--roughness", default="0.1,0.5,2,10", help="comma-separated GP roughness values s")
    p.add_argument("--widths", default="2,4", help="comma-separated hidden widths (>= 2)")
    p.add_argument("--n-inits", type=int, default=4)
    p.add_argument("--n-samples", type=int, default=32)
    p.add_argument("--dim", type=int, default=1, help="input dimension")
    p.add_argument("--no-bias", action="store_true", help="networks without bias edges")
    p.add_argument("--t1", type=float, default=1e4)
    p.add_argument("--solver", default="kvaerno5")
    p.add_argument("--rtol", type=float, default=1e-7)
    p.add_argument("--atol", type=float, default=1e-7)
    p.add_argument("--max-steps", type=int, default=20_000)
    p.add_argument("--norm-threshold", type=float, default=1e3, help="parameter-norm criterion (paper: 1e3)")
    p.add_argument("--pair-tol", type=float, default=1e-3, help="cosine-distance criterion for pairs")
    p.add_argument("--engine", default="auto", choices=["auto", "sweep", "vmap"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument("--out", default=None, help="write the study as JSON to this path (an existing file is refused "
                   "unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run)


def run(args) -> int:
    out = check_output_path(args.out, "--out", overwrite=args.overwrite)  # before the study, not after it
    acts = [a.strip() for a in args.activations.split(",") if a.strip()]
    for a in acts:
        if not get_activation(a).smooth:
            raise ValueError(f"--activations: {a!r} is not smooth; flat channels need a smooth activation "
                             "(softplus, erf, g, tanh, gelu).")
    st = channel_frequency(
        activations=tuple(acts), roughness=tuple(_floats(args.roughness, "--roughness")),
        widths=tuple(_ints(args.widths, "--widths")), n_inits=args.n_inits, n_samples=args.n_samples,
        dim=args.dim, bias=not args.no_bias, t1=args.t1, solver=args.solver, rtol=args.rtol, atol=args.atol,
        max_steps=args.max_steps, norm_threshold=args.norm_threshold, pair_tol=args.pair_tol,
        engine=args.engine, seed=args.seed, data_seed=args.data_seed, progress=not args.no_progress)
    print(f"frequency study: {args.n_inits} Glorot-normal inits per cell, {args.n_samples} samples, dim {args.dim}, "
          f"t1={args.t1:g} (gradient-flow time of L = (1/2N) sum (f - y)^2), solver {args.solver}")
    print(st.table())
    n_fail = int((st.status >= 2).sum())
    if n_fail:
        print(f"{n_fail} trajectories failed (e.g. max steps); raise --max-steps or loosen --rtol.")
    if out is not None:
        print(f"wrote {write_json(out, st.to_dict())}")
    return 0
