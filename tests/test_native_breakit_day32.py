"""Break-it findings of day 32 (the ``not``/``oneOf``/``contains``/``allOf``/``pattern``/
``minProperties`` work of 2026-12-07), each walked through the native engine's token path with
``jsonschema`` as the oracle: native must never accept a text ``jsonschema`` calls invalid."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


def _unsound(backend, vocab, schema, texts):
    """The texts of ``texts`` native accepts and ``jsonschema`` rejects."""
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    return [t for t in texts if accepts(g, vocab, t) and not check.is_valid(json.loads(t))]


# -- not {type: integer}: a decimal below 1 that rounds to the double 1.0 ---------------------------
# 0.99999999999999999 is 1.0 to Python's json (an integer to jsonschema); the fractional subset
# wrote up to 30 fraction digits below 1, so 16 and more nines (and 0.99999999999999995...) were
# accepted where integers are excluded.
NEAR_ONE = ["0.99999999999999999", "-0.99999999999999999", "0.99999999999999995", "0.999999999999999999999999999999",
            "0.9999999999999999999999999999", "-0.999999999999999999999999999991"]
NOT_INTEGER = [
    {"not": {"type": "integer"}},
    {"type": "number", "not": {"type": "integer"}, "exclusiveMaximum": 3},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"type": "number", "if": {"type": "integer"}, "then": {"minimum": 5}},
]


@pytest.mark.parametrize("schema", NOT_INTEGER, ids=[json.dumps(s)[:60] for s in NOT_INTEGER])
def test_not_integer_never_writes_a_decimal_that_rounds_to_one(backend, llama3_vocab, schema):
    assert _unsound(backend, llama3_vocab, schema, NEAR_ONE) == []
    # still written next to 1: the fractions that stay off the integers
    full = {"$schema": S, **schema}
    g = backend.compile(Constraint.json_schema(full))
    for t in ["0.999999999999999", "0.9999999999999989", "0.99999999999999899999", "-0.5", "0.000000000000000000000000000001"]:
        assert not float(t).is_integer()
        assert accepts(g, llama3_vocab, t), t


def test_not_integer_near_one_sweep(backend, llama3_vocab):
    """Every decimal below 1 of 15 to 30 fraction digits led by nines: none jsonschema reads as 1.0 is
    accepted."""
    texts = [sign + "0." + "9" * k + tail for sign in ("", "-") for k in range(14, 30) for tail in "123456789"]
    assert any(float(t).is_integer() for t in texts)
    assert _unsound(backend, llama3_vocab, {"type": "number", "not": {"type": "integer"}}, texts) == []
