"""A document that declares its draft (``$schema``) is read as that draft reads it.

Each used to be accepted although the declared draft's validator rejects it:

* draft 4: ``2.0`` is no ``integer``; a nested ``enum``/``const`` was checked with Draft 2020-12
  and every integer spelled ``3(?:\\.0+)?`` (``{"a": 3.0}`` passed ``type: integer, enum: [3]``);
* keywords a draft does not define are ignored by its validator (``const`` in draft 4, ``if`` in
  draft 6, ``dependencies`` from 2019-09 on, every sibling of ``$ref`` in drafts 4 to 7): enforced
  under ``not`` they made the negation accept what the validator rejects;
* ``$recursiveRef`` (2019-09) was no keyword at all: silently ignored;
* draft 7's ``dependencies`` below the root's own keywords was not read by the enum checks.

Oracle: ``jsonschema.validators.validator_for(schema)`` (the declared draft). Native never accepts
an invalid instance, and accepts the valid ones listed (others may fall to the policies: key
order, extra keys, ``1.0`` as an integer outside draft 4, ``-0``).

Also (``REF_BASES``) where a ``$ref`` lands, as ``jsonschema`` (``referencing``) resolves it —
cases a break-it run found after the normalisation (:mod:`structgate.native.json_schema._normalize`) landed:

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
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError
from _matching import accepts as _accepts

D4, D6, D7 = ("http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
              "http://json-schema.org/draft-07/schema#")
D2019, D2020 = "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"

NUMS = ["2", "2.0", "3", "3.0", "1", "1.0", "0", "-0", "0.0", "2.5", "5"]
OBJS = ['{"a": 2}', '{"a": 2.0}', '{"a": 3}', '{"a": 3.0}', '{"a": "x"}', '{"a": 1}', '{"a": {"a": 1}}',
        '{"a": {"a": "x"}}', '{"a": [1]}', '{"a": [1.0]}', "{}", '{"a": 1, "b": 2}', '{"x": {"a": 1}}',
        '{"x": {"a": 1, "b": 2}}', "1", '"x"', "[1]", '["x"]', "[1.0]", '[1, "x"]']

#: (schema, texts, texts that must be accepted: valid ones inside the policies); every text that
#: native accepts must be valid
CASES = [
    # draft 4 integers: 2.0 is no integer, and 3 is not 3.0 under type: integer
    ({"$schema": D4, "properties": {"a": {"type": "integer", "enum": [2.0, 3]}}}, OBJS, ['{"a": 2}', '{"a": 3}']),
    ({"$schema": D4, "type": "integer", "enum": [2.0, 3]}, NUMS, ["2", "3"]),
    ({"$schema": D4, "type": "integer", "enum": [0.0, 1]}, NUMS, ["0", "1"]),
    ({"$schema": D4, "enum": [2.0, 3]}, NUMS, ["2", "2.0", "3", "3.0"]),
    ({"$schema": D4, "properties": {"a": {"allOf": [{"type": "integer"}, {"enum": [3, 2.0]}]}}}, OBJS, None),
    ({"$schema": D4, "definitions": {"i": {"type": "integer"}},
      "properties": {"a": {"allOf": [{"$ref": "#/definitions/i"}], "enum": [3, 2.0]}}}, OBJS, None),
    ({"$schema": D4, "items": {"type": "integer"}, "enum": [[1], [1.0, 2]]}, OBJS, None),
    ({"$schema": D4, "type": "integer", "multipleOf": 1}, NUMS, None),
    # an embedded resource of another draft than the root's, one of them draft 4: read as draft 4
    # reads integers (jsonschema switches to the resource's draft below its $schema)
    ({"$schema": D2020, "$defs": {"a": {"$schema": D4, "type": "integer", "enum": [2.0, 3]}},
      "properties": {"a": {"$ref": "#/$defs/a"}}}, OBJS, ['{"a": 2}', '{"a": 3}']),
    ({"$defs": {"a": {"$schema": D4, "enum": [2.0, 3], "const": 7}}, "$ref": "#/$defs/a"}, NUMS,
     ["2", "2.0", "3", "3.0"]),
    ({"$schema": D4, "definitions": {"a": {"$schema": D7, "type": "integer", "enum": [2.0, 3]}},
      "properties": {"a": {"$ref": "#/definitions/a"}}}, OBJS, ['{"a": 2}', '{"a": 3}']),
    # draft-4 boolean exclusive bounds, also where the enum checks and not read them
    ({"$schema": D4, "properties": {"a": {"enum": [3, 2], "maximum": 3, "exclusiveMaximum": True}}}, OBJS, None),
    ({"$schema": D4, "type": "number", "not": {"maximum": 2, "exclusiveMaximum": True}}, NUMS, None),
    ({"$schema": D4, "maximum": 3, "exclusiveMaximum": 10}, NUMS, ["2", "2.5"]),  # read as true (its validator)
    ({"$schema": D4, "minimum": 2, "exclusiveMinimum": 0}, NUMS, None),  # read as false
    ({"$schema": D4, "exclusiveMaximum": True}, NUMS, None),  # no maximum: nothing
    # keywords the declared draft does not define: ignored, also under not
    ({"$schema": D4, "not": {"const": 1}}, NUMS, None),
    ({"$schema": D4, "properties": {"a": {"const": 1}}}, OBJS, ['{"a": "x"}', '{"a": [1]}']),
    ({"$schema": D4, "not": {"contains": {"type": "integer"}}}, OBJS, None),
    ({"$schema": D4, "not": {"propertyNames": {"maxLength": 0}}}, OBJS, None),
    ({"$schema": D6, "not": {"if": {"type": "integer"}, "then": {"minimum": 10}}}, NUMS, None),
    ({"$schema": D7, "not": {"dependentRequired": {"a": ["b"]}}}, OBJS, None),
    ({"$schema": D2019, "not": {"prefixItems": [{"type": "string"}]}}, OBJS, None),
    ({"$schema": D2019, "not": {"dependencies": {"a": ["b"]}}}, OBJS, None),
    ({"$schema": D2020, "not": {"dependencies": {"a": ["b"]}}}, OBJS, None),
    ({"$schema": D2020, "prefixItems": [{"type": "integer"}], "additionalItems": False}, OBJS, ['[1, "x"]']),
    ({"$schema": D7, "not": {"unevaluatedProperties": False, "type": "string"}}, OBJS, ["1", "{}"]),
    # drafts 4 to 7: every sibling of $ref is ignored
    ({"$schema": D7, "definitions": {"a": {"type": "string"}}, "not": {"$ref": "#/definitions/a", "maxLength": 1}},
     NUMS + OBJS + ['"xx"', '""'], ["1", "{}"]),
    ({"$schema": D4, "definitions": {"a": {"type": "string"}},
      "properties": {"a": {"not": {"$ref": "#/definitions/a", "minLength": 3}}}}, OBJS, ['{"a": 1}']),
    ({"$schema": D6, "definitions": {"a": {}}, "properties": {"a": {"$ref": "#/definitions/a", "type": "string"}}},
     OBJS, ['{"a": 1}', '{"a": [1]}']),
    ({"$schema": D2019, "$defs": {"a": {"type": "integer"}}, "not": {"$ref": "#/$defs/a", "type": "string"}},
     NUMS, None),  # 2019-09: siblings apply
    # draft 7's dependencies below the root (the enum checks did not read it)
    ({"$schema": D7, "properties": {"x": {"enum": [{"a": 1}, {"a": 1, "b": 2}], "dependencies": {"a": ["b"]}}}},
     OBJS, None),
    ({"$schema": D7, "properties": {"x": {"enum": [{"a": 1}, {"a": 1, "b": 2}],
                                          "dependencies": {"a": {"required": ["b"]}}}}}, OBJS, None),
    # $recursiveRef: the static $ref it is when only the root has $recursiveAnchor
    ({"$schema": D2019, "$recursiveAnchor": True, "type": ["object", "integer"],
      "properties": {"a": {"$recursiveRef": "#"}}}, OBJS, ['{"a": {"a": 1}}', '{"a": 1}']),
    ({"$schema": D2019, "type": ["object", "integer"], "properties": {"a": {"$recursiveRef": "#"}}}, OBJS, None),
    ({"$schema": D2019, "$id": "http://example.com/root.json", "type": ["object", "string"],
      "$recursiveAnchor": True, "properties": {"a": {"$ref": "item.json"}},
      "$defs": {"item": {"$id": "item.json", "type": ["object", "integer"],
                         "properties": {"a": {"$recursiveRef": "#"}}}}}, OBJS, None),
    ({"$schema": D2019, "$recursiveAnchor": True, "type": ["object", "integer"], "minProperties": 1,
      "properties": {"a": {"$recursiveRef": "#", "type": "object"}}}, OBJS, None),
    ({"$schema": D7, "properties": {"a": {"$recursiveRef": "#", "type": "integer"}}}, OBJS, ['{"a": 1}']),  # none
    ({"$schema": D2020, "properties": {"a": {"$recursiveRef": "#", "type": "integer"}}}, OBJS, None),
]

#: where a ``$ref`` lands, as ``jsonschema`` (``referencing``) resolves it (cases a break-it run found
#: after the normalisation landed; see the comments): (schema, texts, texts native must accept)
REF_BASES = [
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
    # a pattern that matches the trigger: exact (an object without b, or with b and a; the
    # required keys after the others, in the order the dependency gives)
    ({"type": "object", "patternProperties": {"^b": {}}, "dependentRequired": {"b": ["a"]}},
     ["{}", '{"b": 1}', '{"a": 1, "b": 1}', '{"b": 1, "a": 1}', '{"bb": 1}', '{"a": 1}'],
     ["{}", '{"bb": 1}', '{"b": 1, "a": 1}']),
]


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_cache_size=0)


@pytest.mark.parametrize("schema,texts,valid", CASES + REF_BASES, ids=[json.dumps(c[0])[:100] for c in CASES + REF_BASES])
def test_a_declared_draft_is_read_as_that_draft(native, llama3_vocab, schema, texts, valid):
    v = jsonschema.validators.validator_for(schema)(schema)
    try:
        g = native.compile(Constraint.json_schema(schema))
    except InvalidConstraintError:  # matches nothing: so must the validator
        assert not any(v.is_valid(json.loads(t)) for t in texts), schema
        return
    for text in texts:
        assert not (_accepts(g, llama3_vocab, text) and not v.is_valid(json.loads(text))), ("invalid accepted", text)
    for text in valid or ():
        assert v.is_valid(json.loads(text)), text
        assert _accepts(g, llama3_vocab, text), ("valid rejected", text)


REFUSED = [
    # another resource with $recursiveAnchor: true: the target depends on the dynamic scope
    ({"$schema": D2019, "$recursiveAnchor": True, "properties": {"a": {"$ref": "item.json"}},
      "$defs": {"item": {"$id": "item.json", "$recursiveAnchor": True,
                         "properties": {"a": {"$recursiveRef": "#"}}}}},
     "$recursiveRef", "/$defs/item/properties/a/$recursiveRef"),
    ({"$schema": D2019, "properties": {"a": {"$recursiveRef": "#/$defs/x"}}, "$defs": {"x": {}}},
     "$recursiveRef", "/properties/a/$recursiveRef"),
    # a $ref into a keyword the resource's draft ignores (here: a sibling of $ref in draft 7)
    ({"$schema": D7, "definitions": {"x": {}},
      "properties": {"a": {"$ref": "#/properties/b/not"}, "b": {"$ref": "#/definitions/x", "not": {"type": "string"}}}},
     "$ref", "/properties/a/$ref"),
]


@pytest.mark.parametrize("schema,feature,where", REFUSED, ids=[json.dumps(c[0])[:100] for c in REFUSED])
def test_what_the_compiler_cannot_read_statically_is_a_typed_refusal(native, schema, feature, where):
    with pytest.raises(UnsupportedFeatureError) as ei:
        native.compile(Constraint.json_schema(schema))
    assert ei.value.feature == feature and ei.value.where == where, str(ei.value)


@pytest.mark.parametrize("draft", [D6, D7, D2019, D2020])
def test_a_boolean_exclusive_bound_after_draft_4_is_a_typed_error(native, draft):
    schema = {"$schema": draft, "properties": {"a": {"maximum": 3, "exclusiveMaximum": True}}}
    cls = jsonschema.validators.validator_for(schema)
    assert not cls(cls.META_SCHEMA).is_valid(schema)  # the metaschema wants a number
    with pytest.raises(GrammarSyntaxError) as ei:
        native.compile(Constraint.json_schema(schema))
    assert ei.value.where == "/properties/a/exclusiveMaximum", str(ei.value)


def test_every_keyword_a_draft_defines_is_read_or_refused():
    """Every assertion/applicator keyword of every draft's validator (``jsonschema``) is one the
    compiler knows (it implements it or raises a typed error), never an unknown one it ignores;
    the normalisation's per-draft keyword sets are the validators' (plus ``minContains``/
    ``maxContains``, read by ``contains``, and draft 4's boolean ``exclusive*``, read by
    ``maximum``/``minimum``)."""
    from structgate.native.json_schema._common import KNOWN
    from structgate.native.json_schema._normalize import _DRAFT_KW

    for draft, cls in ((4, jsonschema.Draft4Validator), (6, jsonschema.Draft6Validator),
                       (7, jsonschema.Draft7Validator), (2019, jsonschema.Draft201909Validator),
                       (2020, jsonschema.Draft202012Validator)):
        assert set(cls.VALIDATORS) <= KNOWN, (draft, set(cls.VALIDATORS) - KNOWN)
        extra = {"exclusiveMaximum", "exclusiveMinimum"} if draft == 4 else \
            {"minContains", "maxContains", "then", "else"} if draft >= 2019 else {"then", "else"} if draft == 7 \
            else set()
        assert _DRAFT_KW[draft] == set(cls.VALIDATORS) | extra, draft
