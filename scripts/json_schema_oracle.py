"""Record what the native JSON Schema compiler produces for a corpus of schemas (refactor oracle).

For every schema of the MaskBench files (``MASKBENCH/*.jsonl``, field ``schema``) and of the
JSON-Schema-Test-Suite (``JSTS/tests/draft2020-12/*.json``, each case's ``schema``) this runs
``schema_to_regex`` and ``schema_to_grammar`` under two option sets (the defaults, and
``CompileOptions(whitespace="flexible", additional_properties=True)``) and writes one JSON line per
(schema, function, options): ``{"id", "fn", "opt", "ok": sha256 of the output | null, "size",
"err": "Type: message" | null}``. The grammar digest covers the root, every rule name and a
structural digest of each rule's AST (linear in the hash-consed DAG). Two runs of the same compiler
give identical files; a refactor must too (``--compare OLD NEW`` prints the differences).

Usage::

    python scripts/json_schema_oracle.py --maskbench DIR --jsts DIR --out FILE [--jobs N] [--timeout S]
    python scripts/json_schema_oracle.py --compare OLD NEW

The data directories are development data (not needed by the project at run time).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import signal
import sys
from multiprocessing import Pool


def _items(maskbench: str | None, jsts: str | None):
    if maskbench:
        for path in sorted(glob.glob(os.path.join(maskbench, "*.jsonl"))):
            base = os.path.basename(path)
            with open(path) as f:
                for i, line in enumerate(f):
                    rec = json.loads(line)
                    yield f"mb:{base}:{i}:{rec.get('id', '')}", rec["schema"]
    if jsts:
        for path in sorted(glob.glob(os.path.join(jsts, "tests", "draft2020-12", "*.json"))):
            base = os.path.basename(path)
            with open(path) as f:
                cases = json.load(f)
            for i, case in enumerate(cases):
                yield f"jsts:{base}:{i}", case["schema"]


def _digest_node(node, memo) -> str:
    from structgate.native.ir import ByteSet, Ref
    from structgate.native.regex.parser import Alt, Anchor, Chars, Concat, Repeat

    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in memo:
            continue
        kids = n.items if isinstance(n, (Concat, Alt)) else (n.item,) if isinstance(n, Repeat) else ()
        if not done and kids:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        if isinstance(n, (Chars, ByteSet)):
            s = f"{type(n).__name__}{n.ranges!r}"
        elif isinstance(n, Ref):
            s = f"Ref({n.name!r})"
        elif isinstance(n, Anchor):
            s = f"Anchor({n.kind!r})"
        elif isinstance(n, Repeat):
            s = f"Repeat({memo[id(n.item)]},{n.min},{n.max})"
        elif isinstance(n, (Concat, Alt)):
            s = f"{type(n).__name__}(" + ",".join(memo[id(k)] for k in n.items) + ")"
        else:
            s = repr(n)
        memo[id(n)] = hashlib.sha256(s.encode()).hexdigest()[:24]
    return memo[id(node)]


def _grammar_text(g) -> str:
    memo: dict = {}
    parts = [f"root={g.root}"]
    for name, body in g.rules.items():
        parts.append(f"{name}={_digest_node(body, memo)}")
    parts.append(json.dumps(sorted((k, str(v)) for k, v in (g.origin or {}).items())))
    return "\n".join(parts)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _run(args):
    key, schema, timeout = args
    from structgate.backends.interface import CompileOptions
    from structgate.native.json_schema import schema_to_grammar, schema_to_regex

    opts = {"default": CompileOptions(),
            "flex-addl": CompileOptions(whitespace="flexible", additional_properties=True)}
    out = []
    signal.signal(signal.SIGALRM, _alarm)
    for fn_name, fn in (("regex", schema_to_regex), ("grammar", schema_to_grammar)):
        for oname, o in opts.items():
            rec = {"id": key, "fn": fn_name, "opt": oname, "ok": None, "size": None, "err": None}
            signal.alarm(timeout)
            try:
                r = fn(schema, o)
                text = r if isinstance(r, str) else _grammar_text(r)
                rec["ok"] = hashlib.sha256(text.encode()).hexdigest()
                rec["size"] = len(text) if isinstance(r, str) else len(r.rules)
            except _Timeout:
                rec["err"] = "TIMEOUT"
            except RecursionError:
                rec["err"] = "RecursionError"
            except Exception as e:  # recorded, compared verbatim
                rec["err"] = f"{type(e).__name__}: {e}"
            finally:
                signal.alarm(0)
            out.append(rec)
    return out


def compare(old: str, new: str) -> int:
    def load(p):
        with open(p) as f:
            return {(r["id"], r["fn"], r["opt"]): r for r in map(json.loads, f)}
    a, b = load(old), load(new)
    diffs = 0
    for k in sorted(set(a) | set(b)):
        ra, rb = a.get(k), b.get(k)
        if ra is None or rb is None or (ra["ok"], ra["err"]) != (rb["ok"], rb["err"]):
            if "TIMEOUT" in ((ra or {}).get("err") or "", (rb or {}).get("err") or ""):
                print("timeout (not comparable):", k)
                continue
            diffs += 1
            if diffs <= 50:
                print("DIFF", k, "\n  old:", ra and (ra["ok"], ra["err"]), "\n  new:", rb and (rb["ok"], rb["err"]))
    print(f"{len(a)} vs {len(b)} records, {diffs} differences")
    return 1 if diffs else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--maskbench")
    ap.add_argument("--jsts")
    ap.add_argument("--out")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    sys.setrecursionlimit(20000)
    items = [(k, s, a.timeout) for k, s in _items(a.maskbench, a.jsts)]
    with open(a.out, "w") as f, Pool(a.jobs, maxtasksperchild=200) as pool:
        for n, recs in enumerate(pool.imap(_run, items, chunksize=4)):
            for r in recs:
                f.write(json.dumps(r, sort_keys=True) + "\n")
            if n % 500 == 0:
                print(n, "/", len(items), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
