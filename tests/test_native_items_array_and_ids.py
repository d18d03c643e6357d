"""Two forms older drafts and embedded resources write, read by one normalisation
(:mod:`structgate.native.json_schema._normalize`):

* array-form ``items`` with ``additionalItems`` (drafts 4 to 2019-09, and undeclared documents):
  used to be refused with a misleading ``GrammarSyntaxError`` ("a schema must be a JSON object" at
  ``/items``); now read as ``prefixItems`` + ``items``, through ``minItems``/``maxItems``,
  ``contains``, ``allOf`` merging and ``not``. Declared draft 2020-12: a typed error naming why.
* ``$ref`` under a nested ``$id`` (or to an embedded resource by URI, a plain-name ``$id``, an
  ``$anchor``): used to resolve against the document root ("target not found" for a valid
  schema); now against the base URI of the schema that holds it.

Oracle: ``jsonschema`` with the draft the schema declares (Draft 7 for undeclared array ``items``,
the reading native gives it). Native never accepts an invalid instance, and accepts every valid one
listed here (none needs a policy: no objects with unlisted keys, no ``1.0`` integers).
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import GrammarSyntaxError, UnsupportedFeatureError
from _matching import accepts as _accepts

D4, D6, D7 = ("http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
              "http://json-schema.org/draft-07/schema#")
D2019, D2020 = "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"

TUPLE = [{"type": "integer"}, {"type": "string"}]
ARRAYS = ["[]", "[1]", '[1, "a"]', '[1, "a", 2]', '[1, "a", "b"]', '[1, "a", null, true]', '["a"]', "[1, 2]",
          '[1, "a", 2, 3]', "[true]", '[1, "a", [1], {}]']


def _items_schemas():
    for draft in (D4, D6, D7, D2019, None):
        head = {} if draft is None else {"$schema": draft}
        yield {**head, "items": TUPLE}
        yield {**head, "items": TUPLE, "additionalItems": False}
        yield {**head, "items": TUPLE, "additionalItems": {"type": "integer"}}
        yield {**head, "items": TUPLE, "additionalItems": True, "minItems": 3}
        yield {**head, "items": TUPLE, "maxItems": 1}
        yield {**head, "items": [], "additionalItems": {"type": "integer"}}
        yield {**head, "items": {"type": "integer"}, "additionalItems": False}  # ignored beside a schema
        yield {**head, "additionalItems": False}  # ignored without items
        yield {**head, "allOf": [{"items": TUPLE, "additionalItems": False}, {"minItems": 2}]}
        yield {**head, "allOf": [{"items": TUPLE}, {"items": {"type": ["integer", "string"]}}]}
        yield {**head, "items": [{"type": "integer"}, False]}
        yield {**head, "not": {"items": [{"type": "string"}], "minItems": 1}, "type": "array"}
        yield {**head, "definitions": {"t": {"items": TUPLE, "additionalItems": False}},
               "properties": {"a": {"$ref": "#/definitions/t"}}, "type": "array"}
        yield {**head, "items": [{"type": "integer"}], "enum": [[1, "a"], ["a"], [1, 2], [2]],
               "additionalItems": {"type": "integer"}}


ITEMS = list(_items_schemas())


def _oracle(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_cache_size=0)


@pytest.mark.parametrize("schema", ITEMS, ids=[json.dumps(s)[:90] for s in ITEMS])
def test_array_items_read_as_their_draft_reads_them(native, llama3_vocab, schema):
    g = native.compile(Constraint.json_schema(schema))
    v = _oracle(schema)
    for text in ARRAYS:
        assert _accepts(g, llama3_vocab, text) == v.is_valid(json.loads(text)), (schema, text)


@pytest.mark.parametrize("kw,extra", [("uniqueItems", {"uniqueItems": True}), ("contains", {"contains": {"const": 2}})])
def test_array_items_keeps_the_typed_refusals_of_prefix_items(native, kw, extra):
    with pytest.raises(UnsupportedFeatureError) as ei:
        native.compile(Constraint.json_schema({"$schema": D7, "items": TUPLE, **extra}))
    assert ei.value.where == "/" + kw


@pytest.mark.parametrize("schema", [{"$schema": D2020, "items": TUPLE},
                                    {"$schema": D2020, "properties": {"a": {"items": TUPLE}}}])
def test_array_items_in_draft_2020_12_is_a_typed_error(native, schema):
    with pytest.raises(GrammarSyntaxError, match="items must be a schema in draft 2020-12") as ei:
        native.compile(Constraint.json_schema(schema))
    assert ei.value.where.endswith("/items")
    assert not jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).is_valid(schema)


def test_array_items_beside_prefix_items_is_refused(native):
    with pytest.raises(UnsupportedFeatureError, match="prefixItems"):
        native.compile(Constraint.json_schema({"items": TUPLE, "prefixItems": [{"type": "integer"}]}))


# -- references under nested $id ----------------------------------------------------------------
NESTED = {"$id": "http://example.com/root.json",
          "definitions": {"A": {"$id": "http://example.com/other.json",
                                "definitions": {"B": {"type": "integer"}},
                                "properties": {"x": {"$ref": "#/definitions/B"}}},
                          "B": {"type": "string"}},
          "properties": {"a": {"$ref": "#/definitions/A"}}}
OBJECTS = ['{"a": {"x": 1}}', '{"a": {"x": "s"}}', '{"a": {}}', '{"b": 1}', '{"b": "s"}', '{"b": [1]}', "{}",
           '{"b": {"x": 1}}', '{"b": {"x": "s"}}', '{"b": 2.5}']
REFS = [
    NESTED,
    {**NESTED, "properties": {"b": {"$ref": "other.json#/definitions/B"}}},
    {**NESTED, "properties": {"b": {"$ref": "http://example.com/other.json#/definitions/B"}}},
    {**NESTED, "properties": {"b": {"$ref": "http://example.com/other.json"}}},
    {**NESTED, "properties": {"b": {"$ref": "root.json#/definitions/B"}}},
    # relative $id against the parent's base; a second level of nesting
    {"$id": "http://example.com/dir/root.json",
     "$defs": {"X": {"$id": "sub/x.json", "$defs": {"Y": {"$id": "y.json", "type": "integer"}},
                     "properties": {"x": {"$ref": "y.json"}}}},
     "properties": {"b": {"$ref": "sub/x.json"}}},
    # plain-name fragment $id (drafts 6/7) and $anchor (2019-09 and later)
    {"$schema": D7, "definitions": {"n": {"$id": "#num", "type": "number"}}, "properties": {"b": {"$ref": "#num"}}},
    {"$schema": D2020, "$defs": {"n": {"$anchor": "num", "type": "number"}}, "properties": {"b": {"$ref": "#num"}}},
    {"$schema": D2020, "$id": "urn:example:root", "$defs": {"n": {"type": "string"}},
     "properties": {"b": {"$ref": "urn:example:root#/$defs/n"}}},
    # draft 4 spells it id
    {"$schema": D4, "id": "http://example.com/r.json",
     "definitions": {"A": {"id": "a.json", "definitions": {"s": {"type": "string"}},
                           "properties": {"x": {"$ref": "#/definitions/s"}}}},
     "properties": {"b": {"$ref": "a.json"}}},
]


@pytest.mark.parametrize("schema", REFS, ids=[json.dumps(s)[-80:] for s in REFS])
def test_refs_resolve_against_the_nearest_id(native, llama3_vocab, schema):
    schema = {**schema, "additionalProperties": False}  # (native leaves unlisted keys out by default)
    g = native.compile(Constraint.json_schema(schema))
    v = jsonschema.validators.validator_for(schema)(schema)
    for text in OBJECTS:
        assert _accepts(g, llama3_vocab, text) == v.is_valid(json.loads(text)), (schema, text)


def test_a_pointer_missing_in_its_resource_is_not_read_from_the_root(native):
    # #/definitions/C exists at the root, not in other.json: the reference points nowhere
    schema = {"$id": "http://example.com/root.json",
              "definitions": {"C": {"type": "integer"},
                              "A": {"$id": "other.json", "properties": {"x": {"$ref": "#/definitions/C"}}}},
              "properties": {"a": {"$ref": "#/definitions/A"}}}
    with pytest.raises(GrammarSyntaxError, match="target not found"):
        native.compile(Constraint.json_schema(schema))


@pytest.mark.parametrize("ref", ["http://example.com/elsewhere.json", "elsewhere.json#/definitions/B",
                                 "http://json-schema.org/draft-07/schema#"])
def test_a_resource_the_document_does_not_hold_stays_a_typed_refusal(native, ref):
    with pytest.raises(UnsupportedFeatureError, match="non-local") as ei:
        native.compile(Constraint.json_schema({**NESTED, "properties": {"b": {"$ref": ref}}}))
    assert ei.value.where == "/properties/b/$ref"


def test_the_input_schema_is_not_modified(native):
    schema = json.loads(json.dumps(REFS[1]))
    schema["items"] = [{"type": "integer"}]
    before = json.dumps(schema)
    native.compile(Constraint.json_schema(schema))
    assert json.dumps(schema) == before
