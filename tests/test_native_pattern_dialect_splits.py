"""``pattern`` escapes where ECMA-262 and Python's ``re`` (the dialect of ``jsonschema``, our oracle)
disagree on every string are typed refusals, wherever a pattern appears (found by a helper:
``^\\ud83d\\ude00$`` compiled to the ECMA-262 reading, so native accepted "😀", which ``re`` never
matches; ``\\u{...}``, a code point only in ECMA-262's u-mode, compiled though ``re`` refuses it).
Constructs only ``re`` refuses but ECMA-262 reads one way (``\\cX``, ``(?<n>...)``) keep that reading.

Escapes both dialects read alike (a lone surrogate escape, ``\\x41``, ``\\u00e9``) still compile and
agree with ``jsonschema``."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import InvalidConstraintError, UnsupportedFeatureError

SPLITS = ["^\\ud83d\\ude00$", "^[\\ud83d\\ude00]$", "x\\uD83D\\uDE00", "^\\u{1F600}$", "[\\u{41}-\\u{5A}]"]


def _placements(p: str):
    yield {"type": "string", "pattern": p}
    yield {"type": "object", "patternProperties": {p: {"type": "integer"}}, "additionalProperties": False}
    yield {"type": "object", "propertyNames": {"pattern": p}}
    yield {"type": "array", "items": {"type": "string", "pattern": p}}


@pytest.mark.parametrize("pattern", SPLITS)
def test_dialect_split_is_a_typed_refusal(llama3_vocab, pattern):
    be = get_backend("native", llama3_vocab)
    for schema in _placements(pattern):
        with pytest.raises(UnsupportedFeatureError) as e:
            be.compile(Constraint.json_schema(schema))
        assert "pattern" in str(e.value) or "Properties" in str(e.value) or "propertyNames" in str(e.value), e.value


def test_the_readings_really_differ():
    # the oracle's side of each split: re refuses \\u{...} (ECMA-262 reads it two ways), never matches the pair
    for p in ("^\\u{1F600}$",):
        with pytest.raises(re.error):
            re.compile(p)
    assert re.search("^\\ud83d\\ude00$", json.loads('"\\ud83d\\ude00"')) is None
    assert not jsonschema.Draft202012Validator({"pattern": "^\\ud83d\\ude00$"}).is_valid("😀")


@pytest.mark.parametrize("pattern,texts", [
    ("^\\x41\\u00e9$", ['"A\\u00e9"', '"Aé"', '"Ae"']),
    ("^[\\u0041-\\u005A]+$", ['"ABC"', '"abc"', '""']),
    ("^\\ud83d$", ['"\\ud83d"', '"😀"']),
])
def test_shared_escapes_still_compile_and_agree(llama3_vocab, pattern, texts):
    schema = {"type": "string", "pattern": pattern}
    v = jsonschema.Draft202012Validator(schema)
    try:
        g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    except InvalidConstraintError as e:  # only an empty language may be refused (a lone surrogate is no UTF-8)
        assert not any(v.is_valid(json.loads(t)) for t in texts if "\\ud83d" not in t), e
        return
    for t in texts:
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(t)) and m.is_accepting()
        if ok:
            assert v.is_valid(json.loads(t)), t
        elif "\\ud83d" not in t:
            assert not v.is_valid(json.loads(t)), t


@pytest.mark.parametrize("pattern,pos", [("a{1099511627776}", 2), ("^ab{2,10000000000000}$", 6), ("a{4294967295,}", 2)])
def test_huge_repeat_in_pattern_is_refused_at_the_pattern(llama3_vocab, pattern, pos):
    # found by a helper: the error pointed into the generated regex ("at position 224 in #");
    # re refuses these too (its repeat bound is below 2**32 - 1)
    from structgate.errors import GrammarSyntaxError

    with pytest.raises((re.error, OverflowError)):
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError) as e:
        get_backend("native", llama3_vocab).compile(Constraint.json_schema({"type": "string", "pattern": pattern}))
    assert "/pattern" in str(e.value) and f"at position {pos} " in str(e.value), e.value
