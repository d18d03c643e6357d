"""Where native's first-visit mask time goes: wall time per call of chosen ``PushdownIndex`` methods
while MaskBench instances are walked, in one process, single threaded.

Usage (from the repository root)::

    .venv/bin/python bench/first_visits.py --corpus DIR/maskbench --prefix BFCL --step 10 \
        --methods _compute,_walk,_descend,_compute_row,_allowed_row

Each method's outermost calls are timed (a recursive or nested call of the same method counts
once, inside its caller); methods nest, so the times of a caller include its callees'. Prints, per
method, the number of outermost calls, their total seconds and the mean in µs, and the total mask
time of the walk (``fill_bitmask``, as ``structgate bench maskbench`` times it). The timers add
~1 µs a call: compare the methods' shares, not the total, with a benchmark run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from structgate import Constraint  # noqa: E402
from structgate.native import pushdown  # noqa: E402
from structgate_bench.sample import add_sample_args, load_sample  # noqa: E402
from structgate_bench.worker import _make_backend, _walk  # noqa: E402


def _time_method(name: str, stats: dict) -> None:
    orig = getattr(pushdown.PushdownIndex, name)
    depth = [0]

    def timed(self, *args):
        if depth[0]:
            return orig(self, *args)
        depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return orig(self, *args)
        finally:
            depth[0] -= 1
            s = stats.setdefault(name, [0, 0])
            s[0] += 1
            s[1] += time.perf_counter_ns() - t0

    setattr(pushdown.PushdownIndex, name, timed)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 10)
    ap.add_argument("--methods", default="_compute,_walk,_descend,_compute_row,_allowed_row")
    a = ap.parse_args(argv)
    bad = [m for m in a.methods.split(",") if not callable(getattr(pushdown.PushdownIndex, m, None))]
    if bad:
        ap.error(f"--methods: not a PushdownIndex method: {', '.join(bad)}")
    items, vocab, width, eos = load_sample(ap, a)
    be = _make_backend("native", vocab, {"threads": 1})
    stats: dict[str, list[int]] = {}
    for m in a.methods.split(","):
        _time_method(m, stats)
    total = n = 0
    for it in items:
        try:
            g = be.compile(Constraint(it.kind, it.value, None))
        except Exception:  # refused schemas: no masks to time
            continue
        _res, steps = _walk(g, it.tests, eos, width)
        total += int(steps.sum())
        n += steps.size
    print(f"schemas {len(items)}  mask steps {n}  mask time {total / 1e9:.2f} s")
    for m, (calls, ns) in stats.items():
        print(f"{m:16s} calls {calls:7d}  {ns / 1e9:6.2f} s  {ns / calls / 1e3:8.1f} us/call")


if __name__ == "__main__":
    main()
