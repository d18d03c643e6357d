"""``structgate bench maskstep``: engine-core mask time per step through vLLM's
StructuredOutputManager, vLLM's loop vs structgate's scheduler hook (see
:mod:`structgate_bench.maskstep`).

Wiring: the ``bench`` command calls :func:`add_bench_subparser` with its subparsers object.
"""
from __future__ import annotations

import argparse

from structgate.cli.argtypes import int_in, int_list, number_in

DEFAULT_BATCHES = "1,16,64,128,256"


def add_bench_subparser(bench_sub) -> argparse.ArgumentParser:
    """Add ``maskstep`` to the ``structgate bench`` subcommands."""
    p = bench_sub.add_parser(
        "maskstep", help="engine-core mask time per step: vLLM's loop vs structgate's scheduler hook",
        description="Drive vLLM's StructuredOutputManager with B concurrent JSON-schema requests at "
                    "various states; report the bitmask time per step for vLLM+xgrammar and for "
                    "structgate backends through the scheduler hook.")
    p.add_argument("--systems", type=_names(_systems(), "system"), default=list(_systems()), metavar="NAMES",
                   help="comma-separated: vllm-xgrammar, native, structgate-xgrammar, structgate-llguidance, "
                        "structgate-outlines-core (default: all)")
    p.add_argument("--batch-sizes", type=_positive_ints, default=_positive_ints(DEFAULT_BATCHES), metavar="B,...",
                   help=f"comma-separated B values, each >= 1 (default {DEFAULT_BATCHES})")
    p.add_argument("--steps", type=_positive_int, default=30, help="steps per pass, >= 1 (default 30)")
    p.add_argument("--vocab", default="llama3", help="vocabulary (default: bundled llama3, 128,256 tokens)")
    p.add_argument("--forward-ms", type=_non_negative_float, default=0.0,
                   help="sleep between a step's accepts and the next mask, ms (the forward pass the prefetch "
                        "overlaps with; default 0)")
    p.add_argument("--no-hook", action="store_true", help="run vLLM's loop for the structgate backends too")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--e2e", action="store_true",
                   help="instead: end-to-end offline vLLM on the embedded model (CPU), 32 concurrent json_schema "
                        "requests per configuration (unconstrained, vllm-xgrammar, native, each adapter)")
    p.add_argument("--e2e-configs", type=_names(_e2e_configs(), "configuration"), default=list(_e2e_configs()),
                   metavar="NAMES", help="comma-separated, with --e2e: " + ", ".join(_e2e_configs()) + " (default: all)")
    p.add_argument("--e2e-requests", type=_positive_int, default=32, help="with --e2e: requests per configuration, "
                                                                          ">= 1 (default 32)")
    p.add_argument("--e2e-max-tokens", type=_positive_int, default=64, help="with --e2e: max tokens per request, "
                                                                            ">= 1 (default 64)")
    p.set_defaults(func=run)
    return p


def _systems():
    from structgate_bench.maskstep import SYSTEMS

    return SYSTEMS


def _e2e_configs():
    from structgate_bench.maskstep import E2E_CONFIGS

    return tuple(E2E_CONFIGS)


_positive_int = int_in(1)
_positive_ints = int_list(1)
_non_negative_float = number_in(0.0)


def _names(valid, what: str):
    """An argparse type: a comma-separated, non-empty list of names out of ``valid``."""
    def parse(s: str) -> list[str]:
        names = [x.strip() for x in s.split(",") if x.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"no {what} named; valid: {', '.join(valid)}")
        bad = [n for n in names if n not in valid]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(map(repr, bad))}; valid: {', '.join(valid)}")
        return list(dict.fromkeys(names))

    return parse


def add_parser(sub) -> None:  # standalone use: `structgate maskstep` if wired as a top-level command
    add_bench_subparser(sub)


def run(args: argparse.Namespace) -> int:
    import json

    from structgate_bench.maskstep import format_e2e_table, format_table, run_e2e, run_maskstep

    if args.e2e:
        res = run_e2e(args.e2e_configs, n_requests=args.e2e_requests, max_tokens=args.e2e_max_tokens)
        print()
        print(format_e2e_table(res))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(res, f, indent=1)
        return 0
    systems, batches = args.systems, args.batch_sizes
    results = run_maskstep(systems, batches, args.steps, vocab_spec=args.vocab, forward_ms=args.forward_ms,
                           hook=not args.no_hook)
    print()
    print("mask time per step, warm (median ms):")
    print(format_table(results, batches, "fill_warm_ms"))
    print()
    print("mask time per step, cold (mean ms, first pass):")
    print(format_table(results, batches, "fill_cold_ms"))
    print()
    print("accept time per step (median ms):")
    print(format_table(results, batches, "accept_ms"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0
