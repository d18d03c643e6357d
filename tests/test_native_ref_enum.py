"""A ``$ref``'d ``enum`` used at many places, with and without siblings: each place accepts
exactly the values ``jsonschema`` accepts there (the values of one merged schema are checked once
per compile and reused; a place with other siblings is checked on its own)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend

VALUES = [f"v{i}" for i in range(120)] + ["abcdef", "ab", 7, 3.5, None, True, {"k": 1}, [1, 2]]
SCHEMA = {
    "$defs": {"e": {"enum": VALUES}},
    "type": "object",
    "properties": {
        "a": {"$ref": "#/$defs/e"},
        "b": {"$ref": "#/$defs/e", "type": "string"},
        "c": {"$ref": "#/$defs/e", "maxLength": 2},
        "d": {"$ref": "#/$defs/e", "type": "string"},  # the same as "b" at another place
        "e": {"$ref": "#/$defs/e", "type": ["integer", "null"]},
    },
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def grammar(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_cache_size=0).compile(Constraint.json_schema(SCHEMA))


@pytest.mark.parametrize("key", list(SCHEMA["properties"]))
def test_each_place_accepts_what_jsonschema_accepts(key, grammar, llama3_vocab):
    val = jsonschema.Draft202012Validator(SCHEMA)
    n_ok = 0
    for v in VALUES + ["v999", 8, "a"]:
        doc = {key: v}
        m = grammar.matcher()
        got = m.advance(llama3_vocab.encode(json.dumps(doc))) and m.is_accepting()
        assert got == val.is_valid(doc), (key, v)
        n_ok += got
    assert n_ok
