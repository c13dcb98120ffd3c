"""`invariant-jax demo`: the main job on its built-in default."""

from __future__ import annotations

from . import _check


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run the built-in default (conservation check on the example DAG)")
    p.set_defaults(run=run)


def run(args) -> int:
    ns = _check.build_default_args()
    return _check.run(ns)
