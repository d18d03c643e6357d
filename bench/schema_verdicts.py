"""Per-schema compile outcome of one checkout on MaskBench, and the comparison of two such runs.

``run``: every schema compiled to grammar IR by the native backend of the tree on ``PYTHONPATH``
(the benchmark's options: flexible whitespace, ``additional_properties=True``; the tiny test
vocabulary, since only the JSON Schema compiler runs), recording the error (type, limit name or
feature, message) or a hash of the grammar (rule bodies' reprs, object addresses removed). A schema
whose grammar hash is equal in two trees has the same MaskBench verdict in both, so only the
schemas ``compare`` lists need a mask run. Times are wall seconds per schema (noisy: use
``bench/ab_trees.py`` for compile times).

Usage::

    PYTHONPATH=TREE_A .venv/bin/python bench/schema_verdicts.py run --corpus MASKBENCH A.json
    PYTHONPATH=TREE_B .venv/bin/python bench/schema_verdicts.py run --corpus MASKBENCH B.json
    .venv/bin/python bench/schema_verdicts.py compare A.json B.json
"""
from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import json
import re
import time
from pathlib import Path


def run(corpus: str, out: str) -> None:
    from structgate import Constraint, get_backend
    from structgate.testing import tiny_vocabulary

    be = get_backend("native", tiny_vocabulary(), whitespace="flexible", additional_properties=True,
                     compile_timeout_s=10)
    res = {}
    for f in sorted(glob.glob(str(Path(corpus) / "*.jsonl"))):
        for line in open(f, encoding="utf-8"):
            if not line.strip():
                continue
            it = json.loads(line)
            t = time.perf_counter()
            try:
                g = be.to_grammar(Constraint("json_schema", json.dumps(it["schema"])))
                text = repr((g.root, sorted((k, repr(v)) for k, v in g.rules.items())))
                r = {"ok": hashlib.sha1(re.sub(r" at 0x[0-9a-f]+", "", text).encode()).hexdigest()[:16]}
            except Exception as e:  # noqa: BLE001 - every refusal is an outcome to compare
                r = {"err": type(e).__name__,
                     "detail": str(getattr(e, "limit_name", "") or getattr(e, "feature", "") or ""),
                     "msg": str(e)[:300]}
            r["t"] = round(time.perf_counter() - t, 4)
            res[it["id"]] = r
    Path(out).write_text(json.dumps(res, indent=0))
    print(len(res), "schemas", sum("err" in r for r in res.values()), "errors")


def compare(a_path: str, b_path: str) -> None:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())

    def kind(r):
        return ("ok",) if "ok" in r else (r["err"], r["detail"])

    ca = collections.Counter(kind(r) for r in a.values())
    cb = collections.Counter(kind(r) for r in b.values())
    print("errors A", sum(v for k, v in ca.items() if k[0] != "ok"), "B", sum(v for k, v in cb.items() if k[0] != "ok"))
    for k in sorted(set(ca) | set(cb)):
        if ca[k] != cb[k]:
            print(f"  {k}: {ca[k]} -> {cb[k]}")
    diff = [i for i in a if i in b and (kind(a[i]) != kind(b[i]) or a[i].get("ok") != b[i].get("ok"))]
    print(len(diff), "schemas changed")
    for i in diff:
        same = "ok" in a[i] and "ok" in b[i]
        print(" ", i, kind(a[i]), "->", kind(b[i]), "(grammar changed)" if same else "", (b[i].get("msg") or "")[:250])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--corpus", required=True, help="MaskBench folder (*.jsonl)")
    r.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a.corpus, a.out)
    else:
        compare(a.a, a.b)


if __name__ == "__main__":
    main()
