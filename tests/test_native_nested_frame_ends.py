"""Frames whose end can fall after every character (a measured finding): in
``(?:\\w{1,100}\\s?){1,50}`` each character of a word may end the repetition and re-enter the outer
counter, so the re-rooted walk of a configuration inside a word ends on nearly every node of the
trie. The tokens below those ends were walked on from the caller once per end above each of them
(:meth:`~structgate.native.pushdown.PushdownIndex._walk_below`: a node held once per end above it,
each with another count: 19 M (node, configuration) pairs over 23 tokens of prose, ~140 ms a
token), and the level-``d`` ancestors of a suffix walk's ends were found by a climb that masked
every end once per trie level (~12 ms a call on Llama 3's trie).

Now a configuration whose frame ends lie below more than ``WALK_BELOW_MAX`` tokens (counted once
per end above each) is walked directly, and ancestors come from a per-trie map
(:func:`~structgate.native.pushdown._ancestors_at`). Asserted: the map equals a climb by parents
on every node of a real trie; acceptance equals ``re.fullmatch`` (with ``re.ASCII``: native's
``\\w`` is ECMAScript's); the masks equal those of the walk below the ends (``WALK_BELOW_MAX``
unbounded) at every step; and on prose no walk below ends covers more than half of Llama 3's
tokens (192,635 and 156,455 with multiplicity without the guard)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.native import pushdown
from structgate.native.pushdown import STANDARD_BYTE_CLASSES, PushdownIndex, class_trie

from _matching import walk_rows

pytestmark = pytest.mark.timeout(300)

PROSE = "The quick brown fox jumps over the lazy dog and then it runs away"
#: the first two count their inner repeat (more repetitions than the outer one: a counter, whose
#: character rule is a frame that may end after every character); the third is a control
PATTERNS = [r"(?:\w{1,100}\s?){1,50}", r"(?:[A-Za-z]{1,50}[ ,]?){1,40}", r"(?:\w+\s?){1,30}"]


def _compile(vocab, pattern: str):
    return get_backend("native", vocab, compile_cache_size=0).compile(Constraint.regex(pattern))


def test_ancestor_map_equals_a_climb_by_parents(llama3_vocab):
    trie = class_trie(llama3_vocab, STANDARD_BYTE_CLASSES)
    levels = trie.levels
    n = trie.n_nodes
    lv = np.searchsorted(trie.level_base, np.arange(n), side="right") - 1
    loc = np.arange(n) - trie.level_base[lv]
    for d in (0, 1, 2):
        # the oracle: each node's parent chain, one level at a time, node by node
        want = np.full(n, -1, dtype=np.int64)
        cur_l, cur = lv.copy(), loc.copy()
        for e in range(len(levels) - 1, d, -1):
            m = cur_l == e
            cur[m] = levels[e][1][cur[m]]
            cur_l[m] = e - 1
        want[lv >= d] = cur[lv >= d]
        nodes = np.flatnonzero(lv >= d)
        got = pushdown._ancestors_at(trie, nodes, d)
        assert got.dtype == np.int64
        assert np.array_equal(got, want[nodes]), d
        # and on a relabeled trie (the same structure, its own class labels)
        rel = trie.relabeled(np.arange(trie.n_classes, dtype=np.int64))
        assert np.array_equal(pushdown._ancestors_at(rel, nodes[::7], d), want[nodes[::7]])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_accepts_what_re_accepts(llama3_vocab, pattern):
    g = _compile(llama3_vocab, pattern)
    rx = re.compile(pattern, re.ASCII)  # native's \w is ECMAScript's (docs/design.md)
    # (near misses are short: ``re`` backtracks exponentially in the words before one)
    texts = [PROSE, PROSE.lower(), PROSE + " ", "the lazy  dog", "word", "a b c d e f g", "x" * 25,
             "x" * 45, " lead", "over the dog!", "Größe und Maß"]
    for t in texts:
        got, _rows = walk_rows(g, llama3_vocab, t)
        assert got == (rx.fullmatch(t) is not None), (pattern, t)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_masks_equal_the_walk_below_the_ends(llama3_vocab, monkeypatch, pattern):
    direct = _compile(llama3_vocab, pattern)
    monkeypatch.setattr(PushdownIndex, "WALK_BELOW_MAX", 1 << 62)
    below = _compile(llama3_vocab, pattern)
    for t in (PROSE, PROSE.lower()[:40], "x" * 25):
        monkeypatch.setattr(PushdownIndex, "WALK_BELOW_MAX", 32768)
        a, rows_a = walk_rows(direct, llama3_vocab, t)
        monkeypatch.setattr(PushdownIndex, "WALK_BELOW_MAX", 1 << 62)
        b, rows_b = walk_rows(below, llama3_vocab, t)
        assert a == b and len(rows_a) == len(rows_b), (pattern, t)
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            assert np.array_equal(ra, rb), (pattern, t, i)


@pytest.mark.parametrize("pattern", PATTERNS[:2])
def test_no_walk_below_covers_more_than_the_bound(llama3_vocab, monkeypatch, pattern):
    seen: list[int] = []
    orig = PushdownIndex._walk_below

    def spy(self, seeds, p, info=None):
        if info is None:  # the call of _compute (a suffix walk's re-rooted ends pass info)
            seen.append(int(self._trie._preorder()[2].take(seeds).sum()))
        return orig(self, seeds, p, info)

    monkeypatch.setattr(PushdownIndex, "_walk_below", spy)
    g = _compile(llama3_vocab, pattern)
    ok, _rows = walk_rows(g, llama3_vocab, PROSE)
    assert ok
    assert max(seen, default=0) <= 65536, max(seen)
