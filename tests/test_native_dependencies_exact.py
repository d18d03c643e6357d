"""Dependencies written exactly: ``dependentSchemas``, ``dependentRequired`` and draft 4-7
``dependencies`` (a schema or a list of names per key) as ``anyOf [an object without the key, an
object with it and what depends on it]`` beside the other keywords.

``dependentSchemas`` and schema-valued ``dependencies`` were ``UnsupportedFeatureError`` (15
MaskBench development schemas); lists of names were a sound subset (the dependents required
whenever the trigger could appear, so ``{}`` was rejected by ``dependentRequired: {b: [a]}`` with
``a`` and ``b`` listed). Oracle: ``jsonschema`` on every object of up to three keys in declared
order, and on values of other types."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import UnsupportedFeatureError
from structgate.native.backend import NativeBackend

D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS = [
    {"$schema": D2020, "type": "object", "properties": {"a": {}, "b": {}, "c": {}},
     "dependentSchemas": {"a": {"required": ["b"]}, "c": {"properties": {"b": {"type": "integer"}}}}},
    {"$schema": D7, "properties": {"a": {"type": "integer"}, "b": {}},
     "dependencies": {"a": {"properties": {"b": {"maximum": 3}}}, "b": ["a"]}},
    {"$schema": D7, "dependencies": {"a": False, "b": True}},
    {"$schema": D2020, "properties": {"a": {}, "b": {}, "c": {}}, "dependentRequired": {"b": ["a"], "c": ["a", "b"]}},
    # a dependent schema that is itself an object with a dependency, and one reached through allOf
    {"$schema": D2020, "properties": {"a": {}, "b": {}, "c": {}},
     "allOf": [{"dependentSchemas": {"a": {"dependentRequired": {"b": ["c"]}}}}]},
]
KEYS = ["a", "b", "c"]
VALUES = [1, 5, "x", None]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab, additional_properties=True)


def _texts() -> list[str]:
    out = ["1", '"x"', "null", "[1]"]
    for r in range(4):
        for ks in itertools.combinations(KEYS, r):  # (declared order: a, b, c)
            out += [json.dumps(dict(zip(ks, vs))) for vs in itertools.product(VALUES, repeat=r)]
    return out


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[60:130] for s in SCHEMAS])
def test_dependencies_match_jsonschema(backend, llama3_vocab, schema):
    g = backend.compile(Constraint.json_schema(schema))
    check = jsonschema.validators.validator_for(schema)(schema)
    texts = _texts()
    wrong = [(t, check.is_valid(json.loads(t))) for t in texts
             if accepts(g, llama3_vocab, t) != check.is_valid(json.loads(t))]
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"
    assert 0 < sum(check.is_valid(json.loads(t)) for t in texts) < len(texts)


def test_an_object_without_the_trigger_needs_no_dependents(backend, llama3_vocab):
    """The old sound subset made ``a`` required wherever ``b`` could appear: ``{}`` was rejected."""
    g = backend.compile(Constraint.json_schema({"properties": {"a": {}, "b": {}}, "dependentRequired": {"b": ["a"]}}))
    assert accepts(g, llama3_vocab, "{}") and accepts(g, llama3_vocab, '{"a": 1}')
    assert accepts(g, llama3_vocab, '{"a": 1, "b": 2}') and not accepts(g, llama3_vocab, '{"b": 2}')


@pytest.mark.parametrize("schema", [
    {"properties": {"a": {}}, "dependentRequired": {"a": ["a"]}},
    {"dependentRequired": {"a": ["a"]}},
    {"$schema": D7, "properties": {"c": {"type": "null"}}, "dependencies": {"b": ["b", "b"], "c": []}},
    # past MAX_DEPENDENCIES: the object emitter's subset reads a key among its own dependents alike
    {"properties": {f"k{i}": {} for i in range(10)}, "dependentRequired": {f"k{i}": [f"k{i}"] for i in range(10)}},
])
def test_a_key_among_its_own_dependents_asks_nothing(backend, llama3_vocab, schema):
    """A break-it finding: ``{a: [a]}`` made ``a`` required where listed (``{}`` rejected) and
    never generated where not (``{"a": 0}`` rejected)."""
    g = backend.compile(Constraint.json_schema(schema))
    check = jsonschema.validators.validator_for(schema)(schema)
    for doc in ({}, {"a": 0}, {"b": 0}, {"c": None}, {"k0": 1}, {"k0": 1, "k5": 2}):
        assert accepts(g, llama3_vocab, json.dumps(doc)) == check.is_valid(doc), doc


@pytest.mark.parametrize("kw", ["dependentSchemas", "dependencies"])
def test_an_error_inside_a_dependent_schema_names_its_own_pointer(backend, kw):
    schema = {kw: {"a": {"properties": {"x": {"pattern": "(?<=a)b"}}}}}
    with pytest.raises(UnsupportedFeatureError) as e:
        backend.compile(Constraint.json_schema(schema))
    assert e.value.where == f"/{kw}/a/properties/x/pattern"


def test_too_many_dependent_schemas_is_a_typed_refusal(backend):
    schema = {"type": "object", "dependentSchemas": {f"k{i}": {"required": ["z"]} for i in range(9)}}
    with pytest.raises(UnsupportedFeatureError) as e:
        backend.compile(Constraint.json_schema(schema))
    assert e.value.feature == "dependentSchemas" and e.value.where == "/dependentSchemas"


def test_many_lists_of_names_keep_the_sound_subset(backend, llama3_vocab):
    """Past ``MAX_DEPENDENCIES`` the lists of names are the object emitter's sound subset again:
    nothing invalid is accepted."""
    props = {f"k{i}": {} for i in range(10)}
    schema = {"properties": {**props, "z": {}}, "dependentRequired": {f"k{i}": ["z"] for i in range(10)}}
    g = backend.compile(Constraint.json_schema(schema))
    check = jsonschema.Draft202012Validator(schema)
    for doc in ({}, {"k0": 1}, {"k0": 1, "z": 1}, {"z": 1}, {"k3": 1, "k7": 1, "z": 1}):
        assert not (accepts(g, llama3_vocab, json.dumps(doc)) and not check.is_valid(doc)), doc
    assert accepts(g, llama3_vocab, '{"k0": 1, "z": 1}')
