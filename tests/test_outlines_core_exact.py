"""The outlines-core adapter refuses every JSON Schema keyword outlines-core does not enforce exactly
(issue 13, item 2: ``structgate demo --backend structgate-outlines-core`` ended 6/11 valid because
outlines-core's regex builder ignores integer ``minimum`` / ``maximum``).

Oracle, for each refused keyword: outlines-core itself (its regex from ``build_regex_from_schema``,
indexed over a one-byte-per-token vocabulary, without the adapter's check) accepts an instance that
``jsonschema`` rejects (or that is not JSON at all); the adapter raises a typed
``UnsupportedFeatureError`` naming the keyword and the JSON pointer of the schema holding it. And
for the schemas it keeps, random walks through the adapter's own masks give only outputs
``jsonschema`` accepts.
"""
from __future__ import annotations

import json
import random

import pytest

from structgate import Constraint, Vocabulary, get_backend
from structgate.backends.registry import get_backend_spec
from structgate.errors import UnsupportedFeatureError

pytestmark = [
    pytest.mark.engines,
    pytest.mark.skipif(not get_backend_spec("structgate-outlines-core").availability()[0],
                       reason="outlines-core not installed"),
]

jsonschema = pytest.importorskip("jsonschema")

BYTES = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])

# (keyword, schema, JSON pointer of the schema holding it, an instance outlines-core accepts that the
# schema does not)
REFUSED = [
    ("maximum", {"type": "integer", "maximum": 120}, "", "121"),
    ("minimum", {"type": "integer", "minimum": 0, "maximum": 120}, "", "-1"),
    ("minimum", {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]},
     "/properties/age", '{"age":-1}'),
    ("maximum", {"type": "number", "maximum": 85}, "", "86"),
    ("exclusiveMinimum", {"type": "integer", "exclusiveMinimum": 3}, "", "3"),
    ("exclusiveMaximum", {"type": "number", "exclusiveMaximum": 1}, "", "1"),
    ("multipleOf", {"type": "integer", "multipleOf": 3}, "", "4"),
    ("multipleOf", {"type": "number", "multipleOf": 2}, "", "3"),
    ("maximum", {"$defs": {"p": {"type": "integer", "maximum": 3}}, "$ref": "#/$defs/p"}, "/$defs/p", "4"),
    ("minimum", {"type": ["integer", "null"], "minimum": 3}, "", "2"),
    ("minimum", {"enum": [1, 5], "minimum": 3}, "", "1"),
    ("uniqueItems", {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}, "", "[2,2]"),
    ("contains", {"type": "array", "items": {"type": "integer"}, "contains": {"const": 7}}, "", "[1]"),
    ("unevaluatedItems", {"type": "array", "unevaluatedItems": False}, "", "[1]"),
    ("minItems", {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 2}, "", "[1]"),
    ("maxItems", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "maxItems": 1}, "",
     "[1,2]"),
    ("minProperties", {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1}, "", "{}"),
    ("maxProperties", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "maxProperties": 1}, "", '{"a":1,"b":2}'),
    ("propertyNames", {"type": "object", "properties": {"b": {"type": "integer"}}, "propertyNames": {"pattern": "^a"}},
     "", '{"b":1}'),
    ("patternProperties", {"type": "object", "properties": {"ab": {"type": "string"}},
                           "patternProperties": {"^a": {"type": "integer"}}}, "", '{"ab":"x"}'),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}}, "", '{"a":1}'),
    ("dependentSchemas", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                          "dependentSchemas": {"a": {"required": ["b"]}}}, "", '{"a":1}'),
    ("unevaluatedProperties", {"type": "object", "unevaluatedProperties": False}, "", '{"x":1}'),
    ("required", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["z"]}, "", "{}"),
    ("properties", {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
     "/properties/a", "null"),
    ("properties", {"$defs": {"any": {}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/any"},
                                                                         "b": {"type": "integer"}},
                    "required": ["a"]},
     "/properties/a", "12"),
    ("properties", {"type": "object", "properties": {'a"b': {"type": "integer"}}, "required": ['a"b']},
     '/properties/a"b', '{"a"b":1}'),
    ("pattern", {"type": "string", "pattern": "^[0-9]+$", "maxLength": 3}, "", '"abc"'),
    ("pattern", {"type": "string", "pattern": "^[0-9]+$", "minLength": 2}, "", '"ab"'),
    ("pattern", {"type": "string", "pattern": "^a.c$"}, "", '"a"c"'),
    ("pattern", {"type": "string", "pattern": "^[^a]{2}$"}, "", '"\n\n"'),
    ("pattern", {"type": "string", "pattern": "a|b"}, "", 'b"'),
    ("pattern", {"type": "string", "pattern": "^\\w$"}, "", '"\u030f"'),  # a combining mark: Rust \w only
    ("pattern", {"type": "object", "properties": {"z": {"type": "string", "pattern": "^a\\\\b$"}}, "required": ["z"]},
     "/properties/z", '{"z":"a\\b"}'),
    ("format", {"type": "string", "format": "uri"}, "", '"urn:a:\x01"'),
    ("format", {"type": "string", "format": "time"}, "", '"08:29:27\\q5"'),
    ("const", {"type": "string", "const": 1}, "", "1"),
    ("enum", {"enum": ["abc", "d"], "maxLength": 1}, "", '"abc"'),
    ("allOf", {"allOf": [{"type": "integer"}, {"type": "integer"}]}, "", "1-2"),
    ("oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "", "1"),
]


def _outlines_accepts(schema, text: str) -> bool:
    """outlines-core alone: does its index for ``schema`` accept ``text``'s UTF-8 bytes as a whole?"""
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema

    idx = oc.Index(build_regex_from_schema(json.dumps(schema), r"[ ]?", 3),
                   oc.Vocabulary(256, {bytes([b]): [b] for b in range(256)}))
    s = idx.get_initial_state()
    for b in text.encode("utf-8"):
        s = idx.get_next_state(s, b)
        if s is None:
            return False
    return idx.is_final_state(s)


def _schema_accepts(schema, text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.fixture(scope="module")
def backend():
    return get_backend("structgate-outlines-core", BYTES, max_whitespace=1)


@pytest.mark.parametrize("keyword,schema,where,instance", REFUSED,
                         ids=[f"{k}-{i}" for i, (k, *_rest) in enumerate(REFUSED)])
def test_refuses_what_outlines_core_would_widen(backend, keyword, schema, where, instance):
    # the oracle: outlines-core really accepts an instance the schema rejects
    assert _outlines_accepts(schema, instance), "outlines-core no longer accepts the counterexample"
    assert not _schema_accepts(schema, instance)
    with pytest.raises(UnsupportedFeatureError) as ei:
        backend.compile(Constraint.json_schema(schema))
    assert ei.value.feature == keyword and ei.value.where == where, str(ei.value)
    assert keyword in str(ei.value) and "outlines-core" in str(ei.value)
    with pytest.raises(UnsupportedFeatureError):
        backend.validate(Constraint.json_schema(schema))


# schemas the adapter keeps: outlines-core enforces them exactly (narrowing aside)
KEPT = [
    {"type": "string", "minLength": 1, "maxLength": 12},
    {"type": "string", "pattern": "^[0-9]{5}$"},
    {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
    {"type": "string", "pattern": "^(ab|cd)+$"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "array", "minItems": 1, "maxItems": 3, "items": {"enum": ["red", "green", "blue"]}},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "required": ["b"]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
    {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}, {"type": "null"}]},
    {"oneOf": [{"enum": [1, 2]}, {"const": 3}]},
    {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
    {"enum": ['a"b', 1, None, [1, 2], {"x": 1}]},
    {"type": "string", "enum": ["a", "b"]},
    {"type": "string", "format": "date", "maxLength": 3},
    {"$defs": {"t": {"type": "object", "properties": {"c": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
     "$ref": "#/$defs/t"},
]


@pytest.mark.parametrize("schema", KEPT, ids=[json.dumps(s)[:40] for s in KEPT])
def test_kept_schemas_give_only_valid_outputs(backend, schema):
    """Random walks through the adapter's masks (the mask of each step, then advance), stopping at
    EOS: every finished output is valid per jsonschema."""
    g = backend.compile(Constraint.json_schema(schema))
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(json.dumps(schema))
    finished = 0
    for _ in range(60):
        m = g.matcher()
        out = bytearray()
        for _step in range(160):
            allowed = [int(t) for t in m.allowed_token_ids()]
            if not allowed:
                break
            t = 256 if 256 in allowed and rng.random() < 0.3 else rng.choice(allowed)
            assert m.advance(t)
            if t == 256:
                value = json.loads(out.decode("utf-8"))
                assert validator.is_valid(value), (schema, out)
                finished += 1
                break
            out.append(t)
    assert finished > 0


def test_demo_schemas_are_refused_or_exact(backend):
    """Each of the demo's own schemas: a typed refusal (integer / number bounds) or a compiled
    grammar (checked above for kept shapes); never a silent widening."""
    from structgate.cli.demo import DEMO_SCHEMAS

    refused = []
    for name, schema in DEMO_SCHEMAS:
        try:
            backend.compile(Constraint.json_schema(schema))
        except UnsupportedFeatureError as e:
            refused.append((name, e.feature))
    assert {f for _, f in refused} <= {"minimum", "maximum"} and refused


def test_allow_inexact_gives_the_raw_engine():
    """``outlines_allow_inexact=True`` (for engine comparisons) compiles outlines-core's own regex,
    which accepts the counterexample; the default refuses."""
    schema = {"type": "integer", "maximum": 120}
    raw = get_backend("structgate-outlines-core", BYTES, outlines_allow_inexact=True)
    m = raw.compile(Constraint.json_schema(schema)).matcher()
    assert m.advance(list(b"121")) and m.is_accepting()
    with pytest.raises(UnsupportedFeatureError):
        get_backend("structgate-outlines-core", BYTES).compile(Constraint.json_schema(schema))
