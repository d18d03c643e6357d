"""Recursion through the native backend (schema_to_grammar + the pushdown engine), token by token
with the real Llama 3 vocabulary: the issue's acceptance shapes, jsonschema as the oracle."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate.backends.interface import Constraint
from test_field_cases import walk
from test_json_schema_grammar import LIST, TREE, _at_depth, _chain, _tree, nest


@pytest.fixture(scope="module")
def native(llama3_vocab):
    from structgate.native.backend import NativeBackend

    return NativeBackend(llama3_vocab)


def _check(native, vocab, schema, good, bad):
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid(good) and not v.is_valid(bad)
    g = native.compile(Constraint.json_schema(schema))
    text = json.dumps(good)
    assert walk(g, vocab, text)[:2] == (True, True)
    assert walk(g, vocab, json.dumps(good, separators=(",", ":")))[:2] == (True, True)
    for cut in (len(text) - 1, len(text) // 2):  # truncated: a live prefix, never complete
        ok, eos, more = walk(g, vocab, text[:cut])
        assert ok and not eos and more
    assert walk(g, vocab, json.dumps(bad))[:2] != (True, True)


def test_tree_30_deep(native, llama3_vocab):
    t = _tree(30)
    bad = json.loads(json.dumps(t))
    node = bad
    for _ in range(19):
        node = node["children"][0]
    node["value"] = "x"  # a wrong type at depth 20
    _check(native, llama3_vocab, TREE, t, bad)


def test_linked_list_50_long(native, llama3_vocab):
    d = _chain(50)
    bad = json.loads(json.dumps(d))
    _at_depth(bad, ["next"] * 20)["v"] = [1]
    _check(native, llama3_vocab, LIST, d, bad)


@pytest.mark.parametrize("schema", [{"type": "object"}, {}], ids=["object", "empty"])
def test_values_30_deep(native, llama3_vocab, schema):
    good = {"a": [nest(30)]}
    bad = json.loads(json.dumps(good))
    _check(native, llama3_vocab, {**schema, "type": "object", "properties": {"a": {"type": "array"}}},
           good, {"a": {"k": bad}})
    g = native.compile(Constraint.json_schema(schema))
    assert walk(g, llama3_vocab, json.dumps(good))[:2] == (True, True)
    assert walk(g, llama3_vocab, json.dumps(good)[:-1])[:2] == (True, False)
