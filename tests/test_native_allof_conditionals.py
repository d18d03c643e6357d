"""``if``/``then``/``else`` and ``contains``/``minContains``/``maxContains`` spread over ``allOf``
members (and a ``$ref`` with siblings): keywords that act together only within one schema object
never combine across members. A member's ``then``/``else`` apply under its own ``if`` only, an
``if`` without them constrains nothing, and several members' conditionals all hold (JSON Schema
2020-12 Core §10.2.2). Found in the
JSON-Schema-Test-Suite (``if-then-else.json``, "if appears at top level, properties in allOf
members"): the ``allOf`` merge combined the ``if`` of one member with the ``then`` and ``else`` of
others, so ``-100`` and ``3`` were rejected though valid. Oracle: ``jsonschema``, every instance
below, with the test's verdicts walked through the native engine's token path."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.native.backend import NativeBackend

LT0 = {"exclusiveMaximum": 0}
SCHEMAS = [
    # the suite's case: if, then and else each in its own member (nothing is constrained)
    {"allOf": [{"if": LT0}, {"then": {"minimum": -10}}, {"else": {"multipleOf": 2}}]},
    # one member's full conditional beside a stray then of another (only the first applies)
    {"allOf": [{"if": LT0, "then": {"minimum": -10}}, {"then": {"multipleOf": 2}}]},
    {"allOf": [{"if": LT0, "else": {"multipleOf": 3}}, {"if": {"minimum": 50}}]},
    # two members' conditionals: both hold
    {"allOf": [{"if": LT0, "then": {"minimum": -10}}, {"if": {"minimum": 5}, "then": {"multipleOf": 2}}]},
    {"allOf": [{"if": LT0, "then": {"minimum": -10}, "else": {"maximum": 60}},
               {"if": {"minimum": 5}, "then": {"multipleOf": 2}, "else": {"multipleOf": 5}}]},
    # the same through a $ref and its siblings (merged like allOf members)
    {"$defs": {"c": {"if": LT0}}, "$ref": "#/$defs/c", "then": {"minimum": -10}},
    {"$defs": {"c": {"if": LT0, "then": {"minimum": -10}}}, "$ref": "#/$defs/c", "else": {"multipleOf": 2}},
    # strings: lengths
    {"type": "string", "allOf": [{"if": {"minLength": 3}, "then": {"maxLength": 4}}, {"else": {"minLength": 2}}]},
]
NUMBERS = [str(i) for i in range(-120, 121, 7)] + ["-10", "0", "4", "6", "50", "60", "65", "3", "-1"]
STRINGS = [json.dumps("x" * n) for n in range(8)]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:60] for s in SCHEMAS])
def test_conditionals_in_allof_members_match_jsonschema(backend, llama3_vocab, schema):
    full = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    texts = STRINGS if schema.get("type") == "string" else NUMBERS
    wrong = [(t, check.is_valid(json.loads(t))) for t in texts
             if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong}"
    assert any(check.is_valid(json.loads(t)) for t in texts)


#: ``minContains``/``maxContains`` count their own member's ``contains`` only; in a member without
#: one they have no effect (2020-12 Validation §6.4.4-5): merged with another member's ``contains``
#: they rejected ``[1]`` (minContains 2) and ``[1, 1]`` (maxContains 1), both valid
CONTAINS = [
    {"type": "array", "allOf": [{"contains": {"type": "integer"}}, {"minContains": 2}]},
    {"type": "array", "allOf": [{"contains": {"type": "integer"}}, {"maxContains": 1}]},
    {"type": "array", "allOf": [{"contains": {"type": "integer"}, "minContains": 2}, {"maxContains": 2}]},
    {"type": "array", "allOf": [{"contains": {"const": 1}, "minContains": 2}, {"minItems": 1}]},
]
ARRAYS = ["[]", "[1]", "[1, 1]", "[1, 2]", "[1, 1, 1]", '["a"]', '[1, "a"]', '["a", 1, 1]']


@pytest.mark.parametrize("schema", CONTAINS, ids=[json.dumps(s)[:60] for s in CONTAINS])
def test_contains_bounds_in_allof_members_match_jsonschema(backend, llama3_vocab, schema):
    full = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    wrong = [(t, check.is_valid(json.loads(t))) for t in ARRAYS
             if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong}"
