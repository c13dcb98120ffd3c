"""The `invariant-jax` command. Each subcommand lives in `cli/_<name>.py` and defines
`add_parser(subparsers)`, which registers its parser with `set_defaults(run=...)`."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ["demo", "check", "sweep", "prune", "connectivity", "channels"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="invariant-jax",
        description="Exact gradient flow, conservation laws and invariant-set topology on DAG networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"invariant_jax.cli._{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    import jax

    from ._common import enable_compilation_cache

    jax.config.update("jax_enable_x64", True)  # the CLI checks laws: float64 throughout
    enable_compilation_cache()  # a repeated command reuses its compiled programs
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"invariant-jax {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
