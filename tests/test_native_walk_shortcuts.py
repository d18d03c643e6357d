"""Shortcuts of the mask path that must give the rows the long way gives:

* a row whose items, grouped by equal class intervals, take disjoint intervals takes each group's
  target per interval (``PushdownIndex._disjoint_runs``) instead of the sweep (``_sweep``);
  oracle: the sweep everywhere (``_DISJOINT_RUNS = False``), every table cell of every
  configuration compared;
* the walk below a frame's accepting ends from its caller (``_walk_below``) is kept per
  ``(configuration, ends)``; oracle: the walk redone at every call (``WALK_BELOW_MEMO_BYTES = 0``),
  masks compared along walks, each mask checked token by token against advance (``walk_rows``) and
  against the direct walk of the whole configuration (``direct_row``);
* a first-level suffix group's tokens are its walk's less those below the walk's other roots
  (``OTHER_ROOTS_MAX_TOKENS``); oracle: the mask by every token's root (the threshold below 0).
"""
from __future__ import annotations

import random

import numpy as np

from structgate import Constraint, get_backend
from structgate.native import pushdown

from _matching import walk_rows

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "nickname": {"type": "string"}, "age": {"type": "integer"},
                         "address": {"type": "object",
                                     "properties": {"street": {"type": "string"}, "number": {"type": "integer"},
                                                    "state": {"type": "string", "enum": ["NY", "CA"]}}},
                         "scores": {"type": "array", "items": {"type": "number"}}},
          "required": ["name"]}
TEXTS = ['{"name": "Ann", "nickname": "A", "age": 31, "address": {"street": "Main", "number": 5, "state": "NY"}}',
         '{"name":"x", "age": -0, "scores": [1.5, -2, 3e4],  "extra": "value", "na": {"n": [1, "a"]}}',
         '{\n  "name": "\u00e9t\u00e9",\n  "address": {"street": "a\\"b", "state": "CA", "st": true},\n  "nam": null\n}']


def _backend(vocab):
    return get_backend("native", vocab, whitespace="flexible", additional_properties=True, compile_cache_size=0)


def _masks(vocab, monkeypatch, **attrs):
    """Mask rows along ``TEXTS`` (each checked against advance) of a fresh compile of ``SCHEMA``
    with the ``PushdownIndex`` attributes ``attrs``; and the grammar's index."""
    with monkeypatch.context() as mp:
        for k, v in attrs.items():
            mp.setattr(pushdown.PushdownIndex, k, v)
        mp.setattr(pushdown, "_shared_walks", pushdown._SharedWalks())
        g = _backend(vocab).compile(Constraint.json_schema(SCHEMA))
        out = []
        for t in TEXTS:
            ok, rows = walk_rows(g, vocab, t)
            out.append((ok, rows))
        return out, g.token_index


def test_disjoint_runs_give_the_sweeps_table(llama3_vocab, monkeypatch):
    calls = {"fast": 0}
    orig = pushdown.PushdownIndex._disjoint_runs

    def counted(self, pairs):
        r = orig(self, pairs)
        calls["fast"] += r is not None
        return r

    monkeypatch.setattr(pushdown.PushdownIndex, "_disjoint_runs", counted)
    got, ia = _masks(llama3_vocab, monkeypatch)
    assert calls["fast"] > 0, "no row took the disjoint intervals' shortcut"
    want, ib = _masks(llama3_vocab, monkeypatch, _DISJOINT_RUNS=False)
    assert [ok for ok, _ in got] == [ok for ok, _ in want] == [True, True, True]
    for (_, ra), (_, rb) in zip(got, want):
        assert len(ra) == len(rb)
        for x, y in zip(ra, rb):
            np.testing.assert_array_equal(x, y)
    # the same configurations interned in the same order, with the same table rows
    assert ia._cfg_keys == ib._cfg_keys
    n = len(ia._cfg_keys)
    np.testing.assert_array_equal(ia._table[:n], ib._table[:n])


def test_disjoint_runs_refuse_overlapping_intervals(llama3_vocab):
    g = _backend(llama3_vocab).compile(Constraint.json_schema(SCHEMA))
    pi = g.token_index
    pi._target = lambda fa: fa  # (the instance's: what each run's target is asked for)
    assert pi._disjoint_runs([(5, ((1, 4),)), (6, ((3, 5),))]) is None
    assert pi._disjoint_runs([(5, ((1, 4), (8, 9))), (6, ((1, 4), (8, 10)))]) is None
    # equal intervals are one group: its items' set takes them, a lone item its own
    runs = pi._disjoint_runs([(5, ((1, 4), (8, 9))), (6, ((4, 5),)), (7, ((1, 4), (8, 9)))])
    assert runs == [(1, 4, frozenset({5, 7})), (4, 5, 6), (8, 9, frozenset({5, 7}))]


def test_walk_below_memo_keeps_the_masks(llama3_vocab, monkeypatch):
    stats = {"calls": 0, "walks": 0}
    orig_below, orig_unc = pushdown.PushdownIndex._walk_below, pushdown.PushdownIndex._walk_below_uncached

    def below(self, seeds, p, info=None):
        stats["calls"] += 1
        return orig_below(self, seeds, p, info)

    def unc(self, seeds, p, info):
        stats["walks"] += 1
        return orig_unc(self, seeds, p, info)

    monkeypatch.setattr(pushdown.PushdownIndex, "_walk_below", below)
    monkeypatch.setattr(pushdown.PushdownIndex, "_walk_below_uncached", unc)
    got, _ = _masks(llama3_vocab, monkeypatch)
    assert stats["walks"] < stats["calls"], stats  # the names' positions share their walks below
    stats.update(calls=0, walks=0)
    want, _ = _masks(llama3_vocab, monkeypatch, WALK_BELOW_MEMO_BYTES=0)
    assert stats["walks"] == stats["calls"] > 0
    for (oka, ra), (okb, rb) in zip(got, want):
        assert oka == okb and len(ra) == len(rb)
        for x, y in zip(ra, rb):
            np.testing.assert_array_equal(x, y)


def test_other_roots_taken_off_equal_the_root_mask(llama3_vocab, monkeypatch):
    taken = {"n": 0}
    orig = pushdown._ClassTrie.tokens_under

    def tokens_under(self, nodes, strict=False):
        taken["n"] += not strict  # (the other roots' tokens; deeper groups ask strictly)
        return orig(self, nodes, strict)

    monkeypatch.setattr(pushdown._ClassTrie, "tokens_under", tokens_under)
    got, _ = _masks(llama3_vocab, monkeypatch)
    assert taken["n"] > 0, "no suffix group had other walked roots taken off"
    want, _ = _masks(llama3_vocab, monkeypatch, OTHER_ROOTS_MAX_TOKENS=-1)
    for (oka, ra), (okb, rb) in zip(got, want):
        assert oka == okb and len(ra) == len(rb)
        for x, y in zip(ra, rb):
            np.testing.assert_array_equal(x, y)


def test_key_positions_equal_the_direct_walk(llama3_vocab, monkeypatch):
    """Every step of random walks through keys (names and other keys) against the plain walk of
    the whole configuration, which takes no suffix group and no memo."""
    monkeypatch.setattr(pushdown, "_shared_walks", pushdown._SharedWalks())
    v = llama3_vocab
    pi = _backend(v).compile(Constraint.json_schema(SCHEMA)).token_index
    rng = random.Random(11)
    row = np.empty(pi.width, np.int32)
    for _ in range(3):
        s = pi.step_bytes(1, b'{"')
        for _ in range(25):
            pi.fill_row(s, row)
            np.testing.assert_array_equal(row, pi.direct_row(s))
            ids = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: v.vocab_size])
            ids = [t for t in ids.tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            # mostly short tokens of letters and quotes: through the names and out of them
            pref = [t for t in ids if len(v.token_bytes[t]) <= 3]
            s = pi.next_state(s, rng.choice(pref or ids))
            assert s > 0


# -- h29: the top-frame merge's precheck, rule tries made only past the shared walks, the table's
# uninitialised growth, the uint64 popcount -------------------------------------------------------
MERGING = ['root ::= "(" (root? root?){2,5} ")" root?',
           'root ::= "(" (x y)+ ")"\nx ::= root?\ny ::= root?',
           'root ::= "(" (("b" root?)? ("b" root?)?)* ")"']
PARENS = ["(()())", "((()()))(())", "(((()))(()()))", "(b(b)b(bb))", "((((((()))))))(()())"]


def _grammar_masks(vocab, monkeypatch, text_grammar, **attrs):
    with monkeypatch.context() as mp:
        for k, v in attrs.items():
            mp.setattr(pushdown.PushdownIndex, k, v)
        g = _backend(vocab).compile(Constraint.grammar(text_grammar, "gbnf"))
        return [walk_rows(g, vocab, t) for t in PARENS], g.token_index


def test_top_frame_precheck_refuses_only_sets_with_nothing_to_merge(llama3_vocab, monkeypatch):
    """``_may_merge_top`` says no only where the full grouping of ``_merge_top_frames`` merges
    nothing (checked at every call), and the masks, configurations and table are those of the
    grouping run at every call (the check forced yes)."""
    orig_check = pushdown.PushdownIndex._may_merge_top
    orig_merge = pushdown.PushdownIndex._merge_top_frames
    seen = {"no": 0, "merged": 0}

    def checked(self, items):
        r = orig_check(self, items)
        if not r:
            seen["no"] += 1
            cls = type(self)
            cls._may_merge_top = lambda self, items: True
            try:
                copy = set(items)
                made = orig_merge(self, copy)
            finally:
                cls._may_merge_top = checked
            assert not made and copy == set(items), sorted(items)
        return r

    def merge(self, items):
        n = len(items)
        made = orig_merge(self, items)
        seen["merged"] += len(items) < n
        return made

    for gr in MERGING:
        with monkeypatch.context() as mp:
            mp.setattr(pushdown.PushdownIndex, "_may_merge_top", checked)
            mp.setattr(pushdown.PushdownIndex, "_merge_top_frames", merge)
            got, ia = _grammar_masks(llama3_vocab, monkeypatch, gr)
        want, ib = _grammar_masks(llama3_vocab, monkeypatch, gr, _may_merge_top=lambda self, items: True)
        for (oka, ra), (okb, rb) in zip(got, want):
            assert oka == okb and len(ra) == len(rb)
            for x, y in zip(ra, rb):
                np.testing.assert_array_equal(x, y)
        assert ia._cfg_keys == ib._cfg_keys
        n = len(ia._cfg_keys)
        np.testing.assert_array_equal(ia._table[:n], ib._table[:n])
    assert seen["no"] > 0 and seen["merged"] > 0, seen  # both ways taken


def test_shared_walk_hit_makes_no_rule_trie(llama3_vocab, monkeypatch):
    """A second grammar whose string rule's walks are in the shared cache takes them without
    making the rule's trie; its masks equal those of a compile with the cache empty and the direct
    walk of each configuration."""
    monkeypatch.setattr(pushdown, "_shared_walks", pushdown._SharedWalks())
    v = llama3_vocab
    text = '{"name": "Ann Lee", "nickname": "A\\"n", "address": {"street": "Main St"}}'
    _backend(v).compile(Constraint.json_schema(SCHEMA))  # fills the shared walks
    walk_rows(_backend(v).compile(Constraint.json_schema(SCHEMA)), v, text)
    made = {"n": 0}
    orig = pushdown.class_trie

    def counted(*a, **k):
        made["n"] += 1
        return orig(*a, **k)

    other = dict(SCHEMA, properties=dict(SCHEMA["properties"], zeta={"type": "string", "pattern": "^[q-z]+$"}))
    monkeypatch.setattr(pushdown, "class_trie", counted)
    g = _backend(v).compile(Constraint.json_schema(other))  # another alphabet (the pattern's cuts)
    made["n"] = 0
    ok, rows = walk_rows(g, v, text)
    assert ok and made["n"] == 0, made
    pi = g.token_index
    assert not any(pi._rule_tries.values()), "a rule trie was made though every walk was shared"
    monkeypatch.setattr(pushdown, "_shared_walks", pushdown._SharedWalks())
    ok2, rows2 = walk_rows(_backend(v).compile(Constraint.json_schema(other)), v, text)
    assert ok2 and len(rows) == len(rows2)
    for x, y in zip(rows, rows2):
        np.testing.assert_array_equal(x, y)
    s = pi.step_bytes(1, b'{"name": "A')
    row = np.empty(pi.width, np.int32)
    pi.fill_row(s, row)
    np.testing.assert_array_equal(row, pi.direct_row(s))


def test_relabeled_tries_keyed_by_labels(llama3_vocab):
    """Two alphabets that label a coarse partition's classes alike get one relabeled trie (the
    same uid); other labels another; each relabeled trie's classes are the labels of its base's."""
    v = llama3_vocab
    coarse = pushdown._classes_from_cuts([0, 0x22, 0x23, 0x5C, 0x5D, 0x80, 0xC2])
    # (every ASCII byte is a class of each alphabet: the alphabets differ above 0x80; a cut past
    # the coarse classes' lowest bytes keeps their labels, one below 0xC2 moves that class's)
    fine_a = pushdown._partition_of([(0x22, 0x22), (0x5C, 0x5C), (0x30, 0x39)])
    fine_b = pushdown._partition_of([(0x22, 0x22), (0x5C, 0x5C), (0xE4, 0xE4)])
    fine_c = pushdown._partition_of([(0x22, 0x22), (0x85, 0x85)])
    la, lb, lc = (pushdown._class_labels(coarse, f) for f in (fine_a, fine_b, fine_c))
    assert np.array_equal(la, lb) and not np.array_equal(la, lc) and not np.array_equal(fine_a, fine_b)
    ta, tb, tc = (pushdown.class_trie(v, coarse, f) for f in (fine_a, fine_b, fine_c))
    assert ta is tb and ta.uid == tb.uid and tc is not ta
    base = pushdown.class_trie(v, coarse)
    for t, lab in ((ta, la), (tc, lc)):
        for (b0, p0, c0, s0), (b1, p1, c1, s1) in zip(base.levels, t.levels):
            assert b0 == b1 and p0 is p1 and s0 is s1
            np.testing.assert_array_equal(c1, lab.take(c0))


def test_table_rows_set_when_interned(llama3_vocab):
    """The table grows uninitialised: every configuration's row reads -1 (not computed) or its
    cells (0 or a configuration), never what the memory held; masks stay those of the direct walk."""
    pi = _backend(llama3_vocab).compile(Constraint.json_schema(SCHEMA)).token_index
    row = np.empty(pi.width, np.int32)
    for t in TEXTS:
        s = 1
        for tk in llama3_vocab.encode(t):
            pi.fill_row(s, row)
            np.testing.assert_array_equal(row, pi.direct_row(s))
            s = pi.next_state(s, tk)
            assert s > 0
    n = len(pi._cfg_keys)
    assert pi._table.shape[0] > 64, "the table never grew"
    t = pi._table[:n]
    unset = t[:, 0] == -1
    assert unset.any() and (~unset).any()
    assert (t[unset] == -1).all()
    assert ((t[~unset] >= 0) & (t[~unset] < n)).all()


def test_popcount_uint64_words():
    rng = np.random.default_rng(3)
    for width in (1, 2, 7, 4008, 4009):
        words = rng.integers(-2**31, 2**31, width, dtype=np.int64).astype(np.int32)
        assert pushdown._popcount(words) == pushdown._popcount_lut(words)
        assert pushdown._popcount(words[1:]) == pushdown._popcount_lut(words[1:])  # (an odd offset's view)
