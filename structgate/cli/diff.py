"""``structgate diff``: compare the token masks of several backends along the same tokens.

::

    structgate diff --backends A,B[,C] --tokenizer TOK
                    (--regex R | --json-schema FILE_OR_JSON | --choice A --choice B ... |
                     --grammar FILE | --json-object)
                    (--text S ... | --jsonl FILE) [--cap N] [--compact] [--json]
    structgate diff --backends A,B[,C] --tokenizer TOK --maskbench FILE_OR_DIR ...
                    [--limit N] [--max-texts K] [--time-limit S] [--json]

The second form is the long differential run (:func:`structgate.diff.run_corpus`): every schema of
MaskBench / JSONSchemaBench JSONL files (a directory means all its ``*.jsonl``) with its first
``--max-texts`` valid instances (``json.dumps`` text); it prints a summary and every disagreeing
text (``--json``: the run_corpus dict).

Every text is tokenized once (``Vocabulary.encode``) and every backend is driven through the same
tokens; at each step the full allowed-token sets are compared. Each disagreement is reported with
the step, the token ids and their byte strings (first ``--cap`` of each group, plus the count) and
which backends allow / forbid them (see :mod:`structgate.diff`). ``--json`` prints::

    {"tokenizer": ..., "backends": [...], "ok": bool, "reports": [DiffReport.as_dict(), ...]}

Exit status: 0 no disagreement, 1 some disagreement (masks, a rejected text token, or a backend
that cannot compile the constraint while another can), 2 user error (bad arguments or constraint,
unknown backend or tokenizer; also when no two backends compile the constraint).
"""
from __future__ import annotations

import json
import sys

from .argtypes import int_in, number_in


def add_parser(sub) -> None:
    p = sub.add_parser("diff", help="compare the token masks of several backends step by step",
                       description="Drive several backends through the same tokens and compare the full "
                                   "allowed-token set at every step.")
    p.add_argument("--backends", required=True, help="comma-separated backend names (at least two)")
    p.add_argument("--tokenizer", default="llama3",
                   help="bundled tokenizer name, folder, tokenizer.json, .gguf or .tiktoken (default: llama3)")
    from .check import add_constraint_arguments

    g = p.add_mutually_exclusive_group(required=False)
    add_constraint_arguments(g)
    g.add_argument("--maskbench", nargs="+", metavar="FILE_OR_DIR",
                   help="long run over MaskBench JSONL files (schemas + valid instances)")
    p.add_argument("--limit", type=int_in(1), default=None, help="--maskbench: at most N schemas")
    p.add_argument("--max-texts", dest="max_texts", type=int_in(1), default=1, help="--maskbench: texts per schema")
    p.add_argument("--time-limit", dest="time_limit", type=number_in(0, strict=True, what="number of seconds"), default=None,
                   help="--maskbench: stop starting schemas after S seconds")
    p.add_argument("--text", action="append", default=[], help="text to drive (repeatable)")
    p.add_argument("--jsonl", metavar="FILE", help='file of {"text": ...} lines')
    p.add_argument("--cap", type=int_in(1), default=20, help="token ids listed per disagreement group (default 20)")
    p.add_argument("--compact", action="store_true", help='JSON whitespace policy "compact" (default flexible)')
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..diff import diff_masks
    from ..errors import StructgateError
    from ..vocab import load_vocabulary
    from .check import _UsageError, _constraint, _texts

    prog = "structgate diff"
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    try:
        if len(names) < 2:
            raise _UsageError("--backends needs at least two names, e.g. native,structgate-xgrammar")
        if len(set(names)) != len(names):
            raise _UsageError(f"--backends names must be distinct: {names}")
        if args.cap < 1:
            raise _UsageError("--cap must be >= 1")
        if args.maskbench:
            return _run_maskbench(args, names)
        if not (args.regex is not None or args.json_schema is not None or args.choice or args.grammar
                or args.json_object):
            raise _UsageError("give a constraint: --regex, --json-schema, --choice, --grammar, --json-object "
                              "(or --maskbench)")
        texts = _texts(args)
        if not texts:
            raise _UsageError("give at least one --text or a --jsonl file")
        if args.json_object:
            from ..backends.interface import Constraint

            constraint = Constraint.json_object()
        else:
            constraint = _constraint(args)
        vocab = load_vocabulary(args.tokenizer)
        from ..backends.registry import get_backend

        opts = {"whitespace": "compact"} if args.compact else {}
        backends = [get_backend(n, vocab, **opts) for n in names]
        compiled: dict = {}
        for n, b in zip(names, backends):
            try:
                compiled[n] = b.compile(constraint)
            except StructgateError as e:  # (its traceback, holding this frame, not kept: no cycle)
                compiled[n] = e.with_traceback(None)
        good = [n for n in names if not isinstance(compiled[n], BaseException)]
        if len(good) < 2:
            errs = "; ".join(f"{n}: {type(e).__name__}: {str(e).splitlines()[0]}" for n, e in compiled.items()
                             if isinstance(e, BaseException))
            raise _UsageError(f"fewer than two backends compile the constraint ({errs})")
    except StructgateError as e:
        from . import describe_error

        print(f"{prog}: error: {describe_error(e)}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2

    reports = [diff_masks(names, vocab, constraint, text=t, cap=args.cap, compiled=compiled) for t in texts]
    ok = all(r.ok for r in reports)
    if args.json:
        print(json.dumps({"tokenizer": args.tokenizer, "backends": names, "ok": ok,
                          "reports": [r.as_dict() for r in reports]}, ensure_ascii=False, default=list))
    else:
        for r in reports:
            print(r.format())
        n_bad = sum(not r.ok for r in reports)
        print(f"{len(reports)} texts, {n_bad} with disagreements" if n_bad else f"{len(reports)} texts, no disagreement")
    return 0 if ok else 1


def _run_maskbench(args, names) -> int:
    import glob
    import os

    from ..diff import load_maskbench_cases, run_corpus
    from ..vocab import load_vocabulary
    from .check import _UsageError

    files: list[str] = []
    for p in args.maskbench:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "*.jsonl")))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise _UsageError(f"--maskbench: no such file or directory: {p}")
    if not files:
        raise _UsageError("--maskbench: no .jsonl files found")
    vocab = load_vocabulary(args.tokenizer)
    cases = load_maskbench_cases(files, limit=args.limit, max_texts=max(1, args.max_texts))
    opts = {"whitespace": "compact"} if args.compact else None
    s = run_corpus(names, vocab, cases, options=opts, cap=args.cap, time_limit_s=args.time_limit)
    if args.json:
        print(json.dumps(s, ensure_ascii=False, default=list))
    else:
        print(f"{s['cases']} schemas, {s['texts']} texts: {s['ok_texts']} identical, {s['disagreeing_texts']} "
              f"disagreeing; compile errors {s['compile_errors']}; {s['seconds']} s")
        for r in s["reports"]:
            if r["disagreements"] or (r["stopped"] and r["stopped"]["accepted_by"]):
                print(f"[{r['case']}]")
                from ..diff import DiffReport, MaskDisagreement

                rep = DiffReport(**{k: v for k, v in r.items()
                                    if k not in ("ok", "case", "disagreements", "split_stop")})
                rep.disagreements = [MaskDisagreement(**d) for d in r["disagreements"]]
                print(rep.format(max_groups=5))
    return 0 if s["disagreeing_texts"] == 0 and not any(s["compile_errors"].values()) else 1
