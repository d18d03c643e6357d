"""A string or key of a schema given as a Python value may hold a high surrogate followed by a low
one (``"\\ud83d\\ude00"`` written in Python source: two lone surrogates). No JSON text decodes to
that string: a decoder joins the escaped pair into one character (U+1F600). Native escaped each
surrogate on its own, so the text ``"\\ud83d\\ude00"`` was accepted for a value it is not equal to
(found by a helper). Such a value or key is now left out (a typed empty language where nothing
else remains). Oracle: ``json.loads`` + ``jsonschema``."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import InvalidConstraintError

PAIR = "\ud83d\ude00"
TEXTS = ['"\\ud83d\\ude00"', '"\U0001F600"', '"a"', '{"\\ud83d\\ude00": 1}', '{"\U0001F600": 1}', '{"b": 1}',
         '["\\ud83d\\ude00"]', '"\\ud83d"']

SCHEMAS = [
    {"enum": [PAIR, "a"]},
    {"enum": [[PAIR], "a", {PAIR: 1}]},
    {"type": "object", "properties": {PAIR: {"type": "integer"}, "b": {}}, "additionalProperties": False},
    {"const": "\ud83d"},  # a lone surrogate alone is fine: its escape decodes to it
]
EMPTY = [{"const": PAIR}, {"enum": [{PAIR: 1}]},
         {"type": "object", "properties": {PAIR: {"type": "integer"}}, "required": [PAIR]}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_split_pair_values_are_left_out(llama3_vocab, schema):
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    accepted = 0
    for text in TEXTS:
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        assert not ok or v.is_valid(json.loads(text)), (schema, text)
        accepted += ok
    assert accepted >= 1


@pytest.mark.parametrize("schema", EMPTY, ids=range(len(EMPTY)))
def test_only_split_pair_values_is_empty(llama3_vocab, schema):
    with pytest.raises(InvalidConstraintError, match="matches nothing"):
        get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
