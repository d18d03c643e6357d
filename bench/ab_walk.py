"""In-process A/B of one engine setting: every STEP-th MaskBench schema compiled by two native
backends (A with ``TARGET = VALUE_A``, B with ``TARGET = VALUE_B``), the order alternating per
schema, the benchmark's walk run on each; prints whether the verdicts agree and each side's walk
thread time and TBM.

Usage (from the repository root)::

    .venv/bin/python bench/ab_walk.py --corpus DIR/maskbench --step 10 \\
        --target structgate.native.pushdown:PushdownIndex.SUFFIX_OK_MAX --a 2048 --b 512 [--no-gc]

``TARGET`` is ``module:attribute`` or ``module:Class.attribute``, set before each compile and walk
(so a class attribute read at mask time takes effect). One process, one thread: the machine's
drift (±20 % within minutes on a shared VM) hits both sides alike, which separate benchmark runs
do not guarantee. Thread time (``time.thread_time_ns``) counts this thread only; ``--no-gc``
turns the cyclic collector off, so its pauses (which land on whichever side allocates next) do
not blur a difference in the engine's own work. Process-wide caches (class tries, shared walks)
are shared by both sides, so neither starts colder than the other.
"""
from __future__ import annotations

import argparse
import ast
import gc
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from structgate import Constraint  # noqa: E402
from structgate_bench.sample import add_sample_args, bench_options, load_sample  # noqa: E402
from structgate_bench.worker import _make_backend, _walk  # noqa: E402


def _resolve(target: str):
    """``(object, attribute name)`` of ``module:attr`` / ``module:Class.attr``."""
    mod_name, _, path = target.partition(":")
    if not path:
        raise ValueError(f"--target must be module:attribute, got {target!r}")
    obj = importlib.import_module(mod_name)
    *owners, attr = path.split(".")
    for o in owners:
        obj = getattr(obj, o)
    if not hasattr(obj, attr):
        raise ValueError(f"--target: {target!r} has no attribute {attr!r}")
    return obj, attr


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sample_args(ap, 10)
    ap.add_argument("--target", required=True, help="module:attribute or module:Class.attribute")
    ap.add_argument("--a", required=True, help="value of side A (a Python literal)")
    ap.add_argument("--b", required=True, help="value of side B (a Python literal)")
    ap.add_argument("--no-gc", action="store_true", help="the cyclic collector off during the run")
    a = ap.parse_args(argv)
    try:
        owner, attr = _resolve(a.target)
        vals = {"A": ast.literal_eval(a.a), "B": ast.literal_eval(a.b)}
    except (ValueError, ImportError, SyntaxError) as e:
        ap.error(str(e))
    items, vocab, width, eos = load_sample(ap, a)
    bes = {k: _make_backend("native", vocab, bench_options(threads=1)) for k in "AB"}
    old = getattr(owner, attr)
    was = gc.isenabled()
    if a.no_gc:
        gc.disable()
    tt = {"A": 0, "B": 0}
    steps: dict[str, list] = {"A": [], "B": []}
    verdicts: dict[str, list] = {"A": [], "B": []}
    try:
        for i, it in enumerate(items):
            for k in (("A", "B") if i % 2 else ("B", "A")):
                setattr(owner, attr, vals[k])
                try:
                    g = bes[k].compile(Constraint(it.kind, it.value, None))
                except Exception as e:  # noqa: BLE001 - a refusal is a verdict too
                    verdicts[k].append(type(e).__name__)
                    continue
                t0 = time.thread_time_ns()
                res, st = _walk(g, it.tests, eos, width)
                tt[k] += time.thread_time_ns() - t0
                steps[k].append(st)
                verdicts[k].append([r["accepted"] for r in res])
    finally:
        setattr(owner, attr, old)
        if was:
            gc.enable()
    out = {"verdicts_equal": verdicts["A"] == verdicts["B"]}
    print(f"schemas {len(items)}  verdicts equal: {out['verdicts_equal']}")
    for k in "AB":
        s = np.concatenate(steps[k]) / 1e3 if steps[k] else np.zeros(1)
        out[k] = {"thread_s": tt[k] / 1e9, "tbm_avg_us": float(s.mean()), "tbm_p99_us": float(np.percentile(s, 99))}
        print(f"{k} {a.target} = {vals[k]!r}: walk thread time {tt[k] / 1e9:.2f} s  TBM avg {s.mean():.0f} us  "
              f"p50 {np.percentile(s, 50):.1f} us  p99 {np.percentile(s, 99):.0f} us")
    return out


if __name__ == "__main__":
    main()
