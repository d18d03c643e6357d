"""Exactness A/B of two checkouts of structgate: every mask of the benchmark's walks of every
STEP-th MaskBench schema, hashed on each tree in one process (both trees imported as
``bench/ab_trees.py`` does, their modules swapped in ``sys.modules`` before each use); prints the
schemas and masks compared and every schema whose masks differ (none, for a change meant to be
exact).

Usage (from the repository root; ``git -C . archive REV | tar -x -C /tmp/base`` makes the other tree)::

    .venv/bin/python bench/ab_masks.py --corpus DIR/maskbench --a /tmp/base --b . --step 4 [--offset 2]

Each schema is compiled with the benchmark's options and each of its tokenised instances walked
as the benchmark's worker walks it (``structgate_bench.worker._walk``): at every step the mask is
filled and hashed, the token taken if its bit is set (a refusal ends the instance, and is hashed),
and at the end the mask before EOS. A schema refused on one side only counts as a difference.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_trees  # noqa: E402


def _walk_hash(S: dict, it) -> tuple[str, int]:
    """(sha1 of every mask of the walks of ``it``'s instances, masks hashed) on side ``S``."""
    g = S["be"].compile(S["C"](it.kind, it.value, None))
    width, eos = S["width"], S["eos"]
    h = hashlib.sha1()
    n = 0
    bm = np.empty((1, width), dtype=np.int32)
    row = bm[0]
    for t in it.tests:
        ids = t["ids"]
        if ids is None:
            continue
        m = g.matcher()
        for tok in list(ids) + [eos[0]]:
            m.fill_bitmask(bm, 0)
            n += 1
            h.update(row.tobytes())
            if not (int(row[tok >> 5]) >> (tok & 31)) & 1:
                h.update(b"R")
                break
            if not m.advance(tok):
                h.update(b"A")
                break
        h.update(b"|")
    return h.hexdigest(), n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ab_trees.add_tree_args(ap, 4)
    a = ap.parse_args(argv)
    saved = {k: v for k, v in sys.modules.items() if ab_trees._ours(k)}
    try:
        sides = [ab_trees._load(a.a.resolve(), a.tokenizer, None), ab_trees._load(a.b.resolve(), a.tokenizer, a.corpus)]
        items = sides[1]["items"][a.offset:: a.step]
        sides[1]["tok"](items, sides[1]["vocab"])
        walked = refused = masks = 0
        diff = []
        for it in items:
            res = []
            for S in sides:
                sys.modules.update(S["mods"])
                try:
                    res.append(_walk_hash(S, it))
                except Exception as e:  # noqa: BLE001 - refused (or failed): compared as such
                    res.append((f"error {type(e).__name__}", 0))
            if res[0][0].startswith("error") and res[0] == res[1]:
                refused += 1
                continue
            walked += 1
            masks += res[0][1]
            if res[0] != res[1]:
                diff.append((it.id, res))
    finally:
        for k in [k for k in sys.modules if ab_trees._ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    print(f"schemas {len(items)}: walked on both {walked}, refused alike {refused}; "
          f"masks hashed per side {masks}; schemas that differ {len(diff)}")
    for d in diff[:20]:
        print(d)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
