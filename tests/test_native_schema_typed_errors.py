"""Malformed JSON Schemas get a typed error naming the keyword and its JSON pointer, never a bare
Python exception or a silent acceptance (found by a helper's fuzzing; the fuzzer is
``scripts/fuzz_schema_shapes.py``).

* keyword values of the wrong shape (:mod:`structgate.native.json_schema._shape`): a
  :class:`GrammarSyntaxError` whose ``where`` is the keyword's pointer, wherever the keyword sits
  (under ``not``, ``if``, ``allOf``, ``propertyNames``, a ``$ref`` target under an unknown keyword);
* an integer beyond float range where the compiler asked ``float(v).is_integer()``;
* a document nested deeper than ``json`` reads or writes within Python's recursion limit
  (``Constraint.__post_init__``'s ``json.loads``, ``Constraint.cache_key``'s ``json.dumps``, the
  compiler's own recursion): ``CompileLimitError("nesting_depth")``, as the compiler already said
  for documents a little less deep;
* a ``$ref`` cycle that never descends into the value (``{"$ref": "#"}``, ``allOf``/``anyOf``/
  ``not``/``then`` of a ``$ref`` back to the schema itself): a ``GrammarSyntaxError`` naming the
  cycle's ``$ref`` keywords (it compiled as "any value", or failed with a misleading message);
  recursion through ``properties``/``items``/``prefixItems`` keeps compiling and accepting deep
  values (oracle: ``jsonschema``).
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.cli import main
from structgate.errors import CompileLimitError, GrammarSyntaxError, StructgateError
from structgate.native.json_schema import check_schema, schema_to_regex
from structgate.native.json_schema._shape import check_shapes

HUGE = 10 ** 400

#: (schema, JSON pointer of the bad value, words the message must hold); each raised a bare
#: TypeError / IndexError / AttributeError, or compiled, before the shape check
SHAPES = [
    ({"type": "object", "dependentRequired": {"a": [1]}}, "/dependentRequired/a/0", "dependentRequired"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": [None]}},
     "/dependentRequired/a/0", "dependentRequired"),
    ({"$ref": []}, "/$ref", "$ref must be a string"),
    ({"not": {"type": 5}}, "/not/type", "type"),
    ({"if": {"type": 5}, "then": {}}, "/if/type", "type"),
    ({"allOf": [{"type": 5}, {}]}, "/allOf/0/type", "type"),
    ({"allOf": [{"required": 5}, {"type": "object"}]}, "/allOf/0/required", "required"),
    ({"allOf": [{"type": "object", "required": [{"a": 1}]}, {"type": "object"}]}, "/allOf/0/required/0",
     "required"),
    ({"allOf": [{"prefixItems": 5}, {"type": "array"}]}, "/allOf/0/prefixItems", "prefixItems"),
    ({"allOf": [{"type": "object", "properties": True}, {"properties": {"b": {}}}]}, "/allOf/0/properties",
     "properties"),
    ({"allOf": [{"properties": [1]}, {"required": ["x"]}]}, "/allOf/0/properties", "properties"),
    ({"$defs": {"n": {"type": "object", "properties": [{"type": {}}]}}, "$ref": "#/$defs/n"},
     "/$defs/n/properties", "properties"),
    ({"propertyNames": {"type": 5}}, "/propertyNames/type", "type"),
    ({"type": "object", "propertyNames": {"enum": 5}, "maxProperties": 2}, "/propertyNames/enum", "enum"),
    ({"$schema": 5}, "/$schema", "$schema must be a string"),
    ({"format": 5}, "/format", "format must be a string"),
    ({"type": "string", "format": ["date"]}, "/format", "format must be a string"),
    ({"type": ["string", "string"]}, "/type/1", "twice"),
    ({"type": []}, "/type", "non-empty array"),
    ({"type": "strin"}, "/type", "expected one of null, boolean"),
    # a $ref target under a keyword the specification does not know (OpenAPI's components)
    ({"components": {"schemas": {"A": {"type": 1e308}}}, "$ref": "#/components/schemas/A"},
     "/components/schemas/A/type", "type"),
    # (a keyword of a later draft in a draft-4 document is no keyword there: ignored, as its
    # validator ignores it; tests/test_native_declared_drafts.py)
    ({"type": "array", "items": [5]}, "/items/0", "schema must be a JSON object or a boolean"),
    ({"type": "object", "dependencies": {"a": 5}}, "/dependencies/a", "dependencies"),
    ({"uniqueItems": "yes"}, "/uniqueItems", "uniqueItems must be a boolean"),
]


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


@pytest.mark.parametrize("schema,where,words", SHAPES, ids=[json.dumps(s[0])[:60] for s in SHAPES])
def test_wrong_keyword_shape_is_a_typed_error_naming_the_pointer(native, schema, where, words):
    assert not _conforms(schema)  # the metaschema refuses each one too (the oracle)
    with pytest.raises(GrammarSyntaxError) as ei:
        native.compile(Constraint.json_schema(schema))
    assert ei.value.where == where, str(ei.value)
    assert words in ei.value.message
    # the same error from the cheap check a server runs first, and from the flat-regex compiler
    with pytest.raises(GrammarSyntaxError) as ei2:
        native.validate(Constraint.json_schema(schema))
    assert ei2.value.where == where
    with pytest.raises(GrammarSyntaxError) as ei3:
        schema_to_regex(schema)
    assert ei3.value.where == where


def _conforms(schema) -> bool:
    if not isinstance(schema.get("$schema", ""), str):
        return False  # (jsonschema's validator_for itself fails on it)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    ok = cls(cls.META_SCHEMA).is_valid(schema)
    if ok and "components" in schema:  # the metaschema does not look under unknown keywords
        ref = schema["$ref"].lstrip("#").split("/")[1:]
        node = schema
        for k in ref:
            node = node[k]
        return cls(cls.META_SCHEMA).is_valid(node)
    return ok


#: odd but valid documents (the metaschemas accept them): they keep compiling
LENIENT = [
    {"type": "object", "required": ["a", "a"]},  # a name listed twice is required once
    {"enum": [1, 1]},
    {"type": "integer", "title": 5, "description": [], "examples": "x"},  # annotations are not read
    {"type": "integer", "x-vendor": {"type": 5}, "unknownKeyword": []},  # unknown keywords are ignored
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 0, "exclusiveMinimum": True},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}],
     "additionalItems": False},
    {"type": "object", "properties": {"a": {}}, "dependencies": {"a": {"required": ["b"]}, "c": ["a"]}},
    {"type": "string", "minLength": 2.0},
    {"properties": {"type": {"type": "string"}, "$ref": {"type": "integer"}, "enum": {}}},  # keywords as names
]


@pytest.mark.parametrize("schema", LENIENT, ids=range(len(LENIENT)))
def test_odd_but_valid_documents_pass_the_shape_check(native, schema):
    check_shapes(schema)
    if "items" not in schema and "dependencies" not in schema:  # (tuple items, dependent schemas: unsupported)
        native.compile(Constraint.json_schema(schema))


@pytest.mark.parametrize("schema,bad", [
    ({"type": "integer", "not": {"const": HUGE}}, HUGE),
    ({"type": "integer", "not": {"enum": [1.5, -HUGE, 3]}}, 3),
])
def test_integer_beyond_float_range_in_a_negated_enum(llama3_vocab, native, schema, bad):
    """``float(10**400)`` raised OverflowError in the ``not`` of an integer enum."""
    g = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    for x in (5, 0, -7, bad, HUGE, -HUGE):
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(json.dumps(x))) and m.is_accepting()
        assert ok == v.is_valid(x), x


def test_cli_prints_one_error_for_a_malformed_schema(capsys):
    assert main(["check", "--json-schema", json.dumps({"not": {"type": 5}}), "--text", "{}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structgate check: error: GrammarSyntaxError: type must be")
    assert "/not/type" in err and "Traceback" not in err


def test_check_schema_names_the_pointer():
    with pytest.raises(GrammarSyntaxError, match="format must be a string") as ei:
        check_schema({"properties": {"d": {"type": "string", "format": 5}}})
    assert ei.value.where == "/properties/d/format"
    assert isinstance(ei.value, StructgateError) and isinstance(ei.value, ValueError)


# -- nesting deeper than json's recursion ------------------------------------------------------------
def _nest(kw: str, n: int, leaf=None):
    s = {} if leaf is None else leaf
    for _ in range(n):
        s = {kw: s} if kw != "anyOf" else {kw: [s]}
    return s


def _nest_text(kw: str, n: int) -> str:
    return f'{{"{kw}": ' * n + "{}" + "}" * n


DEEP = [("anyOf", 500), ("properties", 600), ("items", 1200), ("not", 5000),
        ("items", 100_000)]


@pytest.mark.parametrize("kw,n", DEEP, ids=[f"{k}-{n}" for k, n in DEEP])
@pytest.mark.parametrize("form", ["dict", "text"])
def test_too_deep_is_a_typed_limit_error(native, kw, n, form):
    """600 levels raised RecursionError in Constraint.cache_key (json.dumps) or, for a JSON text,
    in Constraint.__post_init__ (json.loads), before the compiler's own guard."""
    if kw == "properties":
        doc = {}
        for _ in range(n):
            doc = {"properties": {"a": doc}}
        value = doc if form == "dict" else '{"properties": {"a": ' * n + "{}" + "}}" * n
    else:
        value = _nest(kw, n) if form == "dict" else (_nest_text(kw, n) if kw != "anyOf"
                                                    else '{"anyOf": [' * n + "{}" + "]}" * n)
    with pytest.raises(CompileLimitError) as ei:
        native.compile(Constraint.json_schema(value))
    assert ei.value.limit_name == "nesting_depth"
    assert "nesting_depth" in str(ei.value)
    with pytest.raises(CompileLimitError):
        native.validate(Constraint.json_schema(value))


def test_too_deep_names_the_depth_and_the_limit():
    import sys

    with pytest.raises(CompileLimitError) as ei:
        Constraint.json_schema(_nest_text("items", 3000))
    assert ei.value.given == "3001 nested arrays/objects" and ei.value.limit == sys.getrecursionlimit()
    with pytest.raises(CompileLimitError) as ei:
        Constraint.json_schema(_nest("not", 3000)).cache_key()
    assert ei.value.given == "3001 nested arrays/objects"
    # the compiler's public functions, called directly, say the same
    with pytest.raises(CompileLimitError, match="nesting_depth"):
        schema_to_regex(_nest_text("items", 3000))
    with pytest.raises(CompileLimitError, match="nesting_depth"):
        check_schema(_nest("not", 700))


def test_a_value_that_is_not_json_is_a_typed_error():
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="not JSON"):
        Constraint.json_schema({"const": {1, 2}}).cache_key()


def test_plugin_paths_turn_too_deep_into_a_request_error():
    """vLLM's engine side builds the constraint from the request's JSON text; the API server side
    from its parameters: both now raise a StructgateError, which the plugin answers with HTTP 400
    (patches.compile_error_reason / the sampling-validate patch), not a RecursionError (a 500)."""
    from types import SimpleNamespace

    from structgate.plugin.bridge import constraint_from_key, constraint_from_params
    from structgate.plugin.patches import compile_error_reason

    with pytest.raises(CompileLimitError) as ei:
        constraint_from_key(SimpleNamespace(name="JSON"), _nest_text("items", 2000))
    assert compile_error_reason(ei.value).startswith("structgate compile error: CompileLimitError(limit)")
    so = SimpleNamespace(json=_nest_text("not", 2000), json_object=None, regex=None, choice=None, grammar=None,
                         structural_tag=None)
    with pytest.raises(CompileLimitError):
        constraint_from_params(so)


def test_cli_prints_one_error_for_a_too_deep_schema(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text(_nest_text("items", 1200))
    assert main(["check", "--json-schema", str(path), "--text", "{}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structgate check: error: CompileLimitError: compile limit exceeded: nesting_depth")
    assert "Traceback" not in err


# -- $ref cycles that never descend into the value ----------------------------------------------------
#: (schema, pointer of the first $ref of the cycle, pieces of the message, a value jsonschema never
#: finishes validating)
CYCLES = [
    ({"$ref": "#"}, "/$ref", ['/$ref "#"'], 1),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
     "/$defs/a/$ref", ['/$defs/a/$ref "#/$defs/b"', '/$defs/b/$ref "#/$defs/a"'], 1),
    ({"allOf": [{"$ref": "#"}]}, "/allOf/0/$ref", ['/allOf/0/$ref "#"'], {}),
    ({"allOf": [{"$ref": "#"}, {"type": "integer"}]}, "/allOf/0/$ref", ['/allOf/0/$ref "#"'], 1),
    ({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}}, "/properties/a/$ref",
     ['/properties/a/$ref "#/properties/a"'], {"a": 1}),
    ({"anyOf": [{"type": "null"}, {"$ref": "#"}]}, "/anyOf/1/$ref", ['/anyOf/1/$ref "#"'], 1),
    ({"not": {"$ref": "#"}}, "/not/$ref", ['/not/$ref "#"'], 1),
    ({"if": {"type": "string"}, "then": {"$ref": "#"}}, "/then/$ref", ['/then/$ref "#"'], "x"),
    ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"oneOf": [{"$ref": "#/$defs/a"}]}},
      "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}},
     "/$defs/a/allOf/0/$ref", ['"#/$defs/b"', '/$defs/b/oneOf/0/$ref "#/$defs/a"'], {"x": 1}),
]


@pytest.mark.parametrize("schema,where,pieces,value", CYCLES, ids=[json.dumps(c[0])[:50] for c in CYCLES])
def test_ref_cycle_without_descent_is_a_typed_error(native, schema, where, pieces, value):
    """Each compiled as "any value" (or failed with a message about left recursion or an
    unsatisfiable schema); jsonschema recurses forever on it (the specification: undefined)."""
    with pytest.raises(RecursionError):
        jsonschema.Draft202012Validator(schema).is_valid(value)
    with pytest.raises(GrammarSyntaxError) as ei:
        native.compile(Constraint.json_schema(schema))
    assert ei.value.message.startswith("$ref cycle")
    assert ei.value.where == where
    for piece in pieces:
        assert piece in ei.value.message
    with pytest.raises(GrammarSyntaxError, match=r"\$ref cycle"):
        schema_to_regex(schema)


def _nested(key: str, n: int, leaf, tag: bool = True):
    """``n`` levels of ``{"v": i, key: ...}`` (``{key: ...}`` without ``tag``) around ``leaf``, keys
    in the schemas' declared order (the native engine writes objects in that order)."""
    v = leaf
    for i in range(n):
        v = {"v": i, key: v} if tag else {key: v}
    return v


def _chain(n: int, last=None):
    d = {"v": 0, "next": last}
    for i in range(1, n):
        d = {"v": i, "next": d}
    return d


def _tree(n: int, leaf_value=0):
    t = {"value": leaf_value}
    for i in range(n):
        t = {"value": i, "children": [t, {"value": -i}] if i % 3 == 0 else [t]}
    return t


def _deep_list(n: int, leaf=0):
    v = [leaf]
    for i in range(n):
        v = [i, v]
    return v


#: (schema, a deep valid value, a deep invalid value): recursion that descends into the value
RECURSIVE = [
    ({"type": "object", "properties": {"v": {"type": "integer"}, "child": {"$ref": "#"}}},
     _nested("child", 60, {"v": 0}), _nested("child", 60, {"v": "x"})),
    ({"type": "object", "properties": {"v": {"type": "integer"},
                                       "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": False}, _chain(60), _chain(60, last=1)),
    ({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}, "$ref": "#/$defs/node"},
     _tree(40), _tree(40, leaf_value="x")),
    ({"anyOf": [{"type": "object", "properties": {"a": {"$ref": "#"}}, "additionalProperties": False},
                {"type": "integer"}]}, _nested("a", 60, 5, tag=False), _nested("a", 60, "s", tag=False)),
    ({"$defs": {"t": {"type": "array", "minItems": 1, "items": False,
                      "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/t"}]}}, "$ref": "#/$defs/t"},
     _deep_list(60), _deep_list(60, leaf="x")),
    # a cycle among definitions the root never evaluates is no error (the metaschema accepts it too)
    ({"type": "string", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "s", 1),
]


@pytest.mark.parametrize("schema,good,bad", RECURSIVE, ids=range(len(RECURSIVE)))
def test_recursion_through_a_descending_keyword_still_compiles(llama3_vocab, native, schema, good, bad):
    v = jsonschema.Draft202012Validator(schema)
    g = native.compile(Constraint.json_schema(schema))
    for value in (good, bad):
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(json.dumps(value))) and m.is_accepting()
        assert ok == v.is_valid(value), json.dumps(value)[:200]
    assert v.is_valid(good) and not v.is_valid(bad)
