"""Differential check of native's grammar masks against the peers, with ``structgate diff``.

For every GBNF grammar of llama.cpp (``tests/data/grammars/gbnf``) native is compared with
structgate-xgrammar, and for every Lark grammar of ours (``tests/data/grammars/lark``) with
structgate-llguidance, on the Llama 3 vocabulary:

* **hand-written strings** (``tests/data/grammars/hand_written.json``: valid and invalid ones);
* **random token walks** (seeded): half of them draw each token uniformly from *native's* mask, half
  from the *peer's* mask (so either engine allowing too much leads the walk where the other one
  rejects), a draw among tokens of at most two bytes with probability ½ (otherwise long tokens
  dominate), stopping at EOS-allowed states with probability 0.05 per step. The walk's bytes are
  decoded as UTF-8 (a walk ending inside a character is cut before it) and given as text.

All texts of one grammar go to ``structgate diff --backends native,PEER --grammar FILE --jsonl
TEXTS --json`` (run in this process through :func:`structgate.cli.main`, the command's own code),
which re-tokenizes each text and compares the full allowed-token set at every step. Each
disagreement group is then classified by :func:`explain` into one of the documented differences
(docs/backends.md, "Grammars: native vs XGrammar and llguidance"), or left *unexplained*.

Usage::

    .venv/bin/python bench/grammar_diff.py [--walks 6] [--steps 60] [--seed 0] [--nested 5]
        [--grammars json.gbnf,sql.lark,...] [--out DIR] [--json SUMMARY.json]

Exit status 0 when every disagreement is explained, 1 otherwise. ``tests/test_grammar_diff.py`` runs
it with a small number of walks (CI).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "grammars"
PEER = {"gbnf": "structgate-xgrammar", "lark": "structgate-llguidance"}


def grammar_files() -> list[Path]:
    """Every grammar compared: the 8 llama.cpp GBNF files, then the 3 Lark files."""
    return sorted((DATA / "gbnf").glob("*.gbnf")) + sorted((DATA / "lark").glob("*.lark"))


def hand_written(name: str) -> list[str]:
    """Valid then invalid hand-written strings for grammar file ``name``."""
    d = json.loads((DATA / "hand_written.json").read_text(encoding="utf-8"))[name]
    return d["valid"] + d["invalid"]


def nested(name: str, depth: int = 40) -> list[str]:
    """JSON texts nested ``depth`` deep for the JSON grammars (objects, arrays, both; json.gbnf's
    root is an object of integers), valid and with a wrong closing bracket."""
    if name not in ("json.gbnf", "json.lark"):
        return []
    obj = '{"a":' * depth + "1" + "}" * depth
    arr = '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    mixed = '{"k": [' * (depth // 2) + "1" + "]}" * (depth // 2)
    return [obj, arr, mixed, obj[:-1] + "]", mixed[:-2] + "}]"]


def _decode(data: bytes) -> tuple[str, bytes]:
    """``data`` as text, cut before its first byte that is not UTF-8, and the bytes from there
    (at most 4; empty when only an unfinished last character was cut). A walk over XGrammar's
    masks can take surrogate encodings (``ED A0..BF``), which no ``str`` holds."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        bad = b"" if e.reason == "unexpected end of data" else data[e.start:e.start + 4]
        return data[:e.start].decode("utf-8"), bad


def token_walks(grammar, vocab, n_walks: int, n_steps: int, rng: random.Random) -> tuple[list[str], int]:
    """``n_walks`` random token walks over ``grammar``'s masks (see the module docstring), as text,
    and the bytes that are not UTF-8 where walks had to be cut."""
    eos = set(vocab.eos_token_ids)
    short = {i for i, b in enumerate(vocab.token_bytes) if 0 < len(b) <= 2}
    out = []
    bad = []
    for _ in range(n_walks):
        m = grammar.matcher()
        data = b""
        for _ in range(n_steps):
            ids = [t for t in m.allowed_token_ids().tolist() if t not in eos and t < vocab.n_tokens]
            if not ids or (m.is_accepting() and rng.random() < 0.05):
                break
            pool = [t for t in ids if t in short] if rng.random() < 0.5 else ids
            t = rng.choice(pool or ids)
            if not m.advance(t):
                raise AssertionError(f"token {t} was in the mask but advance() refused it")
            data += vocab.token_bytes[t]
        text, cut = _decode(data)
        out.append(text)
        if cut:
            bad.append(cut)
    return out, bad


_WORD = re.compile(r"[A-Za-z0-9_\u0130\u0131]+")
_NAME_OR_INT = re.compile(r"[a-z_][a-z0-9_]*|[0-9]+")
_SQL_KEYWORDS = {"select", "distinct", "from", "as", "count", "sum", "min", "max", "avg", "left", "inner", "join",
                 "on", "where", "or", "and", "not", "order", "by", "asc", "desc", "limit"}


def _in_json_string(data: bytes) -> bool:
    """Whether JSON text ``data`` ends inside a string (quotes not preceded by an escape)."""
    inside = esc = False
    for c in data:
        if inside and esc:
            esc = False
        elif inside and c == 0x5C:
            esc = True
        elif c == 0x22:
            inside = not inside
    return inside


def _surrogate(data: bytes) -> bool:
    """``data`` contains the 3-byte encoding of a UTF-16 surrogate (ED A0..BF), not UTF-8."""
    return re.search(rb"\xed[\xa0-\xbf]", data) is not None


_FOLDS = ("\u0130", "\u0131", "\u017f", "\u212a")  # İ ı ſ and the Kelvin sign: non-ASCII case variants


def _is_word(c: int) -> bool:
    return c < 0x80 and (chr(c).isalnum() or c == 0x5F)


def _glued(prefix: bytes, tok: bytes, viable) -> bool:
    """Some insertion of one or two blanks into the word (ASCII letters, digits, ``_``) that ``tok``
    ends or continues makes ``prefix + tok`` viable for ``viable`` (the peer: a greedy lexer)."""
    data = prefix + tok
    lo = len(prefix)
    while lo > 0 and _is_word(data[lo - 1]):
        lo -= 1
    cuts = [i for i in range(max(lo, 1), len(data)) if _is_word(data[i - 1]) and _is_word(data[i])]
    for k in (1, 2):
        for pos in itertools.combinations(cuts, k):
            spaced, last = b"", 0
            for i in pos:
                spaced += data[last:i] + b" "
                last = i
            if viable(spaced + data[last:]):
                return True
    return False


def _completions(tok: bytes) -> list[bytes]:
    """``tok`` if it is whole UTF-8, else ``tok`` completed by each of İ ı ſ K (Kelvin) whose
    encoding continues its last, incomplete character."""
    try:
        tok.decode("utf-8")
        return [tok]
    except UnicodeDecodeError as e:
        tail = tok[e.start:]
        return [tok[:e.start] + f.encode() for f in _FOLDS if f.encode().startswith(tail) and f.encode() != tail]


def explain(grammar: str, allowed_by: list[str], prefix: bytes, tok_bytes: list[bytes],
            peer_viable=None) -> str | None:
    """The documented difference (docs/backends.md, "Grammars") that tokens ``tok_bytes``, allowed
    by ``allowed_by`` only after the text ``prefix``, are an instance of; None if none is. Each rule
    is narrow: one grammar or dialect, one side, and a property every token must have. The run
    explains a disagreement group token by token (every listed token needs a reason)."""
    native_only = allowed_by == ["native"]
    if grammar.endswith(".gbnf") and not native_only:
        # XGrammar: a character class reaching past U+D7FF ([^...] or ...-\U0010FFFF) also takes the
        # surrogates U+D800-DFFF, encoded ED A0..BF xx, which are not UTF-8 (Python refuses them)
        if all(_surrogate(prefix[-1:] + t) or _surrogate(t) for t in tok_bytes):
            return "xgrammar-surrogates"
    if grammar == "json.lark" and not native_only:
        # llguidance's ESCAPED_STRING takes a raw newline inside a string; Lark's does not
        def nl_in_string(t: bytes) -> bool:
            return any(c == 0x0A and _in_json_string(prefix + t[:i]) for i, c in enumerate(t))
        if all(nl_in_string(t) for t in tok_bytes):
            return "lark-escaped-string-newline"
    if grammar in ("json.lark", "sql.lark") and not native_only:
        # %ignore WS after a complete sentence: llguidance keeps lexing, native does not
        if all(t.strip(b" \t\n\r") == b"" for t in tok_bytes):
            return "lark-trailing-ignore"
    if grammar == "sql.lark" and native_only:
        # Python's IGNORECASE (Lark) folds İ/ı into i, llguidance's simple case folding does not (the
        # grammar is ASCII apart from its "..."i keywords, so a token with İ/ı or a lead byte C4
        # that could start one is allowed only through the folding)
        full = [c for t in tok_bytes for c in _completions(t)]
        if full and all("\u0130".encode() in t or "\u0131".encode() in t for t in full):
            return "lark-case-folding"
        # scannerless (native, Lark's Earley) vs greedy lexer (llguidance): the token glues two
        # lexemes a lexer reads as one word ("dat" AS "ource" in "dataSource"); shown by llguidance
        # allowing the same text once one or two blanks separate the lexemes (ſ and the Kelvin sign
        # fold alike in both engines)
        if peer_viable is not None and full and all(_glued(prefix, t, peer_viable) for t in full):
            return "lark-longest-match"
    return None


def run(args) -> dict:
    from structgate.cli import main as cli_main
    from structgate import Constraint, get_backend, load_vocabulary

    vocab = load_vocabulary("llama3")
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="grammar-diff-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(args.grammars.split(",")) if args.grammars else None
    summary: dict = {"load_average": os.getloadavg(), "seed": args.seed, "walks": args.walks,
                     "steps": args.steps, "grammars": {}}
    backends = {n: get_backend(n, vocab) for n in ("native", *PEER.values())}
    for path in grammar_files():
        if wanted and path.name not in wanted:
            continue
        t0 = time.perf_counter()
        rng = random.Random(f"{args.seed}:{path.name}")  # per grammar: a subset run draws the same walks
        dialect = path.suffix[1:]
        peer = PEER[dialect]
        c = Constraint.grammar(path.read_text(encoding="utf-8"), dialect)
        gs = {"native": backends["native"].compile(c), peer: backends[peer].compile(c)}
        texts = [("hand", s) for s in hand_written(path.name)] + [("nested40", s) for s in nested(path.name)[:args.nested]]
        n_native = (args.walks + 1) // 2
        invalid_utf8: dict = {}
        explained_walks: dict = {}
        unexplained_walks: list = []
        for who, k in (("native", n_native), (peer, args.walks - n_native)):
            ws, cuts = token_walks(gs[who], vocab, k, args.steps, rng)
            invalid_utf8[who] = [repr(x) for x in cuts]
            texts += [(f"walk:{who}", s) for s in ws]
            for x in cuts:  # the walk's own evidence: the engine allowed bytes that are not UTF-8
                why = explain(path.name, [who], b"", [x])
                if why:
                    explained_walks[why] = explained_walks.get(why, 0) + 1
                else:
                    unexplained_walks.append({"walk_over": who, "bytes": repr(x)})
        jl = out_dir / f"{path.name}.jsonl"
        jl.write_text("".join(json.dumps({"text": s, "source": src}, ensure_ascii=False) + "\n" for src, s in texts),
                      encoding="utf-8")
        cmd = ["diff", "--backends", f"native,{peer}", "--tokenizer", "llama3", "--grammar", str(path),
               "--jsonl", str(jl), "--cap", str(args.cap), "--json"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli_main(cmd)
        res = json.loads(buf.getvalue())
        (out_dir / f"{path.name}.diff.json").write_text(json.dumps(res, indent=1, ensure_ascii=False), encoding="utf-8")
        row = {"peer": peer, "command": "structgate " + " ".join(cmd), "rc": rc, "texts": len(texts),
               "steps_compared": 0, "explained": {}, "unexplained": [], "explained_split": {}, "accepted": {"native": 0, peer: 0},
               "split_verdicts": [], "walks_with_invalid_utf8": invalid_utf8,
               "explained_walks": explained_walks, "unexplained_walks": unexplained_walks}
        peer_g = gs[peer]

        def peer_viable(data: bytes, peer_g=peer_g) -> bool:
            try:
                ids_ = list(vocab.encode(data.decode("utf-8")))
            except UnicodeDecodeError:
                return False
            return peer_g.matcher().validate(ids_) == len(ids_)

        for (src, s), r in zip(texts, res["reports"]):
            ids = list(vocab.encode(s))
            row["steps_compared"] += r["steps_compared"]

            def prefix(step: int) -> bytes:
                return b"".join(vocab.token_bytes[i] for i in ids[:step] if i < vocab.n_tokens)

            for d in r["disagreements"]:
                toks = [eval(b) if b.startswith("b") else b"" for b in d["token_bytes"]]  # noqa: S307 - repr of bytes
                whys = [explain(path.name, d["allowed_by"], prefix(d["step"]), [t], peer_viable) for t in toks]
                if all(whys):
                    for why in set(whys):
                        row["explained"][why] = row["explained"].get(why, 0) + 1
                else:
                    row["unexplained"].append({"source": src, "text": s, "step": d["step"], "prefix": d["prefix"],
                                               "allowed_by": d["allowed_by"], "count": d["count"],
                                               "token_bytes": d["token_bytes"]})
            st = r["stopped"]
            if st and st["accepted_by"]:
                tok = ids[st["step"]]
                why = explain(path.name, st["accepted_by"], prefix(st["step"]), [vocab.token_bytes[tok]], peer_viable)
                if why:
                    row["explained_split"][why] = row["explained_split"].get(why, 0) + 1
                else:
                    row["split_verdicts"].append({"source": src, "text": s, "stopped": st})
            elif not st and len(set(r["accepting"].values())) > 1:
                row["split_verdicts"].append({"source": src, "text": s, "accepting": r["accepting"]})
            for n, acc in r["accepting"].items():
                row["accepted"][n] += bool(acc) and not st
        row["seconds"] = round(time.perf_counter() - t0, 1)
        summary["grammars"][path.name] = row
        print(f"{path.name:16s} vs {peer:22s} {len(texts):3d} texts {row['steps_compared']:5d} masks  "
              f"explained {row['explained'] or '-'}  unexplained {len(row['unexplained'])}  "
              f"split verdicts explained {row['explained_split'] or '-'} unexplained {len(row['split_verdicts'])}  "
              f"non-UTF-8 walks explained {explained_walks or '-'} unexplained {len(unexplained_walks)}  {row['seconds']} s", file=sys.stderr)
    summary["out_dir"] = str(out_dir)
    summary["ok"] = all(not r["unexplained"] and not r["split_verdicts"] and not r["unexplained_walks"]
                        for r in summary["grammars"].values())
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--walks", type=int, default=6, help="random token walks per grammar (half over each engine)")
    ap.add_argument("--steps", type=int, default=60, help="tokens per walk at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nested", type=int, default=5, help="40-deep JSON texts for the JSON grammars (at most 5)")
    ap.add_argument("--grammars", help="comma-separated file names (default: all 11)")
    ap.add_argument("--cap", type=int, default=8, help="token ids listed per disagreement group")
    ap.add_argument("--out", help="folder for the texts and the raw `structgate diff` output")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)
    s = run(args)
    print(f"load average {s['load_average']}; raw output in {s['out_dir']}", file=sys.stderr)
    for name, r in s["grammars"].items():
        for u in r["unexplained"][:10]:
            print(f"UNEXPLAINED {name}: {u}", file=sys.stderr)
        for u in r["split_verdicts"][:10]:
            print(f"SPLIT VERDICT {name}: {u}", file=sys.stderr)
        for u in r["unexplained_walks"][:10]:
            print(f"NON-UTF-8 WALK {name}: {u}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
