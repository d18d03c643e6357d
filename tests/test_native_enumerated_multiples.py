"""``multipleOf`` on a short integer range whose automaton is refused: the multiples enumerated.

``{"type": "integer", "multipleOf": 7, "minimum": 10**400, "maximum": 10**400 + 20}`` holds three
integers, but the range ∩ remainder automaton (one state per residue per digit position: 403
minimal states) was refused with ``CompileLimitError("max_automaton_rules")``; a ``multipleOf``
above ``max_multiple_of`` (1,000) was refused whatever the range. Where the automaton is refused
(or ``multipleOf`` is above ``max_multiple_of``) and the bounded range holds at most
``CompileOptions.extra["max_enumerated_multiples"]`` (4,096) multiples, they are written out as
integer literals (a trie of their digits), the same literals the automaton admits.

Oracle: ``jsonschema`` (Draft 2020-12; it divides integers exactly) on every integer of a window
around the range, written as a JSON integer literal.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import CompileOptions, Constraint, get_backend
from structgate.errors import CompileLimitError
from structgate.testing import tiny_vocabulary

H = 10 ** 400

#: (schema, the integers around which every integer of +-60 is tried)
CASES = [
    ({"type": "integer", "multipleOf": 7, "minimum": H, "maximum": H + 20}, [H]),
    ({"type": "integer", "multipleOf": 7, "exclusiveMinimum": H, "exclusiveMaximum": H + 21}, [H]),
    ({"type": "integer", "multipleOf": 9, "minimum": -H - 50, "maximum": -H + 50}, [-H]),
    ({"type": "integer", "multipleOf": 3, "minimum": -10 ** 20, "maximum": 10 ** 20}, [0, 10 ** 20]),  # automaton
    ({"type": "integer", "multipleOf": 11, "minimum": H - 100, "maximum": H + 100}, [H]),
    ({"type": "number", "multipleOf": 13, "minimum": H - 100, "maximum": H + 100}, [H]),
    ({"type": "integer", "multipleOf": 10 ** 9 + 7, "minimum": H, "maximum": H + 10 ** 11}, [H + 10 ** 11]),
    ({"type": "integer", "multipleOf": 10 ** 9 + 7, "minimum": -5 * 10 ** 9, "maximum": 5 * 10 ** 9},
     [0, 10 ** 9 + 7, -(10 ** 9 + 7), 2 * (10 ** 9 + 7)]),
    ({"type": "integer", "multipleOf": 2, "minimum": H, "maximum": H + 8190}, [H, H + 8190]),
    ({"type": "integer", "multipleOf": 7, "minimum": H, "maximum": H + 200, "not": {"enum": [H + 14, H + 77]}},
     [H, H + 77]),
    ({"type": "integer", "multipleOf": 7, "minimum": 10 ** 30, "maximum": 10 ** 31}, [10 ** 30]),  # automaton
    ({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 20}, [0]),  # automaton, as before
]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


@pytest.mark.parametrize("schema,centres", CASES, ids=[json.dumps(s)[:60] for s, _ in CASES])
def test_multiples_in_a_short_range_are_exact(schema, centres, vocab, native):
    compiled = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    for c in centres:
        for x in range(c - 60, c + 61):
            assert accepts(compiled, vocab, str(x)) == v.is_valid(x), (schema, x)
    # not other spellings of an integer (the automaton's policy too: integer literals only)
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    for text in ("0" + str(abs(lo)), str(lo) + ".0", "-0", "+" + str(abs(lo))):
        assert not accepts(compiled, vocab, text), (schema, text)


def test_the_enumeration_limit_is_explicit(vocab):
    """Past ``max_enumerated_multiples`` the multiples are not written out. In grammar mode the
    remainder automaton over the range is then generated lazily (``_lazy_dfa``: no
    ``max_automaton_rules`` refusal, exact); a ``multipleOf`` over ``max_multiple_of`` has no
    automaton, so its typed refusal stands; raised, the limit enumerates."""
    schema = {"type": "integer", "multipleOf": 7, "minimum": H, "maximum": H + 20}  # 3 multiples
    want = [x for x in range(H, H + 21) if x % 7 == 0]
    tight = get_backend("native", vocab, max_enumerated_multiples=2)
    compiled = tight.compile(Constraint.json_schema(schema))  # the lazy automaton
    assert [x for x in range(H - 5, H + 30) if accepts(compiled, vocab, str(x))] == want
    big_m = {"type": "integer", "multipleOf": 10 ** 9 + 7, "minimum": 0, "maximum": 10 ** 12}  # 1,000 multiples
    with pytest.raises(CompileLimitError) as e:
        tight.compile(Constraint.json_schema(big_m))
    assert e.value.limit_name == "max_multiple_of"
    ok = get_backend("native", vocab, max_enumerated_multiples=3)
    compiled = ok.compile(Constraint.json_schema(schema))
    assert [x for x in range(H - 5, H + 30) if accepts(compiled, vocab, str(x))] == want
    # too many multiples to write out: the lazy automaton, exact at both ends and around 0
    wide = {"type": "integer", "multipleOf": 3, "minimum": -H, "maximum": H}
    compiled = get_backend("native", vocab).compile(Constraint.json_schema(wide))
    for x in [*range(H - 5, H + 5), *range(-H - 5, -H + 5), *range(-7, 8)]:
        assert accepts(compiled, vocab, str(x)) == (-H <= x <= H and x % 3 == 0), x
    # an unbounded side is never enumerated
    with pytest.raises(CompileLimitError):
        get_backend("native", vocab).compile(Constraint.json_schema(
            {"type": "integer", "multipleOf": 10 ** 9 + 7, "minimum": H}))


def test_schema_to_regex_enumerates_too():
    import re

    from structgate.native.json_schema import schema_to_regex

    rx = schema_to_regex({"type": "integer", "multipleOf": 7, "minimum": H, "maximum": H + 20},
                         CompileOptions(whitespace="compact"))
    assert [x for x in range(H - 5, H + 30) if re.fullmatch(rx, str(x))] == [x for x in range(H, H + 21) if x % 7 == 0]
