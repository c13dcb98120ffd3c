"""`invariant-jax demo`: the main job (`invariant-jax sweep`) on its built-in default."""

from __future__ import annotations

from ..sweep import SweepConfig
from ._sweep import run_config


def run(args) -> int:
    # overwrite replaces only an earlier demo (tag "demo"), deletes only the files the store can
    # prove it wrote, and refuses a folder holding anything else
    return run_config(
        SweepConfig(n_inits=args.n_inits, kinks=args.kink_aware), out=args.out, overwrite=True, rows=15, tag="demo"
    )
