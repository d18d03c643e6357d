"""Where the cyclic garbage collector's pauses land in native's MaskBench walk: every selected
schema compiled and walked in one process, as the benchmark's worker does (collector on), with
each collection timed by ``gc.callbacks``.

Usage (from the repository root)::

    .venv/bin/python bench/gc_pauses.py --corpus DIR/maskbench --step 3

Prints the walk's total and slowest steps (fill + advance, µs, with their schema), the
generation-2 collections (count, seconds in all, the largest, with the schema being walked), and
the tracked objects by type in the middle of the run (the 64 cached grammars, the process-wide
caches), with the frozensets held by the cached grammars' indexes by attribute. A step that took
as long as a collection that ran during it is that collection: compare the two lists.
"""
from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from first_visits import _walk_split  # noqa: E402
from structgate import Constraint  # noqa: E402
from structgate.native import pushdown  # noqa: E402
from structgate_bench.sample import add_sample_args, bench_options, load_sample  # noqa: E402
from structgate_bench.worker import _make_backend  # noqa: E402


def _heap(be) -> str:
    objs = gc.get_objects()
    by_type = collections.Counter(type(o).__name__ for o in objs)
    held: collections.Counter = collections.Counter()
    seen: set[int] = set()
    for cg in list(be._cache.values()):
        ix = getattr(cg, "token_index", None)
        if not isinstance(ix, pushdown.PushdownIndex):
            continue
        for name, v in vars(ix).items():
            if isinstance(v, dict):
                vals = list(v.keys()) + list(v.values())
            elif isinstance(v, list):
                vals = v
            else:
                continue
            for o in vals:
                if type(o) is frozenset and id(o) not in seen:
                    seen.add(id(o))
                    held[name] += 1
    return (f"tracked objects {len(objs)}: {by_type.most_common(8)}\n"
            f"  frozensets held by the cached indexes: {held.most_common(6)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 3)
    a = ap.parse_args(argv)
    items, vocab, width, eos = load_sample(ap, a)
    be = _make_backend("native", vocab, bench_options(threads=1))
    cur = [""]
    started: dict[int, float] = {}
    gen2: list[tuple[float, str]] = []

    def timer(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[2] = time.perf_counter()
        else:
            gen2.append((time.perf_counter() - started[2], cur[0]))

    gc.callbacks.append(timer)
    steps: list[tuple[int, str]] = []
    walk_ns = 0
    heap = ""
    for n, it in enumerate(items):
        cur[0] = it.id
        try:
            g = be.compile(Constraint(it.kind, it.value, None))
        except Exception:  # refused schemas: nothing to walk
            continue
        recs = _walk_split(g, it.tests, eos, width)
        for fill, adv, _cached in recs:
            steps.append((fill + adv, it.id))
            walk_ns += fill + adv
        if n == len(items) // 2:
            heap = _heap(be)
    gc.callbacks.remove(timer)
    steps.sort(reverse=True)
    print(f"schemas {len(items)}  mask steps {len(steps)}  walk {walk_ns / 1e9:.2f} s")
    print("slowest steps (µs):", [(round(s / 1e3), i) for s, i in steps[:8]])
    if gen2:
        big = sorted(gen2, reverse=True)
        print(f"generation-2 collections {len(gen2)}  {sum(d for d, _ in gen2):.2f} s  "
              f"largest {[(round(d * 1e3), i) for d, i in big[:8]]} (ms)")
    if heap:
        print("mid-run " + heap)


if __name__ == "__main__":
    main()
