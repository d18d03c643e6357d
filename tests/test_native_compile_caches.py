"""The compile path's shortcuts give what the plain computation gives.

* The JSON Schema compiler's code-point set operations (``_charset``: a merge of sorted range
  lists, inputs already normalized passed through) against a brute-force oracle over a small
  universe of code points (plus the real top, U+10FFFF).
* The regex parser's piece cache for a character class with its quantifier (``[ \\t\\n\\r]{0,4}``,
  40 % of a schema's rule texts) against a parse with the cache emptied: the same tree, the same
  errors, for lazy and possessive quantifiers, a ``{`` that is a literal, a second quantifier.
* A key exclusion's way out of a names trie (memoised per set of next characters) accepts what
  ``re`` says it should.
"""
from __future__ import annotations

import re

import numpy as np

from hypothesis import given, settings
from hypothesis import strategies as st

from structgate.native.json_schema import _charset as cs
from structgate.native.regex import parser as rp
from structgate.native.regex.parser import parse_regex
from _matching import accepts as _accepts

TOP = cs.MAX_CP
# a small universe of code points, with the ends of the real range: the oracle is a Python set
POINTS = sorted(set(range(0, 40)) | {0xD7FF, 0xD800, 0xDFFF, 0xE000, TOP - 1, TOP})


def _as_set(s) -> set[int]:
    return {p for p in POINTS if any(a <= p <= b for a, b in s)}


_bound = st.sampled_from(POINTS)
_range = st.tuples(_bound, _bound)
_sets = st.one_of(st.lists(_range, max_size=6), st.lists(_range, max_size=6).map(tuple),
                  st.lists(_range, max_size=6).map(lambda rs: cs.normalize(rs)))


def _normal(s) -> bool:
    return all(type(r) is tuple and r[0] <= r[1] for r in s) and all(
        s[i][1] + 1 < s[i + 1][0] for i in range(len(s) - 1))


@settings(max_examples=600, deadline=None)
@given(_sets, _sets)
def test_charset_operations_match_a_set_oracle(a, b):
    for got, want in ((cs.normalize(a), _as_set(a)),
                      (cs.union(a, b), _as_set(a) | _as_set(b)),
                      (cs.union(a), _as_set(a)),
                      (cs.intersect(a, b), _as_set(a) & _as_set(b)),
                      (cs.subtract(a, b), _as_set(a) - _as_set(b)),
                      (cs.complement(a), set(POINTS) - _as_set(a))):
        assert type(got) is tuple and _normal(got), got
        assert _as_set(got) == want


def test_charset_operations_take_unnormalized_input():
    # unsorted, overlapping, adjacent and empty (a > b) ranges, numpy-like ints
    import numpy as np

    messy = [(np.int64(10), np.int64(12)), (3, 5), (6, 6), (11, 20), (30, 29)]
    assert cs.normalize(messy) == ((3, 6), (10, 20))
    assert cs.intersect(messy, [(0, 4), (19, 100)]) == ((3, 4), (19, 20))
    assert cs.subtract(((0, TOP),), messy) == ((0, 2), (7, 9), (21, TOP))
    assert all(type(x) is int for r in cs.normalize(messy) for x in r)


PIECES = [
    r"[ \t\n\r]{0,4}", r"[0-9]+", r"[0-9]*", r"[a-z]?", r"[ab]{2}", r"[ab]{2,}", r"[ab]{,3}",
    r"[a-z]{2,3}?", r"[a-z]*?", r"[a-z]+?", r"[ab]{x}", r"[ab]{", r"[ab]{}", r"[\]x]{1,2}",
    r"[^\"\\]{0,4}", r"[[ab]{0,4}", r"[ab]",
]
CONTEXT = ["{}", "x{}y", "(?:{}|z){{2}}", "{}{}", "(?i){}", "(?s){}.", "a{}b{}c" + "." * 60]


def _fresh(text: str):
    saved = dict(rp._PIECES)
    rp._PIECES.clear()
    try:
        return repr(parse_regex(text))
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return f"{type(e).__name__}: {e}"
    finally:
        rp._PIECES.clear()
        rp._PIECES.update(saved)


def _cached(text: str):
    try:
        return repr(parse_regex(text))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def test_class_and_quantifier_pieces_parse_as_without_the_cache():
    # long patterns (the piece cache is on from 64 characters): each piece twice in one text, so
    # the second occurrence is a cache hit inside the same parse, then the whole text again
    pad = "(?:" + "q" * 64 + ")"
    for piece in PIECES:
        for ctx in CONTEXT:
            text = pad + ctx.replace("{}", piece, 2).replace("{{2}}", "{2}")
            want = _fresh(text)
            assert _cached(text) == want, text
            assert _cached(text) == want, text
    # a second quantifier after a cached piece is still an error
    assert _cached(pad + r"[ab]{2}[ab]{2}{3}").startswith("GrammarSyntaxError")
    assert _cached(pad + r"[ab]{2}[ab]{2}*").startswith("GrammarSyntaxError")


def test_cached_pieces_match_what_re_matches(llama3_vocab):
    from structgate import Constraint, get_backend

    be = get_backend("native", llama3_vocab)
    text = "(?:" + "q" * 64 + r")x[ \t]{0,2}y[ \t]{0,2}z[ \t]{0,2}"
    parse_regex(text)  # the pieces cached
    g = be.compile(Constraint("regex", text))
    for s in ["xyz", "x y z", "x \t y\t\tz", "x   yz", "xy z ", "xy z\t\t\t"]:
        full = "q" * 64 + s
        assert _accepts(g, llama3_vocab, full) == bool(re.fullmatch(text, full)), s


def test_key_exclusion_memo_keeps_each_trie_node_exact(llama3_vocab):
    from structgate import Constraint, get_backend

    be = get_backend("native", llama3_vocab, whitespace="compact")
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}, "ac": {"type": "integer"},
                                               "b": {"type": "integer"}},
              "additionalProperties": {"type": "string"}}
    g = be.compile(Constraint("json_schema", schema))
    for text, ok in [('{"ab":1}', True), ('{"a":"x"}', True), ('{"ad":"x"}', True), ('{"ab":"x"}', False),
                     ('{"abc":"x"}', True), ('{"b":"x"}', False), ('{"bb":"x"}', True), ('{"":"x"}', True),
                     ('{"ac":2,"é":"x"}', True)]:
        assert _accepts(g, llama3_vocab, text) == ok, text


def test_a_relabeled_class_trie_is_the_trie_built_for_the_finer_alphabet(llama3_vocab):
    """``class_trie(vocab, coarse, fine)`` (the coarse partition's trie, built once, its labels
    mapped) against a trie built directly with the fine alphabet's labels: the same levels, token
    maps and preorder layout; the coarse trie itself is left as it was; a second grammar's
    alphabet gets its own labels on the same structure."""
    from structgate.native.pushdown import _ClassTrie, _classes_from_cuts, _nbytes_once, _root_info, class_trie
    from structgate.native.token_index import vocab_trie

    v = llama3_vocab
    coarse = _classes_from_cuts([0x20, 0x22, 0x23, 0x5C, 0x5D, 0x80, 0xC0, 0xE0, 0xF0, 0xF8])
    fines = [_classes_from_cuts(sorted({0x20, 0x22, 0x23, 0x5C, 0x5D, 0x80, 0xC0, 0xE0, 0xF0, 0xF8} | extra))
             for extra in ({0x30, 0x3A, 0x41, 0x5B}, {0x09, 0x0A, 0x2C, 0x7B, 0x7D, 0x61})]
    base = class_trie(v, coarse)
    base_cls = [lv[2].copy() for lv in base.levels]
    for fine in fines:
        got = class_trie(v, coarse, fine)
        want = _ClassTrie(vocab_trie(v), coarse, v.n_tokens, fine)
        assert got is not base and len(got.levels) == len(want.levels)
        for a, b in zip(got.levels, want.levels):
            assert a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:]))
        for name in ("level_base", "token_cnode", "tokens_by_node", "node_tok_start"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
        assert all(np.array_equal(x, y) for x, y in zip(got._preorder(), want._preorder()))
        assert all(np.array_equal(x, y) for x, y in zip(_root_info(got), _root_info(want)))
        # the structure is shared: over both tries it is counted once
        own = sum(lv[2].nbytes for lv in got.levels)
        assert got.nbytes >= base.nbytes
        assert _nbytes_once([got, base]) == base.nbytes + own  # only the class arrays are its own
    assert all(np.array_equal(a[2], c) for a, c in zip(base.levels, base_cls))
    g0, g1 = class_trie(v, coarse, fines[0]), class_trie(v, coarse, fines[1])
    assert any(not np.array_equal(a[2], b[2]) for a, b in zip(g0.levels, g1.levels))


def test_enum_values_checked_against_the_other_keywords_only(llama3_vocab):
    """An ``enum``'s values are filtered by the schema's other keywords (not by the enum itself,
    which jsonschema checks by a scan of the list per value): what is accepted is exactly what
    jsonschema says of the whole schema, for values of every type and enums with repeats."""
    import json

    import jsonschema

    from structgate import Constraint, get_backend

    be = get_backend("native", llama3_vocab, whitespace="compact")
    values = ["a", "bb", "ccc", "b1", 1, 2.5, 30, True, None, [1], {"k": 1}, "bb", 1.0]
    cases = [({"enum": values, **extra}, values)
             for extra in ({"type": "string"}, {"minLength": 2}, {"pattern": "^[a-z]+$"}, {"maximum": 2},
                           {"type": ["integer", "null"]}, {"not": {"type": "string"}}, {"const": "bb"}, {})]
    # the draft named by $schema next to the enum still decides the other keywords (found by a
    # review: draft-04's boolean exclusiveMaximum, its "2.0 is not an integer", draft-07's
    # dependencies and array-form items)
    d4, d7 = "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"
    cases += [
        ({"$schema": d4, "maximum": 5, "exclusiveMaximum": True, "enum": [3, 5]}, [3, 5]),
        ({"$schema": d4, "type": "integer", "enum": [1.5, 2.0, 3]}, [1.5, 2.0, 3]),
        ({"$schema": d7, "enum": [{"a": 1}, {"a": 1, "b": 2}], "dependencies": {"a": ["b"]}},
         [{"a": 1}, {"a": 1, "b": 2}]),
        ({"$schema": d7, "enum": [[1, "a"], [1, 2]], "items": [{"type": "integer"}, {"type": "string"}]},
         [[1, "a"], [1, 2]]),
    ]
    for schema, vals in cases:
        g = be.compile(Constraint("json_schema", schema))
        for v in vals:
            want = jsonschema.validators.validator_for(schema)(schema).is_valid(v)
            m = g.matcher()
            got = m.advance(llama3_vocab.encode(json.dumps(v, separators=(",", ":")))) and m.is_accepting()
            assert got == want, (schema, v)
