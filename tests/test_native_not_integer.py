"""``not {type: integer}`` where numbers are allowed (also ``oneOf [{type: integer}, {type:
number}]``, whose second branch minus the first is that): a sound subset of the non-integral
numbers, where native used to refuse it (``UnsupportedFeatureError("not", "not integer of a
number")``; 6 MaskBench development schemas). Written: decimals without exponent whose last fraction
digit is not 0, at most 15 digits from the first integer digit (below 1: up to 30 fraction digits),
so no literal ``jsonschema`` reads as an integral double (``1.0000000000000001`` is 1.0 to it) is
ever generated. Oracle: ``jsonschema`` on every literal, walked through the native engine's token
path; the literals outside the subset are asserted rejected, not silently accepted."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"

IN_SUBSET = ["1.5", "-1.5", "0.25", "-0.5", "3.75", "10.5", "99.99", "100.5", "0.1", "0.0000001",
             "12345678901234.5", "-0.001", "7.125"]
# never written, valid or not: outside the subset, and integers spelled with an exponent or as -0.0 (native writes
# integers as integer literals)
OUTSIDE = ["1.50", "1.5e0", "15e-1", "1234567890123456.5", "1.0000000000000001", "1e2", "-0.0"]
NEVER = ["1", "0", "-3", "2.0", "100"]  # integers to jsonschema
OTHER = ["null", '"a"', "true", "[]", "{}"]
SCHEMAS = [
    {"not": {"type": "integer"}},
    {"type": "number", "not": {"type": "integer"}},
    {"type": "number", "not": {"type": "integer"}, "minimum": 1, "maximum": 10},
    {"type": "number", "not": {"type": "integer"}, "exclusiveMinimum": -1, "exclusiveMaximum": 2},
    {"type": ["number", "string"], "allOf": [{"not": {"type": "integer"}}], "maximum": 100},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"oneOf": [{"type": "integer"}, {"type": "number", "maximum": 5}]},
    {"oneOf": [{"type": "integer"}, {"minimum": 2}]},  # refused before (tests/test_native_oneof_exact.py)
    {"type": "number", "not": {"type": "integer"}, "enum": [1, 1.5, 2.0, "a"]},
]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:70] for s in SCHEMAS])
def test_not_integer_of_a_number_is_a_sound_subset(backend, llama3_vocab, schema):
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    enum = "enum" in schema
    for t in IN_SUBSET + NEVER + OTHER + OUTSIDE:
        ok, got = check.is_valid(json.loads(t)), accepts(g, llama3_vocab, t)
        if t in OUTSIDE:  # outside the documented subset: never written (an enum lists its own values)
            assert not got or (enum and ok), t
        else:
            assert got == ok, (t, ok)
    assert any(check.is_valid(json.loads(t)) for t in IN_SUBSET)


def test_an_integer_multiple_of_leaves_no_fraction(backend):
    from structgate.errors import InvalidConstraintError
    with pytest.raises(InvalidConstraintError):
        backend.compile(Constraint.json_schema({"type": "number", "not": {"type": "integer"}, "multipleOf": 2}))
