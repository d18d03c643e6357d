"""Values nested through keywords that write their sub-value twice (array ``items`` as
``X(,X)*``, ``additionalProperties`` and ``patternProperties`` values) compile at any depth: a long
value text becomes a rule, so the text no longer doubles per level (found by a helper: arrays of
arrays 20 deep, or objects of objects through ``additionalProperties``, hit ``max_regex_size`` at
about 6 MB). Oracle: ``jsonschema`` on valid documents and on ones with a wrong leaf type."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend


def _nest(kind: str, depth: int) -> dict:
    s: dict = {"type": "integer", "minimum": 0}
    for _ in range(depth):
        if kind == "items":
            s = {"type": "array", "items": s, "minItems": 1}
        elif kind == "additionalProperties":
            s = {"type": "object", "additionalProperties": s, "minProperties": 1}
        else:
            s = {"type": "object", "patternProperties": {"^k": s}, "additionalProperties": False}
    return s


def _doc(kind: str, depth: int, leaf):
    """A document ``depth`` deep: a spine of one-member containers with one level of two members
    (so the repeated-value part ``,X`` is used too)."""
    d = leaf
    for i in range(depth):
        two = i == depth // 2
        if kind == "items":
            d = [d, d] if two else [d]
        else:
            d = {"k": d, "k2": d} if two else {"k": d}
    return d


@pytest.mark.parametrize("kind", ["items", "additionalProperties", "patternProperties"])
@pytest.mark.parametrize("depth", [20, 40])
def test_nesting_through_repeated_values(llama3_vocab, kind, depth):
    schema = _nest(kind, depth)
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    for leaf in (3, -3, "x", 1.5, None):
        text = json.dumps(_doc(kind, depth, leaf))
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        assert ok == v.is_valid(json.loads(text)), (kind, depth, leaf)
