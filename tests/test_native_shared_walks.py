"""Walks inside call-free rules shared across grammars (:class:`structgate.native.pushdown._SharedWalks`):
a configuration inside a rule whose states are the same in two grammars (the JSON string's content,
an object key's tail) is walked once per vocabulary, and the second grammar reads the first one's
row and uncertain tokens. Oracle: the plain walk of the whole configuration (``direct_row``) at
every step of random walks, in grammars with different byte partitions, and in grammars whose rules
have the same name but other states (a key on the name alone would give them each other's rows).
"""
from __future__ import annotations

import random

import numpy as np

from structgate import Constraint, get_backend
from structgate.native import pushdown
from structgate.native.ir import Grammar, lit, ref, seq, star
from structgate.native.pushdown import PushdownIndex, _SharedWalks, build_grammar_nfa
from structgate.native.regex import parse_regex


def _ids(row, vocab):
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


def _walk_and_compare(pi, vocab, rng, steps=60, prefer=None):
    row = np.empty(pi.width, np.int32)
    s = 1
    for _ in range(steps):
        pi.fill_row(s, row)
        assert (row == pi.direct_row(s)).all(), "a shared walk's row differs from the direct walk"
        ids = [t for t in _ids(row, vocab).tolist() if t not in vocab.eos_token_ids]
        if not ids:
            return
        pref = [t for t in ids if prefer and prefer(vocab.token_bytes[t])]
        t = rng.choice(pref) if pref and rng.random() < 0.7 else rng.choice(ids)
        s = pi.next_state(s, t)
        assert s > 0


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}},
    # another partition: a pattern with Greek letters splits UTF-8 continuation bytes
    {"type": "object", "properties": {"g": {"type": "string", "pattern": "^[α-ω]+$"}, "note": {"type": "string"}},
     "required": ["g"]},
    {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    {"type": "object", "additionalProperties": {"type": "string"}},
]


def test_rows_from_shared_walks_equal_the_direct_walk(llama3_vocab, monkeypatch):
    v = llama3_vocab
    shared = _SharedWalks()
    monkeypatch.setattr(pushdown, "_shared_walks", shared)
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    rng = random.Random(3)

    def stringy(b: bytes) -> bool:  # stay inside strings: letters, spaces, escapes, non-ASCII
        return b'"' not in b and b"{" not in b and b"[" not in b

    for rnd in range(2):  # the second round reads every walk the first one stored
        for s in SCHEMAS:
            pi = be.compile(Constraint("json_schema", s)).token_index
            for _ in range(2):  # each step is checked against a direct walk: ~1 s a walk
                _walk_and_compare(pi, v, rng, prefer=stringy)
        if rnd == 0:
            assert shared.misses > 0 and len(shared._d) > 0
            hits0 = shared.hits
    assert shared.hits > hits0, "the second round of grammars found no shared walk"


def test_key_tail_suffix_walks_are_shared_across_grammars(llama3_vocab, monkeypatch):
    """The walk below the first bytes of an object key that leave the listed names (the key's
    tail rule, re-rooted) is stored once for the grammars of one byte partition: the second
    grammar takes it from the shared cache (its table computes fewer rows there), both grammars'
    masks equal the direct walk, and the stored arrays are read-only (a grammar that grows the
    walk by more first bytes copies them, so another grammar's reads never change)."""
    v = llama3_vocab
    shared = _SharedWalks()
    monkeypatch.setattr(pushdown, "_shared_walks", shared)
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    # the same characters (one byte partition), other value types
    a = {"type": "object", "properties": {"width": {"type": "number"}, "height": {"type": "number"}}}
    b = {"type": "object", "properties": {"width": {"type": "integer"}, "height": {"type": "boolean"}}}
    row = np.empty((v.vocab_size + 31) // 32, np.int32)
    rows = []
    for schema in (a, b):
        pi = be.compile(Constraint("json_schema", schema)).token_index
        s = pi.step_bytes(1, b'{"')
        n0 = pi.n_states
        pi.fill_row(s, row)
        assert (row == pi.direct_row(s)).all()
        rows.append((pi, n0, pi.n_states))
        keys = [k[1] for k in shared._d if k[1][0] == "suffix"]
        assert keys, "no suffix walk was stored"
        assert all(a_.size == 0 or a_.flags.writeable is False for k in shared._d if k[1][0] == "suffix"
                   for a_ in shared._d[k][1][:4])
        rng = random.Random(5)
        for _ in range(3):
            _walk_and_compare(pi, v, rng, steps=40, prefer=lambda t: b'"' in t)
    (pa, a0, a1), (pb, b0, b1) = rows
    assert pa._trie is pb._trie  # one partition: the walk is the same
    assert shared.hits > 0
    assert b1 - b0 < a1 - a0, "the second grammar computed as many rows as the first"
    # the first grammar's masks still equal its direct walk after the second one's use
    rng = random.Random(9)
    _walk_and_compare(pa, v, rng, steps=40, prefer=lambda t: b'"' in t)


def _grammar(chars: str, vocab):
    # "s" is called (kept), call-free, with a partition coarser than the grammar's: its walks use
    # the rule's own trie, and so the shared cache
    g = Grammar({"root": seq(lit("<"), ref("s"), lit(">"), star(seq(lit(";"), ref("s")))),
                 "s": seq(lit('"'), star(parse_regex(chars)), lit('"'))}, "root", keep_calls={"s"}).check()
    return PushdownIndex(build_grammar_nfa(g), vocab)


def test_rules_of_one_name_and_other_states_do_not_share(llama3_vocab, monkeypatch):
    v = llama3_vocab
    shared = _SharedWalks()
    monkeypatch.setattr(pushdown, "_shared_walks", shared)
    rng = random.Random(7)
    inside = lambda b: b'"' not in b and b">" not in b  # noqa: E731
    for chars in ("[a-z]", "[0-9]", "[a-z ]", "[a-z]"):
        pi = _grammar(chars, v)
        for _ in range(3):
            _walk_and_compare(pi, v, rng, steps=25, prefer=inside)
    assert shared.hits > 0  # the last grammar repeats the first: its walks are shared
    assert len({k[1][0] for k in shared._d}) >= 3  # three different rule structures stored


def test_shared_walks_stay_under_their_budget():
    shared = _SharedWalks(budget_bytes=40_000)
    from structgate import load_vocabulary

    v = load_vocabulary("llama3")
    row = np.zeros((v.vocab_size + 31) // 32, dtype=np.int32)  # ~16 KB
    e = np.zeros(0, dtype=np.int64)
    for i in range(6):
        shared.put(v, ("k", i), (row, e, e, False, 0))
        assert shared.nbytes <= 40_000
    assert [k[1] for k in shared._d] == [("k", 4), ("k", 5)]  # least recently used dropped first
    assert shared.get(v, ("k", 5)) is not None and shared.get(v, ("k", 0)) is None


def test_a_zero_budget_keeps_nothing():
    from structgate import load_vocabulary

    v = load_vocabulary("llama3")
    shared = _SharedWalks(budget_bytes=0)
    row = np.zeros((v.vocab_size + 31) // 32, dtype=np.int32)
    e = np.zeros(0, dtype=np.int64)
    shared.put(v, ("k", 0), (row, e, e, False, 0))
    assert shared.nbytes == 0 and shared.get(v, ("k", 0)) is None


def test_called_rules_refuse_references_added_after_they_were_read():
    """Grammar.references is memoised per body: a CalledRules automaton whose references grew after
    they were read would leave a rule out of the analyses, so that is a typed refusal."""
    import pytest

    from structgate.native.ir import CalledRules, Ref

    cr = CalledRules("x")
    cr.call(seq(lit("a"), Ref("r1")))
    assert cr.references() == frozenset({"r1"})
    cr.call(seq(lit("b"), Ref("r1")))  # nothing new: fine
    with pytest.raises(RuntimeError, match="r2"):
        cr.call(Ref("r2"))


def _walks_per_value(schema, vocab, monkeypatch, doc: str, cuts: tuple) -> tuple:
    """(compiled index, walks done by the mask at the end of each prefix of ``doc`` that ends
    at one of ``cuts``), each mask checked against the direct walk."""
    be = get_backend("native", vocab, whitespace="compact", compile_cache_size=0)
    pi = be.compile(Constraint("json_schema", schema)).token_index
    walks = []
    real = PushdownIndex._walk_summary
    monkeypatch.setattr(PushdownIndex, "_walk_summary", lambda self, *a, **k: walks.append(1) or real(self, *a, **k))
    row = np.empty(pi.width, np.int32)
    counts = []
    for cut in cuts:
        s = pi.step_bytes(1, doc[:doc.index(cut) + len(cut)].encode())
        assert s > 0
        n = len(walks)
        pi.fill_row(s, row)
        counts.append(len(walks) - n)
        assert (row == pi.direct_row(s)).all()
    s = pi.step_bytes(1, doc.encode())
    assert s > 0 and pi.is_accepting(s)
    return pi, counts


def test_length_and_format_strings_are_walked_once_per_grammar(llama3_vocab, monkeypatch):
    """A string with ``minLength`` (no ``maxLength``) or a ``format`` is a called rule kept as a
    call, like the unconstrained string: the walk inside it is computed at its first value and
    read back at every other value of the same kind (inlined, each value position was a
    configuration of its own with a walk over most of the vocabulary: a 15-20 ms mask on
    MaskBench's Github_hard o66712, once per property). Masks equal the direct walk."""
    from structgate.native.json_schema import schema_to_grammar

    v = llama3_vocab
    monkeypatch.setattr(pushdown, "_shared_walks", _SharedWalks())
    props = {k: {"type": "string", "minLength": 1} for k in "abc"}
    props.update({k: {"type": "string", "format": "date"} for k in "de"})
    schema = {"type": "object", "properties": props, "required": list(props)}
    g = schema_to_grammar(schema)
    assert {"__json_string_1_"} <= g.keep_calls and any(r.startswith("__json_str_") for r in g.keep_calls)
    doc = '{"a":"xy","b":"zw","c":"uv","d":"2024-01-02","e":"2024-03-04"}'
    _pi, counts = _walks_per_value(schema, v, monkeypatch, doc,
                                   ('"a":"x', '"b":"z', '"c":"u', '"d":"2024-', '"e":"2024-'))
    # the first value of each kind walks its rule; the later ones read it back
    assert counts[0] >= 1 and counts[3] >= 1, counts
    assert counts[1] == counts[2] == counts[4] == 0, counts


def test_bounded_strings_are_walked_once_per_bound(llama3_vocab, monkeypatch):
    """A string with ``maxLength`` is a called rule too (``__json_string_<min>_<max>``): a small
    bound (its repeat expanded) and a large one (a counter, whose frames are re-rooted below the
    string rule's frame: :meth:`PushdownIndex._compute`) are each walked at their first value and
    read back at every later value with the same bound and count (inlined, each property's string
    was walked again at every count: 4.5-9 ms a mask on MaskBench's Snowplow sp_0, whose 60
    properties are strings with ``maxLength``). Masks equal the direct walk, and a string at its
    bound allows no further character."""
    from structgate.native.json_schema import schema_to_grammar

    v = llama3_vocab
    monkeypatch.setattr(pushdown, "_shared_walks", _SharedWalks())
    props = {k: {"type": "string", "maxLength": 12} for k in "abc"}
    props.update({k: {"type": ["string", "null"], "maxLength": 300} for k in "de"})
    schema = {"type": "object", "properties": props, "required": list(props)}
    g = schema_to_grammar(schema)
    assert {"__json_string_0_12", "__json_string_0_300"} <= g.keep_calls
    doc = '{"a":"xy","b":"zw","c":"uv","d":"abcd","e":"efgh"}'
    pi, counts = _walks_per_value(schema, v, monkeypatch, doc, ('"a":"x', '"b":"z', '"c":"u', '"d":"ab', '"e":"ef'))
    assert counts[0] >= 1 and counts[3] >= 1, counts
    assert counts[1] == counts[2] == counts[4] == 0, counts
    # the bounds hold: 12 characters close the string, 300 as well
    row = np.empty(pi.width, np.int32)
    full = pi.step_bytes(1, b'{"a":"' + b"x" * 12)
    assert pi.step_bytes(full, b"x") == 0 and pi.step_bytes(full, b'"') > 0
    long_ = pi.step_bytes(1, b'{"a":"","b":"","c":"","d":"' + b"y" * 300)
    assert pi.step_bytes(long_, b"y") == 0 and pi.step_bytes(long_, b'"') > 0
    pi.fill_row(long_, row)
    assert (row == pi.direct_row(long_)).all()
