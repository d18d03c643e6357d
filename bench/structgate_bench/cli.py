"""``structgate bench maskbench|jsts|regex``: head-to-head benchmarks of the registered backends.

All three share: ``--backends`` (comma-separated; default every available backend), ``--tokenizer``
(default ``llama3``), ``--limit``, ``--timeout-s``, ``--max-memory-mb``, ``--threads`` (default 1),
``--jobs`` (worker processes at the same time, default 1), ``--checkpoint`` (stream raw results;
resume a stopped run), ``--max-wall-s`` (time box; ``0`` with a checkpoint: only report it),
``--json``, ``--markdown``, ``--details``
(per-schema JSONL), ``--plot`` (PNG), ``--no-progress`` (a rich bar on a terminal, a line every 30 s otherwise), ``--quiet``; maskbench also
``--shuffle SEED`` and ``--common-items``. The markdown table goes to
stdout. Other modules may add sub-subcommands: if ``structgate_bench.maskstep_cmd`` exists, its
``add_bench_subparser(bench_sub)`` is called.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from structgate.cli.argtypes import int_in, number_in
from structgate.errors import StructgateError

#: ``structgate bench --help`` text (plain, not reStructuredText)
HELP = """Head-to-head benchmarks of the registered backends, each in isolated worker processes.

  maskbench  MaskBench method on MaskBench-format JSONL (compile, mask time, valid/invalid outcomes)
  jsts       JSON-Schema-Test-Suite coverage per backend and keyword file
  regex      regex corpora: compile and mask time, agreement with Python re

Common options: --backends, --tokenizer, --limit, --timeout-s, --jobs, --checkpoint, --json,
--markdown, --details, --plot. Run `structgate bench COMMAND --help` for each command's options."""

from .corpora import SAMPLES

#: defaults: the small samples shipped with the harness (full corpora: --corpus / --suite)
DEFAULT_MASKBENCH = str(SAMPLES / "maskbench")
DEFAULT_JSTS = str(SAMPLES / "jsts")

#: modules that may contribute ``bench`` sub-subcommands through ``add_bench_subparser(sub)``
EXTENSION_MODULES = ("structgate_bench.maskstep_cmd",)


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


#: numeric flags read as ASCII decimal (structgate.cli.argtypes: "٣", "1_0", "inf", "nan" refused)
_positive_float = number_in(0, strict=True)
_wall_s = number_in(0, what="a number of seconds")


def _path(s: str) -> str:
    if not s.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return s


_positive_int = int_in(1)


def _add_common(p: argparse.ArgumentParser, *, timeout: float) -> None:
    p.add_argument("--backends", type=_csv, default=None, metavar="NAMES",
                   help="comma-separated backend names (or module:factory); default: every available backend")
    p.add_argument("--tokenizer", default="llama3", help="tokenizer name or path (default: llama3)")
    p.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                   help="at most N items (round-robin over splits; a uniform sample with maskbench --shuffle)")
    p.add_argument("--timeout-s", type=_positive_float, default=timeout, metavar="S",
                   help=f"limit per item (compile + walk), seconds (default {timeout:g})")
    p.add_argument("--max-memory-mb", type=int_in(1), default=4096, metavar="M",
                   help="worker address-space limit, MiB; 0 = none (default 4096)")
    p.add_argument("--threads", type=_positive_int, default=1, help="engine threads (default 1: single-threaded)")
    p.add_argument("--jobs", type=_positive_int, default=1,
                   help="worker processes at the same time, shared out over backends and items (default 1)")
    p.add_argument("--whitespace", choices=("flexible", "compact"), default=None,
                   help="JSON whitespace option passed to backends (default: flexible for JSON benches)")
    p.add_argument("--strict-properties", action="store_true",
                   help="additional_properties=False (default for JSON benches: follow the spec, True)")
    p.add_argument("--json", dest="json_out", metavar="OUT.json", help="write the result document")
    p.add_argument("--markdown", dest="markdown_out", metavar="OUT.md", help="write the markdown tables")
    p.add_argument("--details", dest="details_out", metavar="OUT.jsonl", help="write one line per item × backend")
    p.add_argument("--checkpoint", metavar="RUN.jsonl", type=_path,
                   help="stream raw per-item results to this file as they finish; rerun with the same file and "
                        "settings to resume (items already there are not run again)")
    p.add_argument("--max-wall-s", type=_wall_s, default=None, metavar="S",
                   help="stop starting items after S seconds; items never started are left out of the counts "
                        "(meta.backends_run.NAME.not_run). 0 with --checkpoint: only report what it holds")
    p.add_argument("--plot", dest="plot_out", metavar="OUT.png", help="write the CDF / per-split PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quiet", action="store_true", help="do not print the markdown table")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="head-to-head benchmarks of backends (MaskBench, JSON-Schema-Test-Suite, regex)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")

    m = bsub.add_parser("maskbench", help="MaskBench method on MaskBench-format JSONL (folder or file)")
    m.add_argument("--corpus", default=DEFAULT_MASKBENCH,
                   help="folder of *.jsonl or one file (default: a 5-schema sample shipped with the harness; the full "
                        "corpus is guidance-ai/jsonschemabench maskbench/data, see bench/README.md)")
    m.add_argument("--splits", type=_csv, default=None, help="comma-separated split names (file stems)")
    m.add_argument("--shuffle", type=int_in(0), default=None, metavar="SEED",
                   help="run items in a seeded random order; --limit then takes a uniform random sample "
                        "(default: file order; --limit round-robin over splits)")
    m.add_argument("--common-items", action="store_true",
                   help="report every backend on only the items all of them ran (after a time-boxed or "
                        "resumed run that left some short)")
    _add_common(m, timeout=60.0)
    m.set_defaults(func=run_maskbench)

    j = bsub.add_parser("jsts", help="JSON-Schema-Test-Suite coverage per backend and keyword file")
    j.add_argument("--suite", default=DEFAULT_JSTS,
                   help="suite root, tests/ or a draft folder (default: a sample of 3 keyword files; the full suite is "
                        "a json-schema-org/JSON-Schema-Test-Suite checkout)")
    j.add_argument("--drafts", type=_csv, default=None, help="comma-separated drafts (default draft2020-12,draft7)")
    j.add_argument("--optional", choices=("none", "format", "all"), default="format",
                   help="optional tests to include (default: optional/format)")
    j.add_argument("--files", type=_csv, default=None, help="only these keyword files (e.g. allOf,optional/format/date)")
    _add_common(j, timeout=30.0)
    j.set_defaults(func=run_jsts)

    r = bsub.add_parser("regex", help="regex corpora: compile/mask time, agreement with Python re")
    r.add_argument("--corpus", action="append", default=None, metavar="PATH",
                   help="regex corpus file or folder (repeatable; default: the interegular and outlines-core samples "
                        "shipped with the harness)")
    r.add_argument("--re-timeout-s", type=_positive_float, default=2.0, help="Python re time limit per string (default 2)")
    _add_common(r, timeout=60.0)
    r.set_defaults(func=run_regex)

    for modname in EXTENSION_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
            continue
        hook = getattr(mod, "add_bench_subparser", None)
        if hook is not None:
            hook(bsub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _options(args, json_bench: bool) -> dict:
    o = {}
    if args.whitespace:
        o["whitespace"] = args.whitespace
    if json_bench:
        o["additional_properties"] = not args.strict_properties
    return o


class BenchUsageError(StructgateError):
    """Contradictory bench options (reported by the CLI as one line, exit 2)."""

    kind = "usage"


def _check_paths(args) -> None:
    """Refuse outputs that would overwrite the checkpoint or each other, and a time box of 0
    without a checkpoint (it would report nothing)."""
    import os

    named = [(flag, getattr(args, attr)) for flag, attr in (
        ("--checkpoint", "checkpoint"), ("--json", "json_out"), ("--markdown", "markdown_out"),
        ("--details", "details_out"), ("--plot", "plot_out")) if getattr(args, attr, None)]
    seen: dict[str, str] = {}
    for flag, path in named:
        key = os.path.realpath(path)
        if key in seen:
            raise BenchUsageError(f"{flag} and {seen[key]} name the same file {path!r}")
        seen[key] = flag
    if args.max_wall_s == 0 and not args.checkpoint:
        raise BenchUsageError("--max-wall-s 0 runs nothing: give --checkpoint to report what it holds")


def _common_kwargs(args) -> dict:
    _check_paths(args)
    return dict(backends=args.backends, tokenizer=args.tokenizer, limit=args.limit, timeout_s=args.timeout_s,
                max_memory_mb=args.max_memory_mb, threads=args.threads, jobs=args.jobs, json_out=args.json_out,
                markdown_out=args.markdown_out, details_out=args.details_out, plot_out=args.plot_out,
                progress=not args.no_progress, checkpoint=args.checkpoint,
                max_wall_s=args.max_wall_s,
                quiet=args.quiet, argv=sys.argv[1:])


def run_maskbench(args) -> int:
    from structgate_bench.commands import bench_maskbench

    bench_maskbench(args.corpus, splits=args.splits, shuffle=args.shuffle, common_items=args.common_items,
                    options=_options(args, True),
                    **_common_kwargs(args))
    return 0


def run_jsts(args) -> int:
    from structgate_bench.commands import bench_jsts

    bench_jsts(args.suite, drafts=args.drafts, optional=args.optional, files=args.files, options=_options(args, True),
               **_common_kwargs(args))
    return 0


def run_regex(args) -> int:
    from structgate_bench.commands import bench_regex

    bench_regex(args.corpus, re_timeout_s=args.re_timeout_s, options=_options(args, False), **_common_kwargs(args))
    return 0
