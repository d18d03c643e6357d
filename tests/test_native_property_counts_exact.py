"""``minProperties`` / ``maxProperties`` are exact wherever extra keys are possible (or a typed
refusal), walked through the native engine's token path with ``jsonschema`` as the oracle.

Before (a break-it finding): ``{"properties": {"c": {}}, "minProperties": 1}`` with extra keys
allowed rejected ``{"x": 0}``: unless ``maxProperties`` was below the listed count, a minimum took
the compact form "the first optional listed properties are required", and a ``maxProperties`` at
or above the listed count whose counting automaton was estimated over 512 states generated only
the listed keys (``{"additionalProperties": {...}, "maxProperties": 600}`` was ``{}`` alone). The
counting automaton now applies whenever the count is not already implied, its extra members one
counted repeat per number still allowed (no state per member). A minimum that may need two extras
(more than one above the required listed keys, extras possible) is refused: an automaton cannot
tell ``{"x": 1, "x": 2}`` (one property) from two keys.

Instances list the listed keys in declared order, extras after (the key-order policy)."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.errors import UnsupportedFeatureError

S = "https://json-schema.org/draft/2020-12/schema"

SCHEMAS = [
    {"properties": {"c": {}}, "minProperties": 1},  # extras from the additional_properties option
    {"properties": {"c": {}}, "minProperties": 1, "additionalProperties": True},
    {"properties": {"a": {"type": "integer"}, "b": {}}, "minProperties": 1, "additionalProperties": {"type": "null"}},
    {"properties": {"a": {}, "b": {}}, "required": ["a"], "minProperties": 2, "additionalProperties": True},
    {"properties": {"a": {}, "b": {}, "c": {}}, "required": ["b"], "minProperties": 2, "maxProperties": 3,
     "additionalProperties": True},
    {"properties": {"a": {}}, "maxProperties": 2, "additionalProperties": {"type": ["integer", "string"]}},
    {"properties": {"a": {}, "b": {}}, "maxProperties": 1000, "additionalProperties": {"type": "integer"}},
    {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 3},
    {"properties": {"a": {}}, "patternProperties": {"^x": {"type": "integer"}}, "minProperties": 1,
     "additionalProperties": False},
    {"patternProperties": {"^x": {"type": "integer"}}, "maxProperties": 2, "minProperties": 1},
    {"properties": {"a": {}}, "patternProperties": {"^y": {"type": "null"}}, "maxProperties": 700,
     "additionalProperties": {"type": "string"}},
    # no extras possible: the compact form was inexact here too ({"b": 0} rejected)
    {"properties": {"a": {}, "b": {}}, "additionalProperties": False, "minProperties": 1},
    {"properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False, "minProperties": 1,
     "maxProperties": 2},
    {"properties": {"a": {}, "b": {}}, "additionalProperties": False, "minProperties": 2},
    # nested: the inner object counts, the outer lists it
    {"properties": {"o": {"properties": {"c": {}}, "minProperties": 1, "additionalProperties": True}},
     "required": ["o"], "additionalProperties": False},
    {"type": "array", "items": {"properties": {"a": {}}, "maxProperties": 1, "minProperties": 1,
                                "additionalProperties": {"type": "integer"}}},
]
LISTED_POOL = ["a", "b", "c"]
EXTRA_POOL = ["x", "x2", "y"]
VALUES = [0, None, "s"]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return get_backend("native", llama3_vocab, additional_properties=True)


def _objects(schema):
    """Objects in policy order: listed keys (declared order) first, then extras."""
    listed = [k for k in schema.get("properties", {}) if k in LISTED_POOL] or LISTED_POOL[:1]
    for n_l in range(len(listed) + 1):
        for ls in itertools.combinations(listed, n_l):
            for n_x in range(0, 4 - min(n_l, 2)):
                for xs in itertools.combinations(EXTRA_POOL, n_x):
                    keys = list(ls) + list(xs)
                    for vs in itertools.islice(itertools.product(VALUES, repeat=len(keys)), 0, None, 2):
                        yield dict(zip(keys, vs))


def _instances(schema):
    if schema.get("type") == "array":
        inner = schema["items"]
        objs = list(_objects(inner))
        return [[o] for o in objs] + [objs[i:i + 2] for i in range(0, len(objs), 5)] + [[]]
    if "o" in schema.get("properties", {}):
        return [{"o": o} for o in _objects(schema["properties"]["o"])] + [{}, {"o": {}, "x": 1}]
    return list(_objects(schema)) + [1, "s", []]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:70] for s in SCHEMAS])
def test_counts_are_exact_with_extra_keys(backend, llama3_vocab, schema):
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    insts = _instances(schema)
    wrong = [(i, check.is_valid(i)) for i in insts if accepts(g, llama3_vocab, json.dumps(i)) != check.is_valid(i)]
    assert not wrong, f"native disagrees with jsonschema on (instance, valid): {wrong[:12]}"
    n_valid = sum(check.is_valid(i) for i in insts)
    assert 0 < n_valid < len(insts)


@pytest.mark.parametrize("n_max, n_keys", [(600, 599), (600, 600), (600, 601), (5, 5), (5, 6)])
def test_a_large_maximum_keeps_its_extra_keys(backend, llama3_vocab, n_max, n_keys):
    """``maxProperties`` far above the listed keys: the extras are one counted repeat."""
    schema = {"$schema": S, "properties": {"a": {"type": "integer"}}, "maxProperties": n_max,
              "additionalProperties": {"type": "integer"}}
    g = backend.compile(Constraint.json_schema(schema))
    inst = {"a": 0, **{f"k{i}": i for i in range(n_keys - 1)}}
    assert accepts(g, llama3_vocab, json.dumps(inst)) == (n_keys <= n_max)
    inst = {f"k{i}": i for i in range(n_keys)}
    assert accepts(g, llama3_vocab, json.dumps(inst)) == (n_keys <= n_max)


@pytest.mark.parametrize("schema", [
    {"properties": {"c": {}}, "minProperties": 2, "additionalProperties": True},
    {"properties": {"a": {}, "b": {}}, "required": ["a"], "minProperties": 3, "additionalProperties": True},
    {"patternProperties": {"^x": {}}, "minProperties": 2},
    {"properties": {"o": {"properties": {"a": {}, "b": {}}, "minProperties": 2,
                          "additionalProperties": {"type": "integer"}}}},
])
def test_a_minimum_that_may_need_two_extra_keys_is_refused(backend, schema):
    with pytest.raises(UnsupportedFeatureError) as e:
        backend.compile(Constraint.json_schema(schema))
    assert e.value.feature == "minProperties" and e.value.where.endswith("/minProperties"), e.value.where


def test_minimum_one_in_any_order_and_in_regex_mode(llama3_vocab):
    """``minProperties: 1`` with nothing required is the plain object form without its empty
    object (linear text, so the flat regex of 30 optional keys stays small), in every key order
    under ``property_order="any"``, and in ``schema_to_regex``."""
    import re

    from structgate.backends.interface import CompileOptions
    from structgate.native.json_schema import schema_to_regex

    schema = {"$schema": S, "properties": {"a": {"type": "integer"}, "b": {}}, "minProperties": 1,
              "additionalProperties": {"type": "integer"}}
    check = jsonschema.Draft202012Validator(schema)
    insts = [{}, {"a": 1}, {"b": "s"}, {"x": 2}, {"x": "s"}, {"b": 1, "a": 2}, {"x": 1, "a": 2}, {"a": "s"},
             {"a": 1, "b": 2, "x": 3}, {"y": 1, "b": 2}, 1, []]
    g = get_backend("native", llama3_vocab, property_order="any").compile(Constraint.json_schema(schema))
    rx = re.compile(schema_to_regex(schema, CompileOptions(additional_properties=True)))
    for i in insts:
        assert accepts(g, llama3_vocab, json.dumps(i)) == check.is_valid(i), i
    for i in insts[:5] + insts[8:9]:  # (declared order in regex mode)
        assert (rx.fullmatch(json.dumps(i)) is not None) == check.is_valid(i), i
    wide = {"properties": {f"k{i}": {"type": "integer"} for i in range(30)}, "minProperties": 1,
            "additionalProperties": {"type": "integer"}}
    assert len(schema_to_regex(wide, CompileOptions(additional_properties=True))) < 100_000
