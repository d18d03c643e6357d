"""Where the mask-time gap between two backends lies: each MaskBench schema walked by both, in one
process, single threaded, interleaved schema by schema; prints the total mask time per step of
each, the schemas with the largest gap (with the gap's cumulative share) and the gap per split.

Usage (from the repository root)::

    .venv/bin/python bench/gap_by_schema.py --corpus DIR/maskbench --step 20 \
        --backends native,structgate-llguidance --top 20

Mask time is what ``structgate bench maskbench`` times (``fill_bitmask`` plus ``advance`` per
step, the same walk: ``structgate_bench.worker._walk``), but in one process for both backends:
process-wide caches (native's walks shared across grammars, llguidance's) warm up over the
schemas alike. Both compile with the benchmark's options (``structgate_bench.sample.bench_options``). Only schemas both backends compile count. Compare the ratio and the shares, not
the absolute times, with a benchmark run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from structgate import Constraint  # noqa: E402
from structgate_bench.sample import add_sample_args, bench_options, load_sample  # noqa: E402
from structgate_bench.worker import _make_backend, _walk  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 20)
    ap.add_argument("--backends", default="native,structgate-llguidance", help="two backends: A,B")
    ap.add_argument("--top", type=int, default=20, help="schemas listed")
    a = ap.parse_args(argv)
    names = a.backends.split(",")
    if len(names) != 2:
        ap.error(f"--backends: two names, got {a.backends!r}")
    items, vocab, width, eos = load_sample(ap, a)
    bes = [_make_backend(n, vocab, bench_options(threads=1)) for n in names]
    rows = []  # (ns A, ns B, steps A, steps B, id)
    for it in items:
        r = []
        for be in bes:
            try:
                g = be.compile(Constraint(it.kind, it.value, None))
            except Exception:  # refused by one backend: not compared
                break
            _res, steps = _walk(g, it.tests, eos, width)
            r.append((int(steps.sum()), int(steps.size)))
        if len(r) == 2:
            rows.append((r[0][0], r[1][0], r[0][1], r[1][1], it.id))
    if not rows:
        print("no schema compiled by both backends")
        return
    ta, tb = sum(r[0] for r in rows), sum(r[1] for r in rows)
    sa, sb = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"schemas {len(rows)}  {names[0]} {ta / 1e6:.0f} ms / {sa} steps = {ta / sa / 1e3:.0f} us/step  "
          f"{names[1]} {tb / 1e6:.0f} ms / {sb} steps = {tb / sb / 1e3:.0f} us/step")
    gap = ta - tb
    rows.sort(key=lambda r: -(r[0] - r[1]))
    acc = 0
    for x, y, k, _k2, sid in rows[: a.top]:
        acc += x - y
        share = f"{acc / gap:6.1%}" if gap > 0 else "     -"
        print(f"{x / 1e6:8.1f} ms {y / 1e6:7.1f} ms  {k:5d} steps  gap cum {share}  {sid}")
    splits: dict[str, list[int]] = {}
    for x, y, k, _k2, sid in rows:
        s = splits.setdefault(sid.split("---")[0].split("_")[0], [0, 0, 0])
        s[0] += x
        s[1] += y
        s[2] += k
    print(f"per split (us/step): {names[0]} / {names[1]}")
    for sp, (x, y, k) in sorted(splits.items(), key=lambda kv: -(kv[1][0] - kv[1][1])):
        if k:
            print(f"  {sp:14s} {x / k / 1e3:8.1f} / {y / k / 1e3:6.1f}  ({k} steps)")


if __name__ == "__main__":
    main()
