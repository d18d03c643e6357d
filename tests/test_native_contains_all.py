"""Several different ``contains`` in merged ``allOf`` members (each with its own ``minContains`` /
``maxContains``): counted together, exactly, where native used to refuse them
(``UnsupportedFeatureError("allOf")``: "keyword 'contains' in several allOf members"). They arise
from users' schemas and from ``oneOf`` expansions (``B_i`` ∧ ``not B_j``: each ``not {items: S}``
is a ``contains: {not: S}``; 11 MaskBench development schemas, e.g. ``Github_trivial---o25751``).

Each element is in exactly one class ``items`` ∧ (``C_i`` or ``not C_i``): an automaton over the
classes counts every ``C_i``. Oracle: ``jsonschema`` on every array of up to 4 elements over a small
alphabet, walked through the native engine's token path."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import jsonschema_disagreements
from structgate import Constraint
from structgate.errors import UnsupportedFeatureError
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"

SCHEMAS = [
    {"type": "array", "allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "null"}}]},
    {"type": "array", "allOf": [{"contains": {"type": "string"}, "minContains": 2}, {"contains": {"type": "null"}}],
     "maxItems": 4},
    {"type": "array", "allOf": [{"contains": {"type": "string"}, "maxContains": 1}, {"contains": {"const": "a"}}]},
    {"type": "array", "allOf": [{"contains": {"type": "string"}, "minContains": 0, "maxContains": 1},
                                {"contains": {"const": "a"}}]},
    {"type": "array", "items": {"type": ["string", "boolean"]},
     "allOf": [{"contains": {"type": "string"}}, {"contains": {"not": {"type": "string"}}}]},
    {"type": "array", "allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "null"}},
                                {"contains": {"type": "boolean"}}]},
    {"type": "array", "allOf": [{"contains": {"enum": ["a", None]}, "minContains": 2},
                                {"contains": {"const": "a"}, "maxContains": 1}]},
    # a oneOf whose branches overlap at []: each branch minus the other is "contains not items"
    {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array", "items": {"enum": ["a", True]}}]},
    {"type": "array", "allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "string"}}]},
]
VALUES = [list(p) for n in range(5) for p in itertools.product(["a", "b", None, True], repeat=n)] + [1, "x", None]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:80] for s in SCHEMAS])
def test_contains_of_several_allof_members_are_exact(backend, llama3_vocab, schema):
    wrong = jsonschema_disagreements(backend, llama3_vocab, schema, VALUES)
    assert not wrong, f"native disagrees with jsonschema on (value, valid): {wrong[:20]}"
    check = jsonschema.Draft202012Validator({"$schema": S, **schema})
    assert 0 < sum(map(check.is_valid, VALUES)) < len(VALUES)


def test_too_many_different_contains_are_a_typed_refusal(backend):
    schema = {"type": "array", "allOf": [{"contains": {"const": i}} for i in range(5)]}
    with pytest.raises(UnsupportedFeatureError) as e:
        backend.compile(Constraint.json_schema(schema))
    assert e.value.feature == "contains" and "5 different contains" in e.value.detail
