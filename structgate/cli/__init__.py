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

#: subcommand modules of this package, in help order
SUBCOMMANDS = ("backends", "check", "diff", "demo")
#: entry-point group through which other distributions add subcommands (a module with
#: ``add_parser(subparsers)``); the benchmark harness (``bench/``, not in the wheel) adds ``bench``
ENTRY_POINT_GROUP = "structgate.cli"


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
    added = set()
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in SUBCOMMANDS or ep.name in added:
            continue
        ep.load().add_parser(sub)
        added.add(ep.name)
    if "bench" not in added:
        _add_missing_bench(sub)
    return parser


def _add_missing_bench(sub) -> None:
    """``structgate bench`` when the harness is not installed: one line saying where it lives."""
    p = sub.add_parser("bench", help="benchmarks (needs the harness from a source checkout: pip install -e bench)",
                       add_help=True)
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def run(args) -> int:
        raise UsageError("the benchmark harness is not part of the structgate package; from a source checkout "
                         "install it with `pip install -e bench` (see bench/README.md)")

    p.set_defaults(func=run)


class UsageError(StructgateError):
    """Bad or contradictory command-line arguments (printed as ``structgate CMD: error: MESSAGE``,
    exit 2)."""

    kind = "usage"


def describe_error(e: BaseException) -> str:
    """The message the CLI prints for a typed error: usage errors as their message alone, other
    errors with their public class name; a syntax error, or an unsupported construct inside a
    pattern, also gets the error's line and a caret (:func:`structgate.errors.caret_display`)."""
    from ..errors import GrammarSyntaxError

    if getattr(e, "kind", None) == "usage":
        return " ".join(str(e).split())
    if isinstance(e, GrammarSyntaxError) or getattr(e, "text", None) is not None:  # (a caret display)
        return f"{type(e).__name__}: {e}"
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except StructgateError as e:
        print(f"structgate {args.command}: error: {describe_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
