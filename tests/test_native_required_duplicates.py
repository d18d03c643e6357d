"""A name listed twice in ``required`` is required once (found by a helper's fuzzing: native
required the key twice, so ``{"a": 1}`` was refused and only duplicate-key JSON accepted). Oracle:
``jsonschema`` (Draft 2020-12) and ``json.loads``."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend

SCHEMAS = [
    {"type": "object", "required": ["a", "a"]},
    {"type": "object", "required": ["a", "a"], "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "a"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "required": ["b", "a", "b"], "additionalProperties": False},
]
TEXTS = ['{"a": 1}', '{"a": 1, "a": 2}', '{}', '{"a": 1, "b": "x"}', '{"b": "x", "a": 1}', '{"b": "x"}']


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_duplicate_required_names(llama3_vocab, schema):
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    accepted_valid = 0
    for text in TEXTS:
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
        dup = len({k for k, _ in pairs}) != len(pairs)
        valid = not dup and jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        if dup:
            assert not ok, (schema, text)  # never a duplicate key
        elif valid:
            accepted_valid += ok
        else:
            assert not ok, (schema, text)
    assert accepted_valid >= 1  # a valid object with the key once is accepted
