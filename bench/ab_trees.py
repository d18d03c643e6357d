"""In-process A/B of two checkouts of structgate: both trees imported into one process (their
modules swapped in ``sys.modules`` before each use), every STEP-th MaskBench schema compiled by
each in turn (the order alternating per schema), with the benchmark's options; prints the compile
(TTFM: compile plus the first mask) and, with ``--walk``, the mask-walk (TBM) figures of each
side and the median per-schema ratio B/A.

Usage (from the repository root; ``git worktree add /tmp/base REV`` makes the other tree)::

    .venv/bin/python bench/ab_trees.py --corpus DIR/maskbench --step 2 --a /tmp/base --b . [--walk]
    .venv/bin/python bench/ab_trees.py --corpus DIR/maskbench --ids slowest.txt --step 1 --a /tmp/base --b .

Why: on a shared VM separate benchmark runs drift by ±20-25 % within minutes, more than the
changes they are meant to judge; here both sides run interleaved in one thread and are timed with
``time.thread_time_ns`` (this thread's CPU time only), so drift and other processes' load hit
them alike. Both trees' objects live in one heap, so the cyclic collector's pauses are longer
than in a benchmark worker: judge by the median per-schema ratio (base against itself: 1.000)
more than by sums or tails. Process-wide caches (class tries, shared walks, interned nodes) are
per tree, so neither side warms the other's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

_PREFIXES = ("structgate", "structgate_bench", "structgate_example_choice")


def _ours(name: str) -> bool:
    return name.split(".")[0] in _PREFIXES


def _load(root: Path, tokenizer: str, corpus: str | None):
    """Import one tree's structgate and harness; returns its handles and its module table."""
    for k in [k for k in sys.modules if _ours(k)]:
        del sys.modules[k]
    sys.path[:0] = [str(root), str(root / "bench")]
    try:
        from structgate import Constraint
        from structgate_bench import _vocab
        from structgate_bench.corpora import load_maskbench, tokenize_items
        from structgate_bench.worker import _make_backend, _walk

        vocab = _vocab.load_bench_vocabulary(tokenizer)
        opts = {"threads": 1, "whitespace": "flexible", "additional_properties": True}
        be = _make_backend("native", vocab, opts)
        # every engine module now, so the module table is whole: a module the compiler imports
        # lazily (``from ._overlap import ...`` inside a function) would otherwise be imported by
        # whichever side first needs it and then served to the other side from ``sys.modules``
        import importlib
        import pkgutil

        import structgate.native as native

        for m in pkgutil.walk_packages(native.__path__, "structgate.native."):
            try:
                importlib.import_module(m.name)
            except Exception:  # noqa: BLE001 - an optional frontend's dependency missing: not used
                pass
        items = load_maskbench(corpus) if corpus else None
    finally:
        del sys.path[:2]
    mods = {k: v for k, v in sys.modules.items() if _ours(k)}
    return {"C": Constraint, "be": be, "walk": _walk, "vocab": vocab, "tok": tokenize_items, "items": items,
            "mods": mods, "width": (vocab.vocab_size + 31) // 32, "eos": tuple(vocab.eos_token_ids)}


def _stats(x: np.ndarray) -> str:
    return (f"p50 {np.percentile(x, 50) / 1e3:.2f} ms  p90 {np.percentile(x, 90) / 1e3:.1f} ms  "
            f"p99 {np.percentile(x, 99) / 1e3:.1f} ms  sum {x.sum() / 1e6:.2f} s")


def add_tree_args(ap: argparse.ArgumentParser, step: int) -> None:
    """The arguments every two-tree comparison takes: ``--corpus``, ``--a``, ``--b``, ``--step``
    (default ``step``), ``--offset``, ``--tokenizer`` (also ``bench/ab_masks.py``)."""
    ap.add_argument("--corpus", required=True, help="MaskBench folder (*.jsonl)")
    ap.add_argument("--a", required=True, type=Path, help="tree A (a checkout's root)")
    ap.add_argument("--b", required=True, type=Path, help="tree B")
    ap.add_argument("--step", type=int, default=step, help="every STEP-th schema")
    ap.add_argument("--offset", type=int, default=0, help="first schema of the selection")
    ap.add_argument("--tokenizer", default="llama3")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_args(ap, 2)
    ap.add_argument("--walk", action="store_true", help="also walk each schema's instances (TBM)")
    ap.add_argument("--ids", type=Path, help="only these schemas (a file of ids, one a line, or a JSON list); "
                    "--step/--offset then apply to that list")
    ap.add_argument("--json", type=Path, help="write the per-schema figures here")
    ap.add_argument("--no-gc", action="store_true",
                    help="cyclic collector off for the timed loop: with both trees in one heap a "
                    "generation-2 collection costs ~1 s and lands on whichever side crosses the "
                    "threshold (the engine frees its own garbage by reference counting)")
    a = ap.parse_args(argv)
    if a.step < 1:
        ap.error("--step must be >= 1")
    for r in (a.a, a.b):
        if not (r / "structgate" / "__init__.py").is_file():
            ap.error(f"not a structgate checkout: {r}")
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    try:
        sides = [_load(a.a.resolve(), a.tokenizer, None), _load(a.b.resolve(), a.tokenizer, a.corpus)]
        items = sides[1]["items"]
        if a.ids:
            text = a.ids.read_text()
            want = json.loads(text) if text.lstrip().startswith("[") else text.split()
            pos = {k: i for i, k in enumerate(want)}
            items = sorted((it for it in items if it.id in pos), key=lambda it: pos[it.id])
        items = items[a.offset:: a.step]
        if a.walk:
            sides[1]["tok"](items, sides[1]["vocab"])
        compile_us: list[dict] = [{}, {}]
        if a.no_gc:
            import gc

            gc.collect()
            gc.disable()
        walk_ns = [0, 0]
        walk_us: list[dict] = [{}, {}]
        steps: list[list] = [[], []]
        for n, it in enumerate(items):
            for side in ((0, 1) if n % 2 == 0 else (1, 0)):
                S = sides[side]
                sys.modules.update(S["mods"])
                t0 = time.thread_time_ns()
                try:
                    g = S["be"].compile(S["C"](it.kind, it.value, None))
                    bm = np.zeros((1, S["width"]), dtype=np.int32)
                    g.matcher().fill_bitmask(bm, 0)
                except Exception:  # noqa: BLE001 - refused on this side: not compared
                    continue
                compile_us[side][it.id] = (time.thread_time_ns() - t0) / 1e3
                if a.walk:
                    t1 = time.thread_time_ns()
                    _res, st = S["walk"](g, it.tests, S["eos"], S["width"])
                    dt = time.thread_time_ns() - t1
                    walk_ns[side] += dt
                    walk_us[side][it.id] = dt / 1e3
                    steps[side].append(st)
    finally:
        if a.no_gc:
            import gc

            gc.enable()
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    keys = sorted(set(compile_us[0]) & set(compile_us[1]))
    if not keys:
        print("no schema compiled on both sides")
        return {}
    ca = np.array([compile_us[0][k] for k in keys])
    cb = np.array([compile_us[1][k] for k in keys])
    ratio = float(np.median(cb / ca))
    print(f"schemas {len(keys)} (compiled on both sides)")
    print(f"A {a.a}: compile {_stats(ca)}")
    print(f"B {a.b}: compile {_stats(cb)}")
    print(f"compile B/A: median per-schema ratio {ratio:.3f}, sums {cb.sum() / ca.sum():.3f}")
    out = {"n": len(keys), "median_ratio": ratio, "a_us": ca.tolist(), "b_us": cb.tolist()}
    if a.walk:
        for side, name in ((0, "A"), (1, "B")):
            s = np.concatenate(steps[side]) / 1e3 if steps[side] else np.zeros(1)
            print(f"{name}: walks {walk_ns[side] / 1e9:.2f} s thread time, TBM avg {s.mean():.0f} us  "
                  f"p99 {np.percentile(s, 99):.0f} us")
        out["walk_s"] = [w / 1e9 for w in walk_ns]
        wa = np.array([walk_us[0].get(k, 0.0) for k in keys])
        wb = np.array([walk_us[1].get(k, 0.0) for k in keys])
        ok = (wa > 0) & (wb > 0)
        if ok.any():
            print(f"walk B/A: median per-schema ratio {float(np.median(wb[ok] / wa[ok])):.3f}, "
                  f"sums {wb.sum() / max(wa.sum(), 1e-9):.3f}")
        out["walk_a_us"], out["walk_b_us"] = wa.tolist(), wb.tolist()
    if a.json:
        out["ids"] = keys
        a.json.write_text(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
