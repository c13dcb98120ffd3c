"""`invariant-jax demo`: the main job (`invariant-jax sweep`) on its built-in default."""

from __future__ import annotations

from ..sweep import SweepConfig
from ._sweep import run_config

DEMO_OUT = "runs/demo"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo", help="run the built-in sweep (example DAG, teacher-student data) into runs/demo",
        description="The default sweep: gradient flow from 256 initializations of the example DAG "
        "(skip connections and an out-bottleneck) on teacher-student data. Prints the summary table "
        f"and writes the results folder and figures to {DEMO_OUT}, replacing an earlier demo there (and only "
        "a demo: a folder holding another sweep, or any file the store did not write, is refused).")
    p.add_argument("--out", default=DEMO_OUT, help=f"results folder (default {DEMO_OUT})")
    p.add_argument("--n-inits", type=int, default=256)
    p.add_argument("--no-kink-aware", dest="kink_aware", action="store_false", default=None,
                   help="plain integration across the ReLU kinks instead of the exact kink-aware flow")
    p.set_defaults(run=run)


def run(args) -> int:
    # overwrite replaces only an earlier demo (tag "demo"), deletes only the files the store can
    # prove it wrote, and refuses a folder holding anything else
    return run_config(SweepConfig(n_inits=args.n_inits, kink_aware=args.kink_aware), out=args.out, overwrite=True,
                      rows=15, tag="demo")
