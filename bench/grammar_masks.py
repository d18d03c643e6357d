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
    .venv/bin/python bench/grammar_masks.py --profile --grammars tests/data/grammars/gbnf/arithmetic.gbnf

``--profile`` runs native alone over the same walks under cProfile (the mask fills only) and prints
the top functions by own time, the count of calls of the index's walk functions (trie walks over
the class trie, coarse walks, byte-by-byte token steps, suffix checks), the number of
configurations, stacks and computed rows, and the size of every class trie the walks used.
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
    results["load_average_end"] = os.getloadavg()
    return results


_COUNTED = ("_compute", "_rel_info", "_walk", "_walk_coarse", "_step_exact", "_suffix_ok", "_uncertain",
            "_allowed_row", "_compute_row", "_ensure_rows", "_closure", "_intern", "_trie_for")


def profile(args) -> None:
    """cProfile over native's mask fills along the walks, plus the index's counters (see ``--profile``)."""
    import cProfile
    import io
    import pstats

    from structgate.native import pushdown

    vocab = load_vocabulary("llama3")
    b = get_backend("native", vocab)
    print(f"load average {os.getloadavg()}")
    for path in args.grammars.split(","):
        text = (HERE / path).read_text()
        c = Constraint.grammar(text, "lark" if path.endswith(".lark") else "gbnf")
        seqs = walks(b.compile(c), vocab, args.walks, args.steps, args.seed)
        b.clear_cache()
        g = b.compile(c)
        idx = g.token_index
        counts = {k: 0 for k in _COUNTED if hasattr(pushdown.PushdownIndex, k)}
        sizes: dict = {}
        orig = {k: getattr(pushdown.PushdownIndex, k) for k in _COUNTED if hasattr(pushdown.PushdownIndex, k)}

        def wrap(name, f):
            def w(self, *a, **kw):
                counts[name] += 1
                if name == "_walk":  # which trie, how many nodes
                    tw = a[1] if len(a) > 1 else kw.get("tw")
                    t = tw[0] if tw is not None else self._trie
                    sizes[id(t)] = (t.n_nodes, len(t.levels), "grammar" if t is self._trie else "rule")
                    counts.setdefault("walk_trie_nodes", 0)
                    counts["walk_trie_nodes"] += t.n_nodes
                if name == "_step_exact":
                    counts.setdefault("step_exact_tokens", 0)
                    counts["step_exact_tokens"] += int(a[1].shape[0])
                if name == "_suffix_ok":
                    counts.setdefault("suffix_pairs", 0)
                    counts["suffix_pairs"] += int(a[1].shape[0])
                return f(self, *a, **kw)
            return w

        for k, f in orig.items():
            setattr(pushdown.PushdownIndex, k, wrap(k, f))
        row = np.empty((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
        pr = cProfile.Profile()
        steps = 0
        total = 0.0
        try:
            for seq in seqs:
                m = g.matcher()
                for t in seq:
                    a = time.process_time()
                    pr.enable()
                    m.fill_bitmask(row, 0)
                    pr.disable()
                    total += time.process_time() - a
                    steps += 1
                    m.advance(t)
        finally:
            for k, f in orig.items():
                setattr(pushdown.PushdownIndex, k, f)
        print(f"\n== {path}: {len(seqs)} walks, {steps} fills, {total * 1e3:.1f} ms CPU in fills (profiled), "
              f"avg {total / max(steps, 1) * 1e6:.0f} us")
        print(f"configurations {len(idx._cfg_keys)}, stacks {len(idx._stk_ret)}, rows cached {idx.n_cached}, "
              f"byte classes {idx.n_classes}, grammar trie {idx._trie.n_nodes} class nodes / "
              f"{len(idx._trie.levels)} levels")
        print("calls:", {k: v for k, v in counts.items() if v})
        print("tries walked (nodes, levels, kind):", sorted(set(sizes.values())))
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(18)
        print("\n".join(ln for ln in out.getvalue().splitlines() if ln.strip())[:6000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammars", default=",".join(DEFAULT))
    ap.add_argument("--walks", type=int, default=20)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="cProfile native's fills (see the module docstring)")
    args = ap.parse_args()
    if args.profile:
        profile(args)
        return
    res = run(args)
    print(f"load average {res['load_average']} at the start, {res['load_average_end']} at the end")
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
