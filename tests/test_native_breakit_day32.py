"""Break-it findings of day 32 (the ``not``/``oneOf``/``contains``/``allOf``/``pattern``/
``minProperties`` work of 2026-12-07), each walked through the native engine's token path with
``jsonschema`` as the oracle: native must never accept a text ``jsonschema`` calls invalid."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import InvalidConstraintError
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


def _unsound(backend, vocab, schema, texts):
    """The texts of ``texts`` native accepts and ``jsonschema`` rejects."""
    full = {"$schema": S, **schema}
    check = jsonschema.Draft202012Validator(full)
    try:
        g = backend.compile(Constraint.json_schema(full))
    except InvalidConstraintError:  # "matches nothing": sound when none of the texts is valid
        return [t for t in texts if check.is_valid(json.loads(t))]
    return [t for t in texts if accepts(g, vocab, t) and not check.is_valid(json.loads(t))]


# -- not {type: integer}: a decimal below 1 that rounds to the double 1.0 ---------------------------
# 0.99999999999999999 is 1.0 to Python's json (an integer to jsonschema); the fractional subset
# wrote up to 30 fraction digits below 1, so 16 and more nines (and 0.99999999999999995...) were
# accepted where integers are excluded.
NEAR_ONE = ["0.99999999999999999", "-0.99999999999999999", "0.99999999999999995", "0.999999999999999999999999999999",
            "0.9999999999999999999999999999", "-0.999999999999999999999999999991"]
NOT_INTEGER = [
    {"not": {"type": "integer"}},
    {"type": "number", "not": {"type": "integer"}, "exclusiveMaximum": 3},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"type": "number", "if": {"type": "integer"}, "then": {"minimum": 5}},
]


@pytest.mark.parametrize("schema", NOT_INTEGER, ids=[json.dumps(s)[:60] for s in NOT_INTEGER])
def test_not_integer_never_writes_a_decimal_that_rounds_to_one(backend, llama3_vocab, schema):
    assert _unsound(backend, llama3_vocab, schema, NEAR_ONE) == []
    # still written next to 1: the fractions that stay off the integers
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    for t in ["0.999999999999999", "0.9999999999999989", "0.99999999999999899999", "-0.5", "0.000000000000000000000000000001"]:
        assert not float(t).is_integer()
        assert accepts(g, llama3_vocab, t), t


def test_not_integer_near_one_sweep(backend, llama3_vocab):
    """Every decimal below 1 of 15 to 30 fraction digits led by nines: none jsonschema reads as 1.0 is
    accepted."""
    texts = [sign + "0." + "9" * k + tail for sign in ("", "-") for k in range(14, 30) for tail in "123456789"]
    assert any(float(t).is_integer() for t in texts)
    assert _unsound(backend, llama3_vocab, {"type": "number", "not": {"type": "integer"}}, texts) == []


# -- internal keywords of a folded `not` / a merge, ignored by the compiler's jsonschema checks ------
# A branch minus another (oneOf), or an if/else, conjoins a folded `not {pattern}` (an internal
# keyword) with an anyOf of const values; the check of an allOf with a finite member ran jsonschema,
# which ignored the internal keyword and kept "a", valid against both oneOf branches.
INTERNAL = [
    ({"type": "string", "oneOf": [{"pattern": "a"}, {"anyOf": [{"const": "a"}, {"const": "b"}]}]}, ['"a"', '"b"', '"ab"']),
    ({"oneOf": [{"type": "string", "pattern": "a"}, {"anyOf": [{"const": "a"}, {"const": "b"}]}]}, ['"a"', '"b"']),
    ({"type": "string", "oneOf": [{"pattern": "a"}, {"if": {"const": "a"}, "then": {}, "else": {"const": "a"}}]}, ['"a"']),
    ({"type": "string", "not": {"pattern": "a"}, "if": {"const": "a"}, "then": {}, "else": {"const": "a"}}, ['"a"']),
    ({"type": "string", "oneOf": [{"pattern": "^a"}, {"anyOf": [{"const": "ab"}, {"const": "ba"}]}]}, ['"ab"', '"ba"', '"a"']),
]


@pytest.mark.parametrize("schema,texts", INTERNAL, ids=[json.dumps(s)[:60] for s, _ in INTERNAL])
def test_internal_keywords_are_read_by_the_value_checks(backend, llama3_vocab, schema, texts):
    assert _unsound(backend, llama3_vocab, schema, texts) == []
    full = {"$schema": S, **schema}
    check = jsonschema.Draft202012Validator(full)
    try:
        g = backend.compile(Constraint.json_schema(full))
    except InvalidConstraintError:  # nothing valid: the typed "matches nothing"
        assert not any(check.is_valid(json.loads(t)) for t in texts)
        return
    for t in texts:  # exact on these
        assert accepts(g, llama3_vocab, t) == check.is_valid(json.loads(t)), t


def test_internal_keyword_checks_match_their_meaning():
    """The compiler's validator reads each internal keyword as its emitter does."""
    from structgate.native.json_schema import _common as c
    from structgate.native.json_schema.compiler import _validator_class

    v = _validator_class(2020)
    cases = [
        ({c._NOT_STR: ["a"]}, ["b", 1], ["a"]),
        ({c._NOT_BOOL: [True]}, [False, 1], [True]),
        ({c._NOT_INT: [1, 3]}, [2, 1.5, True, "1"], [1, 1.0, 3]),
        ({c._NOT_PATTERNS: ["a"]}, ["b", 1], ["a", "ba"]),
        ({c._NOT_PATTERNS: ["^\\s$"]}, ["a"], ["\ufeff", " "]),  # either dialect: ECMA's \s has U+FEFF
        ({c._PATTERNS: ["a", "b"]}, ["ab", 1], ["a", "b"]),
        ({c._FRACTIONAL: True}, [1.5, "a"], [1, 1.0]),
        ({c._CONTAINS_ALL: [[{"const": 1}, None, 1], [{"const": 2}, 2, None]]}, [[1, 2, 2], "x"], [[2, 2], [1, 1, 2, 2], [1, 2]]),
        ({"properties": {"a": {}}, c._ADDL_UNLESS: [({"type": "integer"}, ("^x",), ("a",))]},
         [{"a": "s", "x1": "s", "b": 1}], [{"b": "s"}]),
        ({"multipleOf": 3.0, c._MULT_INT: True}, [9, 3], [2 ** 60]),
    ]
    for schema, good, bad in cases:
        for x in good:
            assert v(schema).is_valid(x), (schema, x)
        for x in bad:
            assert not v(schema).is_valid(x), (schema, x)


def test_every_internal_keyword_has_a_validator_check():
    # a keyword the compiler folds a constraint into must be read by its jsonschema checks too
    # (else kept enum/const values can break it: the oneOf/if cases above)
    from structgate.native.json_schema import compiler
    from structgate.native.json_schema._common import SOURCE_KEYWORD

    assert set(SOURCE_KEYWORD) <= set(compiler._INTERNAL_CHECKS)


@pytest.mark.parametrize("schema", [
    {"not": {"multipleOf": 3}, "enum": [3, 4, 6, 7, 9.0, "x"]},
    {"allOf": [{"not": {"multipleOf": 3}}, {"anyOf": [{"const": 4}, {"const": 6}, {"const": 9}]}]},
    {"type": "integer", "allOf": [{"not": {"multipleOf": 2}}, {"enum": [1, 2, 3, 4, 5]}], "not": {"multipleOf": 3}},
])
def test_kept_values_respect_a_folded_not_multiple_of(llama3_vocab, schema):
    be = NativeBackend(llama3_vocab)
    g = be.compile(Constraint.json_schema(schema))
    check = jsonschema.Draft202012Validator(schema)
    wrong = [t for t in map(str, range(-3, 13)) if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong, wrong
