"""Where native's first-visit mask time goes by kind of JSON position: MaskBench instances walked as
the benchmark walks them (fill, check, advance; EOS at the end), in one process, single
threaded, each first visit (a row not cached before the fill) labelled by where the text so far
stops: inside an object key (``key:open`` right after its quote, ``key:mid`` further in), inside a
string value (``vstr:open`` / ``vstr:mid``), inside a number or a literal, or between tokens
(``expect-value`` after ``:`` or at a value's place, ``expect-key`` after ``,`` in an object,
``after-{``, ``after-[``, ``after-value``; ``+ws`` when the text ends with whitespace).

Usage (from the repository root)::

    .venv/bin/python bench/first_visit_kinds.py --corpus DIR/maskbench --step 20 [--prefix Glaive]

Prints per kind: first visits, their seconds and share, mean and p50 µs, the share of that time
spent computing table rows (``PushdownIndex._compute_row``, outermost calls), rows computed per
visit, and the p50 of the allowed tokens. The collector is off for the run (``bench/README.md``
Day-30: its pauses land in the next advance, not in the fill).
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from structgate.native import pushdown  # noqa: E402
from structgate_bench.sample import add_sample_args, bench_options, compiled_items, load_sample  # noqa: E402
from structgate_bench.worker import _make_backend  # noqa: E402

_WS = b" \t\n\r"


def classify(b: bytes) -> str:
    """The kind of position where the JSON text ``b`` stops (a lexer's state, not a parser's: the
    texts are the corpus's valid instances)."""
    st: list[str] = []
    exp = "value"
    i, n = 0, len(b)
    while i < n:
        c = b[i]
        if c in _WS:
            i += 1
        elif c == 0x22:  # a string: a key where a key is expected
            j, esc = i + 1, False
            while j < n:
                if esc:
                    esc = False
                elif b[j] == 0x5C:
                    esc = True
                elif b[j] == 0x22:
                    break
                j += 1
            key = exp == "key"
            if j >= n:
                return ("key" if key else "vstr") + (":open" if j == i + 1 else ":mid")
            i, exp = j + 1, ("colon" if key else "after")
        elif c in b"{[":
            st.append(chr(c))
            exp = "key" if c == 0x7B else "value"
            i += 1
        elif c in b"}]":
            if st:
                st.pop()
            exp, i = "after", i + 1
        elif c == 0x3A:
            exp, i = "value", i + 1
        elif c == 0x2C:
            exp, i = ("key" if st and st[-1] == "{" else "value"), i + 1
        else:  # a number or a literal
            j = i
            while j < n and b[j] not in b' \t\n\r,:]}"[{':
                j += 1
            if j >= n:
                return "number" if b[i:i + 1] in b"-0123456789" else "literal"
            exp, i = "after", j
    last = b.rstrip(_WS)[-1:]
    if exp == "value":
        kind = "start" if not st else "after-[" if last == b"[" else "expect-value"
    elif exp == "key":
        kind = "after-{" if last == b"{" else "expect-key"
    else:
        kind = {"colon": "expect-colon", "after": "after-value"}[exp]
    return kind + ("+ws" if b[-1:] and b[-1] in _WS else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 20)
    a = ap.parse_args(argv)
    items, vocab, width, eos = load_sample(ap, a)
    be = _make_backend("native", vocab, bench_options(threads=1))
    tb = vocab.token_bytes
    rows = [0, 0]  # outermost _compute_row: ns, calls
    orig = pushdown.PushdownIndex.__dict__["_compute_row"]
    depth = [0]

    def timed(self, c):
        if depth[0]:
            return orig(self, c)
        depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return orig(self, c)
        finally:
            depth[0] -= 1
            rows[0] += time.perf_counter_ns() - t0
            rows[1] += 1

    pc = time.perf_counter_ns
    bm = np.empty((1, width), dtype=np.int32)
    row = bm[0]
    recs: dict[str, list[tuple[float, float, int, int]]] = {}
    was = gc.isenabled()
    gc.disable()
    pushdown.PushdownIndex._compute_row = timed
    try:
        for it, g in compiled_items(be, items):
            for t in it.tests:
                if t["ids"] is None:
                    continue
                m = g.matcher()
                text = b""
                for tok in list(t["ids"]) + [eos[0]]:
                    index, state = m.row_source()
                    first = state >= 0 and not index.is_cached(state)
                    r0, n0 = rows
                    t0 = pc()
                    m.fill_bitmask(bm, 0)
                    dt = pc() - t0
                    if first:
                        recs.setdefault(classify(text), []).append(
                            (dt / 1e3, (rows[0] - r0) / 1e3, rows[1] - n0, index.n_allowed(state)))
                    ok = (int(row[tok >> 5]) >> (tok & 31)) & 1
                    if not ok or not m.advance(tok):
                        break
                    text += tb[tok] if tok < len(tb) else b""
    finally:
        pushdown.PushdownIndex._compute_row = orig
        if was:
            gc.enable()
    total = sum(r[0] for rs in recs.values() for r in rs)
    n = sum(len(rs) for rs in recs.values())
    print(f"schemas {len(items)}  first visits {n}  {total / 1e6:.2f} s")
    print(f"{'kind':24s} {'visits':>7s} {'s':>6s} {'share':>6s} {'mean us':>8s} {'p50 us':>7s} "
          f"{'rows':>6s} {'rows/visit':>10s} {'allowed p50':>11s}")
    for k, rs in sorted(recs.items(), key=lambda kv: -sum(r[0] for r in kv[1])):
        x = np.asarray(rs, dtype=np.float64)
        s = x[:, 0].sum()
        print(f"{k:24s} {len(rs):7d} {s / 1e6:6.2f} {s / total:6.1%} {x[:, 0].mean():8.0f} "
              f"{np.median(x[:, 0]):7.0f} {x[:, 1].sum() / s:6.1%} {x[:, 2].mean():10.1f} {np.median(x[:, 3]):11.0f}")


if __name__ == "__main__":
    main()
