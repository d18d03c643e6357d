"""First-walk mask time per token on counted repeats and bounded strings, every backend in one
process: the constraints a user writes for "20 to 200 characters", "5 to 40 words", "a summary of
at least 80 characters", each walked once through a fresh compile (no row cached), as a request
does. MaskBench rarely has these (its strings are mostly short or unbounded).

Usage (from the repository root)::

    .venv/bin/python bench/counted_walks.py [--backends native,structgate-llguidance,structgate-xgrammar]

Prints per constraint and backend: compile ms, steps (tokens + EOS), first-walk µs per step
(fill + advance), the largest step, and the steps over 1 ms. A backend that rejects the valid text
is reported as such (the walk stops there). Single-threaded; compare backends within one run.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from structgate import Constraint  # noqa: E402
from structgate_bench import _vocab  # noqa: E402
from structgate_bench.sample import bench_options  # noqa: E402
from structgate_bench.worker import _make_backend  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog, and then runs away into the forest near the river "
        "bank where nobody goes")
WORDS = TEXT.replace(",", "")
CASES = [
    ("regex", r"[A-Z][a-z ,]{20,200}\.", TEXT[:80] + "."),
    ("regex", r"[A-Z][a-z ,]{60,200}", TEXT),
    ("regex", r"(?:[a-zA-Z]+ ){5,40}[a-zA-Z]+\.", " ".join(WORDS.split()[:16]) + "."),
    ("regex", r"(?:[^\n]{1,80}\n){1,20}", "line one is here\nline two is also here\nand a third line\n"),
    ("regex", r"(?:\w{1,20}\s?){1,50}", WORDS),
    ("json_schema", {"type": "object", "properties": {"summary": {"type": "string", "minLength": 80,
                                                                   "maxLength": 400}}, "required": ["summary"]},
     json.dumps({"summary": TEXT})),
    ("json_schema", {"type": "array", "items": {"type": "integer"}, "minItems": 40}, json.dumps(list(range(45)))),
]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="native,structgate-llguidance,structgate-xgrammar")
    ap.add_argument("--tokenizer", default="llama3")
    a = ap.parse_args(argv)
    vocab = _vocab.load_bench_vocabulary(a.tokenizer)
    width = (vocab.vocab_size + 31) // 32
    eos = int(vocab.eos_token_ids[0])
    bm = np.empty((1, width), dtype=np.int32)
    for kind, spec, text in CASES:  # (the texts are valid: a rejection is the backend's)
        assert re.fullmatch(spec, text) if kind == "regex" else json.loads(text) is not None, spec
    for name in a.backends.split(","):
        be = _make_backend(name, vocab, bench_options(threads=1))
        for kind, spec, text in CASES:
            ids = [int(x) for x in vocab.encode(text)] + [eos]
            t0 = time.perf_counter()
            g = be.compile(Constraint(kind, spec, None))
            compile_ms = (time.perf_counter() - t0) * 1e3
            m = g.matcher()
            steps: list[float] = []
            verdict = "accepted"
            for tok in ids:
                t = time.perf_counter()
                m.fill_bitmask(bm, 0)
                ok = (int(bm[0][tok >> 5]) >> (tok & 31)) & 1
                if ok and tok != eos:
                    ok = m.advance(tok)
                steps.append(time.perf_counter() - t)
                if not ok:
                    verdict = f"REJECTED at step {len(steps)}"
                    break
            s = np.array(steps) * 1e6
            label = spec if isinstance(spec, str) else json.dumps(spec)
            print(f"{name:22s} {label[:44]:44s} compile {compile_ms:8.1f} ms  steps {len(s):3d}  "
                  f"per step {s.mean():8.0f} µs  max {s.max():8.0f}  >1ms {int((s > 1000).sum()):2d}  {verdict}")


if __name__ == "__main__":
    main()
