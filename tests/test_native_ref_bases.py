"""Where a ``$ref`` lands, as ``jsonschema`` (``referencing``) resolves it — cases a break-it run found
after the normalisation (:mod:`structgate.native.json_schema._normalize`) landed:

* a ``$id`` where its draft has no subschema (under an unknown keyword, ``$defs`` in draft 7,
  ``contentSchema`` before 2019-09) names no resource and moves no base: a schema there is
  reached by a JSON pointer, in its enclosing resource; ``contentSchema`` (2019-09 on) is one;
* an embedded ``"$id": "schema.json"`` in a document without a ``$id`` is a resource of its own
  (it used to coincide with the document's default base, so its ``#/...`` refs read the root);
* a pointer into array-form ``items`` / ``additionalItems`` follows them to ``prefixItems`` /
  ``items`` (``#/items/0`` was "target not found", or landed in what ``additionalItems`` became);
* draft-4 ``enum`` with ``null`` (the int/float twins dropped the ``null`` itself);
* ``dependentRequired`` / ``dependencies`` beside ``patternProperties``: the dependents are
  required only when a pattern may match the trigger (they were required always: ``{}`` rejected).

Oracle: ``jsonschema.validators.validator_for`` (the declared draft; undeclared: 2020-12). Native
never accepts an invalid text, and accepts the texts listed as valid.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts as _accepts
from structgate import Constraint, get_backend

D4, D7 = "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"
D2019, D2020 = "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"

#: (schema, texts, the texts native must accept)
CASES = [
    ({"$schema": D2020, "$defs": {"x": {"type": "integer"}},
      "components": {"A": {"$id": "http://other.com/a.json", "$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"}},
      "$ref": "#/components/A"}, ["1", '"s"'], ["1"]),
    ({"$schema": D7, "$defs": {"A": {"$id": "http://ex.com/a.json", "definitions": {"x": {"type": "string"}},
                                     "properties": {"p": {"$ref": "#/definitions/x"}}}},
      "definitions": {"x": {"type": "integer"}}, "allOf": [{"$ref": "#/$defs/A"}]},
     ['{"p": 1}', '{"p": "s"}'], ['{"p": 1}']),
    ({"$schema": D2020, "contentSchema": {"$id": "http://ex.com/c", "$defs": {"x": {"type": "string"}},
                                          "$ref": "#/$defs/x"},
      "$defs": {"x": {"type": "integer"}}, "$ref": "#/contentSchema"}, ["1", '"s"'], ['"s"']),
    ({"$defs": {"x": {"type": "integer"}, "inner": {"$id": "schema.json", "$defs": {"x": {"type": "string"}},
                                                    "$ref": "#/$defs/x"}},
      "$ref": "#/$defs/inner"}, ["1", '"s"'], ['"s"']),
    ({"$schema": D7, "definitions": {"x": {"type": "integer"},
                                     "inner": {"$id": "schema.json", "definitions": {"x": {"type": "string"}},
                                               "properties": {"p": {"$ref": "#/definitions/x"}}}},
      "allOf": [{"$ref": "#/definitions/inner"}]}, ['{"p": 1}', '{"p": "s"}'], ['{"p": "s"}']),
    ({"$schema": D7, "definitions": {"inner": {"$id": "schema.json", "properties": {"p": {"type": "string"}}}},
      "allOf": [{"$ref": "schema.json"}]}, ['{"p": "s"}', '{"p": 1}'], ['{"p": "s"}']),
    ({"$schema": D7, "items": [{"type": "integer"}, {"$ref": "#/items/0"}], "additionalItems": {"0": {}}},
     ["[1, 2]", '[1, "a"]'], ["[1, 2]"]),
    ({"$schema": D7, "items": [{"type": "integer"}, {"$ref": "#/items/0"}]}, ["[1, 2]", '[1, "a"]'], ["[1, 2]"]),
    ({"$schema": D7, "items": [{"$id": "http://ex.com/i.json", "type": "integer"}],
      "properties": {"a": {"$ref": "http://ex.com/i.json"}}}, ['{"a": 1}', '{"a": "s"}'], ['{"a": 1}']),
    ({"$schema": D7, "items": [{"type": "integer"}], "additionalItems": {"type": "string"},
      "properties": {"a": {"$ref": "#/additionalItems"}}}, ['{"a": "s"}', '{"a": 1}'], ['{"a": "s"}']),
    ({"$schema": D2019, "items": [{"$anchor": "foo", "type": "integer"}], "properties": {"a": {"$ref": "#foo"}}},
     ['{"a": 1}', '{"a": "s"}'], ['{"a": 1}']),
    ({"$schema": D4, "enum": [None, 2]}, ["null", "2", "2.0", "3"], ["null", "2"]),
    ({"$schema": D4, "properties": {"p0": {"enum": [None, 2]}}}, ['{"p0": null}', '{"p0": 1}'], ['{"p0": null}']),
    ({"type": "object", "patternProperties": {"x": {}}, "dependentRequired": {"b": ["a"]}},
     ["{}", '{"x": 1}', '{"c": 1}', '{"b": 1}', '{"a": 1}'], ["{}", '{"x": 1}']),
    ({"$schema": D7, "patternProperties": {"x": {}}, "dependencies": {"b": ["a"]}},
     ["{}", '{"x": 1}', '{"b": 1}'], ["{}", '{"x": 1}']),
    # a pattern that matches the trigger: the dependent is required wherever the trigger may appear
    # (the documented sound subset: then always)
    ({"type": "object", "patternProperties": {"^b": {}}, "dependentRequired": {"b": ["a"]}},
     ["{}", '{"b": 1}', '{"a": 1, "b": 1}', '{"bb": 1}', '{"a": 1}'], ['{"a": 1}']),
]


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_cache_size=0)


@pytest.mark.parametrize("schema,texts,valid", CASES, ids=[json.dumps(c[0])[:100] for c in CASES])
def test_refs_land_where_the_validator_lands_them(native, llama3_vocab, schema, texts, valid):
    v = jsonschema.validators.validator_for(schema)(schema)
    g = native.compile(Constraint.json_schema(schema))
    for text in texts:
        assert not (_accepts(g, llama3_vocab, text) and not v.is_valid(json.loads(text))), ("invalid accepted", text)
    for text in valid:
        assert v.is_valid(json.loads(text)), text
        assert _accepts(g, llama3_vocab, text), ("valid rejected", text)
