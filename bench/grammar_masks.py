"""Mask time for grammar constraints: native vs structgate-xgrammar vs structgate-llguidance, one run.

For each grammar, token sequences are drawn as random walks over native's masks (seeded; a walk
that reaches an accepting state may stop), then every backend compiles the grammar once and fills
the bitmask before each token of the same sequences (the matcher advanced by the token after the
fill). Reported: compile time (TTFM, compile + first mask) and per-step mask time (TBM) average /
p50 / p99, CPU time of this process (single-threaded engines; the load average is printed).
Backends that refuse a grammar are reported as such.

Usage::

    .venv/bin/python bench/grammar_masks.py [--grammars tests/data/grammars/gbnf/json.gbnf,...]
        [--walks 20] [--steps 120] [--seed 0] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import numpy as np

from structgate import Constraint, get_backend, load_vocabulary

HERE = Path(__file__).resolve().parent.parent
DEFAULT = ["tests/data/grammars/gbnf/json.gbnf", "tests/data/grammars/gbnf/c.gbnf", "tests/data/grammars/gbnf/arithmetic.gbnf",
           "tests/data/grammars/lark/json.lark"]


def walks(grammar, vocab, n_walks: int, n_steps: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    eos = set(vocab.eos_token_ids)
    for _ in range(n_walks):
        m = grammar.matcher()
        seq: list[int] = []
        for _ in range(n_steps):
            ids = [t for t in m.allowed_token_ids().tolist() if t not in eos]
            if not ids or (m.is_accepting() and rng.random() < 0.05):
                break
            t = rng.choice(ids)
            assert m.advance(t)
            seq.append(t)
        out.append(seq)
    return out


def run(args) -> dict:
    vocab = load_vocabulary("llama3")
    names = ["native", "structgate-xgrammar", "structgate-llguidance"]
    backends = {n: get_backend(n, vocab) for n in names}
    results = {"load_average": os.getloadavg(), "grammars": {}}
    for path in args.grammars.split(","):
        text = (HERE / path).read_text()
        fmt = "lark" if path.endswith(".lark") else "gbnf"
        c = Constraint.grammar(text, fmt)
        native_g = backends["native"].compile(c)
        seqs = walks(native_g, vocab, args.walks, args.steps, args.seed)
        row = np.empty((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
        per = {}
        for n, b in backends.items():
            if hasattr(b, "clear_cache"):
                b.clear_cache()
            t0 = time.process_time()
            try:
                g = b.compile(c)
                g.matcher().fill_bitmask(row, 0)
            except Exception as e:  # a refusal is a result of this benchmark
                per[n] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
                continue
            ttfm = time.process_time() - t0
            times = []
            rejected = 0
            for seq in seqs:
                m = g.matcher()
                for t in seq:
                    a = time.process_time()
                    m.fill_bitmask(row, 0)
                    times.append(time.process_time() - a)
                    if not m.advance(t):
                        rejected += 1
                        break
            us = np.asarray(times) * 1e6
            per[n] = {"ttfm_ms": round(ttfm * 1e3, 2), "tbm_avg_us": round(float(us.mean()), 1),
                      "tbm_p50_us": round(float(np.median(us)), 1), "tbm_p99_us": round(float(np.percentile(us, 99)), 1),
                      "steps": int(us.size), "walks_rejected": rejected}
        results["grammars"][path] = per
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammars", default=",".join(DEFAULT))
    ap.add_argument("--walks", type=int, default=20)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    res = run(args)
    print(f"load average {res['load_average']}")
    print("| grammar | backend | TTFM ms | TBM avg µs | p50 µs | p99 µs | steps | walks rejected |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for path, per in res["grammars"].items():
        for n, r in per.items():
            if "error" in r:
                print(f"| {Path(path).name} | {n} | refused: {r['error']} | | | | | |")
            else:
                print(f"| {Path(path).name} | {n} | {r['ttfm_ms']} | {r['tbm_avg_us']} | {r['tbm_p50_us']} | "
                      f"{r['tbm_p99_us']} | {r['steps']} | {r['walks_rejected']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
