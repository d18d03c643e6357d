"""``structgate check``: compile a constraint with one backend and walk texts through its masks.

::

    structgate check --backend NAME --tokenizer TOK
                     (--regex R | --json-schema FILE_OR_JSON | --choice A --choice B ... | --grammar FILE
                      | --json-object)
                     [--text S ...] [--jsonl FILE] [--json]

Each text is tokenized without special tokens (``Vocabulary.encode``); every token must be allowed
by the mask before the matcher advances, and EOS must be allowed at the end. Per text it reports
``accepted``, ``rejected_at`` (the index of the first token the mask forbids, ``"eos"`` when all
tokens passed but EOS is forbidden, ``null`` when accepted) and ``n_tokens``; once, the compile
time in milliseconds. ``--json`` prints::

    {"backend": ..., "tokenizer": ..., "compile_ms": ..., "results": [{"text", "accepted", "rejected_at", "n_tokens"}]}

Exit status: 0 when it ran (whatever the verdicts), 2 on a bad constraint / unknown backend or
tokenizer (one line naming the typed error, no traceback).
"""
from __future__ import annotations

import json
import os
import sys

from .. import _jsontext

_GRAMMAR_FORMATS = {".lark": "lark", ".gbnf": "gbnf", ".ebnf": "ebnf"}


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="compile a constraint and check whether texts are accepted",
                       description="Compile a constraint with one backend, then walk each text's tokens "
                                   "through the backend's masks (every token allowed, then EOS).")
    p.add_argument("--backend", default="native", help="registered backend name (default: native)")
    p.add_argument("--tokenizer", default="llama3",
                   help="bundled tokenizer name, folder, tokenizer.json, .gguf or .tiktoken (default: llama3)")
    add_constraint_arguments(p.add_mutually_exclusive_group(required=True))
    p.add_argument("--text", action="append", default=[], help="text to check (repeatable)")
    p.add_argument("--jsonl", metavar="FILE", help='file of {"text": ...} lines to check')
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--options", metavar="JSON", default=None,
                   help='compile options, a JSON object of structgate.CompileOptions fields (as '
                        '$STRUCTGATE_BACKEND_OPTIONS in vLLM), e.g. \'{"step_timeout_s": 10, '
                        '"whitespace": "compact"}\'')
    p.set_defaults(func=run)


def _options(args) -> dict:
    """``--options`` as a dict (ValueError naming the flag when it is not a JSON object)."""
    if not getattr(args, "options", None):
        return {}
    try:
        opts = _jsontext.loads(args.options)
    except json.JSONDecodeError as e:
        raise ValueError(f"--options is not JSON: {e}") from None
    if not isinstance(opts, dict):
        raise ValueError(f"--options must be a JSON object, got {type(opts).__name__}")
    return opts


def add_constraint_arguments(group) -> None:
    """The constraint options every subcommand that compiles one shares (``--regex``,
    ``--json-schema``, ``--choice``, ``--grammar``, ``--json-object``), read back by :func:`_constraint`."""
    group.add_argument("--regex", help="regular expression (full match)")
    group.add_argument("--json-schema", dest="json_schema", metavar="FILE_OR_JSON",
                       help="JSON Schema: a file path if it exists, else JSON text")
    group.add_argument("--choice", action="append", help="one allowed string (repeat for more)")
    group.add_argument("--grammar", metavar="FILE", help="grammar file (.lark, .gbnf/.ebnf)")
    group.add_argument("--json-object", dest="json_object", action="store_true", help="any JSON object")


def _constraint(args):
    from ..backends.interface import Constraint

    if args.regex is not None:
        return Constraint.regex(args.regex)
    if args.json_schema is not None:
        src = args.json_schema
        if os.path.isfile(src):
            with open(src, "rb") as f:
                src = f.read()
        elif not src.lstrip().startswith(("{", "[", "true", "false")) and (os.sep in src or src.endswith(".json")):
            from ..errors import InvalidConstraintError

            raise InvalidConstraintError(f"--json-schema {src!r}: no such file (and not JSON text)")
        return Constraint.json_schema(src)
    if args.choice is not None:
        return Constraint.choice(args.choice)
    if getattr(args, "json_object", False):
        return Constraint.json_object()
    ext = os.path.splitext(args.grammar)[1].lower()
    with open(args.grammar, encoding="utf-8") as f:
        text = f.read()
    return Constraint.grammar(text, _GRAMMAR_FORMATS.get(ext))


def _texts(args) -> list[str]:
    """The texts of ``--text`` and ``--jsonl``; a usage error naming the text (``--text 2``) or the
    line (``FILE:3``) for one that cannot be read or tokenized (a lone surrogate: no UTF-8 bytes)."""
    texts = []
    for n, text in enumerate(args.text, 1):
        _tokenizable(text, f"--text {n}")
        texts.append(text)
    if args.jsonl:
        with open(args.jsonl, "rb") as fb:
            raw = fb.read()
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise _UsageError(f"{args.jsonl}:{line}: not UTF-8 text (byte {e.start}: {raw[e.start]:#04x})") from None
        for n, line in enumerate(body.split("\n"), 1):  # not splitlines: U+2028 may sit raw in a JSON string
            if not line.strip():
                continue
            try:
                obj = _jsontext.loads(line)
                texts.append(obj["text"] if isinstance(obj, dict) else obj)
            except (json.JSONDecodeError, KeyError) as e:
                raise _UsageError(f"{args.jsonl}:{n}: expected a JSON object with a \"text\" field ({e})")
            if not isinstance(texts[-1], str):
                raise _UsageError(f"{args.jsonl}:{n}: \"text\" must be a string")
            _tokenizable(texts[-1], f"{args.jsonl}:{n}: \"text\"")
    return texts


def _tokenizable(text: str, label: str) -> None:
    """A usage error ``LABEL holds a lone surrogate U+D800 at character 0 ...`` for a text no
    tokenizer can encode."""
    from .._text import describe_lone_surrogate, lone_surrogate

    i = lone_surrogate(text)
    if i is not None:
        raise _UsageError(f"{label} holds {describe_lone_surrogate(text, i)}: a text with no UTF-8 bytes "
                          "cannot be tokenized")


from . import UsageError as _UsageError  # noqa: E402  (re-exported name used by diff)


def check_text(matcher, vocab, text: str, bitmask) -> dict:
    """Walk ``text``'s tokens through ``matcher`` (reset first), checking each token's mask bit
    before advancing, then the EOS bit. Returns ``{"text", "accepted", "rejected_at", "n_tokens"}``."""
    ids = vocab.encode(text)
    matcher.reset()
    rejected_at = None
    for i, t in enumerate(ids):
        matcher.fill_bitmask(bitmask, 0)
        if not (t < vocab.vocab_size and (int(bitmask[0, t >> 5]) >> (t & 31)) & 1) or not matcher.advance(t):
            rejected_at = i
            break
    if rejected_at is None:
        matcher.fill_bitmask(bitmask, 0)
        words = bitmask[0]
        if not any((int(words[e >> 5]) >> (e & 31)) & 1 for e in vocab.eos_token_ids):
            rejected_at = "eos"
    matcher.reset()
    return {"text": text, "accepted": rejected_at is None, "rejected_at": rejected_at, "n_tokens": len(ids)}




def error_doc(e: BaseException) -> dict:
    """The ``error`` object ``--json`` prints for a typed error: ``type`` (class name), ``kind``
    (``syntax``, ``unsupported``, ``limit``, ...), ``message``, and where the error has them
    ``position`` (characters into the constraint text), ``where`` (JSON pointer / rule / line),
    ``feature``, ``limit_name``."""
    doc = {"type": type(e).__name__, "kind": getattr(e, "kind", "error"),
           "message": getattr(e, "message", None) or str(e)}
    for k in ("position", "where", "feature", "limit_name"):
        v = getattr(e, k, None)
        if v is not None:
            doc[k] = v
    return doc


def run(args) -> int:
    import time

    from ..backends.registry import get_backend
    from ..bitmask import allocate_bitmask
    from ..errors import StructgateError
    from ..vocab import load_vocabulary
    from . import describe_error

    prog = "structgate check"
    try:
        texts = _texts(args)
        vocab = load_vocabulary(args.tokenizer)
        backend = get_backend(args.backend, vocab, **_options(args))
        constraint = _constraint(args)
        t0 = time.perf_counter()
        grammar = backend.compile(constraint)
        compile_ms = (time.perf_counter() - t0) * 1e3
        # a limit can also be met walking the texts (the native engine builds its automaton as
        # masks first need it: max_dfa_states, step_timeout_s): the same error exit
        matcher = grammar.matcher()
        bitmask = allocate_bitmask(1, vocab.vocab_size)
        results = [check_text(matcher, vocab, t, bitmask) for t in texts]
    except StructgateError as e:
        print(f"{prog}: error: {describe_error(e)}", file=sys.stderr)
        if args.json:
            print(json.dumps({"backend": args.backend, "tokenizer": args.tokenizer, "error": error_doc(e)},
                             ensure_ascii=False))
        return 2
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {type(e).__name__}: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"backend": args.backend, "tokenizer": args.tokenizer,
                              "error": {"type": type(e).__name__, "kind": "usage", "message": str(e)}},
                             ensure_ascii=False))
        return 2

    if args.json:
        print(json.dumps({"backend": args.backend, "tokenizer": args.tokenizer,
                          "compile_ms": round(compile_ms, 3), "results": results}, ensure_ascii=False))
        return 0
    print(f"backend {args.backend}, tokenizer {args.tokenizer}: compiled in {compile_ms:.1f} ms")
    if not texts:
        print("no --text or --jsonl given: nothing to check (the constraint compiles)")
    for r in results:
        verdict = "accepted" if r["accepted"] else f"rejected at {r['rejected_at']}"
        print(f"{verdict:<16} {r['n_tokens']:>4} tokens  {r['text']!r}")
    return 0
