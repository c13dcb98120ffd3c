"""The `invariant-jax` command. Each subcommand's flags are in `cli/_parsers.py` (no JAX
import, so `--help` and flag errors answer at once); its work is `run(args)` in
`cli/_<name>.py`, imported after parsing."""

from __future__ import annotations

import argparse
import importlib
import sys

from ._parsers import SUBCOMMANDS, accept_negative_numbers, config_defaults

__all__ = ["SUBCOMMANDS", "build_parser", "main", "show_defaults"]


def build_parser() -> argparse.ArgumentParser:
    """The full parser (every subcommand), built without importing JAX."""
    parser = argparse.ArgumentParser(
        prog="invariant-jax",
        description="Exact gradient flow, conservation laws and invariant-set topology on DAG networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parsers = importlib.import_module("invariant_jax.cli._parsers")
    for name in SUBCOMMANDS:
        getattr(parsers, f"add_{name}_parser")(sub)
    # sweep, demo and check leave their flags at None (a TOML file can set sweep's): their
    # defaults are SweepConfig's
    config = config_defaults()
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
        if (
            not action.option_strings
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or action.help is argparse.SUPPRESS
        ):
            continue
        text = action.help or ""
        if "default" not in text.lower():  # some helps name their default in words
            action.help = (text + " " if text else "") + "(default: %(default)s)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and flag errors end here, before JAX is imported
    if not args.command:
        parser.print_help()
        return 2
    if args.command in ("sweep", "demo"):  # before JAX starts its backends: one CPU device per core
        importlib.import_module("invariant_jax.cli._sweep").use_cpu_cores()
    common = importlib.import_module("invariant_jax.cli._common")
    importlib.import_module("jax").config.update("jax_enable_x64", True)  # the CLI checks laws: float64
    cache = common.compilation_cache_settings()
    common.enable_compilation_cache()  # a repeated command reuses its compiled programs
    try:
        try:
            common.check_args(args)  # one validation per option, the same in every command
            with common.one_blas_thread():  # the solvers' LU factorizations, with every core busy
                return int(importlib.import_module(f"invariant_jax.cli._{args.command}").run(args) or 0)
        except (ValueError, TypeError, FileNotFoundError) as e:
            print(f"invariant-jax {args.command}: error: {e}", file=sys.stderr)
            return 2
    finally:  # called from Python (tests, notebooks), the caller's JAX stays as it was
        common.restore_compilation_cache(cache)


if __name__ == "__main__":
    sys.exit(main())
