"""``CompileOptions.property_order``: listed properties in any order (native engine, grammar mode).

Oracle: ``jsonschema`` (Draft 2020-12) on every document built from every ordered subset of the
listed members, with and without extra members between them, walked token by token through the
compiled matcher (real Llama 3 tokenizer). ``declared`` (the default) keeps the schema's order;
objects over ``max_any_order_properties`` keep it too.
"""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.errors import InvalidConstraintError
from _matching import accepts as _accepts

VALUES = {"a": 1, "b": "x", "c": True, "d": None, "e": [1]}
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "required": ["b"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                      "c": {"type": "boolean"}}, "required": ["a", "c"],
     "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                      "c": {"type": "boolean"}, "d": {"type": "null"}}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "additionalProperties": {"type": "array"}},
    # nested: the inner object is itself any-order
    {"type": "object", "properties": {"c": {"type": "boolean"}, "a": {
        "type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}},
        "required": ["a", "b"]}}, "required": ["a", "c"]},
]


def _documents(schema):
    """Every ordering of every subset of the listed keys (nested objects likewise), plus one
    unlisted key ``e`` placed at each position."""
    keys = list(schema["properties"])
    for r in range(len(keys) + 1):
        for order in itertools.permutations(keys, r):
            for pos in [None] + list(range(r + 1)):
                ks = list(order)
                if pos is not None:
                    ks.insert(pos, "e")
                for inner in _inner_values(schema, ks):
                    yield inner


def _inner_values(schema, ks):
    sub = schema["properties"].get("a", {})
    if sub.get("type") == "object" and "a" in ks:
        for inner_keys in itertools.permutations(["a", "b"]):
            inner = {k: VALUES[k] for k in inner_keys}
            yield {k: (inner if k == "a" else VALUES[k]) for k in ks}
        yield {k: ({"a": 1} if k == "a" else VALUES[k]) for k in ks}
    else:
        yield {k: VALUES[k] for k in ks}


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_any_order_is_exact(i, llama3_vocab):
    schema = SCHEMAS[i]
    g = get_backend("native", llama3_vocab, additional_properties=True, property_order="any").compile(
        Constraint("json_schema", schema))
    val = jsonschema.Draft202012Validator(schema)
    n_ok = 0
    for doc in _documents(schema):
        text = json.dumps(doc)
        want = val.is_valid(doc)
        assert _accepts(g, llama3_vocab, text) == want, (text, want)
        n_ok += want
    assert n_ok > 1


def test_declared_order_is_the_default_and_large_objects_keep_it(llama3_vocab):
    schema = SCHEMAS[1]
    g = get_backend("native", llama3_vocab, property_order="declared").compile(Constraint("json_schema", schema))
    assert _accepts(g, llama3_vocab, json.dumps({"a": 1, "c": True}))
    assert not _accepts(g, llama3_vocab, json.dumps({"c": True, "a": 1}))
    g = get_backend("native", llama3_vocab).compile(Constraint("json_schema", schema))  # the default
    assert not _accepts(g, llama3_vocab, json.dumps({"c": True, "a": 1}))
    g = get_backend("native", llama3_vocab, property_order="any", max_any_order_properties=2).compile(
        Constraint("json_schema", schema))
    assert not _accepts(g, llama3_vocab, json.dumps({"c": True, "a": 1}))
    g = get_backend("native", llama3_vocab, property_order="any").compile(Constraint("json_schema", schema))
    assert _accepts(g, llama3_vocab, json.dumps({"c": True, "a": 1}))
    # each listed key once: a repeated key is not generated
    assert not _accepts(g, llama3_vocab, '{"c": true, "a": 1, "c": false}')
    assert not _accepts(g, llama3_vocab, '{"a": 1, "a": 2, "c": true}')


def test_property_order_option_is_checked():
    with pytest.raises(InvalidConstraintError, match="property_order"):
        CompileOptions(property_order="sorted")


def test_dependencies_with_an_unlisted_trigger_do_not_require_its_dependents(llama3_vocab):
    """``dependencies: {shape: [r, c]}`` on an object that does not list ``shape``: ``r`` and ``c``
    stay optional without ``shape`` (MaskBench ``Glaiveai2K---calculate_area_3c2d01ed``:
    ``{"length": .., "width": .., "radius": ..}`` was rejected), and with it all three are there
    (the dependency written exactly: an object without the trigger, or with it and its
    dependents). Every accepted document is valid (jsonschema), on all orders and subsets."""
    schema = {"type": "object", "properties": {"x": {"type": "integer"}},
              "dependencies": {"shape": ["r", "c"]}}
    g = get_backend("native", llama3_vocab, additional_properties=True).compile(Constraint("json_schema", schema))
    val = jsonschema.Draft7Validator(schema)
    accepted = 0
    for r in range(5):
        for ks in itertools.permutations(["x", "shape", "r", "c"], r):
            doc = {k: 1 for k in ks}
            ok = _accepts(g, llama3_vocab, json.dumps(doc))
            assert not ok or val.is_valid(doc), doc
            # the declared-order policy: the listed x first; without the trigger, extras in any order
            if val.is_valid(doc) and "shape" not in doc and ("x" not in doc or ks[0] == "x"):
                assert ok, doc
            accepted += ok
    assert _accepts(g, llama3_vocab, '{"x": 1}') and _accepts(g, llama3_vocab, '{"x": 2, "r": 1}')
    # the trigger and its dependents (required keys after the listed ones, in the dependency's order)
    assert _accepts(g, llama3_vocab, '{"shape": 1, "r": 1, "c": 1}')
    assert _accepts(g, llama3_vocab, '{"x": 1, "shape": 1, "r": 1, "c": 1}')
    assert not _accepts(g, llama3_vocab, '{"shape": 1, "r": 1}')
    assert accepted >= 10  # x alone, r and c in any order after it, the trigger with both, ...
