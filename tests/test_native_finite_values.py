"""A schema with finitely many values (``enum``/``const``, at its top or as an ``allOf`` member) is
exactly those values that jsonschema accepts against the whole schema, whatever stands beside them
(``not``, ``allOf``, ``$ref``, ``anyOf``...). Before, ``allOf [enum, not enum-of-numbers]`` and the
like were refused (``UnsupportedFeatureError("not")``): 72 MaskBench schemas of the Day-3 full run
(``Synthesized---*_not_2``). Oracle: ``jsonschema`` (Draft 2020-12) on every candidate value and on
each value of the ``not`` (walked token by token, Llama 3 tokenizer)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from _matching import accepts as _accepts

SCHEMAS = [
    {"allOf": [{"enum": [5]}, {"not": {"enum": [2]}}]},
    {"allOf": [{"enum": [2]}, {"not": {"enum": [-2.0, 2.0]}}]},
    {"allOf": [{"enum": [[0]]}, {"not": {"enum": [[False]]}}]},
    {"allOf": [{"enum": [{"a": 1}, {"a": True}]}, {"not": {"enum": [{"a": True}]}}]},
    {"allOf": [{"enum": [{"foo": "bar"}]}, {"not": {"enum": [{"baz": "bax", "foo": "bar"}]}}]},
    {"allOf": [{"enum": [4, 1, "x", None]}, {"not": {"enum": [1, 2, 3]}}]},
    {"enum": [1, 2.5, 3, "a"], "not": {"multipleOf": 3}},
    {"const": 7, "not": {"type": "integer"}},  # nothing
    {"$defs": {"odd": {"not": {"multipleOf": 2}}}, "allOf": [{"$ref": "#/$defs/odd"}, {"enum": [1, 2, 3, 4]}]},
    {"allOf": [{"enum": ["this is a string"]},
               {"not": {"$defs": {"s": {"type": "string"}}, "enum": [{"$ref": "#/allOf/1/not/$defs/s"}]}}]},
]


def _probes(schema):
    out = []

    def collect(x):
        if isinstance(x, dict):
            for k in ("enum", "const"):
                if k in x:
                    out.extend(x[k] if k == "enum" else [x[k]])
            for v in x.values():
                collect(v)
        elif isinstance(x, list):
            for v in x:
                collect(v)
    collect(schema)
    return out + [0, "y", {"a": 2}, [1]]


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_finite_values_are_exactly_the_valid_ones(i, llama3_vocab):
    schema = SCHEMAS[i]
    val = jsonschema.Draft202012Validator(schema)
    probes = _probes(schema)
    try:
        g = get_backend("native", llama3_vocab).compile(Constraint("json_schema", schema))
    except Exception as e:  # only a schema nothing satisfies may fail, and with the typed error
        assert not any(val.is_valid(p) for p in probes), e
        assert "matches nothing" in str(e)
        return
    for p in probes:
        assert _accepts(g, llama3_vocab, json.dumps(p)) == val.is_valid(p), p


@pytest.mark.parametrize("schema,match", [
    # an unknown type name is refused by the keyword-shape check before jsonschema sees it
    ({"allOf": [{"enum": [1]}, {"type": "foo"}]}, 'invalid type "foo"'),
    ({"enum": [1], "not": {"type": "foo"}}, 'invalid type "foo"'),
    ({"allOf": [{"enum": ["a"]}, {"pattern": "("}]}, "cannot be evaluated"),
    ({"allOf": [{"enum": [1]}, {"$ref": "#/nope"}]}, "cannot be evaluated"),
    ({"enum": [1], "$ref": "http://x/y"}, "cannot be evaluated"),
])
def test_a_schema_the_validator_cannot_evaluate_is_a_typed_error(schema, match, llama3_vocab):
    """The values are checked by jsonschema; a schema it cannot evaluate (unknown type, a $ref to
    nowhere, an invalid pattern) fails that request with GrammarSyntaxError, not jsonschema's or
    referencing's own exception (which vLLM would turn into a 500)."""
    from structgate.errors import GrammarSyntaxError

    with pytest.raises(GrammarSyntaxError, match=match):
        get_backend("native", llama3_vocab).compile(Constraint("json_schema", schema))


_U = {"u": {"enum": [{"a": 1}, {}], "unevaluatedProperties": False}}


@pytest.mark.parametrize("schema,texts", [
    ({"$ref": "#/$defs/u", "properties": {"a": {}}, "$defs": _U}, ['{"a": 1}', '{"a": 1.0}', '{}']),
    ({"anyOf": [{"$ref": "#/$defs/u"}, {"type": "string"}], "properties": {"a": {}}, "$defs": _U},
     ['{"a": 1}', '{}', '"s"']),
    ({"oneOf": [{"$ref": "#/$defs/u"}], "properties": {"a": {}}, "$defs": _U}, ['{"a": 1}', '{}']),
    ({"type": "object", "properties": {"p": {"$ref": "#/$defs/u", "properties": {"a": {}}}}, "$defs": _U},
     ['{"p": {"a": 1}}', '{"p": {}}']),
    ({"allOf": [{"$ref": "#/$defs/u"}, {"properties": {"a": {}}}, {"unevaluatedProperties": False}],
      "$defs": {"u": {"enum": [{"a": 1}, {}]}}}, ['{"a": 1}', '{}']),
    ({"allOf": [{"$ref": "#/$defs/u"}, {"prefixItems": [{}]}, {"unevaluatedItems": False}],
      "$defs": {"u": {"enum": [[1], []]}}}, ['[1]', '[1.0]', '[]']),
    ({"$ref": "#/$defs/v", "prefixItems": [{}], "$defs": {"v": {"enum": [[1], []], "unevaluatedItems": False}}},
     ['[1]', '[]']),
    # an undeclared boolean exclusive bound is read as draft 4 reads it (docs/json-schema.md, as
    # llguidance does; Draft 2020-12 would read false as the bound 0): the draft-4 validator
    ({"allOf": [{"$ref": "#/$defs/u"}, {"maximum": 5, "exclusiveMaximum": False}], "$defs": {"u": {"enum": [-1, 3]}}},
     ['-1', '3', '5']),
    ({"allOf": [{"$ref": "#/$defs/u"}, {"maximum": 3, "exclusiveMaximum": True}], "$defs": {"u": {"enum": [-1, 3]}}},
     ['-1', '3', '5']),
])
def test_values_left_by_a_merge_are_checked_against_the_schema_before_it(schema, texts, llama3_vocab):
    """Merging ``$ref``/``allOf`` is not exact for every keyword (a ``$ref`` target's
    ``unevaluatedProperties`` would see its siblings' ``properties``; draft-4 boolean
    ``exclusiveMaximum``), so the values it leaves are checked against the schema as written.
    Before, ``{"a": 1}`` was accepted under the first schema although jsonschema rejects it."""
    bool_bound = "exclusiveMaximum\": true" in json.dumps(schema) or "exclusiveMaximum\": false" in json.dumps(schema)
    val = (jsonschema.Draft4Validator if bool_bound else jsonschema.Draft202012Validator)(schema)
    try:
        g = get_backend("native", llama3_vocab).compile(Constraint("json_schema", schema))
    except Exception as e:  # nothing valid: the typed "matches nothing" error
        assert not any(val.is_valid(json.loads(t)) for t in texts), e
        assert "matches nothing" in str(e)
        return
    for t in texts:
        if _accepts(g, llama3_vocab, t):
            assert val.is_valid(json.loads(t)), t
