"""``not {multipleOf: m}`` (``m`` a positive integer): the integer literals that are multiples of
no excluded ``m`` (exact: remainder automata with the non-zero remainders accepting, times the
range and an integer ``multipleOf`` beside it), and where numbers are allowed the non-integral
numbers (the sound subset of ``tests/test_native_not_integer.py``: a non-integral number is a
multiple of no integer). Native used to refuse it (``UnsupportedFeatureError("not")``: 22 MaskBench
development schemas, nearly all Handwritten, and the ``oneOf``s whose branches needed it). A float
``multipleOf`` under ``not`` stays refused (validators divide in floating point). Oracle:
``jsonschema`` on every literal, walked through the native engine's token path."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import InvalidConstraintError, UnsupportedFeatureError
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"

LITERALS = [str(i) for i in range(-31, 61)] + ["1.5", "-2.5", "0.5", "12.25", "4.5", "null", '"a"', "true", "[]"]
#: integers spelled as decimals or exponents: native writes integers as integer literals only
NOT_WRITTEN = {"3.0", "6.0", "1e2"}
SCHEMAS = [
    {"not": {"multipleOf": 3}},
    {"type": "integer", "not": {"multipleOf": 3}},
    {"type": "integer", "not": {"multipleOf": 3}, "minimum": -5, "maximum": 20},
    {"type": "integer", "allOf": [{"not": {"multipleOf": 3}}, {"not": {"multipleOf": 2}}]},
    {"type": "integer", "not": {"anyOf": [{"multipleOf": 3}, {"multipleOf": 5}]}},
    {"type": "integer", "not": {"multipleOf": 3}, "multipleOf": 2},
    {"type": "number", "not": {"multipleOf": 4}, "exclusiveMaximum": 10},
    {"oneOf": [{"multipleOf": 3}, {"minimum": 2}]},
    {"not": {"multipleOf": 3}, "enum": [1, 3, 4.5, 6.0, "x"]},
    {"if": {"multipleOf": 2}, "then": {"minimum": 10}},
    {"type": "array", "contains": {"multipleOf": 3}, "maxContains": 1, "items": {"type": "integer"}},
]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:70] for s in SCHEMAS])
def test_not_multiple_of_is_exact_on_integer_literals(backend, llama3_vocab, schema):
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    texts = LITERALS + sorted(NOT_WRITTEN)
    if schema.get("type") == "array":
        texts = [json.dumps(a) for a in ([], [3], [1, 3], [3, 6], [1, 2, 4], [6, 1, 9], [0])]
    wrong = []
    for t in texts:
        ok, got = check.is_valid(json.loads(t)), accepts(g, llama3_vocab, t)
        if got != ok and not (t in NOT_WRITTEN and not got):
            wrong.append((t, ok))
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"
    assert any(check.is_valid(json.loads(t)) for t in texts)


def test_what_not_multiple_of_cannot_write(backend):
    with pytest.raises(InvalidConstraintError):  # every integer is a multiple of 1
        backend.compile(Constraint.json_schema({"type": "integer", "not": {"multipleOf": 1}}))
    with pytest.raises(InvalidConstraintError):  # a multiple of 6 is one of 3
        backend.compile(Constraint.json_schema({"type": "integer", "not": {"multipleOf": 3}, "multipleOf": 6}))
    with pytest.raises(UnsupportedFeatureError) as e:  # a float multipleOf under not
        backend.compile(Constraint.json_schema({"not": {"multipleOf": 0.5}}))
    assert e.value.feature == "not"


@pytest.mark.parametrize("schema", [
    {"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]},
    {"allOf": [{"multipleOf": 4}, {"multipleOf": 6}, {"not": {"multipleOf": 8}}], "maximum": 50},
])
def test_integer_multiple_ofs_of_allof_members_merge_to_their_lcm(backend, llama3_vocab, schema):
    # refused before ("different multipleOf values": 16 MaskBench Handwritten schemas)
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    wrong = [t for t in LITERALS if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong and any(check.is_valid(json.loads(t)) for t in LITERALS)
