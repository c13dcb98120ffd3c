"""The `invariant-jax` command. Each subcommand lives in `cli/_<name>.py` and defines
`add_parser(subparsers)`, which registers its parser with `set_defaults(run=...)`."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys

import jax

from ..sweep import SweepConfig
from ._common import (accept_negative_numbers, check_args, compilation_cache_settings, enable_compilation_cache,
                      restore_compilation_cache)

SUBCOMMANDS = ["demo", "check", "sweep", "prune", "connectivity", "channels"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="invariant-jax",
        description="Exact gradient flow, conservation laws and invariant-set topology on DAG networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"invariant_jax.cli._{name}").add_parser(sub)
    # sweep, demo and check leave their flags at None (a TOML file can set sweep's): their
    # defaults are SweepConfig's
    config = {f.name: f.default for f in dataclasses.fields(SweepConfig)
              if f.default is not dataclasses.MISSING}
    for name, subparser in sub.choices.items():
        accept_negative_numbers(subparser)  # `--atol -1e-8` reaches the validator
        show_defaults(subparser, config if name in ("sweep", "demo", "check") else {})
    return parser


def show_defaults(parser: argparse.ArgumentParser, fallback: dict | None = None) -> None:
    """Append `(default: ...)` to the help of every option that has a default (flags that
    are off by default and options without a default are left alone). `fallback` gives
    the defaults of options whose argparse default is None (e.g. a config's fields)."""
    fallback = fallback or {}
    for action in parser._actions:
        default = action.default
        if default in (None, argparse.SUPPRESS) and fallback.get(action.dest) is not None:
            default = fallback[action.dest]
            if isinstance(default, tuple):
                default = ",".join(map(str, default))
            text = action.help or ""
            if "default" not in text.lower() and not isinstance(default, bool):
                action.help = (text + " " if text else "") + f"(default: {str(default).replace('%', '%%')})"
            continue
        if (not action.option_strings or default is None or default is argparse.SUPPRESS
                or isinstance(default, bool) or action.help is argparse.SUPPRESS):
            continue
        text = action.help or ""
        if "default" not in text.lower():  # some helps name their default in words
            action.help = (text + " " if text else "") + "(default: %(default)s)"


def main(argv: list[str] | None = None) -> int:
    jax.config.update("jax_enable_x64", True)  # the CLI checks laws: float64 throughout
    cache = compilation_cache_settings()
    enable_compilation_cache()  # a repeated command reuses its compiled programs
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        if args.command == "sweep":  # before JAX starts its backends: one CPU device per core
            importlib.import_module("invariant_jax.cli._sweep").use_cpu_cores()
        try:
            check_args(args)  # one validation per option, the same in every command
            return int(args.run(args) or 0)
        except (ValueError, TypeError, FileNotFoundError) as e:
            print(f"invariant-jax {args.command}: error: {e}", file=sys.stderr)
            return 2
    finally:  # called from Python (tests, notebooks), the caller's JAX stays as it was
        restore_compilation_cache(cache)


if __name__ == "__main__":
    sys.exit(main())
