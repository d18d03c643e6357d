"""Where native's first-visit mask time goes: wall time per call of chosen ``PushdownIndex`` methods
while MaskBench instances are walked, in one process, single threaded.

Usage (from the repository root)::

    .venv/bin/python bench/first_visits.py --corpus DIR/maskbench --prefix BFCL --step 10 \
        --methods _compute,_walk,_descend,_compute_row,_allowed_row

First, the mask steps split by kind: a *cached* step fills a row the index already holds, a
*first visit* computes it (``PushdownIndex.is_cached`` before the fill); each step's
``advance`` is timed apart. Grammars compile with the benchmark's options
(``structgate_bench.sample.bench_options``).

Each method's outermost calls are timed (a recursive or nested call of the same method counts
once, inside its caller); methods nest, so the times of a caller include its callees'. Prints, per
method, the number of outermost calls, their total seconds and the mean in µs, and the total mask
time of the walk (``fill_bitmask``, as ``structgate bench maskbench`` times it). The timers add
~1 µs a call: compare the methods' shares, not the total, with a benchmark run.

The *advance* line also holds the cyclic collector's work: the engine pauses the collector while it
computes (``pushdown.no_gc``), so the collection its allocations call for runs at the next
allocation after the fill, inside the advance's timer. ``--no-gc`` disables the collector for the
whole run (as ``bench/ab_walk.py --no-gc``): the difference between two runs is the collector's
share of the mask time.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from structgate.native import pushdown  # noqa: E402
from structgate_bench.sample import add_sample_args, bench_options, compiled_items, load_sample  # noqa: E402
import numpy as np  # noqa: E402

from structgate_bench.worker import _make_backend  # noqa: E402


def _time_method(name: str, stats: dict) -> None:
    orig = getattr(pushdown.PushdownIndex, name)
    depth = [0]

    def timed(self, *args, **kw):
        if depth[0]:
            return orig(self, *args, **kw)
        depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return orig(self, *args, **kw)
        finally:
            depth[0] -= 1
            s = stats.setdefault(name, [0, 0])
            s[0] += 1
            s[1] += time.perf_counter_ns() - t0

    setattr(pushdown.PushdownIndex, name, timed)


def _walk_split(grammar, tests: list[dict], eos_ids: tuple[int, ...], width: int) -> list[tuple[int, int, bool]]:
    """The benchmark's walk (``structgate_bench.worker._walk``: fill, check the token, advance;
    EOS at the end), recording per step ``(fill ns, advance ns, row cached before the fill)``."""
    pc = time.perf_counter_ns
    bm = np.empty((1, width), dtype=np.int32)
    row = bm[0]
    out = []
    for t in tests:
        ids = t["ids"]
        if ids is None:
            continue
        m = grammar.matcher()
        for tok in list(ids) + [eos_ids[0]]:
            index, state = m.row_source()
            cached = state < 0 or index.is_cached(state)
            t0 = pc()
            m.fill_bitmask(bm, 0)
            t1 = pc()
            ok = (int(row[tok >> 5]) >> (tok & 31)) & 1
            adv = m.advance(tok) if ok else False
            out.append((t1 - t0, pc() - t1, cached))
            if not ok or not adv:
                break
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 10)
    ap.add_argument("--methods", default="_compute,_walk,_descend,_compute_row,_allowed_row")
    ap.add_argument("--no-gc", action="store_true", help="the cyclic collector disabled for the whole run")
    a = ap.parse_args(argv)
    bad = [m for m in a.methods.split(",") if not callable(getattr(pushdown.PushdownIndex, m, None))]
    if bad:
        ap.error(f"--methods: not a PushdownIndex method: {', '.join(bad)}")
    items, vocab, width, eos = load_sample(ap, a)
    be = _make_backend("native", vocab, bench_options(threads=1))
    stats: dict[str, list[int]] = {}
    originals = {m: pushdown.PushdownIndex.__dict__.get(m) for m in a.methods.split(",")}
    for m in originals:
        _time_method(m, stats)
    recs: list[tuple[int, int, bool]] = []
    was = gc.isenabled()
    if a.no_gc:
        gc.disable()
    try:
        for it, g in compiled_items(be, items):
            recs.extend(_walk_split(g, it.tests, eos, width))
    finally:
        if was:
            gc.enable()
        for m, f in originals.items():  # (the timers off again: main may run in a test's process)
            if f is None:  # inherited
                delattr(pushdown.PushdownIndex, m)
            else:
                setattr(pushdown.PushdownIndex, m, f)
    if not recs:
        print(f"schemas {len(items)}  no mask steps")
        return
    r = np.asarray(recs, dtype=np.int64)
    fill, adv, cached = r[:, 0] / 1e3, r[:, 1] / 1e3, r[:, 2].astype(bool)
    step = fill + adv
    total = step.sum() / 1e6
    print(f"schemas {len(items)}  mask steps {r.shape[0]}  mask time {total:.2f} s  "
          f"(avg {step.mean():.0f} us, p50 {np.percentile(step, 50):.1f} us, p99 {np.percentile(step, 99):.0f} us)")
    fv = ~cached
    print(f"  cached fills   {int(cached.sum()):7d} steps  {fill[cached].sum() / 1e6:6.2f} s")
    if fv.any():
        print(f"  first visits   {int(fv.sum()):7d} steps  {fill[fv].sum() / 1e6:6.2f} s  "
              f"(mean {fill[fv].mean():.0f} us, p50 {np.percentile(fill[fv], 50):.0f} us, "
              f"p90 {np.percentile(fill[fv], 90):.0f} us)")
    print(f"  advance        {r.shape[0]:7d} steps  {adv.sum() / 1e6:6.2f} s")
    for m, (calls, ns) in stats.items():
        print(f"{m:16s} calls {calls:7d}  {ns / 1e9:6.2f} s  {ns / calls / 1e3:8.1f} us/call")


if __name__ == "__main__":
    main()
