"""The ``structgate`` command line.

Each subcommand lives in its own module of this package and exposes ``add_parser(subparsers)``;
modules import heavy libraries (torch, vllm, engines) only inside their run functions, so
``structgate --help`` stays fast. Exit codes: 0 ran, 1 a check failed (``demo``, ``diff`` with
disagreements), 2 a user error (bad constraint, unknown backend, bad arguments).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import StructgateError

#: subcommand modules, in help order
SUBCOMMANDS = ("backends", "check", "diff", "bench", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="structgate",
                                     description="Structured-output backends for vLLM: inspect, check, compare, benchmark.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"structgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:  # subcommand not built yet in this checkout
            if e.name != f"{__name__}.{name}":
                raise
            continue
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except StructgateError as e:
        print(f"structgate {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
