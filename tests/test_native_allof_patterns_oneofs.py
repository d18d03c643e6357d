"""``allOf`` members (and ``$ref`` siblings) with different ``pattern``s, or each with a ``oneOf``:
merged exactly instead of ``UnsupportedFeatureError("allOf")``.

* Every ``pattern`` applies: the string emitter intersects their code-point automata (with a
  ``format``'s and a length counter), as it does for one pattern with a format.
* The first member's ``oneOf`` stays a ``oneOf``; each other member's becomes the ``anyOf`` of the
  same language (``oneof_as_anyof``: branches proved disjoint beside that member's own keywords, or
  each minus the branches it may overlap) and is distributed with the members' ``anyOf``s.

15 MaskBench development schemas were refused this way (10 patterns, 5 oneOfs). Oracle:
``jsonschema`` on every instance below, walked through the native engine's token path."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import CompileLimitError, UnsupportedFeatureError
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"

PATTERN_SCHEMAS = [
    {"allOf": [{"pattern": "^[abc]+$"}, {"pattern": "ab"}, {"pattern": "c"}]},
    {"allOf": [{"pattern": "^[abc]*$"}, {"pattern": "^a"}], "maxLength": 4},
    {"allOf": [{"pattern": "a.b"}, {"pattern": "^.{2,4}$"}], "minLength": 3},
    # a member that is itself an allOf of patterns (merged twice), and a $ref with a sibling pattern
    {"$defs": {"p": {"allOf": [{"pattern": "b$"}, {"pattern": "^[ab]+$"}]}},
     "$ref": "#/$defs/p", "pattern": "aa"},
    # no string can match both: every string rejected, other types still valid
    {"allOf": [{"pattern": "^a+$"}, {"pattern": "^b+$"}]},
]
STRINGS = ["".join(p) for n in range(7) for p in itertools.product("abc", repeat=n)]
OTHERS = ["1", "null", "[]", "{}", "true"]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


def _disagreements(backend, vocab, schema, texts):
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    # formats asserted, as native asserts them (docs/json-schema.md, "format")
    check = jsonschema.Draft202012Validator(full, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    wrong = [(t, check.is_valid(json.loads(t))) for t in texts
             if accepts(g, vocab, t) != check.is_valid(json.loads(t))]
    return wrong, sum(check.is_valid(json.loads(t)) for t in texts)


@pytest.mark.parametrize("schema", PATTERN_SCHEMAS, ids=[json.dumps(s)[:60] for s in PATTERN_SCHEMAS])
def test_patterns_of_allof_members_all_apply(backend, llama3_vocab, schema):
    texts = [json.dumps(s) for s in STRINGS] + OTHERS
    wrong, n_valid = _disagreements(backend, llama3_vocab, schema, texts)
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"
    assert n_valid


def test_patterns_with_a_format(backend, llama3_vocab):
    schema = {"type": "string", "format": "date", "allOf": [{"pattern": "^2024-"}, {"pattern": "-0[1-3]$"}]}
    texts = [json.dumps(f"{y}-{m:02d}-{d:02d}") for y in (2023, 2024) for m in (1, 2, 4, 12) for d in (1, 3, 30)]
    texts += [json.dumps("2024-13-01"), json.dumps("2024-02-30x")]
    full = {**schema, "$schema": S}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    wrong = [t for t in texts if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong
    assert any(check.is_valid(json.loads(t)) for t in texts)


def test_too_large_an_intersection_is_a_typed_limit(backend):
    """Eight unanchored three-letter patterns: their product automaton is over the state cap. A
    typed limit naming the patterns and the option to raise, never an untyped error."""
    pats = ["".join(p) for p in itertools.islice(itertools.product("abcd", repeat=3), 0, 64, 8)]
    schema = {"type": "string", "allOf": [{"pattern": p} for p in pats]}
    with pytest.raises(CompileLimitError) as e:
        NativeBackend(backend.vocab, max_product_states=500).compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "max_product_states"
    assert "patterns of allOf members" in str(e.value) and "/pattern" in str(e.value)


def test_not_of_several_patterns_stays_refused(backend):
    """``not`` of a pattern intersection has no positive form here: the same refusal as for one
    pattern, never a silent drop of the second."""
    schema = {"type": "string", "not": {"allOf": [{"pattern": "a"}, {"pattern": "b"}]}}
    with pytest.raises(UnsupportedFeatureError):
        backend.compile(Constraint.json_schema(schema))


URI = {"type": "string", "pattern": "^/"}  # (MaskBench: format uri-reference, unchecked by jsonschema here)
ONEOF_SCHEMAS = [
    # MaskBench Github_hard---o366 (JSON:API): a pagination member's oneOf beside links' oneOf
    {"allOf": [{"oneOf": [URI, {"type": "null"}]},
               {"oneOf": [URI, {"type": "object", "required": ["href"]}]}]},
    # overlapping branches in the second member (numbers >= 5 match both): exact by negation (0 to 5, and every string)
    {"allOf": [{"oneOf": [{"type": "integer"}, {"type": "string"}]},
               {"type": ["integer", "string"], "oneOf": [{"minimum": 0}, {"minimum": 5}]}]},
    # three members, and each member's own keywords beside its oneOf
    {"allOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]},
               {"maxLength": 2, "oneOf": [{"type": "string", "minLength": 2}, {"type": "integer", "maximum": 3}]},
               {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "integer"}]}]},
    # a oneOf whose branches all fail beside the other members: nothing valid but what the first allows
    {"allOf": [{"oneOf": [{"type": "null"}, {"type": "boolean"}]}, {"anyOf": [{"type": "null"}, {"const": 3}]},
               {"oneOf": [{"type": "null"}, {"type": "integer"}]}]},
    # objects: properties merged per key, each key's value with two oneOfs (a $ref's additionalProperties)
    {"$defs": {"link": {"oneOf": [URI, {"type": "object", "required": ["href"]}]}},
     "allOf": [{"type": "object", "additionalProperties": {"$ref": "#/$defs/link"}},
               {"type": "object", "properties": {"next": {"oneOf": [URI, {"type": "null"}]}}}]},
]
# (listed keys first: the declared property order, docs/json-schema.md "property_order")
VALUES = ["1", "3", "5", "7", "-2", "2.5", "null", "true", "false", '"a"', '"ab"', '"abc"', '"b"', '""',
          '"/x/y"', '"a b"', "[]", "{}", '{"href": "/a"}', '{"next": "/a"}', '{"next": null}',
          '{"next": {"href": "/a"}}', '{"next": "/b", "self": "/a"}', '{"other": 1}', '{"next": 3}']


@pytest.mark.parametrize("schema", ONEOF_SCHEMAS, ids=[json.dumps(s)[:60] for s in ONEOF_SCHEMAS])
def test_oneofs_of_several_allof_members_match_jsonschema(backend, llama3_vocab, schema):
    wrong, n_valid = _disagreements(backend, llama3_vocab, schema, VALUES)
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong}"
    assert n_valid


# -- patternProperties across allOf members --------------------------------------------------------
#: a key's value must satisfy, in each member, its properties entry, every pattern of that member
#: matching it, and, when neither, that member's additionalProperties (only for its own keys)
PP_SCHEMAS = [
    {"allOf": [{"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False},
               {"properties": {"ab": {"minimum": 2}, "b": {"type": "string"}}}]},
    {"allOf": [{"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
               {"patternProperties": {"b$": {"maximum": 5}}, "additionalProperties": {"type": ["string", "integer"]}}]},
    {"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
               {"patternProperties": {"^[ab]$": {"minimum": 0}}}]},
    # one pattern in both members, a required key, and a member that is itself such a merge ($ref)
    {"$defs": {"m": {"allOf": [{"patternProperties": {"^a": {"maximum": 3}}, "additionalProperties": {"type": "null"}},
                               {"properties": {"c": {"type": "string"}}}]}},
     "allOf": [{"$ref": "#/$defs/m"}, {"patternProperties": {"^a": {"type": "integer"}, "b": {"type": ["integer", "null"]}}}],
     "required": ["ab"]},
    # dependentRequired whose dependent only a member's additionalProperties: false forbids
    {"allOf": [{"properties": {"a": {}}, "patternProperties": {"^c": {}}, "additionalProperties": False},
               {"properties": {"b": {}}}], "dependentRequired": {"a": ["b"]}},
]
KEYS = ["a", "ab", "b", "ba", "c", "abb", "cb"]
KEY_VALUES = [3, 7, "x", None]


def _declared_order(schema) -> list[str]:
    out = list(schema.get("properties", {}))
    for m in schema.get("allOf", []):
        out += list(m.get("properties", {}))
    for d in schema.get("$defs", {}).values():
        for m in d.get("allOf", []):
            out += list(m.get("properties", {}))
    return list(dict.fromkeys(out + schema.get("required", [])))  # (required ones not listed: after them)


@pytest.mark.parametrize("schema", PP_SCHEMAS, ids=[json.dumps(s)[:60] for s in PP_SCHEMAS])
def test_pattern_properties_of_allof_members_match_jsonschema(backend, llama3_vocab, schema):
    """Every object of up to three of ``KEYS`` with values from ``KEY_VALUES`` (listed keys first,
    in declared order: the documented ``property_order``), against ``jsonschema``."""
    listed = _declared_order(schema)
    texts = []
    for r in range(4):
        for ks in itertools.permutations(KEYS, r):
            lk = [k for k in ks if k in listed]
            if list(ks[:len(lk)]) != [k for k in listed if k in lk]:
                continue
            texts += [json.dumps(dict(zip(ks, vs))) for vs in itertools.product(KEY_VALUES, repeat=r)]
    wrong, n_valid = _disagreements(backend, llama3_vocab, schema, texts)
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"
    assert n_valid
